//! When this process first saw each slot's grant claimed: its node carrying the grant, which
//! the claim cordoned, by this process's own wall clock. The drain delay (and the reboot delay
//! with the drain off) counts from the cordon: from our own claim when we made it, else from
//! our first sighting of it, which is never before it whatever either clock says (the ledger's
//! time of the grant is written by the granting replica's clock, and a grant may wait for its
//! claim behind a pause, a window or a gate for hours). A follower keeps looking while it
//! stands by, so a replica that takes over saw most claims made and waits only what is left of
//! their delays; one that did not waits them whole: longer than asked, never shorter.

use common::AnnotationKeys;
use controller_core::ledger::Ledger;
use k8s_openapi::api::core::v1::Node;
use std::{
    collections::HashMap,
    sync::{Arc, Mutex, MutexGuard},
};

/// Per grant, when (Unix milliseconds, this replica's wall clock) this process first saw it
/// claimed.
pub type Seen = HashMap<String, u64>;

/// The sightings of one process, shared by its follower and its leader.
#[derive(Debug, Clone, Default)]
pub struct Sightings(Arc<Mutex<Seen>>);

impl Sightings {
    fn lock(&self) -> MutexGuard<'_, Seen> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// One look at the grants of `ledger` at `now` (this replica's wall clock, Unix
    /// milliseconds): a grant whose node `carries` it (node, grant) is recorded the first time
    /// it is seen so; a grant not claimed yet is not; released ones are forgotten. Returns the
    /// sightings.
    pub fn look(&self, ledger: &Ledger, carries: impl Fn(&str, &str) -> bool, now: u64) -> Seen {
        let mut seen = self.lock();
        let current: Seen = ledger
            .slots
            .iter()
            .filter_map(|(node, slot)| {
                let at = seen.get(&slot.grant).copied();
                let at = at.or_else(|| carries(node, &slot.grant).then_some(now))?;
                Some((slot.grant.clone(), at))
            })
            .collect();
        seen.clone_from(&current);
        current
    }

    /// This process claimed `grant` at `at` (Unix milliseconds, its wall clock): its write.
    pub fn claimed(&self, grant: &str, at: u64) {
        self.lock().entry(grant.to_owned()).or_insert(at);
    }
}

/// Whether `node` carries `grant` (`reboot-grant`): the grant is claimed.
pub fn carries(node: &Node, keys: &AnnotationKeys, grant: &str) -> bool {
    node.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(&keys.grant))
        .is_some_and(|carried| carried == grant)
}

#[cfg(test)]
mod tests {
    use super::*;
    use controller_core::ledger::Slot;

    fn ledger(grants: &[&str]) -> Ledger {
        let mut ledger = Ledger::default();
        for grant in grants {
            ledger.slots.insert(
                format!("node-{grant}"),
                Slot {
                    grant: (*grant).to_owned(),
                    granted_at: "2026-11-25T22:00:00Z".into(),
                    node_version: None,
                    zone: None,
                },
            );
        }
        ledger
    }

    fn claimed(_: &str, _: &str) -> bool {
        true
    }

    #[test]
    fn a_claim_keeps_its_first_sighting_until_released() {
        let sightings = Sightings::default();
        assert_eq!(sightings.look(&ledger(&["a"]), claimed, 10)["a"], 10);
        let second = sightings.look(&ledger(&["a", "b"]), claimed, 20);
        assert_eq!((second["a"], second["b"]), (10, 20));
        sightings.look(&ledger(&[]), claimed, 30);
        assert_eq!(sightings.look(&ledger(&["a"]), claimed, 40)["a"], 40);
    }

    /// A grant held back by a fence before its claim is seen at its claim, however long it was
    /// in the ledger before.
    #[test]
    fn a_grant_counts_from_the_sighting_of_its_claim_not_of_the_grant() {
        let sightings = Sightings::default();
        let unclaimed = |_: &str, _: &str| false;
        assert!(sightings.look(&ledger(&["a"]), unclaimed, 10).is_empty());
        assert!(
            sightings
                .look(&ledger(&["a"]), unclaimed, 3_600_000)
                .is_empty()
        );
        let carried = |node: &str, grant: &str| node == "node-a" && grant == "a";
        let seen = sightings.look(&ledger(&["a"]), carried, 3_601_000);
        assert_eq!(seen["a"], 3_601_000);
    }

    #[test]
    fn our_own_claim_counts_from_its_write() {
        let sightings = Sightings::default();
        sightings.claimed("a", 15);
        assert_eq!(sightings.look(&ledger(&["a"]), claimed, 20)["a"], 15);
        sightings.claimed("a", 25);
        assert_eq!(sightings.look(&ledger(&["a"]), claimed, 30)["a"], 15);
    }
}
