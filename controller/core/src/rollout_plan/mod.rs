//! The whole rollout, planned: the controller's own decision ([`Round::decide`]) run forward
//! on a simulated clock. Each round grants what the budgets, the zone budgets and the order
//! of requests allow; every node granted at one instant is a wave, whose slots come free a
//! typical reboot plus `--min-ready-seconds` later; a closed maintenance window moves the
//! clock to its next opening. Pure: the controller's `--dry-run` and `kubectl reboot plan`
//! feed it what they know, and say what it returns.
//!
//! What the simulation cannot know it takes as fixed: a pause, a closed gate or a failing
//! node holds every wave until someone acts, and a node a blocking pod runs on stays where it
//! is. It is an estimate: drains that take long, reboots that fail and requests added or
//! withdrawn change it.

use crate::{
    decide::{Fence, NodeView, Round, SetAside},
    ledger::{Grant, Ledger, LedgerChange, RolloutChange},
    pool_index::PoolCounts,
    rollout::RolloutRules,
    scheduled_budget::{Budgets, ScheduledBudget},
    window::Windows,
};
use common::{MaxUnavailable, Request};
use jiff::Timestamp;
use std::{
    collections::{BTreeMap, BTreeSet},
    time::Duration,
};

/// Rounds simulated at most: far above any real plan (each round grants a node or moves the
/// clock to a slot coming free or a window opening), so that a bug cannot loop forever.
const MAX_ROUNDS: usize = 100_000;

/// Window openings in a row too short for a reboot, after which none is expected to fit: the
/// windows repeat by the week (a cron window may vary more), and a plan does not look years
/// ahead for one that fits.
const UNFIT_OPENINGS: usize = 60;

/// Why a node is not in an earlier wave, or in none.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Wait {
    /// Every slot of `--max-unavailable` is taken by an earlier wave or a reboot under way.
    BudgetFull,
    /// The pool has room, its zone (`--max-unavailable-per-zone`) has not.
    ZoneFull,
    /// The budgets have room, `--concurrency` has not: that many of the operator's reboots
    /// are under way or soaking.
    ConcurrencyFull,
    /// Zone budgets are on and the node has no zone label: never granted until it has one.
    NoZoneLabel,
    /// Outside every `--reboot-window`: waits for the next opening.
    OutsideWindow,
    /// A `--reboot-blackout` holds new reboots: waits for its end.
    Blackout,
    /// A `--scheduled-budget` under way lowers the budget, and its slots are taken.
    ScheduledBudget,
    /// `reboot-paused=true` on the ledger Lease: nothing starts until it is removed.
    Paused,
    /// A health gate is closed now (alerts firing, Prometheus unreachable, a blocking pod in
    /// the cluster): nothing starts until it opens.
    GateClosed,
    /// A blocking pod runs on the node: it is not granted while the pod runs.
    BlockingPod,
    /// A node of the pool did not come back from its reboot, or is NotReady after it: no new
    /// reboot starts until it recovers or an administrator acts.
    FailingNode,
    /// Labelled `reboot-disabled=true`: never rebooted.
    OptedOut,
    /// Its drains failed `--drain-attempts` times: set aside until an administrator removes
    /// its `reboot-drain-failures`.
    SetAside,
    /// The pool is stalled (too many nodes set aside, a failed canary, too many failures):
    /// nothing starts until an administrator looks at it.
    Stalled,
    /// The canaries (`--canary`) go alone: the rest wait until they have completed and soaked.
    Canary,
    /// A reboot would not end before the window closes (`--reboot-estimate`): the next window.
    WindowFit,
    /// The current wave (`--waves`) is full: the next, twice its size, starts once it is done.
    Wave,
    /// No window opens within four years.
    WindowNeverOpens,
}

