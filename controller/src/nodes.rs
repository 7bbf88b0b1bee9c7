//! The node cache: a reflector over the pool's Nodes, trimmed on the way in so that memory
//! stays small at thousands of nodes, plus an overlay of our own writes so that the next
//! decision sees them at once instead of waiting for the watch to catch up.

use crate::{metrics::Metrics, pool::PoolSelector};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, NodeCondition, NodeSpec, NodeStatus, NodeSystemInfo};
use kube::{
    Api, Client,
    runtime::{WatchStreamExt, reflector, reflector::Store, watcher},
};
use observability::ApiErrorKind;
use std::{
    collections::{BTreeSet, HashMap},
    sync::Arc,
};
use tokio::sync::Notify;

/// The labels decisions read: those of the pool selector, the zone label and the opt-out
/// label (`reboot-disabled`).
#[derive(Debug, Clone, Default)]
pub struct KeptLabels {
    keys: BTreeSet<String>,
    zone: String,
}

impl KeptLabels {
    pub fn new(pool: &PoolSelector, zone_label: &str, opt_out_label: &str) -> Self {
        let mut keys = pool.keys().clone();
        keys.insert(zone_label.to_owned());
        keys.insert(opt_out_label.to_owned());
        Self {
            keys,
            zone: zone_label.to_owned(),
        }
    }

    /// The node's zone: its zone label's value.
    pub fn zone_of(&self, node: &Node) -> Option<String> {
        node.metadata.labels.as_ref()?.get(&self.zone).cloned()
    }
}

