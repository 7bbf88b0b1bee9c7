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

// The vocabulary is the protocol's, shared with the controller and `kubectl reboot`.
pub use common::events::{AGENT as REPORTING_COMPONENT, AgentReason as Reason};

/// An API server that does not answer must not hold up a reboot or a shutdown.
const PUBLISH_TIMEOUT: Duration = Duration::from_secs(5);

fn event_type(reason: Reason) -> EventType {
    if reason.is_warning() {
        EventType::Warning
    } else {
        EventType::Normal
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
            type_: event_type(reason),
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
