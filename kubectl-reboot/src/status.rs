//! What `kubectl reboot status` shows, computed from plain data: the nodes (their facts,
//! labels, the Events about them, the pods left on a draining one), the slot ledger and the
//! budget. Pure: no client, no clock (the time is an argument). The JSON shape of [`Status`]
//! is the stable output of `-o json` (documented in docs/src/operations.md).

use crate::estimate::{self, Estimate};
use crate::input::{LedgerInput, NodeEvent, NodeInput, PoolInput};
use crate::wait::WaitReason;
use common::{
    AnnotationKeys, ControllerReason as Controller, Phase, ProtocolState, Readiness, Request,
    events::{CONTROLLER, NOTE_HELD},
    rollout::RolloutRecord,
};
use k8s_openapi::jiff::Timestamp;
use serde::Serialize;
use std::collections::BTreeMap;

/// Events may be stamped by another clock (an agent's node): this much earlier than the
/// ledger's grant time still counts as of that grant.
const SKEW_SECONDS: i64 = 5;

/// Where a node is, from the administrator's point of view.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum State {
    /// No request, nothing under way.
    Idle,
    /// `reboot-needed=true`; the controller has not said yet why it waits.
    Requested,
    /// `reboot-needed=true`, waiting for the reason given.
    Waiting,
    /// `reboot-needed` has a value other than `true`: not a request.
    Invalid,
    /// A slot is granted in the ledger; the node does not carry it yet.
    Granted,
    /// Holds a slot; cordoned, its pods being evicted.
    Draining,
    /// Told to reboot, rebooting, or rebooted and waiting to be Ready (see `step`).
    Rebooting,
    /// Reboot completed; the slot is still held until the node has been Ready for
    /// `--min-ready-seconds`.
    Soaking,
    /// The slot is being given back (the request was cancelled, or a drain gave up).
    Releasing,
}

impl State {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Idle => "idle",
            Self::Requested => "requested",
            Self::Waiting => "waiting",
            Self::Invalid => "invalid",
            Self::Granted => "granted",
            Self::Draining => "draining",
            Self::Rebooting => "rebooting",
            Self::Soaking => "soaking",
            Self::Releasing => "releasing",
        }
    }

    /// Still to be rebooted: counts in the queue.
    fn queued(self) -> bool {
        matches!(
            self,
            Self::Requested | Self::Waiting | Self::Granted | Self::Draining | Self::Rebooting
        )
    }
}

/// Where a rebooting node is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Step {
    /// `reboot-now`: the agent was told to reboot.
    RebootNow,
    /// `reboot-in-progress`: the agent asked the node to reboot.
    InProgress,
    /// `reboot-done`: the agent proved the reboot; the controller completes it once the
    /// kubelet reports the new boot and Ready.
    Proven,
}

/// An Event, as shown.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EventRef {
    pub reason: String,
    pub message: String,
    pub time: String,
}

/// One node in the status.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeStatus {
    pub name: String,
    pub state: State,
    /// Why it waits (state `waiting`); for a `granted` or `draining` node, what holds it where
    /// it stands (the pause, a closed window, a closed gate).
    pub reason: Option<WaitReason>,
    /// Where the reboot is (state `rebooting`).
    pub step: Option<Step>,
    /// One line for people.
    pub detail: String,
    /// Since when it is in this state (RFC 3339), when known.
    pub since: Option<String>,
    /// How long it has been in this state, in seconds, when known.
    pub seconds: Option<i64>,
    /// The Event the reason comes from.
    pub event: Option<EventRef>,
    /// The pods a drain still has to evict (`namespace/name`); draining nodes only.
    pub pods_left: Option<Vec<String>>,
    /// The Ready condition: `True`, `False`, `Unknown` or `Missing`.
    pub ready: &'static str,
    pub cordoned: bool,
    /// Holds a slot in the ledger; `grantedAt` says since when.
    pub holds_slot: bool,
    pub granted_at: Option<String>,
    /// Counts against the budget (not Ready, cordoned, in the protocol, or holding a slot).
    pub unavailable: bool,
    pub opted_out: bool,
    /// Selected by `--node-selector`; a node outside holds a slot of this pool.
    pub in_pool: bool,
    pub last_completed: Option<String>,
    /// An administrator is giving the node up (`reboot-abandon`): by whom and why. The
    /// controller clears its protocol, releases its slot, then removes the request.
    pub abandon: Option<String>,
}

