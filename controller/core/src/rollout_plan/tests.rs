//! The rollout plan: the controller's decision run forward on a simulated clock.

use super::*;
use crate::{decide::tests::view_of, ledger::Slot};
use common::test_util::NodeBuilder;

const MIN: Duration = Duration::from_secs(60);

fn at(t: &str) -> Timestamp {
    t.parse().unwrap()
}

/// A Ready node of the pool; `requested` adds `reboot-needed=true`, in the order given.
fn node(name: &str, zone: Option<&str>, requested: Option<u64>) -> NodeView {
    let mut builder = NodeBuilder::new(name).boot_id("b0");
    if requested.is_some() {
        builder = builder.annotation("reboot-needed", "true");
    }
    NodeView {
        requested_at: requested,
        zone: zone.map(str::to_owned),
        ..view_of(builder.facts())
    }
}

fn requested(names: &[&str]) -> Vec<NodeView> {
    (0..)
        .zip(names)
        .map(|(i, n)| node(n, None, Some(i)))
        .collect()
}

struct Setup {
    ledger: Ledger,
    windows: Windows,
    scheduled_budgets: Vec<ScheduledBudget>,
    blocked: BTreeSet<String>,
    others: PoolCounts,
}

impl Setup {
    fn new(windows: &[&str]) -> Self {
        Setup {
            ledger: Ledger {
                id: "ns/slots".into(),
                ..Ledger::default()
            },
            windows: Windows::new(windows.iter().map(|w| w.parse().unwrap()).collect()),
            scheduled_budgets: Vec::new(),
            blocked: BTreeSet::new(),
            others: PoolCounts::default(),
        }
    }

    fn input(&self, nodes: Vec<NodeView>, budget: usize, now: &str) -> PlanInput<'_> {
        PlanInput {
            nodes,
            others: &self.others,
            ledger: &self.ledger,
            budget,
            scheduled_budgets: &self.scheduled_budgets,
            pool_size: 10,
            zone_budget: None,
            concurrency: None,
            windows: &self.windows,
            held: None,
            blocked: &self.blocked,
            reboot: Some(20 * MIN),
            min_ready: Duration::ZERO,
            set_aside: Default::default(),
            rollout: Default::default(),
            reboot_estimate: None,
            now: at(now),
            now_ms: 0,
        }
    }
}

fn names(wave: &Wave) -> Vec<&str> {
    wave.nodes.iter().map(|n| n.name.as_str()).collect()
}

fn starts(plan: &RolloutPlan) -> Vec<String> {
    plan.waves
        .iter()
        .map(|w| w.start.map(|t| t.to_string()).unwrap_or_default())
        .collect()
}

/// `a` requested behind `busy`, which was granted at `granted_at` (in the ledger) and told to
/// reboot, with no window.
fn a_behind_busy_told_to_reboot(granted_at: &str) -> (Setup, Vec<NodeView>) {
    let mut setup = Setup::new(&[]);
    setup.ledger.slots.insert(
        "busy".into(),
        Slot {
            grant: "ns/slots/g1".into(),
            granted_at: granted_at.into(),
            node_version: Some("1".into()),
            zone: None,
        },
    );
    let mut nodes = requested(&["a"]);
    let mut busy = node("busy", None, None);
    busy.state.phase = common::Phase::RebootNow;
    busy.state.grant = Some("ns/slots/g1".into());
    busy.facts.unschedulable = true;
    busy.state.cordoned_by_operator = true;
    nodes.push(busy);
    (setup, nodes)
}

#[test]
fn waves_of_the_budget_follow_one_another_oldest_request_first() {
    let setup = Setup::new(&[]);
    let nodes = requested(&["c", "a", "b"]);
    let plan = plan(setup.input(nodes, 2, "2026-11-24T10:00:00Z"));
    assert_eq!(plan.waves.len(), 2);
    assert_eq!(names(&plan.waves[0]), ["c", "a"]);
    assert_eq!(names(&plan.waves[1]), ["b"]);
    assert_eq!(plan.waves[1].nodes[0].waited, [Wait::BudgetFull]);
    assert_eq!(
        starts(&plan),
        ["2026-11-24T10:00:00Z", "2026-11-24T10:20:00Z"]
    );
    assert_eq!(plan.done_at, Some(at("2026-11-24T10:40:00Z")));
    assert!(plan.spills().is_empty() && plan.left.is_empty());
}

