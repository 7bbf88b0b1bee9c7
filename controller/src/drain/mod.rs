//! Draining a node before its reboot, with `kubectl drain` semantics: every pod on the node is
//! evicted through the Eviction API (policy/v1), so PodDisruptionBudgets hold; DaemonSet pods
//! and mirror pods stay; the drain waits until the evicted pods are gone, and gives up after
//! `--drain-timeout`, naming the pods that blocked it. On a node that is not Ready, a pod whose
//! deletion nobody confirms (its kubelet hangs) counts as gone once its grace period plus
//! `--drain-skip-wait-for-delete-margin` has passed, as `kubectl drain
//! --skip-wait-for-delete-timeout` does: rebooting such a node is what cures it.
//!
//! The node's pods are kept by one watch (a consistent list to start with, then the changes),
//! so the requests a drain makes do not grow with the time its pods take to terminate: a node
//! with nothing to evict costs one request, and each pod to evict one eviction more (plus, for
//! the whole drain, one read of the node before its evictions and one `Draining` Event).

pub mod budgets;
pub mod node_pods;
pub mod tracker;

use crate::{
    cluster::{
        events::{Events, Reason},
        leader::Leadership,
    },
    drain::{
        budgets::{DisruptionBudgetWatch, RefusedAt, next_change},
        node_pods::{NodePods, WatchError, pod_key, uid},
    },
    metrics::Metrics,
};
use backon::{BackoffBuilder, ExponentialBackoff, ExponentialBuilder};
use common::AnnotationKeys;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::{
    Api, Client, Resource, ResourceExt,
    api::{DeleteParams, EvictParams},
};
use observability::ApiErrorKind;
use std::{
    collections::{BTreeMap, HashMap, HashSet},
    sync::{Arc, Mutex, atomic::AtomicBool},
    time::{Duration, Instant},
};

/// The drain flags.
#[derive(Debug, Clone)]
pub struct DrainSettings {
    pub timeout: Duration,
    /// Overrides each pod's own termination grace period.
    pub grace_period: Option<Duration>,
    /// Only pods matching this label selector are evicted.
    pub pod_selector: Option<String>,
    /// On a node that is not Ready, a pod seen terminating for its grace period plus this
    /// counts as gone; `None`: every pod is waited for.
    pub skip_wait_for_delete_margin: Option<Duration>,
    /// The longest wait between two tries of an eviction that a PodDisruptionBudget refused,
    /// when the budget watch does not show the budget free first.
    pub eviction_retry_max_delay: Duration,
}

/// How a drain ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DrainOutcome {
    /// No pod to evict is left, for the node at this version: it held the grant then, and
    /// every pod bound to it up to that version is gone. The drain stands only while the node
    /// stays at it (an uncordon lets pods back).
    Drained {
        evicted: usize,
        /// Pods (`namespace/name`) counted as gone without their deletion confirmed: the node
        /// was not Ready and they were terminating longer than their grace period plus the
        /// margin.
        unconfirmed: Vec<String>,
        node_version: Option<String>,
    },
    /// Timed out; each blocking pod (`namespace/name`) with the reason it is still there.
    TimedOut {
        blocking: BTreeMap<String, String>,
        /// The newest version of the node known to hold the grant (as `Drained`'s): where a
        /// `--force-reboot` promotion stands.
        node_version: Option<String>,
    },
    /// The node no longer holds the grant this drain was for (cancelled, or released by
    /// another controller): nothing more is evicted for it.
    Superseded,
}

pub use common::eviction::{Disposition, disposition};

/// Drains one node per call; many calls run at once, one per slot.
#[derive(Clone)]
pub struct Drainer {
    client: Client,
    keys: AnnotationKeys,
    settings: DrainSettings,
    events: Events,
    metrics: Metrics,
    /// No eviction once this replica no longer leads (the task is aborted soon after).
    leadership: Leadership,
    /// Whether the API server has streaming lists, as far as is known.
    streaming: Arc<AtomicBool>,
    /// The PodDisruptionBudgets, when the pre-flight check watches them.
    budgets: Option<Arc<dyn DisruptionBudgetWatch>>,
    /// By pod uid: when a drain of this replica first saw the pod terminating. A fact about
    /// the pod, not a drain's progress: a drain started again (the node changed) does not
    /// wait for the grace period over again.
    terminating_since: Arc<Mutex<HashMap<String, Instant>>>,
}

