//! Network faults between each program and the API server, through a real fault proxy
//! (Toxiproxy; see `nodesim::faults`): every controller and every agent reaches the API server
//! through a proxy of its own, so one program is slowed or cut while the others, and the
//! independent [`Observer`] (which goes straight to the API server), are not.
//!
//! - A leader cut off while it believes it leads stops acting by its own renew deadline and
//!   another replica takes over; what a frozen leader had in flight lands late and is fenced.
//! - Seconds of latency on every request and bursts of connection resets, for the controller
//!   and for the agents: the rollout finishes, nothing is lost.
//! - An agent that sees `reboot-now` but cannot write `reboot-in-progress`: the node stays
//!   held, the controller's `--reboot-timeout` says so with a Warning, and the node finishes
//!   once the cut heals. One back from its reboot that cannot write `reboot-done` holds
//!   nothing: the kubelet's report of the new boot completes the node.

use common::ControllerReason;
use e2e::{kubectl, node, observer::Observer, protocol_annotations, workload};
use futures::StreamExt as _;
use k8s_openapi::api::coordination::v1::Lease;
use kube::{
    Api,
    api::{WatchEvent, WatchParams},
};
use nodesim::sandbox::{OPERATOR_NAMESPACE, Sandbox, SandboxConfig};
use std::{
    sync::{Arc, Mutex},
    time::Duration,
};
use testenv::toxiproxy::{Proxy, Stream, Toxic};

/// How long any phase may take before the test fails.
const PHASE: Duration = Duration::from_secs(240);
/// Leader election fast enough for a test, with room for the 1 s each request of the leader
/// is held before the cut (a new connection takes three such trips).
const FAST_LEADER_ELECTION: [&str; 3] = [
    "--leader-election-lease-duration=6s",
    "--leader-election-renew-deadline=4s",
    "--leader-election-retry-period=1s",
];

/// A sandbox whose agents each go through a fault proxy, with the scheduler and the
/// controller-manager (real Deployments and PodDisruptionBudgets), and no controller yet.
async fn sandbox(nodes: usize, controller_args: &[&str], reboot_duration: Duration) -> Sandbox {
    let config = SandboxConfig::with_nodes(nodes)
        .reboot_duration(reboot_duration)
        .controller_args(controller_args)
        .no_controller()
        .fault_proxies()
        .control_plane(e2e::observer::observed_control_plane());
    Sandbox::start(config).await.expect("sandbox starts")
}

/// The sandbox of [`sandbox`] with the workload deployed (`pods_per_node` pods a node), the
/// observer watching it with a budget of 1, and controller-1 started through its proxy.
async fn start(
    nodes: usize,
    controller_args: &[&str],
    reboot_duration: Duration,
    pods_per_node: usize,
) -> (Sandbox, Vec<String>, Observer) {
    let mut sb = sandbox(nodes, controller_args, reboot_duration).await;
    let names = sb.fleet.names();
    // Every drain has pods to evict, and evictions are refused (429) while one is down.
    workload::deploy(&sb, pods_per_node * nodes, 1, &[], PHASE).await;
    let observer = Observer::start(
        sb.client.clone(),
        1,
        workload::NAMESPACE,
        workload::WORKLOAD,
    )
    .await;
    sb.start_proxied_controller(&[])
        .await
        .expect("controller-1");
    (sb, names, observer)
}

/// Waits for every node's one reboot, then has the observer account for everything.
async fn finish(sb: Sandbox, observer: &Observer, names: &[String]) {
    wait_for_every_reboot(observer, names).await;
    let report = observer.finish(&[]).await;
    eprintln!("{report}");
    sb.stop().await;
}

fn proxy<'a>(sb: &'a Sandbox, program: &str) -> &'a Proxy {
    sb.proxy(program)
        .unwrap_or_else(|| panic!("no fault proxy for {program}"))
}

async fn add(proxy: &Proxy, toxic: Toxic) {
    proxy
        .add(&toxic)
        .await
        .unwrap_or_else(|e| panic!("add {toxic:?} to {}: {e}", proxy.name()));
}

async fn heal(proxy: &Proxy) {
    proxy
        .clear()
        .await
        .unwrap_or_else(|e| panic!("heal {}: {e}", proxy.name()));
}

/// Holds every request of controller-1 a second on the way (at any instant its last renewal,
/// and what it does for the drain, is in flight), requests every node's reboot, and waits
/// until controller-1 says it leads while a node drains. Returns its proxy.
async fn leading_mid_drain_with_requests_in_flight(
    sb: &Sandbox,
    observer: &Observer,
    names: &[String],
) -> Proxy {
    let leader = proxy(sb, "controller-1").clone();
    add(
        &leader,
        Toxic::latency("in-flight", Stream::Upstream, 1000, 0),
    )
    .await;
    request_all(sb);
    observer
        .wait_until(
            "controller-1 says it leads while a node is being drained",
            PHASE,
            || async {
                says_it_leads(sb, 0).await == Some(true) && a_node_is_draining(sb, names).await
            },
        )
        .await;
    leader
}