#[test]
fn a_pool_the_window_has_no_room_for_spills_into_the_next_opening() {
    // Tuesday 22:00-23:00 holds three waves of 20 minutes: six of nine nodes.
    let setup = Setup::new(&["Tue 22:00-23:00"]);
    let nodes = requested(&["n1", "n2", "n3", "n4", "n5", "n6", "n7", "n8", "n9"]);
    let plan = plan(setup.input(nodes, 2, "2026-11-24T21:00:00Z"));
    assert_eq!(
        starts(&plan),
        [
            "2026-11-24T22:00:00Z",
            "2026-11-24T22:20:00Z",
            "2026-11-24T22:40:00Z",
            "2026-12-01T22:00:00Z",
            "2026-12-01T22:20:00Z",
        ]
    );
    assert_eq!(names(&plan.waves[3]), ["n7", "n8"]);
    assert_eq!(plan.waves[0].window_opening, None);
    assert_eq!(
        plan.waves[3].window_opening,
        Some(at("2026-12-01T22:00:00Z"))
    );
    assert_eq!(plan.spills(), [(at("2026-12-01T22:00:00Z"), 3)]);
    assert_eq!(
        plan.waves[3].nodes[0].waited,
        [Wait::OutsideWindow, Wait::BudgetFull],
        "it waited for the first window, then for the budget, then for the next window"
    );
    assert_eq!(plan.done_at, Some(at("2026-12-01T22:40:00Z")));
}

#[test]
fn a_blackout_holds_every_wave_until_it_ends() {
    // No window: reboots may start at any time but during the blackout, 10:30 to 12:00.
    let mut setup = Setup::new(&[]);
    setup.windows = setup
        .windows
        .with_blackouts(vec!["2026-11-24T10:30..2026-11-24T12:00".parse().unwrap()]);
    let nodes = requested(&["n1", "n2", "n3"]);
    let plan = plan(setup.input(nodes, 1, "2026-11-24T10:00:00Z"));
    assert_eq!(
        starts(&plan),
        [
            "2026-11-24T10:00:00Z",
            "2026-11-24T10:20:00Z",
            "2026-11-24T12:00:00Z"
        ],
        "the third wave would start at 10:40, in the blackout"
    );
    assert_eq!(
        plan.waves[2].nodes[0].waited,
        [Wait::BudgetFull, Wait::Blackout]
    );
}

#[test]
fn a_scheduled_budget_changes_the_size_of_the_waves() {
    // 3 at a time, but 1 by day from 08:00.
    let mut setup = Setup::new(&[]);
    setup.scheduled_budgets = vec!["1 daily 08:00-20:00".parse().unwrap()];
    let nodes = requested(&["n1", "n2", "n3", "n4", "n5", "n6", "n7", "n8"]);
    let plan = plan(setup.input(nodes, 3, "2026-11-24T07:30:00Z"));
    let sizes: Vec<usize> = plan.waves.iter().map(|w| w.nodes.len()).collect();
    assert_eq!(sizes, [3, 3, 1, 1], "{:?}", starts(&plan));
    assert_eq!(
        starts(&plan),
        [
            "2026-11-24T07:30:00Z",
            "2026-11-24T07:50:00Z",
            "2026-11-24T08:10:00Z",
            "2026-11-24T08:30:00Z"
        ]
    );
    assert_eq!(plan.waves[2].nodes[0].waited, [Wait::BudgetFull]);
    assert_eq!(
        plan.waves[3].nodes[0].waited,
        [Wait::BudgetFull, Wait::ScheduledBudget]
    );
}

