//! Support for end-to-end scenarios: the independent budget watcher (from `nodesim`), waiting
//! with a deadline, and the real kubectl.

use common::{AnnotationKeys, NodeFacts};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Event, Node};
use kube::{
    Api, Client,
    api::ListParams,
    runtime::{WatchStreamExt, watcher},
};
pub use nodesim::budget_watch::{BudgetWatch, unavailable};

pub mod rollout;
use std::{
    future::Future,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};
use tokio::task::JoinHandle;

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

/// The operator's protocol annotations still on a node (bookkeeping of past reboots aside).
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

/// The Events about a node, oldest first, as `(reason, reporting component, message)`.
pub async fn node_events(client: &Client, node: &str) -> Vec<(String, String, String)> {
    let params = ListParams::default().fields(&format!("involvedObject.name={node}"));
    let mut events = Api::<Event>::namespaced(client.clone(), "default")
        .list(&params)
        .await
        .expect("list events")
        .items;
    events.sort_by_key(|e| e.event_time.as_ref().map(|t| t.0));
    events
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

/// One observed state of a node: its status boot id and its protocol annotations.
pub type NodeState = (String, Vec<String>);

/// Every state one node went through.
#[derive(Debug)]
pub struct NodeHistory {
    states: Arc<Mutex<Vec<NodeState>>>,
    task: JoinHandle<()>,
}

impl NodeHistory {
    pub async fn start(client: Client, name: &str) -> NodeHistory {
        let states = Arc::new(Mutex::new(Vec::new()));
        let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
        let stream = watcher(Api::<Node>::all(client), config).touched_objects();
        let recorded = states.clone();
        let task = tokio::spawn(async move {
            futures::pin_mut!(stream);
            while let Some(Ok(node)) = stream.next().await {
                let boot_id = NodeFacts::from_node(&node).boot_id.unwrap_or_default();
                let state = (boot_id, protocol_annotations(&node));
                recorded
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(state);
            }
        });
        // Let the watch list the node before the scenario changes it.
        tokio::time::sleep(Duration::from_millis(300)).await;
        NodeHistory { states, task }
    }

    pub fn states(&self) -> Vec<NodeState> {
        self.states
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

impl Drop for NodeHistory {
    fn drop(&mut self) {
        self.task.abort();
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
pub async fn has_event(client: &Client, node: &str, reason: &str, words: &[&str]) -> bool {
    node_events(client, node)
        .await
        .iter()
        .any(|(r, _, message)| r == reason && words.iter().all(|w| message.contains(w)))
}

/// Waits (up to four minutes) for an Event like [`has_event`] describes.
pub async fn wait_for_event(
    client: &Client,
    node: &str,
    reason: &str,
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
