//! The I/O shell around the decision core: feeds it from the cache, the ledger and its
//! memory, executes what it decides, and feeds the results straight back.

use crate::{
    cache::{
        memory::{Memory, ViewInputs},
        nodes::{self, Overlay, SharedIndex},
        sightings::{self, Seen, Sightings},
    },
    clock::Clock,
    cluster::{
        api::NodeApi,
        events::{Events, Reason},
        leader::Leadership,
        ledger_store::{LedgerError, LedgerStore, ReadLedger},
    },
    drain::tracker::DrainTracker,
    gates::{
        GateReading, Gates,
        preflight::{PreflightChecks, PreflightReading},
    },
    metrics::Metrics,
    notify::{Notifier, Rollout},
};
use common::{AnnotationKeys, MaxUnavailable, NodeFacts, RebootMarks, Transition};
use controller_core::{
    decide::{Decision, Fence, Hold, NodeAction, ReleaseReason, Round, Unexpected},
    dry_run, plan,
    pool_index::PoolCounts,
    schedule::Schedule,
};
use futures::{StreamExt, stream};
use k8s_openapi::{api::core::v1::Node, jiff::Timestamp};
use kube::runtime::reflector::{ObjectRef, Store};
use observability::ApiErrorKind;
use std::{
    collections::{BTreeSet, HashMap},
    sync::Arc,
    time::Duration,
};
use tokio::sync::watch;

/// Where the shell's inputs come from, built by `run` (or by the model test).
#[allow(missing_debug_implementations)] // the API traits have no Debug
pub struct ShellParts {
    pub node_api: Arc<dyn NodeApi>,
    pub clock: Arc<dyn Clock>,
    pub keys: AnnotationKeys,
    /// Labels and the taint set around a reboot (`--pre-reboot-node-labels` and the others).
    pub marks: RebootMarks,
    pub max_unavailable: MaxUnavailable,
    pub zone_budget: Option<MaxUnavailable>,
    /// `--concurrency`.
    pub concurrency: Option<MaxUnavailable>,
    pub drains: DrainTracker,
    pub nodes: Store<Node>,
    pub index: SharedIndex,
    pub overlay: Overlay,
    pub ledger: ReadLedger,
    pub ledger_store: LedgerStore,
    pub ledger_watch: watch::Receiver<ReadLedger>,
    pub events: Events,
    pub schedule: Schedule,
    pub gates: Gates,
    /// What keeps a requested node from being granted: no agent, a budget at 0.
    pub preflight: PreflightChecks,
    pub metrics: Metrics,
    /// Nothing is written once this replica no longer leads.
    pub leadership: Leadership,
    /// `--dry-run`: say what would be written instead of writing it.
    pub dry_run: bool,
    /// Where the steps announced are also notified (`--notify-url`).
    pub notifier: Notifier,
    /// When this process first saw each grant (shared with its follower).
    pub sightings: Sightings,
}

/// One leading replica's rounds: decide, write, and remember what was written.
#[allow(missing_debug_implementations)] // the API traits have no Debug
pub struct Shell {
    api: Arc<dyn NodeApi>,
    clock: Arc<dyn Clock>,
    keys: AnnotationKeys,
    marks: RebootMarks,
    max_unavailable: MaxUnavailable,
    zone_budget: Option<MaxUnavailable>,
    concurrency: Option<MaxUnavailable>,
    drains: DrainTracker,
    nodes: Store<Node>,
    index: SharedIndex,
    overlay: Overlay,
    /// The ledger as last read, and what is known of its Lease.
    ledger: LedgerCopy,
    events: Events,
    schedule: Schedule,
    gates: Gates,
    preflight: PreflightChecks,
    /// Why the last round granted nothing new, to log when that changes.
    hold: Option<Hold>,
    memory: Memory,
    /// What was already said, to say each thing once.
    said: Said,
    /// When, on the decision clock, the last round's decision may change with time alone
    /// (`Round::next_look`).
    look_at: Option<u64>,
    /// Some write of the last round failed for a reason other than a stale read.
    failed: bool,
    metrics: Metrics,
    leadership: Leadership,
    dry_run: bool,
    notifier: Notifier,
    /// Whether a rollout is under way, for its notifications.
    rollout: Rollout,
    sightings: Sightings,
    /// The sightings of the last round's look.
    seen: Seen,
}

