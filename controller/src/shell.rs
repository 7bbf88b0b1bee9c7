//! The I/O shell around the decision core: feeds it from the cache, the ledger and its
//! memory, executes what it decides, and feeds the results straight back.

use crate::{
    api_error::ApiErrorKind,
    decide::{Decision, Fence, Hold, NodeAction, ReleaseReason, Round},
    drain::DrainOutcome,
    drain_tracker::{DrainTracker, Finished},
    dry_run,
    events::{Events, Reason},
    gates::{GateReading, Gates},
    leader::Leadership,
    ledger::{Ledger, new_grant_id},
    ledger_store::{LedgerError, LedgerStore, ReadLedger},
    memory::{Memory, ViewInputs},
    metrics::Metrics,
    nodes::{self, Overlay, SharedIndex},
    pool_index::PoolCounts,
    schedule::Schedule,
};
use common::{AnnotationKeys, MaxUnavailable, NodeFacts, Transition};
use futures::{StreamExt, stream};
use k8s_openapi::{api::core::v1::Node, jiff::Timestamp};
use kube::{
    Api, Client,
    api::{Patch, PatchParams},
    runtime::reflector::Store,
};
use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    sync::Arc,
    time::{Duration, Instant},
};
use tokio::sync::watch;

/// Where the shell's inputs come from, built by `run`.
#[allow(missing_debug_implementations)] // kube's Client has no Debug
pub struct ShellParts {
    pub client: Client,
    pub keys: AnnotationKeys,
    pub max_unavailable: MaxUnavailable,
    pub zone_budget: Option<MaxUnavailable>,
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
    pub metrics: Metrics,
    /// Nothing is written once this replica no longer leads.
    pub leadership: Leadership,
    /// `--dry-run`: say what would be written instead of writing it.
    pub dry_run: bool,
}

/// One leading replica's rounds: decide, write, and remember what was written.
#[derive(Debug)]
pub struct Shell {
    api: Api<Node>,
    keys: AnnotationKeys,
    max_unavailable: MaxUnavailable,
    zone_budget: Option<MaxUnavailable>,
    drains: DrainTracker,
    nodes: Store<Node>,
    index: SharedIndex,
    overlay: Overlay,
    ledger: Ledger,
    /// Why the ledger as last read could not be used (it is rebuilt before any new grant).
    ledger_damage: Option<String>,
    /// The ledger Lease was deleted (the watch saw it, or a write found it gone): read it
    /// again, and recreate it from our last good copy if it is still gone.
    ledger_gone: bool,
    /// The unexpected `reboot-paused` value last warned about.
    warned_pause: Option<String>,
    ledger_store: LedgerStore,
    ledger_watch: watch::Receiver<ReadLedger>,
    events: Events,
    schedule: Schedule,
    gates: Gates,
    /// Why the last round granted nothing new, to log when that changes.
    hold: Option<Hold>,
    memory: Memory,
    started: Instant,
    /// When the last round's decision may change with time alone (`Round::next_look`).
    look_at: Option<Instant>,
    /// Some write of the last round failed for a reason other than a stale read.
    failed: bool,
    metrics: Metrics,
    leadership: Leadership,
    dry_run: bool,
}

/// What happened to one node write.
enum Written {
    Ok(Box<Node>),
    /// The node changed under us: read it again before the next decision.
    Stale,
    Deleted,
    Failed,
}

/// What a node action needs once its local effects are done.
enum Prepared {
    Write(NodeAction, json_patch::Patch),
    /// Read the node again; its resourceVersion as the round saw it, and whether the round
    /// needs a fresh copy of it (to re-key its slot).
    Refetch(String, Option<String>, bool),
    Done,
}

/// A gate's waiting note without the words that say a request waits for a slot.
fn waiting_words(note: &str) -> &str {
    note.strip_prefix("reboot requested; ")
        .unwrap_or(note)
        .trim_start_matches("waiting while ")
        .trim_start_matches("waiting: ")
}

/// Node writes of one round in flight at once: a round that grants k slots writes k nodes.
const WRITES_IN_FLIGHT: usize = 16;

