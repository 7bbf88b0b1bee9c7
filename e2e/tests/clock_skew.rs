//! Controllers whose wall clocks differ by minutes (libfaketime, see `e2e::faketime`), on the
//! local control plane, each scenario watched by the independent [`Observer`]. What the docs
//! promise: leader election never compares clocks of different machines (a replica ahead does
//! not take a live leader's Lease, one behind takes a dead leader's within the lease duration);
//! a maintenance window is judged by the controller's own clock; a new leader whose clock is
//! ahead does not cut short the drain delay its predecessor started, and judges the reboot
//! timeout by its own clock on the safe side.
//!
//! Times are taken from the API server's clock (an object's `creationTimestamp`), never from a
//! skewed controller's nor from how long the test waited.

use common::ControllerReason;
use e2e::{
    faketime, has_event, kubectl, node, observer::Observer, protocol_annotations, request_reboot,
};
use k8s_openapi::{
    api::{
        coordination::v1::Lease,
        core::v1::{Event, Pod},
    },
    jiff::{SignedDuration, Timestamp, ToSpan, tz::TimeZone},
};
use kube::{Api, Client, ResourceExt, api::ListParams};
use nodesim::sandbox::{OPERATOR_NAMESPACE, Sandbox, SandboxConfig};
use std::time::Duration;

/// How long any phase may take before the test fails.
const PHASE: Duration = Duration::from_secs(240);
/// Leader election fast enough for a test: a dead leader is replaced after about 4 s.
const FAST_LEADER_ELECTION: [&str; 3] = [
    "--leader-election-lease-duration=4s",
    "--leader-election-renew-deadline=3s",
    "--leader-election-retry-period=1s",
];
const LEASE: Duration = Duration::from_secs(4);
/// A generous bound on a takeover (the lease duration, a retry period, and a loaded machine):
/// a replica that judged the Lease by the dead leader's `renewTime` against its own clock
/// would wait the minutes of the skew on top.
const TAKEOVER: Duration = Duration::from_secs(60);
/// The workload label of the observer (these scenarios deploy no workload of theirs).
const WORKLOAD: (&str, &str) = ("app", "web");

/// A sandbox with the scheduler and the controller-manager, and no controller yet.
async fn sandbox(nodes: usize, reboot: Duration) -> Sandbox {
    sandbox_with_budget(nodes, "1", reboot).await
}

async fn sandbox_with_budget(nodes: usize, max_unavailable: &str, reboot: Duration) -> Sandbox {
    let config = SandboxConfig::with_nodes(nodes)
        .max_unavailable(max_unavailable)
        .reboot_duration(reboot)
        .no_controller();
    Sandbox::start(config).await.expect("sandbox starts")
}

/// Starts `controller-<n>` with its wall clock at `offset` (libfaketime's `+5m`, `-5m`) and
/// the flags `args`; returns its index.
fn start_skewed(sb: &mut Sandbox, offset: &str, args: &[&str]) -> usize {
    sb.start_controller_with_env(args, faketime::skewed(offset))
        .expect("the controller starts");
    sb.controllers.len() - 1
}

/// Asserts that controller `index` ran `minutes` off the real clock, by its Events: their
/// `eventTime` is the controller's clock, their `creationTimestamp` the API server's. Proof
/// that libfaketime took hold (a statically linked binary would ignore `LD_PRELOAD`, and every
/// scenario here would pass without testing anything).
async fn assert_clock_off(sb: &Sandbox, index: usize, minutes: i64) {
    let identity = sb.controllers[index].identity();
    let events = Api::<Event>::namespaced(sb.client.clone(), "default")
        .list(&ListParams::default())
        .await
        .expect("list Events");
    let offsets: Vec<i64> = events
        .items
        .iter()
        .filter(|e| e.reporting_instance.as_deref() == Some(identity.as_str()))
        .filter_map(|e| {
            let written = e.event_time.as_ref()?.0.as_second();
            Some(written - e.creation_timestamp()?.0.as_second())
        })
        .collect();
    assert!(
        !offsets.is_empty(),
        "{identity} wrote no Event: its clock cannot be checked"
    );
    assert!(
        offsets.iter().all(|o| (o - minutes * 60).abs() <= 30),
        "{identity} should run {minutes} minutes off the real clock, but its Events were written \
         {offsets:?} seconds off the API server's: libfaketime did not take hold (is \
         target/debug/reboot-controller dynamically linked?)"
    );
}

