//! What `kubectl reboot plan` shows: the whole rollout, wave by wave, from the controller's
//! own decision run forward ([`controller_core::rollout_plan`]) over what `status` reads. Pure: the
//! pool as read, the controller's settings as given, and the time are arguments. The JSON
//! shape of [`Plan`] is the stable output of `-o json` (documented in docs/src/operations.md).

use crate::{
    estimate::Basis,
    input::{NodeInput, PoolInput},
    pool_spec,
    status::{self, State},
    wait::WaitReason,
};
use common::{
    AnnotationKeys, MaxUnavailable, events::CONTROLLER, pool::RebootPoolSpec, rollout::MaxFailures,
};
use controller_core::{
    decide::{DrainState, NodeView, SetAside},
    ledger::Ledger,
    pool_index::PoolCounts,
    rollout::RolloutRules,
    rollout_plan::{self, PlanInput, RolloutPlan, Wait},
    scheduled_budget::ScheduledBudget,
    window::Windows,
};
use k8s_openapi::{apimachinery::pkg::util::intstr::IntOrString, jiff::Timestamp};
use serde::Serialize;
use std::{collections::BTreeSet, time::Duration};

pub const KIND: &str = "RebootPlan";

/// The controller's order, as the plan applies it.
const ORDER: &str = "oldest request first (when the controller first said why it waits), \
    zones taken in turn, as many at a time as the budgets allow";

/// The controller's settings that the plan needs, as given to the plugin.
#[derive(Debug, Clone, Default)]
pub struct Settings {
    /// The windows and the blackouts.
    pub windows: Windows,
    /// `--scheduled-budget`.
    pub scheduled_budgets: Vec<ScheduledBudget>,
    pub zone_label: String,
    pub zone_budget: Option<MaxUnavailable>,
    /// `--concurrency`.
    pub concurrency: Option<MaxUnavailable>,
    pub min_ready: Duration,
    /// A RebootPool's `drainAttempts` and `maxBlockedNodes`: the nodes set aside are left out.
    pub set_aside: SetAside,
    /// A RebootPool's `canary`, `canarySoak` (in milliseconds), `waves` and `maxFailures`: the
    /// canaries go first and alone, the waves grow.
    pub rollout: RolloutRules,
    /// A RebootPool's `rebootEstimate`: a wave starts only if a reboot ends before the window
    /// closes.
    pub reboot_estimate: Option<Duration>,
    /// `--reboot-duration`: a reboot's length, instead of the history's.
    pub reboot: Option<Duration>,
}

impl Settings {
    /// The settings `plan` takes from the spec (`reboot`, a reboot's length, is the plugin's).
    pub fn of_spec(spec: &RebootPoolSpec, reboot: Option<Duration>) -> Result<Self, String> {
        let windows = parse_each(&spec.windows, "window")?;
        let blackouts = parse_each(&spec.blackouts, "blackout")?;
        let budget = pool_spec::budget(spec);
        Ok(Self {
            windows: Windows::new(windows).with_blackouts(blackouts),
            scheduled_budgets: parse_each(&spec.scheduled_budgets, "scheduled budget")?,
            zone_label: budget.zone_label,
            zone_budget: budget.per_zone.transpose()?,
            concurrency: spec
                .concurrency
                .as_ref()
                .map(|c| pool_spec::limit("concurrency", c))
                .transpose()?,
            min_ready: Duration::from_secs(
                count("minReadySeconds", spec.min_ready_seconds, 0)?.unwrap_or(0),
            ),
            set_aside: SetAside {
                attempts: count("drainAttempts", spec.drain_attempts, 1)?,
                most: count("maxBlockedNodes", spec.max_blocked_nodes, 0)?,
                keep_cordoned: spec.keep_set_aside_cordoned.unwrap_or(false),
                retiring: false,
            },
            rollout: rollout_rules(spec)?,
            reboot_estimate: spec
                .reboot_estimate
                .as_deref()
                .map(|e| {
                    common::duration::parse_duration(e)
                        .map_err(|why| format!("its rebootEstimate: {why}"))
                })
                .transpose()?,
            reboot,
        })
    }
}

