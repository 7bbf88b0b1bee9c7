//! Safety under concurrency and faults (docs/src/reliability.md), end to end: several controller
//! replicas at once, leader hand-overs, frozen and killed controllers, killed agents, an API server
//! restart, cancels during drains, an administrator's cordon, nodes leaving and rejoining the
//! pool, and kubelets that report a reboot late. Every scenario is watched by the independent
//! [`Observer`], which checks the budget and the drain at every event, in etcd order, and
//! accounts for every request at the end.

use common::ControllerReason;
use e2e::{
    BudgetWatch, NodeHistory, apply, has_event, kubectl, label_node, node, observer::Observer,
    pod_that_blocks_the_drain_of, request_reboot, workload,
};
use nodesim::sandbox::{Sandbox, SandboxConfig};
use std::{collections::BTreeMap, time::Duration};

/// How long any phase of these scenarios may take before the test fails.
const PHASE: Duration = Duration::from_secs(240);
const POOL_A: &str = "pool=a";
/// Leader election fast enough for a test: a frozen leader is replaced after 4 s.
const FAST_LEADER_ELECTION: [&str; 3] = [
    "--leader-election-lease-duration=4s",
    "--leader-election-renew-deadline=3s",
    "--leader-election-retry-period=1s",
];
const LEASE: Duration = Duration::from_secs(4);

struct Setup {
    nodes: usize,
    max_unavailable: &'static str,
    controller_args: Vec<&'static str>,
    pool: bool,
    kubelet_reports_boot_after: Option<Duration>,
    reboot_duration: Duration,
}

impl Default for Setup {
    fn default() -> Self {
        Self {
            nodes: 4,
            max_unavailable: "1",
            controller_args: Vec::new(),
            pool: false,
            kubelet_reports_boot_after: None,
            reboot_duration: Duration::from_secs(1),
        }
    }
}

/// A sandbox with the scheduler and the controller-manager (so Deployments, DaemonSets and
/// PodDisruptionBudgets are real) and no controller yet: each scenario starts its own.
async fn sandbox(setup: Setup) -> Sandbox {
    let node_labels = if setup.pool {
        BTreeMap::from([("pool".to_owned(), "a".to_owned())])
    } else {
        BTreeMap::new()
    };
    let config = SandboxConfig::with_nodes(setup.nodes)
        .max_unavailable(setup.max_unavailable)
        .reboot_duration(setup.reboot_duration)
        .kubelet_reports_boot_after(setup.kubelet_reports_boot_after)
        .node_labels(node_labels)
        .controller_args(setup.controller_args)
        .no_controller()
        .control_plane(e2e::observer::observed_control_plane());
    Sandbox::start(config).await.expect("sandbox starts")
}

/// Deploys the workload (`replicas` replicas, one down at a time) and waits until it is
/// Ready on every node of `spread_over`.
async fn deploy_workload(sb: &Sandbox, replicas: usize, spread_over: &[String]) {
    workload::deploy(sb, replicas, 1, spread_over, PHASE).await;
}

async fn respread_workload(sb: &Sandbox, replicas: usize, spread_over: &[String]) {
    workload::respread(sb, replicas, spread_over, PHASE).await;
}

async fn start_observer(sb: &Sandbox, budget: usize) -> Observer {
    Observer::start(
        sb.client.clone(),
        budget,
        workload::NAMESPACE,
        workload::WORKLOAD,
    )
    .await
}

fn request_all(sb: &Sandbox) {
    e2e::every_node::request(&sb.control_plane);
}

/// `kubectl annotate node <a> <b> ... reboot-needed=true`.
fn request(sb: &Sandbox, nodes: &[&str]) {
    let mut args = vec!["annotate", "node"];
    args.extend(nodes);
    args.push("reboot-needed=true");
    kubectl(&sb.control_plane, &args);
}

fn others_than<'a>(names: &'a [String], node: &str) -> Vec<&'a str> {
    names
        .iter()
        .map(String::as_str)
        .filter(|n| *n != node)
        .collect()
}

/// Waits until every node of `expected` went through exactly that many reboots and is back.
async fn wait_for_reboots(observer: &Observer, expected: &BTreeMap<String, u32>, what: &str) {
    observer
        .wait_until(what, PHASE, || async {
            expected
                .iter()
                .all(|(node, reboots)| observer.rebooted_and_back(node, *reboots))
        })
        .await;
}

