//! The slot ledger's home and format, shared by the controller that writes it and by every
//! tool that reads it (tests, the benchmark, the demo): one Lease per pool whose annotation
//! holds `{node: {grant, grantedAt, nodeVersion, zone}}`.
//!
//! A grant id names the ledger that made it (`<namespace>/<ledger name>/<unique part>`), so
//! that a node relabelled into another pool mid-reboot says whose grant it carries: only the
//! controller of that ledger drives it. Ids written by earlier versions name no ledger.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use thiserror::Error;

/// The namespace the manifests install the operator in.
pub const OPERATOR_NAMESPACE: &str = "node-reboot-operator";
/// The default name of the ledger Lease (`--ledger-name`).
pub const LEDGER_NAME: &str = "node-reboot-operator-slots";
/// The Lease annotation that holds the slots as JSON.
pub const SLOTS_ANNOTATION: &str = "node-reboot-operator/slots";

/// The Lease annotation that holds the ledger's format version (see [`crate::format`]),
/// written with every write of the slots. A ledger without it was written before versions
/// existed and reads as version 1.
pub const FORMAT_ANNOTATION: &str = "node-reboot-operator/format";

/// The ledger's format version as its Lease's annotations say (see [`crate::format::check`]).
pub fn format_of(
    annotations: Option<&BTreeMap<String, String>>,
) -> Result<u32, crate::format::UnknownFormat> {
    crate::format::check(
        annotations
            .and_then(|a| a.get(FORMAT_ANNOTATION))
            .map(String::as_str),
    )
}

/// The Lease annotation that pauses new grants in the pool: `reboot-paused=true`
/// (`kubectl annotate lease -n node-reboot-operator node-reboot-operator-slots
/// reboot-paused=true`). Reboots under way finish.
///
/// Fail-safe (typed during an incident): any value but `false` pauses, `True`, `yes`, `1` and
/// an empty value included. Only an absent annotation or `false` (surrounding blanks and case
/// aside: `False` says what `false` says) lets new reboots start.
pub const PAUSED_ANNOTATION: &str = "reboot-paused";
/// Set with [`PAUSED_ANNOTATION`] by a controller that created the ledger paused because it was
/// missing while nodes carried its grants: only that pause, never one typed by hand, is lifted
/// by a RebootPool's `spec.resumedAt`.
pub const RECREATED_PAUSED_ANNOTATION: &str = "node-reboot-operator/recreated-paused";

/// How the ledger's `reboot-paused` annotation reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pause {
    /// Absent, or `false`: new reboots may start.
    Off,
    /// `true`: paused.
    On,
    /// Any other value, read as paused (fail-safe); the value as found, for the Warning.
    Unexpected(String),
}

impl Pause {
    /// The pause the ledger Lease's annotations say.
    pub fn of(annotations: Option<&BTreeMap<String, String>>) -> Self {
        let Some(value) = annotations.and_then(|a| a.get(PAUSED_ANNOTATION)) else {
            return Self::Off;
        };
        match value.trim() {
            "true" => Self::On,
            "false" => Self::Off,
            other if other.eq_ignore_ascii_case("false") => Self::Off,
            _ => Self::Unexpected(value.clone()),
        }
    }

    pub fn pauses(&self) -> bool {
        !matches!(self, Self::Off)
    }

    /// The value, when it is not one the operator expects (`true`, `false`, absent), read as
    /// paused.
    pub fn unexpected(&self) -> Option<&str> {
        match self {
            Self::Unexpected(value) => Some(value),
            _ => None,
        }
    }
}

/// Whether a ledger Lease's annotations pause the pool (see [`Pause::of`]).
pub fn is_paused(annotations: Option<&BTreeMap<String, String>>) -> bool {
    Pause::of(annotations).pauses()
}

