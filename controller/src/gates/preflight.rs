//! Pre-flight checks before a node is granted (and so cordoned): would its reboot stall once
//! it is? A node without a running and Ready agent pod (`--agent-selector`) would never take
//! `reboot-now`; a node with a pod that the Eviction API would refuse to evict now
//! (`--check-disruption-budgets`, by the API's own rules: [`super::refusal`]) could not be
//! drained. Such a node waits, uncordoned, with an Event that says why, and the slot goes to the
//! next eligible node. With `--force-reboot` a refused pod holds no node: its drain is forced.
//!
//! Advice, not a safety invariant: the facts come from watches, and a node granted on an older
//! reading goes on (its drain waits, as any drain does). A check without an answer holds the
//! requested nodes; once its watch has failed (met an error and not listed since) for
//! `--preflight-timeout`, it holds none any more: the nodes granted go without it, each with a
//! Warning naming the watch and its error, and the drain still honours every budget. A watch
//! that is merely slow to list holds the nodes until it lists.

use crate::{
    cluster::events::{Reason, brief},
    drain::budgets::{DisruptionBudgetWatch, RefusedAt},
    gates::refusal::{self, Refused, could_refuse, is_ready, key, refusal},
    metrics::Metrics,
};
use common::events::NOTE_REQUESTED;
use common::eviction::{Disposition, disposition};
use controller_core::{
    autoscaler,
    decide::{NodeView, Preflight},
};
use futures::StreamExt as _;
use k8s_openapi::api::{core::v1::Pod, policy::v1::PodDisruptionBudget};
use kube::{
    Api, Client, ResourceExt as _,
    api::ListParams,
    core::Selector,
    runtime::{WatchStreamExt as _, reflector, reflector::Store, watcher},
};
use observability::ApiErrorKind;
use observability::watch_retry::{MAX_DELAY, retry_with_backoff};
use std::{
    collections::{BTreeMap, BTreeSet},
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};
use tokio::sync::{Notify, watch};

/// The pods of a budget that could refuse an eviction are read again at least this often: a
/// pod may move to another node, or turn Ready, without the budget's status changing.
const COVERED_REFRESH: Duration = Duration::from_secs(30);

/// The last error met by a watch or a read, until the next one that succeeds: whether it fails
/// now, and what the Event that says so quotes.
#[derive(Debug, Clone, Default)]
struct LastError(Arc<Mutex<Option<String>>>);

impl LastError {
    fn slot(&self) -> std::sync::MutexGuard<'_, Option<String>> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn record(&self, error: &str) {
        *self.slot() = Some(brief(error, ERROR_BYTES));
    }

    fn clear(&self) {
        *self.slot() = None;
    }

    fn get(&self) -> Option<String> {
        self.slot().clone()
    }
}

/// Whether a watch has listed, and the error it met since it last delivered anything.
#[derive(Debug, Clone, Default)]
pub struct Listing {
    listed: Arc<AtomicBool>,
    error: LastError,
}

impl Listing {
    /// A watch fed by hand (the model test): listed from the start.
    pub fn listed_already() -> Self {
        let listing = Self::default();
        listing.listed.store(true, Ordering::Release);
        listing
    }

    pub fn is_listed(&self) -> bool {
        self.listed.load(Ordering::Acquire)
    }

    fn record_error(&self, error: String) {
        self.error.record(&error);
    }

    /// The error the watch met since it last delivered anything (a listed object, a change,
    /// the end of a list), if any: while there is one, it cannot list.
    pub fn last_error(&self) -> Option<String> {
        self.error.get()
    }
}

/// How much of a watch's error an Event repeats (bytes): a note has at most
/// [`crate::cluster::events::NOTE_BYTES`], and the note says more than the error.
const ERROR_BYTES: usize = 300;

/// An API error in a few words: the server's own message where there is one (the error's
/// `Display` repeats the whole status).
fn api_error(error: &kube::Error) -> String {
    match error {
        kube::Error::Api(status) => format!("{} ({})", status.message, status.code),
        other => other.to_string(),
    }
}

/// A watch's error in a few words, as [`api_error`].
fn watch_error(error: &watcher::Error) -> String {
    match error {
        watcher::Error::InitialListFailed(e)
        | watcher::Error::WatchStartFailed(e)
        | watcher::Error::WatchFailed(e) => api_error(e),
        watcher::Error::WatchError(status) => format!("{} ({})", status.message, status.code),
        other => other.to_string(),
    }
}

/// The agent pods, by a label selector, kept by one watch (one pod per node: small).
#[derive(Debug, Clone)]
pub struct AgentPods {
    store: Store<Pod>,
    listing: Listing,
}

impl AgentPods {
    pub fn spawn(
        client: &Client,
        selector: &str,
        changed: &Arc<Notify>,
        metrics: &Metrics,
    ) -> Self {
        let (store, writer) = reflector::store();
        let listing = Listing::default();
        let config = watcher::Config::default().labels(selector);
        let stream = retry_with_backoff(
            watcher(Api::<Pod>::all(client.clone()), config).boxed(),
            MAX_DELAY,
        )
        .modify(trim_pod)
        .reflect(writer);
        let what = format!("agent pod watch (--agent-selector {selector})");
        follow(
            stream,
            what,
            "pod",
            listing.clone(),
            metrics,
            changed.clone(),
        );
        Self { store, listing }
    }

