//! Real nodes (docs/src/development.md, "Real nodes"): Debian guests under QEMU, each a
//! Kubernetes node with a real kubelet, containerd, runc and CNI, joined to the local control
//! plane. The release of `make release` is published to a local registry (`make publish`),
//! its signatures verified and its chart installed from there as a user would ([`release`]);
//! the guests' containerd pulls the images from the registry over TLS. Its
//! controller runs as a two-replica Deployment on the guests, a workload with a
//! PodDisruptionBudget runs beside it, and nodes are drained and rebooted for real by their
//! agent's pod: in `make test` two guests, the leader's node rebooted; in `make node-e2e`
//! three, each rebooted, then the other two reboot methods. The chart is installed with three
//! RebootPools in its values and the flags' pool off: a control-plane-like pool of the first
//! guest (budget 1, a soak), the workers' pool of the others and a GPU pool of none; each pool
//! reports its nodes in `kubectl get rebootpools` and records its own reboots.
//!
//! An independent observer ([`e2e::observer::Observer`]) watches every Node and the workload's
//! Pods throughout: the budget, no `reboot-now` while a workload pod is still on the node,
//! every request rebooted exactly once. The guests' consoles and journals show the rest: a new
//! kernel's banner per reboot, and the kubelet's graceful node shutdown.
//!
//! One test, in phases, because the guests are expensive. A signal to the test process stops
//! every QEMU and the control plane before it ends ([`vmtest::unless_interrupted`]).

#[path = "node_e2e/release.rs"]
mod release;

use e2e::observer::Observer;
use k8s_openapi::api::{
    apps::v1::{DaemonSet, Deployment},
    coordination::v1::Lease,
    core::v1::{Node, Pod},
};
use kube::{Api, Client, ResourceExt, api::ListParams};
use release::Published;
use std::{
    collections::BTreeMap,
    path::PathBuf,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};
use testenv::{ControlPlane, Options, Registry};
use vmtest::{
    figures::{self, Timeline},
    image::BaseImage,
    node::{NodeFleet, NodeRegistry, boot_id, is_ready},
    secs,
};

const NODES: [&str; 3] = ["node-1", "node-2", "node-3"];
/// The archives of `make images` on each guest's seed disk.
const SEEDED_IMAGES: [&str; 2] = ["pause.oci.tar", "test-workload.oci.tar"];
const NS: &str = "node-reboot-operator";
const RELEASE: &str = "node-reboot-operator";
const WORKLOAD_NS: &str = "workload";
/// Generous: under software emulation three guests on two cores take 1-4 minutes to join.
const JOIN_TIMEOUT: Duration = Duration::from_secs(1200);
const PODS_TIMEOUT: Duration = Duration::from_secs(900);
/// How often the rollout is looked at: fine enough for figures of a second or two.
const POLL: Duration = Duration::from_millis(250);
/// One node's drain, reboot and return under emulation: 1.5-4 minutes measured on a fast
/// machine, up to 15 on a slow one.
const REBOOT_TIMEOUT: Duration = Duration::from_secs(1800);

/// The chart's `pools` as JSON, the flags' pool turned off: a control-plane-like pool of the
/// first node (budget 1 and a soak, as the docs advise), the workers' pool of the others, and a
/// GPU pool that selects no node here.
const POOLS: &str = r#"[
  {"name": "control-plane", "maxUnavailable": 1, "minReadySeconds": 20,
   "nodeSelector": {"matchExpressions": [{"key": "node-role.kubernetes.io/control-plane", "operator": "Exists"}]}},
  {"name": "workers", "maxUnavailable": 1,
   "nodeSelector": {"matchExpressions": [{"key": "node-role.kubernetes.io/control-plane", "operator": "DoesNotExist"},
                                         {"key": "nvidia.com/gpu.present", "operator": "DoesNotExist"}]}},
  {"name": "gpu", "maxUnavailable": 1, "nodeSelector": {"matchLabels": {"nvidia.com/gpu.present": "true"}}}
]"#;
/// The label that puts a node in the control-plane pool.
const CONTROL_PLANE_LABEL: &str = "node-role.kubernetes.io/control-plane";

/// The workload: three replicas spread over the nodes, a PDB that allows one disruption, and a
/// container that says on its log which signal ended it.
const WORKLOAD: &str = r#"
apiVersion: v1
kind: Namespace
metadata: {name: workload}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: web, namespace: workload}
spec:
  minAvailable: 2
  selector: {matchLabels: {app: web}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: workload}