/// Sightings of terminating pods are forgotten after this long (a pod stuck on a node that is
/// never rebooted); one seen again counts from then, which only waits longer.
const FORGET_TERMINATING_AFTER: Duration = Duration::from_secs(24 * 3600);

/// Between two tries of a request that failed: an eviction that a PodDisruptionBudget refused
/// (429), a read of the node, the watch of its pods. Short at first, since a budget frees up as
/// soon as a replacement is Ready, then doubling up to 5 s (as `kubectl drain` waits) so that a
/// stuck budget or a struggling API server is not hammered.
/// A refused eviction waits up to `--eviction-retry-max-delay` instead (5 s by default), from a
/// 25th of it, unless the budget watch shows its budget free first.
fn retry_backoff(max: Duration) -> ExponentialBackoff {
    let min = max / 25;
    ExponentialBuilder::new()
        .with_min_delay(min)
        .with_max_delay(max)
        .without_max_times()
        .build()
}

/// The longest wait between two tries of a node read or of the watch of its pods.
const RETRY_MAX_DELAY: Duration = Duration::from_secs(5);

/// A request that failed, and when to try it again.
#[derive(Debug)]
struct RequestBackoff {
    backoff: ExponentialBackoff,
    max: Duration,
    at: Option<Instant>,
}

impl RequestBackoff {
    fn new() -> Self {
        Self::up_to(RETRY_MAX_DELAY)
    }

    fn up_to(max: Duration) -> Self {
        Self {
            backoff: retry_backoff(max),
            max,
            at: None,
        }
    }

    fn due(&self) -> bool {
        self.at.is_none_or(|at| Instant::now() >= at)
    }

    fn failed(&mut self) {
        let wait = self.backoff.next().unwrap_or(self.max);
        self.at = Some(Instant::now() + wait);
    }

    fn succeeded(&mut self) {
        *self = Self::up_to(self.max);
    }
}

/// An Event names pods (to evict, or that hold a node) up to about this many bytes.
pub(crate) const NAMES_IN_EVENT: usize = 600;

/// Why a pod's eviction was refused, and when to try it again.
#[derive(Debug)]
struct Refusal {
    why: String,
    retry: RequestBackoff,
    /// Refused by a PodDisruptionBudget, at these versions of the pod's budgets: tried again
    /// as soon as they change to let it go.
    budgets: Option<RefusedAt>,
}

/// Why the API server refused an eviction.
#[derive(Debug)]
struct EvictionRefused {
    why: String,
    /// A PodDisruptionBudget refused it (the 429's cause says so).
    by_budget: bool,
}

/// What one drain has done so far.
#[derive(Debug)]
struct Progress {
    /// The newest version of the node known to hold the grant whose pods the view covers: the
    /// node as the drain started (see [`Drainer::drain`]), or as read before an eviction.
    vouched: Option<String>,
    /// Whether the node was Ready at `vouched`: a terminating pod of a node that is not may
    /// count as gone. Ready at the version the drain stands for, as the promotion `test`s it.
    vouched_ready: bool,
    /// The latest read of the node before an eviction, until the view covers it.
    read: Option<String>,
    read_ready: bool,
    /// Pods evicted (by uid).
    evicted: HashSet<String>,
    /// By uid: the pods whose eviction was refused.
    refused: HashMap<String, Refusal>,
    warned_unmanaged: HashSet<String>,
    announced: bool,
    /// Why the view of the pods is not current, while it is not.
    watch_trouble: Option<String>,
    watch_retry: RequestBackoff,
    read_retry: RequestBackoff,
}

impl Progress {
    fn new(started_at: Option<String>, ready: bool) -> Self {
        Self {
            vouched: started_at,
            vouched_ready: ready,
            read: None,
            read_ready: ready,
            evicted: HashSet::new(),
            refused: HashMap::new(),
            warned_unmanaged: HashSet::new(),
            announced: false,
            watch_trouble: None,
            watch_retry: RequestBackoff::new(),
            read_retry: RequestBackoff::new(),
        }
    }

