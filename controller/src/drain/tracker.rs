//! The one owner of every drain this replica runs: a drain belongs to one grant of one slot
//! (never to a node name, so a node's next grant is always drained again), from its start to
//! its outcome, and the retry schedule of nodes whose drain failed.

use crate::drain::{DrainOutcome, Drainer};
use backon::{BackoffBuilder, ExponentialBackoff, ExponentialBuilder};
use controller_core::decide::DrainState;
use futures::{FutureExt, future::BoxFuture};
use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;
use std::{
    collections::HashMap,
    fmt,
    sync::Arc,
    time::{Duration, Instant},
};
use tokio::{
    sync::{Notify, mpsc},
    task::JoinHandle,
};
use tracing::Instrument;

/// What runs drains: the [`Drainer`], or the model test's drains, which end when it says.
pub trait Drain: Send + Sync {
    /// Starts draining `node` (the copy the round decided on) for `grant`; the future ends
    /// with the outcome.
    fn start(&self, node: Node, grant: String) -> BoxFuture<'static, DrainOutcome>;
    /// The pods a drain of `node` would evict now (`--dry-run`).
    fn would_evict(&self, node: &str) -> BoxFuture<'_, Result<Vec<String>, String>>;
}

impl Drain for Drainer {
    fn start(&self, node: Node, grant: String) -> BoxFuture<'static, DrainOutcome> {
        let drainer = self.clone();
        async move { drainer.drain(&node, &grant).await }.boxed()
    }

    fn would_evict(&self, node: &str) -> BoxFuture<'_, Result<Vec<String>, String>> {
        let node = node.to_owned();
        async move {
            Drainer::would_evict(self, &node)
                .await
                .map_err(|e| e.to_string())
        }
        .boxed()
    }
}

/// A drain that ended.
#[derive(Debug)]
pub struct Finished {
    pub grant: String,
    /// The node as the drain started.
    pub node: Node,
    pub outcome: DrainOutcome,
    pub took: Duration,
}

/// What a drain's end means beyond its outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ended {
    /// The first time the drain of this grant ended drained (or forced).
    pub first: bool,
    /// Timed out, and the node is rebooted anyway (`--force-reboot`).
    pub forced: bool,
}

#[derive(Debug)]
struct Tracked {
    state: DrainState,
    /// The node's version the drain stands for: it held the grant then, and no pod bound to
    /// it up to then is left (see [`Drainer::drain`]).
    drained_at: Option<String>,
    /// Pods the drain evicted, once it is drained.
    evicted: Option<usize>,
    /// Pods counted as gone without their deletion confirmed (the node was NotReady).
    unconfirmed: usize,
    /// `--force-reboot`: the drain timed out with these pods still on the node, and the node
    /// is rebooted anyway.
    forced: Option<usize>,
    /// The drain timed out (and failed): the pods still on the node, each with why.
    blocking: Vec<String>,
    task: Option<JoinHandle<()>>,
}

/// What a grant's drain ended as: its state, and whether the node is rebooted with pods still
/// on it. Pure: with `force` (`--force-reboot`), a drain that timed out counts as drained at
/// the newest version of the node it vouched for (the promotion `test`s that version, so a
/// node changed since is drained, and timed out, again); without it, it failed.
pub fn settle(outcome: &DrainOutcome, force: bool) -> (DrainState, Option<String>, bool) {
    match outcome {
        DrainOutcome::Drained { node_version, .. } => {
            (DrainState::Drained, node_version.clone(), false)
        }
        DrainOutcome::TimedOut { node_version, .. } if force && node_version.is_some() => {
            (DrainState::Drained, node_version.clone(), true)
        }
        DrainOutcome::TimedOut { .. } | DrainOutcome::Superseded => {
            (DrainState::Failed, None, false)
        }
    }
}

/// After a failed drain, a node waits 30 s, then 60 s, ... at most 15 minutes before its next
/// grant, so that other nodes go first and a stuck PodDisruptionBudget is not hammered.
fn failed_drain_backoff() -> ExponentialBackoff {
    ExponentialBuilder::new()
        .with_min_delay(Duration::from_secs(30))
        .with_max_delay(Duration::from_secs(15 * 60))
        .without_max_times()
        .build()
}

/// When a node whose drain failed may be granted again, growing with each failure.
#[derive(Debug)]
struct RegrantBackoff {
    backoff: ExponentialBackoff,
    not_before: u64,
}

