//! The classification of nodes, on plain data.

use super::*;
use crate::fixtures::{self, at, event, node_input, slot};
use crate::metrics::Reading;
use common::test_util::NodeBuilder;
use common::{MaxUnavailable, events::AGENT, ledger::Slot};

const NOW: &str = "2026-01-01T10:00:00Z";

/// A Ready, schedulable node with these annotations.
fn node(name: &str, annotations: &[(&str, &str)]) -> NodeInput {
    node_input(
        NodeBuilder::new(name)
            .annotations(annotations)
            .boot_id("b1")
            .facts(),
    )
}

fn with_events(mut node: NodeInput, events: &[NodeEvent]) -> NodeInput {
    node.events = events.to_vec();
    node
}

/// The pool with `--max-unavailable=1`.
fn pool(nodes: Vec<NodeInput>, slots: &[(&str, Slot)], paused: bool) -> PoolInput {
    fixtures::pool(nodes, slots, paused, 1)
}

fn classify(input: &PoolInput) -> Status {
    status(input, &AnnotationKeys::default(), at(NOW))
}

fn of<'s>(status: &'s Status, name: &str) -> &'s NodeStatus {
    status.nodes.iter().find(|n| n.name == name).unwrap()
}

const NEEDED: (&str, &str) = ("reboot-needed", "true");

#[test]
fn idle_invalid_and_requested_without_a_word_from_the_controller() {
    let input = pool(
        vec![
            node("a", &[("reboot-last-completed", "2026-01-01T09:00:00Z")]),
            node("b", &[("reboot-needed", "yes")]),
            node("c", &[NEEDED]),
        ],
        &[],
        false,
    );
    let s = classify(&input);
    assert_eq!(of(&s, "a").state, State::Idle);
    assert_eq!(
        of(&s, "a").detail,
        "last reboot 1h ago (2026-01-01T09:00:00Z)"
    );
    assert_eq!(of(&s, "b").state, State::Invalid);
    let c = of(&s, "c");
    assert_eq!((c.state, c.reason), (State::Requested, None));
    assert_eq!(c.detail, "waiting for the controller's next decision");
    assert_eq!(s.budget.source, BudgetSource::Flag);
    assert_eq!(
        (s.budget.max_unavailable, s.budget.unavailable),
        (Some(1), 0)
    );
}

#[test]
fn each_waiting_reason_comes_from_the_controllers_latest_event() {
    let cases = [
        ("Requested", WaitReason::BudgetFull),
        ("ZoneBudgetFull", WaitReason::ZoneBudgetFull),
        ("ZoneLabelMissing", WaitReason::NoZoneLabel),
        ("OutsideWindow", WaitReason::OutsideWindow),
        ("AlertsFiring", WaitReason::AlertsFiring),
        ("PrometheusUnreachable", WaitReason::PrometheusUnreachable),
        ("BlockingPod", WaitReason::BlockingPod),
        ("DrainBlocked", WaitReason::DrainTimedOut),
        ("NoAgent", WaitReason::NoAgent),
        ("DisruptionBudget", WaitReason::DisruptionBudget),
        ("SetAside", WaitReason::SetAside),
        ("UnexpectedDrainFailuresValue", WaitReason::SetAside),
        ("Stalled", WaitReason::Stalled),
    ];
    for (reason, expected) in cases {
        let n = with_events(
            node("a", &[NEEDED]),
            &[
                event("Rebooted", CONTROLLER, "2026-01-01T08:00:00Z", "old"),
                event(
                    reason,
                    CONTROLLER,
                    "2026-01-01T09:59:00Z",
                    "reboot requested; why",
                ),
                // Another component's Event says nothing about the wait.
                event("Rebooted", AGENT, "2026-01-01T09:59:30Z", "x"),
            ],
        );
        let s = classify(&pool(vec![n], &[], false));
        let a = of(&s, "a");
        assert_eq!(
            (a.state, a.reason),
            (State::Waiting, Some(expected)),
            "{reason}"
        );
        assert_eq!(a.detail, format!("{}: why", expected.as_str()));
        assert_eq!(a.seconds, Some(60), "{reason}");
        assert_eq!(a.event.as_ref().unwrap().reason, reason);
    }
}

