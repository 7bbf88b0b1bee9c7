//! The I/O shell around the decision core: feeds it from the cache, the ledger and its
//! memory, executes what it decides, and feeds the results straight back.

use crate::{
    api_error::ApiErrorKind,
    decide::{Decision, DrainState, NodeAction, ReleaseReason, Round},
    drain::{DrainOutcome, Drainer, RunningDrains},
    events::{Events, Reason},
    leader::Leadership,
    ledger::Ledger,
    ledger_store::{LedgerError, LedgerStore},
    memory::Memory,
    metrics::{Metrics, PoolSummary},
    nodes::Overlay,
};
use common::{AnnotationKeys, MaxUnavailable, NodeFacts, Transition};
use k8s_openapi::{api::core::v1::Node, jiff::Timestamp};
use kube::{
    Api,
    api::{Patch, PatchParams},
    runtime::reflector::Store,
};
use std::{collections::HashMap, sync::Arc, time::Instant};
use tokio::sync::watch;

/// Everything the shell needs, built by `run`.
#[derive(Debug)]
pub struct Shell {
    pub api: Api<Node>,
    pub keys: AnnotationKeys,
    pub max_unavailable: MaxUnavailable,
    /// `None` with `--drain=false`.
    pub drainer: Option<Drainer>,
    pub drains: RunningDrains,
    pub nodes: Store<Node>,
    pub overlay: Overlay,
    pub ledger: Ledger,
    pub ledger_store: LedgerStore,
    pub ledger_watch: watch::Receiver<Ledger>,
    pub events: Events,
    pub memory: Memory,
    pub started: Instant,
    /// Some write of the last round failed for a reason other than a stale read.
    pub failed: bool,
    pub metrics: Metrics,
    /// Nothing is written once this replica no longer leads.
    pub leadership: Leadership,
}

/// What happened to one node write.
enum Written {
    Ok(Box<Node>),
    /// The node changed under us: read it again before the next decision.
    Stale,
    Skipped,
    Failed,
}