impl Shell {
    pub fn new(parts: ShellParts) -> Self {
        let mut shell = Self {
            api: Api::all(parts.client),
            keys: parts.keys,
            max_unavailable: parts.max_unavailable,
            zone_budget: parts.zone_budget,
            drains: parts.drains,
            nodes: parts.nodes,
            index: parts.index,
            overlay: parts.overlay,
            ledger: Ledger::default(),
            ledger_damage: None,
            ledger_gone: false,
            warned_pause: None,
            ledger_store: parts.ledger_store,
            ledger_watch: parts.ledger_watch,
            events: parts.events,
            schedule: parts.schedule,
            gates: parts.gates,
            hold: None,
            memory: Memory::default(),
            started: Instant::now(),
            look_at: None,
            failed: false,
            metrics: parts.metrics,
            leadership: parts.leadership,
            dry_run: parts.dry_run,
        };
        shell.take_ledger(parts.ledger);
        shell
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Uses a ledger as read; a damaged one is reported (once per version) and rebuilt.
    fn take_ledger(&mut self, read: ReadLedger) {
        if let Some(damage) = &read.damage
            && read.ledger.resource_version != self.ledger.resource_version
        {
            self.metrics.ledger_damaged.inc();
            tracing::warn!(%damage, "the slot ledger is unreadable; rebuilding it from the nodes");
            let note = format!(
                "{damage}; rebuilt from the nodes' protocol state (no new slot until it is \
                 written back). Do not edit this annotation by hand; pause instead"
            );
            self.events
                .publish_about(self.ledger_store.reference(), Reason::LedgerDamaged, note);
        }
        if read.unexpected_pause != self.warned_pause {
            if let Some(value) = &read.unexpected_pause {
                let note = self.ledger_store.unexpected_pause_note(value);
                tracing::warn!("{note}");
                self.events.publish_about(
                    self.ledger_store.reference(),
                    Reason::UnexpectedPauseValue,
                    note,
                );
            }
            self.warned_pause = read.unexpected_pause;
        }
        self.ledger_damage = read.damage;
        self.ledger = read.ledger;
    }

    /// Takes a newer ledger from the watch (another controller's writes), or notes that the
    /// Lease was deleted after the copy we hold.
    fn catch_up_ledger(&mut self) {
        let changed = self.ledger_watch.has_changed().unwrap_or(false);
        let watched = self.ledger_watch.borrow_and_update().clone();
        if watched.deleted {
            // A list that found no Lease carries no version: read again to know.
            let after_ours = watched.ledger.resource_version.is_none()
                || self.ledger.is_older_than(&watched.ledger);
            self.ledger_gone |= changed && after_ours;
            // The deletion brings the Lease's last contents: when they are newer than our copy
            // (another replica wrote meanwhile), they are what it is recreated from.
            if watched.damage.is_none()
                && watched.ledger.resource_version.is_some()
                && self.ledger.is_older_than(&watched.ledger)
            {
                self.ledger = watched.ledger;
            }
            return;
        }
        if watched.ledger.resource_version.is_some() && self.ledger.is_older_than(&watched.ledger) {
            self.take_ledger(watched);
        }
    }

    /// The ledger Lease was deleted: reads it again and, if it is still gone, recreates it
    /// from our last good copy, whose slots include the soaks under way (no node carries a
    /// grant for those, so a ledger rebuilt from the nodes would forget them). False when it
    /// could not be done; the next round tries again.
    async fn restore_ledger(&mut self) -> bool {
        let restored = match self.ledger_store.get().await {
            Ok(Some(read)) => Ok(read),
            // A deposed leader must not put back its own copy over what the new one does.
            Ok(None) if !self.leadership.is_leading() => return false,
            Ok(None) => self
                .ledger_store
                .recreate(&self.ledger)
                .await
                .inspect(|read| {
                    self.say_ledger_recreated(&read.ledger);
                }),
            Err(error) => Err(error),
        };
        match restored {
            Ok(read) => {
                self.ledger_gone = false;
                self.take_ledger(read);
                true
            }
            Err(error) => {
                self.metrics.api_error("ledger", error.kind());
                tracing::warn!(%error, "the slot ledger Lease is gone and could not be recreated; retrying");
                self.failed = true;
                false
            }
        }
    }

    /// A Warning on the Lease (and the log, and the metric): it was deleted and recreated.
    fn say_ledger_recreated(&self, recreated: &Ledger) {
        self.metrics.ledger_recreated.inc();
        let holders: Vec<&str> = recreated.slots.keys().map(String::as_str).collect();
        let held = if holders.is_empty() {
            "no slot".to_owned()
        } else {
            format!("the slots of {}", holders.join(", "))
        };
        let pause = if recreated.paused {
            " and its pause (reboot-paused=true)"
        } else {
            ""
        };
        let note = format!(
            "the slot ledger Lease was deleted; recreated from this controller's last copy \
             with {held}{pause}: reboots and soaks under way keep their slots. Do not delete \
             it; to stop new reboots, pause instead (kubectl reboot pause)"
        );
        tracing::warn!(slots = holders.len(), "{note}");
        self.events
            .publish_about(self.ledger_store.reference(), Reason::LedgerRecreated, note);
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
        self.catch_up_ledger();
        if self.ledger_gone && !self.dry_run && !self.restore_ledger().await {
            return false;
        }
        self.collect_drain_outcomes();
        let (nodes, others) = self.gather();
        let views = self.memory.views(
            &nodes,
            ViewInputs {
                keys: &self.keys,
                ledger: &self.ledger,
                drains: &self.drains,
                overlay: &self.overlay,
                now: self.now_ms(),
            },
        );
        // What was read fresh for this round has been taken in.
        self.overlay.end_round();
        let pool = views.iter().filter(|v| v.in_pool).count() + others.nodes();
        let budget = self.max_unavailable.resolve(pool);
        let (scheduled, window_open) = self.hold_now();
        let gates = self.gates.read(&self.metrics);
        let fence = Fence {
            paused: self.ledger.paused,
            window_open,
            gates_closed: gates.pool.is_some(),
        };
        let blocked = gates.blocked_nodes();
        let now = self.now_ms();
        let round = Round {
            nodes: &views,
            others: &others,
            ledger: &self.ledger,
            deleted: self.overlay.deleted(),
            budget,
            zone_budget: self.zone_budget,
            drain_enabled: self.drains.enabled(),
            now,
            fence,
            finish_after_window: self.schedule.finish_after_window,
            min_ready: u64::try_from(self.schedule.min_ready.as_millis()).unwrap_or(u64::MAX),
            clock: u64::try_from(Timestamp::now().as_millisecond()).unwrap_or_default(),
            reboot_timeout: u64::try_from(self.schedule.reboot_timeout.as_millis())
                .unwrap_or(u64::MAX),
            blocked: &blocked,
        };
        let mut decision = round.decide();
        let look = round.next_look();
        self.look_at = look.and_then(|ms| {
            let at = Duration::from_millis(now.saturating_add(ms));
            self.started.checked_add(at)
        });
        // Alerts are asked about only while requests wait and nothing else holds them, or while
        // a granted node waits for the gates to let it go on.
        let gated = |(_, hold): &(String, Hold)| *hold == Hold::Unhealthy;
        self.gates.want_checks(
            (scheduled.is_none() && !decision.waiting.is_empty())
                || decision.held.iter().any(gated),
        );
        if self.ledger_damage.is_some() {
            // Rebuild first (adopt what the nodes carry), grant only from the rebuilt ledger.
            decision.ledger.grant.retain(|g| g.adopted.is_some());
            decision.waiting.clear();
        }
        let by_name: HashMap<&str, &Arc<Node>> = nodes
            .iter()
            .map(|n| (n.metadata.name.as_deref().unwrap_or_default(), n))
            .collect();
        self.announce_waiting(&decision, &by_name, pool, scheduled, &gates);
        self.warn_not_ready_after_reboot(&decision, &by_name);
        self.warn_reboots_overdue(&decision, &by_name);
        self.announce_foreign(&decision, &by_name);
        self.announce_opted_out(&decision, &by_name);
        if self.dry_run {
            self.say_dry_run(&decision, &by_name, budget).await;
            return false;
        }
        let mut progressed = false;
        if !self.leadership.is_leading() {
            return false;
        }
        self.confirm_soaks(&mut decision).await;
        // What holds new grants is read again now: the round may have waited on the API.
        if self.fence_now().0.hold().is_some() {
            decision.ledger.grant.retain(|g| g.adopted.is_some());
        }
        if !decision.ledger.is_empty() || self.ledger_damage.is_some() {
            if !self.leadership.is_leading() {
                return false;
            }
            match self.write_ledger(&decision, &by_name).await {
                Ok(()) => progressed = true,
                // Another controller moved first: decide again on the ledger as it is now.
                Err(LedgerError::Conflict) => {
                    self.metrics.api_error("ledger", ApiErrorKind::Conflict);
                    return self.reload_ledger().await;
                }
                // Deleted by hand: recreate it, then decide again on it.
                Err(LedgerError::Gone) => {
                    self.metrics.api_error("ledger", ApiErrorKind::NotFound);
                    self.ledger_gone = true;
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
        // Each step that takes a granted node further is checked against the pause, the window
        // and the gates as they are now, not as the round began: this round (or the replica
        // that wrote the grant) may have decided on an older reading.
        let (fence, gates) = self.fence_now();
        let (actions, held) = fence.hold_back(
            decision.node_actions,
            &gates.blocked_nodes(),
            self.schedule.finish_after_window,
        );
        let mut all_held = decision.held;
        all_held.extend(held);
        self.announce_held(&all_held, &by_name, &gates);
        progressed | self.execute(actions, &by_name).await
    }

    /// The fence as it stands now: the pause as last seen (the ledger watch may have seen it
    /// after this round's copy), the window by the clock, the gates' latest answers.
    fn fence_now(&mut self) -> (Fence, GateReading) {
        let paused = {
            let watched = self.ledger_watch.borrow();
            if self.ledger.is_older_than(&watched.ledger) {
                watched.ledger.paused
            } else {
                self.ledger.paused
            }
        };
        let gates = self.gates.read(&self.metrics);
        let fence = Fence {
            paused,
            window_open: self.schedule.windows.is_open(Timestamp::now()),
            gates_closed: gates.pool.is_some(),
        };
        (fence, gates)
    }

    /// An Event on each granted node a fence holds back, once per reason and episode: it keeps
    /// its slot and is not moved further. A gate whose check is under way is not worth one.
    fn announce_held(
        &mut self,
        held: &[(String, Hold)],
        nodes: &HashMap<&str, &Arc<Node>>,
        gates: &GateReading,
    ) {
        self.metrics.held_grants.set(held.len() as i64);
        let now = Timestamp::now();
        let said: Vec<(String, Reason, String)> = held
            .iter()
            .filter_map(|(name, hold)| {
                let (reason, note) = self.held_event(name, *hold, gates, now)?;
                Some((name.clone(), reason, note))
            })
            .collect();
        let named: Vec<(String, &'static str)> = said
            .iter()
            .map(|(name, reason, _)| (name.clone(), reason.as_str()))
            .collect();
        let first: BTreeSet<String> = self.memory.first_held(&named).into_iter().collect();
        for (name, reason, note) in said {
            if !first.contains(&name) {
                continue;
            }
            tracing::info!(node = %name, "{note}");
            if let Some(node) = nodes.get(name.as_str()) {
                // Its own action: the recorder would fold it into the waiting Event's series.
                self.events.publish_action(node, reason, "Held", note);
            }
        }
    }

    /// The Event of a granted node held back by `hold`, if it is worth one.
    fn held_event(
        &self,
        name: &str,
        hold: Hold,
        gates: &GateReading,
        now: Timestamp,
    ) -> Option<(Reason, String)> {
        let stays = "it keeps its slot and is not moved further (cordon, drain, reboot-now)";
        let (reason, why) = match hold {
            Hold::Paused => (
                Reason::Paused,
                format!(
                    "the pool is paused ({} on the ledger Lease); {stays} until an administrator \
                     resumes; reboots already told to go finish",
                    common::ledger::PAUSED_ANNOTATION
                ),
            ),
            Hold::OutsideWindow => {
                let next = self
                    .schedule
                    .next_opening(now)
                    .map_or_else(|| "never".to_owned(), |t| t.to_string());
                (
                    Reason::OutsideWindow,
                    format!(
                        "outside the maintenance windows ({}); {stays} until the next one opens \
                         at {next}",
                        self.schedule.windows
                    ),
                )
            }
            Hold::Unhealthy => {
                let (reason, note) = gates.pool.as_ref()?.event.clone()?;
                (
                    reason,
                    format!("{}; {stays} until then", waiting_words(&note)),
                )
            }
            Hold::BlockingPod => {
                let (reason, note) = gates.blocked_event(name);
                (
                    reason,
                    format!("{}; {stays} until then", waiting_words(&note)),
                )
            }
        };
        Some((reason, format!("slot granted, held: {why}")))
    }

    /// `--dry-run`: logs and reports (once each) the writes this round would make.
    async fn say_dry_run(
        &mut self,
        decision: &Decision,
        nodes: &HashMap<&str, &Arc<Node>>,
        budget: usize,
    ) {
        for step in dry_run::plan(decision, budget, self.drains.enabled()) {
            if !self.memory.first_dry_run(&step.node, &step.what) {
                continue;
            }
            let mut what = step.what;
            if let (true, Some(drainer)) = (step.new_grant, self.drains.drainer()) {
                match drainer.would_evict(&step.node).await {
                    Ok(pods) if pods.is_empty() => what.push_str("; no pod to evict now"),
                    Ok(pods) => what.push_str(&format!("; pods to evict now: {}", pods.join(", "))),
                    Err(error) => what.push_str(&format!("; cannot list its pods: {error}")),
                }
            }
            tracing::info!(node = %step.node, dry_run = true, "dry run: {what}");
            if let Some(node) = nodes.get(step.node.as_str()) {
                self.events.publish(node, Reason::DryRun, what);
            }
        }
    }

    fn collect_drain_outcomes(&mut self) {
        for Finished {
            grant,
            node,
            outcome,
            took,
        } in self.drains.finished()
        {
            let name = node.metadata.name.clone().unwrap_or_default();
            match outcome {
                DrainOutcome::Drained { evicted, .. } => {
                    self.metrics.drain_finished("drained", took);
                    tracing::info!(node = %name, %grant, evicted, took = ?took, "drained");
                }
                DrainOutcome::Superseded => {
                    tracing::info!(node = %name, %grant, "drain stopped: the node no longer holds its grant");
                }
                DrainOutcome::TimedOut { blocking } => {
                    let pods: Vec<String> = blocking
                        .iter()
                        .map(|(pod, why)| format!("{pod}: {why}"))
                        .collect();
                    self.metrics.drain_finished("timed_out", took);
                    self.metrics.drain_timeouts.inc();
                    self.metrics.reboot_failed("drain_timeout");
                    tracing::warn!(node = %name, blocking = ?pods, "drain timed out; giving the slot back");
                    let mut note = format!(
                        "drain timed out; node uncordoned and slot released, retried later; blocked by {}",
                        pods.join("; ")
                    );
                    // An Event's note may have 1 KiB; cut at a character boundary.
                    let cut = (0..=note.len().min(1000))
                        .rev()
                        .find(|&i| note.is_char_boundary(i))
                        .unwrap_or(0);
                    note.truncate(cut);
                    self.events.publish(&node, Reason::DrainBlocked, note);
                }
            }
        }
    }

    /// The nodes a round views (in the protocol, or holding a slot) and the rest counted.
    fn gather(&mut self) -> (Vec<Arc<Node>>, PoolCounts) {
        nodes::gather(
            &self.nodes,
            &self.index,
            &mut self.overlay,
            self.ledger.slots.keys(),
        )
    }

    /// Publishes the pool gauges as this replica sees the pool now.
    pub fn publish_pool(&mut self) {
        let summary = nodes::pool_summary(
            &self.nodes,
            &self.index,
            &mut self.overlay,
            &self.ledger,
            &self.keys,
        );
        let budget = self.max_unavailable.resolve(summary.nodes);
        self.metrics.pool(&summary, budget);
    }

    pub fn last_round_failed(&self) -> bool {
        self.failed
    }

    async fn reload_ledger(&mut self) -> bool {
        match self.ledger_store.load().await {
            Ok(read) => {
                self.take_ledger(read);
                true
            }
            Err(error) => {
                self.metrics.api_error("ledger", error.kind());
                tracing::warn!(%error, "could not read the slot ledger");
                false
            }
        }
    }

    /// Why no new grant may be made now, if so; logged and published when it changes.
    /// Also whether a window is open, computed once for the round.
    fn hold_now(&mut self) -> (Option<Hold>, bool) {
        let now = Timestamp::now();
        let window_open = self.schedule.windows.is_open(now);
        let hold = Schedule::hold(self.ledger.paused, window_open);
        if hold != self.hold {
            match self.schedule.waiting_event(hold, now) {
                Some((_, why)) => tracing::info!(?hold, "no new reboots: {why}"),
                None => tracing::info!("new reboots may start (window open, not paused)"),
            }
            self.hold = hold;
        }
        self.metrics.paused.set(i64::from(self.ledger.paused));
        self.metrics.window_open.set(i64::from(window_open));
        let next = self.schedule.windows.next_opening(now).unwrap_or(now);
        self.metrics.window_next_open.set(next.as_second());
        (hold, window_open)
    }

    /// How long until a round must look again though nothing else changes: the earliest of
    /// what the last round said (a soak ends, a drain may be retried, a reboot becomes overdue)
    /// and the next opening or closing of a window.
    pub fn next_look(&self) -> Option<Duration> {
        let round = self
            .look_at
            .map(|at| at.saturating_duration_since(Instant::now()));
        let window = self.schedule.until_next_change(Timestamp::now());
        round.into_iter().chain(window).min()
    }

    /// A node that went NotReady during its soak holds the pool: a Warning once per episode.
    fn warn_not_ready_after_reboot(
        &mut self,
        decision: &Decision,
        nodes: &HashMap<&str, &Arc<Node>>,
    ) {
        let sick = &decision.not_ready_after_reboot;
        self.metrics.not_ready_after_reboot.set(sick.len() as i64);
        for name in self.memory.first_not_ready_after_reboot(sick) {
            tracing::warn!(node = %name, "NotReady after its reboot: no new reboots until it is Ready");
            if let Some(node) = nodes.get(name.as_str()) {
                let note = format!(
                    "NotReady within --min-ready-seconds ({}s) of its reboot: it keeps its slot and \
                     no new reboot starts in this pool until it is Ready again (or an \
                     administrator clears it: kubectl annotate node {name} {}-)",
                    self.schedule.min_ready.as_secs(),
                    self.keys.last_grant
                );
                self.events.publish(node, Reason::NotReadyAfterReboot, note);
            }
        }
    }

    /// A node told to reboot and not completed within `--reboot-timeout` holds the pool: a
    /// Warning once per episode, and the metric.
    fn warn_reboots_overdue(&mut self, decision: &Decision, nodes: &HashMap<&str, &Arc<Node>>) {
        let late = &decision.overdue;
        self.metrics.reboots_overdue.set(late.len() as i64);
        for name in self.memory.first_reboots_overdue(late) {
            let Some(node) = nodes.get(name.as_str()) else {
                continue;
            };
            let facts = NodeFacts::from_node(node);
            let state = facts.protocol(&self.keys);
            let what = match &state.phase {
                common::Phase::RebootNow => format!(
                    "the agent has not taken {} (is the reboot-agent pod running on it?)",
                    self.keys.now
                ),
                common::Phase::InProgress { .. } => {
                    "the node has not come back in a new boot (hung at shutdown, firmware or boot?)"
                        .to_owned()
                }
                common::Phase::Done { .. } if facts.readiness != common::Readiness::Ready => {
                    "the node came back in a new boot but is not Ready (a bad kernel or a broken \
                     kubelet, most often)"
                        .to_owned()
                }
                _ => "the kubelet has not reported the new boot".to_owned(),
            };
            tracing::warn!(node = %name, "{what}: reboot overdue; no new reboots until it completes");
            // Giving it up: removing the protocol annotations it has (a cancel, by hand).
            let give_up: Vec<String> = [
                &self.keys.now,
                &self.keys.in_progress,
                &self.keys.done,
                &self.keys.boot_id,
            ]
            .into_iter()
            .filter(|key| facts.annotations.contains_key(*key))
            .map(|key| format!("{key}-"))
            .collect();
            let note = format!(
                "not completed within --reboot-timeout ({}): {what}. It keeps its slot and cordon, \
                 and no new reboot starts in this pool until the kubelet reports its new boot \
                 and it is Ready; the rollout then goes on by itself. Fix the node, or give it \
                 up (its slot is released): kubectl annotate node {name} {} (or delete the Node)",
                crate::drain::humantime(self.schedule.reboot_timeout),
                give_up.join(" "),
            );
            self.events.publish(node, Reason::RebootOverdue, note);
        }
    }

    /// A node of the pool carrying a grant that is not this ledger's: said once per episode.
    /// It counts against this pool's budget; its own ledger's controller finishes it.
    fn announce_foreign(&mut self, decision: &Decision, nodes: &HashMap<&str, &Arc<Node>>) {
        for name in self.memory.first_foreign(&decision.foreign) {
            let Some(node) = nodes.get(name.as_str()) else {
                continue;
            };
            let grant = NodeFacts::from_node(node)
                .protocol(&self.keys)
                .grant
                .unwrap_or_default();
            let ours = &self.ledger.id;
            let note = match common::ledger::ledger_of_grant(&grant) {
                Some(theirs) => format!(
                    "carries {}={grant} of the ledger {theirs} (another pool's; the node was \
                     relabelled into this pool during its reboot): that pool's controller \
                     finishes the reboot; this one ({ours}) counts the node as unavailable and \
                     does not drive it",
                    self.keys.grant
                ),
                None => format!(
                    "carries {}={grant}, written by an earlier version and not in this \
                     controller's ledger {ours}: counted as unavailable, not driven. If no \
                     controller finishes it (its ledger was lost), hand it over: kubectl \
                     annotate node {name} {}-",
                    self.keys.grant, self.keys.grant
                ),
            };
            tracing::info!(node = %name, %grant, "{note}");
            self.events.publish(node, Reason::ForeignGrant, note);
        }
    }

    /// A slot is released after the soak only on a fresh read of the node: a node that crashed
    /// stays Ready in the cache for the node monitor's grace period, and another replica's copy
    /// may lag. Not Ready (or not readable) now: the release and the round's new grants wait
    /// for the next round, which sees the node as read here.
    async fn confirm_soaks(&mut self, decision: &mut Decision) {
        if self.schedule.min_ready.is_zero() {
            return;
        }
        let soaked: Vec<String> = decision
            .release_reasons
            .iter()
            .filter(|(_, reason)| *reason == ReleaseReason::Completed)
            .map(|(name, _)| name.clone())
            .collect();
        for name in soaked {
            let ready = match self.api.get_opt(&name).await {
                Ok(Some(node)) => {
                    let ready = NodeFacts::from_node(&node).readiness == common::Readiness::Ready;
                    self.overlay.record_read(node);
                    ready
                }
                Ok(None) => true,
                Err(error) => {
                    self.metrics.api_error("node", ApiErrorKind::of(&error));
                    self.failed = true;
                    false
                }
            };
            if !ready {
                tracing::info!(node = %name, "soaked, but not Ready on a fresh read: slot kept");
                decision.ledger.release.retain(|n| *n != name);
                decision.release_reasons.retain(|(n, _)| *n != name);
                decision.ledger.grant.retain(|g| g.adopted.is_some());
            }
        }
    }

    /// A request on an opted-out node: an Event once per request, and the metric.
    fn announce_opted_out(&mut self, decision: &Decision, nodes: &HashMap<&str, &Arc<Node>>) {
        self.metrics
            .opted_out_requests
            .set(decision.opted_out.len() as i64);
        for name in &decision.opted_out {
            let reason = Reason::RebootDisabled;
            if let Some(node) = nodes
                .get(name.as_str())
                .filter(|_| self.memory.first_wait(name, reason.as_str()))
            {
                let note = format!(
                    "reboot requested, but the node is labelled {}=true: it is never rebooted \
                     while the label is there",
                    self.keys.disabled
                );
                tracing::info!(node = %name, "{note}");
                self.events.publish(node, reason, note);
            }
        }
    }

    /// An Event on each waiting node, once per reason: why it waits. A check under way
    /// (the gates have not answered yet) is not worth one.
    fn announce_waiting(
        &mut self,
        decision: &Decision,
        nodes: &HashMap<&str, &Arc<Node>>,
        pool: usize,
        scheduled: Option<Hold>,
        gates: &GateReading,
    ) {
        let now = Timestamp::now();
        let pool_event = match (self.schedule.waiting_event(scheduled, now), &gates.pool) {
            (Some(event), _) => Some(event),
            (None, Some(hold)) => hold.event.clone(),
            (None, None) if !decision.overdue.is_empty() => Some((
                Reason::Requested,
                format!(
                    "reboot requested; waiting: no new reboot while {} has not completed its \
                     reboot within --reboot-timeout",
                    decision.overdue.join(", ")
                ),
            )),
            (None, None) => Some((
                Reason::Requested,
                format!(
                    "reboot requested; waiting for a slot (max-unavailable {} of {pool} nodes)",
                    self.max_unavailable
                ),
            )),
        };
        for name in &decision.waiting {
            let event = if decision.blocked.contains(name) {
                Some(gates.blocked_event(name))
            } else if decision.zone_unknown.contains(name) {
                let label = self.overlay.indexing().zone_label();
                let note = format!(
                    "reboot requested; waiting: the node has no {label} label, and with \
                     --max-unavailable-per-zone a node is granted only in a known zone (so that \
                     it counts against its real zone's budget); label it with its zone: \
                     kubectl label node {name} {label}=<zone>"
                );
                Some((Reason::ZoneLabelMissing, note))
            } else if decision.zone_full.contains(name) {
                let note = format!(
                    "reboot requested; waiting for a slot in its zone \
                     (max-unavailable-per-zone {})",
                    self.zone_budget.map(|b| b.to_string()).unwrap_or_default()
                );
                Some((Reason::ZoneBudgetFull, note))
            } else {
                pool_event.clone()
            };
            let Some((reason, note)) = event else {
                continue;
            };
            if let Some(node) = nodes
                .get(name.as_str())
                .filter(|_| self.memory.first_wait(name, reason.as_str()))
            {
                tracing::info!(node = %name, "{note}");
                self.events.publish(node, reason, note);
            }
        }
    }

    async fn write_ledger(
        &mut self,
        decision: &Decision,
        nodes: &HashMap<&str, &Arc<Node>>,
    ) -> Result<(), LedgerError> {
        let now = Timestamp::now().to_string();
        let id = self.ledger.id.clone();
        let slots = decision.ledger.apply(&self.ledger.slots, &now, || {
            common::ledger::grant_id(&id, &new_grant_id())
        });
        self.ledger = self.ledger_store.swap(&self.ledger, &slots).await?;
        self.ledger_damage = None;
        let ledger = &self.ledger;
        self.drains
            .retain(|grant| ledger.slots.values().any(|s| s.grant == grant));
        for grant in &decision.ledger.grant {
            let id = self.ledger.grant_of(&grant.node).unwrap_or_default();
            tracing::info!(node = %grant.node, grant = %id, adopted = grant.adopted.is_some(),
                           slots = self.ledger.slots.len(), "slot granted");
        }
        for (name, reason) in &decision.release_reasons {
            tracing::info!(node = %name, ?reason, slots = self.ledger.slots.len(), "slot released");
            match reason {
                ReleaseReason::Completed
                | ReleaseReason::Unclaimed
                | ReleaseReason::WindowClosed => {}
                ReleaseReason::NodeDeleted => self.metrics.reboot_failed("node_removed"),
                ReleaseReason::SoakCleared => {
                    tracing::warn!(node = %name, "soak cleared by hand: slot released");
                    if let Some(node) = nodes.get(name.as_str()) {
                        let note = format!(
                            "{} was removed during the soak: the soak is cleared by hand and \
                             the slot released",
                            self.keys.last_grant
                        );
                        self.events.publish(node, Reason::SoakCleared, note);
                    }
                }
                ReleaseReason::DrainFailed => self.drains.schedule_retry(name, self.now_ms()),
                ReleaseReason::Cancelled => {
                    self.metrics.reboots_cancelled.inc();
                    if let Some(node) = nodes.get(name.as_str()) {
                        let note = "reboot-needed was removed: reboot cancelled, slot released";
                        self.events.publish(node, Reason::Cancelled, note.into());
                    }
                }
            }
        }
        Ok(())
    }

    /// Executes a round's node actions; true when any changed something. The writes go out
    /// together (each is a compare-and-swap on its own node), so that a round that grants ten
    /// slots starts ten reboots at once rather than one after the other; one node's actions
    /// keep their order. What the writes did is then taken in, in the decision's order.
    async fn execute(
        &mut self,
        actions: Vec<NodeAction>,
        nodes: &HashMap<&str, &Arc<Node>>,
    ) -> bool {
        let mut progressed = false;
        let mut writes = Vec::new();
        for action in actions {
            match self.prepare(action, nodes) {
                Prepared::Write(action, patch) => writes.push((action, patch)),
                Prepared::Refetch(name, before, for_fresh_copy) => {
                    let known_deleted = self.overlay.deleted().contains(&name);
                    let after = self.refetch(&name).await;
                    let found_deleted = !known_deleted && self.overlay.deleted().contains(&name);
                    // A read asked for so that the next round decides on a fresh copy is
                    // progress even when the node did not change.
                    progressed |=
                        after != before || found_deleted || (for_fresh_copy && after.is_some());
                }
                Prepared::Done => {}
            }
        }
        for (action, written) in self.write_all(writes).await {
            progressed |= self.take_in(&action, written).await;
        }
        progressed
    }

    /// The write an action makes, after its local effects (a drain started, a warning said).
    fn prepare(&mut self, action: NodeAction, nodes: &HashMap<&str, &Arc<Node>>) -> Prepared {
        let name = action.node().to_owned();
        let Some(node) = nodes.get(name.as_str()).map(|n| (*n).clone()) else {
            // A slot holder the round does not have (deleted, most likely): a read tells.
            return match action {
                NodeAction::Refetch(_) => {
                    let before = self.overlay.version_of(&name);
                    Prepared::Refetch(name, before, false)
                }
                _ => Prepared::Done,
            };
        };
        let facts = NodeFacts::from_node(&node);
        let t = Transition::new(&self.keys);
        let patch = match &action {
            NodeAction::Refetch(_) => {
                let carried = facts.protocol(&self.keys).grant;
                let rekey = carried.is_some() && carried.as_deref() != self.ledger.grant_of(&name);
                return Prepared::Refetch(name, node.metadata.resource_version.clone(), rekey);
            }
            NodeAction::Claim {
                grant,
                node_version,
                promote,
                ..
            } => t.claim(
                &facts,
                grant,
                node_version,
                *promote,
                &Timestamp::now().to_string(),
            ),
            NodeAction::Recordon { grant, .. } => t.recordon(&facts, grant),
            NodeAction::Promote { grant, .. } => {
                t.promote(&facts, grant, &Timestamp::now().to_string())
            }
            NodeAction::Complete { grant, .. } => {
                t.complete(&facts, Some(grant), &Timestamp::now().to_string())
            }
            NodeAction::Release { .. } => match t.release(&facts) {
                Some(patch) => patch,
                None => return Prepared::Done,
            },
            NodeAction::StartDrain { grant, .. } => {
                // The drain publishes `Draining` once it knows it has pods to evict.
                tracing::info!(node = %name, %grant, "draining");
                self.drains.start(&node, grant);
                return Prepared::Done;
            }
            NodeAction::WarnInvalidRequest { value, .. } => {
                self.warn_invalid(&node, &name, value);
                return Prepared::Done;
            }
        };
        Prepared::Write(action, patch)
    }

    /// Makes the writes, up to [`WRITES_IN_FLIGHT`] at once, one node's in order; the results
    /// in the order of `writes`.
    async fn write_all(
        &self,
        writes: Vec<(NodeAction, json_patch::Patch)>,
    ) -> Vec<(NodeAction, Written)> {
        let mut by_node: BTreeMap<String, Vec<(usize, NodeAction, json_patch::Patch)>> =
            BTreeMap::new();
        for (i, (action, patch)) in writes.into_iter().enumerate() {
            by_node
                .entry(action.node().to_owned())
                .or_default()
                .push((i, action, patch));
        }
        let mut done: Vec<(usize, NodeAction, Written)> = stream::iter(by_node.into_values())
            .map(|node_writes| async move {
                let mut done = Vec::with_capacity(node_writes.len());
                for (i, action, patch) in node_writes {
                    let written = self.patch(action.node(), patch).await;
                    done.push((i, action, written));
                }
                done
            })
            .buffer_unordered(WRITES_IN_FLIGHT)
            .flat_map(stream::iter)
            .collect()
            .await;
        done.sort_by_key(|(i, _, _)| *i);
        done.into_iter().map(|(_, a, w)| (a, w)).collect()
    }

    /// Takes in what a write did; true when it changed something.
    async fn take_in(&mut self, action: &NodeAction, written: Written) -> bool {
        let name = action.node();
        match written {
            Written::Ok(updated) => {
                self.after_write(action, &updated);
                self.overlay.record(*updated);
                true
            }
            Written::Stale => {
                self.refetch(name).await;
                true
            }
            Written::Deleted => {
                self.overlay.record_deleted(name);
                true
            }
            Written::Failed => {
                self.failed = true;
                false
            }
        }
    }

    fn warn_invalid(&mut self, node: &Node, name: &str, value: &str) {
        if self.memory.first_warning(name, value) {
            tracing::warn!(node = %name, %value, "ignoring reboot-needed: not `true`");
            let note = format!(
                "{}={value:?} is not a reboot request: only \"true\" is; fix the value or remove the annotation",
                self.keys.needed
            );
            self.events.publish(node, Reason::InvalidRequest, note);
        }
    }

    fn after_write(&mut self, action: &NodeAction, node: &Node) {
        let name = node.metadata.name.as_deref().unwrap_or_default();
        match action {
            NodeAction::Claim {
                promote: true,
                grant,
                ..
            }
            | NodeAction::Promote { grant, .. } => {
                self.metrics.reboots_approved.inc();
                tracing::info!(node = %name, "reboot-now set: the agent reboots the node");
                let note = self.drains.approval_note(grant);
                self.events.publish(node, Reason::RebootApproved, note);
            }
            NodeAction::Complete { .. } => self.completed(node, name),
            NodeAction::Claim { grant, .. } => {
                tracing::info!(node = %name, %grant, "cordoned");
            }
            NodeAction::Recordon { grant, .. } => {
                // Pods may have landed while it was uncordoned: its drain starts over.
                self.drains.restart(grant);
                tracing::info!(node = %name, "cordoned again");
            }
            NodeAction::Release { reason, .. } => {
                tracing::info!(node = %name, ?reason, "grant dropped; uncordoned if ours");
            }
            _ => {}
        }
    }

    fn completed(&mut self, node: &Node, name: &str) {
        self.drains.forget_retries(name);
        let since = self
            .ledger
            .slots
            .get(name)
            .map(|s| s.granted_at.clone())
            .unwrap_or_default();
        let took = since.parse::<Timestamp>().ok().map(|granted| {
            Timestamp::now()
                .duration_since(granted)
                .as_secs_f64()
                .max(0.0)
        });
        self.metrics.reboots_completed.inc();
        if let Some(took) = took {
            self.metrics.reboot_duration.observe(took);
        }
        let took_seconds = took.unwrap_or(-1.0);
        tracing::info!(node = %name, %since, took_seconds, "reboot completed");
        let boot_id = NodeFacts::from_node(node).boot_id.unwrap_or_default();
        self.events.publish(
            node,
            Reason::Rebooted,
            format!(
                "reboot proven by the new boot id {boot_id}, reported by the kubelet; node Ready \
                 (slot held since {since})"
            ),
        );
    }

    async fn patch(&self, name: &str, patch: json_patch::Patch) -> Written {
        match self
            .api
            .patch(name, &PatchParams::default(), &Patch::Json::<()>(patch))
            .await
        {
            Ok(node) => Written::Ok(Box::new(node)),
            Err(error) => {
                let kind = ApiErrorKind::of(&error);
                self.metrics.api_error("node", kind);
                if kind.is_stale_read() {
                    tracing::debug!(node = %name, %error, "node changed under us; re-reading");
                    Written::Stale
                } else if kind == ApiErrorKind::NotFound {
                    Written::Deleted
                } else {
                    tracing::warn!(node = %name, %error, kind = kind.as_str(), "node write failed");
                    Written::Failed
                }
            }
        }
    }

    /// Reads the node again into the overlay; its resourceVersion now (`None`: deleted, or
    /// the read failed).
    async fn refetch(&mut self, name: &str) -> Option<String> {
        match self.api.get_opt(name).await {
            Ok(Some(node)) => {
                let version = node.metadata.resource_version.clone();
                self.overlay.record_read(node);
                version
            }
            Ok(None) => {
                self.overlay.record_deleted(name);
                None
            }
            Err(error) => {
                self.metrics.api_error("node", ApiErrorKind::of(&error));
                tracing::warn!(node = %name, %error, "could not re-read node");
                None
            }
        }
    }
}
