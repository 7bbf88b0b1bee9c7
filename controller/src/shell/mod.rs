//! The I/O shell around the decision core: feeds it from the cache, the ledger and its
//! memory, executes what it decides, and feeds the results straight back.

use crate::{
    cache::{
        memory::Memory,
        nodes::{self, Overlay, SharedIndex},
        sightings::{Seen, Sightings},
    },
    clock::Clock,
    cluster::{
        api::NodeApi,
        events::Events,
        leader::Leadership,
        ledger_store::{LedgerStore, ReadLedger},
    },
    drain::tracker::DrainTracker,
    gates::{GateReading, Gates, preflight::PreflightChecks},
    metrics::{Metrics, PoolSummary},
    notify::{Notifier, Rollout},
};
use common::{AnnotationKeys, MaxUnavailable, NodeFacts, Phase, RebootMarks, Request, Transition};
use controller_core::{
    decide::{Decision, Fence, Hold, Round, SetAside},
    effects,
    node_view::NodeView,
    rollout::RolloutRules,
    schedule::Schedule,
    scheduled_budget::Budgets,
};
use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::Node;
use kube::runtime::reflector::Store;
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
    pub budgets: Budgets,
    pub zone_budget: Option<MaxUnavailable>,
    /// `--concurrency`.
    pub concurrency: Option<MaxUnavailable>,
    /// `--drain-attempts` and `--max-blocked-nodes`.
    pub set_aside: SetAside,
    /// `--canary`, `--canary-soak`, `--waves` and `--max-failures`.
    pub rollout_rules: RolloutRules,
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
    /// The pool's own pause (a `RebootPool`'s `spec.paused`, or its finalizer not there yet),
    /// beside the ledger's.
    pub pool_paused: PoolPause,
    /// Whether this pool's state is the pool gauges' (the flags' pool's); a `RebootPool`'s is
    /// in its status.
    pub reports_gauges: bool,
}

/// What a pool's status tells, as the last round saw it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PoolFacts {
    /// Why the waiting nodes wait, when something holds them.
    pub held: Option<String>,
    /// The nodes whose reboot is overdue.
    pub overdue: Vec<String>,
    /// Why the pool is stalled (a failed canary, too many failures, too many nodes set aside),
    /// if it is.
    pub stalled: Option<String>,
}

/// One leading replica's rounds: decide, write, and remember what was written.
#[allow(missing_debug_implementations)] // the API traits have no Debug
pub struct Shell {
    api: Arc<dyn NodeApi>,
    clock: Arc<dyn Clock>,
    keys: AnnotationKeys,
    marks: RebootMarks,
    budgets: Budgets,
    zone_budget: Option<MaxUnavailable>,
    concurrency: Option<MaxUnavailable>,
    set_aside: SetAside,
    rollout_rules: RolloutRules,
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
    pool_paused: PoolPause,
    reports_gauges: bool,
    pool_facts: PoolFacts,
    /// The pool's last reboots, grant to completion (`--reboot-estimate`).
    reboot_lengths: window_fit::RebootLengths,
}

/// A pool's own pause, beside the ledger's: its `spec.paused`, fixed for a run of the pools (a
/// change of the spec starts them again), and, read at each round, whether the pool object
/// lacks its finalizer or the flags' pool is paused (the stop button of every pool). Nothing is granted before the finalizer is there, so that a pool
/// deleted after a grant waits for it; reading it live spares every pool a restart, and the
/// node cache a list of every node, when the controller adds it.
#[derive(Clone)]
pub struct PoolPause {
    spec: bool,
    fenced: Option<Arc<dyn Fn() -> bool + Send + Sync>>,
    fresh: Option<FreshPause>,
}

/// `spec.paused` of a RebootPool as the API server has it now (true when it cannot tell).
pub type FreshPause = Arc<dyn Fn() -> BoxFuture<'static, bool> + Send + Sync>;

impl PoolPause {
    /// A pause that is as given for the whole run (the flags' pool, the model's pools).
    pub fn fixed(paused: bool) -> Self {
        Self {
            spec: paused,
            fenced: None,
            fresh: None,
        }
    }

    /// `spec`, and paused too while `fenced` says no (the finalizer is not there, or the flags'
    /// pool is paused).
    pub fn until_fenced(spec: bool, fenced: impl Fn() -> bool + Send + Sync + 'static) -> Self {
        Self {
            spec,
            fenced: Some(Arc::new(fenced)),
            fresh: None,
        }
    }

