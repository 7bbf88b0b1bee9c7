//! The independent observer: a witness of a whole scenario (chaos, network faults, clocks, the
//! soak, real nodes). It watches every Node and the Pods of one namespace (resuming after
//! errors, like every observer here) and checks, at every event, the invariants a user can see:
//!
//! - no more unavailable nodes than the budget ([`unavailable`] decides what counts) by the
//!   operator's doing: when others take the count over it (an administrator cordons a node,
//!   a node fails on its own), that is counted apart, and the operator must add no node of
//!   its own until the count is back within the budget (a grant written within a few seconds
//!   of such a change, before any cache could show it, is counted as a race);
//! - no `reboot-now` appears on a node while an evictable pod of the workload (not a
//!   DaemonSet pod, not a mirror pod, not finished) is bound to it (but for one bound within
//!   half a second of the `reboot-now`, by a scheduler that had not seen the cordon: no drain
//!   can see it, and it is counted apart).
//!
//! The second check spans two watch streams, so it is made exact by ordering on the etcd
//! revision every object carries as its resourceVersion: a pod occupies its node from the
//! revision it was first seen bound there until the revision of its final deletion (a Deleted
//! event carries it) or of the update that finished it; `reboot-now` appears on a node at the
//! revision of that node event. A `reboot-now` is judged once the pod stream has passed its
//! revision: pods move all the time while nodes drain, and when they do not, a "clock" pod
//! that nothing schedules is touched to move the pod stream on.
//!
//! It also counts, per node, the requests (`reboot-needed` appearing), the go-aheads
//! (`reboot-now` appearing), the cancels (`reboot-needed` removed without a go-ahead) and the
//! reboots (`status.nodeInfo.bootID` changing), and at the end asserts that every request was
//! rebooted exactly once or cancelled and that nothing is left cordoned or in the protocol.
//! When it could not observe (a watch stopped, was blind too long, or missed changes that a
//! re-list then showed), it fails: it never passes on a scenario it did not see.

use crate::{protocol_annotations, unavailable};
use common::{AnnotationKeys, NodeFacts, Phase, Request};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::{
    Api, Client, ResourceExt,
    api::{ListParams, Patch, PatchParams, PostParams},
    runtime::watcher,
};
use nodesim::observe::{Coverage, Observe, ResumingWatch, revision};
use serde_json::json;
use std::{
    collections::{BTreeMap, BTreeSet},
    future::Future,
    sync::{Arc, Mutex, MutexGuard},
    time::{Duration, Instant},
};
use tokio::task::JoinHandle;

/// The pod whose annotation the observer touches to move the pod stream past a revision.
const CLOCK_POD: &str = "e2e-observer-clock";
/// A scheduler that does not exist, so that the clock pod is never bound to a node.
const NO_SCHEDULER: &str = "e2e-observer-no-scheduler";
/// How long [`Observer::finish`] waits for the watches to catch up with the API server.
const CATCH_UP: Duration = Duration::from_secs(60);

/// The control plane the observer needs: its API server serves Nodes and Pods straight from
/// etcd, so that a watch resumes from its last revision after an API server restart instead of
/// listing again, and the observer sees every change one by one, through the restart too.
pub fn observed_control_plane() -> testenv::Options {
    testenv::Options {
        extra_apiserver_args: vec!["--watch-cache-sizes=nodes#0,pods#0".into()],
        ..testenv::Options::default()
    }
}

/// What one node went through, as the observer counted it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NodeTally {
    /// `reboot-needed=true` appeared.
    pub requests: u32,
    /// `reboot-now` appeared.
    pub go_aheads: u32,
    /// `reboot-needed` was removed without `reboot-now` appearing.
    pub cancels: u32,
    /// `status.nodeInfo.bootID` changed.
    pub reboots: u32,
}

/// A node as last seen.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct NodeSeen {
    ready: bool,
    unavailable: bool,
    requested: bool,
    go_ahead: bool,
    boot_id: Option<String>,
    unschedulable: bool,
    protocol: Vec<String>,
    /// In the operator's hands: granted a slot, cordoned by it, or told to reboot.
    held: bool,
}

