//! The run loop of the agent: watch its own Node and act on each state of it (`steps`).
//! All state lives on the Node, so the agent can be killed at any point and resumes from what
//! it reads.

use crate::{
    error::AgentError,
    events::Reason,
    node_agent::NodeAgent,
    node_watch::{WatchItem, node_watch},
    own_write::OwnWrite,
    retry::Backoff,
    sentinel::{SentinelAction, SentinelRecord},
    steps::Outcome,
};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::{
    api::{Patch, PatchParams},
    runtime::watcher,
};
use observability::ApiErrorKind;
use std::future::Future;
use tokio::time::{Instant, sleep_until};
use tracing::{debug, info, warn};

/// The first look at the sentinel after the start, unless --check-period is shorter.
const FIRST_CHECK: std::time::Duration = std::time::Duration::from_secs(10);

/// `period` plus up to 10 % more, so that nodes that started together do not ask together.
fn jittered(period: std::time::Duration) -> std::time::Duration {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .subsec_nanos();
    period + period.mul_f64(f64::from(nanos % 1000) / 10_000.0)
}

/// Whether `node` has a reboot requested and not completed yet: `reboot-needed=true`, or a
/// grant, or a step of the protocol under way.
fn reboot_required(node: &Node, keys: &common::AnnotationKeys) -> bool {
    let state = common::NodeFacts::from_node(node).protocol(keys);
    state.request == common::Request::Needed
        || state.grant.is_some()
        || state.phase != common::Phase::Idle
}

/// What the sentinel's checks have said, so that each Warning is said once.
#[derive(Debug, Default)]
struct SentinelSaid {
    /// The fingerprint of the sentinel reported to persist after its reboot.
    persists: Option<String>,
    /// The unexpected `reboot-disabled` value that keeps the sentinel from a request.
    opt_out: Option<String>,
    /// Why the last look at the sentinel gave no answer, while it gives none.
    failure: Option<String>,
}

/// A step that failed, to be tried again from a fresh read of the node.
#[derive(Debug)]
struct FailedStep {
    at: Instant,
    /// Used when the node cannot be read again.
    last_seen: Node,
}

impl NodeAgent {
    /// The watch runs (ready) or does not (not ready until it delivers again).
    fn watch_running(&self, running: bool) {
        self.observed.health.set_ready(running);
        self.observed.metrics.watch_running.set(i64::from(running));
    }
    /// Runs until `shutdown` completes (Ok), or until a reboot failed or did not happen (Err).
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> Result<(), AgentError> {
        tokio::pin!(shutdown);
        info!(boot_id = %self.settings.boot_id, "watching the node");
        let mut watch = node_watch(self.nodes.clone(), self.name());
        let mut backoff = Backoff::default();
        let mut retry: Option<FailedStep> = None;
        let mut found_since_init = false;
        let mut own_write = OwnWrite::default();
        // The sentinel is looked at on the node as last seen, soon after the start, then
        // every --check-period.
        let mut last_seen: Option<Node> = None;
        let mut check_at = self
            .settings
            .sentinel
            .as_ref()
            .map(|_| Instant::now() + self.settings.check_period.min(FIRST_CHECK));
        let mut sentinel_said = SentinelSaid::default();
        loop {
            let retry_at = retry.as_ref().map(|r| r.at);
            let check_due = check_at.filter(|_| last_seen.is_some());
            let node = tokio::select! {
                () = &mut shutdown => return self.stopping(),
                () = sleep_until(check_due.unwrap_or_else(Instant::now)), if check_due.is_some() => {
                    check_at = Some(Instant::now() + jittered(self.settings.check_period));
                    if let Some(node) = &last_seen
                        && let Some(written) = self.check_sentinel(node, &mut sentinel_said).await
                    {
                        // The next check decides on what was written, not on the state
                        // before it, even when the watch has not brought the change yet.
                        own_write.wrote(written.metadata.resource_version.clone());
                        last_seen = Some(written);
                    }
                    None
                }
                () = sleep_until(retry_at.unwrap_or_else(Instant::now)), if retry_at.is_some() => {
                    let last_seen = retry.take().map(|r| r.last_seen);
                    self.reread(last_seen).await
                }
                event = watch.next() => {
                    let event = event.ok_or_else(|| AgentError::WatchEnded(self.name().into()))?;
                    let node = self.on_watch_event(event, &mut found_since_init, &own_write);
                    // A node from the watch is newer than the state a retry would act on. An
                    // event without one (the end of the initial list, a watch error) is not:
                    // dropping the retry then left a failed step undone until the node changed
                    // again (an agent back from its reboot whose first write failed while its
                    // watch was still listing never reported the reboot done).
                    if node.is_some() {
                        retry = None;
                        last_seen.clone_from(&node);
                    }
                    node
                }
            };
            let Some(node) = node else { continue };
            let required = reboot_required(&node, &self.settings.keys);
            self.observed
                .metrics
                .reboot_required
                .set(i64::from(required));
            let handled = tokio::select! {
                () = &mut shutdown => return self.stopping(),
                handled = self.handle(node.clone()) => handled,
            };
            match handled {
                Ok(Outcome::Settled { written }) => {
                    backoff.reset();
                    if let Some(written) = written {
                        own_write.wrote(written.metadata.resource_version.clone());
                        last_seen = Some(*written);
                    }
                }
                Ok(Outcome::RebootTriggered { deadline }) => {
                    return self.await_reboot(&node, deadline, shutdown).await;
                }
                Err(error) if error.is_fatal() => return Err(error),
                Err(error) => {
                    let delay = backoff.next_delay();
                    warn!(%error, "could not act on the node; trying again in {delay:?}");
                    let at = Instant::now() + delay;
                    retry = Some(FailedStep {
                        at,
                        last_seen: node,
                    });
                }
            }
        }
    }