async fn lease(client: &Client) -> Option<Lease> {
    Api::<Lease>::namespaced(client.clone(), OPERATOR_NAMESPACE)
        .get_opt("reboot-controller")
        .await
        .ok()
        .flatten()
}

/// The holder of the leader Lease and how often it changed hands.
async fn holder(client: &Client) -> Option<(String, i32)> {
    let spec = lease(client).await?.spec?;
    Some((spec.holder_identity?, spec.lease_transitions.unwrap_or(0)))
}

async fn wait_for_leader(sb: &Sandbox, observer: &Observer, index: usize, within: Duration) {
    let name = sb.controllers[index].identity();
    observer
        .wait_until(&format!("{name} leads"), within, || async {
            holder(&sb.client).await.is_some_and(|(h, _)| h == name)
        })
        .await;
}

/// Waits until some node holds a slot: a rollout is under way.
async fn wait_for_a_reboot_under_way(sb: &Sandbox, observer: &Observer) -> String {
    let names = sb.fleet.names();
    observer
        .eventually("a node holds a slot", PHASE, || async {
            for name in &names {
                if e2e::holds_a_slot(&sb.client, name).await {
                    return Some(name.clone());
                }
            }
            None
        })
        .await
}

/// `kubectl annotate node <nodes> reboot-needed=true`.
fn request(sb: &Sandbox, nodes: &[String]) {
    let mut args = vec!["annotate", "node"];
    args.extend(nodes.iter().map(String::as_str));
    args.push("reboot-needed=true");
    kubectl(&sb.control_plane, &args);
}