fn each(names: &[String], reboots: u32) -> BTreeMap<String, u32> {
    names.iter().map(|n| (n.clone(), reboots)).collect()
}

/// Gives a reboot that should not happen the time to show (nothing asserts how long things
/// take; this only waits).
async fn settle() {
    tokio::time::sleep(Duration::from_secs(3)).await;
}

// Finding 1: drain progress must belong to one grant, not to a node name.
#[tokio::test(flavor = "multi_thread")]
async fn a_nodes_second_reboot_is_drained_again_whichever_replica_acts() {
    let mut sb = sandbox(Setup {
        nodes: 4,
        max_unavailable: "1",
        ..Setup::default()
    })
    .await;
    let names = sb.fleet.names();
    let replicas = 2 * names.len();
    deploy_workload(&sb, replicas, &names).await;
    let observer = start_observer(&sb, 1).await;
    for _ in 0..3 {
        sb.start_controller(&["--leader-elect=false"]).unwrap();
    }
    request_all(&sb);
    wait_for_reboots(
        &observer,
        &each(&names, 1),
        "every node rebooted once and back",
    )
    .await;
    // The nodes drained last hold no replica now: put replicas on every node again, so that
    // a second reboot without a drain has pods to bypass.
    respread_workload(&sb, replicas, &names).await;
    request_all(&sb);
    wait_for_reboots(
        &observer,
        &each(&names, 2),
        "every node rebooted twice and back",
    )
    .await;
    settle().await;
    let report = observer.finish(&[]).await;
    eprintln!("{report}");
    sb.stop().await;
}

