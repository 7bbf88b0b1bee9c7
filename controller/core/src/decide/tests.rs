//! Table tests of the decision core (the property tests, several replicas against a model API
//! server, are the controller's `model` module).

use super::*;
use crate::ledger::Slot;
use common::test_util::NodeBuilder;
use common::{AnnotationKeys, NodeFacts};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

pub(super) fn node_json(name: &str, ready: bool) -> Value {
    NodeBuilder::new(name)
        .ready(ready)
        .boot_id(&format!("{name}-boot-0"))
        .json()
}

pub(super) use common::test_util::facts_of_json as facts;

pub(super) fn view(obj: &Value) -> NodeView {
    view_of(facts(obj))
}

/// The view every table test starts from: in the pool, Ready since 0, not requested, no drain,
/// no zone, read from the cache. A test sets what it is about with `..view_of(facts)`.
pub(crate) fn view_of(facts: NodeFacts) -> NodeView {
    let keys = AnnotationKeys::default();
    NodeView {
        state: facts.protocol(&keys),
        opt_out: keys.opt_out(Some(&facts.labels)),
        facts,
        in_pool: true,
        shared: false,
        zone: None,
        ready_since: Some(0),
        requested_at: None,
        not_before: None,
        drain: DrainState::NotStarted,
        approved_at: None,
        fresh: false,
        claimed_at: None,
        drained_at: None,
    }
}

pub(super) fn annotate(obj: &mut Value, key: &str, value: &str) {
    obj["metadata"]["annotations"][key] = value.into();
}

/// The identity of the ledger of these tests (`ledger_of`).
const LEDGER: &str = "ns/slots";

/// A ledger whose node `n` holds grant `g-n`, decided on the node's version 1.
pub(super) fn ledger_of(names: &[&str]) -> Ledger {
    Ledger {
        id: LEDGER.into(),
        resource_version: Some("7".into()),
        slots: names
            .iter()
            .map(|n| {
                let slot = Slot {
                    grant: format!("g-{n}"),
                    granted_at: "t".into(),
                    node_version: Some("1".into()),
                    zone: None,
                };
                ((*n).to_owned(), slot)
            })
            .collect(),
        paused: false,
        ..Ledger::default()
    }
}

pub(super) const OPEN: Fence = Fence {
    paused: false,
    window_open: true,
    gates_closed: false,
};

static NO_OTHERS: PoolCounts = PoolCounts {
    zones: BTreeMap::new(),
};
static NO_NODES: BTreeSet<String> = BTreeSet::new();
static NO_PREFLIGHT: BTreeMap<String, Preflight> = BTreeMap::new();

/// The round every table test starts from: `nodes` and `ledger`, a budget of one, the drain
/// off, the fence open, no delays, no soak, no reboot timeout, both clocks at 0, no other
/// nodes, nothing deleted, blocked or held. A test sets what it is about with `..base_round(..)`.
pub(crate) fn base_round<'a>(nodes: &'a [NodeView], ledger: &'a Ledger) -> Round<'a> {
    Round {
        nodes,
        others: &NO_OTHERS,
        ledger,
        deleted: &NO_NODES,
        budget: 1,
        zone_budget: None,
        concurrency: None,
        drain_enabled: false,
        now: 0,
        fence: OPEN,
        finish_after_window: true,
        min_ready: 0,
        clock: 0,
        reboot_timeout: u64::MAX,
        give_up_after: u64::MAX,
        delays: Delays::default(),
        blocked: &NO_NODES,
        preflight: &NO_PREFLIGHT,
        set_aside: SetAside::default(),
        rollout: RolloutRules::default(),
        window_fit: None,
    }
}

fn decide(nodes: &[NodeView], ledger: &Ledger, budget: usize, drain: bool) -> Decision {
    decide_held(nodes, ledger, (budget, drain), None, true)
}

pub(super) fn decide_held(
    nodes: &[NodeView],
    ledger: &Ledger,
    (budget, drain): (usize, bool),
    hold: Option<Hold>,
    finish_after_window: bool,
) -> Decision {
    Round {
        budget,
        drain_enabled: drain,
        fence: Fence {
            paused: hold == Some(Hold::Paused),
            window_open: hold != Some(Hold::OutsideWindow),
            gates_closed: hold == Some(Hold::Unhealthy),
        },
        finish_after_window,
        ..base_round(nodes, ledger)
    }
    .decide()
}

pub(super) fn granted(d: &Decision) -> Vec<String> {
    d.ledger.grant.iter().map(|g| g.node.clone()).collect()
}

pub(super) fn claimed(obj: &mut Value, grant: &str) {
    annotate(obj, "reboot-grant", grant);
    obj["metadata"]["resourceVersion"] = "2".into();
}

#[test]
fn grants_the_oldest_requests_up_to_the_budget() {
    let mut nodes: Vec<NodeView> = ["a", "b", "c"]
        .iter()
        .map(|n| {
            let mut obj = node_json(n, true);
            annotate(&mut obj, "reboot-needed", "true");
            view(&obj)
        })
        .collect();
    nodes[0].requested_at = Some(30);
    nodes[1].requested_at = Some(10);
    nodes[2].requested_at = Some(20);
    let d = decide(&nodes, &Ledger::default(), 2, false);
    assert_eq!(granted(&d), ["b", "c"]);
    assert_eq!(d.waiting, vec!["a".to_owned()]);
}

#[test]
fn a_not_ready_node_does_not_block_its_own_reboot() {
    let mut sick = node_json("sick", false);
    annotate(&mut sick, "reboot-needed", "true");
    let nodes = vec![view(&sick), view(&node_json("ok", true))];
    let d = decide(&nodes, &Ledger::default(), 1, false);
    assert_eq!(granted(&d), ["sick"]);
}

#[test]
fn another_unavailable_node_uses_up_the_budget() {
    let mut wants = node_json("wants", true);
    annotate(&mut wants, "reboot-needed", "true");
    let nodes = vec![view(&wants), view(&node_json("down", false))];
    let d = decide(&nodes, &Ledger::default(), 1, false);
    assert!(d.ledger.grant.is_empty());
    assert_eq!(d.waiting, vec!["wants".to_owned()]);
}

