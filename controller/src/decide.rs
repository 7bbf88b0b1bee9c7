//! The decision core: from the nodes of the pool (as the cache and our own writes show them),
//! the slot ledger and the budget, decide what to do next. Pure: no I/O, no clock; the shell
//! feeds it and executes what it returns, and tests drive it directly.

use crate::ledger::{Ledger, LedgerChange};
use common::{NodeFacts, Phase, ProtocolState, Request};
use k8s_openapi::jiff::Timestamp;

/// Where the drain of a slot-holding node stands, as the shell knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DrainState {
    #[default]
    NotStarted,
    Running,
    Drained,
    /// The drain gave up (timeout): the node leaves its slot and waits its turn again.
    Failed,
}

/// One node of the pool as the decision core sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeView {
    pub facts: NodeFacts,
    pub state: ProtocolState,
    /// When this controller first saw the request (any monotonic unit); oldest goes first.
    pub requested_at: Option<u64>,
    /// A node whose drain failed is not granted again before this time.
    pub not_before: Option<u64>,
    pub drain: DrainState,
}

impl NodeView {
    pub fn name(&self) -> &str {
        &self.facts.name
    }

    /// Unavailable in the sense of the budget: not Ready, cordoned, or in the protocol.
    fn unavailable(&self, holds_slot: bool) -> bool {
        self.facts.unavailable_by_itself() || holds_slot || self.state.reboot_under_way()
    }
}

/// Why the operator gives a node back without a reboot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReleaseReason {
    /// The reboot was completed (the node is uncordoned already).
    Completed,
    /// The administrator removed `reboot-needed` (or `reboot-now` before the agent took it).
    Cancelled,
    /// The drain did not finish in time; the request stays and is retried later.
    DrainFailed,
}

/// A write to one node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeAction {
    /// Slot granted, drain enabled: cordon first.
    Cordon(String),
    /// Cordoned; evict its pods.
    StartDrain(String),
    /// Drained (or nothing to drain): `reboot-needed` becomes `reboot-now`.
    Promote(String),
    /// Slot granted, drain disabled: cordon and promote in one write.
    CordonAndPromote(String),
    /// Reboot proven and node Ready: uncordon what we cordoned, record the time.
    Complete(String),
    /// Give back a node we cordoned, without a reboot.
    Uncordon(String, ReleaseReason),
    /// `reboot-needed` has a value other than `true`.
    WarnInvalidRequest { node: String, value: String },
}

/// What one round decided.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Decision {
    pub ledger: LedgerChange,
    /// Why each released slot is released, for Events and metrics (absent: the node left).
    pub release_reasons: Vec<(String, ReleaseReason)>,
    pub node_actions: Vec<NodeAction>,
    /// Requested nodes that got no slot this round, oldest first.
    pub waiting: Vec<String>,
}

/// The inputs of one round.
#[derive(Debug, Clone, Copy)]
pub struct Round<'a> {
    pub nodes: &'a [NodeView],
    pub ledger: &'a Ledger,
    /// `--max-unavailable` resolved against the size of the pool.
    pub budget: usize,
    pub drain_enabled: bool,
    pub now: u64,
}