/// Whatever an administrator typed as `reboot-disabled`, only `false` (any case) lets the
/// node be rebooted; the status says how an unexpected value was read.
#[test]
fn any_opt_out_value_but_false_shows_the_node_opted_out() {
    for (typed, opted_out) in [
        ("true", true),
        ("", true),
        ("True", true),
        ("yes", true),
        ("1", true),
        ("false", false),
        ("FALSE", false),
    ] {
        let mut requested = node("a", &[NEEDED]);
        requested
            .labels
            .insert("reboot-disabled".into(), typed.into());
        let mut idle = node("b", &[]);
        idle.labels.insert("reboot-disabled".into(), typed.into());
        let s = classify(&pool(vec![requested, idle], &[], false));
        let (a, b) = (of(&s, "a"), of(&s, "b"));
        assert_eq!(
            (a.opted_out, b.opted_out),
            (opted_out, opted_out),
            "{typed:?}"
        );
        assert_eq!(
            a.reason == Some(WaitReason::OptedOut),
            opted_out,
            "{typed:?}: {}",
            a.detail
        );
        if opted_out {
            let shown = match typed {
                "true" => "reboot-disabled=true".to_owned(),
                _ => format!("reboot-disabled={typed:?}"),
            };
            assert!(a.detail.contains(&shown), "{typed:?}: {}", a.detail);
            assert!(b.detail.contains(&shown), "{typed:?}: {}", b.detail);
        }
        if opted_out && typed != "true" {
            assert!(
                a.detail.contains("read as opted out"),
                "{typed:?}: {}",
                a.detail
            );
        }
    }
}

#[test]
fn a_wait_event_before_the_last_step_is_from_an_earlier_wait() {
    let n = with_events(
        node("a", &[NEEDED]),
        &[
            event("OutsideWindow", CONTROLLER, "2026-01-01T09:00:00Z", "w"),
            event("Rebooted", CONTROLLER, "2026-01-01T09:10:00Z", "done"),
        ],
    );
    let s = classify(&pool(vec![n], &[], false));
    assert_eq!(of(&s, "a").state, State::Requested);
}

#[test]
fn the_pause_and_the_label_are_known_now_and_outrank_the_events() {
    let paused_event = event(
        "Paused",
        CONTROLLER,
        "2026-01-01T09:59:50Z",
        "reboot requested; the pool is paused",
    );
    let mut opted = node("b", &[NEEDED]);
    opted.labels.insert("reboot-disabled".into(), "true".into());
    let older = with_events(
        node("c", &[NEEDED]),
        &[event(
            "Requested",
            CONTROLLER,
            "2026-01-01T09:00:00Z",
            "budget",
        )],
    );
    let input = pool(
        vec![
            with_events(node("a", &[NEEDED]), std::slice::from_ref(&paused_event)),
            opted,
            older,
        ],
        &[],
        true,
    );
    let s = classify(&input);
    let a = of(&s, "a");
    assert_eq!(
        (a.state, a.reason),
        (State::Waiting, Some(WaitReason::Paused))
    );
    assert_eq!(a.detail, "paused: the pool is paused");
    let b = of(&s, "b");
    assert_eq!(b.reason, Some(WaitReason::OptedOut));
    assert!(
        b.opted_out && b.detail.contains("reboot-disabled=true"),
        "{}",
        b.detail
    );
    let c = of(&s, "c");
    assert_eq!(
        c.reason,
        Some(WaitReason::Paused),
        "the pause, whatever older Event"
    );
    assert!(
        c.detail.contains("reboot-paused=true on the ledger Lease"),
        "{}",
        c.detail
    );
    assert!(s.pool.paused);
    assert_eq!(s.estimate.held_by, Some(WaitReason::Paused));
    assert_eq!(s.estimate.remaining, 2, "the opted-out node is not queued");

    // Resumed: a Paused Event is stale, and says nothing.
    let s = classify(&pool(
        vec![with_events(node("a", &[NEEDED]), &[paused_event])],
        &[],
        false,
    ));
    assert_eq!(of(&s, "a").state, State::Requested);
}

#[test]
fn a_full_budget_is_seen_without_an_event() {
    let mut cordoned = node("x", &[]);
    cordoned.facts.unschedulable = true;
    let s = classify(&pool(vec![cordoned, node("a", &[NEEDED])], &[], false));
    assert_eq!(s.budget.unavailable, 1);
    let a = of(&s, "a");
    assert_eq!(
        (a.state, a.reason),
        (State::Waiting, Some(WaitReason::BudgetFull))
    );
}

#[test]
fn draining_with_the_pods_left_and_since_its_grant() {
    let mut n = with_events(
        node(
            "a",
            &[NEEDED, ("reboot-grant", "g1"), ("reboot-cordoned", "true")],
        ),
        &[event(
            "Draining",
            CONTROLLER,
            "2026-01-01T09:59:40Z",
            "cordoned; evicting its pods",
        )],
    );
    n.facts.unschedulable = true;
    n.pods_left = Some(vec!["default/web-1".into(), "default/web-2".into()]);
    let s = classify(&pool(
        vec![n],
        &[("a", slot("g1", "2026-01-01T09:59:38Z"))],
        false,
    ));
    let a = of(&s, "a");
    assert_eq!(a.state, State::Draining);
    assert_eq!(a.seconds, Some(20));
    assert_eq!(
        a.detail,
        "cordoned; 2 pods left: default/web-1, default/web-2"
    );
    assert!(a.holds_slot && a.unavailable && a.cordoned);
    assert_eq!(s.budget.slots_in_use, 1);
}