    /// Why the check cannot answer, if its watch fails.
    fn failure(&self) -> Option<String> {
        self.listing.last_error()
    }

    /// The nodes with a running agent (and whether it is Ready), or `None` before the first
    /// list.
    fn nodes(&self) -> Option<BTreeMap<String, bool>> {
        if !self.listing.is_listed() {
            return None;
        }
        let pods = self.store.state();
        Some(agent_nodes(pods.iter().map(AsRef::as_ref)))
    }
}

/// Drives a reflector's stream: `listing` listed once its first list is in, errors counted,
/// logged and kept until the watch delivers again (it retries), and `changed` woken at every
/// event.
pub fn follow<K, S>(
    stream: S,
    what: String,
    resource: &'static str,
    listing: Listing,
    metrics: &Metrics,
    changed: Arc<Notify>,
) where
    K: Send + 'static,
    S: futures::Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static,
{
    let metrics = metrics.clone();
    tokio::spawn(async move {
        futures::pin_mut!(stream);
        while let Some(event) = stream.next().await {
            match event {
                // A list begins: whether it can is not known yet.
                Ok(watcher::Event::Init) => {}
                Ok(event) => {
                    // The watch delivered: whatever failed before works now.
                    listing.error.clear();
                    if matches!(event, watcher::Event::InitDone) {
                        listing.listed.store(true, Ordering::Release);
                    }
                }
                Err(error) => {
                    metrics.api_error(resource, ApiErrorKind::of_watcher(&error));
                    tracing::warn!(%error, "{what} failed; retrying");
                    listing.record_error(watch_error(&error));
                }
            }
            changed.notify_one();
        }
    });
}

/// Only what the check reads: a DaemonSet pod's spec is large, and there is one per node.
fn trim_pod(pod: &mut Pod) {
    pod.metadata.managed_fields = None;
    pod.metadata.annotations = None;
    if let Some(spec) = pod.spec.as_mut() {
        spec.containers.clear();
        spec.init_containers = None;
        spec.volumes = None;
        spec.affinity = None;
        spec.tolerations = None;
    }
    if let Some(status) = pod.status.as_mut() {
        status.container_statuses = None;
        status.init_container_statuses = None;
    }
}

/// By node, whether its agent pod that is Running and not being deleted is also Ready. The
/// Ready condition is what the kubelet last reported: on a node that is not Ready the node
/// lifecycle controller marks every pod not Ready, so there a Running pod is enough (a NotReady
/// node may still be rebooted by its agent; see [`held`]).
pub fn agent_nodes<'a>(pods: impl IntoIterator<Item = &'a Pod>) -> BTreeMap<String, bool> {
    let mut nodes = BTreeMap::new();
    for pod in pods
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
    {
        if let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.clone())
            && running(pod)
        {
            *nodes.entry(node).or_insert(false) |= is_ready(pod);
        }
    }
    nodes
}

fn running(pod: &Pod) -> bool {
    pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
}

/// The pods a drain would evict that one PodDisruptionBudget which could refuse an eviction
/// selects, as read at the budget's version.
#[derive(Debug, Clone)]
struct Covered {
    version: Option<String>,
    pods: Vec<Pod>,
    read_at: tokio::time::Instant,
}

/// The PodDisruptionBudgets (one watch: they are few), and for each that could refuse an
/// eviction the pods it selects, read by a task of their own so that rounds make no request.
#[derive(Debug, Clone)]
pub struct DisruptionBudgets {
    store: Store<PodDisruptionBudget>,
    listing: Listing,
    covered: Arc<Mutex<BTreeMap<String, Covered>>>,
    /// The error of the last pass over the budgets' pods that failed a read, until one reads
    /// them all.
    reads: LastError,
    /// Changed at every event of the watch, after the store has it.
    changes: watch::Receiver<()>,
}

impl DisruptionBudgets {
    /// `drain_selector`: `--drain-pod-selector`, the pods a drain evicts.
    pub fn spawn(
        client: &Client,
        drain_selector: Option<&str>,
        changed: &Arc<Notify>,
        metrics: &Metrics,
    ) -> Self {
        let (store, writer) = reflector::store();
        let (changed_tx, changes) = watch::channel(());
        let budgets = Self {
            store,
            listing: Listing::default(),
            covered: Arc::new(Mutex::new(BTreeMap::new())),
            reads: LastError::default(),
            changes,
        };
        let stream = retry_with_backoff(
            watcher(
                Api::<PodDisruptionBudget>::all(client.clone()),
                watcher::Config::default(),
            )
            .boxed(),
            MAX_DELAY,
        )
        .modify(|pdb: &mut PodDisruptionBudget| pdb.metadata.managed_fields = None)
        .reflect(writer)
        .inspect(move |_| {
            changed_tx.send_replace(());
        });
        let wake = Arc::new(Notify::new());
        let what = "PodDisruptionBudget watch".to_owned();
        let resource = "poddisruptionbudget";
        follow(
            stream,
            what,
            resource,
            budgets.listing.clone(),
            metrics,
            wake.clone(),
        );
        let reader = budgets.clone();
        let (client, changed, metrics) = (client.clone(), changed.clone(), metrics.clone());
        let drain_selector = drain_selector.map(str::to_owned);
        tokio::spawn(async move {
            loop {
                reader
                    .read_covered(&client, drain_selector.as_deref(), &metrics)
                    .await;
                changed.notify_one();
                let _ = tokio::time::timeout(COVERED_REFRESH, wake.notified()).await;
            }
        });
        budgets
    }