impl Wait {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::BudgetFull => "budget full",
            Self::ZoneFull => "zone budget full",
            Self::ConcurrencyFull => "concurrency full",
            Self::NoZoneLabel => "no zone label",
            Self::OutsideWindow => "outside window",
            Self::Blackout => "blackout",
            Self::ScheduledBudget => "scheduled budget full",
            Self::Paused => "paused",
            Self::GateClosed => "gate closed",
            Self::BlockingPod => "blocking pod",
            Self::FailingNode => "a node is failing",
            Self::OptedOut => "opted out",
            Self::SetAside => "set aside after failed drains",
            Self::Stalled => "stalled",
            Self::Canary => "after the canary",
            Self::WindowFit => "does not fit in the window",
            Self::Wave => "next wave",
            Self::WindowNeverOpens => "no window opens",
        }
    }
}

/// What the plan is made from.
#[derive(Debug, Clone)]
pub struct PlanInput<'a> {
    /// The nodes a round views (every requested node, every slot holder), as the controller's
    /// round would see them now.
    pub nodes: Vec<NodeView>,
    /// The rest of the pool, counted.
    pub others: &'a PoolCounts,
    pub ledger: &'a Ledger,
    /// `--max-unavailable`, resolved.
    pub budget: usize,
    /// `--scheduled-budget`: each lowers `budget` while under way.
    pub scheduled_budgets: &'a [ScheduledBudget],
    /// The pool's size, to resolve the scheduled budgets.
    pub pool_size: usize,
    pub zone_budget: Option<MaxUnavailable>,
    /// `--concurrency`, resolved against the pool's size.
    pub concurrency: Option<usize>,
    pub windows: &'a Windows,
    /// What holds every grant now and is not lifted by time: the pause, a closed gate, a
    /// failing node (the first that applies is said).
    pub held: Option<Wait>,
    /// Nodes a blocking pod runs on.
    pub blocked: &'a BTreeSet<String>,
    /// A typical reboot, grant to completion; `None`: unknown (the waves are still planned in
    /// order, without times).
    pub reboot: Option<Duration>,
    /// `--min-ready-seconds`.
    pub min_ready: Duration,
    /// `--drain-attempts` and `--max-blocked-nodes`: the nodes set aside are left out.
    pub set_aside: SetAside,
    /// `--canary`, `--canary-soak`, `--waves`, `--max-failures`: the canaries go first and
    /// alone, each soaked for `canary_soak` (in milliseconds); the waves grow.
    pub rollout: RolloutRules,
    /// `--reboot-estimate`: with windows, a wave starts only if a reboot (the larger of this
    /// and `reboot`) ends before the window closes.
    pub reboot_estimate: Option<Duration>,
    pub now: Timestamp,
    /// The decision core's `now` (its own unit, milliseconds) at `now`.
    pub now_ms: u64,
}

/// One node of a wave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Planned {
    pub name: String,
    pub zone: Option<String>,
    /// Why it was not in an earlier wave, each reason once, in the order met.
    pub waited: Vec<Wait>,
}

/// Nodes granted at one instant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wave {
    /// From 1.
    pub number: usize,
    pub nodes: Vec<Planned>,
    /// When it starts (`None`: unknown, the reboot length is).
    pub start: Option<Timestamp>,
    /// When its slots come free: a reboot plus the soak after `start`.
    pub end: Option<Timestamp>,
    /// The window opening it waited for, if it waited for one after the first wave's.
    pub window_opening: Option<Timestamp>,
}

/// A node already holding a slot: when it should give it back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnderWay {
    pub name: String,
    pub frees_at: Option<Timestamp>,
}

/// The plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RolloutPlan {
    pub under_way: Vec<UnderWay>,
    pub waves: Vec<Wave>,
    /// Requested nodes no wave reaches, and why.
    pub left: Vec<(String, Wait)>,
    /// What holds the whole pool, if anything.
    pub held: Option<Wait>,
    /// When the last wave's slots come free.
    pub done_at: Option<Timestamp>,
}