spec:
  replicas: 3
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      terminationGracePeriodSeconds: 5
      topologySpreadConstraints:
        - maxSkew: 1
          topologyKey: kubernetes.io/hostname
          whenUnsatisfiable: ScheduleAnyway
          labelSelector: {matchLabels: {app: web}}
      containers:
        - name: web
          image: ghcr.io/node-reboot-operator/test-workload:1
          imagePullPolicy: IfNotPresent
          command: ["/bin/sh", "-c", "trap 'echo stopped by SIGTERM; exit 0' TERM; echo up; while true; do sleep 1; done"]
          resources: {requests: {cpu: 10m, memory: 8Mi}}
"#;

#[tokio::test(flavor = "multi_thread")]
async fn real_nodes_are_drained_and_rebooted_by_the_operator_installed_with_its_chart() {
    vmtest::unless_interrupted(tier(Tier::LeadersNode)).await;
}

/// Three nodes, each rebooted, then the two other reboot methods through the DaemonSet. Not
/// in `make test`: under emulation on a slow machine a node's turn took up to 15 minutes, and
/// this run took the tier past CI's time; `make node-e2e` runs it.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "three nodes and every reboot method: run by `make node-e2e`"]
async fn real_nodes_are_rebooted_by_every_method_through_the_daemonset() {
    vmtest::unless_interrupted(tier(Tier::EveryNodeAndMethod)).await;
}

/// What a run of the tier reboots.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tier {
    /// Two nodes; the one where the controller's leader runs is drained and rebooted with
    /// `command` (the default), so that leadership moves to the other replica mid-reboot.
    LeadersNode,
    /// Three nodes, each rebooted with `command`, then `signal` on one and `syscall` on another.
    EveryNodeAndMethod,
}

impl Tier {
    fn nodes(self) -> &'static [&'static str] {
        match self {
            Tier::LeadersNode => &NODES[..2],
            Tier::EveryNodeAndMethod => &NODES,
        }
    }
}