    /// Reads the pods of each budget that could refuse an eviction and was not read at its
    /// current version (or not lately); forgets the others.
    async fn read_covered(&self, client: &Client, drain_selector: Option<&str>, metrics: &Metrics) {
        let refusing: Vec<Arc<PodDisruptionBudget>> = self
            .store
            .state()
            .into_iter()
            .filter(|pdb| could_refuse(pdb))
            .collect();
        let keys: BTreeSet<String> = refusing.iter().map(|p| key(p.as_ref())).collect();
        self.lock().retain(|k, _| keys.contains(k));
        let mut failed = false;
        for pdb in refusing {
            let (k, version) = (key(pdb.as_ref()), pdb.resource_version());
            let current = self
                .lock()
                .get(&k)
                .is_some_and(|c| c.version == version && c.read_at.elapsed() < COVERED_REFRESH);
            if current {
                continue;
            }
            match pods_of(client, &pdb, drain_selector).await {
                Ok(pods) => {
                    let read_at = tokio::time::Instant::now();
                    self.lock().insert(
                        k,
                        Covered {
                            version,
                            pods,
                            read_at,
                        },
                    );
                }
                Err(error) => {
                    metrics.api_error("pod", ApiErrorKind::of(&error));
                    tracing::warn!(budget = %k, %error,
                        "cannot list the pods of a PodDisruptionBudget; retrying");
                    let what = api_error(&error);
                    let what = format!("listing the pods of the PodDisruptionBudget {k}: {what}");
                    self.reads.record(&what);
                    failed = true;
                }
            }
        }
        if !failed {
            self.reads.clear();
        }
    }

    /// Why the check cannot answer, if its watch or a read of a budget's pods fails.
    fn failure(&self) -> Option<String> {
        self.listing.last_error().or_else(|| self.reads.get())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Covered>> {
        self.covered
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// By node, the pods the Eviction API would refuse to evict now; `None` while the budgets,
    /// or the pods of one that could refuse, are not read yet.
    fn refused(&self) -> Option<BTreeMap<String, Vec<Refused>>> {
        if !self.listing.is_listed() {
            return None;
        }
        let budgets = self.store.state();
        let covered = self.lock();
        let mut pods: BTreeMap<String, &Pod> = BTreeMap::new();
        for pdb in budgets.iter().filter(|p| could_refuse(p)) {
            for pod in &covered.get(&key(pdb.as_ref()))?.pods {
                pods.insert(key(pod), pod);
            }
        }
        let budgets = budgets.iter().map(|p: &Arc<PodDisruptionBudget>| &**p);
        Some(refused_by_node(pods.into_values(), budgets))
    }
}

/// By node, the pods of `pods` (those a drain would evict) that the Eviction API would refuse
/// to evict, given every budget.
pub fn refused_by_node<'a>(
    pods: impl IntoIterator<Item = &'a Pod>,
    budgets: impl IntoIterator<Item = &'a PodDisruptionBudget> + Clone,
) -> BTreeMap<String, Vec<Refused>> {
    let mut by_node: BTreeMap<String, Vec<Refused>> = BTreeMap::new();
    for pod in pods {
        let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.clone()) else {
            continue;
        };
        if let Some(refusal) = refusal(pod, budgets.clone()) {
            let pod = key(pod);
            by_node
                .entry(node)
                .or_default()
                .push(Refused { pod, refusal });
        }
    }
    by_node
}

/// The pods the budget selects that the drain would evict (not DaemonSet or mirror pods, not
/// finished; with `--drain-pod-selector`, only those it selects), trimmed to what the rules
/// read. A budget without a selector selects no pod.
async fn pods_of(
    client: &Client,
    pdb: &PodDisruptionBudget,
    drain_selector: Option<&str>,
) -> Result<Vec<Pod>, kube::Error> {
    let Some(selector) = pdb.spec.as_ref().and_then(|s| s.selector.clone()) else {
        return Ok(Vec::new());
    };
    let selector = match Selector::try_from(selector) {
        Ok(selector) => selector.to_string(),
        // The API server validated it; a selector kube cannot read selects nothing we know of.
        Err(_) => return Ok(Vec::new()),
    };
    let labels = [Some(selector.as_str()), drain_selector]
        .into_iter()
        .flatten()
        .filter(|s| !s.is_empty())
        .collect::<Vec<_>>()
        .join(",");
    let api: Api<Pod> = Api::namespaced(client.clone(), &pdb.namespace().unwrap_or_default());
    let pods = api.list(&ListParams::default().labels(&labels)).await?;
    Ok(evicted(pods.items))
}