    /// Reads `spec.paused` from the API server just before a granted node is taken further,
    /// so that a pause written before that read holds it: the pool's pause is not on its
    /// ledger, so the ledger's compare-and-swap cannot be the one to see it.
    pub fn read_fresh(self, fresh: FreshPause) -> Self {
        Self {
            fresh: Some(fresh),
            ..self
        }
    }

    /// Whether the pool is paused now.
    pub fn now(&self) -> bool {
        self.spec || self.fenced.as_ref().is_some_and(|fenced| !fenced())
    }

    /// Whether the pool is paused now, its spec read from the API server where it can be.
    pub async fn now_fresh(&self) -> bool {
        if self.now() {
            return true;
        }
        match &self.fresh {
            Some(fresh) => fresh().await,
            None => false,
        }
    }
}

impl std::fmt::Debug for PoolPause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PoolPause")
            .field("now", &self.now())
            .finish()
    }
}

mod announce;
mod dry_plan;
mod format;
mod ledger;
mod read;
mod rollout_rules;
mod window_fit;

use announce::Said;
use ledger::LedgerCopy;
use read::Reading;
mod writes;

impl Shell {
    pub fn new(parts: ShellParts) -> Self {
        let mut shell = Self {
            api: parts.node_api,
            clock: parts.clock,
            keys: parts.keys,
            marks: parts.marks.of_ledger(parts.ledger_store.id()),
            budgets: parts.budgets,
            zone_budget: parts.zone_budget,
            concurrency: parts.concurrency,
            set_aside: parts.set_aside,
            rollout_rules: parts.rollout_rules,
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
            pool_paused: parts.pool_paused,
            reports_gauges: parts.reports_gauges,
            pool_facts: PoolFacts::default(),
            reboot_lengths: window_fit::RebootLengths::default(),
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

    /// One round: read, decide, say, write. True when something was written and another
    /// round should follow at once (the next step of a node often depends on this one).
    pub async fn round(&mut self) -> bool {
        self.failed = false;
        // A round that ends early asks for no look: a past one would wake the loop at once.
        self.look_at = None;
        if !self.leadership.is_leading() {
            return false;
        }
        let Some(read) = self.read().await else {
            return false;
        };
        let (mut decision, rollout) = self.decide(&read);
        let by_name: HashMap<&str, &Arc<Node>> = read
            .nodes
            .iter()
            .map(|n| (n.metadata.name.as_deref().unwrap_or_default(), n))
            .collect();
        self.say(&read, &decision, &by_name);
        self.taint_waiting(&mut decision, &by_name);
        if self.dry_run {
            self.say_dry_run(&decision, &by_name, read.budget).await;
            self.say_rollout_plan(rollout);
            return false;
        }
        self.write(decision, &by_name).await
    }

    /// The decision on what was read, as the shell may carry it out (a damaged ledger is only
    /// rebuilt), and in a dry run the plan of the whole rollout. Notes when the decision may
    /// change with time alone, and which checks the next rounds need.
    fn decide(&mut self, read: &Reading) -> (Decision, Option<Vec<String>>) {
        let blocked = read.gates.blocked_nodes();
        let round = self.round_on(read, &blocked);
        let mut decision = round.decide();
        let rollout = self.dry_run.then(|| self.rollout_plan(&round, &decision));
        #[cfg(test)]
        self.check_incremental(&round, &decision);
        let look = round.next_look();
        self.look_at = look
            .map(|ms| read.now.saturating_add(ms))
            .into_iter()
            .chain(read.preflight.look_at)
            .min();
        // What was read fresh for this round has been taken in.
        self.overlay.end_round();
        // Alerts are asked about only while requests wait and nothing else holds them, or while
        // a granted node has not been told to reboot yet: an alert that fires mid-drain must be
        // seen to hold it (and, as its window closes, to give it back).
        let gated = |(_, hold): &(String, Hold)| *hold == Hold::Unhealthy;
        let granted_not_told = |v: &NodeView| {
            v.state.grant.is_some()
                && v.state.phase == Phase::Idle
                && v.state.request == Request::Needed
        };
        self.gates.want_checks(
            (read.scheduled.is_none() && !decision.waiting.is_empty())
                || decision.held.iter().any(gated)
                || read.views.iter().any(granted_not_told),
        );
        if self.ledger.is_damaged() {
            effects::rebuild_only(&mut decision);
            // A rebuild decides nothing of the rollout: its record stays as it is.
            decision.ledger.rollout = None;
        }
        (decision, rollout)
    }

    /// The decision core's input: what was read, the ledger as held, and the flags.
    fn round_on<'a>(&'a self, read: &'a Reading, blocked: &'a BTreeSet<String>) -> Round<'a> {
        let fence = Fence {
            paused: self.paused(),
            window_open: read.window_open,
            gates_closed: read.gates.pool.is_some(),
        };
        let millis = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        Round {
            nodes: &read.views,
            others: &read.others,
            ledger: self.ledger.current(),
            deleted: self.overlay.deleted(),
            budget: read.budget,
            zone_budget: self.zone_budget,
            concurrency: self.concurrency.map(|c| c.resolve(read.pool)),
            drain_enabled: self.drains.enabled(),
            now: read.now,
            fence,
            finish_after_window: self.schedule.finish_after_window,
            min_ready: millis(self.schedule.min_ready),
            clock: self.wall_ms(),
            reboot_timeout: millis(self.schedule.reboot_timeout),
            give_up_after: self.schedule.give_up_after.map_or(u64::MAX, millis),
            delays: self.schedule.delays(),
            blocked,
            preflight: &read.preflight.held,
            set_aside: self.set_aside,
            rollout: self.rollout_rules,
            window_fit: self.window_fit(),
        }
    }