/// One granted slot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Slot {
    /// Unique id of this grant; the node carries it in `reboot-grant` once claimed.
    pub grant: String,
    /// RFC 3339 time of the grant by the granting replica's clock, for durations only: a
    /// replica with another clock counts from no earlier than when it first saw the grant.
    pub granted_at: String,
    /// The node's resourceVersion the grant was decided on. The claim of the grant tests it,
    /// so once the node has changed the grant can never be claimed, and an unclaimed grant
    /// whose node moved past this version can be released safely.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_version: Option<String>,
    /// The zone (`--zone-label`) the node was in when the slot was granted: the slot counts
    /// against that zone until it is released, whatever the label says meanwhile. Absent when
    /// not known (a slot written by an earlier version, one adopted from a node's grant, or a
    /// node without a zone label): such a slot counts against every zone (fail-safe).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone: Option<String>,
}

/// The identity of a ledger in grant ids: `<namespace>/<name>` of its Lease.
pub fn ledger_id(namespace: &str, name: &str) -> String {
    format!("{namespace}/{name}")
}

/// A grant id of the ledger `ledger` (see [`ledger_id`]): `<ledger>/<unique>`.
pub fn grant_id(ledger: &str, unique: &str) -> String {
    format!("{ledger}/{unique}")
}

/// The ledger a grant id names; `None` for an id written by an earlier version (no `/`).
/// Namespaces, Lease names and the unique part hold no `/`, so the last one splits them.
pub fn ledger_of_grant(grant: &str) -> Option<&str> {
    grant.rsplit_once('/').map(|(ledger, _)| ledger)
}

/// Whether `grant` (a node's, if any) is one of the ledger `ledger` (its id).
pub fn is_grant_of(grant: Option<&str>, ledger: &str) -> bool {
    grant.and_then(ledger_of_grant) == Some(ledger)
}

