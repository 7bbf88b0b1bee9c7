//! Notifications of a rollout's steps to chat and webhooks (`--notify-url`), as kured users
//! know them: a rollout started, a node drained, rebooting, back; the rollout stopped (and
//! why) or finished. The shell's announcements say what happened; this module words it and
//! hands it to one background sender per webhook, through a bounded queue: a slow, hanging
//! or failing webhook never slows a reboot, it only loses its own messages (counted).

mod mail;
mod rollout;
mod send;
pub mod service;
pub mod target;
pub mod template;

pub use rollout::Rollout;
pub use target::Target;

use crate::metrics::Metrics;
use k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};
use service::Delivery;
use std::{sync::Arc, time::Duration};
use tokio::sync::mpsc;

/// What a notification is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// The first grant after the pool had no reboot under way.
    RolloutStarted,
    /// A node's drain finished: its pods are gone.
    NodeDrained,
    /// `reboot-now` written: the agent reboots the node.
    NodeRebooting,
    /// The reboot is proven (new boot, Ready) and the node uncordoned.
    NodeBack,
    /// No new reboot starts until what stops it clears.
    RolloutStopped,
    /// No node waits for or holds a slot any more.
    RolloutFinished,
    /// A node that had not completed within `--give-up-after` was given up.
    NodeGivenUp,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::RolloutStarted => "rollout_started",
            Self::NodeDrained => "node_drained",
            Self::NodeRebooting => "node_rebooting",
            Self::NodeBack => "node_back",
            Self::RolloutStopped => "rollout_stopped",
            Self::RolloutFinished => "rollout_finished",
            Self::NodeGivenUp => "node_given_up",
        }
    }
}

/// `--message-template-*`: the words of a node's notifications (see [`template::render`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Templates {
    pub drain: String,
    pub reboot: String,
    pub uncordon: String,
}

/// One notification.
#[derive(Debug, Clone, PartialEq)]
pub struct Notice {
    pub kind: Kind,
    pub node: Option<String>,
    /// The pool's ledger (`namespace/name`): it names the pool a controller manages.
    pub pool: String,
    pub message: String,
    pub time: Timestamp,
    /// What this kind of notification has to add (the reason a rollout stopped, ...).
    pub details: Value,
}

impl Notice {
    /// The notice as JSON, as webhooks get it: kind, node, pool, message, time, details.
    pub fn json(&self) -> Value {
        json!({
            "kind": self.kind.as_str(),
            "node": self.node,
            "pool": self.pool,
            "message": self.message,
            "time": self.time.to_string(),
            "details": self.details,
        })
    }

    /// A notice that says nothing: what a service's URL is read from.
    pub fn blank() -> Self {
        Self {
            kind: Kind::RolloutStarted,
            node: None,
            pool: String::new(),
            message: String::new(),
            time: Timestamp::UNIX_EPOCH,
            details: Value::Null,
        }
    }
}

/// How many notifications may wait for one webhook; more are dropped (and counted).
pub const QUEUE: usize = 100;

/// Hands notifications to the webhooks' senders; clones share them. Without targets (or in a
/// dry run) it does nothing.
#[derive(Debug, Clone, Default)]
pub struct Notifier {
    inner: Option<Arc<Inner>>,
}

#[derive(Debug)]
struct Inner {
    queues: Vec<(Target, mpsc::Sender<Vec<Delivery>>)>,
    templates: Templates,
    metrics: Metrics,
}

impl Notifier {
    /// Sends nothing.
    pub fn off() -> Self {
        Self::default()
    }

    /// Starts one sender per target, each with its own queue of `capacity`, each attempt
    /// bounded by `timeout`.
    pub fn start(
        targets: &[Target],
        templates: Templates,
        timeout: Duration,
        capacity: usize,
        metrics: Metrics,
    ) -> Self {
        if targets.is_empty() {
            return Self::off();
        }
        let client = observability::http_get::http_client();
        let queues = targets
            .iter()
            .map(|target| {
                let (tx, rx) = mpsc::channel(capacity);
                send::spawn(client.clone(), target.clone(), rx, timeout, metrics.clone());
                (target.clone(), tx)
            })
            .collect();
        Self {
            inner: Some(Arc::new(Inner {
                queues,
                templates,
                metrics,
            })),
        }
    }