/// Where the budget figure comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum BudgetSource {
    /// `node_reboot_max_unavailable` from the controller's `/metrics`.
    Metrics,
    /// `--max-unavailable` given to the plugin, resolved against the pool.
    Flag,
    /// A RebootPool's `maxUnavailable` (and `maxUnavailablePerZone`), resolved against the
    /// nodes its `nodeSelector` selects.
    Spec,
    Unknown,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Budget {
    /// Nodes that may be unavailable at once; `null` when unknown.
    pub max_unavailable: Option<usize>,
    pub source: BudgetSource,
    /// Where it comes from, in words (the URL, the flag, or what to give).
    pub source_detail: String,
    /// Slots granted in the ledger.
    pub slots_in_use: usize,
    /// Nodes unavailable as the budget counts them.
    pub unavailable: usize,
    /// A RebootPool's `maxUnavailablePerZone` resolved against each zone's nodes; `null`
    /// without one.
    pub per_zone: Option<BTreeMap<String, usize>>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Pool {
    /// The RebootPool's name; `null` for the flags' pool (the nodes no RebootPool selects).
    pub name: Option<String>,
    /// `--node-selector`, or the RebootPool's `nodeSelector`; empty: every node.
    pub selector: String,
    pub nodes: usize,
    /// The ledger Lease, `namespace/name`, and whether it exists.
    pub ledger: String,
    pub ledger_found: bool,
    pub paused: bool,
    /// The rollout under way as the controller records it on the ledger Lease (while a
    /// rollout rule is on: `--canary`, `--waves`, `--max-failures`); `null` between rollouts.
    pub rollout: Option<Rollout>,
}

/// The rollout under way: the controller's record (`node-reboot-operator/rollout`), and it
/// in words.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Rollout {
    #[serde(flatten)]
    pub record: RolloutRecord,
    /// One line for people: `3 completed, canary passed, wave of 4, 1 failure (n2: its drain
    /// timed out)`.
    pub summary: String,
}

/// The whole status: the `-o json` document.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Status {
    pub kind: &'static str,
    pub api_version: &'static str,
    /// When it was read (RFC 3339).
    pub time: String,
    pub pool: Pool,
    pub budget: Budget,
    pub estimate: Estimate,
    pub nodes: Vec<NodeStatus>,
    /// What could not be read, and so may be missing.
    pub warnings: Vec<String>,
    /// Each RebootPool, as this document shows the flags' pool (in the flags' pool's
    /// document only, and empty with `--pool`).
    pub pools: Vec<Status>,
}

pub const KIND: &str = "RebootStatus";
pub const API_VERSION: &str = "kubectl-reboot.node-reboot-operator/v1";

/// What `status` shows at `now`: the flags' pool's document with each RebootPool's in
/// `pools`, or the one RebootPool's.
pub fn every_pool(pools: &crate::input::Pools, keys: &AnnotationKeys, now: Timestamp) -> Status {
    match pools {
        crate::input::Pools::All { flags, pools } => Status {
            pools: pools.iter().map(|p| status(p, keys, now)).collect(),
            ..status(flags, keys, now)
        },
        crate::input::Pools::One(pool) => status(pool, keys, now),
    }
}