/// The pods of `pods` a drain would evict, on a node, with only what the eviction rules read.
pub fn evicted(pods: Vec<Pod>) -> Vec<Pod> {
    pods.into_iter()
        .filter(|p| matches!(disposition(p), Disposition::Evict { .. }))
        .filter(|p| p.spec.as_ref().is_some_and(|s| s.node_name.is_some()))
        .map(|p| Pod {
            metadata: kube::api::ObjectMeta {
                name: p.metadata.name,
                namespace: p.metadata.namespace,
                labels: p.metadata.labels,
                deletion_timestamp: p.metadata.deletion_timestamp,
                ..Default::default()
            },
            spec: p.spec.map(|s| k8s_openapi::api::core::v1::PodSpec {
                node_name: s.node_name,
                ..Default::default()
            }),
            status: p.status.map(|s| k8s_openapi::api::core::v1::PodStatus {
                phase: s.phase,
                conditions: s.conditions,
                ..Default::default()
            }),
        })
        .collect()
}

/// What one check can tell in a round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Check<T> {
    /// The check is off.
    Off,
    /// No answer yet: the nodes wait for it, while its watch has not listed (however long a
    /// slow list takes), or while it fails, for less than `--preflight-timeout`.
    Checking,
    /// No answer, its watch failing for `--preflight-timeout`: the check holds no node (it is
    /// advice; the drain still honours every budget, and a node whose agent never reboots it
    /// holds the pool at `--reboot-timeout`).
    Unanswered,
    Known(T),
}

/// Since when a check has had no answer while its watch fails, on the decision clock
/// (milliseconds).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Silence {
    since: Option<u64>,
}

impl Silence {
    /// Takes the check's answer at `now`: the answer if there is one; else `Checking`, and once
    /// its watch has been `failing` for `bound` (from the first reading that found it so, with
    /// no answer), `Unanswered`. A watch that does not fail (a slow list) is waited for.
    pub fn hear<T>(&mut self, answer: Option<T>, failing: bool, now: u64, bound: u64) -> Check<T> {
        match answer {
            Some(answer) => {
                self.since = None;
                Check::Known(answer)
            }
            None if !failing => {
                self.since = None;
                Check::Checking
            }
            None => {
                let since = *self.since.get_or_insert(now);
                if now.saturating_sub(since) >= bound {
                    Check::Unanswered
                } else {
                    Check::Checking
                }
            }
        }
    }

    /// When a check still without an answer stops holding nodes, if it holds them now.
    pub fn ends_at(&self, now: u64, bound: u64) -> Option<u64> {
        let end = self.since?.saturating_add(bound);
        (end > now).then_some(end)
    }
}

/// The budgets as a drain reads them, to evict a refused pod again once its budget frees.
impl DisruptionBudgetWatch for DisruptionBudgets {
    fn changes(&self) -> watch::Receiver<()> {
        let mut changes = self.changes.clone();
        changes.mark_unchanged();
        changes
    }

    fn refused_at(&self, pod: &Pod) -> RefusedAt {
        refusal::refused_at(pod, self.store.state().iter().map(|b| &**b))
    }

    fn frees(&self, pod: &Pod, at: &RefusedAt) -> bool {
        refusal::frees(pod, at, self.store.state().iter().map(|b| &**b))
    }
}

/// The two checks, in the order of their metrics and notes.
const AGENTS: usize = 0;
const BUDGETS: usize = 1;
const CHECKS: [&str; 2] = ["no_agent", "disruption_budget"];

/// The checks this controller makes (none of them with their flags off).
#[derive(Debug, Clone, Default)]
pub struct PreflightChecks {
    pub agents: Option<AgentPods>,
    pub budgets: Option<DisruptionBudgets>,
    /// `--agent-selector`, for the Events.
    pub agent_selector: String,
    /// `--force-reboot`: a pod the Eviction API would refuse holds no node (its drain is
    /// forced after `--drain-timeout`).
    pub force: bool,
    /// `--drain-timeout`, for the Event of a forced node.
    pub drain_timeout: Duration,
    /// `--preflight-timeout`: how long a check without an answer whose watch fails holds nodes.
    pub timeout: Duration,
    /// What the checks said before.
    pub heard: Heard,
}

/// What the checks said in earlier rounds.
#[derive(Debug, Clone, Default)]
pub struct Heard {
    silences: [Silence; 2],
}

