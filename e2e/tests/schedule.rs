//! When reboots happen (docs/src/scheduling.md), end to end on the real control plane: a
//! maintenance window that opens and closes during the test, and an administrator's pause and
//! resume with kubectl.

use common::ControllerReason;
use common::ledger::{LEDGER_NAME, slots_of};
use e2e::rollout::{annotate_ledger, ledger_lease};
use e2e::{
    BudgetWatch, eventually, every_node, has_event, kubectl, node_events,
    rollout::rollout_completes, scrape::controller_metric, wait_until,
};
use k8s_openapi::{api::coordination::v1::Lease, jiff::Timestamp};
use kube::Client;
use nodesim::sandbox::{Sandbox, SandboxConfig};
use std::{
    collections::{BTreeMap, BTreeSet},
    time::Duration,
};

/// A sandbox without scheduler and controller-manager (no pods here), whose controller gets
/// `controller_args`.
async fn sandbox(
    nodes: usize,
    max_unavailable: &str,
    reboot_secs: u64,
    controller_args: &[&str],
) -> Sandbox {
    let config = SandboxConfig::with_nodes(nodes)
        .max_unavailable(max_unavailable)
        .reboot_duration(Duration::from_secs(reboot_secs))
        .controller_args(controller_args);
    e2e::sandbox_without_pods(config).await
}

async fn ledger(client: &Client) -> Option<Lease> {
    ledger_lease(client, LEDGER_NAME).await
}

async fn count_events(client: &Client, node: &str, reason: ControllerReason) -> usize {
    node_events(client, node)
        .await
        .iter()
        .filter(|(r, _, _)| r == reason.as_str())
        .count()
}

