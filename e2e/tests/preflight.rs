//! Pre-flight checks before a node is cordoned, on a control plane with the scheduler and the
//! controller-manager, so that the Deployment, the PodDisruptionBudget's status and the
//! agent's DaemonSet pods are real. The agents run as processes (nodesim); the DaemonSet's
//! pods, started by the simulated kubelet, stand for them, as they would in a cluster.

use common::ControllerReason;
use e2e::{
    BudgetWatch, NodeHistory, apply, has_event, kubectl, label_node, node, pod_is_ready,
    protocol_annotations, request_reboot, wait_until,
};
use k8s_openapi::api::core::v1::Pod;
use kube::{Api, Client, api::ListParams};
use nodesim::sandbox::{OPERATOR_NAMESPACE, Sandbox, SandboxConfig};
use serde_json::Value;
use std::{process::Command, time::Duration};

const ROLLOUT: Duration = Duration::from_secs(240);
const AGENT_LABEL: &str = "app.kubernetes.io/name=reboot-agent";

/// The agent's DaemonSet, on the nodes labelled `agent=yes` only, with the chart's pod labels.
fn agent_daemonset() -> String {
    format!(
        r#"
apiVersion: apps/v1
kind: DaemonSet
metadata: {{name: reboot-agent, namespace: {OPERATOR_NAMESPACE}}}
spec:
  selector: {{matchLabels: {{app.kubernetes.io/name: reboot-agent}}}}
  template:
    metadata: {{labels: {{app.kubernetes.io/name: reboot-agent, app.kubernetes.io/part-of: node-reboot-operator}}}}
    spec:
      nodeSelector: {{agent: "yes"}}
      automountServiceAccountToken: false
      containers: [{{name: agent, image: registry.example/reboot-agent:1}}]
"#
    )
}

/// A database primary pinned to sim-1, and a budget that allows none of its pods to go.
const DB: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: db, namespace: default}
spec:
  replicas: 1
  selector: {matchLabels: {app: db}}
  template:
    metadata: {labels: {app: db}}
    spec:
      nodeSelector: {kubernetes.io/hostname: sim-1}
      automountServiceAccountToken: false
      containers: [{name: db, image: registry.example/db:1}]
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: db, namespace: default}
spec:
  minAvailable: 1
  selector: {matchLabels: {app: db}}
"#;

async fn ready_pods(client: &Client, namespace: &str, selector: &str) -> Vec<Pod> {
    let pods = Api::<Pod>::namespaced(client.clone(), namespace)
        .list(&ListParams::default().labels(selector))
        .await
        .expect("list pods");
    pods.items.into_iter().filter(pod_is_ready).collect()
}

/// `kubectl reboot status -o json`: the node's entry.
fn status_of(sb: &Sandbox, name: &str) -> Value {
    let plugin = nodesim::workspace_binary("kubectl-reboot").unwrap_or_else(|e| panic!("{e}"));
    let output = Command::new(plugin)
        .args(["status", "-o", "json"])
        .env("KUBECONFIG", sb.control_plane.kubeconfig_path())
        .env_remove("MAX_UNAVAILABLE")
        .output()
        .expect("kubectl-reboot runs");
    let text = String::from_utf8_lossy(&output.stdout);
    let status: Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"));
    status["nodes"]
        .as_array()
        .and_then(|nodes| nodes.iter().find(|n| n["name"] == name))
        .cloned()
        .unwrap_or_else(|| panic!("{name} in the status: {status}"))
}

async fn rebooted_and_done(sb: &Sandbox, name: &str) -> bool {
    sb.fleet.reboots(name) == 1 && protocol_annotations(&node(&sb.client, name).await).is_empty()
}

