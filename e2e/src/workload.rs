//! The workload that chaos scenarios and the soak drain: one Deployment, spread over the
//! nodes, whose PodDisruptionBudget lets a few replicas be down at a time, and a DaemonSet
//! (whose pods a drain leaves alone).

use crate::{kubectl, pod_is_ready};
use k8s_openapi::api::core::v1::Pod;
use kube::{Api, Client, api::ListParams};
use nodesim::sandbox::Sandbox;
use std::{
    collections::{BTreeMap, BTreeSet},
    time::{Duration, Instant},
};

/// The label of the workload's pods, as the independent observer takes it.
pub const WORKLOAD: (&str, &str) = ("app", "web");
/// The namespace of the workload.
pub const NAMESPACE: &str = "default";
/// How long to wait for the scheduler's (soft) spreading before nudging it.
const SPREAD_PATIENCE: Duration = Duration::from_secs(30);

/// The workload's manifest: `replicas` replicas, of which the PodDisruptionBudget lets
/// `max_unavailable` be down at once.
pub fn manifest(replicas: usize, max_unavailable: usize) -> String {
    format!(
        r#"
apiVersion: apps/v1
kind: Deployment
metadata: {{name: web, namespace: default}}
spec:
  replicas: {replicas}
  selector: {{matchLabels: {{app: web}}}}
  template:
    metadata: {{labels: {{app: web}}}}
    spec:
      topologySpreadConstraints:
      - {{maxSkew: 1, topologyKey: kubernetes.io/hostname, whenUnsatisfiable: ScheduleAnyway, labelSelector: {{matchLabels: {{app: web}}}}}}
      containers: [{{name: web, image: registry.example/web:1}}]
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {{name: web, namespace: default}}
spec:
  maxUnavailable: {max_unavailable}
  selector: {{matchLabels: {{app: web}}}}
---
apiVersion: apps/v1
kind: DaemonSet
metadata: {{name: node-agent, namespace: default}}
spec:
  selector: {{matchLabels: {{app: node-agent}}}}
  template:
    metadata: {{labels: {{app: node-agent}}}}
    spec:
      containers: [{{name: agent, image: registry.example/agent:1}}]
"#
    )
}

async fn pods(client: &Client) -> Vec<Pod> {
    Api::<Pod>::namespaced(client.clone(), NAMESPACE)
        .list(&ListParams::default().labels("app=web"))
        .await
        .map(|l| l.items)
        .unwrap_or_default()
}

fn node_of(pod: &Pod) -> Option<String> {
    pod.spec.as_ref().and_then(|s| s.node_name.clone())
}

/// The nodes holding a Ready replica of the workload, with how many each.
pub async fn ready_replicas_by_node(client: &Client) -> BTreeMap<String, usize> {
    let mut by_node = BTreeMap::new();
    for pod in pods(client).await.iter().filter(|p| pod_is_ready(p)) {
        if let Some(node) = node_of(pod) {
            *by_node.entry(node).or_insert(0) += 1;
        }
    }
    by_node
}

/// Deploys the workload and waits until it is Ready on every node of `spread_over`.
///
/// # Panics
/// When it is not, after `timeout`.
pub async fn deploy(
    sb: &Sandbox,
    replicas: usize,
    max_unavailable: usize,
    spread_over: &[String],
    timeout: Duration,
) {
    crate::apply(&sb.control_plane, &manifest(replicas, max_unavailable));
    wait_for_spread(sb, replicas, spread_over, timeout).await;
}

/// Puts replicas back on every node (after a rollout the last nodes drained hold none), as a
/// scheduler spreads them when they are all created again.
pub async fn respread(sb: &Sandbox, replicas: usize, spread_over: &[String], timeout: Duration) {
    kubectl(
        &sb.control_plane,
        &["delete", "pods", "-l", "app=web", "--wait=false"],
    );
    wait_for_spread(sb, replicas, spread_over, timeout).await;
}

/// Waits until `replicas` replicas are Ready, at least one on each node of `spread_over`.
///
/// # Panics
/// When they are not, after `timeout`.
pub async fn wait_for_spread(
    sb: &Sandbox,
    replicas: usize,
    spread_over: &[String],
    timeout: Duration,
) {
    let start = Instant::now();
    let mut nudged_at = start;
    loop {
        let by_node = ready_replicas_by_node(&sb.client).await;
        if by_node.values().sum::<usize>() == replicas
            && spread_over.iter().all(|n| by_node.contains_key(n))
        {
            return;
        }
        assert!(
            start.elapsed() < timeout,
            "timed out after {timeout:?} waiting for {replicas} Ready web replicas on each of \
             {spread_over:?}; Ready replicas by node: {by_node:?}"
        );
        if nudged_at.elapsed() > SPREAD_PATIENCE {
            eprintln!("the workload is not spread yet ({by_node:?}): moving surplus replicas");
            move_surplus_replicas(sb).await;
            nudged_at = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Deletes the replicas that keep the workload from covering every node: those not Ready,
/// and all but one on any node. Spreading is only the scheduler's preference
/// (`ScheduleAnyway`, so that drains never wait for it); their replacements go where
/// replicas are missing.
async fn move_surplus_replicas(sb: &Sandbox) {
    let mut kept = BTreeSet::new();
    let mut surplus = Vec::new();
    for pod in pods(&sb.client).await {
        if pod.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let name = pod.metadata.name.clone().unwrap_or_default();
        match node_of(&pod) {
            Some(node) if pod_is_ready(&pod) && kept.insert(node.clone()) => {}
            _ => surplus.push(name),
        }
    }
    if !surplus.is_empty() {
        let mut args = vec!["delete", "pod", "--wait=false", "--ignore-not-found"];
        args.extend(surplus.iter().map(String::as_str));
        kubectl(&sb.control_plane, &args);
    }
}