#[test]
fn rebooting_counts_from_the_go_ahead_of_this_grant() {
    let events = [
        // The last reboot's go-ahead, before this grant: not this one's.
        event("RebootApproved", CONTROLLER, "2026-01-01T08:00:00Z", "old"),
        event(
            "RebootApproved",
            CONTROLLER,
            "2026-01-01T09:59:00Z",
            "slot granted and node drained",
        ),
        event("Rebooting", AGENT, "2026-01-01T09:59:01Z", "rebooting"),
    ];
    let grant = [("a", slot("g1", "2026-01-01T09:58:00Z"))];
    let cases = [
        (vec![("reboot-now", "true")], Step::RebootNow),
        (vec![("reboot-in-progress", "true")], Step::InProgress),
        (vec![("reboot-done", "true")], Step::Proven),
    ];
    for (mut annotations, step) in cases {
        annotations.push(("reboot-grant", "g1"));
        let n = with_events(node("a", &annotations), &events);
        let s = classify(&pool(vec![n], &grant, false));
        let a = of(&s, "a");
        assert_eq!((a.state, a.step), (State::Rebooting, Some(step)));
        assert_eq!(a.seconds, Some(60), "{step:?}");
        assert_eq!(a.since.as_deref(), Some("2026-01-01T09:59:00Z"));
        // The controller's go-ahead of this grant, at every step: the agent's Events are not
        // read.
        assert_eq!(
            a.event.as_ref().map(|e| e.reason.as_str()),
            Some("RebootApproved"),
            "{step:?}"
        );
    }
    // No Event of this grant (lost): since the grant.
    let n = with_events(node("a", &[("reboot-now", "true")]), &events[..1]);
    let s = classify(&pool(vec![n], &grant, false));
    assert_eq!(of(&s, "a").seconds, Some(120));
}

/// Any ServiceAccount that may write Events in their namespace (the agents' may) can write
/// one that names the controller's reason: only the controller's own Events are read.
#[test]
fn an_event_with_the_controllers_reason_from_another_component_is_not_shown() {
    let grant = [("a", slot("g1", "2026-01-01T09:58:00Z"))];
    for component in [AGENT, "kubelet", ""] {
        let n = with_events(
            node("a", &[("reboot-done", "true"), ("reboot-grant", "g1")]),
            &[
                event(
                    "RebootApproved",
                    CONTROLLER,
                    "2026-01-01T09:59:00Z",
                    "slot granted and node drained",
                ),
                event(
                    "Rebooted",
                    component,
                    "2026-01-01T09:59:30Z",
                    "rebooted; nothing to worry about",
                ),
            ],
        );
        let s = classify(&pool(vec![n], &grant, false));
        let shown = of(&s, "a").event.as_ref().map(|e| e.message.as_str());
        assert_eq!(
            shown,
            Some("slot granted and node drained"),
            "{component:?}"
        );
    }
}

#[test]
fn a_soaking_node_that_is_not_ready_holds_the_pool() {
    let done = [
        ("reboot-last-completed", "2026-01-01T09:59:30Z"),
        ("reboot-last-grant", "g1"),
    ];
    let mut sick = node("a", &done);
    sick.facts.readiness = Readiness::NotReady;
    let waiting = node("b", &[NEEDED]);
    let s = classify(&pool(
        vec![sick, waiting],
        &[("a", slot("g1", "2026-01-01T09:59:00Z"))],
        false,
    ));
    let a = of(&s, "a");
    assert_eq!(a.state, State::Soaking);
    assert_eq!(a.seconds, Some(30), "since its completion");
    assert!(a.detail.contains("NotReady after its reboot"));
    let b = of(&s, "b");
    assert_eq!(b.reason, Some(WaitReason::NotReadyAfterReboot));
    assert!(b.detail.contains("a is NotReady"), "{}", b.detail);
    assert_eq!(s.estimate.held_by, Some(WaitReason::NotReadyAfterReboot));

    let ready = node("a", &done);
    let s = classify(&pool(
        vec![ready],
        &[("a", slot("g1", "2026-01-01T09:59:00Z"))],
        false,
    ));
    assert_eq!(of(&s, "a").state, State::Soaking);
    assert!(of(&s, "a").detail.contains("--min-ready-seconds"));
}