impl RolloutPlan {
    /// Nodes in waves that start in a later window opening than the first wave, by opening.
    pub fn spills(&self) -> Vec<(Timestamp, usize)> {
        let mut by_opening: BTreeMap<Timestamp, usize> = BTreeMap::new();
        let mut current: Option<Timestamp> = None;
        for wave in &self.waves {
            if wave.window_opening.is_some() {
                current = wave.window_opening;
            }
            if let Some(opening) = current {
                *by_opening.entry(opening).or_default() += wave.nodes.len();
            }
        }
        by_opening.into_iter().collect()
    }
}

/// A slot of the simulation: whose, and when it comes free.
struct Busy {
    frees_at: Timestamp,
}

/// Plans the rollout from `input`.
pub fn plan(input: PlanInput<'_>) -> RolloutPlan {
    Simulation::new(input).run()
}

struct Simulation<'a> {
    input: PlanInput<'a>,
    ledger: Ledger,
    busy: BTreeMap<String, Busy>,
    waited: BTreeMap<String, Vec<Wait>>,
    plan: RolloutPlan,
    /// The length a slot is held: a reboot and the soak (1 ms when the reboot is unknown, so
    /// that the waves follow one another in order).
    hold: Duration,
    /// When the last wave was granted.
    last_wave: Option<Timestamp>,
    /// The last round left requests waiting under a scheduled budget lower than
    /// `--max-unavailable`: its end is a moment when more may be granted.
    held_by_schedule: bool,
    /// A slot came free at a time that is not known (no reboot length): what follows has no
    /// known start.
    untimed_free: bool,
    grants: u64,
}

impl<'a> Simulation<'a> {
    fn new(input: PlanInput<'a>) -> Self {
        let hold = input
            .reboot
            .map_or(Duration::from_millis(1), |r| r + input.min_ready);
        let mut sim = Simulation {
            ledger: input.ledger.clone(),
            busy: BTreeMap::new(),
            waited: BTreeMap::new(),
            plan: RolloutPlan {
                under_way: Vec::new(),
                waves: Vec::new(),
                left: Vec::new(),
                held: input.held,
                done_at: None,
            },
            hold,
            last_wave: None,
            held_by_schedule: false,
            untimed_free: false,
            grants: 0,
            input,
        };
        sim.slots_under_way();
        sim
    }

    fn known(&self, t: Timestamp) -> Option<Timestamp> {
        self.input.reboot.map(|_| t)
    }

    /// The slots held now come free a reboot and a soak after they were granted (at once if
    /// that is past: it is overdue, or the reboot was short).
    fn slots_under_way(&mut self) {
        for (name, slot) in &self.input.ledger.slots {
            let granted: Option<Timestamp> = slot.granted_at.parse().ok();
            let frees_at = granted
                .and_then(|g| g.checked_add(self.hold).ok())
                .map_or(self.input.now, |t| t.max(self.input.now))
                // Unknown: after now, so that the waves wait for it.
                .max(
                    self.input.now + Duration::from_millis(u64::from(self.input.reboot.is_none())),
                );
            self.busy.insert(name.clone(), Busy { frees_at });
            self.plan.under_way.push(UnderWay {
                name: name.clone(),
                frees_at: self.known(frees_at),
            });
        }
    }