#[tokio::test(flavor = "multi_thread")]
async fn grants_start_when_the_window_opens_and_stop_when_it_closes_leaving_nodes_waiting() {
    // A window that opens 40 s from now and closes 40 s later, every day (UTC): time for the
    // sandbox to start and every node to be told it waits for it, on a loaded machine too.
    // Whole seconds: the window's syntax has no fractions.
    let open = Timestamp::from_second(Timestamp::now().as_second() + 40).expect("a time");
    let close = open + Duration::from_secs(40);
    let window = e2e::daily_window(open, close);
    // Long reboots: not every node fits in the window.
    let sb = sandbox(6, "1", 12, &["--reboot-window", &window]).await;
    let client = sb.client.clone();
    let names = sb.fleet.names();
    let watch = BudgetWatch::start(client.clone(), 1).await;
    // Until a second before the window opens: what the controller says then is the point.
    let until_open = Duration::try_from(open.duration_since(Timestamp::now())).unwrap_or_default();
    let patience = until_open.saturating_sub(Duration::from_secs(1));
    let waits = ControllerReason::OutsideWindow;
    every_node::request_and_wait_for_event(&sb, waits, &[], patience, Some(&watch)).await;
    assert!(
        Timestamp::now() < open,
        "the test was too slow to see the window closed"
    );
    let next_open = controller_metric(&sb, "node_reboot_window_next_open_timestamp_seconds").await;
    assert_eq!(next_open, Some(open.as_second() as f64), "{window}");
    assert_eq!(
        controller_metric(&sb, "node_reboot_window_open").await,
        Some(0.0)
    );

    // Every grant the ledger ever shows, with the time the controller made it.
    let mut grants: BTreeMap<String, Timestamp> = BTreeMap::new();
    let settled = close + Duration::from_secs(25);
    while Timestamp::now() < settled {
        watch
            .check()
            .unwrap_or_else(|violation| panic!("{violation}"));
        if let Some(lease) = ledger(&client).await {
            for (node, slot) in slots_of(lease.metadata.annotations.as_ref()).expect("ledger") {
                let at: Timestamp = slot.granted_at.parse().expect("an RFC 3339 grant time");
                grants.entry(node).or_insert(at);
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(!grants.is_empty(), "nothing was granted in the window");
    for (node, at) in &grants {
        assert!(
            open <= *at && *at < close,
            "{node} granted at {at}, outside {window}"
        );
    }

    let mut waiting = BTreeSet::new();
    for name in &names {
        let node = e2e::node(&client, name).await;
        let state = e2e::NodeState::of(&node);
        assert!(
            !state.unschedulable,
            "{name} left cordoned after the window: {state}"
        );
        if !grants.contains_key(name) {
            let requested = state.annotations == ["reboot-needed"];
            assert!(
                requested,
                "{name} should wait with its request alone: {state}"
            );
            waiting.insert(name.clone());
        }
    }
    assert!(
        !waiting.is_empty(),
        "every node fit in the window: the test shows nothing"
    );
    // Told before the window (a repeat after it closed folds into the same Event's series).
    for name in &waiting {
        assert!(
            count_events(&client, name, ControllerReason::OutsideWindow).await >= 1,
            "{name}"
        );
    }
    let tomorrow = (open + Duration::from_secs(24 * 3600)).as_second() as f64;
    let next_open = controller_metric(&sb, "node_reboot_window_next_open_timestamp_seconds").await;
    assert_eq!(next_open, Some(tomorrow), "the next opening is tomorrow's");
    sb.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn kubectl_pauses_new_reboots_the_one_under_way_finishes_and_resume_finishes_the_rest() {
    let sb = sandbox(4, "1", 4, &[]).await;
    let client = sb.client.clone();
    let names = sb.fleet.names();
    let watch = BudgetWatch::start(client.clone(), 1).await;

    kubectl(
        &sb.control_plane,
        &["annotate", "node", &names[0], "reboot-needed=true"],
    );
    wait_until(
        "the first node is granted",
        Duration::from_secs(30),
        Some(&watch),
        || async { e2e::NodeState::of(&e2e::node(&client, &names[0]).await).unschedulable },
    )
    .await;
    annotate_ledger(&sb.control_plane, "reboot-paused=true");
    for name in &names[1..] {
        kubectl(
            &sb.control_plane,
            &["annotate", "node", name, "reboot-needed=true"],
        );
    }
    let (paused, patience) = (ControllerReason::Paused, Duration::from_secs(30));
    every_node::wait_for_event(&client, &names[1..], paused, &[], patience, Some(&watch)).await;
    assert_eq!(
        controller_metric(&sb, "node_reboot_paused").await,
        Some(1.0)
    );
    // The reboot under way finishes; its slot's release is a write of the ledger, which
    // must keep the administrator's annotation.
    wait_until(
        "the first node finishes during the pause",
        Duration::from_secs(60),
        Some(&watch),
        || async {
            sb.fleet.reboots(&names[0]) == 1 && e2e::rollout::ledger_is_empty_on(&client).await
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let annotations = ledger(&client).await.and_then(|l| l.metadata.annotations);
    assert_eq!(
        annotations
            .as_ref()
            .and_then(|a| a.get("reboot-paused"))
            .map(String::as_str),
        Some("true"),
        "the controller's ledger writes keep the pause"
    );
    for name in &names[1..] {
        assert_eq!(sb.fleet.reboots(name), 0, "{name} rebooted while paused");
        let state = e2e::NodeState::of(&e2e::node(&client, name).await);
        assert!(
            !state.unschedulable,
            "{name} cordoned while paused: {state}"
        );
    }

    annotate_ledger(&sb.control_plane, "reboot-paused-");
    rollout_completes(&sb, &watch).await;
    eventually(
        "the pause metric is 0",
        Duration::from_secs(10),
        None,
        || async {
            (controller_metric(&sb, "node_reboot_paused").await == Some(0.0)).then_some(())
        },
    )
    .await;
    sb.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn nine_nodes_in_three_zones_keep_both_the_zone_budget_and_the_global_one() {
    const ZONE: &str = "topology.kubernetes.io/zone";
    let sb = sandbox(9, "2", 2, &["--max-unavailable-per-zone", "1"]).await;
    let names = sb.fleet.names();
    for (i, name) in names.iter().enumerate() {
        let zone = ["a", "b", "c"][i / 3];
        e2e::label_node(&sb.control_plane, name, &format!("{ZONE}=zone-{zone}"));
    }
    let zones = nodesim::budget_watch::ZoneBudget {
        label: ZONE.into(),
        budget: 1,
    };
    let watch = BudgetWatch::start_with_zones(sb.client.clone(), 2, Some(zones)).await;
    every_node::request(&sb.control_plane);
    rollout_completes(&sb, &watch).await;
    watch
        .check()
        .unwrap_or_else(|violation| panic!("{violation}"));
    assert_eq!(watch.zone_max_seen(), 1, "one node of a zone at a time");
    assert_eq!(
        watch.max_seen(),
        2,
        "two zones at once: the global budget was used"
    );
    sb.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_node_not_ready_soon_after_its_reboot_stops_the_rollout_until_an_administrator_clears_it()
{
    // A budget of 2: the sick node counts as one unavailable node, so it is the soak, not the
    // budget, that must hold the others.
    let sb = sandbox(4, "2", 1, &["--min-ready-seconds", "20"]).await;
    let client = sb.client.clone();
    let names = sb.fleet.names();
    let (first, others) = (&names[0], &names[1..]);
    let watch = BudgetWatch::start(client.clone(), 2).await;
    kubectl(
        &sb.control_plane,
        &["annotate", "node", first, "reboot-needed=true"],
    );
    wait_until(
        "the first node is rebooted and completed",
        Duration::from_secs(60),
        Some(&watch),
        || async {
            let state = e2e::NodeState::of(&e2e::node(&client, first).await);
            sb.fleet.reboots(first) == 1 && state.last_completed.is_some() && !state.unschedulable
        },
    )
    .await;
    assert!(
        !e2e::rollout::ledger_is_empty_on(&client).await,
        "the slot stays taken during the soak"
    );
    // A bad kernel: the node fails 5 s after its reboot.
    tokio::time::sleep(Duration::from_secs(5)).await;
    sb.fleet.set_ready(first, false).await;
    for name in others {
        kubectl(
            &sb.control_plane,
            &["annotate", "node", name, "reboot-needed=true"],
        );
    }
    wait_until(
        "a Warning says the rollout stopped",
        Duration::from_secs(30),
        Some(&watch),
        || async { count_events(&client, first, ControllerReason::NotReadyAfterReboot).await == 1 },
    )
    .await;
    assert!(
        has_event(
            &client,
            first,
            ControllerReason::NotReadyAfterReboot,
            &["reboot-last-grant-"]
        )
        .await,
        "the Warning says how to clear it"
    );
    assert!(
        kubectl(
            &sb.control_plane,
            &[
                "get",
                "events",
                "--field-selector",
                &format!("involvedObject.name={first},type=Warning,reason=NotReadyAfterReboot"),
                "-o",
                "name",
            ],
        )
        .contains("event"),
        "NotReadyAfterReboot is a Warning"
    );
    assert_eq!(
        controller_metric(&sb, "node_reboot_not_ready_after_reboot").await,
        Some(1.0)
    );
    // Well past the soak: still nothing new, and the first node keeps its slot.
    tokio::time::sleep(Duration::from_secs(25)).await;
    watch
        .check()
        .unwrap_or_else(|violation| panic!("{violation}"));
    for name in others {
        assert_eq!(
            sb.fleet.reboots(name),
            0,
            "{name} rebooted while {first} was NotReady"
        );
    }
    assert!(
        !e2e::rollout::ledger_is_empty_on(&client).await,
        "{first} kept its slot"
    );

    // The administrator decides to go on without it, as the docs and the Warning say.
    kubectl(
        &sb.control_plane,
        &["annotate", "node", first, "reboot-last-grant-"],
    );
    wait_until(
        "the others are rebooted once the soak is cleared, the first still NotReady",
        Duration::from_secs(120),
        Some(&watch),
        || async {
            others.iter().all(|n| sb.fleet.reboots(n) == 1)
                && e2e::rollout::ledger_is_empty_on(&client).await
        },
    )
    .await;
    assert_eq!(
        count_events(&client, first, ControllerReason::SoakCleared).await,
        1
    );
    assert_eq!(
        count_events(&client, first, ControllerReason::Cancelled).await,
        0,
        "not a cancel"
    );
    assert_eq!(sb.fleet.reboots(first), 1, "{first} rebooted once");
    sb.fleet.set_ready(first, true).await;
    sb.stop().await;
}

/// A pause (as an alert or a blocking pod would) that holds a claimed node as its window
/// closes does not let it reboot when the hold lifts outside the window: the node is given
/// back, uncordoned with its request kept, and waits for the next window, although
/// --finish-after-window is on.
#[tokio::test(flavor = "multi_thread")]
async fn a_node_held_as_its_window_closes_waits_for_the_next_window() {
    // Open since a minute ago, closing in 30 s: time to claim the node and pause before.
    let now = Timestamp::now().as_second();
    let open = Timestamp::from_second(now - 60).expect("a time");
    let close = Timestamp::from_second(now + 30).expect("a time");
    let window = e2e::daily_window(open, close);
    // The drain waits 5 minutes after the cordon: the node is claimed, not drained, at the close.
    let sb = sandbox(
        1,
        "1",
        1,
        &["--reboot-window", &window, "--drain-delay", "5m"],
    )
    .await;
    let client = sb.client.clone();
    let watch = BudgetWatch::start(client.clone(), 1).await;
    kubectl(
        &sb.control_plane,
        &["annotate", "node", "sim-1", "reboot-needed=true"],
    );
    wait_until(
        "sim-1 is granted and cordoned in the window",
        Duration::from_secs(25),
        Some(&watch),
        || async { e2e::NodeState::of(&e2e::node(&client, "sim-1").await).unschedulable },
    )
    .await;
    annotate_ledger(&sb.control_plane, "reboot-paused=true");
    assert!(
        Timestamp::now() < close,
        "the test was too slow to pause before the window closed"
    );
    wait_until(
        "sim-1 is given back once the window has closed",
        Duration::from_secs(90),
        Some(&watch),
        || async {
            let state = e2e::NodeState::of(&e2e::node(&client, "sim-1").await);
            !state.unschedulable && state.annotations == ["reboot-needed"]
        },
    )
    .await;
    assert!(Timestamp::now() >= close, "given back before the close");
    // The hold lifts outside the window: the node waits for the next one.
    annotate_ledger(&sb.control_plane, "reboot-paused-");
    e2e::wait_for_event(
        &client,
        "sim-1",
        ControllerReason::OutsideWindow,
        &[],
        Some(&watch),
    )
    .await;
    let state = e2e::NodeState::of(&e2e::node(&client, "sim-1").await);
    assert!(!state.unschedulable, "granted outside the window: {state}");
    assert_eq!(sb.fleet.reboots("sim-1"), 0, "rebooted outside the window");
    sb.stop().await;
}

/// kured's `--concurrency` beside the budget: one node cordoned by an administrator uses up
/// one unit of `--max-unavailable 3`, and `--concurrency 1` keeps the operator to one reboot
/// at a time all the same; every requested node is rebooted in turn.
#[tokio::test(flavor = "multi_thread")]
async fn concurrency_keeps_the_operator_to_its_own_limit_below_the_budget() {
    let sb = sandbox(4, "3", 2, &["--concurrency", "1"]).await;
    let client = sb.client.clone();
    kubectl(&sb.control_plane, &["cordon", "sim-4"]);
    let watch = BudgetWatch::start(client.clone(), 3).await;
    let requested = ["sim-1", "sim-2", "sim-3"];
    for name in requested {
        kubectl(
            &sb.control_plane,
            &["annotate", "node", name, "reboot-needed=true"],
        );
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(180);
    let mut most = 0;
    while !requested.iter().all(|n| sb.fleet.reboots(n) == 1) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "not every node was rebooted within 180 s"
        );
        watch
            .check()
            .unwrap_or_else(|violation| panic!("{violation}"));
        if let Some(lease) = ledger(&client).await {
            let slots = slots_of(lease.metadata.annotations.as_ref()).expect("ledger");
            assert!(
                slots.len() <= 1,
                "the operator holds {slots:?} with --concurrency 1"
            );
            most = most.max(slots.len());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(most, 1, "the ledger was seen with a slot");
    let state = e2e::NodeState::of(&e2e::node(&client, "sim-4").await);
    assert!(
        state.unschedulable,
        "the administrator's cordon stays: {state}"
    );
    sb.stop().await;
}
