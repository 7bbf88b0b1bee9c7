//! The node cache: a reflector over the pool's Nodes, trimmed on the way in so that memory
//! stays small at thousands of nodes, plus an overlay of our own writes so that the next
//! decision sees them at once instead of waiting for the watch to catch up.

use crate::{
    cache::pool::PoolSelector,
    metrics::{Metrics, PoolSummary},
};
use common::{AnnotationKeys, NodeFacts};
use controller_core::{
    ledger::Ledger,
    pool_index::{Entry, Placement, PoolCounts, PoolIndex},
};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{
    Node, NodeCondition, NodeSpec, NodeStatus, NodeSystemInfo, Taint,
};
use kube::{
    Api, Client,
    runtime::{
        WatchStreamExt, reflector,
        reflector::{ObjectRef, Store},
        watcher,
    },
};
use observability::{
    ApiErrorKind,
    streaming_watch::{Watched, streaming_watch},
};
use std::{
    collections::{BTreeSet, HashMap},
    sync::{Arc, Mutex, MutexGuard},
};
use tokio::sync::Notify;

/// What the node cache keeps of each node's labels and annotations: the labels decisions read
/// (those of the pool selector, the zone label and the opt-out label `reboot-disabled`) and
/// the protocol's annotations.
#[derive(Debug, Clone, Default)]
pub struct KeptLabels {
    keys: BTreeSet<String>,
    zone: String,
    annotations: BTreeSet<String>,
}

impl KeptLabels {
    pub fn new(pool: &PoolSelector, zone_label: &str, keys: &AnnotationKeys) -> Self {
        let mut labels = pool.keys().clone();
        labels.insert(zone_label.to_owned());
        labels.insert(keys.disabled.clone());
        Self {
            keys: labels,
            zone: zone_label.to_owned(),
            // The autoscalers' annotations too: a claim must see one the administrator set,
            // which it leaves as it is.
            annotations: (keys.all().into_iter())
                .chain(common::marks::SCALE_DOWN_PROTECTION.map(|(key, _)| key))
                .map(str::to_owned)
                .collect(),
        }
    }

    /// What several pools keep: every label any of them reads. (The zone label of each is
    /// among them; `zone_of` is asked of each pool's own.)
    pub fn union<'a>(all: impl IntoIterator<Item = &'a KeptLabels>) -> Self {
        let mut union = Self::default();
        for kept in all {
            union.keys.extend(kept.keys.iter().cloned());
            union.annotations.extend(kept.annotations.iter().cloned());
            if union.zone.is_empty() {
                union.zone.clone_from(&kept.zone);
            }
        }
        union
    }

    /// The node's zone: its zone label's value; an empty value names no zone.
    pub fn zone_of(&self, node: &Node) -> Option<String> {
        let zone = node.metadata.labels.as_ref()?.get(&self.zone)?;
        (!zone.trim().is_empty()).then(|| zone.clone())
    }
}

/// Keeps only what decisions and Events need: name, uid, resourceVersion, the protocol's
/// annotations (an empty map stays, so that a patch knows the map exists), the labels of
/// `kept`, `spec.unschedulable`, the Ready condition's status and the boot id. Each node costs
/// the controller a few hundred bytes, so that 65,000 fit in its memory target.
pub fn trim(node: &mut Node, kept: &KeptLabels) {
    let meta = &mut node.metadata;
    meta.managed_fields = None;
    if let Some(labels) = meta.labels.as_mut() {
        labels.retain(|k, _| kept.keys.contains(k));
    }
    if let Some(annotations) = meta.annotations.as_mut() {
        annotations.retain(|k, _| kept.annotations.contains(k));
    }
    meta.owner_references = None;
    meta.finalizers = None;
    // The taints' keys and effects, in order: the waiting taint is removed by its index.
    let taints = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .map(|ts| {
            ts.iter()
                .map(|t| Taint {
                    key: t.key.clone(),
                    effect: t.effect.clone(),
                    ..Taint::default()
                })
                .collect()
        });
    node.spec = Some(NodeSpec {
        unschedulable: node.spec.as_ref().and_then(|s| s.unschedulable),
        taints,
        ..NodeSpec::default()
    });
    let status = node.status.take().unwrap_or_default();
    let ready: Option<Vec<NodeCondition>> = status.conditions.map(|cs| {
        cs.into_iter()
            .filter(|c| c.type_ == "Ready")
            .map(|c| NodeCondition {
                status: c.status,
                type_: c.type_,
                ..NodeCondition::default()
            })
            .collect()
    });
    node.status = Some(NodeStatus {
        conditions: ready,
        node_info: status.node_info.map(|info| NodeSystemInfo {
            boot_id: info.boot_id,
            ..NodeSystemInfo::default()
        }),
        ..NodeStatus::default()
    });
}