#[test]
fn a_freeze_at_zero_holds_the_rollout_and_it_goes_on_after_it() {
    let mut setup = Setup::new(&[]);
    setup.scheduled_budgets = vec!["0 2026-11-24T08:00..2026-11-25T08:00".parse().unwrap()];
    let nodes = requested(&["n1", "n2", "n3"]);
    let plan = plan(setup.input(nodes, 2, "2026-11-24T07:50:00Z"));
    assert_eq!(
        starts(&plan),
        ["2026-11-24T07:50:00Z", "2026-11-25T08:00:00Z"],
        "the slots freed at 08:10 are not given again during the freeze"
    );
    assert_eq!(names(&plan.waves[1]), ["n3"]);
    assert_eq!(
        plan.waves[1].nodes[0].waited,
        [Wait::BudgetFull, Wait::ScheduledBudget]
    );
    assert!(plan.left.is_empty());
}

#[test]
fn the_soak_lengthens_every_wave() {
    let setup = Setup::new(&[]);
    let mut input = setup.input(requested(&["a", "b"]), 1, "2026-11-24T10:00:00Z");
    input.min_ready = 10 * MIN;
    let plan = plan(input);
    assert_eq!(
        starts(&plan),
        ["2026-11-24T10:00:00Z", "2026-11-24T10:30:00Z"]
    );
}

#[test]
fn zone_budgets_take_the_zones_in_turn() {
    let setup = Setup::new(&[]);
    let nodes = vec![
        node("a1", Some("a"), Some(0)),
        node("a2", Some("a"), Some(1)),
        node("b1", Some("b"), Some(2)),
        node("b2", Some("b"), Some(3)),
    ];
    let mut input = setup.input(nodes, 3, "2026-11-24T10:00:00Z");
    input.zone_budget = Some(MaxUnavailable::Count(1));
    let plan = plan(input);
    assert_eq!(plan.waves.len(), 2);
    assert_eq!(names(&plan.waves[0]), ["a1", "b1"]);
    assert_eq!(names(&plan.waves[1]), ["a2", "b2"]);
    assert_eq!(plan.waves[1].nodes[0].waited, [Wait::ZoneFull]);
    assert_eq!(plan.waves[1].nodes[0].zone.as_deref(), Some("a"));
}

#[test]
fn a_paused_pool_plans_no_wave_and_says_why() {
    let setup = Setup::new(&[]);
    let mut nodes = requested(&["a", "b"]);
    nodes[1].opt_out = common::OptOut::Yes;
    let mut input = setup.input(nodes, 2, "2026-11-24T10:00:00Z");
    input.held = Some(Wait::Paused);
    let plan = plan(input);
    assert!(plan.waves.is_empty());
    assert_eq!(plan.held, Some(Wait::Paused));
    assert_eq!(
        plan.left,
        [("a".into(), Wait::Paused), ("b".into(), Wait::OptedOut)]
    );
    assert_eq!(plan.done_at, None);
}

#[test]
fn what_never_gets_a_slot_is_left_with_its_reason() {
    let mut setup = Setup::new(&[]);
    setup.blocked.insert("blocked".into());
    let mut nodes = vec![
        node("blocked", Some("a"), Some(0)),
        node("unlabelled", None, Some(1)),
        node("fine", Some("a"), Some(2)),
        node("out", Some("a"), Some(3)),
    ];
    nodes[3].opt_out = common::OptOut::Yes;
    let mut input = setup.input(nodes, 2, "2026-11-24T10:00:00Z");
    input.zone_budget = Some(MaxUnavailable::Count(2));
    let plan = plan(input);
    assert_eq!(plan.waves.len(), 1);
    assert_eq!(names(&plan.waves[0]), ["fine"]);
    assert_eq!(
        plan.left,
        [
            ("blocked".into(), Wait::BlockingPod),
            ("out".into(), Wait::OptedOut),
            ("unlabelled".into(), Wait::NoZoneLabel),
        ]
    );
}

#[test]
fn slots_held_now_come_free_a_reboot_after_their_grant() {
    let (setup, nodes) = a_behind_busy_told_to_reboot("2026-11-24T09:50:00Z");
    let plan = plan(setup.input(nodes, 1, "2026-11-24T10:00:00Z"));
    assert_eq!(plan.under_way[0].frees_at, Some(at("2026-11-24T10:10:00Z")));
    assert_eq!(starts(&plan), ["2026-11-24T10:10:00Z"]);
    assert_eq!(plan.waves[0].nodes[0].waited, [Wait::BudgetFull]);
}

