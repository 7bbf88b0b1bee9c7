//! Table tests of nodes whose drain keeps failing (`--drain-attempts`, `--max-blocked-nodes`):
//! set aside at the attempts and never before, the rest of the pool granted instead, the pool
//! stalled past the limit, a count typed by hand read as set aside, and the count forgotten
//! once the request is gone.

use super::tests::{annotate, base_round, granted, ledger_of, node_json, view};
use super::*;
use serde_json::Value;

const KEY: &str = "reboot-drain-failures";

fn requested(name: &str, failures: Option<&str>) -> NodeView {
    let mut obj = node_json(name, true);
    annotate(&mut obj, "reboot-needed", "true");
    if let Some(value) = failures {
        annotate(&mut obj, KEY, value);
    }
    view(&obj)
}

fn with(attempts: Option<u32>, most: Option<usize>) -> SetAside {
    SetAside {
        attempts,
        most,
        keep_cordoned: false,
        retiring: false,
    }
}

#[test]
fn a_node_is_set_aside_at_its_attempts_and_the_next_one_goes_instead() {
    // (recorded, attempts, set aside)
    let table: [(Option<&str>, Option<u32>, bool); 7] = [
        (None, Some(1), false),
        (Some("1; blocked by shop/db-0: PDB"), Some(2), false),
        (Some("2; blocked by shop/db-0: PDB"), Some(2), true),
        (Some("5"), Some(3), true),
        // Without --drain-attempts, a failing drain is retried for ever.
        (Some("9"), None, false),
        // Typed by hand: read as set aside, which does less.
        (Some("yes"), Some(3), true),
        (Some(""), Some(3), true),
    ];
    let ledger = Ledger::default();
    for (recorded, attempts, set_aside) in table {
        // `a` asked first, so it is granted first unless it is set aside.
        let mut first = requested("a", recorded);
        first.requested_at = Some(1);
        let mut second = requested("b", None);
        second.requested_at = Some(2);
        let nodes = [first, second];
        let d = Round {
            set_aside: with(attempts, None),
            ..base_round(&nodes, &ledger)
        }
        .decide();
        let case = format!("{recorded:?} with {attempts:?}: {d:?}");
        assert_eq!(granted(&d), [if set_aside { "b" } else { "a" }], "{case}");
        assert_eq!(
            d.set_aside,
            if set_aside { vec!["a"] } else { vec![] },
            "{case}"
        );
        assert_eq!(d.stalled, None, "{case}");
        let typed = recorded.filter(|r| set_aside && r.parse::<u32>().is_err() && !r.contains(';'));
        let unexpected: Vec<(String, Unexpected)> = typed
            .map(|t| ("a".to_owned(), Unexpected::DrainFailures(t.to_owned())))
            .into_iter()
            .collect();
        assert_eq!(d.unexpected, unexpected, "{case}");
    }
}

#[test]
fn more_nodes_set_aside_than_the_limit_stall_the_pool_and_reboots_under_way_go_on() {
    let nodes = [
        requested("a", Some("1")),
        requested("b", Some("1")),
        requested("c", None),
    ];
    let ledger = Ledger::default();
    // (most, stalled): two set aside.
    for (most, stalled) in [
        (None, false),
        (Some(2), false),
        (Some(1), true),
        (Some(0), true),
    ] {
        let d = Round {
            set_aside: with(Some(1), most),
            budget: 3,
            ..base_round(&nodes, &ledger)
        }
        .decide();
        assert_eq!(d.stalled.is_some(), stalled, "{most:?}: {d:?}");
        assert_eq!(d.set_aside, ["a", "b"], "{most:?}");
        if stalled {
            assert!(granted(&d).is_empty(), "{most:?}: {d:?}");
            assert_eq!(d.waiting, ["c"], "{most:?}");
        } else {
            assert_eq!(granted(&d), ["c"], "{most:?}");
        }
    }
}

#[test]
fn the_count_goes_with_the_request_and_stays_while_it_stands() {
    let ledger = Ledger::default();
    let mut withdrawn = node_json("n", true);
    annotate(&mut withdrawn, KEY, "2; blocked by shop/db-0: PDB");
    let nodes = [view(&withdrawn)];
    let d = Round {
        set_aside: with(Some(2), None),
        ..base_round(&nodes, &ledger)
    }
    .decide();
    assert_eq!(
        d.node_actions,
        [NodeAction::Release {
            node: "n".into(),
            reason: ReleaseReason::Cancelled
        }],
        "{d:?}"
    );
    assert!(d.set_aside.is_empty() && d.unexpected.is_empty(), "{d:?}");
    // Standing and set aside: nothing is written to it.
    let nodes = [requested("n", Some("2"))];
    let d = Round {
        set_aside: with(Some(2), None),
        ..base_round(&nodes, &ledger)
    }
    .decide();
    assert!(d.node_actions.is_empty(), "{d:?}");
}