mod announce;
mod dry_plan;
mod format;
mod ledger;
mod read;

use announce::Said;
use ledger::LedgerCopy;
mod writes;

impl Shell {
    pub fn new(parts: ShellParts) -> Self {
        let mut shell = Self {
            api: parts.node_api,
            clock: parts.clock,
            keys: parts.keys,
            marks: parts.marks.of_ledger(parts.ledger_store.id()),
            max_unavailable: parts.max_unavailable,
            zone_budget: parts.zone_budget,
            concurrency: parts.concurrency,
            drains: parts.drains,
            nodes: parts.nodes,
            index: parts.index,
            overlay: parts.overlay,
            ledger: LedgerCopy::new(
                parts.ledger,
                parts.ledger_store,
                parts.ledger_watch,
                parts.metrics.clone(),
                parts.events.clone(),
            ),
            events: parts.events,
            schedule: parts.schedule,
            gates: parts.gates,
            preflight: parts.preflight,
            hold: None,
            memory: Memory::default(),
            said: Said::default(),
            look_at: None,
            failed: false,
            metrics: parts.metrics,
            leadership: parts.leadership,
            dry_run: parts.dry_run,
            notifier: parts.notifier,
            rollout: Rollout::default(),
            sightings: parts.sightings,
            seen: Seen::new(),
        };
        shell.rollout = Rollout::taken_over(!shell.ledger.current().slots.is_empty());
        shell
    }

    fn now_ms(&self) -> u64 {
        self.clock.elapsed_ms()
    }

    /// The wall clock in Unix milliseconds (the unit of the round's `clock`).
    fn wall_ms(&self) -> u64 {
        u64::try_from(self.clock.now().as_millisecond()).unwrap_or_default()
    }

