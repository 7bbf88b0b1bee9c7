//! The model API server: Nodes and the ledger Lease as JSON, changed by the controller's own
//! patches, with resourceVersions from one revision counter so that `test` operations and the
//! ledger's compare-and-swap behave as on a real API server; and the world around it: pods,
//! kubelets, the clock, the windows and the gates. Every controller write is checked here,
//! against the truth, as it lands.

use super::{LEDGER, NODES, POOL, ZONE, checks};
use crate::gates::alert_watch::{AlertGate, AlertReading};
use common::{
    AnnotationKeys, MaxUnavailable,
    ledger::{PAUSED_ANNOTATION, SLOTS_ANNOTATION, Slot, slots_json, slots_of},
};
use controller_core::{
    decide::SetAside,
    rollout::RolloutRules,
    scheduled_budget::{Budgets, ScheduledBudget},
    window::Windows,
};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::{
    api::{coordination::v1::Lease, core::v1::Node},
    jiff::{SignedDuration, Timestamp},
};
use kube::{
    core::Status,
    runtime::{
        reflector,
        reflector::{ObjectRef, Store},
        watcher,
    },
};
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;
use tokio::sync::watch;

/// What a node's kubelet does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kubelet {
    /// Reports each boot, Ready; confirms pod deletions.
    Healthy,
    /// A bad kernel: reports the new boot, NotReady, until fixed.
    BackNotReady,
    /// The machine does not come back from its reboot until fixed: no new boot, NotReady.
    NeverBack,
    /// Hung: NotReady, confirms no pod deletion; the next boot cures it.
    Wedged,
}

/// What one reader got of each node, by index: the revision of the read and the node (`None`:
/// read deleted).
pub type Reads = BTreeMap<usize, (u64, Option<Value>)>;

/// The workload pod of a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Workload {
    None,
    Running,
    /// Evicted, but its deletion is not confirmed (the kubelet is hung).
    Terminating,
}

/// What the model changes in the middle of a round, at its first ledger write: between the
/// decision and its compare-and-swap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Disturbance {
    CloseWindow,
    FireGate,
    Block(usize),
}

/// The fences as they stood when a round began.
#[derive(Debug, Clone, Default)]
pub struct Fences {
    pub wall: Timestamp,
    pub window_open: bool,
    pub unhealthy: bool,
    pub blocked: BTreeSet<String>,
}

