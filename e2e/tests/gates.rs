//! Health gates (docs/src/scheduling.md), end to end on the real control plane with a REAL
//! Prometheus and Alertmanager from `testenv/bin`: a firing alert holds a rollout at the nodes
//! under way, Prometheus down holds it too, a silence lets it go on, and a blocking pod holds its
//! node.

use common::ControllerReason;
use common::ledger::{LEDGER_NAME, OPERATOR_NAMESPACE, slots_of};
use e2e::{
    BudgetWatch, every_node, has_event, kubectl,
    rollout::{back, ledger_is_empty_on, rollout_completes},
    scrape::{metric, scrape},
    wait_until,
};
use futures::StreamExt;
use k8s_openapi::api::{coordination::v1::Lease, core::v1::Pod};
use k8s_openapi::jiff::Timestamp;
use kube::{
    Api, Client,
    runtime::{WatchStreamExt, watcher},
};
use nodesim::sandbox::{Sandbox, SandboxConfig};
use std::{collections::BTreeSet, time::Duration};
use testenv::{Alertmanager, Prometheus, rules};

const ALERT: &str = "E2EMaintenanceBlocker";

async fn sandbox(nodes: usize, reboot_secs: u64, controller_args: &[&str]) -> Sandbox {
    let config = SandboxConfig::with_nodes(nodes)
        .reboot_duration(Duration::from_secs(reboot_secs))
        .controller_args(controller_args);
    e2e::sandbox_without_pods(config).await
}

async fn gate_open(sb: &Sandbox, gate: &str) -> Option<f64> {
    let address = sb.controllers[0]
        .metrics_address()
        .expect("metrics address");
    let series = format!("node_reboot_gate_open{{gate=\"{gate}\"}}");
    metric(&scrape(address).await, &series)
}

async fn wait_gate(sb: &Sandbox, watch: &BudgetWatch, gate: &str, open: bool) {
    let want = if open { 1.0 } else { 0.0 };
    wait_until(
        &format!("the {gate} gate metric is {want}"),
        Duration::from_secs(60),
        Some(watch),
        || async { gate_open(sb, gate).await == Some(want) },
    )
    .await;
}

/// The nodes that hold a slot in the ledger, or rebooted already.
async fn started(sb: &Sandbox, client: &Client) -> BTreeSet<String> {
    let leases: Api<Lease> = Api::namespaced(client.clone(), OPERATOR_NAMESPACE);
    // The controller creates the ledger with its first grant: until then no node holds a slot.
    let lease = leases
        .get_opt(LEDGER_NAME)
        .await
        .expect("the ledger can be read");
    let mut names: BTreeSet<String> = match lease {
        Some(lease) => slots_of(lease.metadata.annotations.as_ref())
            .expect("a readable ledger")
            .into_keys()
            .collect(),
        None => BTreeSet::new(),
    };
    names.extend(
        sb.fleet
            .names()
            .into_iter()
            .filter(|n| sb.fleet.reboots(n) > 0),
    );
    names
}

/// Once a gate closed: the nodes under way finish, and for two rounds of the controller after
/// that no other node is granted, cordoned or rebooted; each of them got a `reason` Event naming `words`.
/// Returns the nodes that started before the gate closed.
async fn holds_at_the_nodes_under_way(
    sb: &Sandbox,
    watch: &BudgetWatch,
    reason: ControllerReason,
    words: &[&str],
) -> BTreeSet<String> {
    let client = &sb.client;
    let under_way = started(sb, client).await;
    wait_until(
        "the reboots under way finish",
        Duration::from_secs(90),
        Some(watch),
        || async {
            for name in &under_way {
                if !back(sb, name, 1).await {
                    return false;
                }
            }
            ledger_is_empty_on(client).await
        },
    )
    .await;
    e2e::scrape::after_rounds(sb, 2, Some(watch)).await;
    watch
        .check()
        .unwrap_or_else(|violation| panic!("{violation}"));
    assert_eq!(
        started(sb, client).await,
        under_way,
        "a reboot started while {reason}"
    );
    let waiting: Vec<String> = sb
        .fleet
        .names()
        .into_iter()
        .filter(|n| !under_way.contains(n))
        .collect();
    assert!(
        !waiting.is_empty(),
        "every node was under way: the test shows nothing"
    );
    for name in &waiting {
        let state = e2e::NodeState::of(&e2e::node(client, name).await);
        assert!(!state.unschedulable, "{name} cordoned while held: {state}");
        assert!(
            has_event(client, name, reason, words).await,
            "{name} has no {reason} Event naming {words:?}: {:?}",
            e2e::event_reasons(client, name).await
        );
    }
    under_way
}