    /// The node read at `version` before evictions: it stands for the drain once the view of
    /// the pods covers it.
    fn node_read(&mut self, version: String, ready: bool, pods: &NodePods) {
        self.read = Some(version);
        self.read_ready = ready;
        self.vouch(pods);
    }

    /// The node read before the latest evictions held the grant then; once the view of the
    /// pods covers that version (it always does once the pods evicted after it are seen gone,
    /// their deletions being later), an empty view means no pod is bound to the node at it.
    fn vouch(&mut self, pods: &NodePods) {
        if self.read.as_deref().is_some_and(|read| pods.covers(read)) {
            self.vouched = self.read.take();
            self.vouched_ready = self.read_ready;
        }
    }

    /// When `pod` is to be evicted: now, or once its last refusal is old enough; never if it
    /// was evicted or is terminating.
    fn due_at(&self, pod: &Pod) -> Option<Instant> {
        let id = uid(pod);
        if pod.metadata.deletion_timestamp.is_some() || self.evicted.contains(&id) {
            return None;
        }
        Some(
            self.refused
                .get(&id)
                .and_then(|r| r.retry.at)
                .unwrap_or_else(Instant::now),
        )
    }

    fn due(&self, pod: &Pod) -> bool {
        self.due_at(pod).is_some_and(|at| Instant::now() >= at)
    }

    fn refused(&mut self, pod: &Pod, why: String, budgets: Option<RefusedAt>, max: Duration) {
        let refusal = self.refused.entry(uid(pod)).or_insert_with(|| Refusal {
            why: String::new(),
            retry: RequestBackoff::up_to(max),
            budgets: None,
        });
        refusal.why = why;
        refusal.budgets = budgets;
        refusal.retry.failed();
    }

    /// Whether an eviction waits on a budget the watch may show free.
    fn waits_on_budgets(&self) -> bool {
        self.refused.values().any(|r| r.budgets.is_some())
    }

    /// A budget changed: each pod refused by a budget of its own that now lets it go is due
    /// at once (its backoff kept, should it be refused again).
    fn budgets_changed(&mut self, watch: &dyn DisruptionBudgetWatch, pods: &NodePods) -> usize {
        let mut freed = 0;
        for (pod, _) in pods.to_evict() {
            let Some(refusal) = self.refused.get_mut(&uid(pod)) else {
                continue;
            };
            if refusal
                .budgets
                .as_ref()
                .is_some_and(|at| watch.frees(pod, at))
            {
                refusal.budgets = None;
                refusal.retry.at = None;
                freed += 1;
            }
        }
        freed
    }

    /// Each pod still to evict (`namespace/name`) with why it is still there.
    fn blocking(&self, pods: &NodePods) -> BTreeMap<String, String> {
        let mut blocking: BTreeMap<String, String> = pods
            .to_evict()
            .into_iter()
            .map(|(pod, _)| {
                let id = uid(pod);
                let why = if pod.metadata.deletion_timestamp.is_some() || self.evicted.contains(&id)
                {
                    "evicted; still terminating".to_owned()
                } else if let Some(refusal) = self.refused.get(&id) {
                    refusal.why.clone()
                } else {
                    "not evicted yet".to_owned()
                };
                (pod_key(pod), why)
            })
            .collect();
        if let Some(trouble) = &self.watch_trouble {
            blocking.insert("(pod watch)".into(), trouble.clone());
        }
        blocking
    }

    /// When the drain has something to do next, if nothing changes before: the watch may be
    /// opened again, a pod is due for eviction (while this replica leads; it is woken when it
    /// leads again otherwise), or the time is up.
    fn next_wake(&self, pods: &NodePods, deadline: Instant, leading: bool) -> Instant {
        let mut wake = deadline;
        if !pods.watching() {
            wake = wake.min(self.watch_retry.at.unwrap_or_else(Instant::now));
        }
        if leading && pods.listed() {
            let due = pods
                .to_evict()
                .into_iter()
                .filter_map(|(p, _)| self.due_at(p))
                .min();
            if let Some(due) = due {
                wake = wake.min(self.read_retry.at.map_or(due, |read| read.max(due)));
            }
        }
        wake
    }
}