/// A count of the spec, at least `least`, as the controller reads it (and the CRD checks it).
fn count<T: TryFrom<i64>>(
    field: &str,
    value: Option<i64>,
    least: i64,
) -> Result<Option<T>, String> {
    value
        .map(|n| {
            if n < least {
                return Err(format!("its {field} {n} is below {least}"));
            }
            T::try_from(n).map_err(|_| format!("its {field} {n} is too large"))
        })
        .transpose()
}

/// A RebootPool's rollout rules, as the controller reads them (controller/src/pools/settings.rs).
fn rollout_rules(spec: &RebootPoolSpec) -> Result<RolloutRules, String> {
    let canary = match spec.canary {
        None => 0,
        Some(c) => count::<u32>("canary", Some(c), 0)?.unwrap_or(0),
    };
    let canary_soak = match &spec.canary_soak {
        None => std::time::Duration::ZERO,
        Some(soak) => duration_or_zero(soak).map_err(|e| format!("its canarySoak: {e}"))?,
    };
    let max_failures = match &spec.max_failures {
        None => None,
        Some(most) => {
            let text = match most {
                IntOrString::Int(n) => n.to_string(),
                IntOrString::String(s) => s.clone(),
            };
            let read: MaxFailures = text
                .parse()
                .map_err(|e: common::rollout::MaxFailuresError| format!("its maxFailures: {e}"))?;
            Some(read)
        }
    };
    Ok(RolloutRules {
        canary,
        canary_soak: u64::try_from(canary_soak.as_millis()).unwrap_or(u64::MAX),
        waves: spec.waves.unwrap_or(false),
        max_failures,
        resumed_at: spec
            .resumed_at
            .as_deref()
            .map(common::pool::resumed_at_millis)
            .transpose()
            .map_err(|e| format!("its resumedAt: {e}"))?,
    })
}

/// A duration, or zero (`0s`, `0`), as the controller reads `canarySoak`.
fn duration_or_zero(value: &str) -> Result<Duration, String> {
    let zero = value.trim().trim_end_matches(['s', 'm', 'h']);
    if !zero.is_empty() && zero.chars().all(|c| c == '0') {
        return Ok(Duration::ZERO);
    }
    common::duration::parse_duration(value).map_err(|e| e.to_string())
}

/// Each of `texts` read as a `what` of the spec.
fn parse_each<T: std::str::FromStr<Err = String>>(
    texts: &[String],
    what: &str,
) -> Result<Vec<T>, String> {
    texts
        .iter()
        .map(|t| t.parse().map_err(|e| format!("its {what} {t:?}: {e}")))
        .collect()
}

/// One node of a wave.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PlannedNode {
    pub name: String,
    pub zone: Option<String>,
    /// Why it is not in an earlier wave, each reason once, in the order met.
    pub waited_for: Vec<&'static str>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WavePlan {
    pub wave: usize,
    /// RFC 3339; `null` when unknown (no reboot length).
    pub start: Option<String>,
    pub starts_in_seconds: Option<i64>,
    /// When its slots come free: a reboot and the soak after its start.
    pub end: Option<String>,
    pub ends_in_seconds: Option<i64>,
    /// The window opening it waits for, when that is later than the first wave's.
    pub window_opening: Option<String>,
    pub nodes: Vec<PlannedNode>,
}

/// A requested node that no wave reaches.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LeftNode {
    pub name: String,
    pub reason: &'static str,
    pub detail: String,
}

/// A node holding a slot now.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct UnderWayNode {
    pub name: String,
    /// When its slot should come free (RFC 3339), when known.
    pub frees_at: Option<String>,
}

/// Waves that start in a later window opening than the first.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Spill {
    pub window_opening: String,
    pub nodes: usize,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SettingsUsed {
    pub max_unavailable: Option<usize>,
    pub budget_from: String,
    pub max_unavailable_per_zone: Option<String>,
    pub concurrency: Option<String>,
    pub zone_label: String,
    /// The windows, as given; empty: always.
    pub windows: Vec<String>,
    /// The blackouts, as given.
    pub blackouts: Vec<String>,
    /// The scheduled budgets, as given.
    pub scheduled_budgets: Vec<String>,
    pub min_ready_seconds: u64,
    /// A reboot's length used, in seconds; `null`: unknown.
    pub reboot_seconds: Option<f64>,
    /// `flag` (`--reboot-duration`), `events`, `metrics` or `none`.
    pub reboot_from: &'static str,
    /// A RebootPool's `canary`: the first this many nodes of a rollout go alone; 0: none.
    pub canary: u32,
    /// Its `canarySoak`, in seconds: how long a canary is Ready before the rest start.
    pub canary_soak_seconds: u64,
    /// Its `waves`: the nodes in the protocol start at 1 (twice `canary` after a canary) and
    /// double after each wave.
    pub waves: bool,
    /// Its `maxFailures`; `null`: no limit.
    pub max_failures: Option<String>,
}