#[test]
fn a_granted_node_is_claimed_drained_and_promoted_under_its_grant() {
    let mut obj = node_json("n", true);
    annotate(&mut obj, "reboot-needed", "true");
    let ledger = ledger_of(&["n"]);
    let claim = |promote| NodeAction::Claim {
        node: "n".into(),
        grant: "g-n".into(),
        node_version: "1".into(),
        promote,
    };
    let d = decide(&[view(&obj)], &ledger, 1, false);
    assert_eq!(d.node_actions, vec![claim(true)]);
    let d = decide(&[view(&obj)], &ledger, 1, true);
    assert_eq!(d.node_actions, vec![claim(false)]);
    claimed(&mut obj, "g-n");
    obj["spec"]["unschedulable"] = true.into();
    let mut v = view(&obj);
    let grant = || ("n".to_owned(), "g-n".to_owned());
    let (node, g) = grant();
    assert_eq!(
        decide(&[v.clone()], &ledger, 1, true).node_actions,
        vec![NodeAction::StartDrain { node, grant: g }]
    );
    v.drain = DrainState::Running;
    assert!(
        decide(&[v.clone()], &ledger, 1, true)
            .node_actions
            .is_empty()
    );
    v.drain = DrainState::Drained;
    let (node, g) = grant();
    assert_eq!(
        decide(&[v], &ledger, 1, true).node_actions,
        vec![NodeAction::Promote { node, grant: g }]
    );
}

#[test]
fn a_grant_is_claimed_only_from_the_version_it_was_decided_on() {
    let mut obj = node_json("n", true);
    annotate(&mut obj, "reboot-needed", "true");
    obj["metadata"]["resourceVersion"] = "0".into();
    let ledger = ledger_of(&["n"]);
    let d = decide(&[view(&obj)], &ledger, 1, true);
    assert_eq!(
        d.node_actions,
        vec![NodeAction::Refetch("n".into())],
        "our copy is older"
    );
    obj["metadata"]["resourceVersion"] = "5".into();
    let d = decide(&[view(&obj)], &ledger, 1, true);
    assert!(d.node_actions.is_empty());
    assert_eq!(
        d.release_reasons,
        vec![("n".to_owned(), ReleaseReason::Unclaimed)]
    );
    assert_eq!(
        granted(&d),
        ["n"],
        "released and granted again in one write"
    );
}

#[test]
fn a_withdrawn_request_drops_the_grant_then_releases_the_slot() {
    let mut obj = node_json("n", true);
    obj["spec"]["unschedulable"] = true.into();
    annotate(&mut obj, "reboot-cordoned", "true");
    claimed(&mut obj, "g-n");
    let ledger = ledger_of(&["n"]);
    let d = decide(&[view(&obj)], &ledger, 1, true);
    assert_eq!(
        d.node_actions,
        vec![NodeAction::Release {
            node: "n".into(),
            reason: ReleaseReason::Cancelled
        }]
    );
    assert!(
        d.ledger.release.is_empty(),
        "slot is kept until the node no longer carries the grant"
    );
    let mut obj = node_json("n", true);
    obj["metadata"]["resourceVersion"] = "3".into();
    let d = decide(&[view(&obj)], &ledger, 1, true);
    assert_eq!(d.ledger.release, vec!["n".to_owned()]);
    assert_eq!(
        d.release_reasons,
        vec![("n".to_owned(), ReleaseReason::Cancelled)]
    );
    // The drain the cancel stopped may end (superseded) before the slot is released: still a
    // cancel, not a failed drain (which would hold the node back from its next request).
    let mut stopped = view(&obj);
    stopped.drain = DrainState::Failed;
    let d = decide(&[stopped], &ledger, 1, true);
    assert_eq!(
        d.release_reasons,
        vec![("n".to_owned(), ReleaseReason::Cancelled)]
    );
}

#[test]
fn a_slot_released_after_completion_is_not_a_cancel_and_needs_no_clock() {
    let mut obj = node_json("n", true);
    obj["metadata"]["resourceVersion"] = "9".into();
    annotate(&mut obj, "reboot-last-grant", "g-n");
    let ledger = ledger_of(&["n"]);
    let d = decide(&[view(&obj)], &ledger, 1, false);
    assert_eq!(
        d.release_reasons,
        vec![("n".to_owned(), ReleaseReason::Completed)]
    );
    annotate(&mut obj, "reboot-last-grant", "an-older-grant");
    let d = decide(&[view(&obj)], &ledger, 1, false);
    assert_eq!(
        d.release_reasons,
        vec![("n".to_owned(), ReleaseReason::Cancelled)]
    );
}

#[test]
fn completion_waits_until_the_kubelet_reports_the_proven_boot() {
    let ledger = ledger_of(&["n"]);
    let done = |ready: bool, kubelet_boot: &str| {
        let mut obj = node_json("n", ready);
        claimed(&mut obj, "g-n");
        annotate(&mut obj, "reboot-done", "true");
        annotate(&mut obj, "reboot-boot-id", "n-boot-1");
        obj["status"]["nodeInfo"]["bootID"] = kubelet_boot.into();
        decide(&[view(&obj)], &ledger, 1, false).node_actions
    };
    assert!(done(false, "n-boot-1").is_empty(), "not Ready");
    assert!(
        done(true, "n-boot-0").is_empty(),
        "Ready, but from before the reboot"
    );
    assert_eq!(
        done(true, "n-boot-1"),
        vec![NodeAction::Complete {
            node: "n".into(),
            grant: "g-n".into()
        }]
    );
}

#[test]
fn invalid_requests_are_warned_about_and_not_granted() {
    let mut obj = node_json("n", true);
    annotate(&mut obj, "reboot-needed", "banana");
    let d = decide(&[view(&obj)], &Ledger::default(), 1, false);
    assert!(d.ledger.grant.is_empty());
    assert_eq!(
        d.node_actions,
        vec![NodeAction::WarnInvalidRequest {
            node: "n".into(),
            value: "banana".into()
        }]
    );
}

