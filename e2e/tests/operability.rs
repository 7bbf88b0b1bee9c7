//! Operability end to end (docs/src/operations.md): leader election between real controller
//! processes, `/metrics` after a real rollout, each node's story as the real kubectl shows it,
//! `/readyz` before and after the cache sync, JSON log lines, and the sandbox's printed metrics
//! addresses. A real API server, real agents on simulated nodes, and an independent
//! [`BudgetWatch`] on every rollout.

use e2e::{
    BudgetWatch, apply, eventually, kubectl, pod_that_blocks_the_drain_of, request_reboot,
    rollout::{ROLLOUT, back, rollout_completes},
    scrape::{agent_serving, get, metric, scrape},
    wait_until,
};
use nodesim::{
    ControllerProcess,
    sandbox::{OPERATOR_NAMESPACE, Sandbox, SandboxConfig, create_namespace},
    workspace_binary,
};
use serde_json::Value;
use std::{
    collections::BTreeSet,
    net::SocketAddr,
    path::Path,
    process::Stdio,
    time::{Duration, Instant},
};
use testenv::{ControlPlane, Options};
use tokio::{
    io::{AsyncBufReadExt, BufReader},
    net::{TcpListener, TcpStream},
};

fn light_control_plane() -> Options {
    Options {
        controller_manager: false,
        scheduler: false,
        ..Options::default()
    }
}

async fn sandbox(config: SandboxConfig) -> Sandbox {
    Sandbox::start(config).await.expect("sandbox starts")
}

fn metrics_address(controller: &ControllerProcess) -> SocketAddr {
    controller
        .metrics_address()
        .expect("the controller serves metrics")
}

/// The leader gauge of every live controller: exactly one is 1, and it is the Lease holder.
async fn the_one_leader(sb: &Sandbox, live: &[usize]) -> Option<usize> {
    let holder = e2e::leader_identity(&sb.client).await?;
    let mut leaders = Vec::new();
    for &i in live {
        let text = get(metrics_address(&sb.controllers[i]), "/metrics")
            .await?
            .1;
        if metric(&text, "node_reboot_leader")? == 1.0 {
            leaders.push(i);
        }
    }
    match leaders[..] {
        [one] if sb.controllers[one].identity() == holder => Some(one),
        _ => None,
    }
}

async fn wait_for_the_one_leader(
    sb: &Sandbox,
    live: &[usize],
    watch: Option<&BudgetWatch>,
) -> usize {
    eventually(
        &format!("exactly one of the controllers {live:?} leads (Lease and gauge agree)"),
        Duration::from_secs(60),
        watch,
        || the_one_leader(sb, live),
    )
    .await
}

/// `nodes` nodes under a budget of 2, two controller replicas electing a leader with these
/// Lease timings (renewal every 500 ms), every node requested, two already rebooted: the
/// sandbox, its budget watch and the index of the replica that leads.
async fn two_replicas_mid_rollout(
    nodes: usize,
    lease: &str,
    renew_deadline: &str,
) -> (Sandbox, BudgetWatch, usize) {
    let config = SandboxConfig::with_nodes(nodes)
        .max_unavailable("2")
        .no_controller()
        .controller_args([
            format!("--leader-election-lease-duration={lease}"),
            format!("--leader-election-renew-deadline={renew_deadline}"),
            "--leader-election-retry-period=500ms".to_owned(),
        ])
        .without_pods();
    let mut sb = sandbox(config).await;
    sb.start_controller(&[]).unwrap();
    sb.start_controller(&[]).unwrap();
    let watch = BudgetWatch::start(sb.client.clone(), 2).await;
    let first = wait_for_the_one_leader(&sb, &[0, 1], Some(&watch)).await;
    e2e::every_node::request(&sb.control_plane);
    wait_until("two nodes rebooted", ROLLOUT, Some(&watch), || async {
        sb.fleet.total_reboots() >= 2
    })
    .await;
    (sb, watch, first)
}