async fn wait_for_leader(observer: &Observer, sb: &Sandbox, identity: &str) {
    observer
        .wait_until(&format!("{identity} leads"), PHASE, || async {
            e2e::leader_identity(&sb.client).await.as_deref() == Some(identity)
        })
        .await;
}

/// Every holder the leader Lease names from now on, change by change (a watch straight to the
/// API server from the Lease's current revision); `<watch failed>` if the watch did.
async fn watch_lease_holders(sb: &Sandbox) -> Arc<Mutex<Vec<String>>> {
    let leases = Api::<Lease>::namespaced(sb.client.clone(), OPERATOR_NAMESPACE);
    let lease = leases
        .get("reboot-controller")
        .await
        .expect("the leader Lease");
    let from = lease.metadata.resource_version.unwrap_or_default();
    let params = WatchParams::default().fields("metadata.name=reboot-controller");
    let mut stream = leases
        .watch(&params, &from)
        .await
        .expect("watch the Lease")
        .boxed();
    let holders = Arc::new(Mutex::new(Vec::new()));
    let seen = holders.clone();
    tokio::spawn(async move {
        while let Some(event) = stream.next().await {
            let holder = match event {
                Ok(WatchEvent::Added(l) | WatchEvent::Modified(l)) => {
                    l.spec.and_then(|s| s.holder_identity).unwrap_or_default()
                }
                Ok(WatchEvent::Bookmark(_)) => continue,
                _ => "<watch failed>".to_owned(),
            };
            seen.lock().expect("holders").push(holder);
        }
    });
    holders
}

fn request_all(sb: &Sandbox) {
    e2e::every_node::request(&sb.control_plane);
}

async fn wait_for_every_reboot(observer: &Observer, names: &[String]) {
    observer
        .wait_until("every node rebooted once and back", PHASE, || async {
            rolled_out(observer, names)
        })
        .await;
}

async fn has_annotation(sb: &Sandbox, name: &str, key: &str) -> bool {
    protocol_annotations(&node(&sb.client, name).await).contains(&key.to_owned())
}

fn log_of(sb: &Sandbox, controller: usize) -> String {
    std::fs::read_to_string(sb.controllers[controller].log_path()).unwrap_or_default()
}

/// Whether the controller says it leads (`node_reboot_leader`, from its own /metrics).
async fn says_it_leads(sb: &Sandbox, controller: usize) -> Option<bool> {
    let address = sb.controllers[controller].metrics_address()?;
    let text = e2e::scrape::scrape(address).await;
    e2e::scrape::metric(&text, "node_reboot_leader").map(|v| v == 1.0)
}

/// Whether a node is being drained: cordoned by the operator, not yet told to reboot.
async fn a_node_is_draining(sb: &Sandbox, names: &[String]) -> bool {
    for name in names {
        let state = protocol_annotations(&node(&sb.client, name).await);
        let has = |k: &str| state.iter().any(|s| s == k);
        if has("reboot-cordoned") && !has("reboot-now") && !has("reboot-in-progress") {
            return true;
        }
    }
    false
}

/// The leader loses the API server in the middle of a drain, while its writes are in flight
/// (every request it sends is held 1 s on the way: at the cut, what it sent in the last second
/// has not landed yet). From then on nothing it sends is answered, and what it sends lands
/// 8 s late: its own clock must make it stop within its renew deadline, another replica takes
/// over, and the Lease never names it again. (What it gives up on lands with its connection
/// closed, and the API server drops it; writes landing late on open connections are
/// [`writes_a_frozen_leader_had_in_flight_land_late_and_are_fenced`].)
#[tokio::test(flavor = "multi_thread")]
async fn a_partitioned_leader_stops_acting_by_its_own_clock_and_another_takes_over() {
    let (mut sb, names, observer) =
        start(4, &FAST_LEADER_ELECTION, Duration::from_secs(1), 2).await;
    wait_for_leader(&observer, &sb, "controller-1").await;
    sb.start_proxied_controller(&[])
        .await
        .expect("controller-2");
    let leader = leading_mid_drain_with_requests_in_flight(&sb, &observer, &names).await;
    let before_the_cut = log_of(&sb, 0).len();
    // The cut: no answer reaches it (its connections stay open), and what it sends from now
    // on lands 8 s late (longer than the lease: after the other replica has taken over).
    add(&leader, Toxic::timeout("cut", Stream::Downstream, 0)).await;
    add(&leader, Toxic::latency("late", Stream::Upstream, 8000, 0)).await;
    leader
        .remove("in-flight")
        .await
        .expect("replace the latency");

    // Its own word that it stopped: the log line and the gauge, both after the cut.
    observer
        .wait_until("controller-1 says it stopped acting", PHASE, || async {
            log_of(&sb, 0)[before_the_cut..].contains("no longer leading: stopped acting")
                && says_it_leads(&sb, 0).await == Some(false)
        })
        .await;
    wait_for_leader(&observer, &sb, "controller-2").await;
    // What controller-1 sends after the cut lands from now on: it must not win the Lease back.
    let holders = watch_lease_holders(&sb).await;
    // The cut holds until the new leader has completed a reboot of its own, so that the late
    // writes land on a rollout that moved on.
    observer
        .wait_until("the new leader completes a reboot", PHASE, || async {
            names.iter().any(|n| observer.rebooted_and_back(n, 1))
        })
        .await;
    heal(&leader).await;

    wait_for_every_reboot(&observer, &names).await;
    assert_only_controller_2_held(&holders);
    finish(sb, &observer, &names).await;
}

