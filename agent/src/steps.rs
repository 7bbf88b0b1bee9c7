//! One state of the node, decided and acted upon. A write refused because the node changed
//! meanwhile (a failed JSON Patch `test`) is never followed by a reboot: the node is read
//! again and the decision made anew.

use crate::{
    attempts::Next,
    decision::{AgentAction, decide},
    error::AgentError,
    events::{REPORTING_COMPONENT, Reason},
    node_agent::NodeAgent,
    rebooter::RebootError,
};
use common::{NodeFacts, Transition};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Patch, PatchParams};
use observability::ApiErrorKind;
use std::{
    future::Future,
    pin::Pin,
    sync::{Arc, atomic::Ordering},
};
use tokio::time::{Instant, sleep_until};
use tracing::{debug, error, info, warn};

/// Writes refused in a row (the node changed each time) before the agent gives up for now.
const MAX_REFUSED_WRITES: usize = 5;

/// What became of one state of the node.
#[derive(Debug)]
pub(crate) enum Outcome {
    /// Nothing more to do until the node changes; the node as written, if it was.
    Settled { written: Option<Box<Node>> },
    /// A reboot was asked for; it must end this process before the deadline.
    RebootTriggered { deadline: Instant },
}

/// A step's error: refused because the node changed (decide again), or anything else.
#[derive(Debug)]
enum StepError {
    Refused(String),
    Other(AgentError),
}

impl From<AgentError> for StepError {
    fn from(error: AgentError) -> Self {
        Self::Other(error)
    }
}

impl NodeAgent {
    /// Says once per episode (the gauge goes from 0 to 1) that the node is in a format this
    /// agent does not know: an error in the log, a Warning Event, the gauge.
    async fn refuse_format(&self, node: &Node, found: &str) {
        let unknown = common::format::UnknownFormat {
            found: found.to_owned(),
        };
        if self.observed.metrics.unknown_format.set(1) == 1 {
            return;
        }
        let key = &self.settings.keys.protocol_version;
        let note = format!(
            "{key}={found:?}: this node's reboot annotations are in {unknown}. Until then this \
             agent does nothing on them (no reboot, no report)"
        );
        error!(found, known = common::format::CURRENT, "{note}");
        self.events.publish(node, Reason::UnknownFormat, note).await;
    }

    pub(crate) async fn handle(&self, mut node: Node) -> Result<Outcome, AgentError> {
        for _ in 0..MAX_REFUSED_WRITES {
            let facts = NodeFacts::from_node(&node);
            let action = decide(&facts.protocol(&self.settings.keys), &self.settings.boot_id);
            match self.act(&node, &facts, action).await {
                Ok(outcome) => return Ok(outcome),
                Err(StepError::Other(error)) => return Err(error),
                Err(StepError::Refused(why)) => {
                    info!(%why, "the node changed under the write; reading it again");
                    let read = self.nodes.get(self.name()).await;
                    node = read.map_err(|e| self.api_error("read", e))?;
                }
            }
        }
        Err(AgentError::KeepsChanging {
            node: self.name().into(),
            attempts: MAX_REFUSED_WRITES,
        })
    }

