//! Table tests of giving a node up (`reboot-abandon`): its protocol is cleared under the
//! node's version and grant, its slot released once no node carries the grant, then the
//! request forgotten; nothing fences it, and a node being given up is never granted.

use super::tests::{
    annotate, base_round, claimed, decide_at_clock_with, decide_held, granted, ledger_of,
    node_json, told_to_reboot, view,
};
use super::*;
use crate::effects;
use common::{AnnotationKeys, Transition};
use serde_json::{Value, json};

const WHO: &str = r#"{"by":"alice","reason":"disk dead"}"#;

/// `a`, granted g-a and told to reboot at 1000, did not come back: in progress, NotReady,
/// cordoned by the operator; an administrator gives it up.
fn lost_and_given_up() -> Value {
    let mut a = node_json("a", false);
    claimed(&mut a, "g-a");
    a["spec"]["unschedulable"] = true.into();
    annotate(&mut a, "reboot-cordoned", "true");
    annotate(&mut a, "reboot-in-progress", "true");
    annotate(&mut a, "reboot-boot-id", "a-boot-0");
    annotate(&mut a, "reboot-approved-at", "2026-01-01T00:00:01Z");
    annotate(&mut a, "reboot-last-completed", "2025-12-01T00:00:00Z");
    annotate(&mut a, "reboot-abandon", WHO);
    a
}

