//! The run loop: watch this agent's own Node and act on each state of it (the steps module).
//! All state lives on the Node, so the agent can be killed at any point and resumes from what
//! it reads.

use crate::{
    Observed,
    error::AgentError,
    events::{NodeEvents, Reason},
    rebooter::Rebooter,
    retry::Backoff,
    sentinel::SentinelAction,
    settings::Settings,
    steps::Outcome,
};
use futures::{StreamExt, stream::BoxStream};
use k8s_openapi::api::core::v1::Node;
use kube::{
    Api, Client,
    api::{Patch, PatchParams},
    runtime::{WatchStreamExt, watcher},
};
use observability::ApiErrorKind;
use std::{future::Future, sync::Arc};
use tokio::time::{Instant, sleep_until};
use tracing::{info, warn};

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

/// The agent of one node.
#[derive(Debug)]
pub struct NodeAgent {
    pub(crate) nodes: Api<Node>,
    pub(crate) events: NodeEvents,
    pub(crate) settings: Settings,
    pub(crate) rebooter: Arc<dyn Rebooter>,
    pub(crate) observed: Observed,
}

/// A step that failed, to be tried again from a fresh read of the node.
#[derive(Debug)]
struct Retry {
    at: Instant,
    /// Used when the node cannot be read again.
    last_seen: Node,
}

impl NodeAgent {
    pub fn new(
        client: Client,
        settings: Settings,
        rebooter: Arc<dyn Rebooter>,
        observed: Observed,
    ) -> Self {
        Self {
            nodes: Api::all(client.clone()),
            events: NodeEvents::new(client, &settings.node_name, observed.metrics.clone()),
            settings,
            rebooter,
            observed,
        }
    }

    /// The watch runs (ready) or does not (not ready until it delivers again).
    fn watch_running(&self, running: bool) {
        self.observed.health.set_ready(running);
        self.observed.metrics.watch_running.set(i64::from(running));
    }

    pub(crate) fn name(&self) -> &str {
        &self.settings.node_name
    }

    /// Runs until `shutdown` completes (Ok), or until a reboot failed or did not happen (Err).
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> Result<(), AgentError> {
        tokio::pin!(shutdown);
        info!(boot_id = %self.settings.boot_id, "watching the node");
        let mut watch = self.watch();
        let mut backoff = Backoff::default();
        let mut retry: Option<Retry> = None;
        let mut found_since_init = false;
        // The sentinel is looked at on the node as last seen, soon after the start, then
        // every --check-period.
        let mut last_seen: Option<Node> = None;
        let mut check_at = self
            .settings
            .sentinel
            .as_ref()
            .map(|_| Instant::now() + self.settings.check_period.min(FIRST_CHECK));
        let mut sentinel_reported: Option<String> = None;
        loop {
            let retry_at = retry.as_ref().map(|r| r.at);
            let check_due = check_at.filter(|_| last_seen.is_some());
            let node = tokio::select! {
                () = &mut shutdown => return self.stopping(),
                () = sleep_until(check_due.unwrap_or_else(Instant::now)), if check_due.is_some() => {
                    check_at = Some(Instant::now() + jittered(self.settings.check_period));
                    if let Some(node) = &last_seen {
                        self.check_sentinel(node, &mut sentinel_reported).await;
                    }
                    None
                }
                () = sleep_until(retry_at.unwrap_or_else(Instant::now)), if retry_at.is_some() => {
                    let last_seen = retry.take().map(|r| r.last_seen);
                    self.reread(last_seen).await
                }
                event = watch.next() => {
                    let event = event.ok_or_else(|| AgentError::WatchEnded(self.name().into()))?;
                    let node = self.on_watch_event(event, &mut found_since_init);
                    // Whatever the watch says is newer than the state a retry would act on.
                    retry = None;
                    if node.is_some() {
                        last_seen.clone_from(&node);
                    }
                    node
                }
            };
            let Some(node) = node else { continue };
            let handled = tokio::select! {
                () = &mut shutdown => return self.stopping(),
                handled = self.handle(node.clone()) => handled,
            };
            match handled {
                Ok(Outcome::Settled) => backoff.reset(),
                Ok(Outcome::RebootTriggered { deadline }) => {
                    return self.await_reboot(&node, deadline, shutdown).await;
                }
                Err(error) if error.is_fatal() => return Err(error),
                Err(error) => {
                    let delay = backoff.next_delay();
                    warn!(%error, "could not act on the node; trying again in {delay:?}");
                    let at = Instant::now() + delay;
                    retry = Some(Retry {
                        at,
                        last_seen: node,
                    });
                }
            }
        }
    }