#[tokio::test(flavor = "multi_thread")]
async fn two_replicas_one_leads_and_hands_over_on_sigterm_at_once_and_on_sigkill_within_the_lease()
{
    const LEASE_DURATION: Duration = Duration::from_secs(6);
    let (mut sb, watch, first) = two_replicas_mid_rollout(16, "6s", "4s").await;
    let second = 1 - first;

    // SIGTERM: the leader stops acting, releases the Lease, exits; the other takes over at
    // once instead of waiting for the Lease to expire.
    let sigterm = Instant::now();
    assert!(
        sb.controllers[first]
            .terminate(Duration::from_secs(5))
            .await,
        "the leader exits within 5 s of SIGTERM"
    );
    let next = sb.controllers[second].identity();
    wait_until(
        "the other replica holds the Lease",
        LEASE_DURATION * 2,
        Some(&watch),
        || async { e2e::leader_identity(&sb.client).await.as_deref() == Some(next.as_str()) },
    )
    .await;
    let handover = sigterm.elapsed();
    eprintln!("hand-over after SIGTERM: {handover:?}");
    assert!(
        handover < LEASE_DURATION / 2,
        "hand-over after SIGTERM took {handover:?}: the Lease was not released"
    );
    let log = std::fs::read_to_string(sb.controllers[first].log_path()).unwrap();
    assert!(log.contains("released the Lease"), "{log}");
    assert_eq!(
        wait_for_the_one_leader(&sb, &[second], Some(&watch)).await,
        second
    );

    // A new standby; then SIGKILL the leader mid-rollout: the standby waits for the Lease to
    // expire (the dead leader cannot release it), then takes over.
    sb.start_controller(&[]).unwrap();
    let third = 2;
    let standby = metrics_address(&sb.controllers[third]);
    wait_until(
        "the standby is ready",
        Duration::from_secs(60),
        Some(&watch),
        || async { matches!(get(standby, "/readyz").await, Some((200, _))) },
    )
    .await;
    assert_eq!(
        wait_for_the_one_leader(&sb, &[second, third], Some(&watch)).await,
        second
    );
    wait_until("eight nodes rebooted", ROLLOUT, Some(&watch), || async {
        sb.fleet.total_reboots() >= 8
    })
    .await;
    assert!(
        sb.fleet.total_reboots() < 16,
        "the rollout is still under way when the leader is killed"
    );
    sb.controllers[second].kill().await;
    let sigkill = Instant::now();
    let last = sb.controllers[third].identity();
    wait_until(
        "the standby holds the Lease",
        LEASE_DURATION * 3,
        Some(&watch),
        || async { e2e::leader_identity(&sb.client).await.as_deref() == Some(last.as_str()) },
    )
    .await;
    let takeover = sigkill.elapsed();
    eprintln!("take-over after SIGKILL: {takeover:?} (lease duration {LEASE_DURATION:?})");
    assert!(
        takeover >= LEASE_DURATION / 2,
        "took over after {takeover:?}: before the killed leader's Lease expired"
    );
    assert!(
        takeover <= LEASE_DURATION + Duration::from_secs(3),
        "took over after {takeover:?}: not within the Lease duration ({LEASE_DURATION:?})"
    );
    assert_eq!(
        wait_for_the_one_leader(&sb, &[third], Some(&watch)).await,
        third
    );

    rollout_completes(&sb, &watch).await;
    assert_eq!(
        watch.max_seen(),
        2,
        "the budget was used, not just respected"
    );
    sb.stop().await;
}