/// Drains by grant, and when nodes whose drain failed may be granted again.
pub struct DrainTracker {
    drainer: Option<Arc<dyn Drain>>,
    grants: HashMap<String, Tracked>,
    retries: HashMap<String, RegrantBackoff>,
    done_tx: mpsc::UnboundedSender<Finished>,
    done_rx: mpsc::UnboundedReceiver<Finished>,
    /// Woken when a drain ends, so the next decision comes at once.
    changed: Arc<Notify>,
    /// `--force-reboot`.
    force: bool,
    /// By grant: when (Unix milliseconds) its drain first ended drained. Kept when the node is
    /// drained again at a newer version (a status update), so that `--reboot-delay` is not
    /// waited over and over.
    drained_since: HashMap<String, u64>,
}

impl fmt::Debug for DrainTracker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DrainTracker")
            .field("enabled", &self.enabled())
            .field("grants", &self.grants)
            .field("retries", &self.retries)
            .finish_non_exhaustive()
    }
}

impl DrainTracker {
    /// `drainer` is `None` with `--drain=false`.
    pub fn new(drainer: Option<Arc<dyn Drain>>, changed: Arc<Notify>) -> Self {
        let (done_tx, done_rx) = mpsc::unbounded_channel();
        Self {
            drainer,
            grants: HashMap::new(),
            retries: HashMap::new(),
            done_tx,
            done_rx,
            changed,
            force: false,
            drained_since: HashMap::new(),
        }
    }

    /// `--force-reboot`: a drain that times out reboots the node anyway.
    #[must_use]
    pub fn forcing(mut self, force: bool) -> Self {
        self.force = force;
        self
    }

    /// When the drain of `grant` first ended drained (Unix milliseconds).
    pub fn drained_since(&self, grant: &str) -> Option<u64> {
        self.drained_since.get(grant).copied()
    }

    pub fn drainer(&self) -> Option<&dyn Drain> {
        self.drainer.as_deref()
    }

    pub fn enabled(&self) -> bool {
        self.drainer.is_some()
    }

    /// Where the drain of `grant` stands for the node as seen at `node_version`. A drain
    /// counts as done only for the very version it ended on: a node that changed since (it
    /// may have been uncordoned, and pods may be back) is drained again; a copy older than
    /// that version waits for the newer one.
    pub fn state(&self, grant: &str, node_version: Option<&str>) -> DrainState {
        let Some(tracked) = self.grants.get(grant) else {
            return DrainState::NotStarted;
        };
        match drain_state_at(tracked.state, tracked.drained_at.as_deref(), node_version) {
            // Forced (`--force-reboot`): the node is rebooted with pods on it anyway, so a newer
            // version (the node lifecycle controller's taint for the cordon, a status update)
            // is not drained, and timed out, again. An uncordon seen meanwhile starts over
            // (`restart`), and the promotion still tests the grant and the cordon.
            DrainState::NotStarted if tracked.forced.is_some() => DrainState::Drained,
            state => state,
        }
    }

    /// The earliest time (in the shell's clock) the node may be granted again.
    pub fn not_before(&self, node: &str) -> Option<u64> {
        self.retries.get(node).map(|r| r.not_before)
    }

    /// Starts draining `node` for `grant`. `node` is the copy the round decided on, which
    /// carries `grant` and is cordoned: a drain that finds nothing to evict stands for that
    /// very version, with no further read (the reasoning is at [`Drainer::drain`]).
    pub fn start(&mut self, node: &Node, grant: &str) {
        let Some(drainer) = &self.drainer else {
            return;
        };
        let done = self.done_tx.clone();
        let changed = self.changed.clone();
        let (node, grant_id) = (node.clone(), grant.to_owned());
        let span = tracing::info_span!("drain", node = %node.name_any(), grant = %grant);
        let drain = drainer.start(node.clone(), grant_id.clone());
        let task = tokio::spawn(
            async move {
                let started = Instant::now();
                let outcome = drain.await;
                let took = started.elapsed();
                let _ = done.send(Finished {
                    grant: grant_id,
                    node,
                    outcome,
                    took,
                });
                changed.notify_one();
            }
            .instrument(span),
        );
        let tracked = Tracked {
            state: DrainState::Running,
            drained_at: None,
            evicted: None,
            unconfirmed: 0,
            forced: None,
            blocking: Vec::new(),
            task: Some(task),
        };
        if let Some(old) = self.grants.insert(grant.to_owned(), tracked) {
            old.task.inspect(JoinHandle::abort);
        }
    }