    fn watch(&self) -> BoxStream<'static, Result<watcher::Event<Node>, watcher::Error>> {
        // Only this node: the agent's load on the API server does not grow with the cluster.
        let selector = format!("metadata.name={}", self.name());
        let config = watcher::Config::default().fields(&selector);
        watcher(self.nodes.clone(), config)
            .default_backoff()
            .boxed()
    }

    /// The node to act on, if the event brings one.
    fn on_watch_event(
        &self,
        event: Result<watcher::Event<Node>, watcher::Error>,
        found_since_init: &mut bool,
    ) -> Option<Node> {
        match event {
            Ok(watcher::Event::InitApply(node) | watcher::Event::Apply(node)) => {
                *found_since_init = true;
                self.watch_running(true);
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
    /// reboot, or does nothing (DESIGN: no API request while nothing changes).
    async fn check_sentinel(&self, node: &Node, reported: &mut Option<String>) {
        let Some(sentinel) = self.settings.sentinel.clone() else {
            return;
        };
        let what = sentinel.describe();
        let fingerprint = match tokio::task::spawn_blocking(move || sentinel.check()).await {
            Ok(Ok(fingerprint)) => fingerprint,
            Ok(Err(why)) => {
                warn!("cannot look at the reboot sentinel: {why}");
                return;
            }
            Err(_) => return,
        };
        let keys = &self.settings.keys;
        let facts = common::NodeFacts::from_node(node);
        let opted_out = keys.is_disabled(node.metadata.labels.as_ref());
        let recorded = facts.annotations.get(&keys.sentinel).map(String::as_str);
        let action = crate::sentinel::decide_sentinel(
            &facts.protocol(keys),
            opted_out,
            fingerprint.as_deref(),
            recorded,
        );
        let metrics = &self.observed.metrics;
        match action {
            SentinelAction::Nothing => {
                if fingerprint.is_none() {
                    metrics.sentinel_persists.set(0);
                    *reported = None;
                }
            }
            SentinelAction::Persists if *reported != fingerprint => {
                let note = format!(
                    "{what} is still there after the reboot requested for it: not requesting \
                     again until it changes (did the update apply? is it on a persistent disk?)"
                );
                warn!("{note}");
                metrics.sentinel_persists.set(1);
                self.events
                    .publish(node, Reason::SentinelPersists, note)
                    .await;
                reported.clone_from(&fingerprint);
            }
            SentinelAction::Persists => {}
            SentinelAction::Request => {
                let requested_by = format!("agent: {what}");
                let patch = common::Transition::new(keys).request(
                    &facts,
                    &requested_by,
                    fingerprint.as_deref().unwrap_or_default(),
                );
                let written = self
                    .nodes
                    .patch(
                        self.name(),
                        &PatchParams::default(),
                        &Patch::Json::<()>(patch),
                    )
                    .await;
                match written {
                    Ok(_) => {
                        info!(%requested_by, "the reboot sentinel asks for a reboot; requested");
                        metrics.reboots_requested.inc();
                        let note = format!("{what} asks for a reboot: reboot-needed=true");
                        self.events
                            .publish(node, Reason::RebootRequired, note)
                            .await;
                    }
                    // The node changed since it was seen (an administrator's request, say):
                    // the next check decides on the new state.
                    Err(error) => {
                        metrics.api_error(ApiErrorKind::of(&error));
                        info!(%error, "could not request the reboot; looking again later");
                    }
                }
            }
        }
    }
}