/// Finding 3: a node that holds a slot and leaves the pool (its `--node-selector` label
/// flipped) keeps its slot until its reboot is completed, whatever its labels do meanwhile.
async fn a_slot_holder_leaving_the_pool(max_unavailable: &'static str) {
    let mut sb = sandbox(Setup {
        nodes: 4,
        max_unavailable,
        controller_args: vec!["--node-selector", POOL_A],
        pool: true,
        // Long enough for the controller to act on the departure while the node is down.
        reboot_duration: Duration::from_secs(6),
        ..Setup::default()
    })
    .await;
    let names = sb.fleet.names();
    deploy_workload(&sb, names.len(), &names).await;
    let observer = start_observer(&sb, 1).await;
    sb.start_controller(&[]).unwrap();
    let leaver = "sim-1";
    request_reboot(&sb.control_plane, leaver);
    observer
        .wait_until(&format!("{leaver} is rebooting"), PHASE, || async {
            let n = node(&sb.client, leaver).await;
            e2e::protocol_annotations(&n).contains(&"reboot-in-progress".to_owned())
        })
        .await;
    label_node(&sb.control_plane, leaver, "pool=b");
    request(&sb, &others_than(&names, leaver));
    observer
        .wait_until(
            &format!("{leaver} is rebooted and completed outside the pool"),
            PHASE,
            || async { observer.rebooted_and_back(leaver, 1) },
        )
        .await;
    label_node(&sb.control_plane, leaver, POOL_A);
    wait_for_reboots(
        &observer,
        &each(&names, 1),
        "every node rebooted once and back",
    )
    .await;
    settle().await;
    let report = observer.finish(&[]).await;
    assert_eq!(
        observer.tally(leaver).reboots,
        1,
        "{leaver} was rebooted again after rejoining the pool"
    );
    eprintln!("{report}");
    sb.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_slot_holder_leaving_the_pool_keeps_its_slot_until_completed() {
    a_slot_holder_leaving_the_pool("1").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_slot_holder_leaving_the_pool_counts_against_a_percentage_budget() {
    // 25% of the 4 nodes of the pool is 1, and still 1 of the 3 left when one departs.
    a_slot_holder_leaving_the_pool("25%").await;
}

// Finding 4: completion waits for the kubelet to report the new boot.
#[tokio::test(flavor = "multi_thread")]
async fn a_node_is_completed_only_once_the_kubelet_reports_the_new_boot() {
    let mut sb = sandbox(Setup {
        nodes: 2,
        max_unavailable: "1",
        kubelet_reports_boot_after: Some(Duration::from_secs(5)),
        ..Setup::default()
    })
    .await;
    let names = sb.fleet.names();
    deploy_workload(&sb, names.len(), &names).await;
    let observer = start_observer(&sb, 1).await;
    let history = NodeHistory::start(sb.client.clone(), "sim-1").await;
    let first = history.states()[0].clone();
    sb.start_controller(&[]).unwrap();
    request_reboot(&sb.control_plane, "sim-1");
    observer
        .wait_until("sim-1 is rebooted and back", PHASE, || async {
            observer.rebooted_and_back("sim-1", 1)
        })
        .await;
    let report = observer.finish(&[]).await;
    history.check().unwrap();
    let states = history.states();
    let cordoned = states
        .iter()
        .position(|s| s.unschedulable)
        .expect("the node was cordoned for its reboot");
    let completed = states[cordoned..]
        .iter()
        .find(|s| !s.unschedulable || s.last_completed != first.last_completed)
        .expect("the node was completed");
    assert_ne!(
        completed.boot_id,
        first.boot_id,
        "sim-1 was completed (uncordoned: {}, reboot-last-completed: {:?}) at revision {} while \
         the kubelet still reported the boot before the reboot ({}): completion must wait for \
         status.nodeInfo.bootID to show the new boot\nhistory of sim-1:\n  {}",
        !completed.unschedulable,
        completed.last_completed,
        completed.revision,
        first.boot_id,
        states
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("\n  ")
    );
    eprintln!("{report}");
    sb.stop().await;
}

// The observer answers while its watches feed it: the soak asks for its report every second.
// Its report once took the record's lock and then a watch's, while a watch feeding an event
// takes its own and then the record's: the two deadlocked, and with them the runtime.
#[tokio::test(flavor = "multi_thread")]
async fn the_observer_reports_while_its_watches_feed_it() {
    let mut sb = sandbox(Setup::default()).await;
    let names = sb.fleet.names();
    deploy_workload(&sb, names.len(), &names).await;
    let observer = start_observer(&sb, 1).await;
    sb.start_controller(&[]).unwrap();
    let done = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|threads| {
        // A deadlock holds every thread of the runtime: only a thread of its own can say so.
        threads.spawn(|| {
            let start = std::time::Instant::now();
            while !done.load(std::sync::atomic::Ordering::SeqCst) {
                if start.elapsed() > 2 * PHASE {
                    eprintln!("the observer deadlocked: its report and a watch wait on each other");
                    std::process::exit(1);
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        });
        threads.spawn(|| {
            let mut reports = 0u64;
            while !done.load(std::sync::atomic::Ordering::SeqCst) {
                let _ = observer.report();
                reports += 1;
            }
            eprintln!("{reports} reports taken while the watches fed the observer");
        });
        // Set even when the wait fails, so that the threads end and the failure shows.
        let _done = SetOnDrop(&done);
        tokio::task::block_in_place(|| {
            tokio::runtime::Handle::current().block_on(async {
                request_all(&sb);
                wait_for_reboots(&observer, &each(&names, 1), "every node rebooted once").await;
            });
        });
    });
    observer.finish(&[]).await;
    sb.stop().await;
}

struct SetOnDrop<'a>(&'a std::sync::atomic::AtomicBool);

impl Drop for SetOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

// The observers themselves: they resume after an API server restart and still catch what
// happens afterwards.
#[tokio::test(flavor = "multi_thread")]
async fn the_observers_resume_after_an_api_server_restart() {
    let config = SandboxConfig::with_nodes(4).no_controller().without_pods();
    let mut sb = Sandbox::start(config).await.expect("sandbox starts");
    let budget = 1;
    let watch = BudgetWatch::start(sb.client.clone(), budget).await;
    let history = NodeHistory::start(sb.client.clone(), "sim-1").await;
    sb.control_plane
        .restart_apiserver()
        .await
        .expect("API server restarts");
    // No controller runs: budget + 1 nodes go NotReady on their own, a change the watch can
    // only see if it resumed.
    for name in ["sim-1", "sim-2"] {
        sb.fleet.set_ready(name, false).await;
    }
    let broken = e2e::eventually(
        "the budget watch sees 2 nodes NotReady",
        Duration::from_secs(120),
        None,
        || async { watch.check().err() },
    )
    .await;
    assert!(
        broken.contains("2 nodes unavailable at once with a budget of 1"),
        "{broken}"
    );
    let coverage = watch.coverage();
    eprintln!("budget watch after the restart: {coverage}");
    assert!(coverage.errors >= 1, "the restart was noticed: {coverage}");
    assert!(
        coverage.relists >= 1,
        "the watch started over with a re-list: {coverage}"
    );
    let now = node(&sb.client, "sim-1").await;
    e2e::wait_until(
        "the history of sim-1 shows its state after the restart",
        Duration::from_secs(120),
        None,
        || async {
            history.states().last().map(|s| s.revision) == Some(nodesim::observe::revision(&now))
        },
    )
    .await;
    history.check().unwrap();
    eprintln!("history of sim-1 after the restart: {}", history.coverage());
    sb.stop().await;
}

/// What the scenario did to the system, for the figures at the end.
#[derive(Debug, Default)]
struct Faults {
    controllers_killed: u32,
    controllers_frozen: u32,
    agents_killed: u32,
    api_server_restarts: u32,
}

impl std::fmt::Display for Faults {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "chaos: survived {} controller kills, {} controller freezes longer than the lease, \
             {} agent kills, {} API server restart(s)",
            self.controllers_killed,
            self.controllers_frozen,
            self.agents_killed,
            self.api_server_restarts
        )
    }
}