fn labels_of(node: &Node) -> &std::collections::BTreeMap<String, String> {
    static EMPTY: std::collections::BTreeMap<String, String> = std::collections::BTreeMap::new();
    node.metadata.labels.as_ref().unwrap_or(&EMPTY)
}

/// The index shared by the node watch (which writes it) and the rounds (which read it).
pub type SharedIndex = Arc<Mutex<PoolIndex>>;

/// How a trimmed node is placed and indexed: the pool selector, the kept labels (the zone's
/// among them) and the annotation keys.
#[derive(Debug, Clone, Default)]
pub struct Indexing {
    pool: PoolSelector,
    kept: KeptLabels,
    keys: AnnotationKeys,
}

impl Indexing {
    /// Also keeps `labels` in the trimmed copies: those the controller sets around a reboot,
    /// whose values it compares before removing them.
    pub fn keeping_labels<'a>(mut self, labels: impl IntoIterator<Item = &'a String>) -> Self {
        self.kept.keys.extend(labels.into_iter().cloned());
        self
    }

    pub fn new(pool: PoolSelector, zone_label: &str, keys: AnnotationKeys) -> Self {
        Self {
            kept: KeptLabels::new(&pool, zone_label, &keys),
            pool,
            keys,
        }
    }

    /// Whether the node belongs to the pool, from the labels its trimmed copy keeps.
    pub fn in_pool(&self, node: &Node) -> bool {
        self.pool.matches(labels_of(node))
    }

    /// Whether another pool selects the node too: then it counts here, and neither grants it.
    pub fn shared(&self, node: &Node) -> bool {
        let labels = labels_of(node);
        self.pool.counts(labels) && self.pool.shared_with_a_peer(labels)
    }

    /// The node's zone (`--zone-label`).
    pub fn zone_of(&self, node: &Node) -> Option<String> {
        self.kept.zone_of(node)
    }

    /// `--zone-label`, for what the controller says about a node without it.
    pub fn zone_label(&self) -> &str {
        &self.kept.zone
    }

    fn entry(&self, node: &Node, print: u64) -> Entry {
        let facts = NodeFacts::from_node(node);
        let state = facts.protocol(&self.keys);
        let placement = Placement {
            in_pool: self.in_pool(node),
            shared: self.shared(node),
            zone: self.zone_of(node),
        };
        Entry::new(print, &facts, &state, placement)
    }

    /// Records `node` in `index`; true when its decision facts changed (or it is new).
    fn record(&self, index: &mut PoolIndex, node: &Node) -> bool {
        let name = node.metadata.name.as_deref().unwrap_or_default();
        let print = decision_facts(node);
        index.upsert(name, print, || self.entry(node, print))
    }
}

/// The node cache of every pool: one reflector over every Node, and one index per pool.
/// Dropping it stops its watch.
#[allow(missing_debug_implementations)] // the reflector's store has no Debug
pub struct NodeCache {
    pub store: Store<Node>,
    /// In the order of the indexings given to [`spawn_reflector`].
    pub indexes: Vec<SharedIndex>,
    watch: AbortOnDrop,
}

impl NodeCache {
    /// Whether the watch still runs (it ends only when dropped, or on a panic).
    pub fn is_running(&self) -> bool {
        !self.watch.0.is_finished()
    }
}