impl NodeSeen {
    fn of(node: &Node, keys: &AnnotationKeys) -> Self {
        let facts = NodeFacts::from_node(node);
        let state = facts.protocol(keys);
        Self {
            ready: facts.readiness == common::Readiness::Ready,
            unavailable: unavailable(node, keys),
            requested: state.request == Request::Needed,
            go_ahead: state.phase == Phase::RebootNow,
            boot_id: facts.boot_id.clone(),
            unschedulable: facts.unschedulable,
            protocol: protocol_annotations(node),
            held: state.grant.is_some() || state.cordoned_by_operator || state.phase != Phase::Idle,
        }
    }
}

/// A pod of the workload bound to a node, from one revision until another.
#[derive(Debug, Clone)]
struct Stay {
    pod: String,
    node: String,
    from: u64,
    until: Option<u64>,
    /// When the observer first saw it bound.
    seen: Instant,
}

/// `reboot-now` appeared on `node` at `revision`; judged once the pod stream passed it.
#[derive(Debug, Clone)]
struct GoAhead {
    node: String,
    revision: u64,
    /// When the observer saw it.
    seen: Instant,
}

/// Everything the observer saw, fed by both watches.
#[derive(Debug)]
struct Record {
    keys: AnnotationKeys,
    budget: usize,
    workload: (String, String),
    nodes: BTreeMap<String, NodeSeen>,
    tallies: BTreeMap<String, NodeTally>,
    unavailable_now: usize,
    max_unavailable: usize,
    /// Times others (an administrator's cordon, a node failing on its own) took the count
    /// over the budget: the operator cannot prevent those, only add nothing while they last.
    external_excess: u64,
    /// Grants written while someone else made a node unavailable (see [`RACE`]).
    raced_external: u64,
    /// Pods bound to a node as its `reboot-now` was written (see [`LATE_BINDING`]).
    late_bindings: Vec<String>,
    /// The revision at which each cordoned node was cordoned.
    cordoned_at: BTreeMap<String, u64>,
    /// When the observer saw each unavailable node become so.
    unavailable_since: BTreeMap<String, Instant>,
    violations: Vec<String>,
    /// By pod uid.
    stays: BTreeMap<String, Stay>,
    /// Every pod event up to this revision has been seen.
    pod_revision: u64,
    pending: Vec<GoAhead>,
    node_events: u64,
    pod_events: u64,
}

/// How long a controller's cache may take to show a node that someone else made unavailable.
/// A grant written within this time of that change cannot have seen it: the operator's
/// fences cover its own slots, not other people's cordons, so such a grant is counted as a
/// race (one node over the budget until a reboot finishes), not as a violation.
const RACE: Duration = Duration::from_secs(5);

/// A pod bound to a node this close to its `reboot-now` was bound in the instant between the
/// drain's last look and `reboot-now`: by a scheduler that had not seen the cordon yet (after
/// an API server restart, say). No drain can see such a pod (`kubectl drain` has the same
/// race); it is counted apart, not as a violation.
const LATE_BINDING: Duration = Duration::from_millis(500);

/// Violations beyond this many are counted, not described.
const DESCRIBED: usize = 20;

impl Record {
    fn violation(&mut self, what: String) {
        if self.violations.len() < DESCRIBED {
            self.violations.push(what);
        }
    }

    /// Records a node's new state and counts its transitions; the caller then counts the
    /// unavailable nodes (once for a whole list, whose states are of one moment).
    fn node_seen(&mut self, node: &Node) {
        self.node_events += 1;
        let name = node.name_any();
        let at = revision(node);
        let now = NodeSeen::of(node, &self.keys);
        let before = self.nodes.insert(name.clone(), now.clone());
        let before = before.unwrap_or_default();
        if now.unschedulable && !before.unschedulable {
            self.cordoned_at.insert(name.clone(), at);
        } else if !now.unschedulable {
            self.cordoned_at.remove(&name);
        }
        let tally = self.tallies.entry(name.clone()).or_default();
        if now.requested && !before.requested {
            tally.requests += 1;
        }
        if before.requested && !now.requested && !now.go_ahead {
            tally.cancels += 1;
        }
        if now.go_ahead && !before.go_ahead {
            tally.go_aheads += 1;
            self.pending.push(GoAhead {
                node: name.clone(),
                revision: at,
                seen: Instant::now(),
            });
        }
        if let (Some(old), Some(new)) = (&before.boot_id, &now.boot_id)
            && old != new
        {
            tally.reboots += 1;
        }
    }