#[test]
fn a_reboot_under_way_without_a_slot_is_recorded_whatever_the_budget() {
    let mut obj = node_json("n", true);
    annotate(&mut obj, "reboot-in-progress", "true");
    let others = [view(&node_json("x", false)), view(&obj)];
    let d = decide(&others, &Ledger::default(), 1, false);
    assert_eq!(granted(&d), ["n"]);
    // A grant of this ledger that the ledger lost is adopted, in a zone not known, from a
    // fresh read of the node.
    let lost = format!("{LEDGER}/g-lost");
    let mut carrying = node_json("m", true);
    annotate(&mut carrying, "reboot-grant", &lost);
    let read = |obj: &Value| NodeView {
        fresh: true,
        ..view(obj)
    };
    let d = decide(&[read(&carrying)], &ledger_of(&[]), 1, false);
    assert_eq!(d.ledger.grant[0].adopted.as_deref(), Some(lost.as_str()));
    assert_eq!(d.ledger.grant[0].zone, None);
    // From a cached copy, which may predate another replica's release of it (the node was
    // deleted and created again), it is read first.
    let d = decide(&[view(&carrying)], &ledger_of(&[]), 1, false);
    assert!(d.ledger.grant.is_empty(), "{:?}", d.ledger.grant);
    assert_eq!(d.node_actions, [NodeAction::Refetch("m".into())]);
    // So is one outside the pool: its own ledger's controller finishes it.
    let mut outside = read(&carrying);
    outside.in_pool = false;
    let d = decide(&[outside], &ledger_of(&[]), 1, false);
    assert_eq!(d.ledger.grant[0].adopted.as_deref(), Some(lost.as_str()));
    // A grant of an earlier version (its id names no ledger) that this ledger does not hold
    // may be another pool's: counted, never adopted (fail-safe).
    let mut unnamed = node_json("m", true);
    annotate(&mut unnamed, "reboot-grant", "g-lost");
    let d = decide(&[view(&unnamed)], &ledger_of(&[]), 1, false);
    assert!(d.ledger.grant.is_empty(), "{:?}", d.ledger.grant);
    assert_eq!(d.foreign, ["m"]);
}

#[test]
fn a_slot_holder_missing_from_the_cache_is_read_again_and_released_only_once_deleted() {
    let ledger = ledger_of(&["gone"]);
    let d = decide(&[], &ledger, 1, false);
    assert!(d.ledger.release.is_empty());
    assert_eq!(d.node_actions, vec![NodeAction::Refetch("gone".into())]);
    let deleted = BTreeSet::from(["gone".to_owned()]);
    let d = Round {
        deleted: &deleted,
        ..base_round(&[], &ledger)
    }
    .decide();
    assert_eq!(
        d.release_reasons,
        vec![("gone".to_owned(), ReleaseReason::NodeDeleted)]
    );
}

#[test]
fn a_slot_holder_that_leaves_the_pool_keeps_its_slot_and_counts() {
    let mut leaving = node_json("leaving", true);
    claimed(&mut leaving, "g-leaving");
    annotate(&mut leaving, "reboot-in-progress", "true");
    let mut v = view(&leaving);
    v.in_pool = false;
    let mut wants = node_json("wants", true);
    annotate(&mut wants, "reboot-needed", "true");
    let d = decide(&[v, view(&wants)], &ledger_of(&["leaving"]), 1, false);
    assert!(d.ledger.release.is_empty());
    assert!(
        d.ledger.grant.is_empty(),
        "the departed holder still uses the budget"
    );
    assert_eq!(d.waiting, vec!["wants".to_owned()]);
}

#[test]
fn a_failed_drain_gives_the_slot_back_and_waits_before_retrying() {
    let mut obj = node_json("n", true);
    annotate(&mut obj, "reboot-needed", "true");
    claimed(&mut obj, "g-n");
    let mut v = view(&obj);
    v.drain = DrainState::Failed;
    let d = decide(&[v.clone()], &ledger_of(&["n"]), 1, true);
    assert_eq!(
        d.node_actions,
        vec![NodeAction::Release {
            node: "n".into(),
            reason: ReleaseReason::DrainFailed
        }]
    );
    let mut released = node_json("n", true);
    annotate(&mut released, "reboot-needed", "true");
    released["metadata"]["resourceVersion"] = "3".into();
    let mut r = view(&released);
    r.drain = DrainState::Failed;
    let d = decide(&[r], &ledger_of(&["n"]), 1, true);
    assert_eq!(
        d.release_reasons,
        vec![("n".to_owned(), ReleaseReason::DrainFailed)]
    );
    let mut waiting = view(&released);
    waiting.not_before = Some(5);
    assert!(
        decide(&[waiting], &Ledger::default(), 1, true)
            .ledger
            .grant
            .is_empty()
    );
}

#[test]
fn a_hold_grants_nothing_and_says_who_waits_but_reboots_under_way_go_on() {
    let mut wants = node_json("wants", true);
    annotate(&mut wants, "reboot-needed", "true");
    let mut going = node_json("going", true);
    annotate(&mut going, "reboot-needed", "true");
    claimed(&mut going, "g-going");
    going["spec"]["unschedulable"] = true.into();
    let mut ledger = ledger_of(&["going"]);
    ledger.slots.get_mut("going").unwrap().grant = "g-going".into();
    let nodes = [view(&wants), view(&going)];
    for hold in [Hold::Paused, Hold::OutsideWindow, Hold::Unhealthy] {
        let d = decide_held(&nodes, &ledger, (2, false), Some(hold), true);
        assert!(d.ledger.grant.is_empty(), "{hold:?}");
        assert_eq!(d.waiting, ["wants"], "{hold:?}");
        let promote = NodeAction::Promote {
            node: "going".into(),
            grant: "g-going".into(),
        };
        if hold == Hold::OutsideWindow {
            // Claimed in the window: --finish-after-window lets it go on.
            assert_eq!(d.node_actions, [promote], "the claimed node goes on");
        } else {
            // A pause or a shut gate stops it where it stands (`fence_tests`).
            assert!(d.node_actions.is_empty(), "{hold:?}: {:?}", d.node_actions);
            assert_eq!(d.held, [("going".to_owned(), hold)]);
        }
    }
    let d = decide_held(&nodes, &ledger, (2, false), None, true);
    assert_eq!(granted(&d), ["wants"]);
}