#[test]
fn granted_and_releasing_slots() {
    let s = classify(&pool(
        vec![
            node("a", &[NEEDED]),
            node("b", &[("reboot-grant", "g2")]),
            node("c", &[("reboot-last-grant", "g0")]),
        ],
        &[
            ("a", slot("g1", "2026-01-01T09:59:59Z")),
            ("b", slot("g2", "2026-01-01T09:59:00Z")),
            ("c", slot("g3", "2026-01-01T09:59:00Z")),
        ],
        false,
    ));
    assert_eq!(of(&s, "a").state, State::Granted);
    assert_eq!(of(&s, "b").state, State::Releasing);
    assert_eq!(
        of(&s, "c").state,
        State::Releasing,
        "a slot of another grant than the last"
    );
    assert_eq!(s.budget.slots_in_use, 3);
}

#[test]
fn a_granted_node_held_by_the_pause_or_a_gate_says_so() {
    let held = event(
        "AlertsFiring",
        CONTROLLER,
        "2026-01-01T09:59:30Z",
        "slot granted, held: alerts are active: NodeDown",
    );
    let input = |paused| {
        pool(
            vec![
                with_events(node("a", &[NEEDED]), std::slice::from_ref(&held)),
                node("b", &[NEEDED, ("reboot-grant", "g2")]),
            ],
            &[
                ("a", slot("g1", "2026-01-01T09:59:00Z")),
                ("b", slot("g2", "2026-01-01T09:59:00Z")),
            ],
            paused,
        )
    };
    let s = classify(&input(false));
    let a = of(&s, "a");
    assert_eq!(
        (a.state, a.reason),
        (State::Granted, Some(WaitReason::AlertsFiring))
    );
    assert!(
        a.detail.contains("held: gate closed: alerts firing"),
        "{}",
        a.detail
    );
    assert_eq!(of(&s, "b").reason, None, "nothing holds b");
    let s = classify(&input(true));
    for name in ["a", "b"] {
        assert_eq!(of(&s, name).reason, Some(WaitReason::Paused), "{name}");
        assert!(of(&s, name).detail.contains("held: paused"));
    }
}

#[test]
fn the_budget_comes_from_the_metrics_first_and_is_unknown_without_either() {
    let mut input = pool(vec![node("a", &[]), node("b", &[])], &[], false);
    input.budget.metrics = Some(Reading {
        max_unavailable: Some(2),
        ..Reading::default()
    });
    input.budget.metrics_url = Some("http://c:8080/metrics".into());
    let s = classify(&input);
    assert_eq!(s.budget.source, BudgetSource::Metrics);
    assert_eq!(s.budget.max_unavailable, Some(2));
    assert!(s.budget.source_detail.contains("http://c:8080/metrics"));

    input.budget.metrics = None;
    input.budget.metrics_error = Some("connection refused".into());
    input.budget.flag = Some(MaxUnavailable::Percent(50));
    let s = classify(&input);
    assert_eq!(
        (s.budget.source, s.budget.max_unavailable),
        (BudgetSource::Flag, Some(1))
    );
    assert!(
        s.warnings.iter().any(|w| w.contains("connection refused")),
        "{:?}",
        s.warnings
    );

    input.budget.flag = None;
    let s = classify(&input);
    assert_eq!(
        (s.budget.source, s.budget.max_unavailable),
        (BudgetSource::Unknown, None)
    );
}

#[test]
fn the_json_shape_is_stable() {
    let input = pool(
        vec![with_events(
            node("a", &[NEEDED]),
            &[event(
                "OutsideWindow",
                CONTROLLER,
                "2026-01-01T09:59:00Z",
                "reboot requested; waiting",
            )],
        )],
        &[],
        false,
    );
    let json = serde_json::to_value(classify(&input)).unwrap();
    assert_eq!(json["kind"], "RebootStatus");
    assert_eq!(json["apiVersion"], API_VERSION);
    assert_eq!(json["pool"]["nodes"], 1);
    assert_eq!(json["budget"]["maxUnavailable"], 1);
    assert_eq!(json["budget"]["source"], "flag");
    assert_eq!(json["estimate"]["remaining"], 1);
    assert_eq!(json["estimate"]["heldBy"], "outside-window");
    let a = &json["nodes"][0];
    assert_eq!(a["name"], "a");
    assert_eq!(a["state"], "waiting");
    assert_eq!(a["reason"], "outside-window");
    assert_eq!(a["event"]["reason"], "OutsideWindow");
    assert_eq!(a["seconds"], 60);
    for key in [
        "step",
        "detail",
        "since",
        "podsLeft",
        "ready",
        "cordoned",
        "holdsSlot",
        "grantedAt",
        "unavailable",
        "optedOut",
        "inPool",
        "lastCompleted",
    ] {
        assert!(a.get(key).is_some(), "{key} missing: {a}");
    }
}