/// The status of the pool at `now`.
pub fn status(input: &PoolInput, keys: &AnnotationKeys, now: Timestamp) -> Status {
    let pool_size = input.nodes.iter().filter(|n| n.in_pool).count();
    let sick = not_ready_after_reboot(input, keys);
    let late = overdue(input, keys);
    let budget = budget(input, keys, pool_size);
    let budget_full = budget
        .max_unavailable
        .is_some_and(|max| budget.unavailable >= max);
    let paused_by = match &input.name {
        Some(pool) => format!("spec.paused on the RebootPool {pool}"),
        None => format!(
            "reboot-paused=true on the ledger Lease {}",
            input.ledger.name
        ),
    };
    let context = Context {
        keys,
        ledger: &input.ledger,
        paused_by: &paused_by,
        sick: sick.first().map(String::as_str),
        late: late.first().map(String::as_str),
        budget_full,
        canary: canary_of(input),
        now,
    };
    let mut nodes: Vec<NodeStatus> = input.nodes.iter().map(|n| context.node(n)).collect();
    nodes.sort_by(|a, b| a.name.cmp(&b.name));
    let remaining = nodes
        .iter()
        .filter(|n| {
            n.state.queued()
                && !matches!(n.reason, Some(WaitReason::OptedOut | WaitReason::Overlap))
        })
        .count();
    let failing = match (late.is_empty(), sick.is_empty()) {
        (false, _) => Some(WaitReason::RebootOverdue),
        (true, false) => Some(WaitReason::NotReadyAfterReboot),
        (true, true) => None,
    };
    let held_by = held_by(&input.ledger, &nodes, failing)
        // The windows and blackouts given say when new reboots may start: the estimate waits
        // for it.
        .filter(|h| match h {
            WaitReason::OutsideWindow => input.windows.open.is_empty(),
            WaitReason::Blackout => input.windows.blackouts.is_empty(),
            _ => true,
        });
    let estimate = estimate::estimate(
        remaining,
        budget.max_unavailable,
        &estimate::durations(&input.nodes, keys),
        input.budget.metrics.as_ref(),
        held_by,
        (now, &input.windows),
    );
    let mut warnings = input.warnings.clone();
    if !input.ledger.found {
        warnings.push(match &input.name {
            Some(pool) => format!(
                "the ledger Lease {} does not exist: the controller creates it when it first \
                 runs the RebootPool {pool}; is it running, with this --namespace?",
                input.ledger.name
            ),
            None => format!(
                "the ledger Lease {} does not exist: is the controller running, with this \
                 --namespace and --ledger-name?",
                input.ledger.name
            ),
        });
    }
    if let Some(damage) = &input.ledger.damage {
        warnings.push(format!("the ledger is damaged: {damage}"));
    }
    if let Some(why) = &input.ledger.rollout_unreadable {
        warnings.push(format!(
            "{why}; meanwhile the controller reads the pool as stalled while a rollout rule is on"
        ));
    }
    if let (Some(url), Some(error)) = (&input.budget.metrics_url, &input.budget.metrics_error) {
        warnings.push(format!(
            "cannot read the controller's metrics at {url}: {error}"
        ));
    }
    Status {
        kind: KIND,
        api_version: API_VERSION,
        time: now.to_string(),
        pool: Pool {
            name: input.name.clone(),
            selector: input.selector.clone(),
            nodes: pool_size,
            ledger: input.ledger.name.clone(),
            ledger_found: input.ledger.found,
            paused: input.ledger.paused,
            rollout: input.ledger.rollout.as_ref().map(|record| Rollout {
                summary: rollout_summary(record, canary_of(input)),
                record: record.clone(),
            }),
        },
        budget,
        estimate,
        nodes,
        warnings,
        pools: Vec::new(),
    }
}

/// A RebootPool's `canary`, from its spec; `None` for the flags' pool (the controller's
/// `--canary` is not the plugin's to know).
fn canary_of(input: &PoolInput) -> Option<u32> {
    let canary = input.spec.as_ref()?.canary?;
    u32::try_from(canary).ok()
}

/// The rollout's record in words; `canary`: the pool's `--canary`, when known (a RebootPool's
/// spec says it, the controller's flags are not the plugin's to know).
pub fn rollout_summary(record: &RolloutRecord, canary: Option<u32>) -> String {
    let mut parts = vec![format!("{} completed", record.completed)];
    let under_way = (!record.canaries.is_empty()).then(|| {
        let names: Vec<&str> = record.canaries.iter().map(String::as_str).collect();
        format!("{} under way", names.join(", "))
    });
    let done = record.canaries_completed;
    match (canary.filter(|c| *c > 0), under_way) {
        (Some(c), _) if done >= c => parts.push("canary passed".to_owned()),
        (Some(c), None) => parts.push(format!("canary {done} of {c}")),
        (Some(c), Some(nodes)) => parts.push(format!("canary {done} of {c} ({nodes})")),
        (None, Some(nodes)) => parts.push(format!("canary {nodes}")),
        (None, None) if done > 0 => parts.push(format!("{done} canary node(s) passed")),
        (None, None) => {}
    }
    if let Some(size) = record.wave {
        parts.push(match record.wave_completed {
            0 => format!("wave of {size}"),
            done => format!("wave of {size} ({done} completed)"),
        });
    }
    let failed: Vec<String> = record
        .counted_failures()
        .map(|(node, f)| format!("{node}: {}", f.kind.describe()))
        .collect();
    if !failed.is_empty() {
        parts.push(format!(
            "{} failure{} ({})",
            failed.len(),
            if failed.len() == 1 { "" } else { "s" },
            failed.join("; ")
        ));
    }
    let forgiven = record.failures.values().filter(|f| f.forgiven).count();
    if forgiven > 0 {
        parts.push(format!("{forgiven} forgiven"));
    }
    parts.join(", ")
}