    async fn act(
        &self,
        node: &Node,
        facts: &NodeFacts,
        action: AgentAction,
    ) -> Result<Outcome, StepError> {
        let boot_id = &self.settings.boot_id;
        let transition = Transition::new(&self.settings.keys);
        let go_ahead = action == AgentAction::BeginReboot;
        if let AgentAction::UnknownFormat { found } = &action {
            self.refuse_format(node, found).await;
            return Ok(Outcome::Settled { written: None });
        }
        self.observed.metrics.unknown_format.set(0);
        if !action.reboots() {
            self.not_stopped();
        } else if let Some(made) = self.attempt(go_ahead) {
            // Decided before any write or log of a reboot: a stopped agent sees every update
            // of its node, and must neither say nor count "rebooting again" for each. A go-ahead
            // starts the count again before it is written.
            self.stop_rebooting(node, made).await;
            return Ok(Outcome::Settled { written: None });
        }
        let (reason, note) = match action {
            AgentAction::Nothing | AgentAction::UnknownFormat { .. } => {
                debug!("nothing to do");
                return Ok(Outcome::Settled { written: None });
            }
            AgentAction::FinishReboot { .. }
                if facts.boot_id.as_deref().map(str::trim) != Some(boot_id.as_str()) =>
            {
                // The admission policy takes reboot-done only with the boot the kubelet
                // reports (so that a stolen token cannot prove a made-up one): wait for the
                // kubelet's report of this boot, whose update of the node wakes us again.
                debug!(%boot_id, kubelet = ?facts.boot_id, "proven; waiting for the kubelet to report this boot");
                return Ok(Outcome::Settled { written: None });
            }
            AgentAction::FinishReboot { recorded_boot_id } => {
                let written = self
                    .write(transition.finish_reboot(facts, Some(&recorded_boot_id), boot_id))
                    .await?;
                self.observed.metrics.reboots_proven.inc();
                // No Event: the controller publishes `Rebooted` when it completes the node
                // (the kubelet reports this boot and Ready), which says the same; one request
                // less per reboot. The boot ids stay in this log line.
                info!(old_boot_id = %recorded_boot_id, new_boot_id = %boot_id,
                      "reboot proven by a new boot id; reported done");
                return Ok(Outcome::Settled {
                    written: Some(Box::new(written)),
                });
            }
            AgentAction::BeginReboot => {
                self.write(transition.begin_reboot(facts, boot_id)).await?;
                info!(%boot_id, "reboot-now: recorded reboot-in-progress; rebooting");
                (
                    Reason::Rebooting,
                    format!("Rebooting from boot id {boot_id}"),
                )
            }
            AgentAction::RebootAgain => {
                self.observed.metrics.reboot_retries.inc();
                warn!(%boot_id, "reboot-in-progress from this very boot: the reboot did not \
                                 happen; rebooting again");
                let note = format!(
                    "reboot-in-progress was recorded from the current boot id {boot_id}: the \
                     reboot did not happen; rebooting again"
                );
                (Reason::RebootRetried, note)
            }
            AgentAction::RecordBootIdAndReboot => {
                self.write(transition.record_boot_id(facts, boot_id))
                    .await?;
                warn!(%boot_id, "reboot-in-progress without a boot id: recorded the current \
                                 one; rebooting");
                let note =
                    format!("reboot-in-progress had no boot id; recorded {boot_id} and rebooting");
                (Reason::Rebooting, note)
            }
        };
        self.events.publish(node, reason, note).await;
        self.observed.metrics.reboots_started.inc();
        Ok(self.trigger(node).await?)
    }

    /// Counts this reboot from the current boot id; `Some(made)` when `made` attempts already
    /// proved nothing and the agent must stop.
    fn attempt(&self, go_ahead: bool) -> Option<u32> {
        let (next, error) = self
            .settings
            .attempts
            .next(&self.settings.boot_id, go_ahead);
        if let Some(error) = error {
            warn!(%error, file = %self.settings.attempts.path.display(),
                  "cannot count this reboot (--reboot-attempts-file); rebooting without the \
                   bound of --max-unproven-reboots");
        }
        match next {
            Next::Attempt { number, .. } => {
                debug!(number, "reboot attempt from this boot id");
                None
            }
            Next::Stop { made } => Some(made),
        }
    }

    /// Reboots from this boot id proved nothing: no more of them. Said once per stop (the
    /// node's updates keep coming while it waits): a Warning Event, the log and the gauge.
    /// The agent stays up and watching, so that it goes on by itself once the node changes.
    async fn stop_rebooting(&self, node: &Node, made: u32) {
        self.observed.metrics.reboots_stopped.set(1);
        if self.stopped.swap(true, Ordering::SeqCst) {
            return;
        }
        self.observed.metrics.reboot_failed("unproven");
        let boot_id = &self.settings.boot_id;
        let note = format!(
            "stopped rebooting: {made} reboots (--max-unproven-reboots) ended in the same boot id \
             {boot_id}, so the reboot method does not really reboot (systemctl soft-reboot, \
             kexec or a command that does nothing?). Fix --reboot-method/--reboot-command \
             (the agent's new pod counts again), reboot the node by hand, or give it up with \
             `kubectl reboot abandon {name} --reason <why>` (the controller then releases its \
             slot, removes its own cordon and clears the protocol's keys)",
            name = self.name(),
        );
        error!("{note}");
        self.events
            .publish(node, Reason::RebootUnproven, note)
            .await;
    }

