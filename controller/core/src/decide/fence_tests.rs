//! Table tests of the fences (invariant 9 of docs/src/design.md): a pause, a closed window or a
//! shut gate stops a granted node from moving further (cordon, drain start, `reboot-now`), not only
//! new grants; reboots already told to go finish.

use super::tests::{OPEN, annotate, base_round, facts, node_json, view_of};
use super::*;
use crate::ledger::Slot;
use serde_json::Value;
use std::collections::BTreeSet;

/// Where a granted node stands.
#[derive(Debug, Clone, Copy)]
pub(super) enum Stage {
    /// Granted in the ledger; the node does not carry the grant yet.
    Granted,
    /// Carries its grant, cordoned; its drain has not started.
    Cordoned,
    /// Carries its grant, cordoned and drained.
    Drained,
    /// Carries its grant, but someone uncordoned it.
    Uncordoned,
    /// Told to reboot (`reboot-now`).
    Told,
}

pub(super) fn node_at(stage: Stage) -> (NodeView, Ledger) {
    let mut obj: Value = node_json("n", true);
    let mut drain = DrainState::NotStarted;
    match stage {
        Stage::Granted => annotate(&mut obj, "reboot-needed", "true"),
        Stage::Cordoned | Stage::Drained | Stage::Uncordoned => {
            annotate(&mut obj, "reboot-needed", "true");
            annotate(&mut obj, "reboot-grant", "g-n");
            obj["metadata"]["resourceVersion"] = "2".into();
            obj["spec"]["unschedulable"] = matches!(stage, Stage::Cordoned | Stage::Drained).into();
            if matches!(stage, Stage::Drained) {
                drain = DrainState::Drained;
            }
        }
        Stage::Told => {
            annotate(&mut obj, "reboot-now", "true");
            annotate(&mut obj, "reboot-grant", "g-n");
            obj["metadata"]["resourceVersion"] = "2".into();
            obj["spec"]["unschedulable"] = true.into();
        }
    }
    let view = NodeView {
        requested_at: Some(0),
        drain,
        ..view_of(facts(&obj))
    };
    let slot = Slot {
        grant: "g-n".into(),
        granted_at: "t".into(),
        node_version: Some("1".into()),
        zone: None,
    };
    let ledger = Ledger {
        id: "test/slots".into(),
        resource_version: Some("7".into()),
        slots: [("n".to_owned(), slot)].into(),
        paused: false,
        ..Ledger::default()
    };
    (view, ledger)
}

/// What the round does with the node at `stage`, drain on, under `hold` (the round's reading
/// of the pause and the window) with the pool's gates closed or not and a blocking pod on it
/// or not.
fn decide_at(stage: Stage, fence: Fence, finish_after_window: bool, blocked: bool) -> Decision {
    let (view, mut ledger) = node_at(stage);
    ledger.paused = fence.paused;
    let blocked: BTreeSet<String> = if blocked {
        BTreeSet::from(["n".to_owned()])
    } else {
        BTreeSet::new()
    };
    Round {
        drain_enabled: true,
        fence,
        finish_after_window,
        blocked: &blocked,
        ..base_round(&[view], &ledger)
    }
    .decide()
}

/// The step the node at `stage` takes when nothing holds it.
fn next_step(stage: Stage) -> Option<&'static str> {
    match stage {
        Stage::Granted => Some("Claim"),
        Stage::Cordoned => Some("StartDrain"),
        Stage::Drained => Some("Promote"),
        Stage::Uncordoned => Some("Recordon"),
        Stage::Told => None,
    }
}

fn steps(d: &Decision) -> Vec<&'static str> {
    d.node_actions
        .iter()
        .map(|a| match a {
            NodeAction::Claim { .. } => "Claim",
            NodeAction::Recordon { .. } => "Recordon",
            NodeAction::StartDrain { .. } => "StartDrain",
            NodeAction::Promote { .. } => "Promote",
            NodeAction::Complete { .. } => "Complete",
            NodeAction::Release { .. } => "Release",
            NodeAction::Refetch(_) => "Refetch",
            NodeAction::WarnInvalidRequest { .. } => "WarnInvalidRequest",
            NodeAction::Taint(_) => "Taint",
            NodeAction::Untaint(_) => "Untaint",
            NodeAction::Abandon { .. } => "Abandon",
            NodeAction::GiveUp { .. } => "GiveUp",
            NodeAction::ForgetAbandon { .. } => "ForgetAbandon",
        })
        .collect()
}