    /// The node to act on, if the event brings one.
    fn on_watch_event(
        &self,
        event: WatchItem,
        found_since_init: &mut bool,
        own_write: &OwnWrite,
    ) -> Option<Node> {
        match event {
            Ok(watcher::Event::InitApply(node) | watcher::Event::Apply(node)) => {
                *found_since_init = true;
                self.watch_running(true);
                if own_write.predates(node.metadata.resource_version.as_deref()) {
                    debug!("a change from before this agent's last write; skipped");
                    return None;
                }
                return Some(node);
            }
            Ok(watcher::Event::Init) => *found_since_init = false,
            Ok(watcher::Event::InitDone) => {
                self.watch_running(true);
                if !*found_since_init {
                    self.not_found();
                }
            }
            Ok(watcher::Event::Delete(_)) => {
                warn!(
                    "node {} was deleted; waiting for it to be registered again",
                    self.name()
                );
            }
            Err(error) => {
                self.watch_running(false);
                self.observed
                    .metrics
                    .api_error(ApiErrorKind::of_watcher(&error));
                warn!(%error, "watching the node failed; retrying with backoff");
            }
        }
        None
    }

    fn not_found(&self) {
        warn!(
            "node {} not found; waiting for it to be registered",
            self.name()
        );
    }

    fn stopping(&self) -> Result<(), AgentError> {
        info!("shutting down");
        Ok(())
    }

    /// A fresh copy of the node for a retry; the last one seen when it cannot be read.
    async fn reread(&self, last_seen: Option<Node>) -> Option<Node> {
        match self.nodes.get_opt(self.name()).await {
            Ok(Some(node)) => Some(node),
            Ok(None) => {
                self.not_found();
                None
            }
            Err(error) => {
                self.observed.metrics.api_error(ApiErrorKind::of(&error));
                warn!(%error, "cannot read the node; retrying with the last state seen");
                last_seen
            }
        }
    }
}

impl NodeAgent {
    /// Looks at the sentinel and requests a reboot, reports a sentinel that survived its
    /// reboot or one that an unexpected opt-out value keeps from a request, forgets one that
    /// is gone, or does nothing (DESIGN: no API request while nothing changes). Returns the
    /// node as written, if it wrote.
    async fn check_sentinel(&self, node: &Node, said: &mut SentinelSaid) -> Option<Node> {
        let sentinel = self.settings.sentinel.clone()?;
        let what = sentinel.describe();
        let fingerprint = match tokio::task::spawn_blocking(move || sentinel.check()).await {
            Ok(Ok(fingerprint)) => fingerprint,
            Ok(Err(failure)) => {
                self.report_failure(node, failure, &mut said.failure).await;
                return None;
            }
            Err(_) => return None,
        };
        said.failure = None;
        let keys = &self.settings.keys;
        let facts = common::NodeFacts::from_node(node);
        let recorded = facts.annotations.get(&keys.sentinel).map(String::as_str);
        let opt_out = keys.opt_out(node.metadata.labels.as_ref());
        let action = crate::sentinel::decide_sentinel(
            &facts.protocol(keys),
            &opt_out,
            fingerprint.as_deref(),
            recorded,
            &self.settings.boot_id,
        );
        // Gone or changed: whatever persisted before does not any more.
        if fingerprint.is_none() || action == SentinelAction::Request {
            self.observed.metrics.sentinel_persists.set(0);
            said.persists = None;
        }
        if action != SentinelAction::OptedOut {
            said.opt_out = None;
        }
        match (action, fingerprint) {
            (SentinelAction::Persists, Some(fingerprint)) => {
                self.report_persisting(node, &what, fingerprint, &mut said.persists)
                    .await;
                None
            }
            (SentinelAction::OptedOut, _) => {
                self.report_opted_out(node, &what, &opt_out, &mut said.opt_out)
                    .await;
                None
            }
            (SentinelAction::Request, Some(fingerprint)) => {
                self.request_reboot(node, &facts, &what, &fingerprint).await
            }
            (SentinelAction::Forget, _) => {
                self.forget_sentinel(&facts, recorded.unwrap_or_default())
                    .await
            }
            // Nothing; Persists and Request come only with a fingerprint.
            _ => None,
        }
    }