#[test]
fn the_text_view_has_a_header_and_a_row_per_node() {
    let input = pool(vec![node("a", &[]), node("b", &[NEEDED])], &[], true);
    let text = crate::render::text(&classify(&input));
    assert!(text.contains("Pool:    2 nodes (all nodes), ledger node-reboot-operator/node-reboot-operator-slots, PAUSED"), "{text}");
    assert!(text.contains("Budget:  0 of 1 unavailable, 0 slots in use (max-unavailable from --max-unavailable 1 given here, for a pool of 2)"), "{text}");
    let rows: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.starts_with("NODE"))
        .collect();
    assert!(
        rows[0].starts_with("NODE   STATE     FOR   STATUS   DETAIL"),
        "{text}"
    );
    assert!(rows[1].starts_with("a      idle"), "{text}");
    assert!(
        rows[2].starts_with("b      waiting         Ready    paused: "),
        "{text}"
    );
}

#[test]
fn a_node_past_its_reboot_timeout_holds_the_pool_and_says_why() {
    let rebooted = [
        ("reboot-done", "true"),
        ("reboot-boot-id", "b1"),
        ("reboot-grant", "g1"),
    ];
    let told = event("RebootApproved", CONTROLLER, "2026-01-01T09:00:00Z", "go");
    let late = event(
        "RebootOverdue",
        CONTROLLER,
        "2026-01-01T09:30:00Z",
        "not completed within --reboot-timeout (1800s): the node came back in a new boot but \
         is not Ready",
    );
    let mut a = with_events(node("a", &rebooted), &[told.clone(), late]);
    a.facts.readiness = Readiness::NotReady;
    // b was told it waits for a slot before a was late: a holds the pool all the same.
    let b = with_events(
        node("b", &[NEEDED]),
        &[event(
            "Requested",
            CONTROLLER,
            "2026-01-01T09:10:00Z",
            "reboot requested; waiting for a slot (max-unavailable 1 of 2 nodes)",
        )],
    );
    let s = classify(&pool(
        vec![a, b],
        &[("a", slot("g1", "2026-01-01T08:59:00Z"))],
        false,
    ));
    let a = of(&s, "a");
    assert_eq!(a.state, State::Rebooting);
    assert!(a.detail.contains("--reboot-timeout"), "{}", a.detail);
    assert_eq!(
        a.event.as_ref().map(|e| e.reason.as_str()),
        Some("RebootOverdue")
    );
    let b = of(&s, "b");
    assert_eq!(b.reason, Some(WaitReason::RebootOverdue));
    assert!(
        b.detail.contains("a is not back in a new boot and Ready"),
        "{}",
        b.detail
    );
    assert_eq!(s.estimate.held_by, Some(WaitReason::RebootOverdue));

    // Told to reboot again since (a later grant): that old Event no longer holds the pool.
    let again = event("RebootApproved", CONTROLLER, "2026-01-01T09:45:00Z", "go");
    let old = event("RebootOverdue", CONTROLLER, "2026-01-01T09:30:00Z", "late");
    let a = with_events(node("a", &rebooted), &[told, old, again]);
    let s = classify(&pool(
        vec![a, node("b", &[NEEDED])],
        &[("a", slot("g1", "2026-01-01T09:44:00Z"))],
        false,
    ));
    assert_ne!(of(&s, "b").reason, Some(WaitReason::RebootOverdue));
    assert_ne!(s.estimate.held_by, Some(WaitReason::RebootOverdue));
}

#[test]
fn a_node_carrying_another_pools_grant_says_whose_it_is() {
    let theirs = "node-reboot-operator/pool-a-slots/0f";
    let ours = "node-reboot-operator/node-reboot-operator-slots/0e";
    let input = pool(
        vec![
            node("moved", &[NEEDED, ("reboot-grant", theirs)]),
            node("mine", &[NEEDED, ("reboot-grant", ours)]),
        ],
        &[("mine", slot(ours, "2026-01-01T09:00:00Z"))],
        false,
    );
    let s = classify(&input);
    let moved = of(&s, "moved");
    assert_eq!(moved.state, State::Draining);
    assert!(
        moved
            .detail
            .ends_with("granted by the ledger node-reboot-operator/pool-a-slots: that pool's controller finishes it"),
        "{}",
        moved.detail
    );
    assert!(!of(&s, "mine").detail.contains("granted by the ledger"));
}

