//! Support for end-to-end scenarios: the independent budget watcher (from `nodesim`), waiting
//! with a deadline, and the real kubectl.

use common::{AnnotationKeys, NodeFacts, Reason};
use k8s_openapi::api::core::v1::{Event, Node};
use kube::{Api, Client, api::ListParams, runtime::watcher};
pub use nodesim::budget_watch::{BudgetWatch, unavailable};
use nodesim::observe::{Coverage, Observe, ResumingWatch};
use nodesim::sandbox::SandboxConfig;

pub mod chart_readme;
pub mod chart_values;
pub mod elf;
pub mod every_node;
pub mod faketime;
pub mod install;
pub mod observer;
pub mod promql;
pub mod protocol_steps;
pub mod release;
pub mod rollout;
pub mod scrape;
pub mod workload;
use std::{
    collections::{BTreeMap, BTreeSet},
    future::Future,
    time::{Duration, Instant},
};

/// Polls `attempt` until it gives a value, failing at once if the budget watch saw a
/// violation, and after `timeout` with `what` in the message.
pub async fn eventually<T, F, Fut>(
    what: &str,
    timeout: Duration,
    budget: Option<&BudgetWatch>,
    mut attempt: F,
) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(watch) = budget
            && let Err(violation) = watch.check()
        {
            panic!("{violation} (while waiting until {what})");
        }
        if let Some(value) = attempt().await {
            return value;
        }
        assert!(
            start.elapsed() < timeout,
            "timed out after {timeout:?} waiting until {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Polls `condition` until it is true, like [`eventually`].
pub async fn wait_until<F, Fut>(
    what: &str,
    timeout: Duration,
    budget: Option<&BudgetWatch>,
    mut condition: F,
) where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    eventually(what, timeout, budget, || {
        let ready = condition();
        async move { ready.await.then_some(()) }
    })
    .await;
}