/// Aborts its task when dropped.
#[derive(Debug)]
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Starts the reflector over every Node (pool membership is decided on the labels it keeps)
/// and keeps one index per pool (`indexings`) up to date with it. `changed` is notified when a
/// node's decision facts change for some pool, when one is deleted, and when the watch
/// (re)lists. A status report that changes none of them (a heartbeat, an image list) starts no
/// round: with thousands of nodes those are most events.
pub fn spawn_reflector(
    client: Client,
    indexings: Vec<Indexing>,
    changed: Arc<Notify>,
    metrics: Metrics,
) -> NodeCache {
    let (store, writer) = reflector::store();
    // A streaming list where the API server has one: the nodes come one at a time from its
    // watch cache, and the watch goes on from them. A paged list of 65,000 nodes took minutes,
    // after which the watch from its resourceVersion was too old for the watch cache, so the
    // watcher listed again, for ever. Without streaming lists: pages of 50 full Node objects
    // (each can carry ~14 KB of images and managedFields before the trim); with kube's default
    // of 500, the allocator keeps the peak of the initial list, and the controller stays at
    // ~90 MiB with 5,000 nodes instead of ~33 MiB.
    let config = watcher::Config::default().page_size(50);
    let watched = Watched {
        what: "every node",
        costs: "a list of every node at each start of the node cache, in pages of 50",
    };
    let (mut indexers, indexes, kept) = Indexers::new(indexings);
    let stream = streaming_watch(Api::<Node>::all(client), config, watched)
        .modify(move |node| trim(node, &kept))
        .reflect(writer);
    let task = tokio::spawn(async move {
        futures::pin_mut!(stream);
        while let Some(event) = stream.next().await {
            match event {
                Ok(event) if !indexers.apply(&event) => continue,
                Ok(_) => {}
                Err(error) => {
                    metrics.api_error("node", ApiErrorKind::of_watcher(&error));
                    tracing::warn!(%error, "node watch failed; retrying");
                }
            }
            changed.notify_one();
        }
    });
    NodeCache {
        store,
        indexes,
        watch: AbortOnDrop(task),
    }
}

/// A node cache fed by hand, one watch event at a time, kept exactly as [`spawn_reflector`]
/// keeps its store and index (the model test of the controller feeds it its replicas'
/// views).
#[allow(missing_debug_implementations)] // the reflector's writer has no Debug
pub struct NodeFeed {
    writer: reflector::store::Writer<Node>,
    kept: KeptLabels,
    indexers: Indexers,
}

impl NodeFeed {
    pub fn new(indexing: Indexing) -> (Store<Node>, SharedIndex, Self) {
        let (store, mut indexes, feed) = Self::of_pools(vec![indexing]);
        (store, indexes.remove(0), feed)
    }

    /// One store for several pools, with one index each (in the order of `indexings`), as
    /// [`spawn_reflector`] keeps them.
    pub fn of_pools(indexings: Vec<Indexing>) -> (Store<Node>, Vec<SharedIndex>, Self) {
        let writer = reflector::store::Writer::default();
        let store = writer.as_reader();
        let (indexers, indexes, kept) = Indexers::new(indexings);
        let feed = Self {
            writer,
            kept,
            indexers,
        };
        (store, indexes, feed)
    }

    /// The index of every node in `store`, counted afresh.
    #[cfg(test)]
    pub fn recount(indexing: &Indexing, store: &Store<Node>) -> PoolIndex {
        let mut index = PoolIndex::default();
        for node in store.state() {
            indexing.record(&mut index, &node);
        }
        index
    }

    /// Takes in one watch event, trimmed as the reflector trims it.
    pub fn apply(&mut self, mut event: watcher::Event<Node>) {
        match &mut event {
            watcher::Event::Apply(node)
            | watcher::Event::InitApply(node)
            | watcher::Event::Delete(node) => trim(node, &self.kept),
            watcher::Event::Init | watcher::Event::InitDone => {}
        }
        self.writer.apply_watcher_event(&event);
        self.indexers.apply(&event);
    }
}

/// One [`Indexer`] per pool over one stream of events.
#[derive(Debug)]
struct Indexers(Vec<Indexer>);

impl Indexers {
    /// The indexers of `indexings`, their indexes (in that order), and the labels the trim
    /// keeps for all of them.
    fn new(indexings: Vec<Indexing>) -> (Self, Vec<SharedIndex>, KeptLabels) {
        let kept = KeptLabels::union(indexings.iter().map(|i| &i.kept));
        let indexers: Vec<Indexer> = indexings
            .into_iter()
            .map(|indexing| Indexer {
                indexing,
                index: SharedIndex::default(),
                relisted: None,
            })
            .collect();
        let indexes = indexers.iter().map(|i| i.index.clone()).collect();
        (Self(indexers), indexes, kept)
    }

    /// True when the event may change a decision of some pool.
    fn apply(&mut self, event: &watcher::Event<Node>) -> bool {
        let mut changes = false;
        for indexer in &mut self.0 {
            changes |= indexer.apply(event);
        }
        changes
    }
}