    /// The node no longer asks for a reboot: whatever stopped the agent is over.
    fn not_stopped(&self) {
        if self.stopped.swap(false, Ordering::SeqCst) {
            info!("the node no longer asks for a reboot; no longer stopped");
        }
        self.observed.metrics.reboots_stopped.set(0);
    }

    async fn write(&self, patch: json_patch::Patch) -> Result<Node, StepError> {
        let params = PatchParams {
            field_manager: Some(REPORTING_COMPONENT.into()),
            ..PatchParams::default()
        };
        let patch = Patch::Json::<()>(patch);
        match self.nodes.patch(self.name(), &params, &patch).await {
            Ok(node) => Ok(node),
            // 422 for a failed `test` or a vanished key, 409 for a lost race.
            Err(kube::Error::Api(status)) if status.is_invalid() || status.is_conflict() => {
                self.observed
                    .metrics
                    .api_error(ApiErrorKind::of_status(&status));
                Err(StepError::Refused(format!(
                    "{} ({})",
                    status.message, status.reason
                )))
            }
            Err(error) => Err(self.api_error("patch", error).into()),
        }
    }

    /// Asks for the reboot in a blocking thread (a reboot command may take a while).
    async fn trigger(&self, node: &Node) -> Result<Outcome, AgentError> {
        let deadline = Instant::now() + self.settings.reboot_timeout;
        let rebooter = Arc::clone(&self.rebooter);
        let span = tracing::Span::current();
        let asked = tokio::task::spawn_blocking(move || span.in_scope(|| rebooter.reboot()));
        let result = match tokio::time::timeout_at(deadline, asked).await {
            // Still running at the deadline: the wait that follows reports the timeout.
            Err(_) => Ok(()),
            Ok(Ok(result)) => result,
            Ok(Err(join)) => Err(RebootError::Panicked(join.to_string())),
        };
        if let Err(source) = result {
            error!(error = %source, "the reboot method failed");
            self.observed.metrics.reboot_failed("method_failed");
            let note = source.to_string();
            self.events.publish(node, Reason::RebootFailed, note).await;
            let node = self.name().into();
            return Err(AgentError::Reboot { node, source });
        }
        Ok(Outcome::RebootTriggered { deadline })
    }

    /// After a reboot was asked for, this process should end (SIGTERM when the node shuts
    /// down, or the reboot itself). Still alive at the deadline: the reboot did not happen.
    pub(crate) async fn await_reboot(
        &self,
        node: &Node,
        deadline: Instant,
        shutdown: Pin<&mut impl Future<Output = ()>>,
    ) -> Result<(), AgentError> {
        let timeout = self.settings.reboot_timeout;
        info!(?timeout, "reboot asked for; waiting for it");
        tokio::select! {
            () = shutdown => {
                info!("shutting down while the node reboots");
                Ok(())
            }
            () = sleep_until(deadline) => {
                let error = AgentError::RebootTimedOut { node: self.name().into(), timeout };
                error!(%error, "the reboot did not happen");
                self.observed.metrics.reboot_failed("timed_out");
                self.events.publish(node, Reason::RebootTimedOut, error.to_string()).await;
                Err(error)
            }
        }
    }

    pub(crate) fn api_error(&self, action: &'static str, source: kube::Error) -> AgentError {
        self.observed.metrics.api_error(ApiErrorKind::of(&source));
        AgentError::Api {
            action,
            node: self.name().into(),
            source,
        }
    }
}