#[test]
fn without_a_reboot_length_the_waves_have_an_order_and_no_times() {
    let setup = Setup::new(&["daily 01:00-02:00"]);
    let mut input = setup.input(requested(&["a", "b", "c"]), 1, "2026-11-24T10:00:00Z");
    input.reboot = None;
    let plan = plan(input);
    assert_eq!(plan.waves.len(), 3);
    assert_eq!(
        starts(&plan),
        ["2026-11-25T01:00:00Z", "", ""],
        "the first wave waits for the window; the rest cannot be timed"
    );
    assert_eq!(plan.waves[0].nodes[0].waited, [Wait::OutsideWindow]);
    assert!(plan.waves.iter().all(|w| w.end.is_none()));
    assert_eq!(plan.done_at, None);
}

#[test]
fn without_a_reboot_length_a_wave_behind_a_reboot_under_way_has_no_start() {
    let (setup, nodes) = a_behind_busy_told_to_reboot("2026-11-24T09:59:00Z");
    let mut input = setup.input(nodes, 1, "2026-11-24T10:00:00Z");
    input.reboot = None;
    let plan = plan(input);
    assert_eq!(names(&plan.waves[0]), ["a"]);
    assert_eq!(plan.waves[0].start, None, "{plan:#?}");
    assert_eq!(plan.under_way[0].frees_at, None);
}

/// A node set aside after failed drains is left out of the waves, with why; past
/// `--max-blocked-nodes` nothing is planned at all.
#[test]
fn nodes_set_aside_are_left_out_and_too_many_stall_the_plan() {
    let setup = Setup::new(&[]);
    let mut nodes = requested(&["a", "b", "c"]);
    nodes[0].state.drain_failures = Some("2; blocked by shop/db-0: PDB".into());
    let set_aside = |most| SetAside {
        attempts: Some(2),
        most,
        keep_cordoned: false,
        retiring: false,
    };
    let plan = plan(PlanInput {
        set_aside: set_aside(None),
        ..setup.input(nodes.clone(), 1, "2026-11-24T10:00:00Z")
    });
    let planned: Vec<&str> = plan.waves.iter().flat_map(names).collect();
    assert_eq!(planned, ["b", "c"]);
    assert_eq!(plan.left, [("a".to_owned(), Wait::SetAside)]);
    let stalled = super::plan(PlanInput {
        set_aside: set_aside(Some(0)),
        ..setup.input(nodes, 1, "2026-11-24T10:00:00Z")
    });
    assert!(stalled.waves.is_empty(), "{stalled:?}");
    assert_eq!(
        stalled.left,
        [
            ("a".to_owned(), Wait::SetAside),
            ("b".to_owned(), Wait::Stalled),
            ("c".to_owned(), Wait::Stalled)
        ]
    );
}

#[test]
fn a_wave_that_would_not_fit_before_the_window_closes_waits_for_the_next_opening() {
    // 2026-11-23 is a Monday. The window is 22:00-23:00 daily, reboots take 20 minutes.
    let setup = Setup::new(&["daily 22:00-23:00 UTC"]);
    let plan = |estimate: u32, now: &str| {
        super::plan(PlanInput {
            reboot_estimate: Some(estimate * MIN),
            ..setup.input(requested(&["a"]), 1, now)
        })
    };
    let fits = plan(30, "2026-11-23T22:20:00Z");
    assert_eq!(starts(&fits), ["2026-11-23T22:20:00Z"]);
    let late = plan(30, "2026-11-23T22:40:00Z");
    assert_eq!(starts(&late), ["2026-11-24T22:00:00Z"], "{late:?}");
    assert_eq!(late.waves[0].nodes[0].waited, [Wait::WindowFit]);
    let never = plan(90, "2026-11-23T22:40:00Z");
    assert!(never.waves.is_empty(), "{never:?}");
    assert_eq!(never.left, [("a".to_owned(), Wait::WindowFit)]);
}