/// The whole plan: the `-o json` document.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Plan {
    pub kind: &'static str,
    pub api_version: &'static str,
    pub time: String,
    pub selector: String,
    pub ledger: String,
    pub settings: SettingsUsed,
    /// Why the nodes are in this order, in words.
    pub order: String,
    /// The rollout under way as the controller records it, in words (the canaries done, the
    /// wave, the failures); `null` between rollouts.
    pub rollout: Option<String>,
    /// What holds every wave now, until someone acts (`paused`, `gate closed`, `a node is
    /// failing`), if anything.
    pub held_by: Option<&'static str>,
    pub under_way: Vec<UnderWayNode>,
    pub waves: Vec<WavePlan>,
    pub left: Vec<LeftNode>,
    pub spills: Vec<Spill>,
    /// When the last wave's slots should come free (RFC 3339), when known.
    pub done_at: Option<String>,
    /// One line for people.
    pub summary: String,
    /// What the plan cannot know, and what could not be read.
    pub notes: Vec<String>,
    pub warnings: Vec<String>,
}

/// The plan of `input` at `now`; an error saying what to give when the budget is unknown.
pub fn plan(
    input: &PoolInput,
    keys: &AnnotationKeys,
    settings: &Settings,
    now: Timestamp,
) -> Result<Plan, String> {
    let status = status::status(input, keys, now);
    let budget = status.budget.max_unavailable.ok_or_else(|| {
        "the budget is unknown: give the controller's --max-unavailable (MAX_UNAVAILABLE), or \
         --metrics-url with its /metrics"
            .to_owned()
    })?;
    let mut notes = Vec::new();
    let budget = base_budget(input, settings, &status, budget, &mut notes);
    let (reboot, reboot_from) = match (settings.reboot, status.estimate.reboot_seconds) {
        (Some(r), _) => (Some(r), "flag"),
        (None, Some(s)) => (
            Some(Duration::from_secs_f64(s.max(0.0))),
            basis_name(status.estimate.basis),
        ),
        (None, None) => (None, "none"),
    };
    let held = hold(input, &status, &mut notes);
    let blocked: BTreeSet<String> = status
        .nodes
        .iter()
        .filter(|n| n.state == State::Waiting && n.reason == Some(WaitReason::BlockingPod))
        .map(|n| n.name.clone())
        .collect();
    let ledger = ledger(input);
    let others = PoolCounts::default();
    // A node that two RebootPools select is granted by neither: no wave takes it, yet it
    // counts against this pool's budgets while it is unavailable, as the controller counts it.
    let shared =
        |n: &NodeInput| !n.overlap.is_empty() && !input.ledger.slots.contains_key(&n.facts.name);
    let overlapping: Vec<&NodeInput> = input.nodes.iter().filter(|n| shared(n)).collect();
    let views: Vec<NodeView> = input
        .nodes
        .iter()
        .map(|n| NodeView {
            in_pool: !shared(n),
            shared: shared(n),
            ..view(n, keys, &settings.zone_label)
        })
        .collect();
    let planned = rollout_plan::plan(PlanInput {
        nodes: views,
        others: &others,
        ledger: &ledger,
        budget,
        scheduled_budgets: &settings.scheduled_budgets,
        pool_size: input.nodes.len(),
        zone_budget: settings.zone_budget,
        concurrency: settings.concurrency.map(|c| c.resolve(input.nodes.len())),
        windows: &settings.windows,
        held,
        blocked: &blocked,
        reboot,
        min_ready: settings.min_ready,
        set_aside: settings.set_aside,
        rollout: settings.rollout,
        reboot_estimate: settings.reboot_estimate,
        now,
        now_ms: millis(now),
    });
    notes.extend(what_is_not_known(settings, reboot.is_some(), &status));
    let summary = summary(&planned, budget, now);
    Ok(Plan {
        kind: KIND,
        api_version: status::API_VERSION,
        time: now.to_string(),
        selector: input.selector.clone(),
        ledger: input.ledger.name.clone(),
        settings: SettingsUsed {
            max_unavailable: Some(budget),
            budget_from: status.budget.source_detail.clone(),
            max_unavailable_per_zone: settings.zone_budget.map(|z| z.to_string()),
            concurrency: settings.concurrency.map(|c| c.to_string()),
            zone_label: settings.zone_label.clone(),
            windows: texts(&settings.windows.open),
            blackouts: texts(&settings.windows.blackouts),
            scheduled_budgets: texts(&settings.scheduled_budgets),
            min_ready_seconds: settings.min_ready.as_secs(),
            reboot_seconds: reboot.map(|r| r.as_secs_f64()),
            reboot_from,
            canary: settings.rollout.canary,
            canary_soak_seconds: settings.rollout.canary_soak / 1000,
            waves: settings.rollout.waves,
            max_failures: settings.rollout.max_failures.map(|m| m.to_string()),
        },
        order: ORDER.to_owned(),
        rollout: status.pool.rollout.as_ref().map(|r| r.summary.clone()),
        held_by: planned.held.map(Wait::as_str),
        under_way: planned
            .under_way
            .iter()
            .map(|u| UnderWayNode {
                name: u.name.clone(),
                frees_at: u.frees_at.map(|t| t.to_string()),
            })
            .collect(),
        waves: planned.waves.iter().map(|w| wave(w, now)).collect(),
        left: planned
            .left
            .iter()
            .map(|(name, why)| LeftNode {
                name: name.clone(),
                reason: why.as_str(),
                detail: match why {
                    Wait::OptedOut => opted_out_detail(input, keys, name),
                    _ => left_detail(*why),
                },
            })
            .chain(
                overlapping
                    .iter()
                    .filter(|n| requested(n, keys))
                    .map(|n| LeftNode {
                        name: n.facts.name.clone(),
                        reason: WaitReason::Overlap.as_str(),
                        detail: status::overlap(&n.overlap),
                    }),
            )
            .collect(),
        spills: planned
            .spills()
            .into_iter()
            .map(|(at, nodes)| Spill {
                window_opening: at.to_string(),
                nodes,
            })
            .collect(),
        done_at: planned.done_at.map(|t| t.to_string()),
        summary,
        notes,
        warnings: status.warnings,
    })
}

