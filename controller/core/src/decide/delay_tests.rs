//! Table tests of `--drain-delay` and `--reboot-delay`: a cordoned node's next step waits for
//! its delay, counted from times the round is given (the cordon, the drain's end), keeps its
//! slot meanwhile, and is due exactly when the delay is over.

use super::fence_tests::{Stage, node_at};
use super::tests::base_round;
use super::*;

/// Cordoned at 1,000 (wall clock, ms); drained, if it is, at 3,000.
fn waiting(stage: Stage) -> (NodeView, Ledger) {
    let (mut view, ledger) = node_at(stage);
    view.claimed_at = Some(1_000);
    if view.drain == DrainState::Drained {
        view.drained_at = Some(3_000);
    }
    (view, ledger)
}

/// A round at wall clock `clock` with a drain delay of 5 s and a reboot delay of 4 s.
fn round_at<T>(
    (nodes, ledger): (&[NodeView], &Ledger),
    drain_enabled: bool,
    clock: u64,
    f: impl FnOnce(&Round<'_>) -> T,
) -> T {
    f(&Round {
        drain_enabled,
        clock,
        delays: Delays {
            drain: 5_000,
            reboot: 4_000,
        },
        ..base_round(nodes, ledger)
    })
}

fn actions(stage: Stage, drain_enabled: bool, clock: u64) -> Vec<NodeAction> {
    let (view, ledger) = waiting(stage);
    round_at((&[view], &ledger), drain_enabled, clock, |r| {
        r.decide().node_actions
    })
}

fn next_look(stage: Stage, drain_enabled: bool, clock: u64) -> Option<u64> {
    let (view, ledger) = waiting(stage);
    round_at((&[view], &ledger), drain_enabled, clock, |r| r.next_look())
}

fn start_drain() -> NodeAction {
    NodeAction::StartDrain {
        node: "n".into(),
        grant: "g-n".into(),
    }
}

fn promote() -> NodeAction {
    NodeAction::Promote {
        node: "n".into(),
        grant: "g-n".into(),
    }
}

#[test]
fn the_drain_starts_only_once_the_drain_delay_after_the_cordon_is_over() {
    assert_eq!(actions(Stage::Cordoned, true, 5_999), vec![]);
    assert_eq!(next_look(Stage::Cordoned, true, 5_999), Some(1));
    assert_eq!(next_look(Stage::Cordoned, true, 1_000), Some(5_000));
    assert_eq!(actions(Stage::Cordoned, true, 6_000), vec![start_drain()]);
}

#[test]
fn reboot_now_is_set_only_once_the_reboot_delay_after_the_drain_is_over() {
    assert_eq!(actions(Stage::Drained, true, 6_999), vec![]);
    assert_eq!(next_look(Stage::Drained, true, 6_999), Some(1));
    assert_eq!(actions(Stage::Drained, true, 7_000), vec![promote()]);
}

#[test]
fn with_the_drain_off_the_claim_waits_and_the_reboot_delay_counts_from_the_cordon() {
    let (mut view, ledger) = node_at(Stage::Granted);
    view.claimed_at = None;
    let claim = round_at((&[view], &ledger), false, 0, |r| r.decide().node_actions);
    assert_eq!(
        claim,
        vec![NodeAction::Claim {
            node: "n".into(),
            grant: "g-n".into(),
            node_version: "1".into(),
            promote: false,
        }],
        "a claim that set reboot-now at once would skip the delay"
    );
    assert_eq!(actions(Stage::Cordoned, false, 4_999), vec![]);
    assert_eq!(actions(Stage::Cordoned, false, 5_000), vec![promote()]);
}

#[test]
fn a_waiting_node_keeps_its_slot_counts_against_the_budget_and_can_be_cancelled() {
    let (view, ledger) = waiting(Stage::Cordoned);
    let other = {
        let (mut other, _) = node_at(Stage::Granted);
        other.facts.name = "m".into();
        other
    };
    let d = round_at((&[view.clone(), other], &ledger), true, 2_000, |r| {
        r.decide()
    });
    assert!(d.ledger.is_empty(), "slot kept, none granted: {d:?}");
    assert_eq!(d.waiting, vec!["m".to_owned()]);
    // The administrator withdraws the request while the node waits: released at once.
    let mut cancelled = view;
    cancelled.state.request = common::Request::Absent;
    let d = round_at((&[cancelled], &ledger), true, 2_000, |r| r.decide());
    assert_eq!(
        d.node_actions,
        vec![NodeAction::Release {
            node: "n".into(),
            reason: ReleaseReason::Cancelled
        }]
    );
}

#[test]
fn without_a_time_to_count_from_a_step_does_not_wait() {
    let (mut view, ledger) = node_at(Stage::Cordoned);
    view.claimed_at = None;
    let d = round_at((&[view], &ledger), true, 0, |r| r.decide().node_actions);
    assert_eq!(d, vec![start_drain()]);
}