#[test]
fn an_abandon_pending_says_who_and_why_until_the_controller_is_done() {
    let given_up = r#"{"by":"alice","reason":"disk dead"}"#;
    let mut lost = node(
        "a",
        &[
            ("reboot-in-progress", "true"),
            ("reboot-grant", "g1"),
            ("reboot-abandon", given_up),
        ],
    );
    lost.facts.readiness = Readiness::NotReady;
    let s = classify(&pool(
        vec![
            lost,
            // Cleared already; its slot is being released.
            node("b", &[("reboot-abandon", given_up)]),
        ],
        &[
            ("a", slot("g1", "2026-01-01T09:00:00Z")),
            ("b", slot("g2", "2026-01-01T09:00:00Z")),
        ],
        false,
    ));
    let a = of(&s, "a");
    assert_eq!(a.abandon.as_deref(), Some("by alice: disk dead"));
    assert!(
        a.detail
            .starts_with("abandon pending (by alice: disk dead)")
            && a.detail.contains("was: rebooting"),
        "{}",
        a.detail
    );
    assert_eq!(of(&s, "b").state, State::Releasing);
    assert!(of(&s, "b").detail.starts_with("abandon pending"));
    let json = serde_json::to_value(&s).unwrap();
    assert_eq!(json["nodes"][0]["abandon"], "by alice: disk dead");
}

#[test]
fn with_the_controllers_windows_the_estimate_waits_for_the_next_opening() {
    let mut input = pool(
        vec![with_events(
            node("a", &[NEEDED]),
            &[event(
                "OutsideWindow",
                CONTROLLER,
                "2026-01-01T09:59:00Z",
                "w",
            )],
        )],
        &[],
        false,
    );
    input.budget.metrics = Some(Reading {
        max_unavailable: Some(1),
        reboot_duration_sum: Some(600.0),
        reboot_duration_count: Some(1.0),
        ..Reading::default()
    });
    // Without the windows, a closed one holds the pool: no end time.
    assert_eq!(classify(&input).estimate.done_at, None);
    // 2026-01-01 is a Thursday: the window opens at 22:00, the reboot takes 10 minutes.
    input.windows = controller_core::window::Windows::new(vec!["Thu 22:00-23:00".parse().unwrap()]);
    let s = classify(&input);
    assert_eq!(s.estimate.held_by, None);
    assert_eq!(s.estimate.done_at.as_deref(), Some("2026-01-01T22:10:00Z"));
    assert!(
        s.estimate.summary.contains("(Thu 22:00-23:00)"),
        "{}",
        s.estimate.summary
    );
}

/// The RebootPool `gpu` of `nodes`, with this spec; its ledger empty.
fn reboot_pool(nodes: Vec<NodeInput>, spec: serde_json::Value) -> PoolInput {
    PoolInput {
        name: Some("gpu".into()),
        spec: Some(serde_json::from_value(spec).unwrap()),
        budget: crate::input::BudgetInput::default(),
        ..pool(nodes, &[], false)
    }
}

fn zoned(name: &str, zone: &str, annotations: &[(&str, &str)]) -> NodeInput {
    node_input(
        NodeBuilder::new(name)
            .annotations(annotations)
            .label("topology.kubernetes.io/zone", zone)
            .boot_id("b1")
            .facts(),
    )
}

#[test]
fn a_reboot_pools_budget_is_its_spec_resolved_against_its_nodes_and_zones() {
    let nodes = vec![
        zoned("a", "z1", &[]),
        zoned("b", "z1", &[]),
        zoned("c", "z1", &[]),
        zoned("d", "z2", &[]),
    ];
    let s = classify(&reboot_pool(
        nodes.clone(),
        serde_json::json!({"maxUnavailable": "50%", "maxUnavailablePerZone": "67%"}),
    ));
    assert_eq!(s.pool.name.as_deref(), Some("gpu"));
    assert_eq!(s.budget.source, BudgetSource::Spec);
    assert_eq!(s.budget.max_unavailable, Some(2), "50% of 4");
    let zones = s.budget.per_zone.clone().unwrap();
    assert_eq!(zones, BTreeMap::from([("z1".into(), 2), ("z2".into(), 1)]));
    assert!(
        s.budget.source_detail.contains("maxUnavailable 50%"),
        "{}",
        s.budget.source_detail
    );
    // Without one, 1; a value the spec cannot mean leaves it unknown, and says why.
    let s = classify(&reboot_pool(nodes.clone(), serde_json::json!({})));
    assert_eq!(
        (s.budget.max_unavailable, s.budget.per_zone),
        (Some(1), None)
    );
    let s = classify(&reboot_pool(
        nodes,
        serde_json::json!({"maxUnavailable": "lots"}),
    ));
    assert_eq!(s.budget.max_unavailable, None);
    assert!(s.budget.source_detail.contains("\"lots\""));
}