/// An alert that fires mid-drain as the window closes must not push the reboot out of the
/// window: with --finish-after-window, a claimed node that a pause, a gate or a blocking pod
/// holds once the window is closed is given back until the next window; one that nothing
/// holds goes on, and one told to reboot already is left to finish.
#[test]
fn a_node_held_when_its_window_is_closed_is_given_back_whatever_finish_after_window_says() {
    let mut going = node_json("going", true);
    annotate(&mut going, "reboot-needed", "true");
    claimed(&mut going, "g-going");
    going["spec"]["unschedulable"] = true.into();
    let mut told = node_json("told", true);
    annotate(&mut told, "reboot-now", "true");
    claimed(&mut told, "g-told");
    told["spec"]["unschedulable"] = true.into();
    let mut ledger = ledger_of(&["going", "told"]);
    ledger.slots.get_mut("going").unwrap().grant = "g-going".into();
    ledger.slots.get_mut("told").unwrap().grant = "g-told".into();
    let nodes = [view(&going), view(&told)];
    let release = NodeAction::Release {
        node: "going".into(),
        reason: ReleaseReason::WindowClosed,
    };
    let blocked = BTreeSet::from(["going".to_owned()]);
    for (paused, gates_closed, blocking) in [
        (true, false, false),
        (false, true, false),
        (false, false, true),
    ] {
        let no_one = BTreeSet::new();
        let d = Round {
            budget: 2,
            drain_enabled: false,
            fence: Fence {
                paused,
                window_open: false,
                gates_closed,
            },
            blocked: if blocking { &blocked } else { &no_one },
            finish_after_window: true,
            ..base_round(&nodes, &ledger)
        }
        .decide();
        let case = (paused, gates_closed, blocking);
        assert_eq!(d.node_actions, std::slice::from_ref(&release), "{case:?}");
        // The same holds while the window is open only hold the node where it stands.
        let d = Round {
            budget: 2,
            drain_enabled: false,
            fence: Fence {
                paused,
                window_open: true,
                gates_closed,
            },
            blocked: if blocking { &blocked } else { &no_one },
            finish_after_window: true,
            ..base_round(&nodes, &ledger)
        }
        .decide();
        assert!(d.node_actions.is_empty(), "{case:?}: {:?}", d.node_actions);
    }
    // Nothing but the window: --finish-after-window lets it go on.
    let d = decide_held(&nodes, &ledger, (2, false), Some(Hold::OutsideWindow), true);
    assert_eq!(
        d.node_actions,
        [NodeAction::Promote {
            node: "going".into(),
            grant: "g-going".into()
        }]
    );
}

#[test]
fn without_finish_after_window_a_closed_window_gives_back_what_was_not_told_to_reboot() {
    let mut going = node_json("going", true);
    annotate(&mut going, "reboot-needed", "true");
    claimed(&mut going, "g-going");
    going["spec"]["unschedulable"] = true.into();
    let mut ledger = ledger_of(&["going", "granted"]);
    ledger.slots.get_mut("going").unwrap().grant = "g-going".into();
    let mut granted_only = node_json("granted", true);
    annotate(&mut granted_only, "reboot-needed", "true");
    let mut told = node_json("told", true);
    annotate(&mut told, "reboot-now", "true");
    claimed(&mut told, "g-told");
    told["spec"]["unschedulable"] = true.into();
    ledger.slots.insert(
        "told".into(),
        Slot {
            grant: "g-told".into(),
            granted_at: "t".into(),
            node_version: Some("1".into()),
            zone: None,
        },
    );
    let nodes = [view(&going), view(&granted_only), view(&told)];
    let d = decide_held(&nodes, &ledger, (2, true), Some(Hold::OutsideWindow), false);
    let release = NodeAction::Release {
        node: "going".into(),
        reason: ReleaseReason::WindowClosed,
    };
    // `granted` keeps its unclaimed grant for the next window; `told` reboots.
    assert_eq!(d.node_actions, std::slice::from_ref(&release));
    assert!(d.ledger.is_empty());
    // A pause during a closed window must not undo the window's rule: a node cordoned in the
    // window but not drained yet is still released when it closes.
    let d = Round {
        budget: 2,
        drain_enabled: true,
        fence: Fence {
            paused: true,
            window_open: false,
            gates_closed: false,
        },
        finish_after_window: false,
        ..base_round(&nodes, &ledger)
    }
    .decide();
    assert_eq!(d.node_actions, [release]);
    // With --finish-after-window, what was claimed in the window goes on; a grant not claimed
    // yet waits for the next one (it may have been written by a replica that decided before
    // the window closed).
    let d = decide_held(&nodes, &ledger, (2, true), Some(Hold::OutsideWindow), true);
    assert_eq!(
        d.node_actions,
        [NodeAction::StartDrain {
            node: "going".into(),
            grant: "g-going".into()
        }]
    );
    assert_eq!(d.held, [("granted".to_owned(), Hold::OutsideWindow)]);
}

#[test]
fn a_zone_budget_spreads_grants_across_zones_and_counts_a_not_ready_node_in_its_zone() {
    let requested = |name: &str, zone: &str, at: u64| {
        let mut obj = node_json(name, true);
        annotate(&mut obj, "reboot-needed", "true");
        let mut v = view(&obj);
        v.zone = Some(zone.into());
        v.requested_at = Some(at);
        v
    };
    // The two oldest requests are in zone a; zone c has a NotReady node of its own.
    let mut sick = view(&node_json("c-sick", false));
    sick.zone = Some("c".into());
    let nodes = [
        requested("a1", "a", 1),
        requested("a2", "a", 2),
        requested("b1", "b", 3),
        requested("c1", "c", 4),
        sick,
    ];
    let (ledger, deleted, blocked) = (Ledger::default(), BTreeSet::new(), BTreeSet::new());
    let others = PoolCounts::default();
    let preflight = BTreeMap::new();
    let round = |zone_budget| Round {
        others: &others,
        deleted: &deleted,
        budget: 4,
        zone_budget,
        blocked: &blocked,
        preflight: &preflight,
        ..base_round(&nodes, &ledger)
    };
    let d = round(Some(common::MaxUnavailable::Count(1))).decide();
    assert_eq!(
        granted(&d),
        ["a1", "b1"],
        "one per zone; zone c is full with c-sick"
    );
    assert_eq!(d.waiting, ["a2", "c1"]);
    assert_eq!(d.zone_full, ["a2".to_owned(), "c1".to_owned()].into());
    // Without a zone budget the order still alternates zones: b1 before a2.
    let d = round(None).decide();
    assert_eq!(
        granted(&d),
        ["a1", "b1", "a2"],
        "the budget of 4 counts c-sick too"
    );
    assert!(d.zone_full.is_empty());
}