    fn run(mut self) -> RolloutPlan {
        let mut t = self.input.now;
        // Openings in a row where a reboot does not fit (`--reboot-estimate`).
        let mut unfit = 0;
        for _ in 0..MAX_ROUNDS {
            self.free_slots(t);
            if let Some(hold) = self.input.held {
                self.leave_waiting(hold);
                break;
            }
            if !self.input.windows.is_open(t) {
                match self.input.windows.next_opening(t) {
                    Some(opening) => {
                        let why = match self.input.windows.blackout_at(t) {
                            Some(_) => Wait::Blackout,
                            None => Wait::OutsideWindow,
                        };
                        self.note_all(why);
                        t = opening;
                        continue;
                    }
                    None => {
                        self.leave_waiting(Wait::WindowNeverOpens);
                        break;
                    }
                }
            }
            match self.too_late_in_window(t) {
                Some(Some(next)) if unfit < UNFIT_OPENINGS => {
                    unfit += 1;
                    self.note_all(Wait::WindowFit);
                    t = next;
                    continue;
                }
                Some(_) => {
                    self.leave_waiting(Wait::WindowFit);
                    break;
                }
                None => {}
            }
            let granted = self.round(t);
            if !granted.is_empty() {
                unfit = 0;
                self.add_wave(t, granted);
            }
            // The next moment something changes: a slot comes free, the window closes and
            // opens again, or a scheduled budget that holds requests ends (a grant may come
            // only then).
            let budget_change = self
                .held_by_schedule
                .then(|| self.budgets().next_change(t))
                .flatten();
            match self
                .busy
                .values()
                .map(|b| b.frees_at)
                .chain(self.retry_at(t))
                .chain(budget_change)
                .min()
            {
                Some(next) => t = next.max(t),
                None => {
                    self.leave_waiting_as_decided(t);
                    break;
                }
            }
        }
        self.plan.done_at = self
            .plan
            .waves
            .iter()
            .filter_map(|w| w.end)
            .chain(self.plan.under_way.iter().filter_map(|u| u.frees_at))
            .max();
        self.plan.left.sort();
        self.plan
    }

    /// With `--reboot-estimate`, when the window open at `t` has too little time left for a
    /// reboot: the next opening after it closes (`None` inside: none within four years).
    fn too_late_in_window(&self, t: Timestamp) -> Option<Option<Timestamp>> {
        let estimate = self.input.reboot_estimate?;
        let needs = self.input.reboot.map_or(estimate, |r| r.max(estimate));
        let windows = self.input.windows;
        let closes = windows.closes_at(t)?;
        let fits = t.checked_add(needs).is_ok_and(|end| end <= closes);
        if fits {
            return None;
        }
        // Waiting at least until it closes: then the next opening, which may fit.
        Some(windows.next_opening(closes).filter(|next| *next > t))
    }

    /// When the first request now kept back after a failed drain may be granted again.
    fn retry_at(&self, t: Timestamp) -> Option<Timestamp> {
        let now = self.round_at(t);
        let later = self
            .input
            .nodes
            .iter()
            .filter(|v| v.in_pool && v.state.request == Request::Needed)
            .filter_map(|v| v.not_before.filter(|at| *at > now))
            .min()?;
        t.checked_add(Duration::from_millis(later - now)).ok()
    }

    fn round_at(&self, t: Timestamp) -> u64 {
        let since = t.duration_since(self.input.now).as_millis().max(0);
        self.input
            .now_ms
            .saturating_add(u64::try_from(since).unwrap_or(u64::MAX))
    }

    fn budgets(&self) -> Budgets {
        Budgets {
            base: MaxUnavailable::Count(u32::try_from(self.input.budget).unwrap_or(u32::MAX)),
            scheduled: self.input.scheduled_budgets.to_vec(),
        }
    }

    /// The budget in force at `t`, and whether a scheduled budget lowers it.
    fn budget_at(&self, t: Timestamp) -> (usize, bool) {
        let budget = self.budgets().at(self.input.pool_size, t).budget;
        (budget, budget < self.input.budget)
    }