#[derive(Debug)]
pub struct Server {
    pub nodes: Vec<Option<Value>>,
    /// Each node's last object, for the watch's deletion event.
    pub last: Vec<Value>,
    pub lease: Option<Value>,
    pub lease_last: Value,
    pub revision: u64,
    pub pods: Vec<Workload>,
    /// The boot each node really runs (the kubelet reports it when it gets to it).
    pub boots: Vec<u32>,
    pub kubelets: Vec<Kubelet>,
    /// Nodes whose machine is down (rebooting, or not coming back).
    pub down: BTreeSet<usize>,
    /// Nodes whose agent never proves a boot (its pod does not start again after a good
    /// reboot): only the kubelet's report of the new boot can complete them.
    pub agents_silent: BTreeSet<usize>,
    pub admin_cordoned: BTreeSet<usize>,
    pub max_unavailable: MaxUnavailable,
    /// `--scheduled-budget`: they lower `max_unavailable` while under way.
    pub scheduled_budgets: Vec<ScheduledBudget>,
    pub zone_budget: Option<MaxUnavailable>,
    /// `--concurrency`.
    pub concurrency: Option<MaxUnavailable>,
    /// `--drain-attempts` and `--max-blocked-nodes`.
    pub set_aside: SetAside,
    /// `--canary`, `--canary-soak`, `--waves` and `--max-failures`.
    pub rollout: RolloutRules,
    /// `--reboot-estimate`.
    pub reboot_estimate_ms: Option<u64>,
    pub drain_enabled: bool,
    pub finish_after_window: bool,
    pub min_ready_ms: u64,
    pub reboot_timeout_ms: u64,
    /// `--drain-delay` and `--reboot-delay`.
    pub drain_delay_ms: u64,
    pub reboot_delay_ms: u64,
    /// By grant: when a node first carried it (the claim, which cordons the node).
    pub claimed_at: BTreeMap<String, Timestamp>,
    /// The nodes a controller gave up by itself (`--give-up-after`), which drops their request.
    pub given_up: BTreeSet<usize>,
    /// The grants whose slot a ledger write released. A ledger recreated from an older copy
    /// may bring one back (a soak another replica had ended): the slot is counted again by
    /// the controllers, but it takes no node down.
    pub released: BTreeSet<String>,
    /// By replica: how many of its steps the delays were checked on (a drain it started, a
    /// `reboot-now` it wrote).
    pub delay_checks: Vec<usize>,
    /// By node and key: the labels an administrator set, at their value.
    pub admin_labels: BTreeMap<(usize, String), String>,
    pub windows: Windows,
    /// The wall clock and the decision clock every replica reads.
    pub wall: Timestamp,
    pub mono_ms: u64,
    pub unhealthy: bool,
    pub blocked: BTreeSet<String>,
    /// By replica: the ledger revision it last got (a read, a write or its watch).
    pub lease_seen: Vec<u64>,
    /// The revision at which the pause last changed.
    pub pause_changed: u64,
    /// Set when a round begins; what it decided on.
    pub round: Option<(usize, Fences)>,
    pub disturbance: Option<Disturbance>,
    /// The budget the last new grant was made under: a pool that shrank since may hold more
    /// than its budget now, not because of the operator.
    pub budget_at_grant: usize,
    pub next_uid: u64,
    /// By replica: its node cache, as the checks of its writes read it.
    pub views: Vec<Store<Node>>,
    /// By replica: each node as it last read or wrote it, at which revision.
    pub reads: Vec<Reads>,
    /// The same, by replica and the ledger of the pool whose round read it: each pool's shell
    /// keeps its own reads, so one pool's read is not what another pool of the replica knows.
    pub shell_reads: BTreeMap<(usize, String), Reads>,
    /// The ledger of the pool whose round runs now, if any.
    pub shell: Option<String>,
    /// Every grant id a node has carried.
    pub ever_carried: BTreeSet<String>,
    /// What the replicas' gates read: the alerts, and by replica the blocking pods' watch.
    pub alerts: watch::Sender<AlertReading>,
    pub pod_watches: Vec<reflector::store::Writer<Pod>>,
    /// With several pools: the `RebootPool`s as the truth has them (empty: the one pool of
    /// the flags, `pool=a`, with the ledger `slots`).
    pub pools: Vec<PoolTruth>,
    /// By ledger name: each pool's ledger Lease.
    pub ledgers: BTreeMap<String, Value>,
    /// By replica: the pools its shells run, as its last plan made them.
    pub running: Vec<Vec<RunningPool>>,
    /// By ledger name: the budget its last new grant was made under.
    pub pool_budget_at_grant: BTreeMap<String, usize>,
}

/// A `RebootPool` of the model: it selects the nodes whose label `key` is `value`.
#[derive(Debug, Clone)]
pub struct PoolTruth {
    pub name: String,
    pub key: &'static str,
    pub value: &'static str,
    pub budget: u32,
    pub deleted: bool,
    /// Its spec edited to a value the API server accepts and the controller cannot use (a
    /// window's time zone mistyped): it grants nothing new and finishes what it holds.
    pub invalid: bool,
    /// `spec.paused` on the API server: no replica takes a node of it further.
    pub paused: bool,
}

impl PoolTruth {
    pub fn ledger(&self) -> String {
        common::pool::ledger_name(&self.name)
    }

    pub fn selects(&self, node: &Value) -> bool {
        node["metadata"]["labels"][self.key] == json!(self.value)
    }
}

/// A pool as one replica runs it.
#[derive(Debug, Clone)]
pub struct RunningPool {
    pub ledger: String,
    pub budget: MaxUnavailable,
    /// `spec.paused`: nothing granted, and its granted nodes held where they stand.
    pub paused: bool,
    /// Deleted: nothing granted, and its granted nodes go on to the end.
    pub deleted: bool,
    /// Its spec invalid: as deleted.
    pub invalid: bool,
}