#[test]
fn a_completed_node_keeps_its_slot_through_the_soak_and_holds_the_pool_when_not_ready() {
    // `done` completed grant g-done (it carries reboot-last-grant) and has moved on.
    let mut done = node_json("done", true);
    annotate(&mut done, "reboot-last-grant", "g-done");
    done["metadata"]["resourceVersion"] = "5".into();
    let mut ledger = ledger_of(&["done"]);
    ledger.slots.get_mut("done").unwrap().grant = "g-done".into();
    let mut wants = node_json("wants", true);
    annotate(&mut wants, "reboot-needed", "true");
    let (deleted, wants) = (BTreeSet::new(), view(&wants));
    let decide_at = |done: &NodeView, now: u64| {
        Round {
            deleted: &deleted,
            budget: 2,
            now,
            min_ready: 30,
            ..base_round(&[done.clone(), wants.clone()], &ledger)
        }
        .decide()
    };
    let mut soaking = view(&done);
    soaking.ready_since = Some(100);
    let d = decide_at(&soaking, 120);
    assert!(
        d.ledger.release.is_empty(),
        "Ready for 20 of 30: the slot stays"
    );
    assert_eq!(granted(&d), ["wants"], "a Ready soak only takes its slot");
    let d = decide_at(&soaking, 130);
    assert_eq!(d.ledger.release, ["done"], "soaked");
    let mut sick = view(&node_json("done", false));
    sick.state.last_grant = Some("g-done".into());
    sick.facts.resource_version = Some("5".into());
    sick.ready_since = None;
    let d = decide_at(&sick, 500);
    assert!(d.ledger.release.is_empty());
    assert_eq!(d.not_ready_after_reboot, ["done"]);
    assert!(
        d.ledger.grant.is_empty(),
        "no new reboot while it is NotReady"
    );
    assert_eq!(d.waiting, ["wants"]);
    // The administrator clears the soak: `kubectl annotate node done reboot-last-grant-`.
    let mut cleared = sick.clone();
    cleared.state.last_grant = None;
    cleared.state.last_completed = Some("2026-11-24T01:00:00Z".into());
    cleared.facts.resource_version = Some("6".into());
    let d = decide_at(&cleared, 500);
    assert_eq!(d.ledger.release, ["done"]);
    assert_eq!(
        d.release_reasons,
        [("done".to_owned(), ReleaseReason::SoakCleared)],
        "not a cancel: the reboot happened"
    );
    assert!(d.not_ready_after_reboot.is_empty());
}

#[test]
fn a_node_with_a_blocking_pod_waits_and_the_others_go_on() {
    let nodes: Vec<NodeView> = ["busy", "free"]
        .iter()
        .enumerate()
        .map(|(i, n)| {
            let mut obj = node_json(n, true);
            annotate(&mut obj, "reboot-needed", "true");
            let mut v = view(&obj);
            v.requested_at = Some(i as u64);
            v
        })
        .collect();
    let (ledger, deleted) = (Ledger::default(), BTreeSet::new());
    let blocked = BTreeSet::from(["busy".to_owned()]);
    let d = Round {
        deleted: &deleted,
        blocked: &blocked,
        ..base_round(&nodes, &ledger)
    }
    .decide();
    assert_eq!(
        granted(&d),
        ["free"],
        "the older request is blocked, not the budget"
    );
    assert_eq!(d.waiting, ["busy"]);
    assert_eq!(d.blocked, blocked);
}

fn decide_preflight(
    nodes: &[NodeView],
    ledger: &Ledger,
    held: &BTreeMap<String, Preflight>,
) -> Decision {
    Round {
        drain_enabled: true,
        preflight: held,
        ..base_round(nodes, ledger)
    }
    .decide()
}

#[test]
fn a_node_a_preflight_check_holds_is_not_granted_and_the_next_one_takes_the_slot() {
    let requested = |names: &[&str]| -> Vec<NodeView> {
        names
            .iter()
            .enumerate()
            .map(|(i, n)| {
                let mut obj = node_json(n, true);
                annotate(&mut obj, "reboot-needed", "true");
                let mut v = view(&obj);
                v.requested_at = Some(i as u64);
                v
            })
            .collect()
    };
    let nodes = requested(&["db", "lost", "free"]);
    let held = BTreeMap::from([
        ("db".to_owned(), Preflight::DisruptionBudget),
        ("lost".to_owned(), Preflight::NoAgent),
    ]);
    let d = decide_preflight(&nodes, &Ledger::default(), &held);
    assert_eq!(granted(&d), ["free"], "the two older requests are held");
    assert_eq!(d.waiting, ["db", "lost"]);
    assert_eq!(d.preflight, held);
    // The budget allows a disruption again: the oldest request comes back first.
    let d = decide_preflight(&nodes, &Ledger::default(), &BTreeMap::new());
    assert_eq!(granted(&d), ["db"]);
    assert!(d.preflight.is_empty());
    // Only a free slot is given away: with none, a held node waits as the others do.
    let mut busy = node_json("busy", true);
    claimed(&mut busy, "g-busy");
    annotate(&mut busy, "reboot-needed", "true");
    let mut full = requested(&["db", "free"]);
    full.push(view(&busy));
    let held = BTreeMap::from([("db".to_owned(), Preflight::DisruptionBudget)]);
    let d = decide_preflight(&full, &ledger_of(&["busy"]), &held);
    assert!(granted(&d).is_empty(), "{:?}", d.ledger);
    assert_eq!(d.waiting, ["db", "free"]);
}

#[test]
fn a_preflight_check_does_not_stop_a_node_granted_before_it() {
    // Granted on an older reading (another replica's, or before the budget went to 0): the
    // grant is claimed and the drain starts as usual; the check is advice for new grants.
    let mut obj = node_json("db", true);
    annotate(&mut obj, "reboot-needed", "true");
    let held = BTreeMap::from([("db".to_owned(), Preflight::DisruptionBudget)]);
    let d = decide_preflight(&[view(&obj)], &ledger_of(&["db"]), &held);
    assert!(
        matches!(d.node_actions.as_slice(), [NodeAction::Claim { node, .. }] if node == "db"),
        "{:?}",
        d.node_actions
    );
    claimed(&mut obj, "g-db");
    obj["spec"]["unschedulable"] = true.into();
    let d = decide_preflight(&[view(&obj)], &ledger_of(&["db"]), &held);
    assert!(
        matches!(d.node_actions.as_slice(), [NodeAction::StartDrain { node, .. }] if node == "db"),
        "{:?}",
        d.node_actions
    );
}

