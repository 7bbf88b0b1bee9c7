//! The next look of a round: each time-based predicate of the decision core, and only those
//! that can still turn.

use crate::decide::{Decision, NodeView, Round, tests::base_round};
use crate::ledger::Ledger;
use common::test_util::NodeBuilder;
use serde_json::Value;

fn node(name: &str, ready: bool, annotations: &[(&str, &str)]) -> Value {
    NodeBuilder::new(name)
        .resource_version("5")
        .ready(ready)
        .annotation_map()
        .annotations(annotations)
        .boot_id(&format!("{name}-boot-1"))
        .json()
}

/// The decision tests' view, Ready since 0 when Ready, requested at 0.
fn view(obj: &Value) -> NodeView {
    let view = crate::decide::tests::view(obj);
    NodeView {
        ready_since: (view.facts.readiness == common::Readiness::Ready).then_some(0),
        requested_at: Some(0),
        ..view
    }
}

/// `holders` hold grants `g-<name>`, decided on the nodes' version 1.
fn ledger(holders: &[&str]) -> Ledger {
    let mut ledger = crate::decide::tests::ledger_of(holders);
    ledger.id = "test/slots".into();
    for slot in ledger.slots.values_mut() {
        slot.granted_at = "2026-11-25T00:00:00Z".into();
    }
    ledger
}

/// A round at `now` (and `clock`, its wall clock) with a soak of 1,000 ms and a reboot timeout
/// of 600,000 ms.
fn with_round<T>(
    (nodes, ledger): (&[NodeView], &Ledger),
    now: u64,
    clock: u64,
    f: impl FnOnce(&Round<'_>) -> T,
) -> T {
    f(&Round {
        budget: 3,
        drain_enabled: true,
        now,
        min_ready: 1_000,
        clock,
        reboot_timeout: 600_000,
        ..base_round(nodes, ledger)
    })
}

fn next_look(nodes: &[NodeView], ledger: &Ledger, now: u64, clock: u64) -> Option<u64> {
    with_round((nodes, ledger), now, clock, |r| r.next_look())
}

fn decide(nodes: &[NodeView], ledger: &Ledger, now: u64, clock: u64) -> Decision {
    with_round((nodes, ledger), now, clock, |r| r.decide())
}

/// `done` completed its grant and soaks, Ready since 100.
fn soaking() -> NodeView {
    let mut done = view(&node("done", true, &[("reboot-last-grant", "g-done")]));
    done.ready_since = Some(100);
    done
}

#[test]
fn a_soak_is_looked_at_when_it_ends() {
    let slots = ledger(&["done"]);
    assert_eq!(
        next_look(&[soaking()], &slots, 300, 0),
        Some(800),
        "Ready since 100 with a soak of 1,000: the slot is free at 1,100"
    );
    // Not a moment early, not a moment late: the slot is released by a round then.
    assert!(
        decide(&[soaking()], &slots, 1_099, 0)
            .ledger
            .release
            .is_empty()
    );
    assert_eq!(
        decide(&[soaking()], &slots, 1_100, 0).ledger.release,
        ["done"]
    );
    assert_eq!(
        next_look(&[soaking()], &slots, 1_100, 0),
        None,
        "soaked: this round releases it, nothing is left to wait for"
    );
    let mut sick = view(&node("done", false, &[("reboot-last-grant", "g-done")]));
    sick.ready_since = None;
    assert_eq!(
        next_look(&[sick], &slots, 300, 0),
        None,
        "NotReady: only an event (Ready again) changes anything"
    );
}

#[test]
fn a_failed_drain_is_looked_at_when_it_may_be_retried() {
    let mut retried = view(&node("retried", true, &[("reboot-needed", "true")]));
    retried.not_before = Some(31_000);
    let none = Ledger::default();
    assert_eq!(next_look(&[retried.clone()], &none, 1_000, 0), Some(30_000));
    assert!(
        decide(&[retried.clone()], &none, 30_999, 0)
            .ledger
            .grant
            .is_empty()
    );
    assert_eq!(
        decide(&[retried.clone()], &none, 31_000, 0)
            .ledger
            .grant
            .len(),
        1
    );
    assert_eq!(
        next_look(&[retried], &Ledger::default(), 31_000, 0),
        None,
        "due now: this round grants it"
    );
}

#[test]
fn a_reboot_is_looked_at_when_it_becomes_overdue_and_not_after() {
    let mut told = view(&node(
        "told",
        true,
        &[("reboot-grant", "g-told"), ("reboot-now", "true")],
    ));
    told.approved_at = Some(1_000_000);
    let slots = ledger(&["told"]);
    assert_eq!(
        next_look(&[told.clone()], &slots, 5, 1_200_000),
        Some(400_000),
        "told at 1,000,000 with a timeout of 600,000: overdue at 1,600,000"
    );
    assert!(
        decide(&[told.clone()], &slots, 5, 1_599_999)
            .overdue
            .is_empty()
    );
    assert_eq!(
        decide(&[told.clone()], &slots, 5, 1_600_000).overdue,
        ["told"]
    );
    assert_eq!(
        next_look(&[told], &slots, 5, 1_600_000),
        None,
        "overdue already: only its completion (an event) changes anything"
    );
    // Back in its new boot and Ready: completed by this round, it never becomes overdue.
    let mut back = view(&node(
        "told",
        true,
        &[
            ("reboot-grant", "g-told"),
            ("reboot-done", "true"),
            ("reboot-boot-id", "told-boot-1"),
        ],
    ));
    back.approved_at = Some(1_000_000);
    assert_eq!(next_look(&[back], &slots, 5, 1_200_000), None);
}

#[test]
fn the_earliest_of_them_is_the_next_look() {
    let mut told = view(&node(
        "told",
        true,
        &[("reboot-grant", "g-told"), ("reboot-now", "true")],
    ));
    told.approved_at = Some(1_000_000);
    let mut retried = view(&node("retried", true, &[("reboot-needed", "true")]));
    retried.not_before = Some(31_000);
    let nodes = [told, soaking(), retried];
    assert_eq!(
        next_look(&nodes, &ledger(&["told", "done"]), 300, 1_200_000),
        Some(800)
    );
}

#[test]
fn requests_waiting_for_a_slot_or_idle_nodes_need_no_look() {
    let wants = view(&node("wants", true, &[("reboot-needed", "true")]));
    let idle = view(&node("idle", true, &[]));
    assert_eq!(next_look(&[wants, idle], &Ledger::default(), 300, 0), None);
}
