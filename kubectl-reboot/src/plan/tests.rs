//! The plan from what `status` reads, on plain data.

use super::*;
use crate::fixtures::{self, at, event, node_input};
use common::{
    events::ControllerReason,
    rollout::{Failure, FailureKind, RolloutRecord},
    test_util::NodeBuilder,
};
use serde_json::json;

const NOW: &str = "2026-11-24T21:00:00Z";

/// A Ready node of the pool in `zone`; requested (first seen by the controller at `seen`).
fn node(name: &str, zone: &str, seen: Option<&str>) -> NodeInput {
    let mut builder = NodeBuilder::new(name)
        .annotation_map()
        .label("topology.kubernetes.io/zone", zone)
        .boot_id("b1");
    if seen.is_some() {
        builder = builder.annotation("reboot-needed", "true");
    }
    NodeInput {
        events: seen
            .map(|t| event(ControllerReason::OutsideWindow.as_str(), CONTROLLER, t, ""))
            .into_iter()
            .collect(),
        ..node_input(builder.facts())
    }
}

/// The pool with `--max-unavailable=2`, its ledger empty.
fn pool(nodes: Vec<NodeInput>, paused: bool) -> PoolInput {
    fixtures::pool(nodes, &[], paused, 2)
}

fn settings(windows: &[&str]) -> Settings {
    Settings {
        windows: Windows::new(windows.iter().map(|w| w.parse().unwrap()).collect()),
        scheduled_budgets: Vec::new(),
        zone_label: "topology.kubernetes.io/zone".into(),
        zone_budget: None,
        concurrency: None,
        min_ready: Duration::ZERO,
        set_aside: Default::default(),
        rollout: Default::default(),
        reboot_estimate: None,
        reboot: Some(Duration::from_secs(20 * 60)),
    }
}

/// Seven requests, in the order the controller saw them (not by name), in two zones, an idle
/// node and an opted-out one.
fn fleet() -> Vec<NodeInput> {
    let mut nodes: Vec<NodeInput> = ["g", "f", "e", "d", "c", "b", "a"]
        .iter()
        .enumerate()
        .map(|(i, n)| {
            let zone = if i % 2 == 0 { "z1" } else { "z2" };
            node(n, zone, Some(&format!("2026-11-24T20:0{i}:00Z")))
        })
        .collect();
    nodes.push(node("idle", "z1", None));
    let mut out = node("out", "z1", Some("2026-11-24T20:00:00Z"));
    out.labels.insert("reboot-disabled".into(), "true".into());
    nodes.push(out);
    nodes
}

fn wave_nodes(plan: &Plan) -> Vec<Vec<&str>> {
    plan.waves
        .iter()
        .map(|w| w.nodes.iter().map(|n| n.name.as_str()).collect())
        .collect()
}

#[test]
fn the_waves_follow_the_controllers_order_and_spill_into_the_next_window() {
    let keys = AnnotationKeys::default();
    let plan = plan(
        &pool(fleet(), false),
        &keys,
        &settings(&["Tue 22:00-23:00"]),
        at(NOW),
    )
    .unwrap();
    assert_eq!(
        wave_nodes(&plan),
        [vec!["g", "f"], vec!["e", "d"], vec!["c", "b"], vec!["a"]]
    );
    let starts: Vec<&str> = plan
        .waves
        .iter()
        .filter_map(|w| w.start.as_deref())
        .collect();
    assert_eq!(
        starts,
        [
            "2026-11-24T22:00:00Z",
            "2026-11-24T22:20:00Z",
            "2026-11-24T22:40:00Z",
            "2026-12-01T22:00:00Z"
        ]
    );
    assert_eq!(plan.waves[0].starts_in_seconds, Some(3600));
    assert_eq!(
        plan.spills,
        [Spill {
            window_opening: "2026-12-01T22:00:00Z".into(),
            nodes: 1
        }]
    );
    assert_eq!(plan.done_at.as_deref(), Some("2026-12-01T22:20:00Z"));
    assert_eq!(plan.left.len(), 1);
    assert_eq!(
        (plan.left[0].name.as_str(), plan.left[0].reason),
        ("out", "opted out")
    );
    assert!(
        plan.summary
            .contains("1 node spills into the window opening Tue 2026-12-01 22:00:00Z"),
        "{}",
        plan.summary
    );
    let text = crate::plan_render::text(&plan);
    assert!(
        text.contains("Wave 4 (1 node): starts in 7d1h (Tue 2026-12-01 22:00:00Z)"),
        "{text}"
    );
    assert!(
        text.contains("waited: outside window, budget full"),
        "{text}"
    );
    assert!(text.contains("Order:    oldest request first"), "{text}");
    assert!(
        text.contains("out  opted out: labelled reboot-disabled=true"),
        "{text}"
    );
}