pub fn keys() -> AnnotationKeys {
    AnnotationKeys::default()
}

pub fn annotation(obj: &Value, key: &str) -> Option<String> {
    obj["metadata"]["annotations"][key]
        .as_str()
        .map(str::to_owned)
}

pub use common::test_util::facts_of_json as facts;

pub fn node_of(obj: &Value) -> Node {
    serde_json::from_value(obj.clone()).expect("a model node is a Node")
}

pub fn index(name: &str) -> usize {
    name[1..].parse().expect("model nodes are n0, n1, ...")
}

/// With several pools, each node's `pool` and `tier` labels at the start: n0 to n2 in pool
/// a, n3 and n4 in b, n5 in c (which selects `tier=gpu`; with two pools, in none).
const POOLS_AT_START: [(&str, &str); NODES] = [
    ("a", "web"),
    ("a", "web"),
    ("a", "web"),
    ("b", "web"),
    ("b", "web"),
    ("c", "gpu"),
];

/// Three zones of two, two and one nodes, and one node without a zone label.
pub fn first_zone(i: usize) -> Option<String> {
    (i + 1 < NODES).then(|| format!("z{}", i % 3))
}

fn error(code: u16, reason: &str) -> kube::Error {
    kube::Error::Api(
        Status::failure(&format!("model: {reason}"), reason)
            .with_code(code)
            .boxed(),
    )
}

impl Server {
    pub fn new(budgets: Budgets, windows: Windows, not_ready: &[bool]) -> Self {
        let mut server = Self {
            nodes: vec![None; NODES],
            last: vec![Value::Null; NODES],
            lease: None,
            lease_last: Value::Null,
            revision: 1,
            pods: vec![Workload::Running; NODES],
            boots: vec![0; NODES],
            kubelets: vec![Kubelet::Healthy; NODES],
            down: BTreeSet::new(),
            agents_silent: BTreeSet::new(),
            admin_cordoned: BTreeSet::new(),
            max_unavailable: budgets.base,
            scheduled_budgets: budgets.scheduled,
            zone_budget: None,
            concurrency: None,
            set_aside: SetAside::default(),
            rollout: RolloutRules::default(),
            reboot_estimate_ms: None,
            drain_enabled: true,
            finish_after_window: true,
            min_ready_ms: 0,
            reboot_timeout_ms: 30_000,
            drain_delay_ms: 0,
            reboot_delay_ms: 0,
            claimed_at: BTreeMap::new(),
            given_up: BTreeSet::new(),
            released: BTreeSet::new(),
            delay_checks: vec![0; 3],
            admin_labels: BTreeMap::new(),
            windows,
            wall: "2026-11-23T01:00:00Z".parse().expect("a time"),
            mono_ms: 0,
            unhealthy: false,
            blocked: BTreeSet::new(),
            lease_seen: vec![0; 3],
            pause_changed: 0,
            round: None,
            disturbance: None,
            budget_at_grant: 0,
            next_uid: 0,
            views: Vec::new(),
            ever_carried: BTreeSet::new(),
            reads: vec![BTreeMap::new(); 3],
            shell_reads: BTreeMap::new(),
            shell: None,
            alerts: watch::channel(alert_reading(false)).0,
            pod_watches: Vec::new(),
            pools: Vec::new(),
            ledgers: BTreeMap::new(),
            running: vec![Vec::new(); 3],
            pool_budget_at_grant: BTreeMap::new(),
        };
        for (i, ready) in not_ready.iter().enumerate() {
            server.create_node(i);
            server.set_ready(i, !ready);
        }
        server
    }

    pub fn bump(&mut self, i: usize) {
        self.revision += 1;
        if let Some(node) = self.nodes[i].as_mut() {
            node["metadata"]["resourceVersion"] = self.revision.to_string().into();
            self.last[i] = node.clone();
        }
    }