    /// Counts the unavailable nodes after a change to `changed` (`None`: a complete list).
    /// More than the budget is a violation when the operator's own node made it so: a node
    /// it holds became unavailable. When others did (an administrator cordoned a node, a
    /// node failed), it is counted as an external excess; the operator must then add none.
    fn count_unavailable(&mut self, at: u64, changed: Option<&str>) {
        let now = Instant::now();
        let down: Vec<String> = self
            .nodes
            .iter()
            .filter(|(_, n)| n.unavailable)
            .map(|(name, _)| name.clone())
            .collect();
        self.unavailable_since.retain(|n, _| down.contains(n));
        for node in &down {
            self.unavailable_since.entry(node.clone()).or_insert(now);
        }
        let count = down.len();
        if count > self.budget && count > self.unavailable_now {
            let by_the_operator =
                changed.is_none_or(|name| self.nodes.get(name).is_some_and(|n| n.held));
            // Others' nodes that became unavailable too recently for a cache to show them.
            let racing = down
                .iter()
                .filter(|n| self.nodes.get(*n).is_some_and(|seen| !seen.held))
                .filter(|n| {
                    self.unavailable_since
                        .get(*n)
                        .is_some_and(|since| now.duration_since(*since) < RACE)
                })
                .count();
            if !by_the_operator {
                self.external_excess += 1;
            } else if count - racing <= self.budget {
                self.raced_external += 1;
            } else {
                let ages: Vec<String> = down
                    .iter()
                    .map(|n| {
                        let age = self
                            .unavailable_since
                            .get(n)
                            .map_or(Duration::ZERO, |since| now.duration_since(*since));
                        let whose = if self.nodes.get(n).is_some_and(|s| s.held) {
                            "the operator's"
                        } else {
                            "others'"
                        };
                        format!("{n} ({whose}, for {age:.1?})")
                    })
                    .collect();
                let what = format!(
                    "{count} nodes unavailable at once with a budget of {} at revision {at}: {}",
                    self.budget,
                    ages.join(", ")
                );
                self.violation(what);
            }
        }
        self.unavailable_now = count;
        self.max_unavailable = self.max_unavailable.max(count);
    }

    /// The node an evictable pod of the workload occupies, if it does.
    fn occupied_node(&self, pod: &Pod) -> Option<String> {
        let (key, value) = &self.workload;
        if pod.labels().get(key) != Some(value) || !evictable(pod) {
            return None;
        }
        pod.spec.as_ref()?.node_name.clone()
    }

    fn pod_seen(&mut self, pod: &Pod) {
        self.pod_events += 1;
        let at = revision(pod);
        let uid = pod.uid().unwrap_or_default();
        match self.occupied_node(pod) {
            Some(node) => {
                self.stays.entry(uid).or_insert_with(|| Stay {
                    pod: pod_name(pod),
                    node,
                    from: at,
                    until: None,
                    seen: Instant::now(),
                });
            }
            None => self.leave(&uid, at),
        }
        self.pod_revision = self.pod_revision.max(at);
    }

    fn pod_deleted(&mut self, pod: &Pod) {
        self.pod_events += 1;
        let at = revision(pod);
        self.leave(&pod.uid().unwrap_or_default(), at);
        self.pod_revision = self.pod_revision.max(at);
        self.judge();
    }

    fn leave(&mut self, uid: &str, at: u64) {
        if let Some(stay) = self.stays.get_mut(uid)
            && stay.until.is_none()
        {
            stay.until = Some(at);
        }
    }

    /// A complete list of the pods: pods no longer there left at the latest revision the
    /// list shows (a lower bound of its own; such gaps are counted as unobserved changes).
    fn pods_listed(&mut self, pods: &[Pod]) {
        let listed_at = pods.iter().map(revision).max().unwrap_or(self.pod_revision);
        let present: BTreeSet<String> = pods.iter().filter_map(|p| p.uid()).collect();
        let gone: Vec<String> = self
            .stays
            .keys()
            .filter(|uid| !present.contains(*uid))
            .cloned()
            .collect();
        for uid in gone {
            self.leave(&uid, listed_at);
        }
        pods.iter().for_each(|p| self.pod_seen(p));
        self.judge();
    }