/// Runs the real kubectl against the control plane; panics with its stderr when it fails.
pub fn kubectl(cp: &testenv::ControlPlane, args: &[&str]) -> String {
    let output = cp.kubectl().args(args).output().expect("kubectl runs");
    assert!(
        output.status.success(),
        "kubectl {} failed: {}",
        args.join(" "),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

pub async fn node(client: &Client, name: &str) -> Node {
    Api::<Node>::all(client.clone())
        .get(name)
        .await
        .expect("node exists")
}

/// The operator's protocol annotations still on a node. Bookkeeping of past reboots
/// (`reboot-last-completed`, `reboot-last-grant`) stays on a node and is not protocol state;
/// `reboot-grant` (a slot held) is.
pub fn protocol_annotations(node: &Node) -> Vec<String> {
    let keys = AnnotationKeys::default();
    node.metadata
        .annotations
        .iter()
        .flatten()
        .map(|(k, _)| k.clone())
        .filter(|k| keys.is_protocol_state(k))
        .collect()
}

/// The Events about a node, first stored first, as `(reason, reporting component, message)`.
pub async fn node_events(client: &Client, node: &str) -> Vec<(String, String, String)> {
    events_about(client, node)
        .await
        .into_iter()
        .map(|e| {
            (
                e.reason.unwrap_or_default(),
                e.reporting_component.unwrap_or_default(),
                e.message.unwrap_or_default(),
            )
        })
        .collect()
}

/// The Events about the object named `node`, in the order the API server stored them (etcd
/// revision), not by `eventTime`: each reporter stamps that with its own clock, and a node's
/// clock may be off by seconds (the VM tier's guests are).
pub async fn events_about(client: &Client, node: &str) -> Vec<Event> {
    let params = ListParams::default().fields(&format!("involvedObject.name={node}"));
    let mut events = Api::<Event>::namespaced(client.clone(), "default")
        .list(&params)
        .await
        .expect("list events")
        .items;
    events.sort_by_key(nodesim::observe::revision);
    events
}

/// A sandbox on a control plane with the scheduler and the controller-manager, so that
/// Deployments, DaemonSets and PodDisruptionBudgets are real; reboots take 1 s.
pub async fn sandbox_with_pods(
    nodes: usize,
    max_unavailable: &str,
    controller_args: &[&str],
) -> nodesim::sandbox::Sandbox {
    let config = SandboxConfig::with_nodes(nodes)
        .max_unavailable(max_unavailable)
        .reboot_duration(Duration::from_secs(1))
        .controller_args(controller_args);
    nodesim::sandbox::Sandbox::start(config)
        .await
        .expect("sandbox starts")
}

/// Who reported which steps: for each `reportingInstance` of `component` (such as
/// `reboot-controller`), the reasons of its Events (on any node) among `reasons`.
pub async fn step_reporters(
    client: &Client,
    component: &str,
    reasons: &[&str],
) -> BTreeMap<String, BTreeSet<String>> {
    let events = Api::<Event>::namespaced(client.clone(), "default")
        .list(&ListParams::default())
        .await
        .expect("list events")
        .items;
    let mut reporters: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for event in events {
        let reason = event.reason.unwrap_or_default();
        let by_component = event.reporting_component.as_deref() == Some(component);
        if by_component && reasons.contains(&reason.as_str()) {
            reporters
                .entry(event.reporting_instance.unwrap_or_default())
                .or_default()
                .insert(reason);
        }
    }
    reporters
}

/// `kubectl label node <node> <label> --overwrite`, as an administrator moves a node between
/// pools.
pub fn label_node(cp: &testenv::ControlPlane, node: &str, label: &str) {
    kubectl(cp, &["label", "node", node, label, "--overwrite"]);
}

/// One observed state of a node, as the API server sent it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeState {
    /// Its resourceVersion (an etcd revision).
    pub revision: u64,
    /// `status.nodeInfo.bootID`, as the kubelet reports it.
    pub boot_id: String,
    /// The operator's protocol annotations on it (bookkeeping of past reboots aside).
    pub annotations: Vec<String>,
    pub unschedulable: bool,
    /// `reboot-last-completed`, once a reboot of the node was completed.
    pub last_completed: Option<String>,
    /// `reboot-requested-by`: who asked for the node's last reboot (history: it stays after
    /// the reboot, so it is not among `annotations`).
    pub requested_by: Option<String>,
}

impl NodeState {
    pub fn of(node: &Node) -> Self {
        let facts = NodeFacts::from_node(node);
        let keys = AnnotationKeys::default();
        Self {
            revision: nodesim::observe::revision(node),
            boot_id: facts.boot_id.clone().unwrap_or_default(),
            annotations: protocol_annotations(node),
            unschedulable: facts.unschedulable,
            last_completed: facts.annotations.get(&keys.last_completed).cloned(),
            requested_by: facts.annotations.get(&keys.requested_by).cloned(),
        }
    }
}

impl std::fmt::Display for NodeState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "revision {}: boot {}, {}, reboot-last-completed {}, reboot-requested-by {}, \
             protocol {:?}",
            self.revision,
            self.boot_id,
            if self.unschedulable {
                "cordoned"
            } else {
                "schedulable"
            },
            self.last_completed.as_deref().unwrap_or("-"),
            self.requested_by.as_deref().unwrap_or("-"),
            self.annotations
        )
    }
}

/// The states of one node, in order.
#[derive(Debug, Default)]
struct States(Vec<NodeState>);

impl States {
    fn push(&mut self, node: &Node) {
        let state = NodeState::of(node);
        // A re-list shows again the state last seen when nothing changed.
        if self.0.last() != Some(&state) {
            self.0.push(state);
        }
    }
}

impl Observe<Node> for States {
    fn listed(&mut self, nodes: &[Node]) {
        nodes.iter().for_each(|n| self.push(n));
    }

    fn applied(&mut self, node: &Node) {
        self.push(node);
    }

    fn deleted(&mut self, _: &Node) {}
}

/// Every state one node went through, from a watch that resumes after errors.
#[derive(Debug)]
pub struct NodeHistory {
    name: String,
    watch: ResumingWatch<States>,
}