/// `a, b, c` (joined by `separator`), or `a, b and 5 more` once the names pass `limit` bytes.
pub(crate) fn name_list(names: &[String], separator: &str, limit: usize) -> String {
    let mut text = String::new();
    for (i, name) in names.iter().enumerate() {
        if i > 0 && text.len() + name.len() > limit {
            return format!("{text} and {} more", names.len() - i);
        }
        if i > 0 {
            text.push_str(separator);
        }
        text.push_str(name);
    }
    text
}

impl std::fmt::Debug for Drainer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Drainer")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl Drainer {
    pub fn new(
        client: Client,
        keys: AnnotationKeys,
        settings: DrainSettings,
        events: Events,
        metrics: Metrics,
        leadership: Leadership,
    ) -> Self {
        Self {
            client,
            keys,
            settings,
            events,
            metrics,
            leadership,
            streaming: Arc::new(AtomicBool::new(true)),
            budgets: None,
            terminating_since: Arc::new(Mutex::new(HashMap::new())),
        }
    }

    /// A refused eviction is tried again as soon as `budgets` shows its budget free.
    #[must_use]
    pub fn watching_budgets(mut self, budgets: Option<Arc<dyn DisruptionBudgetWatch>>) -> Self {
        self.budgets = budgets;
        self
    }

    /// How long this replica has seen each terminating pod terminating (from now on for
    /// those seen for the first time); pods not terminating are left out.
    fn seen_terminating(&self, pods: &[(&Pod, bool)], now: Instant) -> HashMap<String, Duration> {
        let mut since = self
            .terminating_since
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut seen = HashMap::new();
        for (pod, _) in pods {
            if pod.metadata.deletion_timestamp.is_some() {
                let first = *since.entry(uid(pod)).or_insert(now);
                seen.insert(uid(pod), now.saturating_duration_since(first));
            }
        }
        if since.len() > 2 * seen.len() + 64 {
            since.retain(|_, first| {
                now.saturating_duration_since(*first) < FORGET_TERMINATING_AFTER
            });
        }
        seen
    }

    /// The pods among `to_evict` that count as gone though nobody confirmed their deletion
    /// (see [`common::eviction::counts_as_gone`]), and when the next one will, if the node
    /// stays as it is.
    fn unconfirmed(
        &self,
        to_evict: &[(&Pod, bool)],
        node_ready: bool,
    ) -> (Vec<String>, Option<Instant>) {
        let margin = self.settings.skip_wait_for_delete_margin;
        if margin.is_none() {
            return (Vec::new(), None);
        }
        let now = Instant::now();
        let seen = self.seen_terminating(to_evict, now);
        if node_ready {
            return (Vec::new(), None);
        }
        let mut gone = Vec::new();
        let mut next: Option<Instant> = None;
        for (pod, _) in to_evict {
            let Some(for_) = seen.get(&uid(pod)).copied() else {
                continue;
            };
            if common::eviction::counts_as_gone(pod, node_ready, for_, margin) {
                gone.push(pod_key(pod));
            } else if let Some(wait) = common::eviction::unconfirmed_deletion_wait(pod, margin) {
                let at = now + wait.saturating_sub(for_);
                next = Some(next.map_or(at, |n| n.min(at)));
            }
        }
        (gone, next)
    }

    fn node_pods(&self, node: &str) -> NodePods {
        NodePods::new(
            self.client.clone(),
            node,
            self.settings.pod_selector.clone(),
            self.streaming.clone(),
        )
    }

    /// The pods a drain of `node` would evict now (`--dry-run`), as `namespace/name`: the
    /// first list a drain makes.
    pub async fn would_evict(&self, node: &str) -> Result<Vec<String>, WatchError> {
        let mut pods = self.node_pods(node);
        pods.list(Instant::now() + Duration::from_secs(60)).await?;
        Ok(pods
            .to_evict()
            .into_iter()
            .map(|(p, _)| pod_key(p))
            .collect())
    }

    fn evict_params(&self) -> EvictParams {
        // Whole seconds, rounded up: a grace period never shrinks below what was asked.
        let grace = self.settings.grace_period.map(|g| {
            u32::try_from(g.as_secs() + u64::from(g.subsec_nanos() > 0)).unwrap_or(u32::MAX)
        });
        EvictParams {
            delete_options: grace.map(|g| DeleteParams {
                grace_period_seconds: Some(g),
                ..DeleteParams::default()
            }),
            ..EvictParams::default()
        }
    }

    /// The node's version, read now, if it still carries `grant`: evictions are for that
    /// grant only.
    /// With whether it is Ready then.
    async fn still_holds(
        &self,
        node: &str,
        grant: &str,
    ) -> Result<Option<(String, bool)>, kube::Error> {
        let current = Api::<Node>::all(self.client.clone()).get(node).await?;
        let holds = current
            .annotations()
            .get(&self.keys.grant)
            .map(String::as_str)
            == Some(grant);
        let ready = common::eviction::node_is_ready(&current);
        Ok(holds.then(|| (current.metadata.resource_version.unwrap_or_default(), ready)))
    }

    /// Evicts until no pod to evict is left on the node, or the timeout passes, or the node no
    /// longer holds `grant`.
    ///
    /// `node` is the copy the round that started the drain decided on: it carried `grant` and
    /// was cordoned. A drain whose first view of the pods has nothing to evict is Drained at
    /// that copy's version, without reading the node again, because:
    /// - the view is a consistent read made after that version was written, so every pod
    ///   bound to the node up to that version, still there, is in it: none is;
    /// - the drain stands only while the node stays at that version (`drain_state_at`): the
    ///   node then still carries `grant` and is cordoned, and `reboot-now` is set by a patch
    ///   that `test`s exactly that version, that grant and the cordon. A node that changed
    ///   meanwhile (uncordoned, so pods may be back; its grant released, or another one
    ///   claimed) is newer: NotStarted, drained again under the grant it holds then, or not
    ///   promoted at all. A pod bound after that version, to the cordoned node, is the race
    ///   `kubectl drain` has too (a scheduler deciding before it saw the cordon): a read of
    ///   the node after the list would not see it either.
    ///
    /// With pods to evict, the node is read before each batch of evictions (an eviction
    /// cannot `test` the node): none is made unless it still carries `grant`. Grant ids are
    /// never reused, so a grant released and another one claimed in between fails that read.
    /// The version read then stands for the drain in place of a read at its end: evictions do
    /// not change the Node, and once the view covers that version (the deletions of the pods
    /// evicted after the read come later) an empty view means no pod bound up to it is left.
    /// If the view never covers it, the drain stands at the version vouched for before (the
    /// start's), which a changed node has left behind: it is drained again, never promoted.
    pub async fn drain(&self, node: &Node, grant: &str) -> DrainOutcome {
        let name = node.name_any();
        let deadline = Instant::now() + self.settings.timeout;
        let mut pods = self.node_pods(&name);
        let mut progress = Progress::new(
            node.metadata.resource_version.clone(),
            common::eviction::node_is_ready(node),
        );
        let mut leadership = self.leadership.clone();
        let mut budget_changes = self.budgets.as_ref().map(|b| b.changes());
        loop {
            if !pods.watching() && progress.watch_retry.due() {
                self.connect(&name, &mut pods, &mut progress, deadline)
                    .await;
            }
            progress.vouch(&pods);
            let mut unconfirmed_at = None;
            if pods.listed() {
                let to_evict = pods.to_evict();
                // Ready or not at the version the drain stands for: the promotion tests it.
                let (unconfirmed, next) = self.unconfirmed(&to_evict, progress.vouched_ready);
                unconfirmed_at = next;
                if to_evict.len() == unconfirmed.len() {
                    self.announce_unconfirmed(node, &unconfirmed);
                    return DrainOutcome::Drained {
                        evicted: progress.evicted.len(),
                        unconfirmed,
                        node_version: progress.vouched,
                    };
                }
                if self.leadership.is_leading() {
                    let due: Vec<(&Pod, bool)> = to_evict
                        .iter()
                        .filter(|(p, _)| progress.due(p))
                        .copied()
                        .collect();
                    if due.is_empty() {
                        // Only pods that are terminating already: wait for them.
                        self.announce(node, &to_evict, &mut progress);
                    } else if progress.read_retry.due() {
                        match self.still_holds(&name, grant).await {
                            Ok(Some((version, ready))) => {
                                progress.read_retry.succeeded();
                                progress.node_read(version, ready, &pods);
                                self.announce(node, &to_evict, &mut progress);
                                self.evict_all(node, &due, &mut progress).await;
                            }
                            Ok(None) => return DrainOutcome::Superseded,
                            Err(error) => {
                                self.metrics.api_error("node", ApiErrorKind::of(&error));
                                tracing::warn!(node = %name, %error, "cannot read the node; retrying");
                                progress.read_retry.failed();
                            }
                        }
                    }
                }
            }
            if Instant::now() >= deadline {
                return DrainOutcome::TimedOut {
                    blocking: progress.blocking(&pods),
                    node_version: progress.vouched,
                };
            }
            let leading = self.leadership.is_leading();
            let mut wake = progress.next_wake(&pods, deadline, leading);
            if let Some(at) = unconfirmed_at {
                wake = wake.min(at);
            }
            let wake = tokio::time::Instant::from_std(wake);
            tokio::select! {
                taken = pods.next_event(), if pods.watching() => {
                    if let Err(error) = taken {
                        self.watch_failed(&name, &error, &mut progress);
                    }
                }
                () = leadership.acquired(), if !leading => {}
                () = next_change(&mut budget_changes), if progress.waits_on_budgets() => {
                    if let Some(budgets) = &self.budgets {
                        let freed = progress.budgets_changed(budgets.as_ref(), &pods);
                        if freed > 0 {
                            tracing::info!(node = %name, pods = freed,
                                "a PodDisruptionBudget allows a disruption now; evicting again");
                        }
                    }
                }
                () = tokio::time::sleep_until(wake) => {}
            }
        }
    }

    /// Lists the node's pods if need be and opens the watch; until the deadline at most.
    async fn connect(
        &self,
        name: &str,
        pods: &mut NodePods,
        progress: &mut Progress,
        deadline: Instant,
    ) {
        let until = tokio::time::Instant::from_std(deadline);
        match tokio::time::timeout_at(until, pods.connect(deadline)).await {
            Ok(Ok(())) => {
                progress.watch_retry.succeeded();
                progress.watch_trouble = None;
            }
            Ok(Err(error)) => self.watch_failed(name, &error, progress),
            Err(_) => {
                progress.watch_trouble = Some("no answer to the watch of its pods".into());
            }
        }
    }

    fn watch_failed(&self, name: &str, error: &WatchError, progress: &mut Progress) {
        self.metrics.api_error("pod", error.kind());
        tracing::warn!(node = %name, %error, "cannot watch the node's pods; retrying");
        progress.watch_trouble = Some(error.to_string());
        progress.watch_retry.failed();
    }

    /// The `Draining` Event, once the drain knows it has pods to evict, naming them.
    fn announce(&self, node: &Node, to_evict: &[(&Pod, bool)], progress: &mut Progress) {
        if progress.announced {
            return;
        }
        progress.announced = true;
        let names: Vec<String> = to_evict.iter().map(|(p, _)| pod_key(p)).collect();
        let plural = if names.len() == 1 { "" } else { "s" };
        let note = format!(
            "cordoned; evicting {} pod{plural}: {}",
            names.len(),
            name_list(&names, ", ", NAMES_IN_EVENT)
        );
        tracing::info!(node = %node.name_any(), pods = names.len(), "{note}");
        self.events.publish(node, Reason::Draining, note);
    }

    /// The `Draining` Event that says which pods were counted as gone without their deletion
    /// confirmed, and why.
    fn announce_unconfirmed(&self, node: &Node, unconfirmed: &[String]) {
        let Some(margin) = self.settings.skip_wait_for_delete_margin else {
            return;
        };
        if unconfirmed.is_empty() {
            return;
        }
        let n = unconfirmed.len();
        let (pods, were) = if n == 1 {
            ("pod", "was")
        } else {
            ("pods", "were")
        };
        let note = format!(
            "node NotReady: {n} {pods} counted as gone though the kubelet did not confirm the \
             deletion ({were} terminating longer than the grace period plus \
             --drain-skip-wait-for-delete-margin={}): {}",
            common::duration::duration_text(margin),
            name_list(unconfirmed, ", ", NAMES_IN_EVENT)
        );
        tracing::info!(node = %node.name_any(), pods = n, "{note}");
        // Not folded into the `Draining` Event that named the pods to evict.
        self.events
            .publish_action(node, Reason::Draining, "CountedAsGone", note);
    }

    /// Evicts each pod, while this replica leads; the node was read just before.
    async fn evict_all(&self, node: &Node, due: &[(&Pod, bool)], progress: &mut Progress) {
        let name = node.name_any();
        for (pod, unmanaged) in due {
            if !self.leadership.is_leading() {
                break;
            }
            let key = pod_key(pod);
            if *unmanaged && progress.warned_unmanaged.insert(uid(pod)) {
                let note =
                    format!("evicting pod {key}: it has no controller, so it will not come back");
                self.events
                    .publish_related(node, Reason::Draining, note, pod.object_ref(&()));
            }
            match self.evict(pod).await {
                Ok(()) => {
                    tracing::info!(node = %name, pod = %key, "evicted");
                    progress.evicted.insert(uid(pod));
                }
                Err(EvictionRefused { why, by_budget }) => {
                    tracing::info!(node = %name, pod = %key, %why, "eviction refused; will retry");
                    let budgets = self.budgets.as_ref().filter(|_| by_budget);
                    let at = budgets.map(|b| b.refused_at(pod));
                    let max = self.settings.eviction_retry_max_delay;
                    progress.refused(pod, why, at, max);
                }
            }
        }
    }

    /// One eviction; `Err` says why the pod stays for now.
    async fn evict(&self, pod: &Pod) -> Result<(), EvictionRefused> {
        let api: Api<Pod> =
            Api::namespaced(self.client.clone(), &pod.namespace().unwrap_or_default());
        let error = match api.evict(&pod.name_any(), &self.evict_params()).await {
            Ok(_) => return Ok(()),
            Err(error) => error,
        };
        let kind = ApiErrorKind::of(&error);
        if kind == ApiErrorKind::NotFound {
            return Ok(());
        }
        self.metrics.api_error("eviction", kind);
        let (why, by_budget) = match (kind, &error) {
            (ApiErrorKind::TooManyRequests, kube::Error::Api(status)) => {
                (budget_message(status), refused_by_budget(status))
            }
            (_, kube::Error::Api(status)) if status.code == 500 => (
                format!(
                    "more than one PodDisruptionBudget selects it, so it cannot be evicted: {}",
                    status.message
                ),
                false,
            ),
            (_, _) => (error.to_string(), false),
        };
        Err(EvictionRefused { why, by_budget })
    }
}