    /// Removes the record of a sentinel that is gone, if it is still `recorded`.
    async fn forget_sentinel(&self, facts: &common::NodeFacts, recorded: &str) -> Option<Node> {
        let patch = common::Transition::new(&self.settings.keys).forget_sentinel(facts, recorded);
        let written = self
            .write_sentinel_patch(patch, "forget the sentinel")
            .await?;
        info!(%recorded, "the reboot sentinel is gone; forgot the one requested for");
        Some(written)
    }

    /// A look at the sentinel that gave no answer: logged and counted each time, a Warning
    /// once per cause while it lasts (`said`). Never read as "no reboot needed" silently.
    async fn report_failure(
        &self,
        node: &Node,
        failure: crate::sentinel::SentinelFailure,
        said: &mut Option<String>,
    ) {
        warn!(cause = %failure.cause, "{}", failure.message);
        self.observed.metrics.sentinel_failures.inc();
        if said.as_deref() == Some(failure.cause.as_str()) {
            return;
        }
        self.events
            .publish(node, Reason::SentinelFailed, failure.message)
            .await;
        *said = Some(failure.cause);
    }

    /// A Warning Event and the gauge, once per sentinel (`reported`).
    async fn report_persisting(
        &self,
        node: &Node,
        what: &str,
        fingerprint: String,
        reported: &mut Option<String>,
    ) {
        if reported.as_ref() == Some(&fingerprint) {
            return;
        }
        let note = format!(
            "{what} is still there after the reboot requested for it: not requesting again \
             until it changes (did the update apply? is it on a persistent disk?)"
        );
        warn!("{note}");
        self.observed.metrics.sentinel_persists.set(1);
        self.events
            .publish(node, Reason::SentinelPersists, note)
            .await;
        *reported = Some(fingerprint);
    }

    /// A Warning, once per value (`said`), when the sentinel asks for a reboot that an opt-out
    /// value other than `true` or `false` keeps from being requested: how it was read.
    async fn report_opted_out(
        &self,
        node: &Node,
        what: &str,
        opt_out: &common::OptOut,
        said: &mut Option<String>,
    ) {
        let Some(value) = opt_out.unexpected() else {
            return;
        };
        if said.as_deref() == Some(value) {
            return;
        }
        let key = &self.settings.keys.disabled;
        let note = format!(
            "{what} asks for a reboot, but the node is labelled {key}={value:?}, which is not \
             `true` or `false`: read as opted out, so no reboot is requested. Keep it out with \
             {key}=true; let it reboot by removing the label or with {key}=false"
        );
        warn!("{note}");
        self.events
            .publish(node, Reason::UnexpectedOptOutValue, note)
            .await;
        *said = Some(value.to_owned());
    }

    /// `reboot-needed`, who asked, and the record of this sentinel in this boot, in one patch.
    async fn request_reboot(
        &self,
        node: &Node,
        facts: &common::NodeFacts,
        what: &str,
        fingerprint: &str,
    ) -> Option<Node> {
        let requested_by = format!("agent: {what}");
        let record = SentinelRecord::format(&self.settings.boot_id, fingerprint);
        let patch =
            common::Transition::new(&self.settings.keys).request(facts, &requested_by, &record);
        let written = self
            .write_sentinel_patch(patch, "request the reboot")
            .await?;
        info!(%requested_by, "the reboot sentinel asks for a reboot; requested");
        self.observed.metrics.reboots_requested.inc();
        let note = format!("{what} asks for a reboot: reboot-needed=true");
        self.events
            .publish(node, Reason::RebootRequired, note)
            .await;
        Some(written)
    }

    /// The node as written; `None` when the write failed. The patches `test` what they depend
    /// on, so a failure mostly means that the node changed since it was seen (an
    /// administrator's request, say): the next check decides on the new state.
    async fn write_sentinel_patch(&self, patch: json_patch::Patch, what: &str) -> Option<Node> {
        let written = self
            .nodes
            .patch(
                self.name(),
                &PatchParams::default(),
                &Patch::Json::<()>(patch),
            )
            .await;
        written
            .inspect_err(|error| {
                self.observed.metrics.api_error(ApiErrorKind::of(error));
                info!(%error, "could not {what}; looking again later");
            })
            .ok()
    }
}
