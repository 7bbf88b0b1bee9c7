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
    /// What every note says first: [`DRY_RUN_MARK`] in a dry run, else nothing.
    mark: &'static str,
}

/// What every Event of a `--dry-run` controller says first, whichever part publishes it.
pub const DRY_RUN_MARK: &str = "dry run, nothing was written: ";

/// The API server refuses an Event whose note has more bytes than this.
pub const NOTE_BYTES: usize = 1024;

/// `text` cut to at most `bytes` bytes at a character boundary, ending with an ellipsis
/// (within the bound) where it was cut.
pub fn brief(text: &str, bytes: usize) -> String {
    const ELLIPSIS: &str = "...";
    if text.len() <= bytes {
        return text.to_owned();
    }
    let room = bytes.saturating_sub(ELLIPSIS.len());
    let end = (0..=room)
        .rev()
        .find(|&i| text.is_char_boundary(i))
        .unwrap_or(0);
    format!("{}{ELLIPSIS}", &text[..end])
}

/// The note an Event is sent with: the mark first, the whole within the API's limit, so that
/// no caller can have an Event refused for a long note.
fn marked(mark: &str, note: &str) -> String {
    brief(&format!("{mark}{note}"), NOTE_BYTES)
}

impl Events {
    /// With `dry_run`, every note is marked with [`DRY_RUN_MARK`]: a waiting node's Event from
    /// a dry run must not read like one from the controller that acts.
    pub fn new(client: Client, instance: Option<String>, metrics: Metrics, dry_run: bool) -> Self {
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
                    note: Some(note),
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
        let mark = if dry_run { DRY_RUN_MARK } else { "" };
        Self { queue, mark }
    }

    pub fn publish(&self, node: &Node, reason: Reason, note: String) {
        self.enqueue_node(node, reason, note, None);
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
        self.enqueue_node(node, reason, note, Some(related));
    }

    /// An Event about any object (the ledger Lease).
    pub fn publish_about(&self, reference: ObjectReference, reason: Reason, note: String) {
        self.enqueue(Queued {
            reference,
            reason,
            action: None,
            note,
            related: None,
        });
    }

    /// An Event about the node with its own `action` (see [`Queued::action`]).
    pub fn publish_action(&self, node: &Node, reason: Reason, action: &'static str, note: String) {
        self.enqueue(Queued {
            reference: node.object_ref(&()),
            reason,
            action: Some(action),
            note,
            related: None,
        });
    }

    fn enqueue_node(
        &self,
        node: &Node,
        reason: Reason,
        note: String,
        related: Option<ObjectReference>,
    ) {
        self.enqueue(Queued {
            reference: node.object_ref(&()),
            reason,
            action: None,
            note,
            related,
        });
    }

    /// Every Event goes through here: its note marked and cut to the API's limit.
    fn enqueue(&self, queued: Queued) {
        let note = marked(self.mark, &queued.note);
        // The receiver lives as long as the runtime; a send fails only during shutdown.
        let _ = self
            .queue
            .send(Message::Publish(Box::new(Queued { note, ..queued })));
    }

    /// Events that are kept for the caller to read instead of being published (the model
    /// test of the controller).
    pub fn captured() -> (Self, CapturedEvents) {
        let (queue, pending) = mpsc::unbounded_channel();
        (Self { queue, mark: "" }, CapturedEvents(pending))
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

#[cfg(test)]
mod tests {
    use super::*;
    use common::test_util::NodeBuilder;

    #[test]
    fn a_text_is_cut_at_a_character_boundary_within_its_bound_with_an_ellipsis() {
        assert_eq!(brief("forbidden", 300), "forbidden");
        assert_eq!(brief(&"a".repeat(300), 300), "a".repeat(300));
        let long = "é".repeat(400);
        let cut = brief(&long, 300);
        assert!(cut.len() <= 300, "{} bytes", cut.len());
        assert!(cut.len() >= 297, "{} bytes", cut.len());
        assert!(cut.ends_with("é..."), "{cut}");
    }

    #[test]
    fn every_note_is_cut_to_the_api_limit_with_the_dry_run_mark_inside_it() {
        let long = "the pod shop/web-1: refused; ".repeat(100);
        let note = marked(DRY_RUN_MARK, &long);
        assert!(note.len() <= NOTE_BYTES, "{} bytes", note.len());
        assert!(
            note.starts_with(DRY_RUN_MARK) && note.ends_with("..."),
            "{note}"
        );
        assert_eq!(
            marked(DRY_RUN_MARK, "drained"),
            format!("{DRY_RUN_MARK}drained")
        );

        let (events, mut captured) = Events::captured();
        let node = NodeBuilder::new("n1").object();
        events.publish(&node, Reason::DrainBlocked, long.clone());
        events.publish_action(&node, Reason::Draining, "CountedAsGone", long.clone());
        events.publish_about(node.object_ref(&()), Reason::LedgerDamaged, long);
        let notes = captured.take();
        assert_eq!(notes.len(), 3);
        for (_, reason, note) in notes {
            assert!(note.len() <= NOTE_BYTES, "{reason:?}: {} bytes", note.len());
        }
    }
}