/// A 429 of the Eviction API whose cause is a PodDisruptionBudget (and not, say, the API
/// server's own rate limits).
fn refused_by_budget(status: &kube::core::Status) -> bool {
    let mut causes = status.details.iter().flat_map(|d| d.causes.iter());
    causes.any(|c| c.reason == "DisruptionBudget")
}

/// The API server names the PodDisruptionBudget in the causes of a 429.
fn budget_message(status: &kube::core::Status) -> String {
    let causes: Vec<&str> = status
        .details
        .iter()
        .flat_map(|d| d.causes.iter())
        .map(|c| c.message.as_str())
        .filter(|m| !m.is_empty())
        .collect();
    if causes.is_empty() {
        status.message.clone()
    } else {
        format!("{} ({})", status.message, causes.join("; "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_list_of_pods_is_cut_and_says_how_many_more() {
        let names: Vec<String> = (0..100).map(|i| format!("shop/web-{i:03}")).collect();
        let text = name_list(&names, ", ", 60);
        assert!(text.starts_with("shop/web-000, shop/web-001"), "{text}");
        assert!(text.ends_with(" more"), "{text}");
        let shown = text.matches("shop/web-").count();
        assert!(
            text.ends_with(&format!(" and {} more", 100 - shown)),
            "{text}"
        );
        assert!(text.len() <= 60 + " and 100 more".len(), "{text}");
        assert_eq!(
            name_list(&names[..2], ", ", 60),
            "shop/web-000, shop/web-001"
        );
        // One name is always shown, however long.
        assert_eq!(name_list(&names[..1], ", ", 3), "shop/web-000");
    }
}