/// What the checks say in one round.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PreflightReading {
    /// The requested nodes held, with the check that holds each.
    pub held: BTreeMap<String, Preflight>,
    /// By node, the pods the Eviction API would refuse to evict now.
    pub refused: BTreeMap<String, Vec<Refused>>,
    /// The Warning of each check without an answer whose watch has failed for
    /// `--preflight-timeout`, which a node granted now goes without.
    pub unanswered: Vec<String>,
    /// When a round must look again: a check without an answer whose watch fails stops holding
    /// nodes then (decision clock, milliseconds).
    pub look_at: Option<u64>,
    agent_selector: String,
    force: bool,
    drain_timeout: Duration,
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl PreflightChecks {
    /// The checks of the requested nodes of `views` without a grant, at `now` (decision
    /// clock, milliseconds).
    pub fn read(&mut self, views: &[NodeView], metrics: &Metrics, now: u64) -> PreflightReading {
        let bound = millis(self.timeout);
        let [agent_silence, budget_silence] = &mut self.heard.silences;
        let agents = match &self.agents {
            None => Check::Off,
            Some(a) => agent_silence.hear(a.nodes(), a.failure().is_some(), now, bound),
        };
        let budgets = match &self.budgets {
            None => Check::Off,
            Some(b) => budget_silence.hear(b.refused(), b.failure().is_some(), now, bound),
        };
        let held = held(views, borrowed(&agents), borrowed(&budgets), self.force);
        let unanswered = [
            matches!(agents, Check::Unanswered),
            matches!(budgets, Check::Unanswered),
        ];
        publish(metrics, &held, unanswered);
        let unanswered = (0..CHECKS.len())
            .filter(|&check| unanswered[check])
            .map(|check| self.unanswered_note(check))
            .collect();
        let look_at = self
            .heard
            .silences
            .iter()
            .filter_map(|s| s.ends_at(now, bound))
            .min();
        PreflightReading {
            held,
            refused: match budgets {
                Check::Known(refused) => refused,
                _ => BTreeMap::new(),
            },
            unanswered,
            look_at,
            agent_selector: self.agent_selector.clone(),
            force: self.force,
            drain_timeout: self.drain_timeout,
        }
    }

    /// The Warning of a node granted without `check`, which has had no answer.
    fn unanswered_note(&self, check: usize) -> String {
        let timeout = common::duration::duration_text(self.timeout);
        let (watch, error, risk, fix) = if check == AGENTS {
            (
                format!(
                    "the agent pod watch (--agent-selector {})",
                    self.agent_selector
                ),
                self.agents.as_ref().and_then(AgentPods::failure),
                "a node without a running agent would be cordoned, drained and told to reboot, \
                 and would hold the pool at --reboot-timeout",
                "let the controller list and watch pods, or turn the check off with \
                 --agent-selector=\"\"",
            )
        } else {
            (
                "the PodDisruptionBudget watch (--check-disruption-budgets)".to_owned(),
                self.budgets.as_ref().and_then(DisruptionBudgets::failure),
                "the drain still asks the Eviction API for every pod, so every budget holds, but \
                 a node whose drain cannot finish may stay cordoned until --drain-timeout",
                "let the controller list and watch poddisruptionbudgets (policy) and list pods, \
                 or turn the check off with --check-disruption-budgets=false",
            )
        };
        let error = error
            .map(|e| format!(" (last error: {e})"))
            .unwrap_or_default();
        format!(
            "granted without the pre-flight check: {watch} has failed for {timeout} \
             (--preflight-timeout) without listing{error}: {risk}. Fix: {fix}"
        )
    }
}

/// The gauges of one reading: the nodes each check holds, and the checks without an answer.
fn publish(metrics: &Metrics, held: &BTreeMap<String, Preflight>, unanswered: [bool; 2]) {
    for (check, name) in [
        (Preflight::NoAgent, CHECKS[AGENTS]),
        (Preflight::DisruptionBudget, CHECKS[BUDGETS]),
        (Preflight::BeingRemoved, "being_removed"),
        (Preflight::Checking, "checking"),
    ] {
        let count = held.values().filter(|c| **c == check).count();
        metrics.preflight_held(name, count);
    }
    for (name, silent) in CHECKS.into_iter().zip(unanswered) {
        metrics.preflight_unanswered(name, silent);
    }
}

fn borrowed<T>(check: &Check<T>) -> Check<&T> {
    match check {
        Check::Off => Check::Off,
        Check::Checking => Check::Checking,
        Check::Unanswered => Check::Unanswered,
        Check::Known(t) => Check::Known(t),
    }
}

fn requested(view: &NodeView) -> bool {
    view.state.request == common::Request::Needed && view.state.grant.is_none()
}

/// Which requested nodes without a grant a check holds. A check without an answer holds
/// every such node while it is `Checking`, none once `Unanswered`; with `force`
/// (`--force-reboot`) a refused pod holds no node.
pub fn held(
    views: &[NodeView],
    agents: Check<&BTreeMap<String, bool>>,
    budgets: Check<&BTreeMap<String, Vec<Refused>>>,
    force: bool,
) -> BTreeMap<String, Preflight> {
    views
        .iter()
        .filter(|v| requested(v))
        .filter_map(|v| {
            let name = v.name();
            let agent = match agents {
                Check::Off | Check::Unanswered => None,
                Check::Checking => Some(Preflight::Checking),
                // A NotReady node's pods are all marked not Ready: a Running one will do.
                Check::Known(nodes) => match nodes.get(name) {
                    Some(true) => None,
                    Some(false) if v.facts.readiness != common::Readiness::Ready => None,
                    _ => Some(Preflight::NoAgent),
                },
            };
            let budget = match budgets {
                _ if force => None,
                Check::Off | Check::Unanswered => None,
                Check::Checking => Some(Preflight::Checking),
                Check::Known(by_node) => by_node
                    .contains_key(name)
                    .then_some(Preflight::DisruptionBudget),
            };
            // Whatever the checks say: the node is going away.
            let removed = autoscaler::removal_taint(&v.facts).map(|_| Preflight::BeingRemoved);
            Some((name.to_owned(), removed.or(agent).or(budget)?))
        })
        .collect()
}

impl PreflightReading {
    /// The pods of `node` the Eviction API would refuse to evict, said in a sentence: the
    /// first few, and how many more.
    fn refusals(&self, node: &str) -> String {
        let refused = self
            .refused
            .get(node)
            .map(Vec::as_slice)
            .unwrap_or_default();
        let said: Vec<String> = refused.iter().map(ToString::to_string).collect();
        crate::drain::name_list(&said, "; ", crate::drain::NAMES_IN_EVENT)
    }