/// The patch the release of a failed drain writes counts it, with what blocked it; the
/// completion and a withdrawn request remove the count.
#[test]
fn a_failed_drain_is_counted_in_its_release_and_forgotten_at_completion() {
    let keys = common::AnnotationKeys::default();
    let t = common::Transition::new(&keys);
    let mut obj = node_json("n", true);
    annotate(&mut obj, "reboot-needed", "true");
    annotate(&mut obj, "reboot-grant", "g-n");
    annotate(&mut obj, KEY, "1");
    let facts = super::tests::facts(&obj);
    let patch = t.release_failed_drain(&facts, &["shop/db-0: PDB".to_owned()], None);
    let mut after = obj.clone();
    json_patch::patch(&mut after, &patch).expect("the patch applies");
    assert_eq!(
        after["metadata"]["annotations"][KEY],
        "2; blocked by shop/db-0: PDB"
    );
    assert!(
        after["metadata"]["annotations"]
            .get("reboot-grant")
            .is_none()
    );
    assert_eq!(after["metadata"]["annotations"]["reboot-needed"], "true");
    // Withdrawn: the release forgets the count.
    let mut withdrawn = after.clone();
    withdrawn["metadata"]["annotations"]
        .as_object_mut()
        .unwrap()
        .remove("reboot-needed");
    let patch = t
        .release(&super::tests::facts(&withdrawn))
        .expect("a count to forget");
    json_patch::patch(&mut withdrawn, &patch).expect("the patch applies");
    assert!(
        withdrawn["metadata"]["annotations"].get(KEY).is_none(),
        "{withdrawn}"
    );
}

#[test]
fn a_node_set_aside_loses_the_waiting_taint_the_operator_put_on_it() {
    let ledger = Ledger::default();
    let mut obj = node_json("a", true);
    annotate(&mut obj, "reboot-needed", "true");
    annotate(&mut obj, KEY, "2; blocked by shop/db-0: PDB");
    annotate(&mut obj, "reboot-tainted", "reboot-pending ns/slots");
    let nodes = [view(&obj)];
    for (attempts, untainted) in [(Some(2), true), (Some(3), false)] {
        let d = Round {
            set_aside: with(attempts, None),
            ..base_round(&nodes, &ledger)
        }
        .decide();
        let untaint = d.node_actions.contains(&NodeAction::Untaint("a".into()));
        assert_eq!(untaint, untainted, "{attempts:?}: {d:?}");
    }
}

/// A node set aside as `--drain-attempts` has it, kept cordoned by the operator or not.
fn set_aside_cordoned(name: &str, unschedulable: bool) -> Value {
    let mut obj = node_json(name, true);
    obj["spec"]["unschedulable"] = unschedulable.into();
    annotate(&mut obj, "reboot-needed", "true");
    annotate(&mut obj, "reboot-cordoned", "true");
    annotate(&mut obj, KEY, "2; blocked by shop/db-0: PDB");
    obj["metadata"]["resourceVersion"] = "3".into();
    obj
}

fn keeping(keep_cordoned: bool) -> SetAside {
    SetAside {
        keep_cordoned,
        ..with(Some(2), None)
    }
}

/// `--keep-set-aside-cordoned`: the operator's cordon stays on a node set aside, whether its
/// slot is still in the ledger (the release was written, the ledger not yet) or not; off, or
/// once an administrator uncordoned it (the marker left behind), the cordon goes and the
/// request and its count stay.
#[test]
fn a_node_set_aside_keeps_the_operators_cordon_only_with_the_setting_and_while_cordoned() {
    let release = NodeAction::Release {
        node: "a".into(),
        reason: ReleaseReason::Cancelled,
    };
    // (keep, still cordoned, the cordon undone)
    for (keep, unschedulable, undone) in [
        (true, true, false),
        (false, true, true),
        (true, false, true),
    ] {
        let nodes = [view(&set_aside_cordoned("a", unschedulable))];
        for ledger in [Ledger::default(), ledger_of(&["a"])] {
            let d = Round {
                set_aside: keeping(keep),
                ..base_round(&nodes, &ledger)
            }
            .decide();
            let case = format!("keep {keep}, cordoned {unschedulable}, slots {ledger:?}: {d:?}");
            assert_eq!(d.node_actions.contains(&release), undone, "{case}");
            assert_eq!(d.set_aside, ["a"], "{case}");
            assert!(granted(&d).is_empty(), "{case}");
            if ledger.slots.is_empty() {
                assert!(d.ledger.release.is_empty(), "{case}");
            } else if !undone {
                // The slot goes; the cordon stays, and counts as the node's own.
                assert_eq!(d.ledger.release, ["a"], "{case}");
            }
        }
    }
}