#[test]
fn zone_budgets_and_the_zone_label_come_from_the_settings() {
    // A budget of 3, one per zone: two zones, so two at a time.
    let keys = AnnotationKeys::default();
    let mut given = settings(&[]);
    given.zone_budget = Some(MaxUnavailable::Count(1));
    let mut input = pool(fleet(), false);
    input.budget.flag = Some(MaxUnavailable::Count(3));
    let plan = plan(&input, &keys, &given, at(NOW)).unwrap();
    assert_eq!(
        wave_nodes(&plan),
        [vec!["g", "f"], vec!["e", "d"], vec!["c", "b"], vec!["a"]]
    );
    assert_eq!(plan.waves[0].nodes[0].zone.as_deref(), Some("z1"));
    assert_eq!(plan.waves[0].nodes[1].zone.as_deref(), Some("z2"));
    assert_eq!(plan.waves[1].nodes[0].waited_for, ["zone budget full"]);
    assert_eq!(plan.settings.max_unavailable_per_zone.as_deref(), Some("1"));
}

#[test]
fn a_paused_pool_has_no_wave_and_an_unknown_budget_is_an_error_naming_the_fix() {
    let keys = AnnotationKeys::default();
    let plan = plan(&pool(fleet(), true), &keys, &settings(&[]), at(NOW)).unwrap();
    assert!(plan.waves.is_empty());
    assert_eq!(plan.held_by, Some("paused"));
    assert!(
        plan.left
            .iter()
            .any(|n| n.reason == "paused" && n.detail.contains("kubectl reboot resume"))
    );
    let mut unknown = pool(fleet(), false);
    unknown.budget.flag = None;
    let err = super::plan(&unknown, &keys, &settings(&[]), at(NOW)).unwrap_err();
    assert!(err.contains("--max-unavailable"), "{err}");
}

#[test]
fn a_reboot_pools_plan_takes_its_spec_and_leaves_the_overlapping_nodes_out() {
    let keys = AnnotationKeys::default();
    let mut nodes = fleet();
    nodes[0].overlap = vec!["gpu".into(), "big".into()];
    let spec: common::pool::RebootPoolSpec = serde_json::from_value(json!({
        "maxUnavailable": "50%", "windows": ["Tue 22:00-23:00"]}))
    .unwrap();
    let input = PoolInput {
        name: Some("gpu".into()),
        spec: Some(spec.clone()),
        budget: crate::input::BudgetInput::default(),
        ..pool(nodes, false)
    };
    let settings = Settings::of_spec(&spec, Some(Duration::from_secs(20 * 60))).unwrap();
    let plan = plan(&input, &keys, &settings, at(NOW)).unwrap();
    // 50% of the 9 nodes: 4 at a time, in the spec's window; g (first asked) is in two pools.
    assert_eq!(plan.settings.max_unavailable, Some(4));
    assert_eq!(plan.settings.windows, ["Tue 22:00-23:00"]);
    assert_eq!(
        wave_nodes(&plan),
        [vec!["f", "e", "d", "c"], vec!["b", "a"]]
    );
    let g = plan.left.iter().find(|l| l.name == "g").expect("g is left");
    assert_eq!(g.reason, "in two pools");
    assert!(g.detail.contains("gpu and big"), "{}", g.detail);
}

