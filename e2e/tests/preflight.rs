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
                &[
                    "the pod default/db-",
                    "the PodDisruptionBudget default/db allows no disruption",
                ],
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

/// Three replicas, one a node (required anti-affinity), and a budget that needs two of them.
const WEB: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: default}
spec:
  replicas: 3
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      automountServiceAccountToken: false
      affinity:
        podAntiAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
            - labelSelector: {matchLabels: {app: web}}
              topologyKey: kubernetes.io/hostname
      containers: [{name: web, image: registry.example/web:1}]
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: web, namespace: default}
spec:
  minAvailable: 2
  selector: {matchLabels: {app: web}}
"#;

/// The name of the `app=web` pod on `node`.
async fn web_pod_on(client: &Client, node: &str) -> Option<String> {
    let pods = Api::<Pod>::namespaced(client.clone(), "default")
        .list(&ListParams::default().labels("app=web"))
        .await
        .expect("list pods");
    pods.items
        .into_iter()
        .find(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node))
        .and_then(|p| p.metadata.name)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_replica_that_is_not_ready_does_not_hold_its_node_while_its_budget_has_its_healthy_pods()
{
    let config = SandboxConfig::with_nodes(3).reboot_duration(Duration::from_secs(1));
    let sb = Sandbox::start(config).await.expect("sandbox starts");
    let cp = &sb.control_plane;
    apply(cp, WEB);
    let status = "jsonpath={.status.currentHealthy}/{.status.disruptionsAllowed}";
    wait_until("the three replicas are Ready", ROLLOUT, None, || async {
        ready_pods(&sb.client, "default", "app=web").await.len() == 3
            && kubectl(cp, &["get", "pdb", "web", "-o", status]) == "3/1"
    })
    .await;
    // The replica of sim-1 stops being Ready (its node's CSI or CNI is broken, say): the
    // budget has the two healthy pods it needs, and allows no more disruption.
    let broken = web_pod_on(&sb.client, "sim-1")
        .await
        .expect("a replica on sim-1");
    kubectl(
        cp,
        &[
            "patch",
            "pod",
            &broken,
            "--subresource=status",
            "--type=strategic",
            "-p",
            r#"{"status":{"conditions":[{"type":"Ready","status":"False"}]}}"#,
        ],
    );
    wait_until("the budget allows no disruption", ROLLOUT, None, || async {
        kubectl(cp, &["get", "pdb", "web", "-o", status]) == "2/0"
    })
    .await;
    let watch = BudgetWatch::start(sb.client.clone(), 1).await;
    request_reboot(cp, "sim-1");
    // The Eviction API evicts a replica that is not Ready while its budget has its healthy
    // pods: the drain finishes, and the node is rebooted.
    wait_until(
        "sim-1 is drained and rebooted",
        ROLLOUT,
        Some(&watch),
        || rebooted_and_done(&sb, "sim-1"),
    )
    .await;
    assert!(
        !has_event(&sb.client, "sim-1", ControllerReason::DisruptionBudget, &[]).await,
        "sim-1 was held for its budget"
    );
    // Granted by the check's answer, not because the check could not answer.
    assert!(
        !has_event(
            &sb.client,
            "sim-1",
            ControllerReason::PreflightUnanswered,
            &[]
        )
        .await,
        "sim-1 went without the budget check"
    );
    let pods: Api<Pod> = Api::namespaced(sb.client.clone(), "default");
    assert!(
        pods.get_opt(&broken).await.expect("get pod").is_none(),
        "{broken} was evicted"
    );
    watch.check().unwrap();
    sb.stop().await;
}

/// The controller's role of `manifests/`, without the PodDisruptionBudget rule: a role
/// trimmed by hand. Applied with its ServiceAccount and the Events' role; returns a kubeconfig
/// of that ServiceAccount.
fn controller_without_budget_rights(cp: &testenv::ControlPlane) -> std::path::PathBuf {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../manifests");
    let role = std::fs::read_to_string(dir.join("controller-rbac.yaml")).expect("the role");
    let rule = r#"  - apiGroups: ["policy"]
    resources: ["poddisruptionbudgets"]
    verbs: ["list", "watch"]
"#;
    assert!(role.contains(rule), "the budget rule in {role}");
    e2e::kubectl_stdin(cp, &["apply", "-f", "-"], &role.replace(rule, ""));
    let events = std::fs::read_to_string(dir.join("events-rbac.yaml")).expect("the Events' role");
    e2e::kubectl_stdin(cp, &["apply", "-f", "-"], &events);
    let token = kubectl(
        cp,
        &[
            "create",
            "token",
            "-n",
            OPERATOR_NAMESPACE,
            "reboot-controller",
            "--duration=2h",
        ],
    );
    let kubeconfig = cp.dir().join("controller-trimmed.kubeconfig");
    cp.write_kubeconfig_for_token(token.trim(), &kubeconfig)
        .expect("kubeconfig");
    kubeconfig
}

