//! The pure half of the shell: what a decision becomes once the world has been looked at
//! again. Which patch each node action writes, which grants a damaged ledger or a fence
//! keeps back, which releases a fresh read of the node withdraws (a soak that ended, a give-up
//! taken back), and in what order the writes go. No I/O: the shell calls these, and the model
//! test runs the shell.

use crate::decide::{Decision, Fence, Hold, NodeAction, ReleaseReason};
use common::{NodeFacts, Transition};
use std::collections::{BTreeMap, BTreeSet};

/// The patch a node action writes, if it writes one: a grant's claim, a cordon again, the
/// promotion, the completion, or the release of a node that carries what a release removes.
/// Reads (`Refetch`), drain starts and warnings write nothing. `now` is the wall-clock time
/// the patch records.
pub fn node_patch(
    action: &NodeAction,
    facts: &NodeFacts,
    t: &Transition<'_>,
    now: &str,
) -> Option<json_patch::Patch> {
    match action {
        NodeAction::Claim {
            grant,
            node_version,
            promote,
            ..
        } => Some(t.claim(facts, grant, node_version, *promote, now)),
        NodeAction::Recordon { grant, .. } => Some(t.recordon(facts, grant)),
        NodeAction::Promote { grant, .. } => Some(t.promote(facts, grant, now)),
        NodeAction::Complete { grant, .. } => Some(t.complete(facts, Some(grant), now)),
        NodeAction::Release { .. } => t.release(facts),
        NodeAction::Taint(_) => t.taint_waiting(facts),
        NodeAction::Untaint(_) => t.untaint(facts),
        NodeAction::Abandon { .. } => t.abandon(facts),
        NodeAction::ForgetAbandon { .. } => t.forget_abandon(facts),
        NodeAction::GiveUp { .. } => Some(t.request_abandon(facts, &give_up_request())),
        NodeAction::Refetch(_)
        | NodeAction::StartDrain { .. }
        | NodeAction::WarnInvalidRequest { .. } => None,
    }
}

/// What the controller writes in `reboot-abandon` when `--give-up-after` has passed.
pub fn give_up_request() -> common::abandon::Abandon {
    common::abandon::Abandon {
        by: common::events::CONTROLLER.to_owned(),
        reason: "not completed within --give-up-after of being told to reboot".to_owned(),
    }
}

/// With `--prefer-no-schedule-taint`, the nodes that wait for their slot and are `untainted`
/// get the taint. Not fenced: a pause or a closed window is when new pods should most avoid a
/// node that will be drained.
pub fn taint_waiting(decision: &mut Decision, untainted: impl Fn(&str) -> bool) {
    let waiting = decision.waiting.iter().filter(|n| untainted(n));
    let actions: Vec<NodeAction> = waiting.cloned().map(NodeAction::Taint).collect();
    decision.node_actions.extend(actions);
}

/// No new grant in this decision: adoptions of what the nodes carry stay.
pub fn drop_new_grants(decision: &mut Decision) {
    decision.ledger.grant.retain(|g| g.adopted.is_some());
}

/// A damaged ledger is rebuilt first, from what the nodes carry, and grants only once it is
/// written back: nothing new, and nobody waits on it this round.
pub fn rebuild_only(decision: &mut Decision) {
    drop_new_grants(decision);
    decision.waiting.clear();
}

/// A soaked node a fresh read found not Ready keeps its slot, and the round grants nothing
/// new: the next round decides on the node as read.
pub fn keep_soaking(decision: &mut Decision, node: &str) {
    decision.ledger.release.retain(|n| n != node);
    decision.release_reasons.retain(|(n, _)| n != node);
    drop_new_grants(decision);
}

/// A node read fresh before its slot's release turned out to have changed since the copy the
/// decision used: a new grant to it (its next reboot, requested again) is dropped, and decided
/// again on the fresh copy, which may opt it out or withdraw the request. The release stands.
pub fn drop_new_grant_to(decision: &mut Decision, node: &str) {
    decision
        .ledger
        .grant
        .retain(|g| g.node != node || g.adopted.is_some());
}

/// The nodes whose slot the decision releases on the word of its copy of them, read fresh
/// before their slot goes: a soak that ended (`Completed`), and a give-up (`Abandoned`: the
/// administrator may have taken it back since, removing it or typing `no`).
pub fn to_confirm(decision: &Decision) -> Vec<(String, ReleaseReason)> {
    decision
        .release_reasons
        .iter()
        .filter(|(_, reason)| matches!(reason, ReleaseReason::Completed | ReleaseReason::Abandoned))
        .cloned()
        .collect()
}

/// The node actions a fence as it stands at write time lets through, and every granted node
/// held back with why: those the decision already held and those the fence holds now.
pub fn fence_actions(
    decision: &mut Decision,
    fence: Fence,
    blocked: &BTreeSet<String>,
    finish_after_window: bool,
) -> (Vec<NodeAction>, Vec<(String, Hold)>) {
    let actions = std::mem::take(&mut decision.node_actions);
    let (actions, held) = fence.hold_back(actions, blocked, finish_after_window);
    let mut all_held = std::mem::take(&mut decision.held);
    all_held.extend(held);
    (actions, all_held)
}

/// The writes grouped by node, each group in the decision's order, each write with its place
/// in `writes`: groups go out at once, one node's writes one after the other.
pub fn by_node<W>(writes: Vec<W>, node: impl Fn(&W) -> &str) -> Vec<Vec<(usize, W)>> {
    let mut groups: BTreeMap<String, Vec<(usize, W)>> = BTreeMap::new();
    for (i, write) in writes.into_iter().enumerate() {
        groups
            .entry(node(&write).to_owned())
            .or_default()
            .push((i, write));
    }
    groups.into_values().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_nodes_writes_stay_in_order_and_keep_their_place() {
        let writes = vec![("b", 1), ("a", 2), ("b", 3)];
        let groups = by_node(writes, |w| w.0);
        assert_eq!(
            groups,
            vec![vec![(1, ("a", 2))], vec![(0, ("b", 1)), (2, ("b", 3))]]
        );
    }
}