    /// The Event of a node a check holds; none while a check cannot tell yet.
    pub fn event(&self, node: &str) -> Option<(Reason, String)> {
        match self.held.get(node)? {
            Preflight::Checking => None,
            Preflight::NoAgent => Some((
                Reason::NoAgent,
                format!(
                    "{NOTE_REQUESTED}not cordoned: no agent pod ({}) is running and Ready on \
                     the node, so nothing would take reboot-now; another node may go first (is \
                     the reboot-agent DaemonSet scheduled here?)",
                    self.agent_selector
                ),
            )),
            Preflight::BeingRemoved => Some((
                Reason::NodeBeingRemoved,
                format!(
                    "{NOTE_REQUESTED}not cordoned: an autoscaler is removing the node (its {} \
                     taint), and a reboot would race its removal; it is granted if the taint \
                     goes and the node stays",
                    autoscaler::REMOVAL_TAINTS.join(" or ")
                ),
            )),
            Preflight::DisruptionBudget => Some((
                Reason::DisruptionBudget,
                format!(
                    "{NOTE_REQUESTED}not cordoned: the Eviction API would refuse to evict {}, \
                     so its drain could not finish; another node may go first, and this one goes \
                     once the pod can be evicted",
                    self.refusals(node)
                ),
            )),
        }
    }

    /// The Events of a node granted this round: a Warning for each check without an answer
    /// that it goes without, and that of a forced drain.
    pub fn grant_events(&self, node: &str) -> Vec<(Reason, String)> {
        let unanswered = self.unanswered.iter().cloned();
        unanswered
            .map(|note| (Reason::PreflightUnanswered, note))
            .chain(self.forced_event(node))
            .collect()
    }

