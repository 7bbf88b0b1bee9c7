//! The node cache: a reflector over the pool's Nodes, trimmed on the way in so that memory
//! stays small at thousands of nodes, plus an overlay of our own writes so that the next
//! decision sees them at once instead of waiting for the watch to catch up.

use crate::metrics::Metrics;
use common::NodeFacts;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, NodeCondition, NodeSpec, NodeStatus, NodeSystemInfo};
use kube::{
    Api, Client,
    runtime::{WatchStreamExt, reflector, reflector::Store, watcher},
};
use observability::ApiErrorKind;
use std::{collections::HashMap, sync::Arc};
use tokio::sync::Notify;

/// Keeps only what decisions and Events need: name, uid, resourceVersion, annotations,
/// `spec.unschedulable`, the Ready condition and the boot id.
pub fn trim(node: &mut Node) {
    let meta = &mut node.metadata;
    meta.managed_fields = None;
    meta.labels = None;
    meta.owner_references = None;
    meta.finalizers = None;
    node.spec = Some(NodeSpec {
        unschedulable: node.spec.as_ref().and_then(|s| s.unschedulable),
        ..NodeSpec::default()
    });
    let status = node.status.take().unwrap_or_default();
    let ready: Option<Vec<NodeCondition>> = status
        .conditions
        .map(|cs| cs.into_iter().filter(|c| c.type_ == "Ready").collect());
    node.status = Some(NodeStatus {
        conditions: ready,
        node_info: status.node_info.map(|info| NodeSystemInfo {
            boot_id: info.boot_id,
            ..NodeSystemInfo::default()
        }),
        ..NodeStatus::default()
    });
}

/// Starts the reflector; `changed` is notified on every event.
pub fn spawn_reflector(
    client: Client,
    selector: Option<&str>,
    changed: Arc<Notify>,
    metrics: Metrics,
) -> Store<Node> {
    let (store, writer) = reflector::store();
    // Pages of 50 full Node objects (each can carry ~14 KB of images and managedFields before
    // the trim): with kube's default of 500, the allocator keeps the peak of the initial list,
    // and the controller stays at ~90 MiB with 5,000 nodes instead of ~33 MiB.
    let mut config = watcher::Config::default().page_size(50);
    if let Some(selector) = selector {
        config = config.labels(selector);
    }
    let stream = watcher(Api::<Node>::all(client), config)
        .default_backoff()
        .modify(trim)
        .reflect(writer);
    tokio::spawn(async move {
        futures::pin_mut!(stream);
        while let Some(event) = stream.next().await {
            if let Err(error) = event {
                metrics.api_error("node", ApiErrorKind::of_watcher(&error));
                tracing::warn!(%error, "node watch failed; retrying");
            }
            changed.notify_one();
        }
    });
    store
}

fn resource_version(node: &Node) -> u64 {
    node.metadata
        .resource_version
        .as_deref()
        .and_then(|rv| rv.parse().ok())
        .unwrap_or(0)
}

/// The cache as decisions see it: the reflector's nodes, each replaced by our own later
/// write of it where there is one.
#[derive(Debug, Default)]
pub struct Overlay {
    written: HashMap<String, Arc<Node>>,
}

impl Overlay {
    pub fn record(&mut self, mut node: Node) {
        trim(&mut node);
        let name = node.metadata.name.clone().unwrap_or_default();
        self.written.insert(name, Arc::new(node));
    }

    /// The pool now: cached nodes, with our newer writes in place of older cached copies.
    pub fn view(&mut self, store: &Store<Node>) -> Vec<Arc<Node>> {
        let cached = store.state();
        let mut nodes = Vec::with_capacity(cached.len());
        let mut still_ahead = HashMap::new();
        for node in cached {
            let name = node.metadata.name.as_deref().unwrap_or_default();
            match self.written.remove(name) {
                Some(ours) if resource_version(&ours) > resource_version(&node) => {
                    still_ahead.insert(name.to_owned(), ours.clone());
                    nodes.push(ours);
                }
                _ => nodes.push(node),
            }
        }
        self.written = still_ahead;
        nodes
    }
}

/// The facts of each node, by name.
pub fn facts_by_name(nodes: &[Arc<Node>]) -> HashMap<String, NodeFacts> {
    nodes
        .iter()
        .map(|n| {
            let facts = NodeFacts::from_node(n);
            (facts.name.clone(), facts)
        })
        .collect()
}