#[test]
fn a_node_two_pools_select_waits_naming_both_and_the_pause_is_the_specs() {
    let mut both = node("both", &[NEEDED]);
    both.overlap = vec!["gpu".into(), "big".into()];
    let mut idle = node("idle-both", &[]);
    idle.overlap = vec!["gpu".into(), "big".into()];
    let input = reboot_pool(
        vec![both, idle, node("mine", &[NEEDED])],
        serde_json::json!({}),
    );
    let s = classify(&input);
    let both = of(&s, "both");
    assert_eq!(
        (both.state, both.reason),
        (State::Waiting, Some(WaitReason::Overlap))
    );
    assert!(
        both.detail.contains("RebootPools gpu and big"),
        "{}",
        both.detail
    );
    assert!(of(&s, "idle-both").detail.contains("gpu and big"));
    assert_eq!(
        s.estimate.remaining, 1,
        "the overlapping node is not queued"
    );

    let mut paused = input;
    paused.ledger.paused = true;
    let s = classify(&paused);
    assert_eq!(of(&s, "mine").reason, Some(WaitReason::Paused));
    assert_eq!(
        of(&s, "mine").detail,
        "paused: spec.paused on the RebootPool gpu"
    );
}

#[test]
fn every_pool_is_the_flags_pools_document_with_each_reboot_pool_in_it() {
    let flags = pool(vec![node("web", &[])], &[], false);
    let gpu = reboot_pool(
        vec![node("g1", &[])],
        serde_json::json!({"maxUnavailable": 3}),
    );
    let all = crate::input::Pools::All {
        flags: flags.clone(),
        pools: vec![gpu.clone()],
    };
    let keys = AnnotationKeys::default();
    let s = every_pool(&all, &keys, at(NOW));
    assert_eq!((s.pool.name.clone(), s.nodes.len()), (None, 1));
    assert_eq!(s.pools.len(), 1);
    assert_eq!(s.pools[0].pool.name.as_deref(), Some("gpu"));
    assert_eq!(s.pools[0].budget.max_unavailable, Some(3));
    let text = crate::render::text(&s);
    assert!(
        text.contains("the flags' pool: 1 node (all nodes that no RebootPool selects)"),
        "{text}"
    );
    assert!(text.contains("Pool:    RebootPool gpu: 1 node"), "{text}");
    let one = every_pool(&crate::input::Pools::One(gpu), &keys, at(NOW));
    assert_eq!(one.pool.name.as_deref(), Some("gpu"));
    assert!(one.pools.is_empty());
}

const CANARY_STALL: &str = "reboot requested; waiting: the pool is stalled, the canary n1 failed: \
    its drain timed out; no new reboot starts until an administrator has looked at the failed \
    nodes (give up or mend each) and runs `kubectl reboot resume`. Reboots under way finish";

#[test]
fn a_stalled_pool_says_why_on_each_waiting_node_and_holds_the_estimate() {
    let stalled = |name| {
        with_events(
            node(name, &[NEEDED]),
            &[
                event(
                    "Requested",
                    CONTROLLER,
                    "2026-01-01T09:50:00Z",
                    "reboot requested; x",
                ),
                event("Stalled", CONTROLLER, "2026-01-01T09:59:00Z", CANARY_STALL),
            ],
        )
    };
    let s = classify(&pool(vec![stalled("a"), stalled("b")], &[], false));
    for name in ["a", "b"] {
        let n = of(&s, name);
        assert_eq!(
            (n.state, n.reason),
            (State::Waiting, Some(WaitReason::Stalled))
        );
        assert!(
            n.detail
                .starts_with("stalled: the canary n1 failed: its drain timed out; no new reboot"),
            "{}",
            n.detail
        );
        assert!(n.detail.contains("`kubectl reboot resume`"), "{}", n.detail);
        assert_eq!(n.event.as_ref().unwrap().reason, "Stalled");
    }
    assert_eq!(s.estimate.held_by, Some(WaitReason::Stalled));
    let json = serde_json::to_value(&s).unwrap();
    assert_eq!(json["nodes"][0]["reason"], "stalled");
}