async fn tier(tier: Tier) {
    let started = Instant::now();
    vmtest::require_tools().unwrap_or_else(|e| panic!("{e}"));
    let nodes = tier.nodes();
    let archives = image_archives();
    let image = BaseImage::ensure_node().unwrap_or_else(|e| panic!("{e}"));
    let run_dir = run_dir();
    let cp = ControlPlane::start(Options::default())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let client = cp.client().await.expect("admin client");
    let registry = Registry::start().await.unwrap_or_else(|e| panic!("{e}"));
    let ca_pem = std::fs::read_to_string(registry.ca_file()).expect("the registry's CA");
    let guests_registry = NodeRegistry {
        port: registry.port(),
        ca_pem,
    };
    let mut fleet = NodeFleet::start(&cp, &image, nodes, (&guests_registry, &archives), &run_dir)
        .unwrap_or_else(|e| panic!("{e}"));
    // While the guests boot.
    let published = release::publish(registry, &run_dir);
    release::verify(&published);
    fleet
        .wait_until_ready(&client, JOIN_TIMEOUT)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let joined = started.elapsed();
    eprintln!(
        "node-e2e: all {} nodes Ready after {}",
        nodes.len(),
        secs(joined)
    );

    e2e::kubectl(
        &cp,
        &[
            "label",
            "node",
            NODES[0],
            &format!("{CONTROL_PLANE_LABEL}="),
        ],
    );
    release::install(&cp, &published, (NS, RELEASE), POOLS);
    wait_for_the_operator(&client, nodes).await;
    let pools = pools_of(nodes);
    wait_for_the_pools(&cp, &pools).await;
    check_the_operator_runs_the_published_images(&client, &published).await;
    cp.apply(WORKLOAD).unwrap_or_else(|e| panic!("{e}"));
    wait_for_deployment(&client, WORKLOAD_NS, "web", 3).await;
    eprintln!(
        "node-e2e: operator and workload running after {}",
        secs(started.elapsed())
    );

    check_the_agents_token_is_held_to_its_node(&cp, &client).await;

    // Each pool's budget is 1: one node of each may be down at once.
    let budget = match tier {
        Tier::LeadersNode => 1,
        Tier::EveryNodeAndMethod => 2,
    };
    let observer = Observer::start(client.clone(), budget, WORKLOAD_NS, ("app", "web")).await;
    let leaders = LeaderWatch::start(client.clone());
    let boots_before = boot_ids(&client).await;
    let rebooted: Vec<&str> = match tier {
        Tier::LeadersNode => vec![leaders.node_of_the_holder(&client).await],
        Tier::EveryNodeAndMethod => nodes.to_vec(),
    };
    for node in &rebooted {
        e2e::kubectl(&cp, &["annotate", "node", node, "reboot-needed=true"]);
    }
    eprintln!(
        "node-e2e: reboot-needed=true on {} (max-unavailable 1, method command)",
        rebooted.join(", ")
    );
    let rollout = Instant::now();
    let timelines = follow_the_rollout(&observer, &client, &fleet, &rebooted, 1).await;
    let makespan = rollout.elapsed();
    let pool_of_node = pools
        .iter()
        .flat_map(|(pool, nodes)| nodes.iter().map(|n| ((*n).to_owned(), (*pool).to_owned())))
        .collect();
    print_figures("command", &timelines, &pool_of_node, rollout, makespan);
    eprintln!(
        "node-e2e: rollout of {} nodes finished in {}",
        rebooted.len(),
        secs(makespan)
    );

    let boots_after = boot_ids(&client).await;
    for &node in nodes {
        let vm = fleet.vm(node);
        if !rebooted.contains(&node) {
            assert_eq!(
                boots_before[node], boots_after[node],
                "{node} was not asked to reboot, yet its kubelet reports a new boot"
            );
            assert_eq!(vm.kernel_starts(), 1, "{node}: no second kernel");
            continue;
        }
        assert_ne!(
            boots_before[node], boots_after[node],
            "{node}'s kubelet reports a new boot"
        );
        assert_eq!(
            vm.kernel_starts(),
            2,
            "{node}: one new kernel on the console"
        );
        let kubelet = vm.port_log("kubelet");
        assert!(
            kubelet.contains(r#""Shutdown manager detected new shutdown event" event="shutdown""#),
            "{node}: the kubelet's graceful node shutdown ran (its journal is in {})",
            run_dir.display()
        );
    }
    check_each_pool_completed_its_own(&cp, &pools, &rebooted).await;
    let holders = leaders.holders();
    assert!(
        holders.len() >= 2,
        "leadership moved when the leader's node was drained: holders seen {holders:?}"
    );
    check_no_workload_pod_was_killed_by_the_shutdown(&client).await;

    // The other two reboot methods, each through the DaemonSet after a `helm upgrade` of the
    // running operator, each on one node.
    let other_methods = match tier {
        Tier::LeadersNode => &[][..],
        Tier::EveryNodeAndMethod => &[("signal", NODES[0]), ("syscall", NODES[1])][..],
    };
    for &(method, node) in other_methods {
        // Every agent at once: one at a time (the chart's 10%) costs a minute per node here.
        let value = format!("agent.flags.rebootMethod={method}");
        release::helm(
            &cp,
            &published,
            (RELEASE, NS),
            true,
            &[
                &value,
                "agent.updateStrategy.rollingUpdate.maxUnavailable=100%",
            ],
        );
        wait_for_the_agents_to_roll_out(&client, nodes).await;
        e2e::kubectl(&cp, &["annotate", "node", node, "reboot-needed=true"]);
        eprintln!("node-e2e: reboot-needed=true on {node} (method {method})");
        let started = Instant::now();
        let timelines = follow_the_rollout(&observer, &client, &fleet, &[node], 2).await;
        print_figures(
            method,
            &timelines,
            &BTreeMap::new(),
            started,
            started.elapsed(),
        );
        assert_eq!(
            fleet.vm(node).kernel_starts(),
            3,
            "{node}: rebooted by {method}, a third kernel"
        );
    }
    check_no_workload_pod_was_killed_by_the_shutdown(&client).await;
    observer.finish(&[]).await;
    uninstall_as_the_docs_say(&cp, &client).await;
    eprintln!(
        "node-e2e: passed in {} (joined {}, rollout {})",
        secs(started.elapsed()),
        secs(joined),
        secs(makespan)
    );
}

/// The archives of `make images` that the guests import from their seed disk: the sandbox
/// image and the test workload's, which are no part of the release (the operator's images
/// come from the registry). Fails, naming the command, when they are missing.
fn image_archives() -> Vec<PathBuf> {
    let dir = vmtest::repo_root().join("target/images");
    let archives = SEEDED_IMAGES.map(|name| dir.join(name));
    for archive in &archives {
        assert!(
            archive.is_file(),
            "{} is missing: run `make images`",
            archive.display()
        );
    }
    archives.to_vec()
}

/// `target/node-e2e/run`: each node's console, journal, kubelet and containerd logs.
fn run_dir() -> PathBuf {
    let dir = vmtest::repo_root().join("target/node-e2e/run");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create the run directory");
    dir
}

/// Every container of the operator's pods runs the image its release published: pulled from
/// the registry (the guests were given no archive of it), by the digest `make release`
/// wrote in images.txt.
async fn check_the_operator_runs_the_published_images(client: &Client, published: &Published) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let pods = pods.list(&ListParams::default()).await.expect("list pods");
    let mut seen = BTreeMap::new();
    for pod in &pods {
        let statuses = pod
            .status
            .iter()
            .flat_map(|s| s.container_statuses.iter().flatten());
        let containers = pod.spec.iter().flat_map(|s| s.containers.iter());
        for status in statuses {
            let spec = containers.clone().find(|c| c.name == status.name);
            let image = spec.and_then(|c| c.image.as_deref()).unwrap_or_default();
            // `<registry>/<owner>/<name>@<digest>`, as the chart renders it.
            let name = image.rsplit('/').next().unwrap_or_default();
            let name = name.split(['@', ':']).next().unwrap_or_default();
            assert!(
                release::IMAGES.contains(&name),
                "{}'s container {} runs {image}, no image of the release",
                pod.name_any(),
                status.name
            );
            let expected = published.pinned(name);
            assert_eq!(
                status.image_id,
                expected,
                "{}'s container {} runs the image of the registry that its release published",
                pod.name_any(),
                status.name
            );
            *seen.entry(name.to_owned()).or_insert(0) += 1;
        }
    }
    assert!(
        release::IMAGES
            .iter()
            .all(|image| seen.contains_key(*image)),
        "the agent's and the controller's pods run: {seen:?}"
    );
    eprintln!(
        "node-e2e: the operator's containers run the published digests from {}: {seen:?}",
        published.prefix
    );
}