    /// The drains that ended since the last call (`now`: Unix milliseconds); their grants'
    /// states are updated. With each, whether it is the first end drained of its grant, and
    /// whether the node is rebooted anyway with pods on it (`--force-reboot`).
    pub fn finished(&mut self, now: u64) -> Vec<(Finished, Ended)> {
        let mut ended = Vec::new();
        while let Ok(done) = self.done_rx.try_recv() {
            let Some(tracked) = self.grants.get_mut(&done.grant) else {
                continue;
            };
            tracked.task = None;
            let (state, drained_at, forced) = settle(&done.outcome, self.force);
            tracked.state = state;
            tracked.drained_at = drained_at;
            match &done.outcome {
                DrainOutcome::Drained {
                    evicted,
                    unconfirmed,
                    ..
                } => {
                    tracked.evicted = Some(*evicted);
                    tracked.unconfirmed = unconfirmed.len();
                }
                DrainOutcome::TimedOut { blocking, .. } if forced => {
                    tracked.forced = Some(blocking.len());
                }
                DrainOutcome::TimedOut { blocking, .. } => {
                    tracked.blocking = blocking_list(blocking);
                }
                DrainOutcome::Superseded => {}
            }
            let first =
                state == DrainState::Drained && !self.drained_since.contains_key(&done.grant);
            if first {
                self.drained_since.insert(done.grant.clone(), now);
            }
            ended.push((done, Ended { first, forced }));
        }
        ended
    }

    /// What the `RebootApproved` Event of `grant` says: whether its drain evicted pods.
    pub fn approval_note(&self, grant: &str) -> String {
        let tracked = self.grants.get(grant);
        let evicted = tracked.and_then(|t| t.evicted);
        let forced = tracked.and_then(|t| t.forced);
        let drained = match (self.enabled(), evicted) {
            (false, _) => "node cordoned (drain off)".to_owned(),
            (true, None) if forced.is_some() => format!(
                "drain timed out with {} pod(s) still on the node, rebooted anyway \
                 (--force-reboot)",
                forced.unwrap_or_default()
            ),
            (true, Some(0)) => "node cordoned, no pod to evict".to_owned(),
            (true, Some(1)) => "node drained (1 pod evicted)".to_owned(),
            (true, Some(n)) => format!("node drained ({n} pods evicted)"),
            (true, None) => "node drained".to_owned(),
        };
        let unconfirmed = match tracked.map_or(0, |t| t.unconfirmed) {
            0 => String::new(),
            1 => "; 1 pod counted as gone without its deletion confirmed (node NotReady, \
                  --drain-skip-wait-for-delete-margin)"
                .to_owned(),
            n => format!(
                "; {n} pods counted as gone without their deletion confirmed (node NotReady, \
                 --drain-skip-wait-for-delete-margin)"
            ),
        };
        format!("slot granted and {drained}{unconfirmed}: reboot-now set")
    }

    /// The pods that kept the failed drain of `grant` from finishing, each with why.
    pub fn blocking(&self, grant: &str) -> &[String] {
        self.grants
            .get(grant)
            .map_or(&[], |t| t.blocking.as_slice())
    }

    /// Forgets the drain of `grant` (the node was uncordoned meanwhile: pods may be back).
    pub fn restart(&mut self, grant: &str) {
        if let Some(task) = self.grants.remove(grant).and_then(|t| t.task) {
            task.abort();
        }
        // Cordoned again: the drain, and the delay before `reboot-now`, start over.
        self.drained_since.remove(grant);
    }

    /// Forgets the grants that are no longer in the ledger, stopping their drains.
    pub fn retain(&mut self, live: impl Fn(&str) -> bool) {
        self.drained_since.retain(|grant, _| live(grant));
        self.grants.retain(|grant, tracked| {
            let keep = live(grant);
            if !keep && let Some(task) = tracked.task.take() {
                task.abort();
            }
            keep
        });
    }

    /// The slot of a failed drain was released: the node waits before its next grant.
    pub fn schedule_retry(&mut self, node: &str, now: u64) {
        let retry = self
            .retries
            .entry(node.to_owned())
            .or_insert_with(|| RegrantBackoff {
                backoff: failed_drain_backoff(),
                not_before: now,
            });
        let wait = retry.backoff.next().unwrap_or(Duration::from_secs(15 * 60));
        retry.not_before = now + u64::try_from(wait.as_millis()).unwrap_or(u64::MAX);
    }

    /// The node's reboot was completed: its next failure starts the schedule over.
    pub fn forget_retries(&mut self, node: &str) {
        self.retries.remove(node);
    }
}

/// The pods a drain left, as Events and records name them: `namespace/name: why`.
pub fn blocking_list(blocking: &std::collections::BTreeMap<String, String>) -> Vec<String> {
    blocking
        .iter()
        .map(|(pod, why)| format!("{pod}: {why}"))
        .collect()
}