/// The budget the scheduled budgets lower: the controller's metrics give the one in force
/// now, so with scheduled budgets `--max-unavailable` given here goes first.
fn base_budget(
    input: &PoolInput,
    settings: &Settings,
    status: &status::Status,
    budget: usize,
    notes: &mut Vec<String>,
) -> usize {
    if settings.scheduled_budgets.is_empty()
        || status.budget.source != status::BudgetSource::Metrics
    {
        return budget;
    }
    match input.budget.flag {
        Some(flag) => flag.resolve(input.nodes.len()),
        None => {
            notes.push(format!(
                "the budget is the controller's in force now ({budget}), which a scheduled \
                 budget may lower: give --max-unavailable (MAX_UNAVAILABLE) for the waves after \
                 it ends to be right"
            ));
            budget
        }
    }
}

fn texts<T: ToString>(items: &[T]) -> Vec<String> {
    items.iter().map(ToString::to_string).collect()
}

fn requested(node: &NodeInput, keys: &AnnotationKeys) -> bool {
    node.facts.protocol(keys).request == common::Request::Needed
}

fn basis_name(basis: Basis) -> &'static str {
    match basis {
        Basis::Events => "events",
        Basis::Metrics => "metrics",
        Basis::None => "none",
    }
}

fn millis(t: Timestamp) -> u64 {
    u64::try_from(t.as_millisecond()).unwrap_or_default()
}