/// What holds the whole pool, if anything: the pause, a failing node (past its reboot
/// timeout, or NotReady after its reboot), or a pool-wide reason every waiting node gives
/// while nothing is under way.
fn held_by(
    ledger: &LedgerInput,
    nodes: &[NodeStatus],
    failing: Option<WaitReason>,
) -> Option<WaitReason> {
    if ledger.paused {
        return Some(WaitReason::Paused);
    }
    if failing.is_some() {
        return failing;
    }
    let under_way = nodes.iter().any(|n| {
        matches!(
            n.state,
            State::Granted | State::Draining | State::Rebooting | State::Soaking
        )
    });
    let mut reasons = nodes
        .iter()
        .filter(|n| matches!(n.state, State::Waiting | State::Requested))
        .map(|n| n.reason);
    let first = reasons.next()??;
    (!under_way && first.holds_pool() && reasons.all(|r| r == Some(first))).then_some(first)
}

/// The soaking nodes that are not Ready: they hold the pool.
fn not_ready_after_reboot(input: &PoolInput, keys: &AnnotationKeys) -> Vec<String> {
    input
        .nodes
        .iter()
        .filter(|n| {
            let state = n.facts.protocol(keys);
            state.soaking(
                input
                    .ledger
                    .slots
                    .get(&n.facts.name)
                    .map(|s| s.grant.as_str()),
            ) && n.facts.readiness != Readiness::Ready
        })
        .map(|n| n.facts.name.clone())
        .collect()
}

/// The nodes told to reboot whose latest word from the controller is that they did not
/// complete within `--reboot-timeout` (the controller holds the pool for them).
fn overdue(input: &PoolInput, keys: &AnnotationKeys) -> Vec<String> {
    input
        .nodes
        .iter()
        .filter(|n| n.facts.protocol(keys).reboot_under_way() && reboots_overdue(n).is_some())
        .map(|n| n.facts.name.clone())
        .collect()
}

/// The controller's `RebootOverdue` about this node, unless it told it to reboot again since.
fn reboots_overdue(node: &NodeInput) -> Option<&NodeEvent> {
    latest(
        &node.events,
        &[
            Controller::RebootApproved.as_str(),
            Controller::RebootOverdue.as_str(),
        ],
        None,
    )
    .filter(|e| e.reason == Controller::RebootOverdue.as_str())
}

fn budget(input: &PoolInput, keys: &AnnotationKeys, pool_size: usize) -> Budget {
    let unavailable = input
        .nodes
        .iter()
        .filter(|n| {
            let state = n.facts.protocol(keys);
            let holds = input.ledger.slots.contains_key(&n.facts.name);
            common::unavailable(&n.facts, &state, holds)
        })
        .count();
    let from_metrics = input
        .budget
        .metrics
        .as_ref()
        .and_then(|m| m.max_unavailable);
    let mut per_zone = None;
    let (max_unavailable, source, source_detail) = match (from_metrics, input.budget.flag) {
        _ if input.spec.is_some() => {
            let spec = input.spec.as_ref().map(crate::pool_spec::budget);
            let (max, detail, zones) = spec_budget(input, spec.as_ref(), pool_size);
            per_zone = zones;
            (max, BudgetSource::Spec, detail)
        }
        (Some(max), _) => (
            Some(max),
            BudgetSource::Metrics,
            format!(
                "the controller's metrics at {}",
                input.budget.metrics_url.as_deref().unwrap_or_default()
            ),
        ),
        (None, Some(flag)) => (
            Some(flag.resolve(pool_size)),
            BudgetSource::Flag,
            format!("--max-unavailable {flag} given here, for a pool of {pool_size}"),
        ),
        (None, None) => (
            None,
            BudgetSource::Unknown,
            "unknown: give --metrics-url (the controller's /metrics) or --max-unavailable"
                .to_owned(),
        ),
    };
    Budget {
        max_unavailable,
        source,
        source_detail,
        slots_in_use: input.ledger.slots.len(),
        unavailable,
        per_zone,
    }
}