/// What a leader had in flight lands late, on connections still open: the leader froze (a
/// long pause of its process or its VM) with requests on the way, the network stopped
/// forwarding them (its proxy frozen), another replica took over; then the network delivers
/// what it held. Each late request must fail on its condition (the Lease's revision, the
/// slot's grant): the Lease never names the frozen leader again, no budget is exceeded and no
/// drain skipped. Thawed, the old leader finds by its own clock that it no longer leads.
#[tokio::test(flavor = "multi_thread")]
async fn writes_a_frozen_leader_had_in_flight_land_late_and_are_fenced() {
    let (mut sb, names, observer) =
        start(4, &FAST_LEADER_ELECTION, Duration::from_secs(1), 2).await;
    wait_for_leader(&observer, &sb, "controller-1").await;
    // Straight to the API server: it must take over while the proxies are frozen.
    sb.start_controller(&[]).expect("controller-2");
    let leader = leading_mid_drain_with_requests_in_flight(&sb, &observer, &names).await;
    let toxiproxy = sb.faults.as_ref().expect("fault proxies").toxiproxy();
    sb.controllers[0].freeze();
    toxiproxy.freeze(true);
    wait_for_leader(&observer, &sb, "controller-2").await;
    let holders = watch_lease_holders(&sb).await;
    toxiproxy.freeze(false);
    // Gives what was held the time to land (at most the second of the latency; this only
    // waits).
    tokio::time::sleep(Duration::from_secs(3)).await;
    let before_the_thaw = log_of(&sb, 0).len();
    sb.controllers[0].thaw();
    observer
        .wait_until(
            "controller-1, thawed, says it stopped acting",
            PHASE,
            || async {
                log_of(&sb, 0)[before_the_thaw..].contains("no longer leading: stopped acting")
            },
        )
        .await;
    heal(&leader).await;

    wait_for_every_reboot(&observer, &names).await;
    assert_only_controller_2_held(&holders);
    finish(sb, &observer, &names).await;
}

/// The Lease named only controller-2 since it took it (read before the sandbox stops: then
/// controller-2 releases it, and it names nobody).
fn assert_only_controller_2_held(holders: &Mutex<Vec<String>>) {
    let holders = holders.lock().expect("holders").clone();
    eprintln!("the Lease's holders after controller-2 took it: {holders:?}");
    assert!(
        holders.iter().all(|h| h == "controller-2"),
        "after controller-2 took the Lease, it named {holders:?}: a late write of the \
         old leader won it back, or the watch failed"
    );
}