/// What holds every grant until someone acts: the pause, a failing node, a closed gate (as
/// the controller's metrics or its latest Events say).
fn hold(input: &PoolInput, status: &status::Status, notes: &mut Vec<String>) -> Option<Wait> {
    let gates_closed = input
        .budget
        .metrics
        .as_ref()
        .map(|m| m.gates_closed.clone())
        .unwrap_or_default();
    let gate_event = status.nodes.iter().any(|n| {
        n.state == State::Waiting
            && matches!(
                n.reason,
                Some(WaitReason::AlertsFiring | WaitReason::PrometheusUnreachable)
            )
    });
    if !gates_closed.is_empty() {
        notes.push(format!(
            "the controller's metrics say a health gate holds new reboots now ({}): no wave \
             starts until it opens",
            gates_closed.join(", ")
        ));
    }
    match status.estimate.held_by {
        _ if input.ledger.paused => Some(Wait::Paused),
        Some(WaitReason::RebootOverdue | WaitReason::NotReadyAfterReboot) => {
            Some(Wait::FailingNode)
        }
        // Stalled as the controller said, whether or not the rules are known here (the flags'
        // pool's `--canary` and `--max-failures` are not the plugin's to know).
        Some(WaitReason::Stalled) => Some(Wait::Stalled),
        _ if !gates_closed.is_empty() || gate_event => Some(Wait::GateClosed),
        _ => None,
    }
}

fn what_is_not_known(settings: &Settings, timed: bool, status: &status::Status) -> Vec<String> {
    let mut notes = vec![
        "health gates (Prometheus alerts, blocking pods) are not evaluated here: the plan \
         takes them as the controller last reported them (its metrics with --metrics-url, its \
         Events); a gate that closes later holds every wave meanwhile"
            .to_owned(),
    ];
    if !timed {
        notes.push(
            "no reboot history (no completed reboot in the Events, which last an hour, nor in \
             the controller's metrics): the waves are in order, without times; give \
             --reboot-duration to time them"
                .to_owned(),
        );
    }
    let waits_for = |reason| status.nodes.iter().any(|n| n.reason == Some(reason));
    if waits_for(WaitReason::OutsideWindow) && settings.windows.open.is_empty() {
        notes.push(
            "the controller says requests wait for a maintenance window, and none was given \
             here: give its --reboot-window (REBOOT_WINDOW) for the times to be right"
                .to_owned(),
        );
    }
    if waits_for(WaitReason::Blackout) && settings.windows.blackouts.is_empty() {
        notes.push(
            "the controller says a blackout holds new reboots, and none was given here: give \
             its --reboot-blackout (REBOOT_BLACKOUT) for the times to be right"
                .to_owned(),
        );
    }
    notes
}

/// The opt-out label of a node left out, as found, and how it was read.
fn opted_out_detail(input: &PoolInput, keys: &AnnotationKeys, name: &str) -> String {
    let label = input
        .nodes
        .iter()
        .find(|n| n.facts.name == name)
        .and_then(|n| keys.opt_out(Some(&n.labels)).describe(&keys.disabled))
        .unwrap_or_else(|| format!("{}=true", keys.disabled));
    format!("labelled {label}: never rebooted")
}

fn left_detail(why: Wait) -> String {
    match why {
        Wait::Paused => "the pool is paused: `kubectl reboot resume` lifts it",
        Wait::GateClosed => "a health gate holds new reboots: no wave starts until it opens",
        Wait::FailingNode => {
            "a node did not come back from its reboot, or is NotReady after it: no new reboot \
             starts until it recovers or an administrator acts (see `kubectl reboot status`)"
        }
        Wait::BlockingPod => "a blocking pod runs on it: not rebooted while it runs",
        Wait::OptedOut => "labelled reboot-disabled: never rebooted",
        Wait::NoZoneLabel => "no zone label while zone budgets are on: never granted without one",
        Wait::WindowNeverOpens => "no maintenance window opens again",
        Wait::SetAside => {
            "its drains failed drainAttempts times: not rebooted until its \
             reboot-drain-failures is removed"
        }
        Wait::Stalled => {
            "the pool is stalled (a failed canary, more failed nodes than maxFailures, more nodes \
             set aside than maxBlockedNodes, or a rollout record that does not read): nothing \
             starts until an administrator acts; `kubectl reboot status` says why, and \
             `kubectl reboot resume` forgives the rollout's failures once they are looked at"
        }
        Wait::Canary => {
            "the first nodes of the rollout (canary) go alone: it starts once they have \
             completed and soaked (canarySoak)"
        }
        Wait::Wave => {
            "the current wave (waves) is full: it starts in the next, twice as large, once this \
             one has completed"
        }
        Wait::WindowFit => {
            "no window within 60 openings is long enough for a reboot (rebootEstimate, or the \
             pool's typical reboot): lengthen the window or lower the estimate"
        }
        Wait::BudgetFull
        | Wait::ZoneFull
        | Wait::ConcurrencyFull
        | Wait::OutsideWindow
        | Wait::Blackout
        | Wait::ScheduledBudget => "waits",
    }
    .to_owned()
}