#[tokio::test(flavor = "multi_thread")]
async fn a_budget_check_its_role_cannot_list_warns_and_lets_the_node_go_with_the_drain_honouring_budgets()
 {
    let config = SandboxConfig::with_nodes(3)
        .reboot_duration(Duration::from_secs(1))
        .no_controller();
    let mut sb = Sandbox::start(config).await.expect("sandbox starts");
    let cp = &sb.control_plane;
    apply(cp, &e2e::pod_that_blocks_the_drain_of("sim-1"));
    e2e::wait_until_the_budget_allows_no_disruption(cp).await;
    let kubeconfig = controller_without_budget_rights(cp);
    let controller = nodesim::operator::ControllerProcess::start(
        nodesim::workspace_binary("reboot-controller").unwrap(),
        kubeconfig,
        [
            "--max-unavailable=1",
            nodesim::sandbox::NO_AGENT_PODS,
            "--preflight-timeout=5s",
        ]
        .map(String::from)
        .to_vec(),
        cp.dir().join("controller-1.log"),
    )
    .expect("controller starts");
    let address = controller.metrics_address().expect("metrics address");
    sb.controllers.push(controller);
    let watch = BudgetWatch::start(sb.client.clone(), 1).await;
    request_reboot(cp, "sim-1");
    e2e::wait_for_event(
        &sb.client,
        "sim-1",
        ControllerReason::PreflightUnanswered,
        &[
            "PodDisruptionBudget watch",
            "forbidden",
            "poddisruptionbudgets",
            "--check-disruption-budgets=false",
        ],
        Some(&watch),
    )
    .await;
    let unanswered = r#"node_reboot_preflight_unanswered{check="disruption_budget"}"#;
    let metrics = e2e::scrape::scrape(address).await;
    assert_eq!(
        e2e::scrape::metric(&metrics, unanswered),
        Some(1.0),
        "{metrics}"
    );
    // The node goes without the check; its drain asks the Eviction API, which refuses
    // `precious` while its budget allows no disruption: the node is not rebooted.
    let what = "the Eviction API refused precious";
    e2e::scrape::wait_for_a_refused_eviction(address, what, ROLLOUT, Some(&watch)).await;
    assert_eq!(sb.fleet.reboots("sim-1"), 0, "rebooted with precious on it");
    let pods: Api<Pod> = Api::namespaced(sb.client.clone(), "default");
    assert!(pods.get_opt("precious").await.expect("get").is_some());
    // A node that waits for the slot sim-1 holds does not go yet: it is not told it goes
    // without the check. Events are sent in order, so once sim-3's, requested after sim-2's
    // round, is there, anything that round said of sim-2 is there too.
    for name in ["sim-2", "sim-3"] {
        request_reboot(cp, name);
        e2e::wait_for_event(
            &sb.client,
            name,
            ControllerReason::Requested,
            &["waiting for a slot"],
            Some(&watch),
        )
        .await;
    }
    assert!(
        !has_event(
            &sb.client,
            "sim-2",
            ControllerReason::PreflightUnanswered,
            &[]
        )
        .await,
        "sim-2 was told it goes without the check while it waits for a slot"
    );
    // The budget lets it go: the drain evicts it and the node is rebooted.
    kubectl(
        cp,
        &[
            "patch",
            "pdb",
            "never-disrupt",
            "--type=merge",
            "-p",
            r#"{"spec":{"minAvailable":0}}"#,
        ],
    );
    wait_until("sim-1 is rebooted", ROLLOUT, Some(&watch), || {
        rebooted_and_done(&sb, "sim-1")
    })
    .await;
    assert!(pods.get_opt("precious").await.expect("get").is_none());
    // The others go in turn, each told, once granted, that it goes without the check.
    for name in ["sim-2", "sim-3"] {
        wait_until(
            &format!("{name} is rebooted"),
            ROLLOUT,
            Some(&watch),
            || rebooted_and_done(&sb, name),
        )
        .await;
        assert!(
            has_event(
                &sb.client,
                name,
                ControllerReason::PreflightUnanswered,
                &["PodDisruptionBudget watch", "forbidden"]
            )
            .await,
            "{name} went without the check and was not told"
        );
    }
    watch.check().unwrap();
    sb.stop().await;
}