/// What a round views of the pool: the nodes in the protocol and the slot holders (`slots`),
/// each as `overlay` has it; and the rest of the pool, counted by the index.
pub fn gather<'s>(
    store: &Store<Node>,
    index: &SharedIndex,
    overlay: &mut Overlay,
    slots: impl IntoIterator<Item = &'s String>,
) -> (Vec<Arc<Node>>, PoolCounts) {
    let mut names = lock(index).in_protocol().clone();
    names.extend(slots.into_iter().cloned());
    let nodes = overlay.nodes_named(store, &names);
    let viewed = nodes
        .iter()
        .map(|n| n.metadata.name.as_deref().unwrap_or_default());
    let others = lock(index).counts_without(viewed);
    (nodes, others)
}

/// The pool as its gauges show it: the nodes a round views and the rest counted by the index.
pub fn pool_summary(
    store: &Store<Node>,
    index: &SharedIndex,
    overlay: &mut Overlay,
    ledger: &Ledger,
    keys: &AnnotationKeys,
) -> PoolSummary {
    let (nodes, others) = gather(store, index, overlay, ledger.slots.keys());
    let pool: Vec<Arc<Node>> = (nodes.into_iter())
        .filter(|n| overlay.in_pool(n) || overlay.shared(n))
        .collect();
    PoolSummary::of(&pool, &others, ledger, keys)
}

/// Applies the watch's events to the index as the reflector applies them to its store: a
/// relist builds a new index that replaces the old one when the list is complete.
#[derive(Debug)]
struct Indexer {
    indexing: Indexing,
    index: SharedIndex,
    relisted: Option<PoolIndex>,
}

impl Indexer {
    /// True when the event may change a decision.
    fn apply(&mut self, event: &watcher::Event<Node>) -> bool {
        match event {
            watcher::Event::Apply(node) => self.indexing.record(&mut lock(&self.index), node),
            watcher::Event::Delete(node) => {
                lock(&self.index).remove(node.metadata.name.as_deref().unwrap_or_default());
                true
            }
            watcher::Event::Init => {
                self.relisted = Some(PoolIndex::default());
                true
            }
            watcher::Event::InitApply(node) => {
                let relisted = self.relisted.get_or_insert_with(PoolIndex::default);
                self.indexing.record(relisted, node)
            }
            watcher::Event::InitDone => {
                *lock(&self.index) = self.relisted.take().unwrap_or_default();
                true
            }
        }
    }
}

/// The index's lock; a panic while it was held (none is expected) leaves sums that the next
/// relist rebuilds, so it is used as it is.
pub fn lock(index: &SharedIndex) -> MutexGuard<'_, PoolIndex> {
    index
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
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
#[derive(Debug, Clone, Default)]
pub struct Overlay {
    indexing: Indexing,
    ours: HashMap<String, Arc<Node>>,
    deleted: BTreeSet<String>,
    /// Nodes read from the API server since the last round, with the version read: a round
    /// may act on what only a fresh read can tell (a grant to re-key, a node the cache lost).
    fresh: HashMap<String, Option<String>>,
}

impl Overlay {
    pub fn new(indexing: Indexing) -> Self {
        Self {
            indexing,
            ..Self::default()
        }
    }

    /// How nodes are placed in the pool.
    pub fn indexing(&self) -> &Indexing {
        &self.indexing
    }

    /// A copy of a node we just wrote or read.
    pub fn record(&mut self, mut node: Node) {
        trim(&mut node, &self.indexing.kept);
        let name = node.metadata.name.clone().unwrap_or_default();
        self.deleted.remove(&name);
        self.ours.insert(name, Arc::new(node));
    }

    /// A copy of a node we just read from the API server: fresh for the next round.
    pub fn record_read(&mut self, node: Node) {
        let name = node.metadata.name.clone().unwrap_or_default();
        self.fresh
            .insert(name, node.metadata.resource_version.clone());
        self.record(node);
    }

    /// Whether the node at `version` is what a read since the last round returned.
    pub fn is_fresh(&self, name: &str, version: Option<&str>) -> bool {
        self.fresh
            .get(name)
            .is_some_and(|read| read.as_deref() == version)
    }

    /// Our copies of nodes the cache does not have that no read since the last round
    /// confirmed: each may have been deleted since (the cache saw it go), or made again after
    /// the cache's last word on it (the cache lags, and the node may be cordoned or NotReady).
    /// A round reads them again before it counts them.
    pub fn unconfirmed_copies(&self, store: &Store<Node>) -> Vec<String> {
        self.ours
            .iter()
            .filter(|(name, copy)| {
                store.get(&ObjectRef::new(name)).is_none()
                    && !self.is_fresh(name, copy.metadata.resource_version.as_deref())
            })
            .map(|(name, _)| name.clone())
            .collect()
    }