#[test]
fn the_plan_takes_the_specs_settings() {
    let s = Settings::of_spec(
        &spec(json!({"windows": ["Sat 01:00-05:00 UTC"], "concurrency": 2,
            "maxUnavailablePerZone": "50%", "minReadySeconds": 30,
            "drainAttempts": 3, "maxBlockedNodes": 1,
            "canary": 2, "canarySoak": "1h30m", "waves": true, "maxFailures": "10%"})),
        None,
    )
    .unwrap();
    assert_eq!(
        s.rollout,
        RolloutRules {
            canary: 2,
            canary_soak: 90 * 60 * 1000,
            waves: true,
            max_failures: Some(common::rollout::MaxFailures::Percent(10)),
            resumed_at: None,
        }
    );
    let counted = Settings::of_spec(&spec(json!({"maxFailures": 0, "canarySoak": "0s"})), None)
        .unwrap()
        .rollout;
    assert_eq!(
        (counted.max_failures, counted.canary_soak, counted.canary),
        (Some(common::rollout::MaxFailures::Count(0)), 0, 0)
    );
    assert_eq!(
        Settings::of_spec(&spec(json!({})), None).unwrap().rollout,
        RolloutRules::default(),
        "off by default"
    );
    let err = Settings::of_spec(&spec(json!({"maxFailures": "101%"})), None).unwrap_err();
    assert!(err.contains("maxFailures") && err.contains("101%"), "{err}");
    let err = Settings::of_spec(&spec(json!({"canarySoak": "soon"})), None).unwrap_err();
    assert!(err.contains("canarySoak") && err.contains("soon"), "{err}");
    let estimate = Settings::of_spec(&spec(json!({"rebootEstimate": "45m"})), None).unwrap();
    assert_eq!(estimate.reboot_estimate, Some(Duration::from_secs(45 * 60)));
    assert_eq!(s.reboot_estimate, None, "none unless the spec has one");
    let err = Settings::of_spec(&spec(json!({"rebootEstimate": "soon"})), None).unwrap_err();
    assert!(err.contains("rebootEstimate"), "{err}");
    assert_eq!(
        s.set_aside,
        SetAside {
            attempts: Some(3),
            most: Some(1),
            keep_cordoned: false,
            retiring: false,
        }
    );
    assert_eq!(s.windows.open.len(), 1);
    assert_eq!(s.concurrency, Some(MaxUnavailable::Count(2)));
    assert_eq!(s.zone_budget, Some(MaxUnavailable::Percent(50)));
    assert_eq!(s.min_ready, Duration::from_secs(30));
    let err = Settings::of_spec(&spec(json!({"windows": ["someday"]})), None).unwrap_err();
    assert!(err.contains("\"someday\""), "{err}");
    let held = Settings::of_spec(&spec(json!({"concurrency": 0})), None).expect("0 holds");
    assert_eq!(held.concurrency, Some(MaxUnavailable::Count(0)));
    let err = Settings::of_spec(&spec(json!({"concurrency": -1})), None).unwrap_err();
    assert!(err.contains("concurrency -1"), "{err}");
}

fn spec(value: serde_json::Value) -> common::pool::RebootPoolSpec {
    serde_json::from_value(value).unwrap()
}

/// Four requests in one zone, in the order `a`, `b`, `c`, `d`, with `--max-unavailable` 3.
fn four_requests() -> PoolInput {
    let nodes = ["a", "b", "c", "d"]
        .iter()
        .enumerate()
        .map(|(i, n)| node(n, "z1", Some(&format!("2026-11-24T20:0{i}:00Z"))))
        .collect();
    let mut input = pool(nodes, false);
    input.budget.flag = Some(MaxUnavailable::Count(3));
    input
}

fn with_rules(rollout: RolloutRules) -> Settings {
    Settings {
        rollout,
        ..settings(&[])
    }
}

#[test]
fn the_canary_goes_alone_and_soaks_and_the_rest_come_after() {
    let keys = AnnotationKeys::default();
    let rules = RolloutRules {
        canary: 1,
        canary_soak: 30 * 60 * 1000,
        ..RolloutRules::default()
    };
    let plan = plan(&four_requests(), &keys, &with_rules(rules), at(NOW)).unwrap();
    // The budget has room for three, the canary stage for one.
    assert_eq!(wave_nodes(&plan), [vec!["a"], vec!["b", "c", "d"]]);
    assert_eq!(plan.waves[1].nodes[0].waited_for, ["after the canary"]);
    // Its reboot (20m), then its soak (30m): the rest start once it has soaked.
    assert_eq!(plan.waves[0].start.as_deref(), Some(NOW));
    assert_eq!(plan.waves[1].start.as_deref(), Some("2026-11-24T21:50:00Z"));
    assert_eq!(plan.settings.canary, 1);
    assert_eq!(plan.settings.canary_soak_seconds, 1800);
    let text = crate::plan_render::text(&plan);
    assert!(
        text.contains("Rollout:  the first 1 alone (canary), soaked 30m (canarySoak)"),
        "{text}"
    );
    assert!(text.contains("waited: after the canary"), "{text}");
    // Without the rule, one wave takes the budget's three.
    let plain = super::plan(&four_requests(), &keys, &settings(&[]), at(NOW)).unwrap();
    assert_eq!(wave_nodes(&plain), [vec!["a", "b", "c"], vec!["d"]]);
    assert!(!crate::plan_render::text(&plain).contains("Rollout:"));
}

