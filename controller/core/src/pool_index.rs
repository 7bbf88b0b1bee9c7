//! The pool index: what the budget needs to know of every node, kept up to date as the node
//! watch delivers changes, so that a decision round costs the few nodes in the protocol and
//! not the whole pool. Pure: the watch task feeds it, the shell reads it.
//!
//! A node outside the protocol (no request, no grant, no reboot under way, not cordoned by
//! us) and without a slot is only ever counted by a round: as one node of its zone, and as
//! unavailable when it is NotReady or cordoned. The index keeps those two facts per node and
//! their sums per zone; a round views in full only the nodes in the protocol and the slot
//! holders, and takes the rest of the pool as [`PoolCounts`]. The property tests of the
//! decision core check, at every round, that deciding this way equals deciding over every
//! node.

use common::{NodeFacts, ProtocolState, Request};
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// Whether a round must view the node in full: it is somewhere in the protocol. (Slot
/// holders are viewed too; the ledger, not the node, says which they are.)
pub fn in_protocol(state: &ProtocolState) -> bool {
    state.request != Request::Absent
        || state.grant.is_some()
        || state.reboot_under_way()
        || state.cordoned_by_operator
        || state.labelled.is_some()
        || state.tainted.is_some()
        || state.protected.is_some()
        || state.abandon.is_some()
        || state.abandon_declined.is_some()
        || state.format.is_some()
}

/// What the index keeps of one node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// A hash of what decisions read of the node, to tell a change of facts from a status
    /// report that changes none (see `nodes::decision_facts`).
    pub print: u64,
    pub in_pool: bool,
    /// Selected by another pool too: granted by neither, counted by both.
    pub shared: bool,
    pub zone: Option<String>,
    /// NotReady or cordoned (invariant 1 of docs/src/design.md without the protocol's part).
    pub unavailable_by_itself: bool,
    pub in_protocol: bool,
    /// When its last reboot completed (`reboot-last-completed`), where that reads as a time.
    pub last_completed: Option<jiff::Timestamp>,
}

impl Entry {
    pub fn new(print: u64, facts: &NodeFacts, state: &ProtocolState, pool: Placement) -> Self {
        Self {
            print,
            in_pool: pool.in_pool,
            shared: pool.shared,
            zone: pool.zone,
            unavailable_by_itself: facts.unavailable_by_itself(),
            in_protocol: in_protocol(state),
            last_completed: state.last_completed.as_deref().and_then(|t| t.parse().ok()),
        }
    }
}

/// Where a node stands in the pool: selected by `--node-selector` or not, also selected by
/// another pool (then it is not the pool's, yet counted by it), and its zone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    pub in_pool: bool,
    pub shared: bool,
    pub zone: Option<String>,
}

impl Entry {
    /// Whether the node counts against the pool's budgets: its own, or shared with another
    /// pool (each counts it).
    pub fn counted(&self) -> bool {
        self.in_pool || self.shared
    }
}

/// One zone's nodes in the pool, and how many of them are unavailable by themselves.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ZoneCount {
    pub size: usize,
    pub unavailable: usize,
}

/// Counts of pool nodes, per zone (nodes without a zone label form the zone `None`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PoolCounts {
    pub zones: BTreeMap<Option<String>, ZoneCount>,
}

impl PoolCounts {
    /// Nodes counted.
    pub fn nodes(&self) -> usize {
        self.zones.values().map(|z| z.size).sum()
    }

    /// Of those, the ones unavailable by themselves.
    pub fn unavailable(&self) -> usize {
        self.zones.values().map(|z| z.unavailable).sum()
    }

    fn add(&mut self, entry: &Entry) {
        if entry.counted() {
            let zone = self.zones.entry(entry.zone.clone()).or_default();
            zone.size += 1;
            zone.unavailable += usize::from(entry.unavailable_by_itself);
        }
    }

    fn remove(&mut self, entry: &Entry) {
        if !entry.counted() {
            return;
        }
        if let Some(zone) = self.zones.get_mut(&entry.zone) {
            zone.size -= 1;
            zone.unavailable -= usize::from(entry.unavailable_by_itself);
            if zone.size == 0 {
                self.zones.remove(&entry.zone);
            }
        }
    }
}