    /// Node `i` created (again), Ready, in the pool and its first zone.
    pub fn create_node(&mut self, i: usize) {
        self.next_uid += 1;
        let mut labels = self.labels_at_start(i);
        if let Some(zone) = first_zone(i) {
            labels[ZONE] = zone.into();
        }
        self.nodes[i] = Some(json!({
            "metadata": {"name": format!("n{i}"), "uid": format!("uid-{}", self.next_uid),
                         "resourceVersion": "0", "labels": labels, "annotations": {}},
            "spec": {},
            "status": {"conditions": [{"type": "Ready", "status": "True"}],
                       "nodeInfo": {"bootID": format!("n{i}-boot-{}", self.boots[i])}}
        }));
        self.bump(i);
    }

    fn labels_at_start(&self, i: usize) -> Value {
        match POOLS_AT_START.get(i).filter(|_| !self.pools.is_empty()) {
            Some((pool, tier)) => json!({ POOL: pool, "tier": tier }),
            None => json!({ POOL: "a" }),
        }
    }

    /// The `RebootPool`s of the model: the nodes labelled for them.
    pub fn set_pools(&mut self, pools: Vec<PoolTruth>) {
        self.pools = pools;
        for i in 0..NODES {
            let labels = self.labels_at_start(i);
            if let Some(node) = self.node_mut(i) {
                json_patch::merge(&mut node["metadata"]["labels"], &labels);
                self.bump(i);
            }
        }
    }

    pub fn node(&self, i: usize) -> Option<&Value> {
        self.nodes[i].as_ref()
    }

    pub fn delete_node(&mut self, i: usize) {
        if self.nodes[i].take().is_some() {
            self.revision += 1;
            self.last[i]["metadata"]["resourceVersion"] = self.revision.to_string().into();
            self.admin_cordoned.remove(&i);
            self.admin_labels.retain(|(node, _), _| *node != i);
        }
    }

    /// How long ago (ms) a node first carried `grant`, which claimed and cordoned it; `None` if
    /// none ever did.
    pub fn claimed_for(&self, grant: &str) -> Option<u64> {
        let since = self.claimed_at.get(grant)?;
        let ms = self.wall.duration_since(*since).as_millis();
        Some(u64::try_from(ms.max(0)).unwrap_or(u64::MAX))
    }

    pub fn node_mut(&mut self, i: usize) -> Option<&mut Value> {
        self.nodes[i].as_mut()
    }

    pub fn set_ready(&mut self, i: usize, ready: bool) {
        if let Some(node) = self.node_mut(i) {
            node["status"]["conditions"][0]["status"] =
                (if ready { "True" } else { "False" }).into();
            self.bump(i);
        }
    }

    pub fn ready(&self, i: usize) -> bool {
        self.node(i)
            .is_some_and(|n| facts(n).readiness == common::Readiness::Ready)
    }

    /// The ledger Lease, created empty.
    pub fn create_lease(&mut self, annotations: Value) {
        self.revision += 1;
        let lease = json!({"metadata": {"name": "slots", "namespace": "ns",
            "resourceVersion": self.revision.to_string(), "annotations": annotations}});
        self.lease_last = lease.clone();
        self.lease = Some(lease);
    }

    pub fn change_lease(&mut self, change: impl FnOnce(&mut serde_json::Map<String, Value>)) {
        let Some(lease) = self.lease.as_mut() else {
            return;
        };
        if let Some(annotations) = lease["metadata"]["annotations"].as_object_mut() {
            change(annotations);
        }
        self.revision += 1;
        lease["metadata"]["resourceVersion"] = self.revision.to_string().into();
        self.lease_last = lease.clone();
    }

    /// The slots as the Lease holds them (none when it is gone or damaged).
    pub fn slots(&self) -> BTreeMap<String, Slot> {
        self.lease
            .as_ref()
            .and_then(|l| slots_of(lease_of(l).metadata.annotations.as_ref()).ok())
            .unwrap_or_default()
    }

    pub fn paused(&self) -> bool {
        self.lease.as_ref().is_some_and(|l| {
            common::ledger::Pause::of(lease_of(l).metadata.annotations.as_ref()).pauses()
        })
    }