    /// Judges every go-ahead the pod stream has passed.
    fn judge(&mut self) {
        let (ready, waiting): (Vec<GoAhead>, Vec<GoAhead>) = std::mem::take(&mut self.pending)
            .into_iter()
            .partition(|g| g.revision <= self.pod_revision);
        self.pending = waiting;
        for go_ahead in ready {
            let (late, bound): (Vec<&Stay>, Vec<&Stay>) = self
                .stays
                .values()
                .filter(|s| {
                    s.node == go_ahead.node
                        && s.from <= go_ahead.revision
                        && s.until.is_none_or(|until| until > go_ahead.revision)
                })
                // Only a pod bound after the cordon, as a scheduler that had not seen it binds
                // one, is excused: one bound before it is the drain's to evict, however
                // close to `reboot-now` it came.
                .partition(|s| {
                    abs_diff(s.seen, go_ahead.seen) < LATE_BINDING
                        && self.cordoned_at.get(&s.node).is_some_and(|at| s.from > *at)
                });
            let describe = |stays: &[&Stay]| {
                stays
                    .iter()
                    .map(|s| format!("{} (bound since revision {})", s.pod, s.from))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            if !late.is_empty() {
                let what = format!(
                    "{} at revision {}: {}",
                    go_ahead.node,
                    go_ahead.revision,
                    describe(&late)
                );
                self.late_bindings.push(what);
            }
            if !bound.is_empty() {
                self.violation(format!(
                    "reboot-now appeared on {} at revision {} while pods of the workload were \
                     still bound to it: {}",
                    go_ahead.node,
                    go_ahead.revision,
                    describe(&bound)
                ));
            }
        }
    }
}

fn abs_diff(a: Instant, b: Instant) -> Duration {
    a.checked_duration_since(b)
        .unwrap_or_else(|| b.duration_since(a))
}

/// Whether a drain must evict the pod, as `kubectl drain` decides: not a DaemonSet pod, not
/// a mirror pod, not finished.
fn evictable(pod: &Pod) -> bool {
    let daemon = pod
        .owner_references()
        .iter()
        .any(|o| o.kind == "DaemonSet" && o.controller == Some(true));
    let mirror = pod
        .annotations()
        .contains_key("kubernetes.io/config.mirror");
    let finished = matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    );
    !(daemon || mirror || finished)
}

fn pod_name(pod: &Pod) -> String {
    format!("{}/{}", pod.namespace().unwrap_or_default(), pod.name_any())
}

type Shared = Arc<Mutex<Record>>;

fn lock(record: &Shared) -> MutexGuard<'_, Record> {
    record.lock().unwrap_or_else(|e| e.into_inner())
}

/// The node stream's side of the record.
#[derive(Debug)]
struct NodeFeed(Shared);

impl Observe<Node> for NodeFeed {
    fn listed(&mut self, nodes: &[Node]) {
        let mut record = lock(&self.0);
        let present: BTreeSet<String> = nodes.iter().map(ResourceExt::name_any).collect();
        record.nodes.retain(|name, _| present.contains(name));
        nodes.iter().for_each(|n| record.node_seen(n));
        record.count_unavailable(nodes.iter().map(revision).max().unwrap_or(0), None);
        record.judge();
    }

    fn applied(&mut self, node: &Node) {
        let mut record = lock(&self.0);
        record.node_seen(node);
        record.count_unavailable(revision(node), Some(&node.name_any()));
        record.judge();
    }

    fn deleted(&mut self, node: &Node) {
        let mut record = lock(&self.0);
        record.node_events += 1;
        record.nodes.remove(&node.name_any());
        record.count_unavailable(revision(node), Some(&node.name_any()));
    }
}

/// The pod stream's side of the record.
#[derive(Debug)]
struct PodFeed(Shared);

impl Observe<Pod> for PodFeed {
    fn listed(&mut self, pods: &[Pod]) {
        lock(&self.0).pods_listed(pods);
    }

    fn applied(&mut self, pod: &Pod) {
        let mut record = lock(&self.0);
        record.pod_seen(pod);
        record.judge();
    }

    fn deleted(&mut self, pod: &Pod) {
        lock(&self.0).pod_deleted(pod);
    }
}