/// Waits until the DaemonSet's new template runs, ready, on every node.
async fn wait_for_the_agents_to_roll_out(client: &Client, nodes: &[&str]) {
    let daemonsets: Api<DaemonSet> = Api::namespaced(client.clone(), NS);
    let nodes = nodes.len() as i32;
    wait_until(
        "the upgraded agent runs on every node",
        PODS_TIMEOUT,
        async || {
            let ds = daemonsets.get("reboot-agent").await.ok()?;
            let generation = ds.metadata.generation;
            let status = ds.status?;
            (status.observed_generation == generation
                && status.updated_number_scheduled == Some(nodes)
                && status.number_ready == nodes
                && status.number_available == Some(nodes))
            .then_some(())
        },
    )
    .await;
}

/// Waits until the agent runs on every node and both controller replicas are ready.
async fn wait_for_the_operator(client: &Client, nodes: &[&str]) {
    let daemonsets: Api<DaemonSet> = Api::namespaced(client.clone(), NS);
    let nodes = nodes.len() as i32;
    wait_until(
        "the agent DaemonSet is ready on every node",
        PODS_TIMEOUT,
        async || {
            let ds = daemonsets.get("reboot-agent").await.ok()?;
            let status = ds.status?;
            (status.number_ready == nodes && status.updated_number_scheduled == Some(nodes))
                .then_some(())
        },
    )
    .await;
    wait_for_deployment(client, NS, "reboot-controller", 2).await;
}

async fn wait_for_deployment(client: &Client, namespace: &str, name: &str, replicas: i32) {
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), namespace);
    wait_until(
        &format!("{namespace}/{name} has {replicas} ready replicas"),
        PODS_TIMEOUT,
        async || {
            let status = deployments.get(name).await.ok()?.status?;
            (status.ready_replicas == Some(replicas) && status.updated_replicas == Some(replicas))
                .then_some(())
        },
    )
    .await;
}

