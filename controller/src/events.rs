//! Kubernetes Events on the Node for every step, so that `kubectl describe node` and
//! `kubectl get events` tell each node's story. A failed Event is logged, never fatal.

use k8s_openapi::api::core::v1::{Node, ObjectReference};
use kube::{
    Client, Resource,
    runtime::events::{Event, EventType, Recorder, Reporter},
};
use tokio::sync::mpsc;

pub const REPORTER: &str = "reboot-controller";

/// The reasons of the controller's Events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    Requested,
    Draining,
    DrainBlocked,
    RebootApproved,
    Rebooted,
    Cancelled,
    InvalidRequest,
}

impl Reason {
    fn as_str(self) -> &'static str {
        match self {
            Self::Requested => "Requested",
            Self::Draining => "Draining",
            Self::DrainBlocked => "DrainBlocked",
            Self::RebootApproved => "RebootApproved",
            Self::Rebooted => "Rebooted",
            Self::Cancelled => "Cancelled",
            Self::InvalidRequest => "InvalidRequest",
        }
    }

    fn event_type(self) -> EventType {
        match self {
            Self::DrainBlocked | Self::InvalidRequest => EventType::Warning,
            _ => EventType::Normal,
        }
    }
}

/// Publishes Events in order, from one background task, so that a slow Event never delays a
/// decision and `kubectl get events` shows the steps in the order they happened.
#[derive(Debug, Clone)]
pub struct Events {
    queue: mpsc::UnboundedSender<(ObjectReference, Reason, String)>,
}

impl Events {
    pub fn new(client: Client, instance: Option<String>) -> Self {
        let reporter = Reporter {
            controller: REPORTER.to_owned(),
            instance,
        };
        let recorder = Recorder::new(client, reporter);
        let (queue, mut pending) = mpsc::unbounded_channel::<(ObjectReference, Reason, String)>();
        tokio::spawn(async move {
            while let Some((reference, reason, note)) = pending.recv().await {
                let event = Event {
                    type_: reason.event_type(),
                    reason: reason.as_str().to_owned(),
                    note: Some(note),
                    action: reason.as_str().to_owned(),
                    secondary: None,
                };
                if let Err(error) = recorder.publish(&event, &reference).await {
                    let node = reference.name.unwrap_or_default();
                    tracing::warn!(%node, %error, reason = reason.as_str(), "could not record Event");
                }
            }
        });
        Self { queue }
    }

    pub fn publish(&self, node: &Node, reason: Reason, note: String) {
        // The receiver lives as long as the runtime; a send fails only during shutdown.
        let _ = self.queue.send((node.object_ref(&()), reason, note));
    }
}