    /// With `--prefer-no-schedule-taint`, the waiting nodes' taints: put on each node that
    /// waits, taken off each that no longer does.
    fn taint_waiting(&self, decision: &mut Decision, by_name: &HashMap<&str, &Arc<Node>>) {
        if self.marks.prefer_no_schedule_taint.is_some() {
            let t = Transition::new(&self.keys).with_marks(&self.marks);
            effects::taint_waiting(decision, |name| {
                by_name
                    .get(name)
                    .is_some_and(|n| t.taint_waiting(&NodeFacts::from_node(n)).is_some())
            });
        }
    }

    /// The fence as it stands now: the pause as last seen (the ledger watch may have seen it
    /// after this round's copy), the window by the clock, the gates' latest answers.
    fn fence_now(&mut self) -> (Fence, GateReading) {
        let paused = self.pool_paused.now() || self.ledger.paused_now();
        let gates = self.gates.read(&self.metrics);
        let fence = Fence {
            paused,
            window_open: self.schedule.windows.is_open(self.clock.now()),
            gates_closed: gates.pool.is_some(),
        };
        (fence, gates)
    }

    /// Publishes the pool gauges as this replica sees the pool now (the flags' pool only);
    /// returns what a pool's status tells.
    pub fn publish_pool(&mut self) -> (PoolSummary, usize, PoolFacts) {
        let summary = nodes::pool_summary(
            &self.nodes,
            &self.index,
            &mut self.overlay,
            self.ledger.current(),
            &self.keys,
        );
        let budget = self.budgets.at(summary.nodes, self.clock.now()).budget;
        if self.reports_gauges {
            self.metrics.pool(&summary, budget);
        }
        (summary, budget, self.pool_facts.clone())
    }

    /// Paused by the ledger's annotation or by the pool itself.
    fn paused(&self) -> bool {
        self.pool_paused.now() || self.ledger.current().paused
    }

    pub fn last_round_failed(&self) -> bool {
        self.failed
    }

    /// Whether this replica leads: only a leader's rounds decide anything.
    pub fn is_leading(&self) -> bool {
        self.leadership.is_leading()
    }

    /// How long until a round must look again though nothing else changes: the earliest of
    /// what the last round said (a soak ends, a drain may be retried, a reboot becomes overdue)
    /// and the next opening or closing of a window.
    pub fn next_look(&self) -> Option<Duration> {
        let now = self.now_ms();
        let round = self
            .look_at
            .map(|at| Duration::from_millis(at.saturating_sub(now)));
        let now = self.clock.now();
        let window = self.schedule.until_next_change(now);
        // A scheduled budget that starts or ends changes what the next round may grant.
        let budget = self
            .budgets
            .next_change(now)
            .and_then(|at| Duration::try_from(at.duration_since(now)).ok());
        round.into_iter().chain(window).chain(budget).min()
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
            crate::cache::memory::ViewInputs {
                keys: &self.keys,
                ledger: self.ledger.current(),
                drains: &self.drains,
                overlay: &overlay,
                now: round.now,
                seen: &self.seen,
            },
        );
        let everyone = controller_core::pool_index::PoolCounts::default();
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
