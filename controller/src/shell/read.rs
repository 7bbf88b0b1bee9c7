//! The round's read step: the ledger as watched, the drains that ended since the last round,
//! the nodes as the decision core views them, the schedule, the gates and the pre-flight
//! checks.

use super::Shell;
use crate::{
    cache::{memory::ViewInputs, nodes, sightings},
    cluster::events::Reason,
    drain::{
        DrainOutcome,
        tracker::{Finished, blocking_list},
    },
    gates::{GateReading, preflight::PreflightReading},
    notify::Kind,
};
use common::AnnotationKeys;
use controller_core::{
    decide::{Hold, NodeView},
    pool_index::PoolCounts,
    schedule::Schedule,
};
use k8s_openapi::api::core::v1::Node;
use kube::runtime::reflector::ObjectRef;
use std::{collections::HashMap, sync::Arc};

/// What a round read, for the decision and for what it says.
pub(super) struct Reading {
    /// The nodes in the protocol, or holding a slot.
    pub(super) nodes: Vec<Arc<Node>>,
    /// The rest of the pool, counted.
    pub(super) others: PoolCounts,
    pub(super) views: Vec<NodeView>,
    /// The pool's size, which a percentage budget is sized on.
    pub(super) pool: usize,
    pub(super) budget: usize,
    /// Why the schedule (the pause, the windows) holds new grants, if it does.
    pub(super) scheduled: Option<Hold>,
    pub(super) window_open: bool,
    pub(super) gates: GateReading,
    pub(super) preflight: PreflightReading,
    /// The decision clock when the round read.
    pub(super) now: u64,
}

impl Shell {
    /// Reads what a round decides on. `None` when the round cannot go on: the ledger Lease is
    /// gone and could not be restored yet.
    pub(super) async fn read(&mut self) -> Option<Reading> {
        self.ledger.catch_up();
        if self.ledger.is_gone() && !self.dry_run && !self.restore_ledger().await {
            return None;
        }
        self.collect_drain_outcomes();
        self.reread_for_rebuild().await;
        self.reread_copies_the_cache_lacks().await;
        let (nodes, others, views) = self.view();
        // A percentage budget is sized on the nodes the cache has: a copy of ours that the cache
        // does not have may be of a node deleted since the read, and counting it would raise
        // the budget above what the pool allows.
        let cached = |v: &&NodeView| self.nodes.get(&ObjectRef::new(v.name())).is_some();
        let pool = views.iter().filter(|v| v.counted()).filter(cached).count() + others.nodes();
        let budget = self.budgets.at(pool, self.clock.now()).budget;
        let (scheduled, window_open) = self.hold_now();
        let gates = self.gates.read(&self.metrics);
        let now = self.now_ms();
        let preflight = self.preflight.read(&views, &self.metrics, now);
        Some(Reading {
            nodes,
            others,
            views,
            pool,
            budget,
            scheduled,
            window_open,
            gates,
            preflight,
            now,
        })
    }

    /// The nodes a round views, the rest of the pool counted, and the decision core's views
    /// of the former; what was said of the nodes no longer viewed is forgotten.
    fn view(&mut self) -> (Vec<Arc<Node>>, PoolCounts, Vec<NodeView>) {
        let (nodes, others) = self.gather();
        self.seen = self.sightings.look(
            self.ledger.current(),
            carries_in(&nodes, &self.keys),
            self.wall_ms(),
        );
        let views = self.memory.views(
            &nodes,
            ViewInputs {
                keys: &self.keys,
                ledger: self.ledger.current(),
                drains: &self.drains,
                overlay: &self.overlay,
                now: self.now_ms(),
                seen: &self.seen,
            },
        );
        self.said.forget(&views);
        (nodes, others, views)
    }

    /// The nodes a round views (in the protocol, or holding a slot) and the rest counted.
    fn gather(&mut self) -> (Vec<Arc<Node>>, PoolCounts) {
        nodes::gather(
            &self.nodes,
            &self.index,
            &mut self.overlay,
            self.ledger.current().slots.keys(),
        )
    }

    /// Why no new grant may be made now, if so; logged and published when it changes.
    /// Also whether a window is open, computed once for the round.
    fn hold_now(&mut self) -> (Option<Hold>, bool) {
        let now = self.clock.now();
        let window_open = self.schedule.windows.is_open(now);
        let hold = Schedule::hold(self.paused(), window_open);
        if hold != self.hold {
            match self.schedule.waiting_event(hold, now) {
                Some((_, why)) => tracing::info!(?hold, "no new reboots: {why}"),
                None => tracing::info!("new reboots may start (window open, not paused)"),
            }
            self.hold = hold;
        }
        if self.reports_gauges {
            self.metrics.paused.set(i64::from(self.paused()));
            self.metrics.window_open.set(i64::from(window_open));
            let next = self.schedule.windows.next_opening(now).unwrap_or(now);
            self.metrics.window_next_open.set(next.as_second());
        }
        (hold, window_open)
    }