    /// One round: decide and execute. True when something was written and another round
    /// should follow at once (the next step of a node often depends on this one).
    pub async fn round(&mut self) -> bool {
        self.failed = false;
        // A round that ends early asks for no look: a past one would wake the loop at once.
        self.look_at = None;
        if !self.leadership.is_leading() {
            return false;
        }
        self.ledger.catch_up();
        if self.ledger.is_gone() && !self.dry_run && !self.restore_ledger().await {
            return false;
        }
        self.collect_drain_outcomes();
        self.reread_for_rebuild().await;
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
        // A percentage budget is sized on the nodes the cache has: a copy of ours that the cache
        // no longer has (kept one round after a read) is most likely deleted, and counting it
        // would raise the budget above what the pool allows.
        let cached = |v: &&controller_core::decide::NodeView| {
            self.nodes.get(&ObjectRef::new(v.name())).is_some()
        };
        let pool = views.iter().filter(|v| v.in_pool).filter(cached).count() + others.nodes();
        let budget = self.max_unavailable.resolve(pool);
        let (scheduled, window_open) = self.hold_now();
        let gates = self.gates.read(&self.metrics);
        let fence = Fence {
            paused: self.ledger.current().paused,
            window_open,
            gates_closed: gates.pool.is_some(),
        };
        let blocked = gates.blocked_nodes();
        let now = self.now_ms();
        let preflight = self.preflight.read(&views, &self.metrics, now);
        let round = Round {
            nodes: &views,
            others: &others,
            ledger: self.ledger.current(),
            deleted: self.overlay.deleted(),
            budget,
            zone_budget: self.zone_budget,
            concurrency: self.concurrency.map(|c| c.resolve(pool)),
            drain_enabled: self.drains.enabled(),
            now,
            fence,
            finish_after_window: self.schedule.finish_after_window,
            min_ready: u64::try_from(self.schedule.min_ready.as_millis()).unwrap_or(u64::MAX),
            clock: self.wall_ms(),
            reboot_timeout: u64::try_from(self.schedule.reboot_timeout.as_millis())
                .unwrap_or(u64::MAX),
            give_up_after: self.schedule.give_up_after.map_or(u64::MAX, |d| {
                u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
            }),
            delays: self.schedule.delays(),
            blocked: &blocked,
            preflight: &preflight.held,
        };
        let mut decision = round.decide();
        let rollout = self.dry_run.then(|| self.rollout_plan(&round, &decision));
        #[cfg(test)]
        self.check_incremental(&round, &decision);
        let look = round.next_look();
        self.look_at = look
            .map(|ms| now.saturating_add(ms))
            .into_iter()
            .chain(preflight.look_at)
            .min();
        // What was read fresh for this round has been taken in.
        self.overlay.end_round();
        // Alerts are asked about only while requests wait and nothing else holds them, or while
        // a granted node waits for the gates to let it go on.
        let gated = |(_, hold): &(String, Hold)| *hold == Hold::Unhealthy;
        self.gates.want_checks(
            (scheduled.is_none() && !decision.waiting.is_empty())
                || decision.held.iter().any(gated),
        );
        if self.ledger.is_damaged() {
            plan::rebuild_only(&mut decision);
        }
        let by_name: HashMap<&str, &Arc<Node>> = nodes
            .iter()
            .map(|n| (n.metadata.name.as_deref().unwrap_or_default(), n))
            .collect();
        self.announce_waiting(&decision, &by_name, pool, scheduled, &gates, &preflight);
        self.announce_preflight(&decision, &by_name, &preflight);
        self.warn_not_ready_after_reboot(&decision, &by_name);
        self.warn_reboots_overdue(&decision, &by_name);
        self.announce_foreign(&decision, &by_name);
        self.announce_unknown_format(&decision, &by_name);
        self.announce_opted_out(&decision, &by_name);
        self.announce_unexpected(&decision, &by_name);
        self.announce_rollout(&decision, scheduled, &gates);
        if self.marks.prefer_no_schedule_taint.is_some() {
            let t = Transition::new(&self.keys).with_marks(&self.marks);
            plan::taint_waiting(&mut decision, |name| {
                by_name
                    .get(name)
                    .is_some_and(|n| t.taint_waiting(&NodeFacts::from_node(n)).is_some())
            });
        }
        if self.dry_run {
            self.say_dry_run(&decision, &by_name, budget).await;
            self.say_rollout_plan(rollout);
            return false;
        }
        let mut progressed = false;
        if !self.leadership.is_leading() {
            return false;
        }
        self.confirm_releases(&mut decision, &by_name).await;
        // What holds new grants is read again now: the round may have waited on the API.
        if self.fence_now().0.hold().is_some() {
            plan::drop_new_grants(&mut decision);
        }
        if !decision.ledger.is_empty() || self.ledger.is_damaged() {
            if !self.leadership.is_leading() {
                return false;
            }
            match self.write_ledger(&decision, &by_name).await {
                Ok(()) => progressed = true,
                // Another controller moved first: decide again on the ledger as it is now.
                Err(LedgerError::Conflict) => {
                    self.metrics.api_error("ledger", ApiErrorKind::Conflict);
                    return self.ledger.reload().await;
                }
                // Deleted by hand: recreate it, then decide again on it.
                Err(LedgerError::Gone) => {
                    self.metrics.api_error("ledger", ApiErrorKind::NotFound);
                    self.ledger.mark_gone();
                    return self.restore_ledger().await;
                }
                Err(error) => {
                    self.metrics.api_error("ledger", error.kind());
                    tracing::warn!(%error, "could not write the slot ledger");
                    self.failed = true;
                    return false;
                }
            }
        }
        if !self.leadership.is_leading() {
            return false;
        }
        // A grant this round did not write is claimed only while the ledger still holds it: a
        // ledger damaged or deleted since, and rebuilt from the nodes, cannot know a grant no
        // node carries yet.
        let claims = decision
            .node_actions
            .iter()
            .any(|a| matches!(a, NodeAction::Claim { .. }));
        if claims && !progressed && !self.ledger_is_current().await {
            return true;
        }
        // Each step that takes a granted node further is checked against the pause, the window
        // and the gates as they are now, not as the round began: this round (or the replica
        // that wrote the grant) may have decided on an older reading.
        let (fence, gates) = self.fence_now();
        let (actions, held) = plan::fence_actions(
            &mut decision,
            fence,
            &gates.blocked_nodes(),
            self.schedule.finish_after_window,
        );
        self.announce_held(&held, &by_name, &gates);
        progressed | self.execute(actions, &by_name).await
    }

