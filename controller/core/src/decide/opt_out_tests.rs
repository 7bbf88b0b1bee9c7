//! Table tests of what an administrator types by hand on a node: an opt-out label
//! (`reboot-disabled`) opts the node out whatever its value but `false`, a give-up
//! (`reboot-abandon`) that reads as no gives nothing up, and a node that no longer waits for a
//! slot of this pool loses the waiting taint the operator put on it (and only that one).

use super::tests::{annotate, base_round, claimed, granted, ledger_of, node_json, view};
use super::*;
use crate::effects;
use common::{AnnotationKeys, RebootMarks, Transition};
use serde_json::{Value, json};

/// Every value of `reboot-disabled` the tests type, and whether it opts the node out.
const TYPED: [(Option<&str>, bool); 10] = [
    (None, false),
    (Some("false"), false),
    (Some("FALSE"), false),
    (Some("False"), false),
    (Some("true"), true),
    (Some(""), true),
    (Some("True"), true),
    (Some("yes"), true),
    (Some("1"), true),
    (Some("no"), true),
];

fn label(obj: &mut Value, key: &str, value: &str) {
    obj["metadata"]["labels"][key] = value.into();
}

fn requested(typed: Option<&str>) -> Value {
    let mut obj = node_json("n", true);
    annotate(&mut obj, "reboot-needed", "true");
    if let Some(value) = typed {
        label(&mut obj, "reboot-disabled", value);
    }
    obj
}

#[test]
fn any_opt_out_value_but_false_keeps_a_requested_node_from_a_grant() {
    for (typed, opts_out) in TYPED {
        let d = base_round(&[view(&requested(typed))], &Ledger::default()).decide();
        assert_eq!(granted(&d).is_empty(), opts_out, "{typed:?}: {d:?}");
        assert_eq!(
            d.opted_out,
            if opts_out {
                vec!["n".to_owned()]
            } else {
                vec![]
            },
            "{typed:?}"
        );
        assert!(d.waiting.is_empty() || !opts_out, "{typed:?} waits: {d:?}");
        // A value that is neither `true` nor `false` is said, as it was read.
        let unexpected: Vec<(String, Unexpected)> = typed
            .filter(|t| opts_out && *t != "true")
            .map(|t| ("n".to_owned(), Unexpected::OptOut(t.to_owned())))
            .into_iter()
            .collect();
        assert_eq!(d.unexpected, unexpected, "{typed:?}");
    }
    // Not requested: nothing to say about the label.
    let mut idle = node_json("n", true);
    label(&mut idle, "reboot-disabled", "yes");
    let d = base_round(&[view(&idle)], &Ledger::default()).decide();
    assert!(d.unexpected.is_empty() && d.opted_out.is_empty(), "{d:?}");
}

#[test]
fn an_abandon_that_reads_as_no_gives_nothing_up() {
    for typed in ["false", "no", "0", "No", " FALSE "] {
        // Requested: granted as if the annotation were not there.
        let mut obj = requested(None);
        annotate(&mut obj, "reboot-abandon", typed);
        let d = base_round(&[view(&obj)], &Ledger::default()).decide();
        assert_eq!(granted(&d), ["n"], "{typed:?}: {d:?}");
        assert!(
            !d.node_actions
                .iter()
                .any(|a| matches!(a, NodeAction::Abandon { .. })),
            "{typed:?} gave the node up: {d:?}"
        );
        assert_eq!(
            d.unexpected,
            [("n".to_owned(), Unexpected::Abandon(typed.to_owned()))],
            "{typed:?}"
        );

        // Granted and claimed: driven on, its request kept.
        claimed(&mut obj, "g-n");
        obj["spec"]["unschedulable"] = true.into();
        let d = base_round(&[view(&obj)], &ledger_of(&["n"])).decide();
        assert_eq!(
            d.node_actions,
            [NodeAction::Promote {
                node: "n".into(),
                grant: "g-n".into()
            }],
            "{typed:?}"
        );
    }
}

const TAINT: &str = "example.com/reboot-pending";

/// The controller's marks: the waiting taint, recorded as put there by the tests' ledger.
fn marks() -> RebootMarks {
    RebootMarks {
        prefer_no_schedule_taint: Some(TAINT.into()),
        ..RebootMarks::default()
    }
    .of_ledger(ledger_of(&[]).id)
}

