//! The round's part of the rollout's rules: what it saw go wrong or complete, taken into the
//! record written with its ledger change, the stall that follows, and the rollout's end.

use super::{Decision, NodeView, ReleaseReason, Round};
use crate::budget::Holders;
use crate::ledger::RolloutChange;
use crate::rollout::{RolloutRules, Stall};
use common::rollout::{FailureKind, RolloutRecord};

impl Round<'_> {
    /// The rollout's record after what this round saw, while a rule is on (a record left from
    /// when one was is kept, untouched, until the rollout ends). `None` without a record to
    /// keep, or with one that cannot be read (never written over). The record before the
    /// round's releases and grants is kept in the decision, for [`Decision::settle_rollout`].
    pub(super) fn rollout_record(&self, decision: &mut Decision) -> Option<RolloutRecord> {
        if self.ledger.rollout_unreadable.is_some() {
            return None;
        }
        let mut base = self.ledger.rollout.clone();
        if self.rollout.is_on() {
            let current = base.get_or_insert_with(RolloutRecord::default);
            // Resumed by the pool's spec first: the failures seen now are not forgiven by it.
            // A time ahead of our clock forgives nothing until it is reached: else every
            // failure counted meanwhile would be forgiven as it happens.
            let resumed_at = self.rollout.resumed_at.filter(|at| *at <= self.clock);
            if let Some(resumed) = resumed_at.and_then(|t| current.resumed_at(t)) {
                *current = resumed;
            }
            let seen = self.failures_seen(decision);
            decision.rollout_failures = self.rollout.failed(current, &seen, self.clock);
        }
        decision.rollout_base.clone_from(&base);
        decision.requests_standing = self
            .nodes
            .iter()
            .any(|v| self.is_requested(v) && !self.set_aside.sets_aside(v));
        let mut record = base?;
        released(self.rollout, &mut record, decision);
        Some(record)
    }

    /// The failures this round sees, each with the grant it happened under: a drain given
    /// back after its timeout, a node overdue (NotReady, or Ready without a new boot), a node
    /// NotReady in its soak.
    fn failures_seen(&self, decision: &Decision) -> Vec<(String, String, FailureKind)> {
        let by_name = |name: &str| self.nodes.iter().find(|v| v.name() == name);
        let grant_of = |name: &str| {
            self.ledger
                .grant_of(name)
                .or_else(|| by_name(name).and_then(|v| v.state.grant.as_deref()))
                .map(str::to_owned)
        };
        let drains = decision.release_reasons.iter().map(|(n, r)| (n, *r));
        let released = decision.node_actions.iter().filter_map(|a| match a {
            super::NodeAction::Release { node, reason } => Some((node, *reason)),
            _ => None,
        });
        let drain_failures = drains
            .chain(released)
            .filter(|(_, reason)| *reason == ReleaseReason::DrainFailed)
            .map(|(node, _)| (node.as_str(), FailureKind::DrainTimeout));
        let overdue = decision.overdue.iter().map(|node| {
            let ready =
                by_name(node).is_some_and(|v| v.facts.readiness == common::Readiness::Ready);
            let kind = if ready {
                FailureKind::Unproven
            } else {
                FailureKind::RebootTimeout
            };
            (node.as_str(), kind)
        });
        let not_ready = decision
            .not_ready_after_reboot
            .iter()
            .map(|node| (node.as_str(), FailureKind::NotReadyAfterReboot));
        drain_failures
            .chain(overdue)
            .chain(not_ready)
            .filter_map(|(node, kind)| Some((node.to_owned(), grant_of(node)?, kind)))
            .collect()
    }

    /// Why the pool is stalled, if it is: the rollout's record first (it cannot be read, a
    /// canary failed, too many failures), then the nodes set aside.
    pub(super) fn stall(
        &self,
        decision: &Decision,
        record: Option<&RolloutRecord>,
        slots: &Holders,
        candidates: &[&NodeView],
    ) -> Option<Stall> {
        let rollout = if !self.rollout.is_on() {
            None
        } else if let Some(why) = &self.ledger.rollout_unreadable {
            Some(Stall::Unreadable(why.clone()))
        } else {
            record.and_then(|record| {
                let in_protocol = slots.keys().map(String::as_str);
                let waiting = candidates.iter().map(|v| v.name());
                let nodes = RolloutRules::rollout_nodes(record, in_protocol.chain(waiting));
                self.rollout.stall(record, nodes)
            })
        };
        let set_aside = decision.set_aside.len();
        rollout.or_else(|| {
            self.set_aside.stalls(set_aside).then(|| Stall::SetAside {
                count: set_aside,
                most: self.set_aside.most.unwrap_or_default(),
            })
        })
    }
}

/// Takes the decision's released slots into the record (while a rule is on).
fn released(rules: RolloutRules, record: &mut RolloutRecord, decision: &Decision) {
    if !rules.is_on() {
        return;
    }
    for (node, reason) in &decision.release_reasons {
        rules.released(record, node, *reason == ReleaseReason::Completed);
    }
}

impl Decision {
    /// The rollout's record to write with the ledger's change, from the record the round
    /// started from (with its failures) and what the decision releases and grants now: the
    /// round sets it, and the shell sets it again once it has dropped a release or a grant
    /// (a soak found NotReady on a fresh read, a fence that closed). Written when it changed;
    /// removed once the rollout is over: no node of the pool holds a slot, and no request
    /// stands but those set aside (one waiting out its retry after a failed drain keeps the
    /// rollout, and its failure, open).
    pub fn settle_rollout(&mut self, rules: RolloutRules, ledger: &crate::ledger::Ledger) {
        let Some(mut record) = self.rollout_base.clone() else {
            self.ledger.rollout = None;
            return;
        };
        released(rules, &mut record, self);
        if rules.is_on() {
            let granted = self.ledger.grant.iter().filter(|g| g.adopted.is_none());
            rules.granted(&mut record, granted.map(|g| g.node.as_str()));
        }
        let over = !self.requests_standing && self.ledger.holders_after(&ledger.slots).is_empty();
        self.ledger.rollout = match (over, &ledger.rollout) {
            (true, Some(_)) => Some(RolloutChange::End),
            (true, None) => None,
            (false, current) if current.as_ref() == Some(&record) => None,
            (false, _) => Some(RolloutChange::Write(record)),
        };
    }
}
