//! When a round next needs to look even if nothing changes: time is an input of the decision
//! core, so a decision taken now can be different later with the very same nodes and ledger (a
//! soak ends, a failed drain may be retried, a reboot becomes overdue, a delay is over). The shell sleeps until
//! the earliest such moment or the next event, instead of finding out at a periodic resync.
//! Pure, like the round it belongs to. Each moment is checked against the round's own
//! predicate at that time, so that a look is asked for exactly when one of them turns.
//! (The maintenance windows are not an input of the round: `Schedule::until_next_change`.)

use super::{NodeView, Round};
use crate::budget::Holders;

impl Round<'_> {
    /// In how many milliseconds (the unit of `now` and `clock`) the earliest time-based
    /// predicate of this round turns for one of its nodes; `None` when only an event can
    /// change the decision.
    pub fn next_look(&self) -> Option<u64> {
        let slots: Holders = self
            .ledger
            .slots
            .iter()
            .map(|(node, slot)| (node.clone(), slot.zone.clone()))
            .collect();
        self.nodes
            .iter()
            .flat_map(|view| {
                [
                    self.soak_ends(view),
                    self.retry_due(view, &slots),
                    self.reboot_overdue(view),
                    self.give_up_due(view),
                    self.delay_over(view),
                ]
            })
            .flatten()
            .min()
    }

    /// A completed slot holder, Ready and still soaking: its slot is free once soaked.
    fn soak_ends(&self, view: &NodeView) -> Option<u64> {
        let slot = self.ledger.slots.get(view.name())?;
        let completed = view.state.last_grant.as_deref() == Some(slot.grant.as_str());
        let end = view.ready_since?.saturating_add(self.soak(view));
        let turns =
            end > self.now && !self.soaked(view) && Round { now: end, ..*self }.soaked(view);
        (completed && turns).then(|| end - self.now)
    }

    /// A request whose drain failed: it may be granted again at its `not_before`.
    fn retry_due(&self, view: &NodeView, slots: &Holders) -> Option<u64> {
        let at = view.not_before?;
        let turns = at > self.now && Round { now: at, ..*self }.is_candidate(view, slots);
        turns.then(|| at - self.now)
    }

    /// A cordoned node of ours waiting for `--drain-delay` or `--reboot-delay`: its next step
    /// is due when the delay is over.
    fn delay_over(&self, view: &NodeView) -> Option<u64> {
        let slot = self.ledger.slots.get(view.name())?;
        let waits = view.state.grant.as_deref() == Some(slot.grant.as_str())
            && view.state.phase == common::Phase::Idle
            && view.state.request == common::Request::Needed
            && view.facts.unschedulable;
        let at = self.delay_ends(view).filter(|_| waits)?;
        Some(at - self.clock)
    }

    /// A node told to reboot and not completed: it holds the pool once `--reboot-timeout` is
    /// over (a look then is what starts its Warning and holds the next grants).
    fn reboot_overdue(&self, view: &NodeView) -> Option<u64> {
        let at = view.approved_at?.saturating_add(self.reboot_timeout);
        let turns = at > self.clock && Round { clock: at, ..*self }.overdue(view);
        turns.then(|| at - self.clock)
    }

    /// A node told to reboot and not completed: it is given up once `--give-up-after` is over.
    fn give_up_due(&self, view: &NodeView) -> Option<u64> {
        // Off (`u64::MAX`): no end.
        let at = view.approved_at?.checked_add(self.give_up_after)?;
        let turns = at > self.clock && Round { clock: at, ..*self }.gives_up(view);
        turns.then(|| at - self.clock)
    }
}

#[cfg(test)]
mod tests;
