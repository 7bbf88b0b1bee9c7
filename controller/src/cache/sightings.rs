//! When this process first saw each slot's grant in the ledger, by its own wall clock. The
//! grant's time in the ledger is written by the granting replica's clock, which may be minutes
//! off ours: the drain delay (and the reboot delay with the drain off) counts from our own
//! sighting, so that it is never cut short. A follower keeps looking while it stands by, so a
//! replica that takes over saw most grants appear and waits only what is left of their delays.

use controller_core::ledger::Ledger;
use std::{
    collections::HashMap,
    sync::{Arc, Mutex, MutexGuard},
};

/// Per grant, when (Unix milliseconds, this replica's wall clock) this process first saw it.
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
    /// milliseconds): new ones are recorded, released ones forgotten. Returns the sightings.
    pub fn look(&self, ledger: &Ledger, now: u64) -> Seen {
        let mut seen = self.lock();
        let current: Seen = ledger
            .slots
            .values()
            .map(|slot| {
                let at = seen.get(&slot.grant).copied().unwrap_or(now);
                (slot.grant.clone(), at)
            })
            .collect();
        seen.clone_from(&current);
        current
    }
}

/// Since when (this replica's clock) a delay counts that starts at a grant stored at `stored`
/// (the granting replica's clock): from when this process first saw the grant, which is never
/// before it was written, whatever either clock says; as stored if it was never seen.
pub fn delay_start(stored: Option<u64>, seen: Option<u64>) -> Option<u64> {
    seen.or(stored)
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

    #[test]
    fn a_grant_keeps_its_first_sighting_until_released() {
        let sightings = Sightings::default();
        assert_eq!(sightings.look(&ledger(&["a"]), 10)["a"], 10);
        let second = sightings.look(&ledger(&["a", "b"]), 20);
        assert_eq!((second["a"], second["b"]), (10, 20));
        sightings.look(&ledger(&[]), 30);
        assert_eq!(sightings.look(&ledger(&["a"]), 40)["a"], 40);
    }

    #[test]
    fn a_delay_counts_from_the_sighting_whichever_clock_wrote_the_grant() {
        // Written at 1_000_000 by a clock 5 minutes behind ours: seen at our 1_300_000.
        assert_eq!(
            delay_start(Some(1_000_000), Some(1_300_000)),
            Some(1_300_000)
        );
        // Written by a clock 5 minutes ahead of ours: seen at our 700_000.
        assert_eq!(delay_start(Some(1_000_000), Some(700_000)), Some(700_000));
        assert_eq!(delay_start(Some(1_000_000), None), Some(1_000_000));
        assert_eq!(delay_start(None, None), None);
    }
}
