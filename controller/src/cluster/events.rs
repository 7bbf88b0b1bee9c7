//! Kubernetes Events on the Node for every step, so that `kubectl describe node` and
//! `kubectl get events` tell each node's story. A failed Event is logged, never fatal.

use crate::metrics::Metrics;
use k8s_openapi::api::core::v1::{Node, ObjectReference};
use kube::{
    Client, Resource,
    runtime::events::{Event, EventType, Recorder, Reporter},
};
use observability::ApiErrorKind;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

// The vocabulary is the protocol's, shared with the agent and `kubectl reboot`.
pub use common::events::{CONTROLLER as REPORTER, ControllerReason as Reason};

fn event_type(reason: Reason) -> EventType {
    if reason.is_warning() {
        EventType::Warning
    } else {
        EventType::Normal
    }
}

#[derive(Debug)]
struct Queued {
    reference: ObjectReference,
    reason: Reason,
    /// The Event's action when it is not the reason's name: Events of one reason about one
    /// object that tell different things (the recorder folds those with the same action).
    action: Option<&'static str>,
    note: String,
    related: Option<ObjectReference>,
}

#[derive(Debug)]
enum Message {
    Publish(Box<Queued>),
    /// Answered once every Event queued before it was sent.
    Flush(oneshot::Sender<()>),
}

/// Publishes Events in order, from one background task, so that a slow Event never delays a
/// decision and `kubectl get events` shows the steps in the order they happened.
#[derive(Debug, Clone)]
pub struct Events {
    queue: mpsc::UnboundedSender<Message>,
}

/// What every Event of a `--dry-run` controller says first, whichever part publishes it.
pub const DRY_RUN_MARK: &str = "dry run, nothing was written: ";

impl Events {
    /// With `dry_run`, every note is marked with [`DRY_RUN_MARK`]: a waiting node's Event from
    /// a dry run must not read like one from the controller that acts.
    pub fn new(client: Client, instance: Option<String>, metrics: Metrics, dry_run: bool) -> Self {
        let mark = if dry_run { DRY_RUN_MARK } else { "" };
        let reporter = Reporter {
            controller: REPORTER.to_owned(),
            instance,
        };
        let recorder = Recorder::new(client, reporter);
        let (queue, mut pending) = mpsc::unbounded_channel::<Message>();
        tokio::spawn(async move {
            while let Some(message) = pending.recv().await {
                let Queued {
                    reference,
                    reason,
                    action,
                    note,
                    related,
                } = match message {
                    Message::Publish(queued) => *queued,
                    Message::Flush(done) => {
                        let _ = done.send(());
                        continue;
                    }
                };
                let event = Event {
                    type_: event_type(reason),
                    reason: reason.as_str().to_owned(),
                    note: Some(format!("{mark}{note}")),
                    action: action.unwrap_or(reason.as_str()).to_owned(),
                    secondary: related,
                };
                if let Err(error) = recorder.publish(&event, &reference).await {
                    metrics.api_error("event", ApiErrorKind::of(&error));
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

    /// An Event about any object (the ledger Lease).
    pub fn publish_about(&self, reference: ObjectReference, reason: Reason, note: String) {
        let _ = self.queue.send(Message::Publish(Box::new(Queued {
            reference,
            reason,
            action: None,
            note,
            related: None,
        })));
    }

    /// An Event about the node with its own `action` (see [`Queued::action`]).
    pub fn publish_action(&self, node: &Node, reason: Reason, action: &'static str, note: String) {
        let _ = self.queue.send(Message::Publish(Box::new(Queued {
            reference: node.object_ref(&()),
            reason,
            action: Some(action),
            note,
            related: None,
        })));
    }

    fn enqueue(&self, node: &Node, reason: Reason, note: String, related: Option<ObjectReference>) {
        let reference = node.object_ref(&());
        // The receiver lives as long as the runtime; a send fails only during shutdown.
        let _ = self.queue.send(Message::Publish(Box::new(Queued {
            reference,
            reason,
            action: None,
            note,
            related,
        })));
    }

    /// Events that are kept for the caller to read instead of being published (the model
    /// test of the controller).
    pub fn captured() -> (Self, CapturedEvents) {
        let (queue, pending) = mpsc::unbounded_channel();
        (Self { queue }, CapturedEvents(pending))
    }

    /// Waits until the Events queued so far are written, at most `limit` (at shutdown).
    pub async fn flush(&self, limit: Duration) {
        let (done, flushed) = oneshot::channel();
        if self.queue.send(Message::Flush(done)).is_ok() {
            let _ = tokio::time::timeout(limit, flushed).await;
        }
    }
}

/// The Events of [`Events::captured`].
#[derive(Debug)]
pub struct CapturedEvents(mpsc::UnboundedReceiver<Message>);

impl CapturedEvents {
    /// The Events published since the last call: the name of the object each is about, its
    /// reason and its note.
    pub fn take(&mut self) -> Vec<(String, Reason, String)> {
        let mut taken = Vec::new();
        while let Ok(message) = self.0.try_recv() {
            if let Message::Publish(queued) = message {
                let name = queued.reference.name.clone().unwrap_or_default();
                taken.push((name, queued.reason, queued.note));
            }
        }
        taken
    }
}