/// `a` was told to reboot at 1000 under grant g-a (the timeout is 600); `b` and `c` want
/// theirs. The budget (3) has room for both.
pub(super) fn told_to_reboot(a: &Value) -> Vec<NodeView> {
    let mut a = view(a);
    a.approved_at = Some(1000);
    let wants: Vec<NodeView> = ["b", "c"]
        .iter()
        .enumerate()
        .map(|(i, n)| {
            let mut obj = node_json(n, true);
            annotate(&mut obj, "reboot-needed", "true");
            let mut v = view(&obj);
            v.requested_at = Some(i as u64);
            v
        })
        .collect();
    [vec![a], wants].concat()
}

fn decide_at_clock(nodes: &[NodeView], clock: u64) -> Decision {
    decide_at_clock_with(nodes, clock, &ledger_of(&["a"]))
}

/// [`decide_at_clock`] with `ledger`.
pub(super) fn decide_at_clock_with(nodes: &[NodeView], clock: u64, ledger: &Ledger) -> Decision {
    Round {
        budget: 3,
        clock,
        reboot_timeout: 600,
        ..base_round(nodes, ledger)
    }
    .decide()
}

/// `a` rebooted into boot `a-boot-1` (the agent proved it, the kubelet reports it).
fn back_in_a_new_boot(ready: bool) -> Value {
    let mut a = node_json("a", ready);
    claimed(&mut a, "g-a");
    annotate(&mut a, "reboot-done", "true");
    annotate(&mut a, "reboot-boot-id", "a-boot-1");
    a["status"]["nodeInfo"]["bootID"] = "a-boot-1".into();
    a
}

#[test]
fn a_node_back_in_its_new_boot_but_not_ready_past_the_reboot_timeout_holds_new_grants() {
    let nodes = told_to_reboot(&back_in_a_new_boot(false));
    let d = decide_at_clock(&nodes, 1600);
    assert_eq!(d.overdue, ["a"]);
    assert!(
        granted(&d).is_empty(),
        "a bad kernel must not spread: {d:?}"
    );
    assert_eq!(d.waiting, ["b", "c"]);
    assert!(
        d.ledger.release.is_empty() && d.node_actions.is_empty(),
        "the failing node keeps its slot and cordon: {d:?}"
    );
}

#[test]
fn a_node_that_does_not_come_back_past_the_reboot_timeout_holds_new_grants() {
    for phase in [
        &[("reboot-now", "true")][..],
        &[
            ("reboot-in-progress", "true"),
            ("reboot-boot-id", "a-boot-0"),
        ],
    ] {
        let mut a = node_json("a", false);
        claimed(&mut a, "g-a");
        for (k, v) in phase {
            annotate(&mut a, k, v);
        }
        let d = decide_at_clock(&told_to_reboot(&a), 1600);
        assert_eq!(d.overdue, ["a"], "{phase:?}");
        assert!(granted(&d).is_empty(), "{phase:?}: {d:?}");
        assert_eq!(d.waiting, ["b", "c"]);
    }
}

/// A bad kernel stops the rollout of its own pool: a node of another pool (another
/// controller's grant, outside this pool's selector) that is past its reboot timeout is that
/// pool's to hold, not this one's.
#[test]
fn another_pools_overdue_node_does_not_hold_this_pool() {
    let mut a = node_json("a", false);
    claimed(&mut a, "other/pool-a-slots/0123456789abcdef");
    annotate(&mut a, "reboot-in-progress", "true");
    annotate(&mut a, "reboot-boot-id", "a-boot-0");
    let mut nodes = told_to_reboot(&a);
    nodes[0].in_pool = false;
    let d = decide_at_clock_with(&nodes, 1600, &ledger_of(&[]));
    assert!(
        d.overdue.is_empty(),
        "another pool's overdue node held this pool: {:?}",
        d.overdue
    );
    assert_eq!(granted(&d), ["b", "c"]);
}

/// A node relabelled out of the pool mid-reboot, whose slot a ledger rebuilt (or recreated)
/// without it does not hold: the round adopts its grant and must also be held by it.
#[test]
fn an_overdue_node_relabelled_out_of_the_pool_and_adopted_holds_new_grants() {
    let mut a = node_json("a", false);
    claimed(&mut a, "ns/slots/0123456789abcdef");
    annotate(&mut a, "reboot-in-progress", "true");
    annotate(&mut a, "reboot-boot-id", "a-boot-0");
    let mut nodes = told_to_reboot(&a);
    nodes[0].in_pool = false;
    nodes[0].fresh = true;
    let d = decide_at_clock_with(&nodes, 1600, &ledger_of(&[]));
    assert_eq!(d.overdue, ["a"]);
    let adopted: Vec<&str> = d.ledger.grant.iter().map(|g| g.node.as_str()).collect();
    assert_eq!(adopted, ["a"], "only the adoption: {d:?}");
}

#[test]
fn within_the_reboot_timeout_a_reboot_under_way_does_not_hold_the_pool() {
    let nodes = told_to_reboot(&back_in_a_new_boot(false));
    let d = decide_at_clock(&nodes, 1599);
    assert!(d.overdue.is_empty());
    assert_eq!(granted(&d), ["b", "c"], "the budget of 3 has room for both");
}

#[test]
fn once_the_late_node_completes_grants_resume() {
    // Ready in its new boot, long after the timeout: completed, and the others go on.
    let nodes = told_to_reboot(&back_in_a_new_boot(true));
    let d = decide_at_clock(&nodes, 5000);
    assert!(d.overdue.is_empty());
    assert_eq!(
        d.node_actions,
        [NodeAction::Complete {
            node: "a".into(),
            grant: "g-a".into()
        }]
    );
    assert_eq!(granted(&d), ["b", "c"]);
    // After the completion: its slot is released (no soak) and nothing holds the pool.
    let mut a = node_json("a", true);
    annotate(&mut a, "reboot-last-grant", "g-a");
    a["metadata"]["resourceVersion"] = "3".into();
    let d = decide_at_clock(&told_to_reboot(&a), 5000);
    assert_eq!(d.ledger.release, ["a"]);
    assert_eq!(granted(&d), ["b", "c"]);
}