/// A RebootPool's budget from its spec: `maxUnavailable` against the pool, and
/// `maxUnavailablePerZone` against each zone's nodes (as `zoneLabel` names the zone); with
/// where it comes from in words. A value the spec cannot mean leaves the budget unknown.
fn spec_budget(
    input: &PoolInput,
    spec: Option<&crate::pool_spec::SpecBudget>,
    pool_size: usize,
) -> (Option<usize>, String, Option<BTreeMap<String, usize>>) {
    let Some(spec) = spec else {
        return (None, String::new(), None);
    };
    let pool = input.name.as_deref().unwrap_or_default();
    let max = match &spec.max_unavailable {
        Ok(max) => max,
        Err(why) => {
            return (
                None,
                format!("unknown: the RebootPool {pool}'s {why}"),
                None,
            );
        }
    };
    let mut detail =
        format!("the RebootPool {pool}'s maxUnavailable {max}, for a pool of {pool_size}");
    let zones = match &spec.per_zone {
        None => None,
        Some(Err(why)) => {
            detail.push_str(&format!("; its {why}"));
            None
        }
        Some(Ok(per_zone)) => {
            let mut sizes: BTreeMap<String, usize> = BTreeMap::new();
            for node in input.nodes.iter().filter(|n| n.in_pool) {
                if let Some(zone) = node.labels.get(&spec.zone_label) {
                    *sizes.entry(zone.clone()).or_default() += 1;
                }
            }
            detail.push_str(&format!(
                "; maxUnavailablePerZone {per_zone} of each {} zone",
                spec.zone_label
            ));
            Some(
                sizes
                    .into_iter()
                    .map(|(zone, size)| (zone, per_zone.resolve(size)))
                    .collect(),
            )
        }
    };
    (Some(max.resolve(pool_size)), detail, zones)
}

/// One node as its classification reads it: the node, its protocol state, and its slot.
struct Found<'n> {
    node: &'n NodeInput,
    state: &'n ProtocolState,
    /// The grant of the node's slot in the ledger, if it holds one.
    slot_grant: Option<&'n str>,
    granted_at: Option<Timestamp>,
}

/// What every node's classification needs besides the node.
struct Context<'a> {
    keys: &'a AnnotationKeys,
    ledger: &'a LedgerInput,
    /// What pauses the pool, in words.
    paused_by: &'a str,
    /// A soaking node that is not Ready: the pool holds for it.
    sick: Option<&'a str>,
    /// A node told to reboot that did not complete within `--reboot-timeout`: the pool holds.
    late: Option<&'a str>,
    budget_full: bool,
    /// The pool's `canary`, when known (a RebootPool's spec).
    canary: Option<u32>,
    now: Timestamp,
}

/// The controller's latest Event with one of `reasons`, not older than `after`. Only the
/// controller's Events are read: the agents may write Events in the same namespace, and an
/// Event names its reporting component itself.
fn latest<'e>(
    events: &'e [NodeEvent],
    reasons: &[&str],
    after: Option<Timestamp>,
) -> Option<&'e NodeEvent> {
    let floor = after.map(|t| t.as_second() - SKEW_SECONDS);
    events
        .iter()
        .filter(|e| e.component == CONTROLLER && reasons.contains(&e.reason.as_str()))
        .filter(|e| floor.is_none_or(|f| e.time.as_second() >= f))
        .max_by_key(|e| e.time)
}

fn event_ref(e: &NodeEvent) -> EventRef {
    EventRef {
        reason: e.reason.clone(),
        message: e.message.clone(),
        time: e.time.to_string(),
    }
}