    /// The budget in force now in a pool of `pool_size`: the lowest of `max_unavailable` and
    /// the scheduled budgets under way.
    pub fn budget_in_force(&self, pool_size: usize) -> usize {
        let budgets = Budgets {
            base: self.max_unavailable,
            scheduled: self.scheduled_budgets.clone(),
        };
        budgets.at(pool_size, self.wall).budget
    }

    pub fn window_open(&self) -> bool {
        self.windows.is_open(self.wall)
    }

    /// Moves the wall clock to the next opening or closing of the windows, if it is not
    /// already where `open` says.
    pub fn set_window(&mut self, open: bool) {
        if self.window_open() != open
            && let Some(next) = self.windows.next_change(self.wall)
        {
            self.wall = next + SignedDuration::from_secs(1);
        }
    }

    /// Time passes: `ms` on both clocks.
    pub fn tick(&mut self, ms: u64) {
        self.mono_ms += ms;
        self.wall += SignedDuration::from_millis(i64::try_from(ms).unwrap_or(i64::MAX));
    }

    /// A node of the pool, as the truth has it.
    pub fn in_pool(&self, i: usize) -> bool {
        if !self.pools.is_empty() {
            return self.pool_of(i).is_some_and(|p| !self.pools[p].deleted);
        }
        self.node(i)
            .is_some_and(|n| n["metadata"]["labels"][POOL] == json!("a"))
    }

    /// With several pools: the one pool that selects node `i` (a node two select is in
    /// neither), deleted or not.
    pub fn pool_of(&self, i: usize) -> Option<usize> {
        self.node(i).and_then(|n| self.pool_of_copy(n))
    }

    pub fn pool_of_copy(&self, node: &Value) -> Option<usize> {
        let selecting: Vec<usize> = (0..self.pools.len())
            .filter(|&p| self.pools[p].selects(node))
            .collect();
        match selecting.as_slice() {
            [p] => Some(*p),
            _ => None,
        }
    }

    /// How many pools select `node`.
    pub fn selecting(&self, node: &Value) -> usize {
        self.pools.iter().filter(|p| p.selects(node)).count()
    }

    /// The slots of a pool's ledger (none when it is missing or damaged).
    pub fn slots_of_ledger(&self, ledger: &str) -> BTreeMap<String, Slot> {
        self.ledgers
            .get(ledger)
            .and_then(|l| slots_of(lease_of(l).metadata.annotations.as_ref()).ok())
            .unwrap_or_default()
    }

    pub fn zone(&self, i: usize) -> Option<String> {
        self.node(i)
            .and_then(|n| n["metadata"]["labels"][ZONE].as_str())
            .map(str::to_owned)
    }

    pub fn pool_size(&self) -> usize {
        (0..NODES).filter(|&i| self.in_pool(i)).count()
    }

    /// Whether replica `k` has seen the ledger since the pause last changed.
    pub fn pause_known_to(&self, k: usize) -> bool {
        self.lease_seen[k] >= self.pause_changed
    }

    /// The round's disturbance, once: between its decision and its first ledger write.
    fn disturb(&mut self) {
        match self.disturbance.take() {
            Some(Disturbance::CloseWindow) => self.set_window(false),
            Some(Disturbance::FireGate) => self.set_unhealthy(true),
            Some(Disturbance::Block(i)) => self.set_blocked(i, true),
            None => {}
        }
    }

    /// An alert fires or resolves; the gates read it at once.
    pub fn set_unhealthy(&mut self, unhealthy: bool) {
        self.unhealthy = unhealthy;
        let _ = self.alerts.send(alert_reading(unhealthy));
    }

    /// A blocking pod starts or ends on node `i`; every replica's watch shows it at once.
    pub fn set_blocked(&mut self, i: usize, running: bool) {
        let name = format!("n{i}");
        if running {
            self.blocked.insert(name);
        } else {
            self.blocked.remove(&name);
        }
        self.show_blocked();
    }

