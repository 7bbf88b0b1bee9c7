//! The slot ledger: which nodes hold one of the `max-unavailable` slots, under which grant.
//! It lives in ONE coordination object (a Lease, see `common::ledger`), and every change to
//! it is a compare-and-swap on that object's resourceVersion, so two controllers acting at
//! once (a deposed leader that has not noticed yet, or two replicas with leader election off)
//! cannot both spend the last slot.

pub use common::ledger::Slot;
use std::collections::{BTreeMap, BTreeSet};

/// The slots as last read from or written to the API server.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ledger {
    /// resourceVersion of the coordination object this copy came from; the precondition of
    /// the next write.
    pub resource_version: Option<String>,
    pub slots: BTreeMap<String, Slot>,
    /// An administrator paused new grants ([`common::ledger::PAUSED_ANNOTATION`]). Part of
    /// the ledger object, so a grant decided before the pause fails its compare-and-swap.
    pub paused: bool,
}

impl Ledger {
    pub fn holds(&self, node: &str) -> bool {
        self.slots.contains_key(node)
    }

    /// The grant id a node holds, if any.
    pub fn grant_of(&self, node: &str) -> Option<&str> {
        self.slots.get(node).map(|s| s.grant.as_str())
    }

    /// Whether `other` is a later version of the same object than `self`.
    pub fn is_older_than(&self, other: &Ledger) -> bool {
        common::ledger::version_is_newer(
            other.resource_version.as_deref(),
            self.resource_version.as_deref(),
        )
    }
}

/// A slot to record: a new grant, or one a node already carries (adopted).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    pub node: String,
    /// The id the node carries; `None` for a new grant (the shell makes a fresh id).
    pub adopted: Option<String>,
    /// The node's resourceVersion the grant is decided on.
    pub node_version: Option<String>,
}

impl Grant {
    pub fn new(node: &str, node_version: Option<&str>) -> Self {
        Self {
            node: node.to_owned(),
            adopted: None,
            node_version: node_version.map(str::to_owned),
        }
    }

    pub fn adopt(node: &str, grant: &str, node_version: Option<&str>) -> Self {
        Self {
            adopted: Some(grant.to_owned()),
            ..Self::new(node, node_version)
        }
    }
}

/// A change to the ledger decided in one round: releases, then grants, applied together.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LedgerChange {
    pub grant: Vec<Grant>,
    pub release: Vec<String>,
}

impl LedgerChange {
    pub fn is_empty(&self) -> bool {
        self.grant.is_empty() && self.release.is_empty()
    }

    /// The nodes holding a slot after this change.
    pub fn holders_after(&self, slots: &BTreeMap<String, Slot>) -> BTreeSet<String> {
        let mut holders: BTreeSet<String> = slots.keys().cloned().collect();
        for node in &self.release {
            holders.remove(node);
        }
        holders.extend(self.grant.iter().map(|g| g.node.clone()));
        holders
    }

    /// The slots after this change; `new_grant_id` names each new grant, `now` is its time.
    pub fn apply(
        &self,
        slots: &BTreeMap<String, Slot>,
        now: &str,
        mut new_grant_id: impl FnMut() -> String,
    ) -> BTreeMap<String, Slot> {
        let mut next = slots.clone();
        for node in &self.release {
            next.remove(node);
        }
        for grant in &self.grant {
            next.entry(grant.node.clone()).or_insert_with(|| Slot {
                grant: grant.adopted.clone().unwrap_or_else(&mut new_grant_id),
                granted_at: now.to_owned(),
                node_version: grant.node_version.clone(),
            });
        }
        next
    }
}

/// A fresh grant id: unique across replicas and restarts without coordination (the process's
/// randomly keyed hasher, the time and a counter).
pub fn new_grant_id() -> String {
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    format!("{:016x}", hasher.finish())
}