/// `a` rebooted from `a-boot-0`, as the agent recorded it before rebooting, and its agent has
/// not proved anything since (its pod has not started again, or never will); the kubelet
/// reports `kubelet_boot`.
fn in_progress_with_the_kubelet_in(
    kubelet_boot: &str,
    recorded: Option<&str>,
    ready: bool,
) -> Value {
    let mut a = node_json("a", ready);
    claimed(&mut a, "g-a");
    annotate(&mut a, "reboot-in-progress", "true");
    if let Some(recorded) = recorded {
        annotate(&mut a, "reboot-boot-id", recorded);
    }
    a["status"]["nodeInfo"]["bootID"] = kubelet_boot.into();
    a
}

#[test]
fn the_kubelets_report_of_a_new_boot_completes_a_reboot_without_the_agents_proof() {
    let complete = [NodeAction::Complete {
        node: "a".into(),
        grant: "g-a".into(),
    }];
    let back = in_progress_with_the_kubelet_in("a-boot-1", Some("a-boot-0"), true);
    let d = decide_at_clock(&told_to_reboot(&back), 1100);
    assert_eq!(d.node_actions, complete);
    // Long after the reboot timeout too: it is back, not overdue.
    let d = decide_at_clock(&told_to_reboot(&back), 5000);
    assert!(d.overdue.is_empty());
    assert_eq!(d.node_actions, complete);
    // The recorded id with blanks around it is the same boot.
    let back = in_progress_with_the_kubelet_in("a-boot-1", Some(" a-boot-0\n"), true);
    assert_eq!(
        decide_at_clock(&told_to_reboot(&back), 1100).node_actions,
        complete
    );
}

#[test]
fn without_a_new_boot_ready_and_a_recorded_one_the_kubelet_proves_nothing() {
    for (what, node) in [
        (
            "the boot the agent recorded (not rebooted yet)",
            in_progress_with_the_kubelet_in("a-boot-0", Some("a-boot-0"), true),
        ),
        (
            "a new boot, NotReady",
            in_progress_with_the_kubelet_in("a-boot-1", Some("a-boot-0"), false),
        ),
        (
            "a new boot, but no boot id recorded before the reboot",
            in_progress_with_the_kubelet_in("a-boot-1", None, true),
        ),
        (
            "a new boot, but an empty one recorded",
            in_progress_with_the_kubelet_in("a-boot-1", Some(" "), true),
        ),
    ] {
        let d = decide_at_clock(&told_to_reboot(&node), 1100);
        assert!(d.node_actions.is_empty(), "{what}: {d:?}");
        // Past the reboot timeout it holds the pool, as any reboot not back.
        let d = decide_at_clock(&told_to_reboot(&node), 1600);
        assert_eq!(d.overdue, ["a"], "{what}");
        assert!(granted(&d).is_empty(), "{what}: {d:?}");
    }
}

#[test]
fn an_overdue_node_given_up_by_hand_releases_its_slot_and_grants_resume() {
    // The administrator removed reboot-done and reboot-boot-id from the NotReady node.
    let mut a = node_json("a", false);
    claimed(&mut a, "g-a");
    a["metadata"]["resourceVersion"] = "3".into();
    let d = decide_at_clock(&told_to_reboot(&a), 5000);
    assert!(d.overdue.is_empty());
    assert_eq!(
        d.node_actions,
        [NodeAction::Release {
            node: "a".into(),
            reason: ReleaseReason::Cancelled
        }]
    );
    // a still counts as unavailable (NotReady, its slot held until released): room for both.
    assert_eq!(granted(&d), ["b", "c"]);
}

/// Two replicas whose copies of a node lag each other could flip the slot's grant id back and
/// forth, each re-keying to what its own stale copy carries, and abort the drain at every flip
/// (docs/src/concepts.md, "A grant says whose it is"). The slot is re-keyed only on a fresh read of
/// the node: a cached copy that carries another grant than the ledger is read again first.
#[test]
fn a_slot_is_re_keyed_only_on_a_fresh_read_of_the_node() {
    let ledger = ledger_of(&["n"]);
    // Another grant of this very ledger (one of another replica's writes).
    let other = format!("{LEDGER}/other");
    let mut obj = node_json("n", true);
    annotate(&mut obj, "reboot-needed", "true");
    obj["spec"]["unschedulable"] = true.into();
    claimed(&mut obj, &other);
    let cached = view(&obj);
    let d = decide(std::slice::from_ref(&cached), &ledger, 1, true);
    assert!(
        d.ledger.is_empty(),
        "re-keyed the slot from a cached copy: {:?}",
        d.ledger
    );
    assert_eq!(d.node_actions, vec![NodeAction::Refetch("n".into())]);
    // Read again and still carrying its grant: the node is the truth, the slot follows it.
    let read = NodeView {
        fresh: true,
        claimed_at: None,
        drained_at: None,
        ..cached
    };
    let d = decide(&[read], &ledger, 1, true);
    assert_eq!(d.ledger.release, ["n"]);
    assert_eq!(d.ledger.grant, [Grant::adopt("n", &other, Some("2"))]);
    assert!(d.node_actions.is_empty(), "{:?}", d.node_actions);
}

// Relabels (docs/src/concepts.md, "The pool"): a slot counts against the zone and the ledger it was
// granted in until it is released.

/// A round with a zone budget of one node per zone and a pool budget of `budget`.
fn decide_zoned(nodes: &[NodeView], ledger: &Ledger, budget: usize) -> Decision {
    Round {
        budget,
        zone_budget: Some(common::MaxUnavailable::Count(1)),
        drain_enabled: true,
        ..base_round(nodes, ledger)
    }
    .decide()
}

fn requested_in(name: &str, zone: Option<&str>, at: u64) -> NodeView {
    let mut obj = node_json(name, true);
    annotate(&mut obj, "reboot-needed", "true");
    let mut v = view(&obj);
    v.zone = zone.map(str::to_owned);
    v.requested_at = Some(at);
    v
}