    pub fn show_blocked(&mut self) {
        for watch in &mut self.pod_watches {
            watch.apply_watcher_event(&watcher::Event::Init);
            for name in &self.blocked {
                let pod: Pod = serde_json::from_value(json!({
                    "metadata": {"name": format!("backup-{name}"), "namespace": "default",
                                 "labels": {"app": "backup"}},
                    "spec": {"nodeName": name, "containers": []},
                    "status": {"phase": "Running"},
                }))
                .expect("a pod");
                watch.apply_watcher_event(&watcher::Event::InitApply(pod));
            }
            watch.apply_watcher_event(&watcher::Event::InitDone);
        }
    }

    // ---- the API, as the controller's traits call it ----

    pub fn get_node(&mut self, k: usize, name: &str) -> Option<Node> {
        let i = index(name);
        self.took(k, i);
        self.node(i).map(node_of)
    }

    /// Replica `k` got node `i` as it is now (a read, or a write's answer).
    fn took(&mut self, k: usize, i: usize) {
        let copy = (self.revision, self.node(i).cloned());
        if let Some(ledger) = self.shell.clone() {
            let reads = self.shell_reads.entry((k, ledger)).or_default();
            reads.insert(i, copy.clone());
        }
        self.reads[k].insert(i, copy);
    }

    /// Node `i` as replica `k` knows it: the newer of its cache's copy and what it last read
    /// or wrote itself (`None`: it has none, or read it deleted).
    pub fn seen_copy(&self, k: usize, i: usize) -> Option<Value> {
        self.copy_with_reads(k, i, self.reads[k].get(&i))
    }

    /// Node `i` as the shell of the pool of `ledger` in replica `k` knows it: its replica's
    /// cache, or what that shell last read or wrote itself.
    pub fn seen_copy_by_pool(&self, k: usize, ledger: &str, i: usize) -> Option<Value> {
        let reads = self.shell_reads.get(&(k, ledger.to_owned()));
        self.copy_with_reads(k, i, reads.and_then(|r| r.get(&i)))
    }

