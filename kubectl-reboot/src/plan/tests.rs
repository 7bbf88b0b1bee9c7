//! The plan from what `status` reads, on plain data.

use super::*;
use crate::fixtures::{self, at, event, node_input};
use common::{events::ControllerReason, test_util::NodeBuilder};
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
            "drainAttempts": 3, "maxBlockedNodes": 1})),
        None,
    )
    .unwrap();
    assert_eq!(
        s.set_aside,
        SetAside {
            attempts: Some(3),
            most: Some(1)
        }
    );
    assert_eq!(s.windows.open.len(), 1);
    assert_eq!(s.concurrency, Some(MaxUnavailable::Count(2)));
    assert_eq!(s.zone_budget, Some(MaxUnavailable::Percent(50)));
    assert_eq!(s.min_ready, Duration::from_secs(30));
    let err = Settings::of_spec(&spec(json!({"windows": ["someday"]})), None).unwrap_err();
    assert!(err.contains("\"someday\""), "{err}");
    let err = Settings::of_spec(&spec(json!({"concurrency": 0})), None).unwrap_err();
    assert!(err.contains("concurrency 0"), "{err}");
}

fn spec(value: serde_json::Value) -> common::pool::RebootPoolSpec {
    serde_json::from_value(value).unwrap()
}