#[tokio::test(flavor = "multi_thread")]
async fn a_firing_alert_holds_the_rollout_at_the_nodes_under_way_and_so_does_prometheus_down() {
    let mut prometheus = Prometheus::start(&rules(ALERT, false))
        .await
        .expect("Prometheus starts (make testenv builds it)");
    let url = prometheus.url();
    let sb = sandbox(
        6,
        4,
        &[
            "--prometheus-url",
            &url,
            "--alert-check-period",
            "1s",
            "--prometheus-timeout",
            "2s",
        ],
    )
    .await;
    let client = sb.client.clone();
    let watch = BudgetWatch::start(client.clone(), 1).await;
    every_node::request(&sb.control_plane);
    wait_until(
        "a first node rebooted while no alert fires",
        Duration::from_secs(60),
        Some(&watch),
        || async { !started(&sb, &client).await.is_empty() },
    )
    .await;

    prometheus
        .set_rules(&rules(ALERT, true))
        .expect("rules written");
    wait_gate(&sb, &watch, "alerts", false).await;
    let alerts = prometheus
        .active_alerts()
        .await
        .expect("Prometheus answers");
    assert!(
        alerts.contains(ALERT) && alerts.contains("firing"),
        "{alerts}"
    );
    let before_alert =
        holds_at_the_nodes_under_way(&sb, &watch, ControllerReason::AlertsFiring, &[ALERT]).await;

    prometheus
        .set_rules(&rules(ALERT, false))
        .expect("rules written");
    wait_until(
        "the rollout goes on once the alert resolves",
        Duration::from_secs(60),
        Some(&watch),
        || async { started(&sb, &client).await.len() > before_alert.len() },
    )
    .await;

    prometheus.stop();
    wait_gate(&sb, &watch, "alerts", false).await;
    holds_at_the_nodes_under_way(
        &sb,
        &watch,
        ControllerReason::PrometheusUnreachable,
        &[&url],
    )
    .await;

    prometheus
        .start_again()
        .await
        .expect("Prometheus starts again");
    rollout_completes(&sb, &watch).await;
    assert_eq!(gate_open(&sb, "alerts").await, Some(1.0));
    sb.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_alertmanager_silence_lets_the_rollout_go_on_while_the_alert_fires() {
    let prometheus = Prometheus::start(&rules(ALERT, true))
        .await
        .expect("Prometheus starts (make testenv builds it)");
    let alertmanager = Alertmanager::start()
        .await
        .expect("Alertmanager starts (make testenv builds it)");
    let sb = sandbox(
        2,
        2,
        &[
            "--prometheus-url",
            &prometheus.url(),
            "--alertmanager-url",
            &alertmanager.url(),
            "--alert-check-period",
            "1s",
        ],
    )
    .await;
    let client = sb.client.clone();
    let watch = BudgetWatch::start(client.clone(), 1).await;
    let (holds, patience) = (ControllerReason::AlertsFiring, Duration::from_secs(60));
    every_node::request_and_wait_for_event(&sb, holds, &[ALERT], patience, Some(&watch)).await;
    e2e::scrape::after_rounds(&sb, 2, Some(&watch)).await;
    assert!(
        started(&sb, &client).await.is_empty(),
        "a reboot started while the alert fired"
    );

    alertmanager
        .silence(ALERT)
        .await
        .expect("Alertmanager takes the silence");
    rollout_completes(&sb, &watch).await;
    let alerts = prometheus
        .active_alerts()
        .await
        .expect("Prometheus answers");
    assert!(alerts.contains("firing"), "the alert still fires: {alerts}");
    sb.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_blocking_pod_holds_its_node_the_others_go_on_and_it_reboots_once_the_pod_finishes() {
    let sb = sandbox(3, 2, &["--blocking-pod-selector", "app=backup"]).await;
    let client = sb.client.clone();
    let names = sb.fleet.names();
    let busy = &names[0];
    let watch = BudgetWatch::start(client.clone(), 1).await;
    start_backup_pod(&sb, busy);
    every_node::request(&sb.control_plane);
    wait_until(
        "the other nodes reboot",
        Duration::from_secs(90),
        Some(&watch),
        || async {
            for name in &names[1..] {
                if !back(&sb, name, 1).await {
                    return false;
                }
            }
            true
        },
    )
    .await;
    assert_eq!(
        sb.fleet.reboots(busy),
        0,
        "{busy} rebooted under its blocking pod"
    );
    assert!(
        has_event(
            &client,
            busy,
            ControllerReason::BlockingPod,
            &["default/backup"]
        )
        .await,
        "{:?}",
        e2e::event_reasons(&client, busy).await
    );
    let address = sb.controllers[0]
        .metrics_address()
        .expect("metrics address");
    let text = scrape(address).await;
    assert_eq!(metric(&text, "node_reboot_blocked_nodes"), Some(1.0));
    assert_eq!(
        metric(&text, "node_reboot_gate_open{gate=\"blocking_pods\"}"),
        Some(1.0),
        "a pod on one node does not hold the pool"
    );

    finish_backup_pod(&sb).await;
    rollout_completes(&sb, &watch).await;
    sb.stop().await;
}

/// A pod labelled `app=backup` running on `node`.
fn start_backup_pod(sb: &Sandbox, node: &str) {
    // No controller-manager here to create the namespace's default ServiceAccount.
    e2e::apply(
        &sb.control_plane,
        &format!(
            "apiVersion: v1\nkind: ServiceAccount\nmetadata: {{name: default, namespace: \
             default}}\n---\napiVersion: v1\nkind: Pod\nmetadata: {{name: backup, namespace: default, labels: \
             {{app: backup}}}}\nspec:\n  nodeName: {node}\n  containers: [{{name: c, image: \
             registry.example/backup:1}}]\n"
        ),
    );
}

/// The backup pod's job is done: it has Succeeded, as a kubelet would report, and it stays so
/// (a kubelet never starts a finished pod again; the simulated one did, now and then, which
/// held the gate closed for good).
async fn finish_backup_pod(sb: &Sandbox) {
    kubectl(
        &sb.control_plane,
        &[
            "patch",
            "pod",
            "backup",
            "-n",
            "default",
            "--subresource=status",
            "--type=merge",
            "-p",
            r#"{"status":{"phase":"Succeeded"}}"#,
        ],
    );
    let pods: Api<Pod> = Api::namespaced(sb.client.clone(), "default");
    let config = watcher::Config::default().fields("metadata.name=backup");
    let stream = watcher(pods, config).applied_objects();
    futures::pin_mut!(stream);
    let until = tokio::time::sleep(Duration::from_secs(2));
    tokio::pin!(until);
    let mut seen = 0;
    loop {
        tokio::select! {
            () = &mut until => break,
            event = stream.next() => match event {
                Some(Ok(pod)) => {
                    let phase = pod.status.and_then(|s| s.phase);
                    assert_eq!(phase.as_deref(), Some("Succeeded"), "the finished backup pod ran again");
                    seen += 1;
                }
                Some(Err(error)) => panic!("the watch of the backup pod failed: {error}"),
                None => panic!("the watch of the backup pod ended"),
            },
        }
    }
    assert!(seen > 0, "the watch of the backup pod saw it");
}

#[tokio::test(flavor = "multi_thread")]
async fn with_cluster_scope_a_blocking_pod_anywhere_holds_every_node_until_it_finishes() {
    let sb = sandbox(
        3,
        2,
        &[
            "--blocking-pod-selector",
            "app=backup",
            "--blocking-pod-selector-scope",
            "cluster",
        ],
    )
    .await;
    let client = sb.client.clone();
    let names = sb.fleet.names();
    let watch = BudgetWatch::start(client.clone(), 1).await;
    start_backup_pod(&sb, &names[0]);
    every_node::request(&sb.control_plane);
    wait_gate(&sb, &watch, "blocking_pods", false).await;
    let (holds, patience) = (ControllerReason::BlockingPod, Duration::from_secs(240));
    let backup = ["default/backup"];
    every_node::wait_for_event(&client, &names, holds, &backup, patience, Some(&watch)).await;
    e2e::scrape::after_rounds(&sb, 2, Some(&watch)).await;
    watch
        .check()
        .unwrap_or_else(|violation| panic!("{violation}"));
    assert!(
        started(&sb, &client).await.is_empty(),
        "a node was granted while a cluster-scoped blocking pod runs"
    );

    finish_backup_pod(&sb).await;
    rollout_completes(&sb, &watch).await;
    assert_eq!(gate_open(&sb, "blocking_pods").await, Some(1.0));
    sb.stop().await;
}

/// An alert that fires while a claimed node waits for its drain, as its window closes, does
/// not let the node reboot when the alert resolves outside the window: it is given back
/// (uncordoned, its request kept) and waits for the next window, although
/// --finish-after-window is on. kured checks its alerts only before taking its lock; a hold
/// here never carries a node past its window.
#[tokio::test(flavor = "multi_thread")]
async fn an_alert_firing_mid_drain_as_the_window_closes_holds_the_node_to_the_next_window() {
    let prometheus = Prometheus::start(&rules(ALERT, false))
        .await
        .expect("Prometheus starts (make testenv builds it)");
    let url = prometheus.url();
    // Open since a minute ago, closing in 35 s: time to claim the node and fire the alert.
    let now = Timestamp::now().as_second();
    let open = Timestamp::from_second(now - 60).expect("a time");
    let close = Timestamp::from_second(now + 35).expect("a time");
    let window = e2e::daily_window(open, close);
    // The drain waits 5 minutes after the cordon: the node is claimed, not drained, at the close.
    let sb = sandbox(
        1,
        1,
        &[
            "--prometheus-url",
            &url,
            "--alert-check-period",
            "1s",
            "--prometheus-timeout",
            "2s",
            "--reboot-window",
            &window,
            "--drain-delay",
            "5m",
        ],
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
    prometheus
        .set_rules(&rules(ALERT, true))
        .expect("rules written");
    wait_gate(&sb, &watch, "alerts", false).await;
    assert!(
        Timestamp::now() < close,
        "the test was too slow to fire the alert before the window closed"
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

    // The alert resolves outside the window: the node waits for the next one. (Outside the
    // window no request can be granted, so the controller does not ask Prometheus meanwhile.)
    prometheus
        .set_rules(&rules(ALERT, false))
        .expect("rules written");
    wait_until(
        "the alert resolves",
        Duration::from_secs(60),
        Some(&watch),
        || async {
            prometheus
                .active_alerts()
                .await
                .is_ok_and(|a| !a.contains(ALERT))
        },
    )
    .await;
    e2e::scrape::after_rounds(&sb, 2, Some(&watch)).await;
    let state = e2e::NodeState::of(&e2e::node(&client, "sim-1").await);
    assert!(
        !state.unschedulable && state.annotations == ["reboot-needed"],
        "sim-1 was granted again outside the window once the alert resolved: {state}"
    );
    assert_eq!(sb.fleet.reboots("sim-1"), 0, "rebooted outside the window");
    assert!(
        has_event(&client, "sim-1", ControllerReason::OutsideWindow, &[]).await,
        "no OutsideWindow Event says why sim-1 waits"
    );
    watch
        .check()
        .unwrap_or_else(|violation| panic!("{violation}"));
    sb.stop().await;
}