    /// A damaged ledger is rebuilt from the grants the nodes carry: read fresh, once per damaged
    /// version. Rebuilt from the cache, it would forget the grant of a node whose update the
    /// watch has not brought yet (another replica's), and grant that slot again.
    async fn reread_for_rebuild(&mut self) {
        if !self.ledger.wants_reread() {
            return;
        }
        let names: Vec<String> = self
            .nodes
            .state()
            .iter()
            .filter_map(|n| n.metadata.name.clone())
            .collect();
        tracing::info!(
            nodes = names.len(),
            "reading every node before rebuilding the slot ledger"
        );
        for name in names {
            self.refetch(&name).await;
        }
        self.ledger.reread_done();
    }

    /// Reads again each node we hold a copy of that the cache does not have: the round counts
    /// it as the API server has it now. Dropped unread, a node made again and cordoned while
    /// the cache lags would be hidden from the budget; kept unread, a deletion would be hidden
    /// from the round.
    async fn reread_copies_the_cache_lacks(&mut self) {
        for name in self.overlay.unconfirmed_copies(&self.nodes) {
            self.refetch(&name).await;
        }
    }

    /// Takes in the drains that ended since the last round: each one's metric, log, Event and
    /// notification, and the Event of the delay before its reboot.
    pub(super) fn collect_drain_outcomes(&mut self) {
        let now = self.wall_ms();
        for (finished, ended) in self.drains.finished(now) {
            let Finished {
                grant,
                node,
                outcome,
                took,
            } = finished;
            let name = node.metadata.name.clone().unwrap_or_default();
            match outcome {
                DrainOutcome::Drained { evicted, .. } => {
                    self.metrics.drain_finished("drained", took);
                    tracing::info!(node = %name, %grant, evicted, took = ?took, "drained");
                    let details = serde_json::json!({
                        "evicted": evicted,
                        "seconds": took.as_secs_f64(),
                    });
                    self.notify_node(Kind::NodeDrained, &name, details);
                }
                DrainOutcome::Superseded => {
                    tracing::info!(node = %name, %grant, "drain stopped: the node no longer holds its grant");
                }
                DrainOutcome::TimedOut { blocking, .. } if ended.forced => {
                    self.metrics.drain_finished("timed_out", took);
                    self.metrics.reboots_forced.inc();
                    let pods = blocking_list(&blocking);
                    tracing::warn!(node = %name, blocking = ?pods, "drain timed out; rebooting anyway (--force-reboot)");
                    let note = format!(
                        "drain timed out after --drain-timeout ({}); --force-reboot: rebooting \
                         anyway with {} pod(s) still on the node: {}",
                        common::duration::duration_text(took),
                        blocking.len(),
                        pods.join("; ")
                    );
                    self.events.publish(&node, Reason::RebootForced, note);
                }
                DrainOutcome::TimedOut { blocking, .. } => {
                    let pods = blocking_list(&blocking);
                    self.metrics.drain_finished("timed_out", took);
                    self.metrics.drain_timeouts.inc();
                    self.metrics.reboot_failed("drain_timeout");
                    tracing::warn!(node = %name, blocking = ?pods, "drain timed out; giving the slot back");
                    let note = format!(
                        "drain timed out; node uncordoned and slot released, {}; blocked by {}",
                        self.retry_words(&node),
                        pods.join("; ")
                    );
                    self.events.publish(&node, Reason::DrainBlocked, note);
                }
            }
            let delay = self.schedule.reboot_delay;
            if ended.first && !delay.is_zero() {
                let note = format!(
                    "drained; reboot-now in {} (--reboot-delay)",
                    common::duration::duration_text(delay)
                );
                tracing::info!(node = %name, %grant, "{note}");
                self.events
                    .publish_action(&node, Reason::Draining, "RebootDelayed", note);
            }
        }
    }
}

impl Shell {
    /// What follows a failed drain of `node`: a retry, or, at its last attempt
    /// (`--drain-attempts`), being set aside.
    fn retry_words(&self, node: &Node) -> String {
        let Some(attempts) = self.set_aside.attempts else {
            return "retried later".to_owned();
        };
        let recorded = (node.metadata.annotations.as_ref())
            .and_then(|a| a.get(&self.keys.drain_failures))
            .map(String::as_str);
        let failed = common::drain_failures::DrainFailures::next(recorded, &[]).count;
        if failed >= attempts {
            format!("failed drain {failed} of --drain-attempts {attempts}: set aside")
        } else {
            format!("retried later (failed drain {failed} of --drain-attempts {attempts})")
        }
    }
}

/// Whether the node of that name, among `nodes`, carries the grant (for [`Sightings::look`]).
fn carries_in<'a>(
    nodes: &'a [Arc<Node>],
    keys: &'a AnnotationKeys,
) -> impl Fn(&str, &str) -> bool + 'a {
    let by_name: HashMap<&str, &Node> = nodes
        .iter()
        .map(|n| (n.metadata.name.as_deref().unwrap_or_default(), n.as_ref()))
        .collect();
    move |name, grant| {
        by_name
            .get(name)
            .is_some_and(|n| sightings::carries(n, keys, grant))
    }
}
