//! Kubernetes Events on the agent's Node, so that `kubectl describe node` tells the story.
//! An Event that cannot be written is logged and otherwise ignored: it never stops a reboot.

use crate::metrics::Metrics;
use k8s_openapi::api::core::v1::{Node, ObjectReference};
use kube::{
    Client, Resource,
    runtime::events::{Event, EventType, Recorder, Reporter},
};
use observability::ApiErrorKind;
use std::time::Duration;

/// The `reportingController` of the agent's Events.
pub const REPORTING_COMPONENT: &str = "reboot-agent";

/// An API server that does not answer must not hold up a reboot or a shutdown.
const PUBLISH_TIMEOUT: Duration = Duration::from_secs(5);

/// Why the agent writes an Event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// The agent is rebooting the node. (Its proof after the boot has no Event of the agent:
    /// the controller's `Rebooted` at completion tells of it.)
    Rebooting,
    /// The reboot had not happened (same boot id); the agent reboots again.
    RebootRetried,
    /// A triggered reboot did not happen within `--reboot-timeout`.
    RebootTimedOut,
    /// The reboot method itself failed.
    RebootFailed,
    /// The node's reboot sentinel asked for a reboot; the agent requested one.
    RebootRequired,
    /// The sentinel a reboot was requested for is still there after that reboot.
    SentinelPersists,
    /// `--max-unproven-reboots` reboots from the same boot id proved nothing: stopped.
    RebootUnproven,
    /// The node's protocol annotations are in a format this agent does not know.
    UnknownFormat,
}

impl Reason {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Rebooting => "Rebooting",
            Self::RebootRetried => "RebootRetried",
            Self::RebootTimedOut => "RebootTimedOut",
            Self::RebootFailed => "RebootFailed",
            Self::RebootRequired => "RebootRequired",
            Self::SentinelPersists => "SentinelPersists",
            Self::RebootUnproven => "RebootUnproven",
            Self::UnknownFormat => "UnknownFormat",
        }
    }

    fn event_type(self) -> EventType {
        match self {
            Self::Rebooting | Self::RebootRequired => EventType::Normal,
            Self::RebootRetried
            | Self::RebootTimedOut
            | Self::RebootFailed
            | Self::SentinelPersists
            | Self::RebootUnproven
            | Self::UnknownFormat => EventType::Warning,
        }
    }
}

/// Writes Events about one Node.
#[derive(Clone)]
pub struct NodeEvents {
    recorder: Recorder,
    metrics: Metrics,
}

impl std::fmt::Debug for NodeEvents {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeEvents").finish_non_exhaustive()
    }
}

impl NodeEvents {
    pub fn new(client: Client, node_name: &str, metrics: Metrics) -> Self {
        let reporter = Reporter {
            controller: REPORTING_COMPONENT.into(),
            instance: Some(format!("{REPORTING_COMPONENT}-{node_name}")),
        };
        Self {
            recorder: Recorder::new(client, reporter),
            metrics,
        }
    }

    /// Publishes an Event about `node`; failures are logged, never returned.
    pub async fn publish(&self, node: &Node, reason: Reason, note: String) {
        let reference: ObjectReference = node.object_ref(&());
        let event = Event {
            type_: reason.event_type(),
            reason: reason.as_str().into(),
            note: Some(note),
            action: "Reboot".into(),
            secondary: None,
        };
        let published =
            tokio::time::timeout(PUBLISH_TIMEOUT, self.recorder.publish(&event, &reference));
        match published.await {
            Ok(Ok(())) => {}
            Ok(Err(error)) => {
                self.metrics.api_error(ApiErrorKind::of(&error));
                tracing::warn!(reason = reason.as_str(), %error, "could not write the Event")
            }
            Err(_) => {
                self.metrics.api_error(ApiErrorKind::Timeout);
                tracing::warn!(reason = reason.as_str(), "writing the Event timed out")
            }
        }
    }
}