    fn copy_with_reads(
        &self,
        k: usize,
        i: usize,
        read: Option<&(u64, Option<Value>)>,
    ) -> Option<Value> {
        let cached = self.views[k]
            .get(&ObjectRef::new(&format!("n{i}")))
            .map(|n| serde_json::to_value(&*n).unwrap_or_default());
        let version = |n: &Value| {
            n["metadata"]["resourceVersion"]
                .as_str()
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0)
        };
        match read {
            Some((at, read)) if cached.as_ref().is_none_or(|c| version(c) <= *at) => read.clone(),
            _ => cached,
        }
    }

    /// A controller's JSON Patch of a node: all of it or nothing, as the API server applies
    /// one; the invariants every write must keep are checked on what it did.
    pub fn patch_node(
        &mut self,
        k: usize,
        name: &str,
        patch: &json_patch::Patch,
    ) -> kube::Result<Node> {
        let i = index(name);
        let Some(before) = self.node(i).cloned() else {
            return Err(error(404, "NotFound"));
        };
        let mut after = before.clone();
        if common::test_util::apply_patch(&mut after, patch).is_err() {
            return Err(error(422, "Invalid"));
        }
        self.nodes[i] = Some(after);
        self.bump(i);
        let after = self.node(i).cloned().unwrap_or_default();
        if let Some(grant) = annotation(&after, "reboot-grant") {
            self.ever_carried.insert(grant.clone());
            self.claimed_at.entry(grant).or_insert(self.wall);
        }
        if annotation(&before, "reboot-abandon").is_none()
            && annotation(&after, "reboot-abandon").is_some()
        {
            self.given_up.insert(i);
        }
        self.took(k, i);
        checks::node_write(self, k, i, &before, &after);
        if checks::promoted(&before, &after) {
            self.delay_checks[k] += 1;
        }
        Ok(node_of(&after))
    }

    /// A pool's ledger (any name but the flags' pool's `slots`), as the ledger store reads it.
    pub fn get_pool_lease(&self, name: &str) -> Option<Lease> {
        self.ledgers.get(name).map(lease_of)
    }

    pub fn create_pool_lease(&mut self, lease: &Lease) -> kube::Result<Lease> {
        let name = lease.metadata.name.clone().unwrap_or_default();
        if self.ledgers.contains_key(&name) {
            return Err(error(409, "AlreadyExists"));
        }
        self.revision += 1;
        let annotations = json!(lease.metadata.annotations.clone().unwrap_or_default());
        let created = json!({"metadata": {"name": name, "namespace": "ns",
            "resourceVersion": self.revision.to_string(), "annotations": annotations}});
        self.ledgers.insert(name, created.clone());
        Ok(lease_of(&created))
    }

    /// A pool ledger's compare-and-swap by replica `k`, checked as it lands.
    pub fn merge_pool_lease(&mut self, k: usize, name: &str, patch: &Value) -> kube::Result<Lease> {
        self.disturb();
        let Some(current) = self.ledgers.get(name).cloned() else {
            return Err(error(404, "NotFound"));
        };
        let expected = patch["metadata"]["resourceVersion"].as_str();
        if expected.is_some() && expected != current["metadata"]["resourceVersion"].as_str() {
            return Err(error(409, "Conflict"));
        }
        let before = self.slots_of_ledger(name);
        let mut next = current;
        json_patch::merge(&mut next, patch);
        self.revision += 1;
        next["metadata"]["resourceVersion"] = self.revision.to_string().into();
        self.ledgers.insert(name.to_owned(), next.clone());
        let after = self.slots_of_ledger(name);
        let released = before
            .values()
            .filter(|slot| !after.values().any(|kept| kept.grant == slot.grant));
        self.released
            .extend(released.map(|slot| slot.grant.clone()));
        checks::pool_ledger_write(self, k, name, &before);
        Ok(lease_of(&next))
    }

    pub fn get_lease(&mut self, k: usize) -> Option<Lease> {
        let lease = self.lease.clone()?;
        self.saw_lease(k);
        Some(lease_of(&lease))
    }

    pub fn create_lease_by(&mut self, k: usize, lease: &Lease) -> kube::Result<Lease> {
        if self.lease.is_some() {
            return Err(error(409, "AlreadyExists"));
        }
        let annotations = json!(lease.metadata.annotations.clone().unwrap_or_default());
        self.create_lease(annotations);
        self.saw_lease(k);
        Ok(lease_of(self.lease.as_ref().expect("just created")))
    }

    /// The ledger's compare-and-swap: a merge patch that carries the resourceVersion read.
    pub fn merge_lease(&mut self, k: usize, patch: &Value) -> kube::Result<Lease> {
        self.disturb();
        let Some(current) = self.lease.clone() else {
            return Err(error(404, "NotFound"));
        };
        let expected = patch["metadata"]["resourceVersion"].as_str();
        if expected.is_some() && expected != current["metadata"]["resourceVersion"].as_str() {
            return Err(error(409, "Conflict"));
        }
        let before = self.slots();
        let rollout_before = self.rollout_record();
        let mut next = current;
        json_patch::merge(&mut next, patch);
        self.revision += 1;
        next["metadata"]["resourceVersion"] = self.revision.to_string().into();
        self.lease_last = next.clone();
        self.lease = Some(next.clone());
        self.saw_lease(k);
        let after = self.slots();
        let released = before
            .values()
            .filter(|slot| !after.values().any(|kept| kept.grant == slot.grant));
        self.released
            .extend(released.map(|slot| slot.grant.clone()));
        checks::ledger_write(self, k, &before);
        checks::rollout_rules_kept(self, &before, rollout_before.as_ref());
        Ok(lease_of(&next))
    }

    /// The rollout's record on the ledger Lease, as the truth has it (`None`: none, or one
    /// that does not read).
    pub fn rollout_record(&self) -> Option<common::rollout::RolloutRecord> {
        let annotations = self.lease.as_ref()?["metadata"]["annotations"].clone();
        let annotations: std::collections::BTreeMap<String, String> =
            serde_json::from_value(annotations).ok()?;
        common::rollout::rollout_of(Some(&annotations)).ok()?
    }

    fn saw_lease(&mut self, k: usize) {
        if let Some(lease) = &self.lease {
            let version = lease["metadata"]["resourceVersion"]
                .as_str()
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            self.lease_seen[k] = self.lease_seen[k].max(version);
        }
    }

    /// An administrator's value for `reboot-paused` (`None`: removed).
    pub fn type_pause(&mut self, value: Option<&str>) {
        let was = self.paused();
        self.change_lease(|annotations| match value {
            Some(value) => {
                annotations.insert(PAUSED_ANNOTATION.to_owned(), value.into());
            }
            None => {
                annotations.remove(PAUSED_ANNOTATION);
            }
        });
        if was != self.paused() {
            self.pause_changed = self.revision;
        }
    }

    /// The rollout's record as `kubectl reboot resume` writes it.
    pub fn write_rollout(&mut self, record: &common::rollout::RolloutRecord) {
        self.change_lease(|annotations| {
            annotations.insert(
                common::rollout::ROLLOUT_ANNOTATION.to_owned(),
                common::rollout::rollout_json(record).into(),
            );
        });
    }

    /// `kubectl reboot resume`: the rollout's failures forgiven, when there is one to forgive.
    pub fn resume_rollout(&mut self) {
        if let Some(record) = self.rollout_record()
            && record.counted_failures().next().is_some()
        {
            self.write_rollout(&record.resumed());
        }
    }

    /// An administrator lifts the cordon the operator kept on the nodes it set aside
    /// (`--keep-set-aside-cordoned`), as `kubectl uncordon` does: each keeps its request, set
    /// aside, and no longer holds the budget.
    pub fn uncordon_set_aside(&mut self) {
        for i in 0..self.nodes.len() {
            let kept = self.node(i).is_some_and(|n| {
                let f = facts(n);
                let state = f.protocol(&keys());
                f.unschedulable
                    && state.cordoned_by_operator
                    && state.grant.is_none()
                    && common::drain_failures::DrainFailures::sets_aside(
                        state.drain_failures.as_deref(),
                        self.set_aside.attempts,
                    )
            });
            if let Some(node) = self.node_mut(i).filter(|_| kept) {
                node["spec"]["unschedulable"] = false.into();
                self.bump(i);
            }
        }
    }

    /// The slots annotation overwritten by hand with what no controller can read.
    pub fn damage_lease(&mut self) {
        self.change_lease(|annotations| {
            annotations.insert(SLOTS_ANNOTATION.to_owned(), "{not json".into());
        });
    }

    pub fn delete_lease(&mut self) {
        // The watch's deletion event carries the object at the deletion's revision.
        if let Some(mut lease) = self.lease.take() {
            self.revision += 1;
            lease["metadata"]["resourceVersion"] = self.revision.to_string().into();
            self.lease_last = lease;
        }
    }

    /// Slots for the soaks the model starts with.
    pub fn start_soaks(&mut self, soaking: &[usize], budget: usize) {
        let mut slots = BTreeMap::new();
        for &i in soaking.iter().take(budget) {
            let grant = common::ledger::grant_id(LEDGER, &format!("g-soak-{i}"));
            // The node carried it through the reboot it has completed: a slot of it that a
            // recreated ledger brings back is that grant, not a new one.
            self.ever_carried.insert(grant.clone());
            if let Some(node) = self.node_mut(i) {
                node["metadata"]["annotations"]["reboot-last-grant"] = grant.clone().into();
            }
            self.bump(i);
            let slot = Slot {
                grant,
                granted_at: self.wall.to_string(),
                node_version: None,
                zone: first_zone(i),
            };
            slots.insert(format!("n{i}"), slot);
        }
        self.create_lease(json!({ SLOTS_ANNOTATION: slots_json(&slots) }));
    }
}

pub fn alert_reading(firing: bool) -> AlertReading {
    AlertReading {
        gate: if firing {
            AlertGate::Firing(vec!["ModelAlert".into()])
        } else {
            AlertGate::Clear
        },
        at: Some(Instant::now()),
    }
}

pub fn lease_of(obj: &Value) -> Lease {
    serde_json::from_value(obj.clone()).expect("a model Lease is a Lease")
}