const STAGES: [Stage; 5] = [
    Stage::Granted,
    Stage::Cordoned,
    Stage::Drained,
    Stage::Uncordoned,
    Stage::Told,
];

#[test]
fn with_nothing_holding_every_granted_node_takes_its_next_step() {
    for stage in STAGES {
        let d = decide_at(stage, OPEN, true, false);
        assert_eq!(steps(&d), Vec::from_iter(next_step(stage)), "{stage:?}");
        assert!(d.held.is_empty(), "{stage:?}: {:?}", d.held);
    }
}

#[test]
fn a_pause_stops_every_granted_node_where_it_stands_and_says_so() {
    let paused = Fence {
        paused: true,
        ..OPEN
    };
    for stage in STAGES {
        let d = decide_at(stage, paused, true, false);
        assert!(
            steps(&d).is_empty(),
            "{stage:?}: moved while paused: {:?}",
            d.node_actions
        );
        let held: Vec<(String, Hold)> = next_step(stage)
            .map(|_| ("n".to_owned(), Hold::Paused))
            .into_iter()
            .collect();
        assert_eq!(d.held, held, "{stage:?}");
        assert!(d.ledger.is_empty(), "{stage:?}: the grant stays");
    }
}

#[test]
fn a_shut_gate_stops_every_granted_node_where_it_stands() {
    let unhealthy = Fence {
        gates_closed: true,
        ..OPEN
    };
    for stage in STAGES {
        let d = decide_at(stage, unhealthy, true, false);
        assert!(
            steps(&d).is_empty(),
            "{stage:?}: moved while a gate is shut: {:?}",
            d.node_actions
        );
        let d = decide_at(stage, OPEN, true, true);
        assert!(
            steps(&d).is_empty(),
            "{stage:?}: moved while a blocking pod runs on it: {:?}",
            d.node_actions
        );
        if next_step(stage).is_some() {
            assert_eq!(d.held, [("n".to_owned(), Hold::BlockingPod)], "{stage:?}");
        }
    }
}

#[test]
fn outside_the_window_a_grant_is_not_claimed_even_with_finish_after_window() {
    let closed = Fence {
        window_open: false,
        ..OPEN
    };
    let d = decide_at(Stage::Granted, closed, true, false);
    assert!(steps(&d).is_empty(), "claimed outside the window: {d:?}");
    assert_eq!(d.held, [("n".to_owned(), Hold::OutsideWindow)]);
    assert!(d.ledger.is_empty(), "the grant waits for the next window");
    // Once claimed, --finish-after-window decides: it goes on ...
    for stage in [Stage::Cordoned, Stage::Drained, Stage::Uncordoned] {
        let d = decide_at(stage, closed, true, false);
        assert_eq!(steps(&d), Vec::from_iter(next_step(stage)), "{stage:?}");
    }
    // ... or is given back until the next window.
    let d = decide_at(Stage::Drained, closed, false, false);
    assert_eq!(steps(&d), ["Release"]);
}

#[test]
fn a_grant_parked_by_a_closed_window_is_not_claimed_at_the_next_opening_while_paused() {
    let reopened_paused = Fence {
        paused: true,
        ..OPEN
    };
    let d = decide_at(Stage::Granted, reopened_paused, false, false);
    assert!(steps(&d).is_empty(), "claimed while paused: {d:?}");
    assert_eq!(d.held, [("n".to_owned(), Hold::Paused)]);
    let d = decide_at(Stage::Granted, OPEN, false, false);
    assert_eq!(steps(&d), ["Claim"]);
}

#[test]
fn the_fence_at_write_time_holds_what_the_round_decided_on_an_older_reading() {
    // The round decided on an open pool; at the moment of the writes the gate is shut.
    let mut actions = Vec::new();
    for stage in STAGES {
        actions.extend(decide_at(stage, OPEN, true, false).node_actions);
    }
    actions.push(NodeAction::Complete {
        node: "done".into(),
        grant: "g-done".into(),
    });
    let unhealthy = Fence {
        gates_closed: true,
        ..OPEN
    };
    let (kept, held) = unhealthy.hold_back(actions, &BTreeSet::new(), true);
    assert_eq!(
        kept,
        [NodeAction::Complete {
            node: "done".into(),
            grant: "g-done".into()
        }],
        "only what finishes a reboot goes on"
    );
    // One node here (at each of its stages): said once.
    assert_eq!(held, [("n".to_owned(), Hold::Unhealthy)]);
}