/// What the observer saw, for the end of a scenario.
#[derive(Debug, Clone)]
pub struct Report {
    pub budget: usize,
    pub max_unavailable: usize,
    /// Times others took the count over the budget (see the observer's rules).
    pub external_excess: u64,
    /// Grants that raced someone else's node becoming unavailable (see [`RACE`]).
    pub raced_external: u64,
    /// Pods bound to a node as its `reboot-now` was written (see [`LATE_BINDING`]).
    pub late_bindings: Vec<String>,
    pub tallies: BTreeMap<String, NodeTally>,
    pub node_events: u64,
    pub pod_events: u64,
    pub nodes: Coverage,
    pub pods: Coverage,
    pub violations: Vec<String>,
}

impl Report {
    pub fn total(&self) -> NodeTally {
        self.tallies
            .values()
            .fold(NodeTally::default(), |sum, t| NodeTally {
                requests: sum.requests + t.requests,
                go_aheads: sum.go_aheads + t.go_aheads,
                cancels: sum.cancels + t.cancels,
                reboots: sum.reboots + t.reboots,
            })
    }
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let total = self.total();
        writeln!(
            f,
            "observer: max unavailable {} with a budget of {}",
            self.max_unavailable, self.budget
        )?;
        if self.raced_external > 0 {
            writeln!(
                f,
                "observer: {} grant(s) raced another node becoming unavailable (within {RACE:?})",
                self.raced_external
            )?;
        }
        for late in &self.late_bindings {
            writeln!(
                f,
                "observer: a pod was bound to a node as its reboot-now was written (a scheduler \
                 that had not seen the cordon): {late}"
            )?;
        }
        if self.external_excess > 0 {
            writeln!(
                f,
                "observer: others took it over the budget {} time(s) (an administrator's \
                 cordon, a node failing); the operator added none then",
                self.external_excess
            )?;
        }
        writeln!(
            f,
            "observer: {} requests, {} go-aheads, {} reboots, {} cancels",
            total.requests, total.go_aheads, total.reboots, total.cancels
        )?;
        writeln!(
            f,
            "observer: {} node events and {} pod events observed",
            self.node_events, self.pod_events
        )?;
        writeln!(f, "observer: node watch: {}", self.nodes)?;
        writeln!(f, "observer: pod watch: {}", self.pods)?;
        write!(f, "observer: {} violations", self.violations.len())?;
        for v in &self.violations {
            write!(f, "\n  - {v}")?;
        }
        Ok(())
    }
}

/// The independent observer of a scenario (see the module's documentation).
pub struct Observer {
    record: Shared,
    nodes: ResumingWatch<NodeFeed>,
    pods: ResumingWatch<PodFeed>,
    client: Client,
    namespace: String,
    /// Touches the clock pod while go-aheads wait for the pod stream.
    clock: JoinHandle<()>,
}

