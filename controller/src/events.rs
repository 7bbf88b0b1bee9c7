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

#[derive(Debug)]
struct Queued {
    reference: ObjectReference,
    reason: Reason,
    note: String,
    related: Option<ObjectReference>,
}

/// Publishes Events in order, from one background task, so that a slow Event never delays a
/// decision and `kubectl get events` shows the steps in the order they happened.
#[derive(Debug, Clone)]
pub struct Events {
    queue: mpsc::UnboundedSender<Queued>,
}

impl Events {
    pub fn new(client: Client, instance: Option<String>) -> Self {
        let reporter = Reporter {
            controller: REPORTER.to_owned(),
            instance,
        };
        let recorder = Recorder::new(client, reporter);
        let (queue, mut pending) = mpsc::unbounded_channel::<Queued>();
        tokio::spawn(async move {
            while let Some(Queued {
                reference,
                reason,
                note,
                related,
            }) = pending.recv().await
            {
                let event = Event {
                    type_: reason.event_type(),
                    reason: reason.as_str().to_owned(),
                    note: Some(note),
                    action: reason.as_str().to_owned(),
                    secondary: related,
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
        self.enqueue(node, reason, note, None);
    }

    /// An Event about the node that concerns another object too (a pod being evicted). The
    /// recorder folds Events with the same reason and objects into one series, so the related
    /// object also keeps such Events apart.
    pub fn publish_related(
        &self,
        node: &Node,
        reason: Reason,
        note: String,
        related: ObjectReference,
    ) {
        self.enqueue(node, reason, note, Some(related));
    }

    fn enqueue(&self, node: &Node, reason: Reason, note: String, related: Option<ObjectReference>) {
        let reference = node.object_ref(&());
        // The receiver lives as long as the runtime; a send fails only during shutdown.
        let _ = self.queue.send(Queued {
            reference,
            reason,
            note,
            related,
        });
    }
}