fn signal(controller: &ControllerProcess, signal: &str) {
    let pid = controller.pid().expect("running").to_string();
    let sent = std::process::Command::new("kill")
        .args([signal, &pid])
        .status()
        .unwrap();
    assert!(sent.success(), "kill {signal} {pid}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_frozen_leader_is_replaced_and_stops_acting_when_it_wakes_up() {
    let (sb, watch, first) = two_replicas_mid_rollout(12, "4s", "3s").await;
    let second = 1 - first;
    // A leader that stops for a while (a long GC pause, a frozen VM, a partition) cannot
    // renew: the other replica takes over once the Lease expires.
    signal(&sb.controllers[first], "-STOP");
    let next = sb.controllers[second].identity();
    wait_until(
        "the other replica holds the Lease",
        Duration::from_secs(30),
        Some(&watch),
        || async { e2e::leader_identity(&sb.client).await.as_deref() == Some(next.as_str()) },
    )
    .await;
    wait_until("two more nodes rebooted", ROLLOUT, Some(&watch), || async {
        sb.fleet.total_reboots() >= 4
    })
    .await;
    // It wakes up deposed: it must notice before acting, and stand by.
    signal(&sb.controllers[first], "-CONT");
    let old = metrics_address(&sb.controllers[first]);
    wait_until(
        "the woken replica stands by",
        Duration::from_secs(30),
        Some(&watch),
        || async {
            get(old, "/metrics")
                .await
                .and_then(|(_, text)| metric(&text, "node_reboot_leader"))
                == Some(0.0)
        },
    )
    .await;
    let log = std::fs::read_to_string(sb.controllers[first].log_path()).unwrap();
    assert!(log.contains("stopped acting"), "{log}");
    assert_eq!(
        wait_for_the_one_leader(&sb, &[0, 1], Some(&watch)).await,
        second
    );
    rollout_completes(&sb, &watch).await;
    sb.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_rollout_shows_in_the_metrics_and_both_programs_log_json_lines() {
    let config = SandboxConfig::with_nodes(5)
        .max_unavailable("2")
        .reboot_duration(Duration::from_secs(1))
        .controller_args(["--log-format=json"])
        .agent_args(["--log-format=json"])
        .without_pods();
    let sb = sandbox(config).await;
    let watch = BudgetWatch::start(sb.client.clone(), 2).await;
    e2e::every_node::request(&sb.control_plane);
    rollout_completes(&sb, &watch).await;

    let address = metrics_address(&sb.controllers[0]);
    let text = eventually(
        "the metrics show the finished rollout",
        Duration::from_secs(15),
        None,
        || async {
            let text = scrape(address).await;
            let done = metric(&text, "node_reboot_reboots_completed_total") == Some(5.0)
                && metric(&text, "node_reboot_slots_in_use") == Some(0.0);
            done.then_some(text)
        },
    )
    .await;
    for (series, value) in [
        ("node_reboot_reboots_completed_total", 5.0),
        ("node_reboot_reboots_approved_total", 5.0),
        ("node_reboot_slots_in_use", 0.0),
        ("node_reboot_max_unavailable", 2.0),
        ("node_reboot_reboot_duration_seconds_count", 5.0),
        (
            "node_reboot_reboot_duration_seconds_bucket{le=\"+Inf\"}",
            5.0,
        ),
        (
            "node_reboot_drain_duration_seconds_count{outcome=\"drained\"}",
            5.0,
        ),
        ("node_reboot_nodes{state=\"idle\"}", 5.0),
        ("node_reboot_nodes{state=\"rebooting\"}", 0.0),
        ("node_reboot_leader", 1.0),
    ] {
        assert_eq!(metric(&text, series), Some(value), "{series} in\n{text}");
    }
    let took = metric(&text, "node_reboot_reboot_duration_seconds_sum").unwrap();
    assert!(
        took >= 5.0,
        "five reboots of at least 1 s each took {took} s"
    );
    assert!(text.trim_end().ends_with("# EOF"), "OpenMetrics text");

    // The controller's log: one JSON object per line; lines about a node name it.
    let lines = json_lines(sb.controllers[0].log_path());
    let completed: BTreeSet<String> = lines
        .iter()
        .filter(|l| l["message"] == "reboot completed")
        .map(|l| l["node"].as_str().expect("names the node").to_owned())
        .collect();
    assert_eq!(completed, sb.fleet.names().into_iter().collect());
    for message in ["slot granted", "cordoned", "draining", "slot released"] {
        let about: Vec<&Value> = lines.iter().filter(|l| l["message"] == message).collect();
        assert!(!about.is_empty(), "a {message:?} line");
        assert!(
            about.iter().all(|l| l["node"].is_string()),
            "{message:?} lines name the node: {about:?}"
        );
    }

    // Each agent's log too; every line of the agent's own names its node.
    for name in sb.fleet.names() {
        let log = sb
            .control_plane
            .dir()
            .join("nodes")
            .join(&name)
            .join("agent.log");
        // Its second process, started after the boot, possibly after the completion.
        let agent = agent_serving(&sb, &name, 2).await;
        let lines = json_lines(&log);
        for line in lines
            .iter()
            .filter(|l| l["target"].as_str().is_some_and(|t| t.starts_with("agent")))
        {
            assert_eq!(line["node"], name.as_str(), "{line}");
        }
        // The agent running now (after the reboot) serves its own metrics and readiness.
        let text = scrape(agent).await;
        assert_eq!(
            metric(&text, "node_reboot_agent_watch_running"),
            Some(1.0),
            "{name}: node_reboot_agent_watch_running in\n{text}"
        );
        // The kubelet's report of the new boot completes a reboot, mostly before the agent's
        // process is back: it then finds nothing to prove. When it came back first, its proof
        // is counted and logged.
        let proven = metric(&text, "node_reboot_agent_reboots_proven_total");
        let logged = lines.iter().any(|l| {
            l["message"]
                .as_str()
                .is_some_and(|m| m.contains("reboot proven"))
        });
        assert!(
            (proven == Some(0.0) && !logged) || (proven == Some(1.0) && logged),
            "{name}: the agent counted {proven:?} proofs, logged one: {logged}\n{text}"
        );
    }
    sb.stop().await;
}

/// Every non-empty line of a log, each parsed as one JSON object.
fn json_lines(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap();
    let lines: Vec<Value> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|line| match serde_json::from_str::<Value>(line) {
            Ok(value @ Value::Object(_)) => value,
            _ => panic!("{}: not one JSON object: {line}", path.display()),
        })
        .collect();
    assert!(!lines.is_empty(), "{} is empty", path.display());
    for line in &lines {
        for key in ["timestamp", "level", "target", "message"] {
            assert!(line.get(key).is_some(), "no {key} in {line}");
        }
    }
    lines
}

/// The reasons of the operator's Events, in the order `kubectl get events` prints them.
fn story(kubectl_output: &str) -> Vec<String> {
    const OURS: [&str; 10] = [
        "Requested",
        "Draining",
        "DrainBlocked",
        "RebootApproved",
        "Rebooting",
        "Rebooted",
        "RebootRetried",
        "Cancelled",
        "InvalidRequest",
        "RebootFailed",
    ];
    kubectl_output
        .lines()
        .skip(1)
        .filter_map(|line| line.split_whitespace().nth(2))
        .filter(|reason| OURS.contains(reason))
        .map(str::to_owned)
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn kubectl_tells_each_nodes_story_in_order_and_a_blocked_drain_is_a_warning() {
    let config = SandboxConfig::with_nodes(2)
        .reboot_duration(Duration::from_secs(1))
        // The drain must start though a budget allows no disruption (a Warning when it ends).
        .controller_args(["--drain-timeout=3s", "--check-disruption-budgets=false"]);
    let sb = sandbox(config).await;
    let watch = BudgetWatch::start(sb.client.clone(), 1).await;

    request_reboot(&sb.control_plane, "sim-1");
    wait_until("sim-1 is rebooted and back", ROLLOUT, Some(&watch), || {
        back(&sb, "sim-1", 1)
    })
    .await;
    // One `Rebooted`, the controller's at completion: the agent proves the reboot without an
    // Event of its own. No pod runs on sim-1: no `Draining` (it comes only with pods to evict).
    let expected = ["RebootApproved", "Rebooting", "Rebooted"];
    let events = eventually(
        "kubectl shows sim-1's whole story",
        Duration::from_secs(30),
        Some(&watch),
        || {
            let events = kubectl(
                &sb.control_plane,
                &[
                    "get",
                    "events",
                    "--field-selector",
                    "involvedObject.name=sim-1",
                ],
            );
            let done = story(&events) == expected;
            async move { done.then_some(events) }
        },
    )
    .await;
    // The agent reboots from the boot id it recorded, then the controller completes the node.
    let rebooting = events.find("Rebooting from boot id").expect(&events);
    let completed = events.find("node Ready").expect(&events);
    assert!(rebooting < completed, "{events}");
    assert!(events.contains("no pod to evict"), "{events}");
    assert!(!events.contains("Warning"), "{events}");

    // A drain that a PodDisruptionBudget blocks: a Warning that says why.
    apply(&sb.control_plane, &pod_that_blocks_the_drain_of("sim-2"));
    wait_until("the PDB allows no disruption", ROLLOUT, None, || {
        let status = "jsonpath={.status.currentHealthy}/{.status.disruptionsAllowed}";
        let out = kubectl(
            &sb.control_plane,
            &["get", "pdb", "never-disrupt", "-o", status],
        );
        async move { out == "1/0" }
    })
    .await;
    request_reboot(&sb.control_plane, "sim-2");
    let warnings = eventually(
        "a DrainBlocked Warning on sim-2",
        Duration::from_secs(60),
        Some(&watch),
        || {
            let warnings = kubectl(
                &sb.control_plane,
                &[
                    "get",
                    "events",
                    "--field-selector",
                    "involvedObject.name=sim-2,type=Warning",
                ],
            );
            let seen = warnings.contains("DrainBlocked");
            async move { seen.then_some(warnings) }
        },
    )
    .await;
    assert!(
        warnings.contains("default/precious") && warnings.contains("disruption budget"),
        "the Warning names the pod and why: {warnings}"
    );
    let all = kubectl(
        &sb.control_plane,
        &[
            "get",
            "events",
            "--field-selector",
            "involvedObject.name=sim-2",
        ],
    );
    let sim2 = story(&all);
    let blocked = sim2.iter().position(|r| r == "DrainBlocked");
    assert!(
        sim2.first().map(String::as_str) == Some("Draining") && blocked.is_some(),
        "Draining, then DrainBlocked: {all}"
    );
    assert!(
        !sim2
            .iter()
            .any(|r| r == "RebootApproved" || r == "Rebooting"),
        "{all}"
    );
    assert_eq!(sb.fleet.reboots("sim-2"), 0, "no reboot without a drain");

    let text = scrape(metrics_address(&sb.controllers[0])).await;
    for series in [
        "node_reboot_drain_timeouts_total",
        "node_reboot_reboots_failed_total{reason=\"drain_timeout\"}",
        "node_reboot_drain_duration_seconds_count{outcome=\"timed_out\"}",
        e2e::scrape::REFUSED_EVICTIONS,
    ] {
        assert!(
            metric(&text, series).unwrap_or(0.0) >= 1.0,
            "{series} in\n{text}"
        );
    }
    watch.check().unwrap();
    sb.stop().await;
}

/// Forwards connections from `listener` to `target`, as long as the task runs.
fn forward(listener: TcpListener, target: SocketAddr) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        while let Ok((mut inbound, _)) = listener.accept().await {
            tokio::spawn(async move {
                if let Ok(mut outbound) = TcpStream::connect(target).await {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                }
            });
        }
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn readyz_waits_for_the_cache_sync_while_healthz_stays_up() {
    let cp = ControlPlane::start(light_control_plane())
        .await
        .expect("control plane starts");
    create_namespace(&cp.client().await.unwrap(), OPERATOR_NAMESPACE)
        .await
        .unwrap();
    // The controller's kubeconfig points at a port where nothing listens yet.
    let port = {
        let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        probe.local_addr().unwrap().port()
    };
    let proxy_url = format!("https://127.0.0.1:{port}");
    let kubeconfig = cp.dir().join("through-proxy.kubeconfig");
    let admin = std::fs::read_to_string(cp.kubeconfig_path()).unwrap();
    assert!(admin.contains(cp.server_url()));
    std::fs::write(&kubeconfig, admin.replace(cp.server_url(), &proxy_url)).unwrap();
    let mut controller = ControllerProcess::start(
        workspace_binary("reboot-controller").unwrap(),
        kubeconfig,
        vec![
            "--max-unavailable".into(),
            "1".into(),
            nodesim::sandbox::NO_AGENT_PODS.into(),
        ],
        cp.dir().join("controller.log"),
    )
    .unwrap();
    let address = metrics_address(&controller);
    wait_until(
        "/healthz answers",
        Duration::from_secs(30),
        None,
        || async { matches!(get(address, "/healthz").await, Some((200, _))) },
    )
    .await;
    for _ in 0..10 {
        let (status, body) = get(address, "/readyz").await.expect("/readyz answers");
        assert_eq!(status, 503, "not ready before the cache sync: {body}");
        assert!(body.contains("not ready"), "{body}");
        assert_eq!(get(address, "/healthz").await.map(|r| r.0), Some(200));
        assert!(controller.is_running(), "{}", controller.log_tail(20));
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let text = scrape(address).await;
    assert_eq!(metric(&text, "node_reboot_leader"), Some(0.0), "{text}");

    // The API server becomes reachable: the cache syncs, /readyz turns ready.
    let target: SocketAddr = cp
        .server_url()
        .trim_start_matches("https://")
        .parse()
        .unwrap();
    let listener = TcpListener::bind(("127.0.0.1", port))
        .await
        .expect("the reserved port is still free");
    let proxy = forward(listener, target);
    wait_until(
        "/readyz is ready",
        Duration::from_secs(90),
        None,
        || async {
            assert_eq!(get(address, "/healthz").await.map(|r| r.0), Some(200));
            matches!(get(address, "/readyz").await, Some((200, _)))
        },
    )
    .await;
    wait_until(
        "the only replica leads",
        Duration::from_secs(30),
        None,
        || async { metric(&scrape(address).await, "node_reboot_leader") == Some(1.0) },
    )
    .await;
    let began = Instant::now();
    assert!(
        controller.terminate(Duration::from_secs(5)).await,
        "exits within 5 s of SIGTERM"
    );
    assert!(began.elapsed() < Duration::from_secs(5));
    proxy.abort();
}

#[tokio::test(flavor = "multi_thread")]
async fn the_sandbox_prints_each_controllers_metrics_address_next_to_kubeconfig() {
    let dir = std::env::temp_dir().join(format!("sandbox-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let stderr = std::fs::File::create(dir.join("sandbox.err")).unwrap();
    let mut sandbox = tokio::process::Command::new(workspace_binary("sandbox").unwrap())
        .args(["--nodes", "1"])
        .stdout(Stdio::piped())
        .stderr(stderr)
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(sandbox.stdout.take().unwrap()).lines();
    let mut printed = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(180), async {
        while let Ok(Some(line)) = stdout.next_line().await {
            printed.push(line);
            if printed.iter().filter(|l| l.contains("_METRICS=")).count() == 2 {
                break;
            }
        }
    })
    .await;
    let err = || std::fs::read_to_string(dir.join("sandbox.err")).unwrap_or_default();
    assert!(read.is_ok(), "printed {printed:?}; stderr: {}", err());
    assert!(printed[0].starts_with("KUBECONFIG="), "{printed:?}");
    let addresses: Vec<SocketAddr> = printed[1..]
        .iter()
        .enumerate()
        .map(|(n, line)| {
            let prefix = format!("CONTROLLER_{}_METRICS=http://", n + 1);
            let url = line
                .strip_prefix(&prefix)
                .unwrap_or_else(|| panic!("{line}"));
            url.strip_suffix("/metrics").unwrap().parse().unwrap()
        })
        .collect();
    // Both answer at the printed addresses, and exactly one of them leads.
    eventually(
        "one of the two replicas leads",
        Duration::from_secs(60),
        None,
        || async {
            let mut leaders = 0.0;
            for address in &addresses {
                let text = get(*address, "/metrics").await?.1;
                leaders += metric(&text, "node_reboot_leader")?;
            }
            (leaders == 1.0).then_some(())
        },
    )
    .await;
    // SIGTERM: the sandbox stops everything it started.
    let pid = sandbox.id().unwrap().to_string();
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    assert!(killed.success());
    let exited = tokio::time::timeout(Duration::from_secs(60), sandbox.wait()).await;
    assert!(
        exited.is_ok(),
        "the sandbox stops on SIGTERM; stderr: {}",
        err()
    );
    let _ = std::fs::remove_dir_all(&dir);
}