/// The write of `action` on `obj`, applied as the API server would, with a new version.
fn write(obj: &mut Value, action: &NodeAction) {
    let keys = AnnotationKeys::default();
    let facts = super::tests::facts(obj);
    let patch = effects::node_patch(action, &facts, &Transition::new(&keys), "t").expect("a write");
    json_patch::patch(obj, &patch).expect("the write applies to the node it was decided on");
    let version: u64 = obj["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|v| v.parse().ok())
        .unwrap_or_default();
    obj["metadata"]["resourceVersion"] = (version + 1).to_string().into();
}

fn round(a: &Value, ledger: &Ledger) -> Decision {
    let mut nodes = told_to_reboot(a);
    nodes[0].approved_at = Some(1000);
    decide_at_clock_with(&nodes, 1600, ledger)
}

#[test]
fn a_node_given_up_is_cleared_then_its_slot_released_then_the_request_forgotten() {
    let mut a = lost_and_given_up();
    let abandon = NodeAction::Abandon { node: "a".into() };

    // First the node: cleared and uncordoned, still holding its slot, so nothing new yet.
    let d = round(&a, &ledger_of(&["a"]));
    assert_eq!(d.node_actions, std::slice::from_ref(&abandon));
    assert!(d.ledger.release.is_empty(), "released while carried: {d:?}");
    assert!(
        granted(&d).is_empty(),
        "the overdue node still holds: {d:?}"
    );
    write(&mut a, &abandon);
    assert_eq!(
        a["metadata"]["annotations"],
        json!({"reboot-abandon": WHO, "reboot-last-completed": "2025-12-01T00:00:00Z"})
    );
    assert_eq!(a["spec"]["unschedulable"], json!(false), "our cordon stays");

    // Then the slot: released as given up (no Cancelled), and the pool goes on.
    let d = round(&a, &ledger_of(&["a"]));
    assert_eq!(d.ledger.release, ["a"]);
    assert_eq!(
        d.release_reasons,
        [("a".to_owned(), ReleaseReason::Abandoned)]
    );
    assert!(d.overdue.is_empty());
    assert_eq!(granted(&d), ["b", "c"]);

    // Last the request itself.
    let d = round(&a, &ledger_of(&[]));
    let forget = NodeAction::ForgetAbandon { node: "a".into() };
    assert!(d.node_actions.contains(&forget), "{d:?}");
    write(&mut a, &forget);
    assert_eq!(
        a["metadata"]["annotations"],
        json!({"reboot-last-completed": "2025-12-01T00:00:00Z"})
    );
}

#[test]
fn the_clearing_holds_only_on_the_version_and_grant_it_was_decided_on() {
    let mut a = lost_and_given_up();
    let keys = AnnotationKeys::default();
    let facts = super::tests::facts(&a);
    let patch = Transition::new(&keys).abandon(&facts).expect("a write");
    // An agent (or another replica) wrote meanwhile: the write fails and is decided again.
    a["metadata"]["resourceVersion"] = "3".into();
    assert!(json_patch::patch(&mut a.clone(), &patch).is_err());
    // An administrator's cordon stays theirs.
    let mut theirs = lost_and_given_up();
    theirs["metadata"]["annotations"]
        .as_object_mut()
        .unwrap()
        .remove("reboot-cordoned");
    let d = round(&theirs, &ledger_of(&["a"]));
    write(&mut theirs, &d.node_actions[0]);
    assert_eq!(theirs["spec"]["unschedulable"], json!(true));
}

#[test]
fn a_node_being_given_up_is_never_granted_and_its_request_is_cleared() {
    let mut a = node_json("a", true);
    annotate(&mut a, "reboot-needed", "true");
    annotate(&mut a, "reboot-abandon", "replaced");
    let d = decide_held(&[view(&a)], &Ledger::default(), (2, false), None, true);
    assert!(granted(&d).is_empty(), "{d:?}");
    assert_eq!(d.node_actions, [NodeAction::Abandon { node: "a".into() }]);
    write(&mut a, &d.node_actions[0]);
    assert_eq!(
        a["metadata"]["annotations"],
        json!({"reboot-abandon": "replaced"})
    );
}

#[test]
fn a_pause_a_closed_window_or_a_gate_does_not_hold_a_node_given_up() {
    for hold in [Hold::Paused, Hold::OutsideWindow, Hold::Unhealthy] {
        let a = lost_and_given_up();
        let d = decide_held(
            &[view(&a)],
            &ledger_of(&["a"]),
            (2, true),
            Some(hold),
            false,
        );
        assert_eq!(
            d.node_actions,
            [NodeAction::Abandon { node: "a".into() }],
            "{hold:?}"
        );
    }
}

#[test]
fn a_soaking_node_given_up_is_released_at_once() {
    let mut a = node_json("a", false);
    annotate(&mut a, "reboot-last-grant", "g-a");
    annotate(&mut a, "reboot-abandon", WHO);
    a["metadata"]["resourceVersion"] = "3".into();
    let (nodes, ledger) = ([view(&a)], ledger_of(&["a"]));
    let mut round = Round {
        min_ready: 1_000_000,
        ..base_round(&nodes, &ledger)
    };
    let d = round.decide();
    assert_eq!(
        d.release_reasons,
        [("a".to_owned(), ReleaseReason::Abandoned)]
    );
    assert!(d.not_ready_after_reboot.is_empty());
    let released = Ledger::default();
    round.ledger = &released;
    assert_eq!(
        round.decide().node_actions,
        [NodeAction::ForgetAbandon { node: "a".into() }]
    );
}

#[test]
fn another_ledgers_node_is_left_to_its_controller() {
    let mut a = lost_and_given_up();
    annotate(
        &mut a,
        "reboot-grant",
        "other/pool-b-slots/0123456789abcdef",
    );
    let d = round(&a, &ledger_of(&[]));
    assert!(
        !d.node_actions
            .iter()
            .any(|x| matches!(x, NodeAction::Abandon { .. })),
        "{d:?}"
    );
    assert_eq!(d.foreign, ["a"]);
}

/// `--give-up-after` (kured's `lockTtl`): a node told to reboot at 1000 that has not completed
/// by 1000 + the give-up time is given up by the controller, with the same request an
/// administrator writes; the round after carries it out as an administrator's. Never before
/// the time, never over a `reboot-abandon` already there (even one that says no), and never
/// once the reboot is proven.
#[test]
fn a_node_not_completed_within_give_up_after_is_given_up_as_an_administrator_would() {
    let mut a = lost_and_given_up();
    a["metadata"]["annotations"]
        .as_object_mut()
        .expect("annotations")
        .remove("reboot-abandon");
    let nodes = told_to_reboot(&a);
    let ledger = ledger_of(&["a"]);
    let at = |clock: u64, nodes: &[NodeView]| -> (Decision, Option<u64>) {
        let round = Round {
            budget: 3,
            clock,
            reboot_timeout: 600,
            give_up_after: 2_000,
            ..base_round(nodes, &ledger)
        };
        (round.decide(), round.next_look())
    };
    let give_up = NodeAction::GiveUp { node: "a".into() };
    assert!(!at(2_999, &nodes).0.node_actions.contains(&give_up));
    assert_eq!(at(2_000, &nodes).1, Some(1_000), "it wakes for it");
    assert_eq!(
        at(3_000, &nodes).0.node_actions,
        std::slice::from_ref(&give_up)
    );
    // The write is the administrator's request, from the controller.
    write(&mut a, &give_up);
    let written = a["metadata"]["annotations"]["reboot-abandon"]
        .as_str()
        .expect("reboot-abandon");
    assert_eq!(
        common::abandon::Abandon::read(written).by,
        common::events::CONTROLLER
    );
    let mut nodes = told_to_reboot(&a);
    nodes[0].approved_at = Some(1000);
    assert_eq!(
        at(3_000, &nodes).0.node_actions,
        [NodeAction::Abandon { node: "a".into() }]
    );
    // A Ready node is not given up: its slot would go to another node while it may still go
    // down.
    let mut ready = a.clone();
    ready["status"]["conditions"] = serde_json::json!([{"type": "Ready", "status": "True"}]);
    ready["metadata"]["annotations"]
        .as_object_mut()
        .expect("annotations")
        .remove("reboot-abandon");
    let nodes = told_to_reboot(&ready);
    assert!(!at(3_000, &nodes).0.node_actions.contains(&give_up));
    // An administrator's "no" stays theirs.
    let mut declined = lost_and_given_up();
    annotate(&mut declined, "reboot-abandon", "false");
    let nodes = told_to_reboot(&declined);
    assert!(!at(3_000, &nodes).0.node_actions.contains(&give_up));
}