/// 1-5 s on every answer, for the leader and for every agent, and bursts of connection
/// resets on all of them: slow, but the rollout finishes within its budget and loses nothing.
#[tokio::test(flavor = "multi_thread")]
async fn seconds_of_latency_and_bursts_of_resets_lose_nothing() {
    let (sb, names, observer) = start(3, &[], Duration::from_secs(1), 2).await;
    let mut programs = names.clone();
    programs.push("controller-1".into());
    for program in &programs {
        add(
            proxy(&sb, program),
            Toxic::latency("slow", Stream::Downstream, 3000, 2000),
        )
        .await;
    }
    request_all(&sb);
    // Bursts of resets until the rollout is over: every connection reset for a second, then
    // left alone for 15 s (a new connection takes two round trips of 1-5 s before its first
    // answer: more frequent bursts would leave no connection alive at all).
    let mut bursts = 0;
    while !rolled_out(&observer, &names) {
        assert!(
            bursts < 40,
            "the rollout did not finish within 40 bursts of resets"
        );
        if let Err(violation) = observer.check() {
            observer.fail(&violation);
        }
        reset_burst(&sb, &programs).await;
        bursts += 1;
        let quiet = std::time::Instant::now();
        while quiet.elapsed() < Duration::from_secs(15) && !rolled_out(&observer, &names) {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    eprintln!("{bursts} bursts of resets during the rollout");
    finish(sb, &observer, &names).await;
}

fn rolled_out(observer: &Observer, names: &[String]) -> bool {
    names.iter().all(|n| observer.rebooted_and_back(n, 1))
}

/// Every connection of every program in `programs` reset, for a second.
async fn reset_burst(sb: &Sandbox, programs: &[String]) {
    for program in programs {
        add(
            proxy(sb, program),
            Toxic::reset_peer("resets", Stream::Upstream, 0),
        )
        .await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    for program in programs {
        proxy(sb, program)
            .remove("resets")
            .await
            .expect("end the burst");
    }
}

/// What the documentation promises for a node whose agent is cut off: the node keeps its slot
/// and cordon, the controller's `--reboot-timeout` says so with a `RebootOverdue` Warning, and
/// the node finishes when the agent is back.
async fn a_held_node_is_overdue_then_finishes(sb: &Sandbox, observer: &Observer, cut: &Proxy) {
    let held = cut.name();
    e2e::wait_for_event(
        &sb.client,
        held,
        ControllerReason::RebootOverdue,
        &[held],
        None,
    )
    .await;
    if let Err(violation) = observer.check() {
        observer.fail(&violation);
    }
    assert!(
        has_annotation(sb, held, "reboot-cordoned").await,
        "{held} stays cordoned while its agent is cut off"
    );
    heal(cut).await;
    cut.set_enabled(true).await.expect("enable the proxy");
    observer
        .wait_until(&format!("{held} finishes"), PHASE, || async {
            observer.rebooted_and_back(held, 1)
        })
        .await;
}

/// The agent sees `reboot-now` (its watch answers still come) but cannot write
/// `reboot-in-progress` (nothing it sends gets through): it must not reboot without that
/// record, and the node waits, held, until the agent is back.
#[tokio::test(flavor = "multi_thread")]
async fn an_agent_cut_off_before_it_records_the_reboot_holds_its_node() {
    let (sb, names, observer) =
        start(2, &["--reboot-timeout=10s"], Duration::from_secs(1), 1).await;
    let cut = proxy(&sb, "sim-1").clone();
    add(&cut, Toxic::timeout("cut", Stream::Upstream, 0)).await;
    request_all(&sb);
    e2e::wait_for_event(
        &sb.client,
        "sim-1",
        ControllerReason::RebootOverdue,
        &["sim-1"],
        None,
    )
    .await;
    assert!(
        has_annotation(&sb, "sim-1", "reboot-now").await,
        "sim-1 still holds its go-ahead: the agent could not take it"
    );
    assert_eq!(
        sb.fleet.reboots("sim-1"),
        0,
        "the agent rebooted without recording reboot-in-progress"
    );
    a_held_node_is_overdue_then_finishes(&sb, &observer, &cut).await;
    finish(sb, &observer, &names).await;
}

/// The agent recorded `reboot-in-progress` and the node rebooted, but the agent that comes
/// back cannot reach the API server to write `reboot-done`: the kubelet's report of another
/// boot than the one recorded, Ready, proves the reboot, and the controller completes the node
/// without the agent.
#[tokio::test(flavor = "multi_thread")]
async fn an_agent_cut_off_after_the_reboot_does_not_hold_its_node_the_kubelet_proves_it() {
    let (sb, names, observer) =
        start(2, &["--reboot-timeout=10s"], Duration::from_secs(4), 1).await;
    let cut = proxy(&sb, "sim-1").clone();
    kubectl(
        &sb.control_plane,
        &["annotate", "node", "sim-1", "reboot-needed=true"],
    );
    observer
        .wait_until("sim-1 records reboot-in-progress", PHASE, || async {
            has_annotation(&sb, "sim-1", "reboot-in-progress").await
        })
        .await;
    // The simulated reboot takes 4 s: the agent that comes back finds its proxy gone.
    cut.set_enabled(false).await.expect("disable sim-1's proxy");
    kubectl(
        &sb.control_plane,
        &["annotate", "node", "sim-2", "reboot-needed=true"],
    );
    observer
        .wait_until(
            "sim-1 completed by the kubelet's report while its agent is cut off",
            PHASE,
            || async { observer.rebooted_and_back("sim-1", 1) },
        )
        .await;
    assert_eq!(sb.fleet.reboots("sim-1"), 1);
    e2e::wait_for_event(
        &sb.client,
        "sim-1",
        ControllerReason::Rebooted,
        &["new boot id", "reported by the kubelet"],
        None,
    )
    .await;
    heal(&cut).await;
    cut.set_enabled(true).await.expect("enable the proxy");
    finish(sb, &observer, &names).await;
}