impl Shell {
    fn now_ms(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Takes a newer ledger from the watch (another controller's writes).
    fn catch_up_ledger(&mut self) {
        let watched = self.ledger_watch.borrow_and_update().clone();
        if watched.resource_version.is_some() && self.ledger.is_older_than(&watched) {
            self.ledger = watched;
        }
    }

    /// One round: decide and execute. True when something was written and another round
    /// should follow at once (the next step of a node often depends on this one).
    pub async fn round(&mut self) -> bool {
        self.failed = false;
        if !self.leadership.is_leading() {
            return false;
        }
        self.catch_up_ledger();
        self.collect_drain_outcomes();
        let nodes = self.overlay.view(&self.nodes);
        let views = self.memory.views(&nodes, &self.keys, self.now_ms());
        let decision = Round {
            nodes: &views,
            ledger: &self.ledger,
            budget: self.max_unavailable.resolve(views.len()),
            drain_enabled: self.drainer.is_some(),
            now: self.now_ms(),
        }
        .decide();
        let by_name: HashMap<&str, &Arc<Node>> = nodes
            .iter()
            .map(|n| (n.metadata.name.as_deref().unwrap_or_default(), n))
            .collect();
        self.announce_waiting(&decision, &by_name, views.len());
        let mut progressed = false;
        if !decision.ledger.is_empty() {
            if !self.leadership.is_leading() {
                return false;
            }
            match self.write_ledger(&decision, &by_name).await {
                Ok(()) => progressed = true,
                // Another controller moved first: decide again on the ledger as it is now.
                Err(LedgerError::Conflict) => {
                    self.metrics.api_error("ledger", ApiErrorKind::Conflict);
                    return self.reload_ledger().await;
                }
                Err(error) => {
                    self.metrics.api_error("ledger", error.kind());
                    tracing::warn!(%error, "could not write the slot ledger");
                    self.failed = true;
                    return false;
                }
            }
        }
        for action in decision.node_actions {
            if !self.leadership.is_leading() {
                return false;
            }
            progressed |= self.execute(action, &by_name).await;
        }
        progressed
    }

    fn start_drain(&mut self, node: &Node) {
        let Some(drainer) = self.drainer.clone() else {
            return;
        };
        let name = node.metadata.name.clone().unwrap_or_default();
        tracing::info!(node = %name, "draining");
        self.events
            .publish(node, Reason::Draining, "cordoned; evicting its pods".into());
        self.memory.drains.insert(name.clone(), DrainState::Running);
        self.drains.start(name, node.clone(), drainer);
    }

    /// Abandons a drain that no longer matters (request withdrawn, slot released).
    fn stop_drain(&mut self, name: &str) {
        self.drains.abort(name);
        self.memory.drains.remove(name);
    }

    fn collect_drain_outcomes(&mut self) {
        while let Some((name, node, outcome, took)) = self.drains.finished() {
            if self.memory.drains.get(&name) != Some(&DrainState::Running) {
                continue;
            }
            match outcome {
                DrainOutcome::Drained { evicted } => {
                    self.metrics.drain_finished("drained", took);
                    tracing::info!(node = %name, evicted, took = ?took, "drained");
                    self.memory.drains.insert(name, DrainState::Drained);
                }
                DrainOutcome::TimedOut { blocking } => {
                    let pods: Vec<String> = blocking
                        .iter()
                        .map(|(pod, why)| format!("{pod}: {why}"))
                        .collect();
                    self.metrics.drain_finished("timed_out", took);
                    self.metrics.drain_timeouts.inc();
                    self.metrics.reboot_failed("drain_timeout");
                    tracing::warn!(node = %name, blocking = ?pods, "drain timed out; giving the slot back");
                    let mut note = format!(
                        "drain timed out; node uncordoned and slot released, retried later; blocked by {}",
                        pods.join("; ")
                    );
                    note.truncate(1000);
                    self.events.publish(&node, Reason::DrainBlocked, note);
                    *self.memory.drain_failures.entry(name.clone()).or_default() += 1;
                    self.memory.drains.insert(name, DrainState::Failed);
                }
            }
        }
    }

    /// Publishes the pool gauges as this replica sees the pool now.
    pub fn publish_pool(&mut self) {
        let nodes = self.overlay.view(&self.nodes);
        let summary = PoolSummary::of(&nodes, &self.ledger, &self.keys);
        let budget = self.max_unavailable.resolve(nodes.len());
        self.metrics.pool(&summary, budget);
    }

    pub fn last_round_failed(&self) -> bool {
        self.failed
    }

    async fn reload_ledger(&mut self) -> bool {
        match self.ledger_store.load().await {
            Ok(ledger) => {
                self.ledger = ledger;
                true
            }
            Err(error) => {
                self.metrics.api_error("ledger", error.kind());
                tracing::warn!(%error, "could not read the slot ledger");
                false
            }
        }
    }

    fn announce_waiting(
        &mut self,
        decision: &Decision,
        nodes: &HashMap<&str, &Arc<Node>>,
        pool: usize,
    ) {
        for name in &decision.waiting {
            if let Some(node) = nodes
                .get(name.as_str())
                .filter(|_| self.memory.first_wait(name))
            {
                tracing::info!(node = %name, "reboot requested; waiting for a slot");
                let note = format!(
                    "reboot requested; waiting for a slot (max-unavailable {} of {pool} nodes)",
                    self.max_unavailable
                );
                self.events.publish(node, Reason::Requested, note);
            }
        }
    }

    async fn write_ledger(
        &mut self,
        decision: &Decision,
        nodes: &HashMap<&str, &Arc<Node>>,
    ) -> Result<(), LedgerError> {
        let now = Timestamp::now().to_string();
        let slots = decision.ledger.apply(&self.ledger.slots, &now);
        self.ledger = self.ledger_store.swap(&self.ledger, &slots).await?;
        for name in &decision.ledger.grant {
            tracing::info!(node = %name, slots = self.ledger.slots.len(), "slot granted");
        }
        for name in &decision.ledger.release {
            self.stop_drain(name);
            tracing::info!(node = %name, slots = self.ledger.slots.len(), "slot released");
            if !decision.release_reasons.iter().any(|(n, _)| n == name) {
                // Its node left the pool (deleted, or no longer selected) while holding it.
                self.metrics.reboot_failed("node_removed");
            }
        }
        for (name, reason) in &decision.release_reasons {
            let Some(node) = nodes.get(name.as_str()) else {
                continue;
            };
            match reason {
                ReleaseReason::Completed => {}
                ReleaseReason::Cancelled => {
                    self.metrics.reboots_cancelled.inc();
                    self.events.publish(
                        node,
                        Reason::Cancelled,
                        "reboot-needed was removed: reboot cancelled, slot released".into(),
                    );
                }
                ReleaseReason::DrainFailed => {
                    let failures = self.memory.drain_failures.get(name).copied().unwrap_or(1);
                    let retry = self.now_ms() + drain_retry_delay_ms(failures);
                    self.memory.not_before.insert(name.clone(), retry);
                }
            }
        }
        Ok(())
    }

    async fn execute(&mut self, action: NodeAction, nodes: &HashMap<&str, &Arc<Node>>) -> bool {
        let name = match &action {
            NodeAction::Cordon(n)
            | NodeAction::StartDrain(n)
            | NodeAction::Promote(n)
            | NodeAction::CordonAndPromote(n)
            | NodeAction::Complete(n)
            | NodeAction::Uncordon(n, _) => n.clone(),
            NodeAction::WarnInvalidRequest { node, .. } => node.clone(),
        };
        let Some(node) = nodes.get(name.as_str()).map(|n| (*n).clone()) else {
            return false;
        };
        let facts = NodeFacts::from_node(&node);
        let keys = self.keys.clone();
        let t = Transition::new(&keys);
        let written = match &action {
            NodeAction::Cordon(_) => self.patch(&name, t.cordon(&facts)).await,
            NodeAction::Promote(_) => self.patch(&name, t.promote(&facts)).await,
            NodeAction::CordonAndPromote(_) => {
                self.patch(&name, t.cordon_and_promote(&facts)).await
            }
            NodeAction::Complete(_) => {
                self.patch(&name, t.complete(&facts, &Timestamp::now().to_string()))
                    .await
            }
            NodeAction::Uncordon(_, reason) => {
                if *reason == ReleaseReason::Cancelled {
                    self.stop_drain(&name);
                }
                match t.release(&facts) {
                    Some(patch) => self.patch(&name, patch).await,
                    None => Written::Skipped,
                }
            }
            NodeAction::StartDrain(_) => {
                self.start_drain(&node);
                Written::Skipped
            }
            NodeAction::WarnInvalidRequest { value, .. } => {
                if self.memory.first_warning(&name, value) {
                    tracing::warn!(node = %name, %value, "ignoring reboot-needed: not `true`");
                    let note = format!(
                        "{}={value:?} is not a reboot request: only \"true\" is; fix the value or remove the annotation",
                        keys.needed
                    );
                    self.events.publish(&node, Reason::InvalidRequest, note);
                }
                Written::Skipped
            }
        };
        match written {
            Written::Ok(updated) => {
                self.after_write(&action, &node);
                self.overlay.record(*updated);
                true
            }
            Written::Stale => {
                self.refetch(&name).await;
                true
            }
            Written::Failed => {
                self.failed = true;
                false
            }
            Written::Skipped => false,
        }
    }

    fn after_write(&mut self, action: &NodeAction, node: &Node) {
        let name = node.metadata.name.as_deref().unwrap_or_default();
        match action {
            NodeAction::Promote(_) | NodeAction::CordonAndPromote(_) => {
                self.metrics.reboots_approved.inc();
                tracing::info!(node = %name, "reboot-now set: the agent reboots the node");
                self.events.publish(
                    node,
                    Reason::RebootApproved,
                    "slot granted and node drained: reboot-now set".into(),
                );
            }
            NodeAction::Complete(_) => {
                let since = self
                    .ledger
                    .slots
                    .get(name)
                    .map(|s| s.granted_at.clone())
                    .unwrap_or_default();
                let took = since.parse::<Timestamp>().ok().map(|granted| {
                    Timestamp::now()
                        .duration_since(granted)
                        .as_secs_f64()
                        .max(0.0)
                });
                self.metrics.reboots_completed.inc();
                if let Some(took) = took {
                    self.metrics.reboot_duration.observe(took);
                }
                let took_seconds = took.unwrap_or(-1.0);
                tracing::info!(node = %name, %since, took_seconds, "reboot completed");
                self.events.publish(
                    node,
                    Reason::Rebooted,
                    format!("reboot proven by a new boot id; node Ready (slot held since {since})"),
                );
            }
            NodeAction::Cordon(_) => tracing::info!(node = %name, "cordoned"),
            NodeAction::Uncordon(_, reason) => tracing::info!(node = %name, ?reason, "uncordoned"),
            _ => {}
        }
    }

    async fn patch(&self, name: &str, patch: json_patch::Patch) -> Written {
        match self
            .api
            .patch(name, &PatchParams::default(), &Patch::Json::<()>(patch))
            .await
        {
            Ok(node) => Written::Ok(Box::new(node)),
            Err(error) => {
                let kind = ApiErrorKind::of(&error);
                self.metrics.api_error("node", kind);
                if kind.is_stale_read() {
                    tracing::debug!(node = %name, %error, "node changed under us; re-reading");
                    Written::Stale
                } else {
                    tracing::warn!(node = %name, %error, kind = kind.as_str(), "node write failed");
                    Written::Failed
                }
            }
        }
    }

    async fn refetch(&mut self, name: &str) {
        match self.api.get_opt(name).await {
            Ok(Some(node)) => self.overlay.record(node),
            Ok(None) => {}
            Err(error) => {
                self.metrics.api_error("node", ApiErrorKind::of(&error));
                tracing::warn!(node = %name, %error, "could not re-read node");
            }
        }
    }
}

/// After the n-th failed drain of a node, wait 30 s x 2^(n-1), at most 15 minutes, so that
/// other nodes go first and a stuck PodDisruptionBudget is not hammered.
fn drain_retry_delay_ms(failures: u32) -> u64 {
    let base: u64 = 30_000;
    base.saturating_mul(1 << failures.saturating_sub(1).min(5))
        .min(15 * 60_000)
}