    /// The fence as it stands now: the pause as last seen (the ledger watch may have seen it
    /// after this round's copy), the window by the clock, the gates' latest answers.
    fn fence_now(&mut self) -> (Fence, GateReading) {
        let paused = self.ledger.paused_now();
        let gates = self.gates.read(&self.metrics);
        let fence = Fence {
            paused,
            window_open: self.schedule.windows.is_open(self.clock.now()),
            gates_closed: gates.pool.is_some(),
        };
        (fence, gates)
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

    /// Publishes the pool gauges as this replica sees the pool now.
    pub fn publish_pool(&mut self) {
        let summary = nodes::pool_summary(
            &self.nodes,
            &self.index,
            &mut self.overlay,
            self.ledger.current(),
            &self.keys,
        );
        let budget = self.max_unavailable.resolve(summary.nodes);
        self.metrics.pool(&summary, budget);
    }

    pub fn last_round_failed(&self) -> bool {
        self.failed
    }

    /// Why no new grant may be made now, if so; logged and published when it changes.
    /// Also whether a window is open, computed once for the round.
    fn hold_now(&mut self) -> (Option<Hold>, bool) {
        let now = self.clock.now();
        let window_open = self.schedule.windows.is_open(now);
        let hold = Schedule::hold(self.ledger.current().paused, window_open);
        if hold != self.hold {
            match self.schedule.waiting_event(hold, now) {
                Some((_, why)) => tracing::info!(?hold, "no new reboots: {why}"),
                None => tracing::info!("new reboots may start (window open, not paused)"),
            }
            self.hold = hold;
        }
        self.metrics
            .paused
            .set(i64::from(self.ledger.current().paused));
        self.metrics.window_open.set(i64::from(window_open));
        let next = self.schedule.windows.next_opening(now).unwrap_or(now);
        self.metrics.window_next_open.set(next.as_second());
        (hold, window_open)
    }

    /// How long until a round must look again though nothing else changes: the earliest of
    /// what the last round said (a soak ends, a drain may be retried, a reboot becomes overdue)
    /// and the next opening or closing of a window.
    pub fn next_look(&self) -> Option<Duration> {
        let now = self.now_ms();
        let round = self
            .look_at
            .map(|at| Duration::from_millis(at.saturating_sub(now)));
        let window = self.schedule.until_next_change(self.clock.now());
        round.into_iter().chain(window).min()
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

    /// The model test's check of the incremental round: deciding on the nodes in the protocol
    /// and the slot holders, with the rest of the pool counted by the index, decides exactly
    /// as a round over every node of the cache; and the index is a recount of the cache.
    #[cfg(test)]
    fn check_incremental(&self, round: &Round<'_>, decision: &Decision) {
        let mut overlay = self.overlay.clone();
        let names = self
            .nodes
            .state()
            .iter()
            .filter_map(|n| n.metadata.name.clone())
            .chain(round.nodes.iter().map(|v| v.name().to_owned()))
            .collect();
        let all = overlay.nodes_named(&self.nodes, &names);
        let views = self.memory.clone().views(
            &all,
            ViewInputs {
                keys: &self.keys,
                ledger: self.ledger.current(),
                drains: &self.drains,
                overlay: &overlay,
                now: round.now,
                seen: &self.seen,
            },
        );
        let everyone = PoolCounts::default();
        let full = Round {
            nodes: &views,
            others: &everyone,
            ..*round
        };
        assert_eq!(
            &full.decide(),
            decision,
            "the incremental round decided otherwise than a round over every node"
        );
        let recount = nodes::NodeFeed::recount(overlay.indexing(), &self.nodes);
        let index = nodes::lock(&self.index);
        assert_eq!(
            recount.totals(),
            index.totals(),
            "the pool index is not a recount"
        );
        assert_eq!(recount.in_protocol(), index.in_protocol());
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