/// Every node's [`Entry`], their sums, and the names of the nodes in the protocol.
#[derive(Debug, Clone, Default)]
pub struct PoolIndex {
    entries: HashMap<String, Entry>,
    totals: PoolCounts,
    in_protocol: BTreeSet<String>,
    /// The pool node whose reboot completed last, and when: kept as the watch delivers each
    /// node (a completion takes the node out of the protocol in the same write, so the nodes
    /// in the protocol alone would miss it). A node deleted since stays the last completed.
    last_completed: Option<(String, jiff::Timestamp)>,
}

impl PoolIndex {
    /// Records the node's entry, made by `entry` only when `print` (the hash of the facts it is
    /// made of) is new: a status report that changes none of them costs a lookup. True when
    /// the facts changed (or the node is new).
    pub fn upsert(&mut self, name: &str, print: u64, entry: impl FnOnce() -> Entry) -> bool {
        if self.entries.get(name).is_some_and(|e| e.print == print) {
            return false;
        }
        let entry = entry();
        self.remove(name);
        self.totals.add(&entry);
        if let Some(at) = entry.last_completed.filter(|_| entry.in_pool)
            && self
                .last_completed
                .as_ref()
                .is_none_or(|(_, last)| at > *last)
        {
            self.last_completed = Some((name.to_owned(), at));
        }
        if entry.in_protocol {
            self.in_protocol.insert(name.to_owned());
        }
        self.entries.insert(name.to_owned(), entry);
        true
    }

    /// Forgets a deleted node.
    pub fn remove(&mut self, name: &str) {
        if let Some(old) = self.entries.remove(name) {
            self.totals.remove(&old);
            self.in_protocol.remove(name);
        }
    }

    /// The nodes in the protocol, as the last changes left them.
    pub fn in_protocol(&self) -> &BTreeSet<String> {
        &self.in_protocol
    }

    /// The pool node whose reboot completed last, and when.
    pub fn last_completed(&self) -> Option<&(String, jiff::Timestamp)> {
        self.last_completed.as_ref()
    }

    /// Every pool node the index has.
    pub fn totals(&self) -> &PoolCounts {
        &self.totals
    }