impl Observer {
    /// Starts watching every Node and the Pods of `namespace`; the workload is the pods
    /// labelled `workload.0=workload.1`. Returns once both watches have listed.
    ///
    /// # Panics
    /// When it cannot observe (the watches cannot list, the clock pod cannot be created).
    pub async fn start(
        client: Client,
        budget: usize,
        namespace: &str,
        workload: (&str, &str),
    ) -> Observer {
        let record = Arc::new(Mutex::new(Record {
            keys: AnnotationKeys::default(),
            budget,
            workload: (workload.0.to_owned(), workload.1.to_owned()),
            nodes: BTreeMap::new(),
            tallies: BTreeMap::new(),
            unavailable_now: 0,
            max_unavailable: 0,
            external_excess: 0,
            raced_external: 0,
            late_bindings: Vec::new(),
            cordoned_at: BTreeMap::new(),
            unavailable_since: BTreeMap::new(),
            violations: Vec::new(),
            stays: BTreeMap::new(),
            pod_revision: 0,
            pending: Vec::new(),
            node_events: 0,
            pod_events: 0,
        }));
        let pods_api: Api<Pod> = Api::namespaced(client.clone(), namespace);
        create_clock_pod(&pods_api).await;
        let pods = ResumingWatch::start(
            pods_api.clone(),
            watcher::Config::default(),
            format!("the Pods of {namespace} (independent observer)"),
            PodFeed(record.clone()),
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
        let nodes = ResumingWatch::start(
            Api::<Node>::all(client.clone()),
            watcher::Config::default(),
            "every Node (independent observer)",
            NodeFeed(record.clone()),
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
        let clock = tokio::spawn(keep_the_clock(record.clone(), pods_api));
        Observer {
            record,
            nodes,
            pods,
            client,
            namespace: namespace.to_owned(),
            clock,
        }
    }

    /// Fails with the first violation seen so far, or when a watch cannot observe.
    pub fn check(&self) -> Result<(), String> {
        if let Some(first) = lock(&self.record).violations.first() {
            return Err(format!("invariant broken: {first}"));
        }
        self.nodes.check()?;
        self.pods.check()
    }

    /// What one node went through so far.
    pub fn tally(&self, node: &str) -> NodeTally {
        lock(&self.record)
            .tallies
            .get(node)
            .copied()
            .unwrap_or_default()
    }

    /// The node is Ready and out of the reboot protocol (cordoned or not).
    pub fn out_of_protocol(&self, node: &str) -> bool {
        lock(&self.record)
            .nodes
            .get(node)
            .is_some_and(|n| n.ready && n.protocol.is_empty())
    }

    /// The node is Ready, schedulable and out of the reboot protocol.
    pub fn back(&self, node: &str) -> bool {
        lock(&self.record)
            .nodes
            .get(node)
            .is_some_and(|n| n.ready && n.protocol.is_empty() && !n.unschedulable)
    }

    /// The node went through `reboots` reboots and is [`back`](Self::back).
    pub fn rebooted_and_back(&self, node: &str, reboots: u32) -> bool {
        self.tally(node).reboots == reboots && self.back(node)
    }

    pub fn report(&self) -> Report {
        // The watches' coverage first: a watch feeds the record while it holds its own lock,
        // so taking them in the other order deadlocks with an event being fed.
        let nodes = self.nodes.coverage();
        let pods = self.pods.coverage();
        let record = lock(&self.record);
        Report {
            budget: record.budget,
            max_unavailable: record.max_unavailable,
            external_excess: record.external_excess,
            raced_external: record.raced_external,
            late_bindings: record.late_bindings.clone(),
            tallies: record.tallies.clone(),
            node_events: record.node_events,
            pod_events: record.pod_events,
            nodes,
            pods,
            violations: record.violations.clone(),
        }
    }

    /// Panics with `message` and everything the observer saw.
    pub fn fail(&self, message: &str) -> ! {
        panic!("{message}\n{}", self.report())
    }

    /// Polls `attempt` until it gives a value; fails at once when an invariant is broken, and
    /// after `timeout` with `what` in the message.
    pub async fn eventually<T, F, Fut>(&self, what: &str, timeout: Duration, mut attempt: F) -> T
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Option<T>>,
    {
        let start = Instant::now();
        loop {
            if let Err(broken) = self.check() {
                self.fail(&format!("{broken} (while waiting until {what})"));
            }
            if let Some(value) = attempt().await {
                return value;
            }
            if start.elapsed() > timeout {
                self.fail(&format!("timed out after {timeout:?} waiting until {what}"));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Polls `condition` until true, like [`eventually`](Self::eventually).
    pub async fn wait_until<F, Fut>(&self, what: &str, timeout: Duration, mut condition: F)
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = bool>,
    {
        self.eventually(what, timeout, || {
            let ready = condition();
            async move { ready.await.then_some(()) }
        })
        .await;
    }

    /// Ends the observation: waits until both watches have caught up with the API server,
    /// judges every go-ahead, and asserts the scenario's end state: every request rebooted
    /// exactly once or cancelled, no request left, no node in the protocol, no node cordoned
    /// but those an administrator cordoned (`admin_cordoned`). Returns what it saw.
    pub async fn finish(&self, admin_cordoned: &[&str]) -> Report {
        self.catch_up().await;
        if let Err(broken) = self.check() {
            self.fail(&broken);
        }
        let report = self.report();
        for (watch, coverage) in [("node", report.nodes), ("pod", report.pods)] {
            if coverage.unobserved_changes > 0 {
                self.fail(&format!(
                    "the {watch} watch had to re-list and missed {} changes: the observer cannot \
                     vouch for what happened meanwhile",
                    coverage.unobserved_changes
                ));
            }
        }
        let problems = self.end_state_problems(admin_cordoned);
        if !problems.is_empty() {
            self.fail(&format!(
                "the scenario did not end as it must:\n  {}",
                problems.join("\n  ")
            ));
        }
        report
    }

    fn end_state_problems(&self, admin_cordoned: &[&str]) -> Vec<String> {
        let record = lock(&self.record);
        let mut problems = Vec::new();
        for (name, seen) in &record.nodes {
            let t = record.tallies.get(name).copied().unwrap_or_default();
            if t.requests != t.go_aheads + t.cancels {
                problems.push(format!(
                    "{name}: {} requests but {} go-aheads and {} cancels",
                    t.requests, t.go_aheads, t.cancels
                ));
            }
            if t.reboots != t.go_aheads {
                problems.push(format!(
                    "{name}: {} reboots for {} go-aheads (each go-ahead must reboot exactly once)",
                    t.reboots, t.go_aheads
                ));
            }
            if !seen.protocol.is_empty() {
                problems.push(format!("{name}: left in the protocol: {:?}", seen.protocol));
            }
            if seen.unschedulable && !admin_cordoned.contains(&name.as_str()) {
                problems.push(format!("{name}: left cordoned"));
            }
            if !seen.unschedulable && admin_cordoned.contains(&name.as_str()) {
                problems.push(format!("{name}: the administrator's cordon was lost"));
            }
        }
        problems
    }

    /// Waits until the node watch shows every Node as the API server has it now, and the pod
    /// stream has passed every go-ahead seen.
    async fn catch_up(&self) {
        let nodes: Api<Node> = Api::all(self.client.clone());
        let start = Instant::now();
        loop {
            let listed = nodes.list(&ListParams::default()).await;
            if let Ok(list) = listed {
                let versions: BTreeMap<String, String> = list
                    .items
                    .iter()
                    .map(|n| {
                        (
                            format!("/{}", n.name_any()),
                            n.resource_version().unwrap_or_default(),
                        )
                    })
                    .collect();
                if versions == self.nodes.known_versions() {
                    break;
                }
            }
            if start.elapsed() > CATCH_UP {
                self.fail("the node watch did not catch up with the API server: it cannot observe");
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &self.namespace);
        let start = Instant::now();
        loop {
            if let Some(at) = tick(&pods).await
                && wait_for_pod_revision(&self.record, at, Duration::from_secs(10)).await
            {
                break;
            }
            if start.elapsed() > CATCH_UP {
                self.fail("the pod watch did not catch up with the API server: it cannot observe");
            }
        }
        let mut record = lock(&self.record);
        record.judge();
        if !record.pending.is_empty() {
            let pending = record.pending.clone();
            drop(record);
            self.fail(&format!("go-aheads could not be judged: {pending:?}"));
        }
    }
}

impl std::fmt::Debug for Observer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Observer")
            .field("namespace", &self.namespace)
            .field("nodes", &self.nodes)
            .field("pods", &self.pods)
            .finish_non_exhaustive()
    }
}

impl Drop for Observer {
    fn drop(&mut self) {
        self.clock.abort();
    }
}

async fn create_clock_pod(pods: &Api<Pod>) {
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": CLOCK_POD, "labels": {"e2e-observer": "clock"}},
        "spec": {
            "schedulerName": NO_SCHEDULER,
            "automountServiceAccountToken": false,
            "containers": [{"name": "c", "image": "registry.example/none:1"}],
        },
    }))
    .expect("a valid pod");
    match pods.create(&PostParams::default(), &pod).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.is_already_exists() => {}
        Err(e) => panic!("the observer cannot create its clock pod: {e}"),
    }
}

/// Touches the clock pod; the revision of that change, once the API server took it.
async fn tick(pods: &Api<Pod>) -> Option<u64> {
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    let patch = json!({"metadata": {"annotations": {"e2e-observer/tick": now}}});
    pods.patch(CLOCK_POD, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .ok()
        .map(|p| revision(&p))
}

async fn wait_for_pod_revision(record: &Shared, at: u64, timeout: Duration) -> bool {
    let start = Instant::now();
    while start.elapsed() < timeout {
        if lock(record).pod_revision >= at {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

/// While go-aheads wait to be judged and the pods are quiet, moves the pod stream on.
async fn keep_the_clock(record: Shared, pods: Api<Pod>) {
    let mut every = tokio::time::interval(Duration::from_secs(1));
    loop {
        every.tick().await;
        let waiting = {
            let record = lock(&record);
            record
                .pending
                .iter()
                .any(|g| g.revision > record.pod_revision)
        };
        if waiting {
            let _ = tick(&pods).await;
        }
    }
}