impl Context<'_> {
    fn node(&self, node: &NodeInput) -> NodeStatus {
        let facts = &node.facts;
        let state = facts.protocol(self.keys);
        let slot = self.ledger.slots.get(&facts.name);
        let granted_at = slot.and_then(|s| s.granted_at.parse::<Timestamp>().ok());
        // The opt-out label as found, and how it reads: any value but `false` opts out.
        let opt_out = self.keys.opt_out(Some(&node.labels));
        let opted_out = opt_out.describe(&self.keys.disabled);
        let mut status = NodeStatus {
            name: facts.name.clone(),
            state: State::Idle,
            reason: None,
            step: None,
            detail: String::new(),
            since: None,
            seconds: None,
            event: None,
            pods_left: None,
            ready: match facts.readiness {
                Readiness::Ready => "True",
                Readiness::NotReady => "False",
                Readiness::Unknown => "Unknown",
                Readiness::Missing => "Missing",
            },
            cordoned: facts.unschedulable,
            holds_slot: slot.is_some(),
            granted_at: slot.map(|s| s.granted_at.clone()),
            unavailable: common::unavailable(facts, &state, slot.is_some()),
            opted_out: opted_out.is_some(),
            in_pool: node.in_pool,
            last_completed: state.last_completed.clone(),
            abandon: None,
        };
        let found = Found {
            node,
            state: &state,
            slot_grant: slot.map(|s| s.grant.as_str()),
            granted_at,
        };
        let since = match &state.phase {
            Phase::RebootNow | Phase::InProgress { .. } | Phase::Done { .. } => {
                Self::rebooting(&found, &mut status)
            }
            Phase::Idle if state.grant.is_some() && state.request == Request::Needed => {
                self.draining(&found, &mut status)
            }
            Phase::Idle if state.soaking(found.slot_grant) => Self::soaking(&found, &mut status),
            Phase::Idle if state.grant.is_some() || slot.is_some() => {
                self.granted_or_releasing(&found, &mut status)
            }
            Phase::Idle => self.without_slot(&found, opted_out.as_deref(), &mut status),
        };
        self.granted_by_another_pool(&state, &mut status);
        Self::abandon_pending(&state, &mut status);
        if let Some(since) = since {
            status.since = Some(since.to_string());
            status.seconds = Some((self.now.as_second() - since.as_second()).max(0));
        }
        status
    }

    /// Told to reboot, rebooting, or back in a new boot: the step, and since when (the
    /// go-ahead's Event, else the grant).
    fn rebooting(found: &Found<'_>, status: &mut NodeStatus) -> Option<Timestamp> {
        let (step, detail) = match found.state.phase {
            Phase::RebootNow => (
                Step::RebootNow,
                "told to reboot (reboot-now); the agent has not started yet",
            ),
            Phase::InProgress { .. } => (Step::InProgress, "rebooting (reboot-in-progress)"),
            _ => (
                Step::Proven,
                "rebooted (new boot id); waiting for the kubelet to report it Ready",
            ),
        };
        status.state = State::Rebooting;
        status.step = Some(step);
        status.detail = detail.to_owned();
        let approved = latest(
            &found.node.events,
            &[Controller::RebootApproved.as_str()],
            found.granted_at,
        );
        status.event = approved.map(event_ref);
        if let Some(late) = reboots_overdue(found.node) {
            status.detail = format!(
                "{detail}; not completed within --reboot-timeout: no new reboot starts \
                 in the pool until it is back in a new boot and Ready"
            );
            status.event = Some(event_ref(late));
        }
        approved.map(|e| e.time).or(found.granted_at)
    }

    /// Cordoned under its grant: the pods left to evict, or a fence that holds it.
    fn draining(&self, found: &Found<'_>, status: &mut NodeStatus) -> Option<Timestamp> {
        let node = found.node;
        status.state = State::Draining;
        let draining = latest(
            &node.events,
            &[Controller::Draining.as_str()],
            found.granted_at,
        );
        status.event = draining.map(event_ref);
        status.detail = match &node.pods_left {
            None => "cordoned; evicting its pods".to_owned(),
            Some(pods) if pods.is_empty() => {
                "cordoned; no pod left to evict, about to be told to reboot".to_owned()
            }
            Some(pods) => format!(
                "cordoned; {} pod{} left: {}",
                pods.len(),
                if pods.len() == 1 { "" } else { "s" },
                pods.join(", ")
            ),
        };
        status.pods_left = node.pods_left.clone();
        self.held(node, found.granted_at, status);
        draining.map(|e| e.time).or(found.granted_at)
    }

    /// Completed and keeping its slot for `--min-ready-seconds`; NotReady holds the pool.
    fn soaking(found: &Found<'_>, status: &mut NodeStatus) -> Option<Timestamp> {
        status.state = State::Soaking;
        status.detail = if found.node.facts.readiness == Readiness::Ready {
            "rebooted and Ready; keeps its slot for --min-ready-seconds".to_owned()
        } else {
            let event = latest(
                &found.node.events,
                &[Controller::NotReadyAfterReboot.as_str()],
                None,
            );
            status.event = event.map(event_ref);
            "NotReady after its reboot: no new reboot starts in the pool until it is \
             Ready (or its soak is cleared)"
                .to_owned()
        };
        found
            .state
            .last_completed
            .as_deref()
            .and_then(|t| t.parse().ok())
    }

    /// A slot not yet claimed (about to be cordoned, or held by a fence), or one being given
    /// back after its request was withdrawn.
    fn granted_or_releasing(
        &self,
        found: &Found<'_>,
        status: &mut NodeStatus,
    ) -> Option<Timestamp> {
        if found.state.grant.is_none() && found.state.request == Request::Needed {
            status.state = State::Granted;
            status.detail = "slot granted; about to be cordoned".to_owned();
            self.held(found.node, found.granted_at, status);
        } else {
            status.state = State::Releasing;
            status.detail = "giving its slot back (request withdrawn)".to_owned();
        }
        found.granted_at
    }

    /// No slot: idle (opted out, or when it last rebooted), a value that is no request, or a
    /// request that waits.
    fn without_slot(
        &self,
        found: &Found<'_>,
        opted_out: Option<&str>,
        status: &mut NodeStatus,
    ) -> Option<Timestamp> {
        match &found.state.request {
            Request::Absent => {
                status.detail = match (&found.state.last_completed, opted_out) {
                    _ if !found.node.overlap.is_empty() => overlap(&found.node.overlap),
                    (_, Some(label)) => format!("opted out ({label})"),
                    (Some(at), None) => match at.parse::<Timestamp>() {
                        Ok(t) => format!(
                            "last reboot {} ago ({})",
                            estimate::human(self.now.as_second() - t.as_second()),
                            Timestamp::from_second(t.as_second()).unwrap_or(t)
                        ),
                        Err(_) => format!("last reboot completed {at}"),
                    },
                    (None, None) => String::new(),
                };
                None
            }
            Request::Invalid(value) => {
                status.state = State::Invalid;
                status.detail = format!(
                    "{}={value:?} is not a request (only \"true\" is); ignored",
                    self.keys.needed
                );
                None
            }
            Request::Needed => self.waiting(found.node, opted_out, status),
        }
    }

    /// Relabelled into this pool during its reboot: counted here, driven by the pool whose
    /// ledger granted it.
    fn granted_by_another_pool(&self, state: &ProtocolState, status: &mut NodeStatus) {
        if let Some(theirs) = state
            .grant
            .as_deref()
            .and_then(common::ledger::ledger_of_grant)
            .filter(|theirs| *theirs != self.ledger.name)
        {
            status.detail = format!(
                "{}; granted by the ledger {theirs}: that pool's controller finishes it",
                status.detail
            );
        }
    }

    /// An administrator gave the node up and the controller has not cleared it yet.
    fn abandon_pending(state: &ProtocolState, status: &mut NodeStatus) {
        if let Some(value) = &state.abandon {
            let who = common::abandon::Abandon::read(value).describe();
            let pending = format!(
                "abandon pending ({who}): the controller clears its protocol and releases its \
                 slot"
            );
            status.detail = if status.detail.is_empty() {
                pending
            } else {
                format!("{pending}; was: {}", status.detail)
            };
            status.abandon = Some(who);
        }
    }

    /// A granted node that a fence holds where it stands: the pause (known now), or the
    /// controller's latest word since the grant, when it says the grant is held.
    fn held(&self, node: &NodeInput, granted_at: Option<Timestamp>, status: &mut NodeStatus) {
        let reasons = [
            Controller::Paused.as_str(),
            Controller::OutsideWindow.as_str(),
            Controller::Blackout.as_str(),
            Controller::AlertsFiring.as_str(),
            Controller::PrometheusUnreachable.as_str(),
            Controller::BlockingPod.as_str(),
            // They end a hold: the node moved on since.
            Controller::Draining.as_str(),
            Controller::RebootApproved.as_str(),
        ];
        let last =
            latest(&node.events, &reasons, granted_at).filter(|e| e.message.starts_with(NOTE_HELD));
        let reason = if self.ledger.paused {
            WaitReason::Paused
        } else {
            match last.and_then(|e| WaitReason::of_event(&e.reason, &e.message)) {
                Some(WaitReason::Paused) | None => return,
                Some(reason) => reason,
            }
        };
        let event = last.filter(|e| WaitReason::of_event(&e.reason, &e.message) == Some(reason));
        status.reason = Some(reason);
        status.event = event.map(event_ref).or(status.event.take());
        status.detail = format!("{}; held: {}", status.detail, reason.as_str());
    }

    /// Whether a wait for a stage of the rollout is over, as the ledger's record says: no
    /// rollout under way, or the canary passed (its size known from a RebootPool's spec).
    fn stage_over(&self, reason: WaitReason) -> bool {
        let known = self.ledger.found && self.ledger.rollout_unreadable.is_none();
        match (reason, &self.ledger.rollout) {
            (WaitReason::AfterCanary | WaitReason::NextWave, None) => known,
            (WaitReason::AfterCanary, Some(record)) => self
                .canary
                .is_some_and(|canary| record.canaries_completed >= canary),
            _ => false,
        }
    }

    /// A request without a slot: why it waits, from what is known now (the label, as
    /// `opted_out` describes it, the pause, a sick node) and the controller's latest Event
    /// about it. Returns since when.
    fn waiting(
        &self,
        node: &NodeInput,
        opted_out: Option<&str>,
        status: &mut NodeStatus,
    ) -> Option<Timestamp> {
        let last = latest(
            &node.events,
            &[
                Controller::Requested.as_str(),
                Controller::ZoneBudgetFull.as_str(),
                Controller::ZoneLabelMissing.as_str(),
                Controller::OutsideWindow.as_str(),
                Controller::Blackout.as_str(),
                Controller::Paused.as_str(),
                Controller::AlertsFiring.as_str(),
                Controller::PrometheusUnreachable.as_str(),
                Controller::BlockingPod.as_str(),
                Controller::RebootDisabled.as_str(),
                Controller::DrainBlocked.as_str(),
                Controller::NoAgent.as_str(),
                Controller::DisruptionBudget.as_str(),
                Controller::NodeBeingRemoved.as_str(),
                Controller::SetAside.as_str(),
                Controller::UnexpectedDrainFailuresValue.as_str(),
                Controller::Stalled.as_str(),
                // Not reasons to wait, but they end a wait: an Event before them is old.
                Controller::Draining.as_str(),
                Controller::RebootApproved.as_str(),
                Controller::Rebooted.as_str(),
                Controller::Cancelled.as_str(),
            ],
            None,
        );
        let from_event = last.and_then(|e| Some((WaitReason::of_event(&e.reason, &e.message)?, e)));
        // What is known now outranks an Event that may be from an earlier wait.
        let (reason, event) = match from_event {
            _ if opted_out.is_some() => (Some(WaitReason::OptedOut), None),
            _ if !node.overlap.is_empty() => (Some(WaitReason::Overlap), None),
            _ if self.ledger.paused => (Some(WaitReason::Paused), None),
            // The pool holds for the late node whatever slot is free.
            _ if self.late.is_some() => (Some(WaitReason::RebootOverdue), None),
            Some((WaitReason::Paused | WaitReason::OptedOut, _)) | None => (None, None),
            // The controller says a wait once per Event reason, and the canary's, the wave's and
            // the budget's are all `Requested`: one the ledger's record says is over is old.
            Some((reason, _)) if self.stage_over(reason) => (None, None),
            Some((reason, event)) => (Some(reason), Some(event)),
        };
        let (reason, event) = match reason {
            Some(reason) => (Some(reason), event),
            None if self.late.is_some() => (Some(WaitReason::RebootOverdue), None),
            None if self.sick.is_some() => (Some(WaitReason::NotReadyAfterReboot), None),
            None if self.budget_full => (Some(WaitReason::BudgetFull), None),
            None => (None, None),
        };
        // The Event of the reason when it agrees (the pause's, the label's).
        let event = event.or_else(|| {
            last.filter(|e| {
                reason.is_some() && WaitReason::of_event(&e.reason, &e.message) == reason
            })
        });
        status.state = if reason.is_some() {
            State::Waiting
        } else {
            State::Requested
        };
        status.reason = reason;
        status.event = event.map(event_ref);
        let why = match (reason, event) {
            (Some(reason), Some(e)) => reason.detail(&e.message),
            (Some(WaitReason::OptedOut), None) => format!(
                "{}: labelled {}, never rebooted while the label is there",
                WaitReason::OptedOut.as_str(),
                opted_out.unwrap_or_default()
            ),
            (Some(WaitReason::Paused), None) => {
                format!("{}: {}", WaitReason::Paused.as_str(), self.paused_by)
            }
            (Some(WaitReason::Overlap), None) => {
                format!(
                    "{}: {}",
                    WaitReason::Overlap.as_str(),
                    overlap(&node.overlap)
                )
            }
            (Some(WaitReason::NotReadyAfterReboot), None) => format!(
                "{}: {} is NotReady within --min-ready-seconds of its reboot",
                WaitReason::NotReadyAfterReboot.as_str(),
                self.sick.unwrap_or_default()
            ),
            (Some(WaitReason::RebootOverdue), None) => format!(
                "{}: {} is not back in a new boot and Ready within --reboot-timeout",
                WaitReason::RebootOverdue.as_str(),
                self.late.unwrap_or_default()
            ),
            (Some(reason), None) => format!("{}: every slot is taken", reason.as_str()),
            (None, _) => "waiting for the controller's next decision".to_owned(),
        };
        status.detail = why;
        event.map(|e| e.time)
    }
}

/// Why no pool grants a node that several RebootPools select.
pub(crate) fn overlap(pools: &[String]) -> String {
    format!(
        "selected by the RebootPools {}: none of them reboots it until only one selects it",
        pools.join(" and ")
    )
}

#[cfg(test)]
mod tests;