/// No state of the node so far was cordoned or carried a grant.
fn never_cordoned(history: &NodeHistory, name: &str) {
    history.check().unwrap();
    let states = history.states();
    // A history that saw nothing would find nothing cordoned: it must have seen the request.
    assert!(
        states
            .iter()
            .any(|s| s.annotations.iter().any(|a| a == "reboot-needed")),
        "{name}'s history never saw its request: {states:?}"
    );
    let touched = states
        .iter()
        .find(|s| s.unschedulable || s.annotations.iter().any(|a| a == "reboot-grant"));
    assert!(
        touched.is_none(),
        "{name} was cordoned or granted: {touched:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_node_a_budget_at_zero_or_a_missing_agent_would_stall_is_not_cordoned_and_another_goes() {
    let config = SandboxConfig::with_nodes(3)
        .reboot_duration(Duration::from_secs(1))
        .controller_args([format!("--agent-selector={AGENT_LABEL}")]);
    let sb = Sandbox::start(config).await.expect("sandbox starts");
    let cp = &sb.control_plane;
    // sim-2 has no agent pod: the DaemonSet does not run there.
    for name in ["sim-1", "sim-3"] {
        label_node(cp, name, "agent=yes");
    }
    apply(cp, &agent_daemonset());
    apply(cp, DB);
    wait_until(
        "the agent pods of sim-1 and sim-3 and the db are Ready; the budget allows nothing",
        ROLLOUT,
        None,
        || async {
            let status = "jsonpath={.status.currentHealthy}/{.status.disruptionsAllowed}";
            ready_pods(&sb.client, OPERATOR_NAMESPACE, AGENT_LABEL)
                .await
                .len()
                == 2
                && ready_pods(&sb.client, "default", "app=db").await.len() == 1
                && kubectl(cp, &["get", "pdb", "db", "-o", status]) == "1/0"
        },
    )
    .await;
    let (db_node, lost_node) = (
        NodeHistory::start(sb.client.clone(), "sim-1").await,
        NodeHistory::start(sb.client.clone(), "sim-2").await,
    );
    let watch = BudgetWatch::start(sb.client.clone(), 1).await;
    // The oldest requests are the ones that would stall.
    for name in ["sim-1", "sim-2", "sim-3"] {
        request_reboot(cp, name);
    }
    wait_until("sim-3 goes instead", ROLLOUT, Some(&watch), || {
        rebooted_and_done(&sb, "sim-3")
    })
    .await;
    wait_until(
        "sim-1's and sim-2's Events say why they wait",
        ROLLOUT,
        Some(&watch),
        || async {
            has_event(
                &sb.client,
                "sim-1",
                ControllerReason::DisruptionBudget,
                &["default/db"],
            )
            .await
                && has_event(
                    &sb.client,
                    "sim-2",
                    ControllerReason::NoAgent,
                    &[AGENT_LABEL],
                )
                .await
        },
    )
    .await;
    let (db, lost) = (status_of(&sb, "sim-1"), status_of(&sb, "sim-2"));
    assert_eq!(
        (&db["state"], &db["reason"]),
        (&"waiting".into(), &"disruption-budget".into()),
        "{db}"
    );
    assert!(
        db["detail"].as_str().unwrap().contains("default/db"),
        "{db}"
    );
    assert_eq!(
        (&lost["state"], &lost["reason"]),
        (&"waiting".into(), &"no-agent".into()),
        "{lost}"
    );
    assert!(
        lost["detail"].as_str().unwrap().starts_with("no agent"),
        "{lost}"
    );
    never_cordoned(&db_node, "sim-1");
    never_cordoned(&lost_node, "sim-2");

    // The budget allows a disruption again: sim-1 goes.
    kubectl(
        cp,
        &[
            "patch",
            "pdb",
            "db",
            "--type=merge",
            "-p",
            r#"{"spec":{"minAvailable":0}}"#,
        ],
    );
    wait_until("sim-1 is rebooted", ROLLOUT, Some(&watch), || {
        rebooted_and_done(&sb, "sim-1")
    })
    .await;
    // Its agent is scheduled: sim-2 goes.
    never_cordoned(&lost_node, "sim-2");
    label_node(cp, "sim-2", "agent=yes");
    wait_until("sim-2 is rebooted", ROLLOUT, Some(&watch), || {
        rebooted_and_done(&sb, "sim-2")
    })
    .await;
    watch.check().unwrap();
    sb.stop().await;
}