/// Pure: a drain's state as it applies to the node at `node_version` (see
/// [`DrainTracker::state`]). `drained_at` is a version at which the node held the drain's
/// grant with no pod bound to it left: the version the drain was started with when it found
/// nothing to evict, or the node's last read before evictions (see [`Drainer::drain`]). At
/// that very version the node is exactly as it was then; at a newer one it may have been
/// uncordoned and have pods again, or hold another grant: drained again (`NotStarted`).
pub fn drain_state_at(
    state: DrainState,
    drained_at: Option<&str>,
    node_version: Option<&str>,
) -> DrainState {
    use common::ledger::version_is_newer;
    match state {
        DrainState::Drained if node_version == drained_at => DrainState::Drained,
        DrainState::Drained if version_is_newer(node_version, drained_at) => DrainState::NotStarted,
        DrainState::Drained => DrainState::Running,
        other => other,
    }
}

impl Drop for DrainTracker {
    fn drop(&mut self) {
        for (grant, tracked) in self.grants.drain() {
            if let Some(task) = tracked.task.filter(|t| !t.is_finished()) {
                tracing::info!(%grant, "drain stopped; it resumes from the node's state");
                task.abort();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// Drains that time out at once, vouching for the version they started at.
    struct TimesOut;

    impl Drain for TimesOut {
        fn start(&self, node: Node, _grant: String) -> BoxFuture<'static, DrainOutcome> {
            let version = node.metadata.resource_version;
            async move { timed_out(version.as_deref()) }.boxed()
        }

        fn would_evict(&self, _node: &str) -> BoxFuture<'_, Result<Vec<String>, String>> {
            async { Ok(Vec::new()) }.boxed()
        }
    }

    /// A tracker whose drain of grant `g`, started at the node's version 5, has timed out.
    async fn timed_out_at_5(force: bool) -> (DrainTracker, Vec<Ended>) {
        let changed = Arc::new(Notify::new());
        let mut tracker =
            DrainTracker::new(Some(Arc::new(TimesOut)), changed.clone()).forcing(force);
        let node: Node = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "n", "resourceVersion": "5"}
        }))
        .expect("a node");
        tracker.start(&node, "g");
        changed.notified().await;
        let ended = tracker
            .finished(1_000)
            .into_iter()
            .map(|(_, e)| e)
            .collect();
        (tracker, ended)
    }

    #[tokio::test]
    async fn a_forced_drain_is_not_drained_again_at_later_versions_until_a_new_cordon() {
        let (mut tracker, ended) = timed_out_at_5(true).await;
        let forced = Ended {
            first: true,
            forced: true,
        };
        assert_eq!(ended, vec![forced]);
        assert_eq!(tracker.drained_since("g"), Some(1_000));
        assert_eq!(tracker.state("g", Some("5")), DrainState::Drained);
        // The node lifecycle controller's taint for the cordon, a status update: not drained,
        // and timed out, again.
        assert_eq!(tracker.state("g", Some("6")), DrainState::Drained);
        assert_eq!(tracker.state("g", Some("4")), DrainState::Running);
        // Uncordoned, then cordoned again: pods may be back, the drain starts over.
        tracker.restart("g");
        assert_eq!(tracker.state("g", Some("6")), DrainState::NotStarted);
        assert_eq!(tracker.drained_since("g"), None);

        let (tracker, ended) = timed_out_at_5(false).await;
        let failed = Ended {
            first: false,
            forced: false,
        };
        assert_eq!(ended, vec![failed]);
        assert_eq!(tracker.state("g", Some("6")), DrainState::Failed);
        assert_eq!(tracker.drained_since("g"), None);
    }

    fn timed_out(node_version: Option<&str>) -> DrainOutcome {
        DrainOutcome::TimedOut {
            blocking: BTreeMap::from([("shop/db-0".to_owned(), "PDB".to_owned())]),
            node_version: node_version.map(str::to_owned),
        }
    }

    #[test]
    fn a_timed_out_drain_fails_unless_forced_then_stands_at_the_version_it_vouched_for() {
        assert_eq!(
            settle(&timed_out(Some("9")), false),
            (DrainState::Failed, None, false),
            "without --force-reboot the drain is abandoned"
        );
        assert_eq!(
            settle(&timed_out(Some("9")), true),
            (DrainState::Drained, Some("9".to_owned()), true)
        );
        // No version at which the node held the grant: nothing to promote at.
        assert_eq!(
            settle(&timed_out(None), true),
            (DrainState::Failed, None, false)
        );
        // Forcing never promotes a node whose grant is gone.
        assert_eq!(
            settle(&DrainOutcome::Superseded, true),
            (DrainState::Failed, None, false)
        );
    }
}