#[test]
fn nodes_the_canary_or_the_wave_keeps_out_say_so() {
    let waiting = |name, note: &str| {
        with_events(
            node(name, &[NEEDED]),
            &[event("Requested", CONTROLLER, "2026-01-01T09:59:00Z", note)],
        )
    };
    let canary = "reboot requested; waiting for the canary: the first 1 node(s) of the rollout \
        go alone until they have completed and soaked (--canary, --canary-soak)";
    let wave = "reboot requested; waiting for the next wave: this one holds 2 node(s) and the \
        next, twice as many, starts once it has completed (--waves)";
    let mut input = pool(
        vec![
            waiting("a", canary),
            waiting("b", wave),
            waiting("c", "reboot requested; waiting for a slot"),
        ],
        &[],
        false,
    );
    input.ledger.rollout = Some(common::rollout::RolloutRecord::default());
    let s = classify(&input);
    let a = of(&s, "a");
    assert_eq!(a.reason, Some(WaitReason::AfterCanary));
    assert_eq!(
        a.detail,
        "waiting for the canary: the first 1 node(s) of the rollout go alone until they have \
         completed and soaked (--canary, --canary-soak)"
    );
    let b = of(&s, "b");
    assert_eq!(b.reason, Some(WaitReason::NextWave));
    assert!(
        b.detail
            .starts_with("waiting for the next wave: this one holds 2"),
        "{}",
        b.detail
    );
    assert_eq!(of(&s, "c").reason, Some(WaitReason::BudgetFull));
    let json = serde_json::to_value(&s).unwrap();
    let reasons: Vec<&serde_json::Value> = json["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| &n["reason"])
        .collect();
    assert_eq!(reasons, ["after-canary", "next-wave", "budget-full"]);

    // The controller says `Requested` once per wait, whatever the stage: a wait for the canary
    // that the record says passed is old, as is any stage's without a rollout under way.
    input.name = Some("gpu".into());
    input.spec = Some(serde_json::from_value(serde_json::json!({"canary": 1})).unwrap());
    input.ledger.rollout = Some(common::rollout::RolloutRecord {
        canaries_completed: 1,
        wave: Some(2),
        ..Default::default()
    });
    let s = classify(&input);
    assert_eq!(of(&s, "a").state, State::Requested, "{:?}", of(&s, "a"));
    assert_eq!(of(&s, "b").reason, Some(WaitReason::NextWave));
    input.ledger.rollout = None;
    let s = classify(&input);
    assert_eq!(of(&s, "a").state, State::Requested);
    assert_eq!(of(&s, "b").state, State::Requested);
}

fn failure(kind: common::rollout::FailureKind, forgiven: bool) -> common::rollout::Failure {
    common::rollout::Failure {
        grant: "ns/l/g1".into(),
        kind,
        canary: false,
        forgiven,
        at: None,
    }
}

#[test]
fn the_rollout_under_way_is_one_line_of_the_pools_header() {
    use common::rollout::{FailureKind, RolloutRecord};
    let mut record = RolloutRecord {
        completed: 3,
        canaries_completed: 1,
        wave: Some(4),
        ..RolloutRecord::default()
    };
    record
        .failures
        .insert("n2".into(), failure(FailureKind::DrainTimeout, false));
    record
        .failures
        .insert("n3".into(), failure(FailureKind::Unproven, true));
    let mut input = pool(vec![node("a", &[])], &[], false);
    input.name = Some("gpu".into());
    input.spec = Some(serde_json::from_value(serde_json::json!({"canary": 1})).unwrap());
    input.ledger.rollout = Some(record.clone());
    let s = classify(&input);
    let rollout = s.pool.rollout.as_ref().expect("a rollout under way");
    assert_eq!(
        rollout.summary,
        "3 completed, canary passed, wave of 4, 1 failure (n2: its drain timed out), 1 forgiven"
    );
    let text = crate::render::text(&s);
    assert!(
        text.contains("\nRollout: 3 completed, canary passed, wave of 4, 1 failure"),
        "{text}"
    );
    let json = serde_json::to_value(&s).unwrap();
    assert_eq!(json["pool"]["rollout"]["completed"], 3);
    assert_eq!(json["pool"]["rollout"]["wave"], 4);
    assert_eq!(
        json["pool"]["rollout"]["failures"]["n2"]["kind"],
        "drain-timeout"
    );
    assert_eq!(json["pool"]["rollout"]["summary"], rollout.summary.as_str());

    // The canary stage under way: of how many when the spec says, its nodes either way.
    let canary = RolloutRecord {
        canaries: ["n1".to_owned()].into(),
        ..RolloutRecord::default()
    };
    input.ledger.rollout = Some(canary.clone());
    input.spec = Some(serde_json::from_value(serde_json::json!({"canary": 2})).unwrap());
    let s = classify(&input);
    assert_eq!(
        s.pool.rollout.unwrap().summary,
        "0 completed, canary 0 of 2 (n1 under way)"
    );
    input.spec = None;
    input.name = None;
    let s = classify(&input);
    assert_eq!(
        s.pool.rollout.unwrap().summary,
        "0 completed, canary n1 under way"
    );

    // Between rollouts, no line; a record that does not read is a warning.
    input.ledger.rollout = None;
    let s = classify(&input);
    assert_eq!(s.pool.rollout, None);
    assert!(!crate::render::text(&s).contains("Rollout:"));
    assert!(s.warnings.is_empty(), "{:?}", s.warnings);
    input.ledger.rollout_unreadable = Some("the rollout annotation is not a record".into());
    let s = classify(&input);
    assert!(
        s.warnings
            .iter()
            .any(|w| w.contains("not a record") && w.contains("stalled")),
        "{:?}",
        s.warnings
    );
}
