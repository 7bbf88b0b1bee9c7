//! The slot ledger: which nodes hold one of the `max-unavailable` slots. It lives in ONE
//! coordination object (a Lease), and every change to it is a compare-and-swap on that
//! object's resourceVersion, so two controllers acting at once (a deposed leader that has not
//! noticed yet, or two replicas with leader election off) cannot both spend the last slot.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One granted slot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Slot {
    /// RFC 3339 time of the grant.
    pub granted_at: String,
}

/// The slots as last read from or written to the API server.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ledger {
    /// resourceVersion of the coordination object this copy came from; the precondition of
    /// the next write.
    pub resource_version: Option<String>,
    pub slots: BTreeMap<String, Slot>,
}

impl Ledger {
    pub fn holds(&self, node: &str) -> bool {
        self.slots.contains_key(node)
    }

    /// Whether `other` is a later version of the same object than `self`. resourceVersions
    /// are opaque in general but etcd-backed ones are increasing integers; an unparsable one
    /// is taken as newer, since the compare-and-swap catches a wrong guess anyway.
    pub fn is_older_than(&self, other: &Ledger) -> bool {
        let parse = |l: &Ledger| {
            l.resource_version
                .as_deref()
                .and_then(|v| v.parse::<u64>().ok())
        };
        match (parse(self), parse(other)) {
            (Some(mine), Some(theirs)) => theirs > mine,
            _ => self.resource_version != other.resource_version,
        }
    }
}

/// A change to the ledger decided in one round: grants and releases, applied together.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LedgerChange {
    pub grant: Vec<String>,
    pub release: Vec<String>,
}

impl LedgerChange {
    pub fn is_empty(&self) -> bool {
        self.grant.is_empty() && self.release.is_empty()
    }

    /// The slots after this change.
    pub fn apply(&self, slots: &BTreeMap<String, Slot>, now: &str) -> BTreeMap<String, Slot> {
        let mut next = slots.clone();
        for node in &self.release {
            next.remove(node);
        }
        for node in &self.grant {
            next.entry(node.clone()).or_insert_with(|| Slot {
                granted_at: now.to_owned(),
            });
        }
        next
    }
}
