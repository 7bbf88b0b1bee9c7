//! The slot ledger: which nodes hold one of the `max-unavailable` slots, under which grant.
//! It lives in ONE coordination object (a Lease, see `common::ledger`), and every change to
//! it is a compare-and-swap on that object's resourceVersion, so two controllers acting at
//! once (a deposed leader that has not noticed yet, or two replicas with leader election off)
//! cannot both spend the last slot.

pub use common::ledger::Slot;
use common::ledger::ledger_of_grant;
use common::rollout::RolloutRecord;
use std::collections::BTreeMap;

/// The slots as last read from or written to the API server.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ledger {
    /// Which ledger this is (`<namespace>/<name>` of its Lease): the ledger its grant ids name.
    pub id: String,
    /// resourceVersion of the coordination object this copy came from; the precondition of
    /// the next write.
    pub resource_version: Option<String>,
    pub slots: BTreeMap<String, Slot>,
    /// An administrator paused new grants ([`common::ledger::PAUSED_ANNOTATION`]). Part of
    /// the ledger object, so a grant decided before the pause fails its compare-and-swap.
    pub paused: bool,
    /// The rollout under way ([`common::rollout::ROLLOUT_ANNOTATION`]); `None` between
    /// rollouts. Part of the ledger object, so a grant decided on an older record fails.
    pub rollout: Option<RolloutRecord>,
    /// The rollout record is there but cannot be read: the pool is stalled (read as the
    /// worst), never written over, until `kubectl reboot resume` writes a good one (a
    /// RebootPool's is removed by hand).
    pub rollout_unreadable: Option<String>,
    /// The ledger's format version as found, when this build does not know it (a newer
    /// operator wrote it): its slots are not read, and no round grants, releases or drives
    /// anything until an operator that knows it takes over.
    pub unknown_format: Option<String>,
    /// When its Lease was created (Unix milliseconds, the API server's clock), while it carries
    /// the pause a controller created it with (none for a pause typed by hand): a RebootPool's
    /// `spec.resumedAt` from then on lifts that pause.
    pub created_at: Option<u64>,
}

impl Ledger {
    pub fn holds(&self, node: &str) -> bool {
        self.slots.contains_key(node)
    }

    /// The grant id a node holds, if any.
    pub fn grant_of(&self, node: &str) -> Option<&str> {
        self.slots.get(node).map(|s| s.grant.as_str())
    }

    /// Whose a grant carried by a node is.
    pub fn owner_of(&self, grant: &str) -> Owner {
        match ledger_of_grant(grant) {
            Some(ledger) if ledger == self.id => Owner::Us,
            Some(_) => Owner::Another,
            None => Owner::Unnamed,
        }
    }

    /// Whether `other` is a later version of the same object than `self`.
    pub fn is_older_than(&self, other: &Ledger) -> bool {
        common::ledger::version_is_newer(
            other.resource_version.as_deref(),
            self.resource_version.as_deref(),
        )
    }
}

/// Whose a grant is, as its id says (`common::ledger::ledger_of_grant`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Owner {
    /// Made by this ledger.
    Us,
    /// Made by another pool's ledger: its controller drives the node, this one never does.
    Another,
    /// Written by an earlier version, whose ids name no ledger: this ledger's only when it
    /// holds that very grant for the node.
    Unnamed,
}

/// A slot to record: a new grant, or one a node already carries (adopted).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    pub node: String,
    /// The id the node carries; `None` for a new grant (the shell makes a fresh id).
    pub adopted: Option<String>,
    /// The node's resourceVersion the grant is decided on.
    pub node_version: Option<String>,
    /// The zone the node is granted in; `None` when not known (an adopted grant).
    pub zone: Option<String>,
}

impl Grant {
    pub fn new(node: &str, node_version: Option<&str>) -> Self {
        Self {
            node: node.to_owned(),
            adopted: None,
            node_version: node_version.map(str::to_owned),
            zone: None,
        }
    }

    /// The same grant, recorded as made in `zone`.
    pub fn in_zone(self, zone: Option<&str>) -> Self {
        Self {
            zone: zone.map(str::to_owned),
            ..self
        }
    }

    pub fn adopt(node: &str, grant: &str, node_version: Option<&str>) -> Self {
        Self {
            adopted: Some(grant.to_owned()),
            ..Self::new(node, node_version)
        }
    }
}

/// A change to the ledger decided in one round: releases, then grants, applied together,
/// with the rollout's record.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LedgerChange {
    pub grant: Vec<Grant>,
    pub release: Vec<String>,
    /// The rollout's record to write with them; `None`: unchanged.
    pub rollout: Option<RolloutChange>,
    /// The ledger's pause to remove with them: the pause a RebootPool's ledger was recreated
    /// with, which its `spec.resumedAt` lifts.
    pub unpause: bool,
}

/// A change to the rollout's record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RolloutChange {
    /// Write this record.
    Write(RolloutRecord),
    /// The rollout is over: remove the record.
    End,
}

impl LedgerChange {
    pub fn is_empty(&self) -> bool {
        self.grant.is_empty() && self.release.is_empty() && self.rollout.is_none() && !self.unpause
    }

    /// The nodes holding a slot after this change, each with the zone its slot was granted
    /// in (`None`: not known), as [`LedgerChange::apply`] will record them.
    pub fn holders_after(
        &self,
        slots: &BTreeMap<String, Slot>,
    ) -> BTreeMap<String, Option<String>> {
        let mut holders: BTreeMap<String, Option<String>> = slots
            .iter()
            .map(|(node, slot)| (node.clone(), slot.zone.clone()))
            .collect();
        for node in &self.release {
            holders.remove(node);
        }
        for grant in &self.grant {
            holders
                .entry(grant.node.clone())
                .or_insert_with(|| grant.zone.clone());
        }
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
                zone: grant.zone.clone(),
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