impl Round<'_> {
    pub fn decide(&self) -> Decision {
        let mut decision = Decision::default();
        for view in self.nodes {
            if self.ledger.holds(view.name()) {
                self.slot_holder(view, &mut decision);
            } else {
                self.outside_the_protocol(view, &mut decision);
            }
        }
        self.release_departed_nodes(&mut decision);
        self.grant_slots(&mut decision);
        decision
    }

    fn slot_holder(&self, view: &NodeView, decision: &mut Decision) {
        let name = view.name().to_owned();
        match view.state.phase {
            Phase::RebootNow | Phase::InProgress { .. } => {}
            Phase::Done if view.facts.readiness == common::Readiness::Ready => {
                decision.node_actions.push(NodeAction::Complete(name));
            }
            Phase::Done => {}
            Phase::Idle => {
                let reason = match (&view.state.request, view.drain) {
                    (Request::Needed, DrainState::Failed) => ReleaseReason::DrainFailed,
                    (Request::Needed, _) => return self.advance_granted(view, decision),
                    _ if self.completed_during_slot(view) => ReleaseReason::Completed,
                    _ => ReleaseReason::Cancelled,
                };
                if view.state.cordoned_by_operator {
                    decision
                        .node_actions
                        .push(NodeAction::Uncordon(name, reason));
                } else {
                    decision.release_reasons.push((name.clone(), reason));
                    decision.ledger.release.push(name);
                }
            }
        }
    }

    /// Whether the node's last completion is later than the grant of its slot: then the slot
    /// ends a reboot, not a cancelled request.
    fn completed_during_slot(&self, view: &NodeView) -> bool {
        let parse = |t: &str| t.parse::<Timestamp>().ok();
        let completed = view.state.last_completed.as_deref().and_then(parse);
        let granted = self
            .ledger
            .slots
            .get(view.name())
            .and_then(|s| parse(&s.granted_at));
        matches!((completed, granted), (Some(c), Some(g)) if c >= g)
    }

    /// A granted node whose request stands: cordon, drain, promote.
    fn advance_granted(&self, view: &NodeView, decision: &mut Decision) {
        let name = view.name().to_owned();
        let action = match (view.facts.unschedulable, self.drain_enabled, view.drain) {
            (false, false, _) => NodeAction::CordonAndPromote(name),
            (false, true, _) => NodeAction::Cordon(name),
            (true, false, _) | (true, true, DrainState::Drained) => NodeAction::Promote(name),
            (true, true, DrainState::NotStarted) => NodeAction::StartDrain(name),
            (true, true, DrainState::Running | DrainState::Failed) => return,
        };
        decision.node_actions.push(action);
    }

    fn outside_the_protocol(&self, view: &NodeView, decision: &mut Decision) {
        let name = view.name().to_owned();
        if view.state.reboot_under_way() {
            // A reboot under way without a slot (the ledger was lost or edited): record the
            // slot it already uses, whatever the budget, so that it is counted.
            decision.ledger.grant.push(name);
            return;
        }
        match &view.state.request {
            Request::Invalid(value) => decision.node_actions.push(NodeAction::WarnInvalidRequest {
                node: name.clone(),
                value: value.clone(),
            }),
            Request::Absent if view.state.cordoned_by_operator => decision
                .node_actions
                .push(NodeAction::Uncordon(name.clone(), ReleaseReason::Cancelled)),
            _ => {}
        }
    }

    /// Slots of nodes that left the pool (deleted, or no longer selected).
    fn release_departed_nodes(&self, decision: &mut Decision) {
        for name in self.ledger.slots.keys() {
            if !self.nodes.iter().any(|v| v.name() == name) {
                decision.ledger.release.push(name.clone());
            }
        }
    }

    /// Grants slots to waiting requests, oldest first, while the number of OTHER unavailable
    /// nodes stays below the budget: a node that is already unavailable does not count
    /// against its own grant.
    fn grant_slots(&self, decision: &mut Decision) {
        // Slots released in this round are free for it: the same write releases and grants.
        let slots = decision.ledger.apply(&self.ledger.slots, "");
        let mut unavailable: Vec<bool> = self
            .nodes
            .iter()
            .map(|v| v.unavailable(slots.contains_key(v.name())))
            .collect();
        let mut candidates: Vec<usize> = (0..self.nodes.len())
            .filter(|&i| self.is_candidate(&self.nodes[i]))
            .collect();
        candidates.sort_by_key(|&i| {
            (
                self.nodes[i].requested_at.unwrap_or(u64::MAX),
                self.nodes[i].name(),
            )
        });
        let mut in_use = unavailable.iter().filter(|u| **u).count();
        for i in candidates {
            let others = in_use - usize::from(unavailable[i]);
            let name = self.nodes[i].name().to_owned();
            if others < self.budget {
                if !unavailable[i] {
                    unavailable[i] = true;
                    in_use += 1;
                }
                decision.ledger.grant.push(name);
            } else {
                decision.waiting.push(name);
            }
        }
    }

    fn is_candidate(&self, view: &NodeView) -> bool {
        view.state.request == Request::Needed
            && !self.ledger.holds(view.name())
            && !view.state.reboot_under_way()
            && view.not_before.is_none_or(|t| t <= self.now)
    }
}

#[cfg(test)]
#[path = "decide_tests.rs"]
mod tests;