impl NodeHistory {
    /// Returns once the node's current state is recorded, so the scenario may change it.
    pub async fn start(client: Client, name: &str) -> NodeHistory {
        let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
        let watch = ResumingWatch::start(
            Api::<Node>::all(client),
            config,
            format!("Node {name} (history)"),
            States::default(),
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
        NodeHistory {
            name: name.to_owned(),
            watch,
        }
    }

    pub fn states(&self) -> Vec<NodeState> {
        self.watch.with(|s| s.0.clone())
    }

    /// Waits (up to a minute) until the history holds the node as the API server has it now:
    /// what [`NodeHistory::states`] then gives covers everything written so far.
    pub async fn catch_up(&self, client: &Client) {
        let now = nodesim::observe::revision(&node(client, &self.name).await);
        let what = format!("the history of {} shows revision {now}", self.name);
        wait_until(&what, Duration::from_secs(60), None, || async {
            self.watch
                .with(|s| s.0.last().is_some_and(|last| last.revision >= now))
        })
        .await;
    }

    /// Fails when the history may have gaps: its watch stopped or was blind too long.
    pub fn check(&self) -> Result<(), String> {
        self.watch.check()
    }

    pub fn coverage(&self) -> Coverage {
        self.watch.coverage()
    }
}

/// Runs the real kubectl with `input` on stdin (for `apply -f -`); panics when it fails.
pub fn kubectl_stdin(cp: &testenv::ControlPlane, args: &[&str], input: &str) -> String {
    cp.kubectl_with_input(args, input)
        .unwrap_or_else(|e| panic!("{e}"))
}

/// `kubectl annotate node <node> reboot-needed=true`, as an administrator asks for a reboot.
pub fn request_reboot(cp: &testenv::ControlPlane, node: &str) {
    kubectl(cp, &["annotate", "node", node, "reboot-needed=true"]);
}

/// `kubectl apply -f -` of a manifest; panics when it fails.
pub fn apply(cp: &testenv::ControlPlane, manifest: &str) {
    cp.apply(manifest).unwrap_or_else(|e| panic!("{e}"));
}

/// The reasons of the Events about a node, oldest first.
pub async fn event_reasons(client: &Client, node: &str) -> Vec<String> {
    node_events(client, node)
        .await
        .into_iter()
        .map(|(reason, _, _)| reason)
        .collect()
}

/// Whether an Event with this reason, whose message contains every one of `words`, is there.
pub async fn has_event<R: Reason>(client: &Client, node: &str, reason: R, words: &[&str]) -> bool {
    // By the program that reports it too: both programs have an `UnknownFormat`.
    node_events(client, node)
        .await
        .iter()
        .any(|(r, component, message)| {
            r == reason.as_str()
                && component == R::COMPONENT
                && words.iter().all(|w| message.contains(w))
        })
}

/// How many times the program that reports `reason` reported it about the node: a repeat that
/// the reporter folds into an earlier Event's series counts as one more.
pub async fn times_reported<R: Reason>(client: &Client, node: &str, reason: R) -> i32 {
    events_about(client, node)
        .await
        .iter()
        .filter(|e| {
            e.reason.as_deref() == Some(reason.as_str())
                && e.reporting_component.as_deref() == Some(R::COMPONENT)
        })
        .map(|e| e.series.as_ref().and_then(|s| s.count).unwrap_or(1))
        .sum()
}

/// Waits (up to four minutes) for an Event like [`has_event`] describes.
pub async fn wait_for_event(
    client: &Client,
    node: &str,
    reason: impl Reason,
    words: &[&str],
    budget: Option<&BudgetWatch>,
) {
    let what = format!("a {reason} Event on {node} mentioning {words:?}");
    wait_until(&what, Duration::from_secs(240), budget, || {
        has_event(client, node, reason, words)
    })
    .await;
}

/// A bare pod `default/precious` on `node` and a PodDisruptionBudget `never-disrupt` that never
/// lets it be evicted: the drain of that node can only time out.
pub fn pod_that_blocks_the_drain_of(node: &str) -> String {
    format!(
        r#"
apiVersion: v1
kind: Pod
metadata: {{name: precious, namespace: default, labels: {{app: precious}}}}
spec:
  nodeName: {node}
  containers: [{{name: c, image: registry.example/precious:1}}]
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {{name: never-disrupt, namespace: default}}
spec:
  minAvailable: 1
  selector: {{matchLabels: {{app: precious}}}}
"#
    )
}

/// Waits (up to four minutes) until the controller-manager has computed that the
/// `never-disrupt` budget of [`pod_that_blocks_the_drain_of`] allows nothing.
pub async fn wait_until_the_budget_allows_no_disruption(cp: &testenv::ControlPlane) {
    let what = "the PDB allows no disruption";
    wait_until(what, Duration::from_secs(240), None, || async {
        let status = "jsonpath={.status.currentHealthy}/{.status.disruptionsAllowed}";
        kubectl(cp, &["get", "pdb", "never-disrupt", "-o", status]) == "1/0"
    })
    .await;
}

/// A pod that is Ready and not being deleted: one that serves.
pub fn pod_is_ready(pod: &k8s_openapi::api::core::v1::Pod) -> bool {
    pod.metadata.deletion_timestamp.is_none()
        && pod
            .status
            .iter()
            .flat_map(|s| s.conditions.iter().flatten())
            .any(|c| c.type_ == "Ready" && c.status == "True")
}

/// A sandbox on a control plane without scheduler and controller-manager, for scenarios that
/// need no pods (quicker to start).
pub async fn sandbox_without_pods(config: SandboxConfig) -> nodesim::sandbox::Sandbox {
    nodesim::sandbox::Sandbox::start(config.without_pods())
        .await
        .expect("sandbox starts")
}

/// `<node dir>/run/<name>` of a simulated node, for a reboot sentinel: gone after the node's
/// next reboot, as in a tmpfs `/run`.
pub fn in_run(sb: &nodesim::sandbox::Sandbox, node: &str, name: &str) -> std::path::PathBuf {
    let run = sb.fleet.node_dir(node).join("run");
    std::fs::create_dir_all(&run).expect("create run/");
    run.join(name)
}

/// The taint the scenarios give `--prefer-no-schedule-taint`: on a node while it waits.
pub const PENDING_TAINT: &str = "example.com/reboot-pending";

/// The node carries [`PENDING_TAINT`] with the effect the operator puts: `PreferNoSchedule`.
pub fn has_pending_taint(n: &Node) -> bool {
    NodeFacts::from_node(n)
        .taints
        .unwrap_or_default()
        .iter()
        .any(|(k, e)| k == PENDING_TAINT && e == "PreferNoSchedule")
}

/// A Deployment with one replica on `sim-1`: its drain has a pod to evict (and says so).
pub const ONE_POD_ON_SIM_1: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: one, namespace: default}
spec:
  replicas: 1
  selector: {matchLabels: {app: one}}
  template:
    metadata: {labels: {app: one}}
    spec:
      nodeSelector: {kubernetes.io/hostname: sim-1}
      containers: [{name: c, image: registry.example/one:1}]