/// The slots annotation is there but is not a ledger (a hand edit, or another program).
#[derive(Debug, Error)]
#[error("the slot ledger annotation {SLOTS_ANNOTATION} is not valid JSON of slots: {0}")]
pub struct LedgerFormatError(#[from] serde_json::Error);

/// The slots in a ledger Lease's annotations: none when the annotation is absent.
pub fn slots_of(
    annotations: Option<&BTreeMap<String, String>>,
) -> Result<BTreeMap<String, Slot>, LedgerFormatError> {
    match annotations.and_then(|a| a.get(SLOTS_ANNOTATION)) {
        None => Ok(BTreeMap::new()),
        Some(json) => Ok(serde_json::from_str(json)?),
    }
}

/// The slots as the annotation's value.
pub fn slots_json(slots: &BTreeMap<String, Slot>) -> String {
    serde_json::to_string(slots).unwrap_or_else(|_| "{}".to_owned())
}

/// Whether two etcd resourceVersions are in this order. They are opaque to clients in
/// general, but an etcd-backed API server hands out increasing integers; an unparsable pair
/// is ordered only when they differ, since every use of this has a write's precondition
/// behind it that catches a wrong guess.
pub fn version_is_newer(candidate: Option<&str>, than: Option<&str>) -> bool {
    match version_order(candidate, than) {
        Some(order) => order.is_gt(),
        None => candidate.is_some() && candidate != than,
    }
}

/// The order of two resourceVersions of one object, where both are the integers an
/// etcd-backed API server hands out (comparable by contract since Kubernetes 1.35, KEP-5504).
pub fn version_order(a: Option<&str>, b: Option<&str>) -> Option<std::cmp::Ordering> {
    let parse = |v: Option<&str>| v.and_then(|v| v.parse::<u64>().ok());
    Some(parse(a)?.cmp(&parse(b)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ledger_round_trips_and_garbage_is_an_error() {
        let slots = BTreeMap::from([(
            "n1".to_owned(),
            Slot {
                grant: "g1".into(),
                granted_at: "2026-01-01T00:00:00Z".into(),
                node_version: Some("42".into()),
                zone: Some("z1".into()),
            },
        )]);
        let annotations = BTreeMap::from([(SLOTS_ANNOTATION.to_owned(), slots_json(&slots))]);
        assert_eq!(slots_of(Some(&annotations)).unwrap(), slots);
        assert!(slots_of(None).unwrap().is_empty());
        let garbage = BTreeMap::from([(SLOTS_ANNOTATION.to_owned(), "{oops".to_owned())]);
        let error = slots_of(Some(&garbage)).unwrap_err().to_string();
        assert!(error.contains(SLOTS_ANNOTATION), "{error}");
    }

    /// A ledger written by the version before zones were recorded still reads: its slots have
    /// no zone (they then count against every zone).
    #[test]
    fn a_slot_of_an_earlier_version_reads_without_a_zone() {
        let old = r#"{"n1":{"grant":"abc","grantedAt":"t","nodeVersion":"7"}}"#;
        let annotations = BTreeMap::from([(SLOTS_ANNOTATION.to_owned(), old.to_owned())]);
        let slots = slots_of(Some(&annotations)).unwrap();
        assert_eq!(slots["n1"].zone, None);
        assert_eq!(ledger_of_grant(&slots["n1"].grant), None);
        let id = grant_id(&ledger_id("ns", "pool-a-slots"), "0f");
        assert_eq!(id, "ns/pool-a-slots/0f");
        assert_eq!(ledger_of_grant(&id), Some("ns/pool-a-slots"));
    }

    #[test]
    fn anything_but_absent_or_false_pauses_and_unexpected_values_are_named() {
        use Pause::{Off, On, Unexpected};
        let unexpected = |v: &str| Unexpected(v.to_owned());
        let table: [(Option<&str>, Pause); 14] = [
            (None, Off),
            (Some("false"), Off),
            (Some(" false "), Off),
            (Some("False"), Off),
            (Some("FALSE"), Off),
            (Some("true"), On),
            (Some(" true\n"), On),
            (Some("True"), unexpected("True")),
            (Some("yes"), unexpected("yes")),
            (Some("1"), unexpected("1")),
            (Some(""), unexpected("")),
            (Some("no"), unexpected("no")),
            (Some("0"), unexpected("0")),
            (Some("off"), unexpected("off")),
        ];
        for (value, expected) in table {
            let annotations =
                value.map(|v| BTreeMap::from([(PAUSED_ANNOTATION.to_owned(), v.to_owned())]));
            let read = Pause::of(annotations.as_ref());
            assert_eq!(read, expected, "{value:?}");
            assert_eq!(
                is_paused(annotations.as_ref()),
                expected != Off,
                "{value:?}"
            );
            assert_eq!(
                read.unexpected().is_some(),
                matches!(expected, Unexpected(_))
            );
        }
        // Other annotations of the Lease do not pause it.
        let slots = BTreeMap::from([(SLOTS_ANNOTATION.to_owned(), "{}".to_owned())]);
        assert_eq!(Pause::of(Some(&slots)), Off);
    }

    /// A ledger of today (no format annotation) reads as version 1; a newer one is refused.
    #[test]
    fn a_ledger_without_a_format_is_the_first_and_a_newer_one_is_unknown() {
        assert_eq!(format_of(None), Ok(1));
        let today = BTreeMap::from([(SLOTS_ANNOTATION.to_owned(), "{}".to_owned())]);
        assert_eq!(format_of(Some(&today)), Ok(1));
        let newer = BTreeMap::from([(FORMAT_ANNOTATION.to_owned(), "2".to_owned())]);
        assert_eq!(format_of(Some(&newer)).unwrap_err().found, "2");
    }

    #[test]
    fn versions_order_as_integers() {
        assert!(version_is_newer(Some("10"), Some("9")));
        assert!(!version_is_newer(Some("9"), Some("10")));
        assert!(!version_is_newer(Some("9"), Some("9")));
        assert!(version_is_newer(Some("b"), Some("a")));
        assert!(!version_is_newer(None, Some("a")));
    }
}
