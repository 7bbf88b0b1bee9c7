//! The decision core and state in a format this build does not know (a newer operator wrote
//! it): never misread, never driven, and the budget holds.

use super::tests::{annotate, claimed, decide_held, granted, ledger_of, node_json, view};
use super::*;

fn decide(nodes: &[NodeView], ledger: &Ledger, budget: usize) -> Decision {
    decide_held(nodes, ledger, (budget, false), None, true)
}

fn requested(name: &str) -> serde_json::Value {
    let mut obj = node_json(name, true);
    annotate(&mut obj, "reboot-needed", "true");
    obj
}

/// A ledger that cannot be read is not an empty one: nothing is granted (though the budget
/// would allow it), nothing released, no node driven, even one whose reboot is proven.
#[test]
fn a_ledger_in_an_unknown_format_holds_everything() {
    let mut done = node_json("done", true);
    claimed(&mut done, "g-done");
    annotate(&mut done, "reboot-done", "true");
    annotate(&mut done, "reboot-boot-id", "done-boot-0");
    let nodes = [view(&requested("a")), view(&requested("b")), view(&done)];
    let ledger = Ledger {
        unknown_format: Some("2".into()),
        ..ledger_of(&[])
    };
    let decision = decide(&nodes, &ledger, 10);
    assert_eq!(
        decision,
        Decision {
            ledger_unknown_format: true,
            ..Decision::default()
        }
    );
    // The same nodes with the ledger read: granted and completed as usual.
    let known = decide(&nodes, &ledger_of(&["done"]), 10);
    assert_eq!(granted(&known), ["a", "b"]);
    assert!(
        known
            .node_actions
            .iter()
            .any(|a| matches!(a, NodeAction::Complete { node, .. } if node == "done"))
    );
}

/// A node a newer operator wrote is left alone and counts as unavailable: with a budget of 1,
/// nobody else is granted while it is there, and its slot is neither driven nor released.
#[test]
fn a_node_in_an_unknown_format_is_not_driven_and_counts_against_the_budget() {
    let mut newer = requested("newer");
    annotate(&mut newer, "reboot-protocol-version", "2");
    let nodes = [view(&newer), view(&requested("b"))];
    let decision = decide(&nodes, &ledger_of(&[]), 1);
    assert_eq!(decision.unknown_format, ["newer"]);
    assert!(granted(&decision).is_empty(), "{decision:?}");
    assert_eq!(decision.waiting, ["b"]);
    // Holding our slot with its reboot proven: no completion, no release.
    let mut holder = node_json("newer", true);
    claimed(&mut holder, "g-newer");
    annotate(&mut holder, "reboot-done", "true");
    annotate(&mut holder, "reboot-boot-id", "newer-boot-0");
    annotate(&mut holder, "reboot-protocol-version", "3");
    let decision = decide(&[view(&holder)], &ledger_of(&["newer"]), 1);
    assert_eq!(decision.unknown_format, ["newer"]);
    assert!(decision.node_actions.is_empty(), "{decision:?}");
    assert!(decision.ledger.is_empty(), "{decision:?}");
}

/// Today's nodes: no version (written before versions existed) or version 1 read as always.
#[test]
fn a_node_without_a_version_or_with_the_current_one_is_read_as_always() {
    let mut current = requested("current");
    annotate(&mut current, "reboot-protocol-version", "1");
    let nodes = [view(&current), view(&requested("unversioned"))];
    let decision = decide(&nodes, &ledger_of(&[]), 2);
    assert!(decision.unknown_format.is_empty());
    assert_eq!(granted(&decision), ["current", "unversioned"]);
}