    /// One decision at `t`: the nodes granted, noting why the others wait.
    fn round(&mut self, t: Timestamp) -> Vec<Grant> {
        let decision = self.decide(t);
        let lowered = self.budget_at(t).1;
        self.held_by_schedule = lowered && !decision.waiting.is_empty();
        for name in &decision.waiting {
            let why = if decision.zone_full.contains(name) {
                Wait::ZoneFull
            } else if decision.concurrency_full.contains(name) {
                Wait::ConcurrencyFull
            } else if decision.stage_full.contains(name) {
                match decision.stage {
                    Some(crate::rollout::Stage::Canary { .. }) => Wait::Canary,
                    _ => Wait::Wave,
                }
            } else if decision.zone_unknown.contains(name) {
                Wait::NoZoneLabel
            } else if decision.blocked.contains(name) {
                Wait::BlockingPod
            } else if lowered {
                Wait::ScheduledBudget
            } else {
                Wait::BudgetFull
            };
            self.note(name, why);
        }
        match decision.ledger.rollout {
            Some(RolloutChange::Write(record)) => self.ledger.rollout = Some(record),
            Some(RolloutChange::End) => self.ledger.rollout = None,
            None => {}
        }
        decision
            .ledger
            .grant
            .into_iter()
            .filter(|g| g.adopted.is_none())
            .collect()
    }

    fn decide(&self, t: Timestamp) -> crate::decide::Decision {
        let now = self.round_at(t);
        Round {
            nodes: &self.input.nodes,
            others: self.input.others,
            ledger: &self.ledger,
            deleted: &BTreeSet::new(),
            budget: self.budget_at(t).0,
            zone_budget: self.input.zone_budget,
            concurrency: self.input.concurrency,
            drain_enabled: true,
            now,
            fence: Fence {
                paused: false,
                window_open: true,
                gates_closed: false,
            },
            blocked: self.input.blocked,
            finish_after_window: true,
            // Slots are held and freed by the simulation's own clock.
            min_ready: 0,
            clock: now,
            reboot_timeout: u64::MAX,
            give_up_after: u64::MAX,
            // A drain or reboot delay is part of a reboot's length here.
            delays: Default::default(),
            // Pre-flight holds are the controller's to see: a plan cannot tell them ahead.
            preflight: &BTreeMap::new(),
            set_aside: self.input.set_aside,
            rollout: self.input.rollout,
            // The windows are the simulation's own: it moves its clock to their openings.
            window_fit: None,
        }
        .decide()
    }

    fn add_wave(&mut self, t: Timestamp, granted: Vec<Grant>) {
        let canaries = self.ledger.rollout.as_ref().map(|r| &r.canaries);
        let canary = granted
            .iter()
            .any(|g| canaries.is_some_and(|c| c.contains(&g.node)));
        // A canary soaks for `--canary-soak` at least; only when the reboot's length is known.
        let soak = Duration::from_millis(self.input.rollout.canary_soak)
            .saturating_sub(self.input.min_ready);
        let hold = match (canary, self.input.reboot) {
            (true, Some(_)) => self.hold + soak,
            _ => self.hold,
        };
        let frees_at = t.checked_add(hold).unwrap_or(t);
        let change = LedgerChange {
            grant: granted.clone(),
            ..LedgerChange::default()
        };
        let id = self.ledger.id.clone();
        let grants = &mut self.grants;
        self.ledger.slots = change.apply(&self.ledger.slots, &t.to_string(), || {
            *grants += 1;
            common::ledger::grant_id(&id, &format!("plan-{grants}"))
        });
        let opening = self.opening_of(t);
        let nodes = granted
            .into_iter()
            .map(|g| {
                self.busy.insert(g.node.clone(), Busy { frees_at });
                Planned {
                    waited: self.waited.remove(&g.node).unwrap_or_default(),
                    name: g.node,
                    zone: g.zone,
                }
            })
            .collect();
        self.plan.waves.push(Wave {
            number: self.plan.waves.len() + 1,
            nodes,
            start: self
                .known(t)
                .or((self.plan.waves.is_empty() && !self.untimed_free).then_some(t)),
            end: self.known(frees_at),
            window_opening: opening,
        });
    }