#[test]
fn waves_grow_one_two_four_within_the_budget() {
    let keys = AnnotationKeys::default();
    let nodes = ["a", "b", "c", "d", "e", "f", "g", "h"]
        .iter()
        .enumerate()
        .map(|(i, n)| node(n, "z1", Some(&format!("2026-11-24T20:0{i}:00Z"))))
        .collect();
    let mut input = pool(nodes, false);
    input.budget.flag = Some(MaxUnavailable::Count(10));
    let rules = RolloutRules {
        waves: true,
        ..RolloutRules::default()
    };
    let plan = plan(&input, &keys, &with_rules(rules), at(NOW)).unwrap();
    let sizes: Vec<usize> = plan.waves.iter().map(|w| w.nodes.len()).collect();
    assert_eq!(sizes, [1, 2, 4, 1], "{:?}", wave_nodes(&plan));
    assert_eq!(plan.waves[1].nodes[0].waited_for, ["next wave"]);
    assert!(plan.settings.waves);
    assert!(
        crate::plan_render::text(&plan).contains("Rollout:  waves that double (waves)"),
        "{}",
        crate::plan_render::text(&plan)
    );
}

/// A rollout record on the ledger, as the controller writes it.
fn recorded(input: &mut PoolInput, record: RolloutRecord) {
    input.ledger.rollout = Some(record);
}

#[test]
fn a_canary_already_passed_is_not_sent_again_and_a_failed_one_stalls_the_plan() {
    let keys = AnnotationKeys::default();
    let rules = RolloutRules {
        canary: 1,
        ..RolloutRules::default()
    };
    let mut passed = four_requests();
    recorded(
        &mut passed,
        RolloutRecord {
            completed: 1,
            canaries_completed: 1,
            ..RolloutRecord::default()
        },
    );
    let plan = plan(&passed, &keys, &with_rules(rules), at(NOW)).unwrap();
    assert_eq!(wave_nodes(&plan), [vec!["a", "b", "c"], vec!["d"]]);
    assert_eq!(
        plan.rollout.as_deref(),
        Some("1 completed, 1 canary node(s) passed")
    );
    let text = crate::plan_render::text(&plan);
    assert!(
        text.contains("Rollout:  the first 1 alone (canary); under way: 1 completed"),
        "{text}"
    );

    let mut failed = four_requests();
    let mut record = RolloutRecord::default();
    record.failures.insert(
        "z".into(),
        Failure {
            grant: "ns/l/g1".into(),
            kind: FailureKind::DrainTimeout,
            canary: true,
            forgiven: false,
            at: None,
        },
    );
    recorded(&mut failed, record.clone());
    let plan = super::plan(&failed, &keys, &with_rules(rules), at(NOW)).unwrap();
    assert!(plan.waves.is_empty(), "{:?}", wave_nodes(&plan));
    assert_eq!(plan.left.len(), 4);
    let left = &plan.left[0];
    assert_eq!(left.reason, "stalled");
    assert!(
        left.detail.contains("kubectl reboot resume"),
        "{}",
        left.detail
    );
    // Forgiven (`kubectl reboot resume`), it no longer counts: the canary goes again.
    recorded(&mut failed, record.resumed());
    let plan = super::plan(&failed, &keys, &with_rules(rules), at(NOW)).unwrap();
    assert_eq!(wave_nodes(&plan), [vec!["a"], vec!["b", "c", "d"]]);
}

#[test]
fn a_stall_the_controller_said_holds_every_wave_even_without_its_rules() {
    // The flags' pool: the plugin does not know the controller's --max-failures, but every
    // waiting node's latest Event says the pool is stalled.
    let keys = AnnotationKeys::default();
    let mut input = four_requests();
    for n in &mut input.nodes {
        n.events.push(event(
            ControllerReason::Stalled.as_str(),
            CONTROLLER,
            "2026-11-24T20:30:00Z",
            "reboot requested; waiting: the pool is stalled, 2 node(s) of the rollout failed, \
             more than --max-failures allows (1); no new reboot starts until ...",
        ));
    }
    let plan = plan(&input, &keys, &settings(&[]), at(NOW)).unwrap();
    assert_eq!(plan.held_by, Some("stalled"));
    assert!(plan.waves.is_empty());
    assert!(
        plan.left.iter().all(|l| l.reason == "stalled"),
        "{:?}",
        plan.left
    );
}
