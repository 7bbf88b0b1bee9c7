//! A RebootPool's spec as `status` and `plan` read it: its budget, its selector in words, and
//! the settings of its plan. Pure: what the spec cannot mean is said, never guessed.

use crate::plan::Settings;
use common::{
    MaxUnavailable,
    pool::{RebootPool, RebootPoolSpec},
};
use controller_core::window::Windows;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::core::Selector;
use std::time::Duration;

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
            .map_or(Ok(MaxUnavailable::Count(1)), |v| {
                limit("maxUnavailable", v, 0)
            }),
        per_zone: spec
            .max_unavailable_per_zone
            .as_ref()
            .map(|v| limit("maxUnavailablePerZone", v, 0)),
        zone_label: zone_label(spec),
    }
}

fn zone_label(spec: &RebootPoolSpec) -> String {
    spec.zone_label
        .clone()
        .filter(|l| !l.is_empty())
        .unwrap_or_else(|| ZONE_LABEL.to_owned())
}

/// A number of nodes (at least `least`) or a percentage, as a budget.
fn limit(field: &str, value: &IntOrString, least: i32) -> Result<MaxUnavailable, String> {
    match value {
        IntOrString::Int(n) if *n >= least => Ok(MaxUnavailable::Count(n.unsigned_abs())),
        IntOrString::Int(n) => Err(format!(
            "{field} {n} is below {least}: give a number of nodes or a percentage such as \"25%\""
        )),
        IntOrString::String(text) => text
            .parse()
            .map_err(|e| format!("{field} {text:?} cannot be read: {e}")),
    }
}

/// The pool's `nodeSelector` as a label selector string (empty: every node).
pub fn selector(pool: &RebootPool) -> String {
    match Selector::try_from(pool.spec.node_selector.clone()) {
        Ok(selector) => selector.to_string(),
        Err(e) => format!("(cannot be read, so it holds every node: {e})"),
    }
}

/// The settings `plan` takes from the spec (`reboot`, a reboot's length, is the plugin's).
pub fn plan_settings(spec: &RebootPoolSpec, reboot: Option<Duration>) -> Result<Settings, String> {
    let windows = spec
        .windows
        .iter()
        .map(|w| w.parse().map_err(|e| format!("its window {w:?}: {e}")))
        .collect::<Result<Vec<_>, String>>()?;
    let budget = budget(spec);
    Ok(Settings {
        windows: Windows(windows),
        zone_label: budget.zone_label,
        zone_budget: budget.per_zone.transpose()?,
        concurrency: spec
            .concurrency
            .as_ref()
            .map(|c| limit("concurrency", c, 1))
            .transpose()?,
        min_ready: Duration::from_secs(spec.min_ready_seconds.unwrap_or(0).max(0).unsigned_abs()),
        reboot,
    })
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
    fn the_plan_takes_the_specs_settings() {
        let s = plan_settings(
            &spec(json!({"windows": ["Sat 01:00-05:00 UTC"], "concurrency": 2,
                "maxUnavailablePerZone": "50%", "minReadySeconds": 30})),
            None,
        )
        .unwrap();
        assert_eq!(s.windows.0.len(), 1);
        assert_eq!(s.concurrency, Some(MaxUnavailable::Count(2)));
        assert_eq!(s.zone_budget, Some(MaxUnavailable::Percent(50)));
        assert_eq!(s.min_ready, Duration::from_secs(30));
        let err = plan_settings(&spec(json!({"windows": ["someday"]})), None).unwrap_err();
        assert!(err.contains("\"someday\""), "{err}");
        let err = plan_settings(&spec(json!({"concurrency": 0})), None).unwrap_err();
        assert!(err.contains("concurrency 0"), "{err}");
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