    /// A round has taken in the fresh reads: later rounds read again what they need fresh.
    pub fn end_round(&mut self) {
        self.fresh.clear();
    }

    /// The version of our own copy of a node, if we have one.
    pub fn version_of(&self, name: &str) -> Option<String> {
        self.ours
            .get(name)
            .and_then(|n| n.metadata.resource_version.clone())
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

    /// The nodes `names` as they are now (cached, or our newer copy), and our copies of any
    /// other node (which we wrote or read lately: a round must see them). A copy of ours is
    /// dropped once the cache has caught up with it.
    pub fn nodes_named(&mut self, store: &Store<Node>, names: &BTreeSet<String>) -> Vec<Arc<Node>> {
        let mut wanted: BTreeSet<String> = names.clone();
        wanted.extend(self.ours.keys().cloned());
        wanted.extend(self.deleted.iter().cloned());
        let mut nodes = Vec::with_capacity(wanted.len());
        for name in wanted {
            let cached = store.get(&ObjectRef::new(&name));
            if cached.is_some() {
                self.deleted.remove(&name);
            }
            let ours = self.ours.get(&name).cloned();
            match (ours, cached) {
                (Some(copy), Some(node)) if resource_version(&copy) <= resource_version(&node) => {
                    self.ours.remove(&name);
                    nodes.push(node);
                }
                (Some(copy), Some(_)) => nodes.push(copy),
                // The cache does not have it: deleted since, or made again after the cache's
                // last word on it. The round read it again first (`unconfirmed_copies`), so our
                // copy is the node as it is now (a read that found it gone dropped the copy),
                // or, where that read failed, as it last was: counted as it was rather than
                // hidden from the budget.
                (Some(copy), None) => nodes.push(copy),
                (None, Some(node)) => nodes.push(node),
                (None, None) => {}
            }
        }
        nodes
    }

    /// Whether the node belongs to the pool, from the labels its trimmed copy keeps.
    pub fn in_pool(&self, node: &Node) -> bool {
        self.indexing.in_pool(node)
    }

    /// Whether another pool selects the node too (counted here, granted by neither).
    pub fn shared(&self, node: &Node) -> bool {
        self.indexing.shared(node)
    }

    /// The node's zone (`--zone-label`).
    pub fn zone_of(&self, node: &Node) -> Option<String> {
        self.indexing.zone_of(node)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use common::test_util::NodeBuilder;

    /// `n1`, with an annotation map even when given none.
    fn node(version: &str, heartbeat: &str, ready: bool, annotations: &[(&str, &str)]) -> Node {
        NodeBuilder::new("n1")
            .resource_version(version)
            .heartbeat(heartbeat)
            .ready(ready)
            .annotation_map()
            .annotations(annotations)
            .boot_id("b1")
            .object()
    }

    #[test]
    fn only_a_change_of_decision_facts_starts_a_round() {
        let mut prints = Indexer {
            indexing: Indexing::default(),
            index: SharedIndex::default(),
            relisted: None,
        };
        let apply = |n: Node| watcher::Event::Apply(n);
        let none: &[(&str, &str)] = &[];
        assert!(prints.apply(&apply(node("1", "2026-11-23T10:00:00Z", true, none))));
        assert!(
            !prints.apply(&apply(node("2", "2026-11-23T10:05:00Z", true, none))),
            "a status report with a new heartbeat and version only"
        );
        assert!(prints.apply(&apply(node("3", "2026-11-23T10:05:00Z", false, none))));
        let requested = &[("reboot-needed", "true")];
        assert!(prints.apply(&apply(node("4", "2026-11-23T10:05:00Z", false, requested))));
        assert!(prints.apply(&watcher::Event::Delete(node(
            "5",
            "2026-11-23T10:05:00Z",
            false,
            none
        ))));
        assert!(prints.apply(&watcher::Event::InitDone));
    }

    /// A relist replaces the index when it is complete, as the reflector replaces its store:
    /// until then rounds count the pool as it was; a node deleted meanwhile is gone after.
    #[test]
    fn a_relist_replaces_the_index_when_complete() {
        let index = SharedIndex::default();
        let mut indexer = Indexer {
            indexing: Indexing::default(),
            index: index.clone(),
            relisted: None,
        };
        let requested: &[(&str, &str)] = &[("reboot-needed", "true")];
        let named = |name: &str, annotations: &[(&str, &str)]| {
            let mut n = node("1", "2026-11-23T10:00:00Z", true, annotations);
            n.metadata.name = Some(name.into());
            n
        };
        indexer.apply(&watcher::Event::Apply(named("gone", requested)));
        indexer.apply(&watcher::Event::Init);
        indexer.apply(&watcher::Event::InitApply(named("kept", requested)));
        let before: Vec<String> = lock(&index).in_protocol().iter().cloned().collect();
        assert_eq!(before, ["gone"]);
        assert!(indexer.apply(&watcher::Event::InitDone));
        let after: Vec<String> = lock(&index).in_protocol().iter().cloned().collect();
        assert_eq!(after, ["kept"]);
        assert_eq!(lock(&index).totals().nodes(), 1);
    }

    /// A node deleted after we wrote or read it is gone from the cache but not from our own
    /// copies: that copy must not hide the deletion (the slot holder would never be read again
    /// and its slot would be held for the whole term), nor be dropped unread (the node may have
    /// been made again, cordoned, while the cache lags). It is named for a read, and a read that
    /// finds the node gone drops it.
    #[test]
    fn our_copy_of_a_node_the_cache_no_longer_has_is_read_again_before_it_counts() {
        let (store, mut writer) = reflector::store::<Node>();
        let names = BTreeSet::from(["n1".to_owned()]);
        let mut overlay = Overlay::default();
        let cached = node("4", "2026-11-23T10:00:00Z", true, &[]);
        writer.apply_watcher_event(&watcher::Event::Apply(cached.clone()));
        overlay.record(node(
            "5",
            "2026-11-23T10:00:00Z",
            true,
            &[("reboot-grant", "g")],
        ));
        assert_eq!(
            overlay.nodes_named(&store, &names).len(),
            1,
            "our newer copy"
        );
        assert!(
            overlay.unconfirmed_copies(&store).is_empty(),
            "the cache has the node: no read needed"
        );
        // The node is deleted: the watch removes it from the cache.
        writer.apply_watcher_event(&watcher::Event::Delete(cached));
        assert_eq!(overlay.unconfirmed_copies(&store), ["n1"], "read it again");
        // A read that finds it still there (made again) makes the copy fresh: no second read.
        overlay.record_read(node("6", "2026-11-23T10:00:00Z", true, &[]));
        assert!(overlay.unconfirmed_copies(&store).is_empty());
        assert_eq!(overlay.nodes_named(&store, &names).len(), 1, "counted");
        overlay.end_round();
        assert_eq!(
            overlay.unconfirmed_copies(&store),
            ["n1"],
            "read again each round while the cache lacks it"
        );
        // A read that finds it gone.
        overlay.record_deleted("n1");
        let seen = overlay.nodes_named(&store, &names);
        assert!(
            seen.is_empty(),
            "our copy hides the deletion of n1 (version {:?})",
            seen.first()
                .and_then(|n| n.metadata.resource_version.clone())
        );
        assert!(overlay.unconfirmed_copies(&store).is_empty());
    }

    #[test]
    fn the_trim_keeps_the_protocol_and_the_existence_of_annotations() {
        let keys = AnnotationKeys::default();
        let kept = KeptLabels::new(&PoolSelector::parse("pool=a").unwrap(), "zone", &keys);
        let foreign = &[("node.alpha.kubernetes.io/ttl", "0")];
        let mut bare = node("1", "2026-11-23T10:00:00Z", true, foreign);
        trim(&mut bare, &kept);
        assert_eq!(bare.metadata.annotations, Some(Default::default()));
        assert!(NodeFacts::from_node(&bare).has_annotations);
        let both = &[
            ("node.alpha.kubernetes.io/ttl", "0"),
            ("reboot-needed", "true"),
        ];
        let mut requested = node("2", "2026-11-23T10:00:00Z", false, both);
        trim(&mut requested, &kept);
        let annotations = requested.metadata.annotations.clone().unwrap();
        assert_eq!(annotations.keys().collect::<Vec<_>>(), ["reboot-needed"]);
        let facts = NodeFacts::from_node(&requested);
        assert_eq!(facts.readiness, common::Readiness::NotReady);
        assert_eq!(facts.boot_id.as_deref(), Some("b1"));
    }
}