#[test]
fn a_slot_relabelled_into_another_zone_still_counts_against_the_zone_it_was_granted_in() {
    // `a1` is granted in zone a, and the ledger records that zone.
    let d = decide_zoned(&[requested_in("a1", Some("a"), 1)], &Ledger::default(), 4);
    assert_eq!(granted(&d), ["a1"]);
    assert_eq!(d.ledger.grant[0].zone.as_deref(), Some("a"));
    let ledger = Ledger {
        resource_version: Some("8".into()),
        slots: d.ledger.apply(&BTreeMap::new(), "t", || "g-a1".to_owned()),
        ..Ledger::default()
    };
    // Claimed and draining, then relabelled into zone b by an administrator.
    let mut obj = node_json("a1", true);
    annotate(&mut obj, "reboot-needed", "true");
    claimed(&mut obj, "g-a1");
    obj["spec"]["unschedulable"] = true.into();
    let mut draining = view(&obj);
    draining.zone = Some("b".into());
    let a2 = requested_in("a2", Some("a"), 2);
    let d = decide_zoned(&[draining, a2], &ledger, 4);
    assert!(
        granted(&d).is_empty(),
        "zone a granted {:?} while the slot granted in zone a is still held (relabelled to b)",
        granted(&d)
    );
    assert_eq!(d.waiting, ["a2"]);
    assert!(d.zone_full.contains("a2"));
}

#[test]
fn with_zone_budgets_a_node_without_a_zone_label_is_not_granted() {
    let zoneless = requested_in("late", None, 1);
    let d = decide_zoned(&[zoneless], &Ledger::default(), 4);
    assert!(
        granted(&d).is_empty(),
        "a node without a zone label was granted {:?}: it formed a zone of its own",
        granted(&d)
    );
    assert_eq!(d.waiting, ["late"]);
    // Without a zone budget zones only order the grants: it is granted.
    let d = decide(
        &[requested_in("late", None, 1)],
        &Ledger::default(),
        4,
        true,
    );
    assert_eq!(granted(&d), ["late"]);
}

/// A grant of the ledger `other/pool-a-slots`, as its controller names it.
const FOREIGN: &str = "other/pool-a-slots/0123456789abcdef";

#[test]
fn a_node_relabelled_into_this_pool_with_another_ledgers_grant_is_counted_but_never_driven() {
    // It was granted by pool a, and is draining when it is relabelled into this pool.
    let mut obj = node_json("moved", true);
    annotate(&mut obj, "reboot-needed", "true");
    claimed(&mut obj, FOREIGN);
    obj["spec"]["unschedulable"] = true.into();
    let moved = view(&obj);
    let wants = requested_in("wants", None, 1);
    let d = decide(&[moved.clone(), wants], &Ledger::default(), 1, true);
    assert!(
        d.ledger.grant.is_empty(),
        "adopted or granted {:?}: the node holds another ledger's grant",
        d.ledger.grant
    );
    assert!(
        d.node_actions.iter().all(|a| a.node() != "moved"),
        "drove another ledger's node: {:?}",
        d.node_actions
    );
    assert_eq!(d.waiting, ["wants"], "it still counts against the budget");
    // Rebooting, and later proven: still not this controller's to complete.
    let mut obj = node_json("moved", true);
    claimed(&mut obj, FOREIGN);
    annotate(&mut obj, "reboot-done", "true");
    annotate(&mut obj, "reboot-boot-id", "moved-boot-0");
    let d = decide(&[view(&obj)], &Ledger::default(), 1, true);
    assert!(
        d.ledger.grant.is_empty() && d.node_actions.is_empty(),
        "{d:?}"
    );
}

/// kured's `--concurrency`: at most that many nodes hold a slot of the ledger at once, though
/// the budget, which counts every unavailable node, has room for more; the others wait and
/// are told why.
#[test]
fn concurrency_limits_the_operators_own_reboots_below_the_budget() {
    let requested: Vec<Value> = ["a", "b", "c"]
        .iter()
        .map(|name| {
            let mut node = node_json(name, true);
            annotate(&mut node, "reboot-needed", "true");
            node
        })
        .collect();
    let nodes: Vec<NodeView> = requested.iter().map(view).collect();
    let round = |ledger: &Ledger, concurrency| {
        Round {
            budget: 3,
            concurrency,
            ..base_round(&nodes, ledger)
        }
        .decide()
    };
    let empty = Ledger::default();
    assert_eq!(granted(&round(&empty, None)).len(), 3, "the budget alone");
    let d = round(&empty, Some(1));
    assert_eq!(granted(&d), ["a"]);
    assert_eq!(
        d.concurrency_full,
        BTreeSet::from(["b".to_owned(), "c".to_owned()])
    );
    // A slot held already (a reboot under way, or soaking) counts.
    let held = ledger_of(&["z"]);
    let d = round(&held, Some(2));
    assert_eq!(granted(&d), ["a"]);
    let d = round(&held, Some(1));
    assert!(granted(&d).is_empty());
    assert_eq!(d.waiting, ["a", "b", "c"]);
}

/// A node that another pool selects too is granted by neither, yet while an administrator's
/// cordon makes it unavailable it counts against this pool's budget (and its zone's): with a
/// budget of 1, the pool's own requested node waits. Before, it counted against no pool, and a
/// second control-plane node was granted while the first was down.
#[test]
fn a_node_another_pool_selects_too_counts_against_this_pools_budgets() {
    let cordoned = NodeBuilder::new("cp-1").ready(true).unschedulable(true);
    let shared = NodeView {
        in_pool: false,
        shared: true,
        zone: Some("a".into()),
        ..view_of(cordoned.facts())
    };
    let waiting = requested_in("cp-2", Some("b"), 1);
    let nodes = [shared.clone(), waiting.clone()];
    let d = decide(&nodes, &Ledger::default(), 1, false);
    assert!(
        granted(&d).is_empty(),
        "granted {:?} beside a cordoned shared node",
        granted(&d)
    );
    assert!(granted(&decide(&nodes, &Ledger::default(), 2, false)) == ["cp-2"]);
    // Its zone's budget too.
    let zoned = [shared.clone(), requested_in("cp-3", Some("a"), 1)];
    assert!(granted(&decide_zoned(&zoned, &Ledger::default(), 4)).is_empty());
    // Requested itself, it is granted by neither pool.
    let mut asked = node_json("cp-1", true);
    annotate(&mut asked, "reboot-needed", "true");
    let asked = NodeView {
        in_pool: false,
        shared: true,
        requested_at: Some(0),
        ..view(&asked)
    };
    assert!(granted(&decide(&[asked], &Ledger::default(), 3, false)).is_empty());
    // Counted in the pool's counts of nodes outside the protocol as well.
    let not_ours = NodeView {
        shared: false,
        ..shared
    };
    let d = decide(&[not_ours, waiting], &Ledger::default(), 1, false);
    assert_eq!(
        granted(&d),
        ["cp-2"],
        "a node no peer shares and outside the pool is not counted"
    );
}