async fn wait_for_reboots(observer: &Observer, names: &[String], what: &str) {
    observer
        .wait_until(what, PHASE, || async {
            names.iter().all(|n| observer.rebooted_and_back(n, 1))
        })
        .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn leader_election_does_not_compare_the_clocks_of_replicas() {
    let mut sb = sandbox(4, Duration::from_secs(3)).await;
    let names = sb.fleet.names();
    let observer = Observer::start(sb.client.clone(), 1, "default", WORKLOAD).await;
    // controller-1 is 5 minutes behind and leads; controller-2 is 5 minutes ahead: to it, every
    // renewTime the leader writes is 10 minutes old.
    let behind = start_skewed(&mut sb, "-5m", &FAST_LEADER_ELECTION);
    wait_for_leader(&sb, &observer, behind, PHASE).await;
    let ahead = start_skewed(&mut sb, "+5m", &FAST_LEADER_ELECTION);
    let (_, transitions) = holder(&sb.client).await.expect("the Lease");
    // Half the nodes now, half after the first takeover: a rollout is under way at each kill.
    let (first, second) = names.split_at(names.len() / 2);
    // Three lease durations while the leader renews: the replica ahead must not take it.
    tokio::time::sleep(LEASE * 3).await;
    let (now_holding, now_transitions) = holder(&sb.client).await.expect("the Lease");
    assert_eq!(
        (now_holding.as_str(), now_transitions),
        (sb.controllers[behind].identity().as_str(), transitions),
        "a replica whose clock is 10 minutes ahead of the leader's took the live leader's Lease"
    );
    // The leader dies mid-rollout: the replica ahead takes over.
    request(&sb, first);
    wait_for_a_reboot_under_way(&sb, &observer).await;
    sb.controllers[behind].kill().await;
    wait_for_leader(&sb, &observer, ahead, TAKEOVER).await;
    // The replica behind comes back and follows; the leader ahead dies mid-rollout: to the one
    // behind, the dead leader's last renewTime is 10 minutes in the future.
    sb.controllers[behind].restart().await.expect("restarts");
    wait_for_reboots(&observer, first, "the first half rebooted once and back").await;
    request(&sb, second);
    wait_for_a_reboot_under_way(&sb, &observer).await;
    sb.controllers[ahead].kill().await;
    wait_for_leader(&sb, &observer, behind, TAKEOVER).await;
    wait_for_reboots(&observer, &names, "every node rebooted once and back").await;
    assert_clock_off(&sb, behind, -5).await;
    assert_clock_off(&sb, ahead, 5).await;
    let report = observer.finish(&[]).await;
    eprintln!("{report}");
    sb.stop().await;
}

/// `daily HH:MM-HH:MM UTC`, from `start` to `end`.
fn daily_window(start: Timestamp, end: Timestamp) -> String {
    let hm = |t: Timestamp| t.to_zoned(TimeZone::UTC).strftime("%H:%M").to_string();
    format!("daily {}-{} UTC", hm(start), hm(end))
}

/// The API server's time of the first Event about `node` with this reason and action.
async fn event_time(
    client: &Client,
    node: &str,
    reason: ControllerReason,
    action: &str,
) -> Option<Timestamp> {
    e2e::events_about(client, node)
        .await
        .into_iter()
        .find(|e: &Event| {
            e.reason.as_deref() == Some(reason.as_str()) && e.action.as_deref() == Some(action)
        })
        .and_then(|e| e.creation_timestamp())
        .map(|t| t.0)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_window_is_judged_by_the_controllers_own_clock() {
    let mut sb = sandbox(2, Duration::from_secs(1)).await;
    let observer = Observer::start(sb.client.clone(), 1, "default", WORKLOAD).await;
    // Opens in 30 minutes by the real clock; a controller 40 minutes ahead is inside it.
    let now = Timestamp::now();
    let opens = now + 30.minutes();
    let window = daily_window(opens, now + 90.minutes());
    let args = ["--leader-elect=false", "--reboot-window", window.as_str()];
    let on_time = start_skewed(&mut sb, "+0", &args);
    request_reboot(&sb.control_plane, "sim-1");
    observer
        .wait_until("sim-1 is told it waits for the window", PHASE, || {
            has_event(&sb.client, "sim-1", ControllerReason::OutsideWindow, &[])
        })
        .await;
    assert!(
        !e2e::holds_a_slot(&sb.client, "sim-1").await,
        "a controller on time granted sim-1 a slot outside {window}"
    );
    assert_clock_off(&sb, on_time, 0).await;
    sb.controllers[on_time]
        .terminate(Duration::from_secs(5))
        .await;
    let ahead = start_skewed(&mut sb, "+40m", &args);
    observer
        .wait_until("sim-1 rebooted and back", PHASE, || async {
            observer.rebooted_and_back("sim-1", 1)
        })
        .await;
    let approved = event_time(
        &sb.client,
        "sim-1",
        ControllerReason::RebootApproved,
        "RebootApproved",
    )
    .await
    .expect("a RebootApproved Event");
    assert!(
        approved < opens,
        "the controller 40 minutes ahead approved at {approved} (API server's clock), not before \
         the window's opening at {opens} by the real clock: it did not judge {window} by its own \
         clock"
    );
    assert_clock_off(&sb, ahead, 40).await;
    let report = observer.finish(&[]).await;
    eprintln!("{report}");
    sb.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_new_leader_ahead_does_not_cut_the_drain_delay_short() {
    const DELAY: i64 = 40;
    let mut sb = sandbox(2, Duration::from_secs(1)).await;
    e2e::apply(&sb.control_plane, e2e::ONE_POD_ON_SIM_1);
    let observer = Observer::start(sb.client.clone(), 1, "default", ("app", "one")).await;
    observer
        .wait_until("the pod of `one` runs on sim-1", PHASE, || async {
            Api::<Pod>::namespaced(sb.client.clone(), "default")
                .list(&ListParams::default().labels("app=one"))
                .await
                .is_ok_and(|pods| pods.items.iter().any(e2e::pod_is_ready))
        })
        .await;
    let delay = format!("{DELAY}s");
    let mut args = vec!["--drain-delay", delay.as_str()];
    args.extend(FAST_LEADER_ELECTION);
    let on_time = start_skewed(&mut sb, "+0", &args);
    wait_for_leader(&sb, &observer, on_time, PHASE).await;
    let ahead = start_skewed(&mut sb, "+5m", &args);
    request_reboot(&sb.control_plane, "sim-1");
    let cordoned = observer
        .eventually("sim-1 is cordoned, its drain delayed", PHASE, || {
            event_time(
                &sb.client,
                "sim-1",
                ControllerReason::Draining,
                "DrainDelayed",
            )
        })
        .await;
    // The leader dies halfway through the delay; the new one's clock is 5 minutes ahead of the
    // time of the grant in the ledger.
    tokio::time::sleep(Duration::from_secs(u64::try_from(DELAY / 2).unwrap_or(0))).await;
    sb.controllers[on_time].kill().await;
    wait_for_leader(&sb, &observer, ahead, TAKEOVER).await;
    let drained = observer
        .eventually("sim-1's drain starts", PHASE, || {
            event_time(&sb.client, "sim-1", ControllerReason::Draining, "Draining")
        })
        .await;
    // The grant is written just before the cordon, whose Event follows it: a second covers the
    // writes between.
    let earliest = cordoned + SignedDuration::from_secs(DELAY - 1);
    assert!(
        drained >= earliest,
        "with --drain-delay {DELAY}s, sim-1 was cordoned at {cordoned} and its drain started at \
         {drained} (API server's clock): the new leader, 5 minutes ahead, cut the delay short"
    );
    // It stood by when the grant was made, so it waits only what is left (about DELAY / 2 after
    // it takes over); waiting the whole delay again would start the drain at DELAY * 3 / 2 or
    // later. A quarter of the delay is left either way for a slow machine.
    let latest = cordoned + SignedDuration::from_secs(DELAY * 5 / 4);
    assert!(
        drained < latest,
        "with --drain-delay {DELAY}s, sim-1 was cordoned at {cordoned} and its drain started only \
         at {drained} (API server's clock): the new leader, which stood by when the slot was \
         granted, waited the whole delay again instead of what was left of it"
    );
    assert_clock_off(&sb, on_time, 0).await;
    assert_clock_off(&sb, ahead, 5).await;
    observer
        .wait_until("sim-1 rebooted and back", PHASE, || async {
            observer.rebooted_and_back("sim-1", 1)
        })
        .await;
    let report = observer.finish(&[]).await;
    eprintln!("{report}");
    sb.stop().await;
}

/// The reboot timeout compares `reboot-approved-at`, written by the clock of the leader that
/// approved the reboot, with the clock of the leader now (docs: Clocks). A new leader 5 minutes
/// ahead therefore calls a 20 s reboot overdue at once with `--reboot-timeout 2m`: on the safe
/// side, as documented: it warns and holds every new reboot of the pool, free slots or not,
/// until the node completes, and the rollout then goes on by itself within the budget.
#[tokio::test(flavor = "multi_thread")]
async fn a_new_leader_ahead_judges_the_reboot_timeout_by_its_clock_on_the_safe_side() {
    let mut sb = sandbox_with_budget(3, "2", Duration::from_secs(20)).await;
    let observer = Observer::start(sb.client.clone(), 2, "default", WORKLOAD).await;
    let mut args = vec!["--reboot-timeout", "2m"];
    args.extend(FAST_LEADER_ELECTION);
    let on_time = start_skewed(&mut sb, "+0", &args);
    wait_for_leader(&sb, &observer, on_time, PHASE).await;
    let ahead = start_skewed(&mut sb, "+5m", &args);
    request_reboot(&sb.control_plane, "sim-1");
    observer
        .wait_until("sim-1 is rebooting", PHASE, || async {
            protocol_annotations(&node(&sb.client, "sim-1").await)
                .contains(&"reboot-in-progress".to_owned())
        })
        .await;
    sb.controllers[on_time].kill().await;
    wait_for_leader(&sb, &observer, ahead, TAKEOVER).await;
    observer
        .wait_until("the new leader calls sim-1 overdue", PHASE, || {
            has_event(
                &sb.client,
                "sim-1",
                ControllerReason::RebootOverdue,
                &["--reboot-timeout"],
            )
        })
        .await;
    assert!(
        !observer.back("sim-1"),
        "sim-1 was back before it was called overdue: the scenario proves nothing"
    );
    // A free slot, but the pool is held while sim-1 is overdue.
    request_reboot(&sb.control_plane, "sim-2");
    observer
        .wait_until("sim-1 and sim-2 rebooted and back", PHASE, || async {
            observer.rebooted_and_back("sim-1", 1) && observer.rebooted_and_back("sim-2", 1)
        })
        .await;
    let completed = event_time(&sb.client, "sim-1", ControllerReason::Rebooted, "Rebooted")
        .await
        .expect("a Rebooted Event on sim-1");
    let approved = event_time(
        &sb.client,
        "sim-2",
        ControllerReason::RebootApproved,
        "RebootApproved",
    )
    .await
    .expect("a RebootApproved Event on sim-2");
    assert!(
        approved >= completed,
        "sim-2 was told to reboot at {approved} while sim-1, called overdue, completed only at \
         {completed} (API server's clock): an overdue node must hold the pool"
    );
    assert_clock_off(&sb, on_time, 0).await;
    assert_clock_off(&sb, ahead, 5).await;
    let report = observer.finish(&[]).await;
    eprintln!("{report}");
    sb.stop().await;
}