/// Who plays which part in the chaos scenario.
struct Roles {
    /// Its request is cancelled during its drain (a pod no budget lets go keeps it draining).
    cancelled: &'static str,
    /// An administrator cordons it before its first request.
    admin_cordoned: &'static str,
    /// It leaves the pool while it holds a slot, and comes back.
    leaver: &'static str,
}

const ROLES: Roles = Roles {
    cancelled: "sim-3",
    admin_cordoned: "sim-4",
    leaver: "sim-7",
};

#[tokio::test(flavor = "multi_thread")]
async fn chaos_keeps_the_budget_the_drain_and_every_request() {
    // The cancelled node's drain must start though its budget allows no disruption.
    let mut controller_args = vec![
        "--node-selector",
        POOL_A,
        "--drain-timeout",
        "60s",
        "--check-disruption-budgets=false",
    ];
    controller_args.extend(FAST_LEADER_ELECTION);
    let mut sb = sandbox(Setup {
        nodes: 10,
        max_unavailable: "2",
        controller_args,
        pool: true,
        ..Setup::default()
    })
    .await;
    let names = sb.fleet.names();
    deploy_workload(&sb, names.len(), &names).await;
    apply(
        &sb.control_plane,
        &pod_that_blocks_the_drain_of(ROLES.cancelled),
    );
    wait_until_the_blocker_allows_no_disruption(&sb).await;
    let observer = start_observer(&sb, 2).await;
    let mut faults = Faults::default();
    replicas_without_leader_election(&mut sb, &observer, &mut faults).await;
    leaders_killed_and_frozen_and_an_api_server_restart(&mut sb, &observer, &mut faults).await;
    settle().await;
    let report = observer.finish(&[]).await;
    eprintln!("{report}");
    eprintln!("{faults}");
    sb.stop().await;
}

/// Phase 1: three replicas without leader election reboot every node twice, through a cancel
/// during a drain, an administrator's cordon and killed agents.
async fn replicas_without_leader_election(
    sb: &mut Sandbox,
    observer: &Observer,
    faults: &mut Faults,
) {
    let names = sb.fleet.names();
    let Roles {
        cancelled,
        admin_cordoned,
        ..
    } = ROLES;
    for _ in 0..3 {
        sb.start_controller(&["--leader-elect=false"]).unwrap();
    }
    kubectl(&sb.control_plane, &["cordon", admin_cordoned]);
    request_all(sb);
    observer
        .wait_until(&format!("{cancelled} is draining"), PHASE, || {
            has_event(&sb.client, cancelled, ControllerReason::Draining, &[])
        })
        .await;
    kubectl(
        &sb.control_plane,
        &["annotate", "node", cancelled, "reboot-needed-"],
    );
    kubectl(
        &sb.control_plane,
        &["delete", "pod", "precious", "--wait=false"],
    );
    kubectl(&sb.control_plane, &["delete", "pdb", "never-disrupt"]);
    kill_agents(sb, faults, &["sim-5", "sim-9"]).await;
    let mut expected = each(&names, 1);
    expected.insert(cancelled.to_owned(), 0);
    expected.remove(admin_cordoned);
    wait_for_reboots(observer, &expected, "phase 1: every request done once").await;
    observer
        .wait_until(
            &format!("{admin_cordoned} rebooted, its cordon kept"),
            PHASE,
            || async {
                observer.tally(admin_cordoned).reboots == 1
                    && observer.out_of_protocol(admin_cordoned)
            },
        )
        .await;
    let still_cordoned = node(&sb.client, admin_cordoned)
        .await
        .spec
        .and_then(|s| s.unschedulable)
        .unwrap_or(false);
    if !still_cordoned {
        observer.fail(&format!(
            "the administrator's cordon of {admin_cordoned} was lost"
        ));
    }
    kubectl(&sb.control_plane, &["uncordon", admin_cordoned]);
    respread_workload(sb, names.len(), &names).await;
    request_all(sb);
    kill_agents(sb, faults, &["sim-2", "sim-8"]).await;
    expected = each(&names, 2);
    expected.insert(cancelled.to_owned(), 1);
    wait_for_reboots(
        observer,
        &expected,
        "phase 1: every node's second reboot done",
    )
    .await;
}