"#;

/// The node holds a slot: the operator cordoned it, or its reboot is under way.
pub async fn holds_a_slot(client: &Client, name: &str) -> bool {
    let held = [
        "reboot-cordoned",
        "reboot-grant",
        "reboot-now",
        "reboot-in-progress",
        "reboot-done",
    ];
    protocol_annotations(&node(client, name).await)
        .iter()
        .any(|k| held.contains(&k.as_str()))
}

/// The controller's default leader Lease (`--leader-election-lease-name`).
pub const LEADER_LEASE: &str = "reboot-controller";

/// Who holds the controller's leader Lease, read straight from the API server; `None` when
/// nobody does (or it cannot be read).
pub async fn leader_identity(client: &Client) -> Option<String> {
    Api::<k8s_openapi::api::coordination::v1::Lease>::namespaced(
        client.clone(),
        nodesim::sandbox::OPERATOR_NAMESPACE,
    )
    .get_opt(LEADER_LEASE)
    .await
    .ok()??
    .spec?
    .holder_identity
    .filter(|h| !h.is_empty())
}

/// Which of the sandbox's controllers holds the leader Lease.
pub async fn leading_controller(sb: &nodesim::sandbox::Sandbox) -> Option<usize> {
    let holder = leader_identity(&sb.client).await?;
    sb.controllers.iter().position(|c| c.identity() == holder)
}

/// `--reboot-window`'s text for a window every day (UTC) from `open` to `close`, in whole
/// seconds (the syntax has no fractions).
pub fn daily_window(
    open: k8s_openapi::jiff::Timestamp,
    close: k8s_openapi::jiff::Timestamp,
) -> String {
    let hms = |t: k8s_openapi::jiff::Timestamp| t.strftime("%H:%M:%S").to_string();
    format!("daily {}-{} UTC", hms(open), hms(close))
}