fn wave(w: &rollout_plan::Wave, now: Timestamp) -> WavePlan {
    let seconds = |t: Option<Timestamp>| t.map(|t| t.duration_since(now).as_secs());
    WavePlan {
        wave: w.number,
        start: w.start.map(|t| t.to_string()),
        starts_in_seconds: seconds(w.start),
        end: w.end.map(|t| t.to_string()),
        ends_in_seconds: seconds(w.end),
        window_opening: w.window_opening.map(|t| t.to_string()),
        nodes: w
            .nodes
            .iter()
            .map(|n| PlannedNode {
                name: n.name.clone(),
                zone: n.zone.clone(),
                waited_for: n.waited.iter().map(|w| w.as_str()).collect(),
            })
            .collect(),
    }
}

fn summary(planned: &RolloutPlan, budget: usize, now: Timestamp) -> String {
    let nodes: usize = planned.waves.iter().map(|w| w.nodes.len()).sum();
    let waves = planned.waves.len();
    if nodes == 0 && planned.left.is_empty() {
        return "nothing to reboot".to_owned();
    }
    let mut line = format!(
        "{nodes} to reboot in {waves} wave{}, {budget} at a time",
        if waves == 1 { "" } else { "s" }
    );
    match planned.done_at {
        Some(done) if waves > 0 => line.push_str(&format!(
            ": done in ~{} (about {})",
            crate::estimate::human(done.duration_since(now).as_secs()),
            done.strftime("%a %Y-%m-%d %H:%M:%SZ")
        )),
        _ if waves > 0 => line.push_str(": done: unknown (no reboot length)"),
        _ => {}
    }
    for (opening, count) in planned.spills() {
        line.push_str(&format!(
            "; {count} node{} spill{} into the window opening {}",
            if count == 1 { "" } else { "s" },
            if count == 1 { "s" } else { "" },
            opening.strftime("%a %Y-%m-%d %H:%M:%SZ")
        ));
    }
    if !planned.left.is_empty() {
        line.push_str(&format!("; {} not planned (see below)", planned.left.len()));
    }
    line
}

fn ledger(input: &PoolInput) -> Ledger {
    Ledger {
        id: input.ledger.name.clone(),
        resource_version: input.ledger.version.clone(),
        slots: input.ledger.slots.clone(),
        paused: input.ledger.paused,
        // The canaries done, the wave under way and the failures, as the controller counts
        // them.
        rollout: input.ledger.rollout.clone(),
        rollout_unreadable: input.ledger.rollout_unreadable.clone(),
        // A ledger in a format this plugin does not know is read as damaged (no slots).
        unknown_format: None,
        // A pause is planned as it stands, not as a resume the controller has yet to see.
        created_at: None,
    }
}

/// A node as the controller's round views it. The order of requests is the controller's
/// (oldest first): when it first saw the request, which the plugin reads as its first Event
/// about the node since the last completed reboot (nodes without one come last, by name).
fn view(node: &NodeInput, keys: &AnnotationKeys, zone_label: &str) -> NodeView {
    let state = node.facts.protocol(keys);
    let since: Option<Timestamp> = state.last_completed.as_deref().and_then(|t| t.parse().ok());
    let requested_at = node
        .events
        .iter()
        .filter(|e| e.component == CONTROLLER)
        .filter(|e| since.is_none_or(|s| e.time > s))
        .map(|e| millis(e.time))
        .min();
    NodeView {
        state,
        in_pool: node.in_pool,
        shared: false,
        requested_at,
        not_before: None,
        drain: DrainState::NotStarted,
        zone: node.labels.get(zone_label).cloned(),
        opt_out: keys.opt_out(Some(&node.labels)),
        ready_since: Some(0),
        approved_at: None,
        claimed_at: None,
        drained_at: None,
        fresh: true,
        facts: node.facts.clone(),
    }
}

#[cfg(test)]
mod tests;