/// Kept cordoned, a node set aside counts against the budget: with a budget of 1 nothing else
/// starts; with 2 the next node goes.
#[test]
fn a_node_kept_cordoned_counts_against_the_budget() {
    let ledger = Ledger::default();
    let mut next = requested("b", None);
    next.requested_at = Some(2);
    let nodes = [view(&set_aside_cordoned("a", true)), next];
    for (budget, granted_b) in [(1, false), (2, true)] {
        let d = Round {
            set_aside: keeping(true),
            budget,
            ..base_round(&nodes, &ledger)
        }
        .decide();
        assert_eq!(granted(&d) == ["b"], granted_b, "budget {budget}: {d:?}");
    }
}

/// The release of the failed drain that sets a node aside keeps the operator's cordon and its
/// marker with the setting, and only at the attempts; a node tried again and claimed keeps
/// the marker, so its completion uncordons it.
#[test]
fn the_release_that_sets_a_node_aside_keeps_the_cordon_and_the_claim_keeps_the_marker() {
    let keys = common::AnnotationKeys::default();
    let t = common::Transition::new(&keys);
    let mut obj = node_json("n", true);
    obj["spec"]["unschedulable"] = true.into();
    annotate(&mut obj, "reboot-needed", "true");
    annotate(&mut obj, "reboot-grant", "g-n");
    annotate(&mut obj, "reboot-cordoned", "true");
    // (recorded before, keep the cordon at, kept)
    for (recorded, keep_at, kept) in [
        (Some("1"), Some(2), true),
        (None, Some(2), false),
        (Some("1"), None, false),
    ] {
        let mut before = obj.clone();
        if let Some(count) = recorded {
            annotate(&mut before, KEY, count);
        }
        let patch = t.release_failed_drain(&super::tests::facts(&before), &[], keep_at);
        let mut after = before.clone();
        json_patch::patch(&mut after, &patch).expect("the patch applies");
        let case = format!("{recorded:?} at {keep_at:?}: {after:#}");
        assert_eq!(after["spec"]["unschedulable"], kept, "{case}");
        let marker = after["metadata"]["annotations"].get("reboot-cordoned");
        assert_eq!(marker.is_some(), kept, "{case}");
        assert!(
            after["metadata"]["annotations"]
                .get("reboot-grant")
                .is_none(),
            "{case}"
        );
    }
    // Tried again: the count removed, the node claimed while still cordoned by us.
    let mut tried = set_aside_cordoned("n", true);
    tried["metadata"]["annotations"]
        .as_object_mut()
        .unwrap()
        .remove(KEY);
    let patch = t.claim(&super::tests::facts(&tried), "g-n2", "3", false, "now");
    json_patch::patch(&mut tried, &patch).expect("the claim applies");
    assert_eq!(tried["metadata"]["annotations"]["reboot-cordoned"], "true");
    assert_eq!(tried["spec"]["unschedulable"], true);
}

/// A deleted pool (`retiring`) takes its kept cordon off a node it still selects (shared, as
/// a deleted pool's nodes are) and holds no grant; a pool that is not deleted, or a node that
/// is not its, keeps it.
#[test]
fn a_deleted_pool_takes_the_cordon_it_kept_off_its_nodes() {
    let release = NodeAction::Release {
        node: "a".into(),
        reason: ReleaseReason::Cancelled,
    };
    // (retiring, selected by the pool, the cordon undone)
    for (retiring, selected, undone) in [
        (true, true, true),
        (false, true, false),
        (true, false, false),
    ] {
        let mut node = view(&set_aside_cordoned("a", true));
        node.in_pool = false;
        node.shared = selected;
        let nodes = [node];
        let ledger = Ledger::default();
        let d = Round {
            set_aside: SetAside {
                retiring,
                ..keeping(true)
            },
            ..base_round(&nodes, &ledger)
        }
        .decide();
        let case = format!("retiring {retiring}, selected {selected}: {d:?}");
        assert_eq!(d.node_actions.contains(&release), undone, "{case}");
        assert!(granted(&d).is_empty(), "{case}");
    }
}