/// The write of `action` on `obj` by the controller (with the waiting taint), applied as the
/// API server would, with a new version.
fn write(obj: &mut Value, action: &NodeAction) {
    let keys = AnnotationKeys::default();
    let marks = marks();
    let t = Transition::new(&keys).with_marks(&marks);
    let facts = super::tests::facts(obj);
    let Some(patch) = effects::node_patch(action, &facts, &t, "t") else {
        return;
    };
    json_patch::patch(obj, &patch).expect("the write applies to the node it was decided on");
    let version: u64 = obj["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|v| v.parse().ok())
        .unwrap_or_default();
    obj["metadata"]["resourceVersion"] = (version + 1).to_string().into();
}

/// A round of a paused pool on `obj` (in the pool or not), its writes applied to it (the
/// waiting taint too, as the shell asks for it).
fn paused_round(obj: &mut Value, in_pool: bool) {
    let v = NodeView {
        in_pool,
        ..view(obj)
    };
    let nodes = [v];
    let mut d = Round {
        fence: Fence {
            paused: true,
            ..super::tests::OPEN
        },
        ..base_round(&nodes, &ledger_of(&[]))
    }
    .decide();
    let keys = AnnotationKeys::default();
    let marks = marks();
    let t = Transition::new(&keys).with_marks(&marks);
    let facts = super::tests::facts(obj);
    effects::taint_waiting(&mut d, |_| t.taint_waiting(&facts).is_some());
    for action in &d.node_actions {
        write(obj, action);
    }
}

fn taints(obj: &Value) -> Value {
    obj["spec"]["taints"].clone()
}

/// A requested node that waited (paused) and was tainted.
fn tainted_while_waiting() -> Value {
    let mut obj = requested(None);
    paused_round(&mut obj, true);
    assert_eq!(
        taints(&obj),
        json!([{"key": TAINT, "effect": "PreferNoSchedule"}]),
        "tainted while it waits"
    );
    obj
}

fn ours_gone(obj: &Value, what: &str) {
    let ours = json!({"key": TAINT, "effect": "PreferNoSchedule"});
    let left = obj["spec"]["taints"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(!left.contains(&ours), "{what}: our taint stays: {obj:#}");
    assert!(
        obj["metadata"]["annotations"]["reboot-tainted"].is_null(),
        "{what}: the marker stays: {obj:#}"
    );
}

#[test]
fn a_node_that_stops_waiting_loses_the_waiting_taint() {
    // Still waiting: the taint stays.
    let mut obj = tainted_while_waiting();
    paused_round(&mut obj, true);
    assert_eq!(
        taints(&obj),
        json!([{"key": TAINT, "effect": "PreferNoSchedule"}])
    );

    let mut invalid = tainted_while_waiting();
    annotate(&mut invalid, "reboot-needed", "yes");
    paused_round(&mut invalid, true);
    ours_gone(&invalid, "a request become invalid");

    for typed in ["true", "", "yes"] {
        let mut opted_out = tainted_while_waiting();
        label(&mut opted_out, "reboot-disabled", typed);
        paused_round(&mut opted_out, true);
        ours_gone(&opted_out, &format!("opted out with {typed:?}"));
    }

    let mut left = tainted_while_waiting();
    paused_round(&mut left, false);
    ours_gone(&left, "out of the pool");
}

/// Out of the pool, a node may wait in another pool, whose controller puts its own taint there
/// (the same key, maybe): only the one this pool's controller put there goes, else the two
/// would take it off and put it back for ever.
#[test]
fn out_of_the_pool_only_the_taint_of_this_pools_controller_goes() {
    for (record, ours) in [
        (format!("{TAINT} ns/other-pool"), false),
        // Written without the ledger: it may be another pool's.
        (TAINT.to_owned(), false),
        (format!("{TAINT} ns/slots"), true),
    ] {
        let mut obj = tainted_while_waiting();
        annotate(&mut obj, "reboot-tainted", &record);
        paused_round(&mut obj, false);
        let left = obj["spec"]["taints"].as_array().map_or(0, Vec::len);
        assert_eq!(left == 0, ours, "{record:?}: {obj:#}");
    }
}

#[test]
fn the_administrators_own_taint_of_that_key_stays_when_the_node_stops_waiting() {
    let mut obj = requested(None);
    obj["spec"]["taints"] = json!([{"key": TAINT, "effect": "PreferNoSchedule"}]);
    paused_round(&mut obj, true);
    assert!(
        obj["metadata"]["annotations"]["reboot-tainted"].is_null(),
        "theirs was taken for ours: {obj:#}"
    );
    label(&mut obj, "reboot-disabled", "yes");
    paused_round(&mut obj, true);
    paused_round(&mut obj, false);
    assert_eq!(
        taints(&obj),
        json!([{"key": TAINT, "effect": "PreferNoSchedule"}]),
        "the administrator's taint was removed"
    );
}