    /// The Event of a node granted though the Eviction API would refuse to evict one of its
    /// pods (`--force-reboot`), if it is one.
    fn forced_event(&self, node: &str) -> Option<(Reason, String)> {
        if !self.force || !self.refused.contains_key(node) {
            return None;
        }
        Some((
            Reason::DisruptionBudget,
            format!(
                "granted although the Eviction API would refuse to evict {}: with --force-reboot \
                 the node is cordoned and drained, and once --drain-timeout ({}) has passed it \
                 is rebooted with the pods its drain could not evict",
                self.refusals(node),
                common::duration::duration_text(self.drain_timeout)
            ),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gates::refusal::Refusal;
    use common::test_util::NodeBuilder;
    use serde_json::json;

    fn pod(name: &str, node: &str, phase: &str, ready: bool) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "ops", "labels": {"app": "db"}},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "db:1"}]},
            "status": {"phase": phase, "conditions": [
                {"type": "Ready", "status": if ready { "True" } else { "False" }}]},
        }))
        .unwrap()
    }

    /// `ops/db` on `app=db`: minAvailable 2 of 3 with one replica not Ready (at 0).
    fn budget_at_zero() -> PodDisruptionBudget {
        serde_json::from_value(json!({
            "metadata": {"name": "db", "namespace": "ops", "generation": 1},
            "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "db"}}},
            "status": {"observedGeneration": 1, "disruptionsAllowed": 0, "currentHealthy": 2,
                       "desiredHealthy": 2, "expectedPods": 3},
        }))
        .unwrap()
    }

    #[test]
    fn only_a_running_ready_agent_counts_and_a_running_one_on_a_not_ready_node() {
        let pods = [
            pod("a", "n1", "Running", true),
            pod("b", "n2", "Running", false),
            pod("c", "n3", "Pending", false),
        ];
        let nodes = agent_nodes(&pods);
        assert_eq!(
            nodes,
            BTreeMap::from([("n1".to_owned(), true), ("n2".to_owned(), false)])
        );
    }

    #[test]
    fn daemonset_mirror_and_finished_pods_are_not_read_and_the_rest_is_trimmed() {
        let mut ds = pod("ds", "n1", "Running", true);
        ds.metadata.owner_references = Some(vec![
            serde_json::from_value(json!({
            "apiVersion": "apps/v1", "kind": "DaemonSet", "name": "x", "uid": "u",
            "controller": true}))
            .unwrap(),
        ]);
        let done = pod("done", "n2", "Succeeded", false);
        let mut unbound = pod("unbound", "n3", "Pending", false);
        unbound.spec.as_mut().unwrap().node_name = None;
        let db = pod("db", "n4", "Running", true);
        let kept = evicted(vec![ds, done, unbound, db]);
        assert_eq!(kept.len(), 1, "{kept:?}");
        assert_eq!(key(&kept[0]), "ops/db");
        assert!(kept[0].spec.as_ref().unwrap().containers.is_empty());
        assert!(refusal(&kept[0], [&budget_at_zero()]).is_some());
    }

    #[test]
    fn a_node_is_refused_only_for_the_pods_the_eviction_api_would_refuse() {
        let pods = [
            // The replica that is not Ready: evicted, the budget has its 2 healthy pods.
            pod("db-0", "n1", "Running", false),
            pod("db-1", "n2", "Running", true),
            // Pending: evicted whatever the budget.
            pod("db-2", "n3", "Pending", false),
        ];
        let pdb = budget_at_zero();
        let refused = refused_by_node(&pods, [&pdb]);
        assert_eq!(
            refused,
            BTreeMap::from([(
                "n2".to_owned(),
                vec![Refused {
                    pod: "ops/db-1".into(),
                    refusal: Refusal::NoDisruption {
                        budget: "ops/db".into(),
                        desired: 2,
                        current: 2
                    },
                }]
            )])
        );
    }

    fn requested(name: &str) -> NodeView {
        let facts = NodeBuilder::new(name)
            .annotation("reboot-needed", "true")
            .facts();
        NodeView {
            state: facts.protocol(&common::AnnotationKeys::default()),
            facts,
            in_pool: true,
            shared: false,
            requested_at: Some(0),
            not_before: None,
            drain: controller_core::decide::DrainState::NotStarted,
            zone: None,
            opt_out: common::OptOut::No,
            ready_since: Some(0),
            approved_at: None,
            fresh: false,
            claimed_at: None,
            drained_at: None,
        }
    }

    #[test]
    fn an_error_said_in_an_event_is_cut_to_a_few_hundred_bytes() {
        let listing = Listing::default();
        listing.record_error("é".repeat(400));
        let error = listing.last_error().unwrap();
        assert!(error.len() <= ERROR_BYTES, "{} bytes", error.len());
        assert!(error.ends_with("é..."), "{error}");
    }

    #[test]
    fn a_check_without_an_answer_holds_until_its_bound_then_holds_nothing() {
        let mut silence = Silence::default();
        assert_eq!(
            silence.hear::<()>(None, true, 1_000, 120_000),
            Check::Checking
        );
        assert_eq!(silence.ends_at(1_000, 120_000), Some(121_000));
        assert_eq!(
            silence.hear::<()>(None, true, 120_999, 120_000),
            Check::Checking
        );
        assert_eq!(
            silence.hear::<()>(None, true, 121_000, 120_000),
            Check::Unanswered
        );
        assert_eq!(silence.ends_at(121_000, 120_000), None);
        // An answer ends the silence; the next one counts from its own start.
        assert_eq!(
            silence.hear(Some(7), true, 130_000, 120_000),
            Check::Known(7)
        );
        assert_eq!(silence.ends_at(130_000, 120_000), None);
        assert_eq!(
            silence.hear::<()>(None, true, 140_000, 120_000),
            Check::Checking
        );
        assert_eq!(
            silence.hear::<()>(None, true, 259_999, 120_000),
            Check::Checking
        );
        // A watch that stops failing (it lists, slowly) holds again with no bound.
        assert_eq!(
            silence.hear::<()>(None, false, 260_000, 120_000),
            Check::Checking
        );
        assert_eq!(silence.ends_at(260_000, 120_000), None);
        assert_eq!(
            silence.hear::<()>(None, false, 900_000, 120_000),
            Check::Checking
        );

        let views = [requested("a")];
        let (no_agents, no_refusals) = (BTreeMap::from([("a".to_owned(), true)]), BTreeMap::new());
        let (agents, budgets) = (Check::Known(&no_agents), Check::Known(&no_refusals));
        let nothing: BTreeMap<String, Preflight> = BTreeMap::new();
        let checking = BTreeMap::from([("a".to_owned(), Preflight::Checking)]);
        assert_eq!(held(&views, Check::Checking, budgets, false), checking);
        assert_eq!(held(&views, Check::Unanswered, budgets, false), nothing);
        assert_eq!(held(&views, Check::Off, Check::Checking, false), checking);
        assert_eq!(held(&views, agents, Check::Unanswered, false), nothing);
    }

    #[test]
    fn a_node_with_many_refused_pods_names_a_few_and_says_how_many_more() {
        let pods: Vec<Pod> = (0..60)
            .map(|i| pod(&format!("db-{i:02}"), "n1", "Running", true))
            .collect();
        let pdb = budget_at_zero();
        let refused = refused_by_node(&pods, [&pdb]);
        let reading = |force| PreflightReading {
            held: BTreeMap::from([("n1".to_owned(), Preflight::DisruptionBudget)]),
            refused: refused.clone(),
            force,
            drain_timeout: Duration::from_secs(900),
            ..PreflightReading::default()
        };
        let (_, held) = reading(false).event("n1").unwrap();
        let (_, forced) = reading(true).forced_event("n1").unwrap();
        for note in [held, forced] {
            assert!(note.len() <= 1024, "{} bytes: {note}", note.len());
            assert!(
                note.contains("the pod ops/db-00: the PodDisruptionBudget ops/db"),
                "{note}"
            );
            assert!(note.contains(" more"), "{note}");
        }
    }

    /// The agent check over a watch fed by hand, bounded by `timeout`.
    fn agent_check(listing: &Listing, timeout: Duration) -> PreflightChecks {
        let (store, _writer) = reflector::store();
        PreflightChecks {
            agents: Some(AgentPods {
                store,
                listing: listing.clone(),
            }),
            timeout,
            ..PreflightChecks::default()
        }
    }

    #[test]
    fn a_slow_list_holds_its_nodes_past_the_bound_and_only_a_failing_one_fails_open() {
        let metrics = Metrics::new().0;
        let views = [requested("a")];
        let checking = BTreeMap::from([("a".to_owned(), Preflight::Checking)]);
        // A bound typed too short (120ms for 120s): a list that is merely slow still holds.
        let slow = Listing::default();
        let mut checks = agent_check(&slow, Duration::from_millis(120));
        for now in [0, 100, 5_000, 600_000] {
            let reading = checks.read(&views, &metrics, now);
            assert_eq!(reading.held, checking, "at {now} ms");
            assert!(reading.unanswered.is_empty(), "at {now} ms");
        }
        // A list that fails holds until the bound has passed since it was seen failing.
        let failing = Listing::default();
        let mut checks = agent_check(&failing, Duration::from_secs(120));
        assert_eq!(checks.read(&views, &metrics, 1_000).held, checking);
        failing.record_error("pods is forbidden (403)".to_owned());
        assert_eq!(checks.read(&views, &metrics, 5_000).held, checking);
        assert_eq!(checks.read(&views, &metrics, 124_999).held, checking);
        let open = checks.read(&views, &metrics, 125_000);
        assert!(open.held.is_empty(), "{:?}", open.held);
        assert!(open.unanswered[0].contains("pods is forbidden"), "{open:?}");
    }

    #[tokio::test]
    async fn a_watch_that_lists_again_forgets_its_last_error() {
        let listing = Listing::default();
        let status: kube::core::Status =
            serde_json::from_value(json!({"message": "pods is forbidden", "code": 403})).unwrap();
        let events: Vec<Result<watcher::Event<Pod>, watcher::Error>> = vec![
            Err(watcher::Error::WatchError(Box::new(status))),
            Ok(watcher::Event::Init),
            Ok(watcher::Event::InitDone),
        ];
        let changed = Arc::new(Notify::new());
        let metrics = Metrics::new().0;
        let stream = futures::stream::iter(events);
        follow(
            stream,
            "test".into(),
            "pod",
            listing.clone(),
            &metrics,
            changed,
        );
        while !listing.is_listed() {
            tokio::task::yield_now().await;
        }
        assert_eq!(listing.last_error(), None);
    }

    #[test]
    fn a_node_an_autoscaler_is_removing_is_held_whatever_the_checks_and_force_say() {
        let mut removed = requested("gone");
        removed.facts = NodeBuilder::new("gone")
            .annotation("reboot-needed", "true")
            .taint("ToBeDeletedByClusterAutoscaler", "NoSchedule")
            .facts();
        let views = [removed, requested("stays")];
        let expected = BTreeMap::from([("gone".to_owned(), Preflight::BeingRemoved)]);
        for (agents, force) in [(Check::Off, false), (Check::Unanswered, true)] {
            assert_eq!(held(&views, agents, Check::Off, force), expected);
        }
        let reading = PreflightReading {
            held: expected,
            ..PreflightReading::default()
        };
        let (reason, note) = reading.event("gone").expect("an Event");
        assert_eq!(reason, Reason::NodeBeingRemoved);
        assert!(
            note.contains("ToBeDeletedByClusterAutoscaler or karpenter.sh/disrupted"),
            "{note}"
        );
        assert_eq!(reading.event("stays"), None);
    }

    #[test]
    fn a_granted_node_is_told_of_each_check_without_an_answer_it_goes_without() {
        let note = "granted without the pre-flight check: the PodDisruptionBudget watch ...";
        let reading = PreflightReading {
            unanswered: vec![note.to_owned()],
            ..PreflightReading::default()
        };
        assert_eq!(
            reading.grant_events("n1"),
            [(Reason::PreflightUnanswered, note.to_owned())]
        );
        assert!(PreflightReading::default().grant_events("n1").is_empty());
    }

    #[test]
    fn with_force_a_refused_pod_holds_no_node_and_its_event_says_the_drain_is_forced() {
        let views = [requested("n2"), requested("n3")];
        let pods = [pod("db-1", "n2", "Running", true)];
        let pdb = budget_at_zero();
        let refused = refused_by_node(&pods, [&pdb]);
        let held_n2 = BTreeMap::from([("n2".to_owned(), Preflight::DisruptionBudget)]);
        assert_eq!(
            held(&views, Check::Off, Check::Known(&refused), false),
            held_n2
        );
        assert!(held(&views, Check::Off, Check::Known(&refused), true).is_empty());
        // Even a budget check that cannot answer yet holds nothing with force.
        assert!(held(&views, Check::Off, Check::Checking, true).is_empty());

        let reading = |force| PreflightReading {
            held: if force {
                BTreeMap::new()
            } else {
                held_n2.clone()
            },
            refused: refused.clone(),
            force,
            drain_timeout: Duration::from_secs(900),
            ..PreflightReading::default()
        };
        let (_, note) = reading(false).event("n2").unwrap();
        assert!(
            note.contains("the pod ops/db-1") && note.contains("PodDisruptionBudget ops/db"),
            "{note}"
        );
        assert_eq!(reading(false).forced_event("n2"), None);
        let (reason, note) = reading(true).forced_event("n2").unwrap();
        assert_eq!(reason, Reason::DisruptionBudget);
        assert!(
            note.contains("the pod ops/db-1") && note.contains("--drain-timeout (15m)"),
            "{note}"
        );
        assert_eq!(reading(true).forced_event("n3"), None);
    }
}
