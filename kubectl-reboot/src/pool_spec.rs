//! A RebootPool's spec as `status` and `plan` read it: its budget and its selector in words.
//! Pure: what the spec cannot mean is said, never guessed.

use common::{
    MaxUnavailable,
    pool::{RebootPool, RebootPoolSpec},
};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::core::Selector;

/// The zone label when the spec names none.
pub const ZONE_LABEL: &str = "topology.kubernetes.io/zone";

/// A RebootPool's budget as its spec gives it: `maxUnavailable` (default 1) and
/// `maxUnavailablePerZone`, each read or refused with why.
#[derive(Debug, Clone, PartialEq)]
pub struct SpecBudget {
    pub max_unavailable: Result<MaxUnavailable, String>,
    pub per_zone: Option<Result<MaxUnavailable, String>>,
    /// `zoneLabel`, or its default.
    pub zone_label: String,
}

pub fn budget(spec: &RebootPoolSpec) -> SpecBudget {
    SpecBudget {
        max_unavailable: spec
            .max_unavailable
            .as_ref()
            .map_or(Ok(MaxUnavailable::Count(1)), |v| limit("maxUnavailable", v)),
        per_zone: spec
            .max_unavailable_per_zone
            .as_ref()
            .map(|v| limit("maxUnavailablePerZone", v)),
        zone_label: zone_label(spec),
    }
}

pub(crate) fn zone_label(spec: &RebootPoolSpec) -> String {
    spec.zone_label
        .clone()
        .filter(|l| !l.is_empty())
        .unwrap_or_else(|| ZONE_LABEL.to_owned())
}

/// A number of nodes or a percentage, as a budget: read as the controller reads it.
pub(crate) fn limit(field: &str, value: &IntOrString) -> Result<MaxUnavailable, String> {
    MaxUnavailable::from_spec(value).map_err(|e| {
        let shown = match value {
            IntOrString::Int(n) => n.to_string(),
            IntOrString::String(text) => format!("{text:?}"),
        };
        format!("{field} {shown} cannot be read: {e}")
    })
}

/// The pool's `nodeSelector` as a label selector string (empty: every node).
pub fn selector(pool: &RebootPool) -> String {
    match Selector::try_from(pool.spec.node_selector.clone()) {
        Ok(selector) => selector.to_string(),
        Err(e) => format!("(cannot be read, so it holds every node: {e})"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(value: serde_json::Value) -> RebootPoolSpec {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn the_budget_is_the_specs_or_one_node() {
        let b = budget(&spec(json!({})));
        assert_eq!(b.max_unavailable, Ok(MaxUnavailable::Count(1)));
        assert_eq!((b.per_zone, b.zone_label.as_str()), (None, ZONE_LABEL));
        let b = budget(&spec(json!({"maxUnavailable": "50%",
            "maxUnavailablePerZone": 1, "zoneLabel": "rack"})));
        assert_eq!(b.max_unavailable, Ok(MaxUnavailable::Percent(50)));
        assert_eq!(b.per_zone, Some(Ok(MaxUnavailable::Count(1))));
        assert_eq!(b.zone_label, "rack");
        assert_eq!(
            budget(&spec(json!({"maxUnavailable": 0}))).max_unavailable,
            Ok(MaxUnavailable::Count(0)),
            "0 holds every reboot, as the spec says"
        );
        let bad = budget(&spec(json!({"maxUnavailable": "half"}))).max_unavailable;
        assert!(bad.unwrap_err().contains("maxUnavailable \"half\""));
    }

    #[test]
    fn the_selector_reads_as_kubectl_writes_it() {
        let pool = RebootPool::new(
            "gpu",
            spec(json!({"nodeSelector": {"matchLabels": {"pool": "gpu"}}})),
        );
        assert_eq!(selector(&pool), "pool=gpu");
    }
}