/// Phase 2: two replicas with leader election reboot every node once more while the leader
/// is killed, then frozen for longer than its lease, the API server is restarted, agents
/// are killed, and a node that holds a slot leaves the pool and comes back.
async fn leaders_killed_and_frozen_and_an_api_server_restart(
    sb: &mut Sandbox,
    observer: &Observer,
    faults: &mut Faults,
) {
    let names = sb.fleet.names();
    let Roles {
        cancelled, leaver, ..
    } = ROLES;
    for controller in &mut sb.controllers {
        controller.kill().await;
    }
    for _ in 0..2 {
        sb.start_controller(&[]).unwrap();
    }
    respread_workload(sb, names.len(), &names).await;
    request_reboot(&sb.control_plane, leaver);
    observer
        .wait_until(&format!("{leaver} holds a slot"), PHASE, || {
            e2e::holds_a_slot(&sb.client, leaver)
        })
        .await;
    label_node(&sb.control_plane, leaver, "pool=b");
    request(sb, &others_than(&names, leaver));
    let leading = wait_for_a_leader(sb, observer).await;
    sb.controllers[leading].kill().await;
    sb.controllers[leading].restart().await.unwrap();
    faults.controllers_killed += 1;
    kill_agents(sb, faults, &["sim-1"]).await;
    let leading = wait_for_a_leader(sb, observer).await;
    sb.controllers[leading].freeze();
    tokio::time::sleep(LEASE * 2).await;
    sb.controllers[leading].thaw();
    faults.controllers_frozen += 1;
    sb.control_plane
        .restart_apiserver()
        .await
        .expect("API server restarts");
    faults.api_server_restarts += 1;
    kill_agents(sb, faults, &["sim-6"]).await;
    observer
        .wait_until(
            &format!("{leaver} is rebooted and completed outside the pool"),
            PHASE,
            || async { observer.rebooted_and_back(leaver, 3) },
        )
        .await;
    label_node(&sb.control_plane, leaver, POOL_A);
    let mut expected = each(&names, 3);
    expected.insert(cancelled.to_owned(), 2);
    wait_for_reboots(
        observer,
        &expected,
        "phase 2: every node's third reboot done",
    )
    .await;
}

async fn kill_agents(sb: &Sandbox, faults: &mut Faults, nodes: &[&str]) {
    for name in nodes {
        sb.fleet.kill_agent(name).await;
        faults.agents_killed += 1;
    }
}

async fn wait_for_a_leader(sb: &Sandbox, observer: &Observer) -> usize {
    observer
        .eventually("a controller leads", PHASE, || e2e::leading_controller(sb))
        .await
}

/// Waits until the controller-manager has computed that `never-disrupt` allows nothing, so
/// that the drain of its node is blocked from the start.
async fn wait_until_the_blocker_allows_no_disruption(sb: &Sandbox) {
    e2e::wait_until("the PDB allows no disruption", PHASE, None, || async {
        let status = "jsonpath={.status.currentHealthy}/{.status.disruptionsAllowed}";
        kubectl(
            &sb.control_plane,
            &["get", "pdb", "never-disrupt", "-o", status],
        ) == "1/0"
    })
    .await;
}