    /// The pool without the nodes `viewed` (which a round views in full).
    pub fn counts_without<'n>(&self, viewed: impl IntoIterator<Item = &'n str>) -> PoolCounts {
        let mut counts = self.totals.clone();
        for name in viewed {
            if let Some(entry) = self.entries.get(name) {
                counts.remove(entry);
            }
        }
        counts
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A node that a peer pool selects too counts in this pool's totals and zone, as the pool's
    /// own nodes do, though it is not the pool's.
    #[test]
    fn a_shared_node_is_counted_with_the_pools_own() {
        let mut index = PoolIndex::default();
        let shared = Entry {
            shared: true,
            ..entry(1, true, false, false)
        };
        put(&mut index, "cp-1", &shared);
        put(&mut index, "cp-2", &entry(1, false, false, true));
        put(&mut index, "w-1", &entry(1, true, false, false));
        assert_eq!(index.totals().nodes(), 2);
        assert_eq!(index.totals().unavailable(), 1, "the shared node, not w-1");
        index.remove("cp-1");
        assert_eq!(index.totals().unavailable(), 0);
    }

    fn entry(zone: u8, unavailable: bool, in_protocol: bool, in_pool: bool) -> Entry {
        Entry {
            print: u64::from(zone) * 8
                + u64::from(unavailable) * 4
                + u64::from(in_protocol) * 2
                + u64::from(in_pool),
            in_pool,
            shared: false,
            zone: (zone > 0).then(|| format!("z{zone}")),
            unavailable_by_itself: unavailable,
            in_protocol,
            last_completed: None,
        }
    }

    /// A completion takes the node out of the protocol in the same write: the index still
    /// knows it as the pool's last, from any replica's watch and across a relist, and a node
    /// of another pool or an older completion does not replace it.
    #[test]
    fn the_last_completed_reboot_is_kept_as_the_node_leaves_the_protocol() {
        let at = |t: &str| Some(t.parse::<jiff::Timestamp>().unwrap());
        let mut index = PoolIndex::default();
        let rebooting = entry(1, true, true, true);
        put(&mut index, "n1", &rebooting);
        assert_eq!(index.last_completed(), None);
        let completed = Entry {
            print: 100,
            last_completed: at("2026-12-01T10:00:00Z"),
            ..entry(1, false, false, true)
        };
        put(&mut index, "n1", &completed);
        assert!(index.in_protocol().is_empty());
        let last = |index: &PoolIndex| index.last_completed().map(|(n, t)| (n.clone(), *t));
        assert_eq!(
            last(&index),
            Some(("n1".into(), at("2026-12-01T10:00:00Z").unwrap()))
        );
        let older = Entry {
            print: 101,
            last_completed: at("2026-11-30T10:00:00Z"),
            ..entry(1, false, false, true)
        };
        put(&mut index, "n2", &older);
        let elsewhere = Entry {
            print: 102,
            last_completed: at("2026-12-01T11:00:00Z"),
            ..entry(1, false, false, false)
        };
        put(&mut index, "n3", &elsewhere);
        assert_eq!(
            last(&index),
            Some(("n1".into(), at("2026-12-01T10:00:00Z").unwrap()))
        );
    }

    fn put(index: &mut PoolIndex, name: &str, e: &Entry) -> bool {
        index.upsert(name, e.print, || e.clone())
    }

    fn from_scratch(entries: &BTreeMap<String, Entry>) -> PoolIndex {
        let mut index = PoolIndex::default();
        for (name, e) in entries {
            put(&mut index, name, e);
        }
        index
    }

    proptest! {
        /// Any sequence of changes and deletions leaves the same sums and protocol set as
        /// counting the nodes as they are at the end.
        #[test]
        fn incremental_sums_equal_a_recount(
            steps in proptest::collection::vec(
                (0..8usize, proptest::option::weighted(0.85,
                    (0..3u8, any::<bool>(), any::<bool>(), proptest::bool::weighted(0.8)))),
                0..80,
            )
        ) {
            let mut index = PoolIndex::default();
            let mut truth: BTreeMap<String, Entry> = BTreeMap::new();
            for (node, change) in steps {
                let name = format!("n{node}");
                match change {
                    Some((zone, unavailable, protocol, pool)) => {
                        let e = entry(zone, unavailable, protocol, pool);
                        let changed = put(&mut index, &name, &e);
                        let before = truth.insert(name, e.clone());
                        prop_assert_eq!(changed, before.is_none_or(|b| b.print != e.print));
                    }
                    None => {
                        index.remove(&name);
                        truth.remove(&name);
                    }
                }
                let recount = from_scratch(&truth);
                prop_assert_eq!(index.totals(), recount.totals());
                prop_assert_eq!(index.in_protocol(), recount.in_protocol());
                prop_assert_eq!(index.len(), truth.len());
            }
        }
    }

    /// Each annotation that a round acts on, alone, puts the node in the protocol; among them
    /// the cordon of a version before grants, which no other state leads to.
    #[test]
    fn every_protocol_annotation_alone_puts_a_node_in_the_protocol() {
        let keys = common::AnnotationKeys::default();
        for key in [
            &keys.needed,
            &keys.now,
            &keys.in_progress,
            &keys.done,
            &keys.cordoned,
            &keys.grant,
        ] {
            let annotations = BTreeMap::from([(key.clone(), "true".to_owned())]);
            let state = ProtocolState::from_annotations(&keys, &annotations);
            assert!(in_protocol(&state), "{key}");
        }
        let invalid = BTreeMap::from([(keys.needed.clone(), "yes".to_owned())]);
        assert!(in_protocol(&ProtocolState::from_annotations(
            &keys, &invalid
        )));
        let done = BTreeMap::from([
            (
                keys.last_completed.clone(),
                "2026-11-24T10:00:00Z".to_owned(),
            ),
            (keys.last_grant.clone(), "g1".to_owned()),
        ]);
        assert!(!in_protocol(&ProtocolState::from_annotations(&keys, &done)));
    }

    #[test]
    fn counts_without_leave_out_the_viewed_nodes() {
        let mut index = PoolIndex::default();
        put(&mut index, "a", &entry(1, true, false, true));
        put(&mut index, "b", &entry(1, false, true, true));
        put(&mut index, "c", &entry(2, false, false, true));
        put(&mut index, "d", &entry(2, true, false, false));
        assert_eq!(index.totals().nodes(), 3);
        assert_eq!(index.totals().unavailable(), 1);
        let rest = index.counts_without(["b", "d", "unknown"]);
        assert_eq!(rest.nodes(), 2);
        assert_eq!(
            rest.zones[&Some("z1".into())],
            ZoneCount {
                size: 1,
                unavailable: 1
            }
        );
        assert_eq!(index.in_protocol().iter().collect::<Vec<_>>(), ["b"]);
        index.remove("a");
        assert_eq!(
            index.counts_without(["b"]).zones.get(&Some("z1".into())),
            None
        );
    }
}