/// Keeps only what decisions and Events need: name, uid, resourceVersion, annotations, the
/// labels of `kept`, `spec.unschedulable`, the Ready condition and the boot id.
pub fn trim(node: &mut Node, kept: &KeptLabels) {
    let meta = &mut node.metadata;
    meta.managed_fields = None;
    if let Some(labels) = meta.labels.as_mut() {
        labels.retain(|k, _| kept.keys.contains(k));
    }
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

/// Starts the reflector over every Node (pool membership is decided on the labels it keeps);
/// `changed` is notified when a node's decision facts change, when one is deleted, and when
/// the watch (re)lists. A status report that changes none of them (a heartbeat, an image
/// list) starts no round: with thousands of nodes those are most events.
pub fn spawn_reflector(
    client: Client,
    kept: KeptLabels,
    changed: Arc<Notify>,
    metrics: Metrics,
) -> Store<Node> {
    let (store, writer) = reflector::store();
    // Pages of 50 full Node objects (each can carry ~14 KB of images and managedFields before
    // the trim): with kube's default of 500, the allocator keeps the peak of the initial list,
    // and the controller stays at ~90 MiB with 5,000 nodes instead of ~33 MiB.
    let config = watcher::Config::default().page_size(50);
    let stream = watcher(Api::<Node>::all(client), config)
        .default_backoff()
        .modify(move |node| trim(node, &kept))
        .reflect(writer);
    tokio::spawn(async move {
        futures::pin_mut!(stream);
        let mut facts = FactPrints::default();
        while let Some(event) = stream.next().await {
            match event {
                Ok(event) if !facts.changed(&event) => continue,
                Ok(_) => {}
                Err(error) => {
                    metrics.api_error("node", ApiErrorKind::of_watcher(&error));
                    tracing::warn!(%error, "node watch failed; retrying");
                }
            }
            changed.notify_one();
        }
    });
    store
}

/// Per node, a hash of what decisions read of it, to tell a change of facts from a report
/// that only moves heartbeat times and the resourceVersion.
#[derive(Debug, Default)]
struct FactPrints(HashMap<String, u64>);

impl FactPrints {
    fn changed(&mut self, event: &watcher::Event<Node>) -> bool {
        match event {
            watcher::Event::Apply(node) | watcher::Event::InitApply(node) => {
                let name = node.metadata.name.clone().unwrap_or_default();
                let facts = decision_facts(node);
                self.0.insert(name, facts) != Some(facts)
            }
            watcher::Event::Delete(node) => {
                self.0
                    .remove(node.metadata.name.as_deref().unwrap_or_default());
                true
            }
            watcher::Event::Init | watcher::Event::InitDone => true,
        }
    }
}

/// What a decision reads of a trimmed node: annotations, kept labels, the cordon, Ready's
/// status (not its times), the boot id and a pending deletion.
fn decision_facts(node: &Node) -> u64 {
    use std::hash::{Hash as _, Hasher as _};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    node.metadata.annotations.hash(&mut hasher);
    node.metadata.labels.hash(&mut hasher);
    node.metadata.deletion_timestamp.is_some().hash(&mut hasher);
    node.spec
        .as_ref()
        .and_then(|s| s.unschedulable)
        .hash(&mut hasher);
    let status = node.status.as_ref();
    let ready = status
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
        .map(|c| c.status.as_str());
    ready.hash(&mut hasher);
    let boot_id = status
        .and_then(|s| s.node_info.as_ref())
        .map(|i| i.boot_id.as_str());
    boot_id.hash(&mut hasher);
    hasher.finish()
}

fn resource_version(node: &Node) -> u64 {
    node.metadata
        .resource_version
        .as_deref()
        .and_then(|rv| rv.parse().ok())
        .unwrap_or(0)
}

/// The cache as decisions see it: the reflector's nodes, each replaced by a newer copy that
/// we wrote or read ourselves where there is one, and the nodes a fresh read found deleted.
#[derive(Debug, Default)]
pub struct Overlay {
    pool: PoolSelector,
    kept: KeptLabels,
    ours: HashMap<String, Arc<Node>>,
    deleted: BTreeSet<String>,
}

impl Overlay {
    pub fn new(pool: PoolSelector, zone_label: &str, opt_out_label: &str) -> Self {
        Self {
            kept: KeptLabels::new(&pool, zone_label, opt_out_label),
            pool,
            ..Self::default()
        }
    }

    /// The node's zone (`--zone-label`).
    pub fn zone_of(&self, node: &Node) -> Option<String> {
        self.kept.zone_of(node)
    }

    /// A copy of a node we just wrote or read.
    pub fn record(&mut self, mut node: Node) {
        trim(&mut node, &self.kept);
        let name = node.metadata.name.clone().unwrap_or_default();
        self.deleted.remove(&name);
        self.ours.insert(name, Arc::new(node));
    }

    /// A fresh read (or write) found the node gone.
    pub fn record_deleted(&mut self, name: &str) {
        self.ours.remove(name);
        self.deleted.insert(name.to_owned());
    }

    /// Nodes a fresh read found deleted and the cache does not have again.
    pub fn deleted(&self) -> &BTreeSet<String> {
        &self.deleted
    }

    /// Every node now: cached nodes with our newer copies in their place, and our copies of
    /// nodes the cache does not have yet.
    pub fn view(&mut self, store: &Store<Node>) -> Vec<Arc<Node>> {
        let cached = store.state();
        let mut nodes = Vec::with_capacity(cached.len());
        let mut ours = std::mem::take(&mut self.ours);
        let mut still_ahead = HashMap::new();
        for node in cached {
            let name = node.metadata.name.as_deref().unwrap_or_default();
            self.deleted.remove(name);
            match ours.remove(name) {
                Some(copy) if resource_version(&copy) > resource_version(&node) => {
                    still_ahead.insert(name.to_owned(), copy.clone());
                    nodes.push(copy);
                }
                _ => nodes.push(node),
            }
        }
        nodes.extend(ours.values().cloned());
        still_ahead.extend(ours);
        self.ours = still_ahead;
        nodes
    }

    /// Whether the node belongs to the pool, from the labels its trimmed copy keeps.
    pub fn in_pool(&self, node: &Node) -> bool {
        let empty = Default::default();
        self.pool
            .matches(node.metadata.labels.as_ref().unwrap_or(&empty))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(version: &str, heartbeat: &str, ready: &str, annotations: serde_json::Value) -> Node {
        serde_json::from_value(json!({
            "metadata": {"name": "n1", "resourceVersion": version, "annotations": annotations},
            "spec": {},
            "status": {
                "conditions": [{"type": "Ready", "status": ready, "lastHeartbeatTime": heartbeat,
                                "lastTransitionTime": "2026-11-23T10:00:00Z"}],
                "nodeInfo": {"bootID": "b1", "machineID": "", "systemUUID": "", "kernelVersion": "",
                             "osImage": "", "containerRuntimeVersion": "", "kubeletVersion": "",
                             "kubeProxyVersion": "", "operatingSystem": "linux", "architecture": "amd64"}
            }
        }))
        .unwrap()
    }

    #[test]
    fn only_a_change_of_decision_facts_starts_a_round() {
        let mut prints = FactPrints::default();
        let apply = |n: Node| watcher::Event::Apply(n);
        let none = json!({});
        assert!(prints.changed(&apply(node(
            "1",
            "2026-11-23T10:00:00Z",
            "True",
            none.clone()
        ))));
        assert!(
            !prints.changed(&apply(node(
                "2",
                "2026-11-23T10:05:00Z",
                "True",
                none.clone()
            ))),
            "a status report with a new heartbeat and version only"
        );
        assert!(prints.changed(&apply(node(
            "3",
            "2026-11-23T10:05:00Z",
            "False",
            none.clone()
        ))));
        let requested = json!({"reboot-needed": "true"});
        assert!(prints.changed(&apply(node(
            "4",
            "2026-11-23T10:05:00Z",
            "False",
            requested
        ))));
        assert!(prints.changed(&watcher::Event::Delete(node(
            "5",
            "2026-11-23T10:05:00Z",
            "False",
            none
        ))));
        assert!(prints.changed(&watcher::Event::InitDone));
    }
}