    /// A node's notification, worded by its `--message-template-*`.
    pub fn node(&self, kind: Kind, node: &str, pool: &str, time: Timestamp, details: Value) {
        let Some(inner) = &self.inner else {
            return;
        };
        let template = match kind {
            Kind::NodeDrained => &inner.templates.drain,
            Kind::NodeRebooting => &inner.templates.reboot,
            _ => &inner.templates.uncordon,
        };
        let notice = Notice {
            kind,
            node: Some(node.to_owned()),
            pool: pool.to_owned(),
            message: template::render(template, node),
            time,
            details,
        };
        self.send(&notice);
    }

    /// A notification about the pool's rollout (because of `node`, if one).
    pub fn rollout(
        &self,
        kind: Kind,
        node: Option<&str>,
        message: String,
        pool: &str,
        time: Timestamp,
        details: Value,
    ) {
        let notice = Notice {
            kind,
            node: node.map(str::to_owned),
            pool: pool.to_owned(),
            message,
            time,
            details,
        };
        self.send(&notice);
    }

    /// Queues the notice for every webhook, without waiting: a full queue drops it.
    pub fn send(&self, notice: &Notice) {
        let Some(inner) = &self.inner else {
            return;
        };
        tracing::info!(kind = notice.kind.as_str(), node = ?notice.node, "notify: {}", notice.message);
        for (target, queue) in &inner.queues {
            if let Err(error) = queue.try_send(target.deliveries(notice)) {
                let reason = match error {
                    mpsc::error::TrySendError::Full(_) => "queue_full",
                    mpsc::error::TrySendError::Closed(_) => "sender_stopped",
                };
                inner.metrics.notification_dropped(reason);
                tracing::warn!(kind = notice.kind.as_str(), reason, "notification dropped");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::encoding::text::encode;

    fn notice() -> Notice {
        Notice {
            kind: Kind::NodeBack,
            node: Some("n1".into()),
            pool: "ns/slots".into(),
            message: "Node n1 rebooted and uncordoned".into(),
            time: "2026-01-02T03:04:05Z".parse().unwrap(),
            details: json!({"boot_id": "b2"}),
        }
    }

    #[test]
    fn a_webhook_gets_the_notice_as_json() {
        assert_eq!(
            notice().json(),
            json!({
                "kind": "node_back",
                "node": "n1",
                "pool": "ns/slots",
                "message": "Node n1 rebooted and uncordoned",
                "time": "2026-01-02T03:04:05Z",
                "details": {"boot_id": "b2"},
            })
        );
    }

    #[tokio::test]
    async fn a_webhook_that_never_answers_fills_its_queue_and_the_rest_is_dropped_at_once() {
        // Accepts connections and never answers them.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((stream, _)) = listener.accept().await {
                held.push(stream);
            }
        });
        let target = target::parse(&format!("http://{address}/hook")).unwrap();
        let (metrics, registry) = Metrics::new();
        let templates = Templates {
            drain: "d %s".into(),
            reboot: "r %s".into(),
            uncordon: "u %s".into(),
        };
        let notifier = Notifier::start(&[target], templates, Duration::from_secs(60), 1, metrics);
        for _ in 0..5 {
            notifier.send(&notice());
        }
        // One in flight (or queued), one queued: the other three dropped, none waited for.
        let mut text = String::new();
        encode(&mut text, &registry).unwrap();
        let dropped = text
            .lines()
            .find_map(|l| {
                l.strip_prefix("node_reboot_notifications_dropped_total{reason=\"queue_full\"} ")
            })
            .and_then(|v| v.parse::<u32>().ok())
            .unwrap_or_else(|| panic!("no dropped counter in\n{text}"));
        assert!((3..=4).contains(&dropped), "{dropped} dropped");
    }
}