/// Polls `attempt` every second until it gives a value, printing what it waits for every
/// 30 seconds; panics after `timeout`.
async fn wait_until<T>(
    what: &str,
    timeout: Duration,
    mut attempt: impl AsyncFnMut() -> Option<T>,
) -> T {
    let start = Instant::now();
    let mut said = Instant::now();
    loop {
        if let Some(value) = attempt().await {
            eprintln!("node-e2e: {what} (after {})", secs(start.elapsed()));
            return value;
        }
        assert!(
            start.elapsed() < timeout,
            "timed out after {timeout:?} waiting until {what}"
        );
        if said.elapsed() > Duration::from_secs(30) {
            eprintln!(
                "node-e2e: still waiting until {what} ({})",
                secs(start.elapsed())
            );
            said = Instant::now();
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

async fn boot_ids(client: &Client) -> BTreeMap<String, String> {
    let nodes: Api<Node> = Api::all(client.clone());
    let mut ids = BTreeMap::new();
    for node in nodes
        .list(&ListParams::default())
        .await
        .expect("list nodes")
    {
        if let Some(id) = boot_id(&node) {
            ids.insert(node.name_any(), id.to_owned());
        }
    }
    ids
}

/// Records the steps of `node` in `timeline` as first seen now: `pods_on_it` is how many pods
/// a drain would evict are bound to it, `restarts` how many times its guest restarted
/// (`restarts_before` when the rollout began), `boot_before` its boot then.
fn seen(
    timeline: &mut Timeline,
    node: &Node,
    pods_on_it: usize,
    (restarts, restarts_before): (usize, usize),
    boot_before: &str,
) {
    let now = Some(Instant::now());
    let protocol = e2e::protocol_annotations(node);
    let cordoned = node
        .spec
        .as_ref()
        .and_then(|s| s.unschedulable)
        .unwrap_or(false);
    let has = |key: &str| protocol.iter().any(|k| k == key);
    let first = |step: &mut Option<Instant>, now_seen: bool| {
        if step.is_none() && now_seen {
            *step = now;
        }
    };
    let new_boot = boot_id(node).is_some_and(|id| id != boot_before);
    first(&mut timeline.granted, has("reboot-grant"));
    first(&mut timeline.cordoned, cordoned);
    first(
        &mut timeline.drained,
        timeline.cordoned.is_some() && pods_on_it == 0,
    );
    first(
        &mut timeline.reboot_now,
        has("reboot-now") || has("reboot-in-progress"),
    );
    first(&mut timeline.in_progress, has("reboot-in-progress"));
    first(&mut timeline.restarting, restarts > restarts_before);
    first(&mut timeline.ready_again, new_boot && is_ready(node));
    first(
        &mut timeline.back,
        new_boot && protocol.is_empty() && !cordoned,
    );
}

/// By node, how many pods a drain would evict are bound to it: every pod not of a DaemonSet,
/// not a mirror pod, and not finished.
async fn evictable_pods_by_node(client: &Client) -> BTreeMap<String, usize> {
    let pods: Api<Pod> = Api::all(client.clone());
    let mut by_node = BTreeMap::new();
    for pod in pods
        .list(&ListParams::default())
        .await
        .into_iter()
        .flatten()
    {
        let of_a_daemonset = pod
            .metadata
            .owner_references
            .iter()
            .flatten()
            .any(|o| o.kind == "DaemonSet");
        let mirror = pod
            .annotations()
            .contains_key("kubernetes.io/config.mirror");
        let finished = pod
            .status
            .as_ref()
            .and_then(|s| s.phase.as_deref())
            .is_some_and(|p| p == "Succeeded" || p == "Failed");
        let node = pod.spec.as_ref().and_then(|s| s.node_name.clone());
        if let (Some(node), false) = (node, of_a_daemonset || mirror || finished) {
            *by_node.entry(node).or_insert(0) += 1;
        }
    }
    by_node
}

/// Prints each node's steps as they happen and waits until each of `nodes` has been rebooted
/// `reboots` times in all and is back; fails at once when the observer sees an invariant broken.
/// Returns each node's timeline.
async fn follow_the_rollout(
    observer: &Observer,
    client: &Client,
    fleet: &NodeFleet,
    nodes: &[&str],
    reboots: u32,
) -> BTreeMap<String, Timeline> {
    let api: Api<Node> = Api::all(client.clone());
    let timeout = REBOOT_TIMEOUT * nodes.len() as u32;
    let mut last: BTreeMap<String, String> = BTreeMap::new();
    let boots_before = boot_ids(client).await;
    let restarts_before: BTreeMap<&str, usize> =
        nodes.iter().map(|n| (*n, fleet.vm(n).restarts())).collect();
    let mut timelines: BTreeMap<String, Timeline> = BTreeMap::new();
    let start = Instant::now();
    loop {
        if let Err(broken) = observer.check() {
            observer.fail(&broken);
        }
        let pods = evictable_pods_by_node(client).await;
        for name in nodes {
            let Ok(node) = api.get(name).await else {
                continue;
            };
            seen(
                timelines.entry((*name).to_owned()).or_default(),
                &node,
                pods.get(*name).copied().unwrap_or(0),
                (fleet.vm(name).restarts(), restarts_before[name]),
                boots_before.get(*name).map_or("", String::as_str),
            );
            let now = describe(&node);
            if last.get(*name) != Some(&now) {
                eprintln!("node-e2e: [{}] {name}: {now}", secs(start.elapsed()));
                last.insert((*name).to_owned(), now);
            }
        }
        if nodes
            .iter()
            .all(|name| observer.rebooted_and_back(name, reboots))
        {
            return timelines;
        }
        if start.elapsed() > timeout {
            observer.fail(&format!(
                "the nodes were not all rebooted and back within {timeout:?}"
            ));
        }
        tokio::time::sleep(POLL).await;
    }
}

/// The figures of a rollout (see [`vmtest::figures`]), on the terminal.
fn print_figures(
    method: &str,
    timelines: &BTreeMap<String, Timeline>,
    pools: &BTreeMap<String, String>,
    requested: Instant,
    makespan: Duration,
) {
    let prefix = format!("node-e2e: figures ({method}):");
    for line in figures::report(&prefix, timelines, pools, requested, makespan) {
        eprintln!("{line}");
    }
}

/// A node's step as a person reads it: its protocol annotations, cordon, readiness, boot.
fn describe(node: &Node) -> String {
    let protocol = e2e::protocol_annotations(node);
    let cordoned = node
        .spec
        .as_ref()
        .and_then(|s| s.unschedulable)
        .unwrap_or(false);
    format!(
        "{}{}{} boot {}",
        if protocol.is_empty() {
            "out of the protocol".to_owned()
        } else {
            protocol.join(",")
        },
        if cordoned { ", cordoned" } else { "" },
        if is_ready(node) {
            ", Ready"
        } else {
            ", NotReady"
        },
        boot_id(node).map_or("?", |id| &id[..8.min(id.len())])
    )
}

/// Each pool of [`POOLS`] and the nodes it selects here.
fn pools_of(nodes: &[&'static str]) -> BTreeMap<&'static str, Vec<&'static str>> {
    BTreeMap::from([
        ("control-plane", nodes[..1].to_vec()),
        ("workers", nodes[1..].to_vec()),
        ("gpu", Vec::new()),
    ])
}

/// `kubectl get rebootpools` as JSON, by pool name.
fn rebootpools(cp: &ControlPlane) -> BTreeMap<String, serde_json::Value> {
    let listed = e2e::kubectl(cp, &["get", "rebootpools", "-o", "json"]);
    let listed: serde_json::Value = serde_json::from_str(&listed).expect("a JSON list");
    listed["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|pool| {
            (
                pool["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
                pool.clone(),
            )
        })
        .collect()
}

/// The status condition `kind` of a pool, `True` or `False`.
fn condition<'a>(pool: &'a serde_json::Value, kind: &str) -> &'a str {
    pool["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == kind)
        .and_then(|c| c["status"].as_str())
        .unwrap_or("unknown")
}

/// Waits until the controller reports on every pool of the chart's values: its status is of
/// its current spec, counts the nodes it selects, and says Ready. Prints what
/// `kubectl get rebootpools` shows then.
async fn wait_for_the_pools(cp: &ControlPlane, pools: &BTreeMap<&str, Vec<&str>>) {
    wait_until(
        "every pool of the chart's values is Ready with its nodes",
        PODS_TIMEOUT,
        async || {
            let seen = rebootpools(cp);
            (seen.len() == pools.len()
                && pools.iter().all(|(name, nodes)| {
                    seen.get(*name).is_some_and(|pool| {
                        pool["status"]["observedGeneration"] == pool["metadata"]["generation"]
                            && pool["status"]["nodes"] == nodes.len()
                            && condition(pool, "Ready") == "True"
                    })
                }))
            .then_some(())
        },
    )
    .await;
    eprintln!(
        "node-e2e: kubectl get rebootpools\n{}",
        e2e::kubectl(cp, &["get", "rebootpools"])
    );
}

/// Each rebooted node's pool, and that pool alone, records it as its last completed reboot,
/// and every pool is Ready with nothing rebooting (within a minute: statuses are written at
/// most about once a second).
async fn check_each_pool_completed_its_own(
    cp: &ControlPlane,
    pools: &BTreeMap<&str, Vec<&str>>,
    rebooted: &[&str],
) {
    let wrong = |seen: &BTreeMap<String, serde_json::Value>| -> Option<String> {
        pools.iter().find_map(|(name, nodes)| {
            let Some(pool) = seen.get(*name) else {
                return Some(format!("pool {name} is gone: {seen:?}"));
            };
            let last = pool["status"]["lastCompleted"]["node"].as_str();
            let ours: Vec<&str> = nodes
                .iter()
                .copied()
                .filter(|n| rebooted.contains(n))
                .collect();
            let last_is_ours = match last {
                None => ours.is_empty(),
                Some(node) => ours.contains(&node),
            };
            let settled = condition(pool, "Ready") == "True" && pool["status"]["rebooting"] == 0;
            (!last_is_ours || !settled).then(|| {
                format!(
                    "pool {name} (rebooted {ours:?}) should record its last completed reboot \
                     as one of them, be Ready and reboot nothing: {pool}"
                )
            })
        })
    };
    let start = Instant::now();
    loop {
        let seen = rebootpools(cp);
        let Some(problem) = wrong(&seen) else {
            break;
        };
        assert!(start.elapsed() < Duration::from_secs(60), "{problem}");
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    eprintln!(
        "node-e2e: each pool recorded its own reboots: kubectl get rebootpools\n{}",
        e2e::kubectl(cp, &["get", "rebootpools"])
    );
}

/// The pools deleted while the controller runs, then `helm uninstall`, as docs/src/pools.md
/// says: the controller removes each pool's finalizer and its ledger Lease, so that nothing of
/// the pools is left behind.
async fn uninstall_as_the_docs_say(cp: &ControlPlane, client: &Client) {
    let leases: Api<Lease> = Api::namespaced(client.clone(), NS);
    let ledgers = async || -> Option<Vec<String>> {
        let listed = leases.list(&ListParams::default()).await.ok()?;
        Some(
            listed
                .iter()
                .map(ResourceExt::name_any)
                .filter(|name| name.starts_with(common::pool::LEDGER_PREFIX))
                .collect(),
        )
    };
    // Each pool's ledger is there before the deletion, so that its going is seen, not assumed.
    let before = ledgers().await.expect("the Leases are listed");
    let pools = rebootpools(cp);
    assert!(!pools.is_empty(), "the chart's pools are there to delete");
    for pool in pools.keys() {
        let ledger = common::pool::ledger_name(pool);
        assert!(
            before.contains(&ledger),
            "{ledger} is there before its pool is deleted: {before:?}"
        );
    }
    e2e::kubectl(cp, &["delete", "rebootpools", "--all", "--timeout=300s"]);
    assert!(
        rebootpools(cp).is_empty(),
        "kubectl delete rebootpools --all returned with the pools gone"
    );
    wait_until(
        "the deleted pools' ledger Leases are deleted",
        PODS_TIMEOUT,
        async || ledgers().await?.is_empty().then_some(()),
    )
    .await;
    let mut uninstall = e2e::install::helm_on(cp);
    uninstall.args(["uninstall", RELEASE, "--namespace", NS, "--wait"]);
    let out = uninstall.output().expect("helm runs");
    assert!(
        out.status.success(),
        "helm uninstall: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(rebootpools(cp).is_empty(), "no RebootPool is left");
    eprintln!("node-e2e: pools deleted, then helm uninstall: nothing of the pools is left");
}

/// Every holder the controller's leader Lease has had while the test watched.
struct LeaderWatch {
    holders: Arc<Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl LeaderWatch {
    fn start(client: Client) -> LeaderWatch {
        let holders = Arc::new(Mutex::new(Vec::new()));
        let seen = holders.clone();
        let task = tokio::spawn(async move {
            let leases: Api<Lease> = Api::namespaced(client, NS);
            loop {
                for lease in leases
                    .list(&ListParams::default())
                    .await
                    .into_iter()
                    .flatten()
                {
                    let holder = lease.spec.and_then(|s| s.holder_identity);
                    if let Some(holder) = holder {
                        let mut seen = seen.lock().unwrap_or_else(|e| e.into_inner());
                        if seen.last() != Some(&holder) {
                            eprintln!(
                                "node-e2e: Lease {} held by {holder}",
                                lease.metadata.name.unwrap_or_default()
                            );
                            seen.push(holder);
                        }
                    }
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        });
        LeaderWatch { holders, task }
    }

    /// The node where the pod holding the Lease runs (its holder identity is the pod's name),
    /// once a holder is seen.
    async fn node_of_the_holder(&self, client: &Client) -> &'static str {
        let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
        wait_until("the leader's node is known", PODS_TIMEOUT, async || {
            let holder = self.holders().last()?.clone();
            let pod = pods.get(&holder).await.ok()?;
            let node = pod.spec?.node_name?;
            NODES.iter().copied().find(|n| *n == node)
        })
        .await
    }

    fn holders(&self) -> Vec<String> {
        self.holders
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

impl Drop for LeaderWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A token bound to the real agent pod on the first node (what its kubelet projects into it)
/// may not change another node, nor mark a cordon as the operator's on its own: the chart's
/// admission policy refuses both, and says why.
async fn check_the_agents_token_is_held_to_its_node(cp: &ControlPlane, admin: &Client) {
    let pods: Api<Pod> = Api::namespaced(admin.clone(), NS);
    let agent = pods
        .list(&ListParams::default().labels("app.kubernetes.io/name=reboot-agent"))
        .await
        .expect("list the agent pods")
        .into_iter()
        .find(|pod| pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(NODES[0]))
        .unwrap_or_else(|| panic!("no agent pod on {}", NODES[0]));
    let token = nodesim::identities::request_token(admin, NS, "reboot-agent", Some(&agent))
        .await
        .expect("a token bound to the agent's pod");
    let agent_client = cp
        .client_for_token(&token)
        .await
        .expect("the agent's client");
    let nodes: Api<Node> = Api::all(agent_client);
    let dry_run = kube::api::PatchParams::default().dry_run();
    let patch = |key: &str| {
        kube::api::Patch::Merge(serde_json::json!({"metadata": {"annotations": {key: "true"}}}))
    };
    for (node, key, why) in [
        (NODES[1], "reboot-needed", "another node"),
        (
            NODES[0],
            "reboot-cordoned",
            "a cordon marked as the operator's",
        ),
    ] {
        let refused = nodes.patch(node, &dry_run, &patch(key)).await;
        match refused {
            Err(kube::Error::Api(status)) if status.code == 403 => {
                eprintln!(
                    "node-e2e: the agent of {} may not write {why}: {}",
                    NODES[0], status.message
                );
            }
            other => panic!(
                "the agent of {} wrote {why} ({key} on {node}): {other:?}",
                NODES[0]
            ),
        }
    }
}

/// A pod that the kubelet's shutdown killed has a `DisruptionTarget` condition with reason
/// `TerminationByKubelet`; an evicted one `EvictionByEvictionAPI`.
async fn check_no_workload_pod_was_killed_by_the_shutdown(client: &Client) {
    wait_for_deployment(client, WORKLOAD_NS, "web", 3).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), WORKLOAD_NS);
    let pods = pods
        .list(&ListParams::default().labels("app=web"))
        .await
        .expect("list pods")
        .items;
    // Killed pods stay, Failed; evicted ones are gone and replaced on the other nodes.
    let running = pods
        .iter()
        .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
        .count();
    assert_eq!(
        running, 3,
        "the workload's three pods run again after the reboots"
    );
    for pod in pods {
        let killed = pod
            .status
            .iter()
            .flat_map(|s| s.conditions.iter().flatten())
            .any(|c| {
                c.type_ == "DisruptionTarget" && c.reason.as_deref() == Some("TerminationByKubelet")
            });
        assert!(
            !killed,
            "{} was killed by the node's shutdown, not evicted",
            pod.name_any()
        );
    }
}