    /// The window opening a wave at `t` waited for, if it is not the first wave's: the
    /// windows were closed at some moment between the previous wave and `t`.
    fn opening_of(&mut self, t: Timestamp) -> Option<Timestamp> {
        let windows = self.input.windows;
        let previous = self.last_wave.replace(t)?;
        // The windows closed in between when their next change after the previous wave is a
        // closing before `t`.
        let mut at = previous;
        while let Some(change) = windows.next_change(at).filter(|c| *c <= t) {
            if !windows.is_open(change) {
                let opening = windows.next_opening(change)?;
                return (opening <= t).then_some(opening);
            }
            at = change;
        }
        None
    }

    /// Slots whose reboot and soak are over by `t` come free: the node is done.
    fn free_slots(&mut self, t: Timestamp) {
        let done: Vec<String> = self
            .busy
            .iter()
            .filter(|(_, b)| b.frees_at <= t)
            .map(|(n, _)| n.clone())
            .collect();
        for name in done {
            self.untimed_free |= self.input.reboot.is_none();
            self.busy.remove(&name);
            self.ledger.slots.remove(&name);
            if let Some(record) = &mut self.ledger.rollout {
                self.input.rollout.released(record, &name, true);
            }
            if let Some(view) = self.input.nodes.iter_mut().find(|v| v.name() == name) {
                finished(view);
            }
        }
    }

    fn note(&mut self, name: &str, why: Wait) {
        let list = self.waited.entry(name.to_owned()).or_default();
        if !list.contains(&why) {
            list.push(why);
        }
    }

    fn requested(&self) -> Vec<String> {
        self.input
            .nodes
            .iter()
            .filter(|v| v.in_pool && v.state.request == Request::Needed)
            .filter(|v| v.state.grant.is_none() && !v.state.reboot_under_way())
            .filter(|v| !self.ledger.slots.contains_key(v.name()))
            .map(|v| v.name().to_owned())
            .collect()
    }

    fn note_all(&mut self, why: Wait) {
        for name in self.requested() {
            let opted_out = self.view(&name).is_some_and(|v| v.opt_out.opts_out());
            if !opted_out {
                self.note(&name, why);
            }
        }
    }

    fn view(&self, name: &str) -> Option<&NodeView> {
        self.input.nodes.iter().find(|v| v.name() == name)
    }

    /// Every request not granted is left, for `why` (opted-out nodes for being opted out).
    fn leave_waiting(&mut self, why: Wait) {
        for name in self.requested() {
            let opted_out = self.view(&name).is_some_and(|v| v.opt_out.opts_out());
            let why = if opted_out { Wait::OptedOut } else { why };
            self.plan.left.push((name, why));
        }
    }

    /// Nothing is under way and the last round granted nothing: what waits, waits for what
    /// that round said (a zone label, a blocking pod, being opted out).
    fn leave_waiting_as_decided(&mut self, t: Timestamp) {
        let decision = self.decide(t);
        for name in self.requested() {
            let opted_out = self.view(&name).is_some_and(|v| v.opt_out.opts_out());
            let why = if opted_out {
                Wait::OptedOut
            } else if decision.set_aside.contains(&name) {
                Wait::SetAside
            } else if decision.stalled.is_some() {
                Wait::Stalled
            } else if decision.zone_unknown.contains(&name) {
                Wait::NoZoneLabel
            } else if decision.blocked.contains(&name) {
                Wait::BlockingPod
            } else {
                Wait::BudgetFull
            };
            self.plan.left.push((name, why));
        }
    }
}

/// A node whose simulated reboot is over: no request, nothing under way, Ready, and not
/// cordoned by the operator any more.
fn finished(view: &mut NodeView) {
    if view.state.cordoned_by_operator {
        view.facts.unschedulable = false;
    }
    view.facts.readiness = common::Readiness::Ready;
    view.state = common::ProtocolState::from_annotations(
        &common::AnnotationKeys::default(),
        &BTreeMap::new(),
    );
}

#[cfg(test)]
mod tests;
