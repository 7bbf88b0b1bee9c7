//! The decision core: from the nodes (as the cache and our own writes show them), the slot
//! ledger and the budget, decide what to do next. Pure: no I/O, no clock; the shell feeds it
//! and executes what it returns, and tests drive it directly.
//!
//! Fencing (invariant 2 of docs/src/design.md): a slot is granted by a compare-and-swap on the
//! ledger, recording a grant id and the node's resourceVersion the grant was decided on. The node
//! then carries the grant id (`reboot-grant`): the claim tests that the node is still at that
//! version, and every later write of the grant (re-cordon, promote, complete, release) tests
//! the grant id. A grant leaves the ledger only once no node carries it and none ever can: the
//! node has moved past the version the grant was decided on. So whatever a replica's copies
//! say, a write that takes a node further into the protocol succeeds only while the ledger
//! holds that node's grant.
//!
//! A grant is bound to what it was granted under (invariant 9 of docs/src/design.md): its slot
//! counts against the zone it was granted in until it is released, and a node carrying another
//! ledger's grant (relabelled from another pool mid-reboot) is counted but never driven: the
//! controller of that ledger finishes it.

use crate::budget::{Admission, Holders, Usage};
use crate::ledger::{Grant, Ledger, LedgerChange, Owner, Slot};
use crate::pool_index::PoolCounts;
use crate::rollout::{RolloutRules, Stage, Stall};
use common::rollout::FailureKind;
use common::{Phase, Request, ledger::version_is_newer};
use std::collections::{BTreeMap, BTreeSet};

// Re-exported: the view is the core's input, and callers name it beside the core's types.
pub use crate::node_view::{DrainState, NodeView};

/// Why a slot is given back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReleaseReason {
    /// The reboot of this grant was completed.
    Completed,
    /// The administrator removed `reboot-needed` (or `reboot-now` before the agent took it).
    Cancelled,
    /// The drain did not finish in time; the request stays and is retried later.
    DrainFailed,
    /// The grant could not be claimed (the node changed first); the request waits its turn.
    Unclaimed,
    /// The node was deleted.
    NodeDeleted,
    /// The maintenance window closed before the node was told to reboot, and
    /// `--finish-after-window=false`: it waits for the next window, uncordoned.
    WindowClosed,
    /// An administrator gave the node up (`reboot-abandon`), and its protocol is cleared.
    Abandoned,
    /// An administrator removed `reboot-last-grant` from a completed node during its soak
    /// (a node NotReady after its reboot that should not hold the pool any longer).
    SoakCleared,
}

/// Why no new slot is granted in the pool now. Reboots under way go on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hold {
    /// Outside every `--reboot-window`.
    OutsideWindow,
    /// An administrator paused the pool (`reboot-paused=true` on the ledger Lease).
    Paused,
    /// A health gate is closed: alerts are firing, Prometheus cannot tell, or a blocking pod
    /// runs somewhere in the cluster.
    Unhealthy,
    /// A blocking pod runs on the node itself (`--blocking-pod-selector`): holds that node only.
    BlockingPod,
}

/// A pre-flight check that keeps a requested node from being granted (and so cordoned) now:
/// its reboot would stall once cordoned. Another eligible node goes instead, and this one is
/// granted once the check passes. Advice, not a fence: a grant decided on an older reading
/// goes on (its drain waits as any drain does).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Preflight {
    /// No agent pod is running and Ready on the node: nothing would take `reboot-now`.
    NoAgent,
    /// A PodDisruptionBudget that allows no disruption covers a pod the drain would evict:
    /// the drain could not finish.
    DisruptionBudget,
    /// An autoscaler is removing the node (`autoscaler::REMOVAL_TAINTS`): a reboot would race
    /// its removal.
    BeingRemoved,
    /// A check cannot tell yet (its watch has not listed, or a budget's pods are being read).
    Checking,
}

/// What stops a granted node from moving further (invariant 9 of docs/src/design.md), as read at
/// one instant. The round reads it at its start, and the shell again just before its writes: a
/// reading that changed meanwhile (a pause, a window that closed, an alert that fired) holds
/// the writes the round decided on the older one. A grant written by a replica that decided
/// before the change is held the same way when it is claimed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fence {
    /// `reboot-paused` on the ledger Lease, as last seen.
    pub paused: bool,
    /// A maintenance window is open (always, without windows).
    pub window_open: bool,
    /// A pool-wide health gate is closed, or cannot tell yet.
    pub gates_closed: bool,
}

impl Fence {
    /// Why no new grant is made, if so. A pause outranks a closed window (it is the one an
    /// administrator must lift by hand); both outrank the gates.
    pub fn hold(&self) -> Option<Hold> {
        if self.paused {
            Some(Hold::Paused)
        } else if !self.window_open {
            Some(Hold::OutsideWindow)
        } else if self.gates_closed {
            Some(Hold::Unhealthy)
        } else {
            None
        }
    }

    /// Why `action` must not be made now, if so. Only the steps that take a granted node
    /// further are fenced: the claim (cordon), a re-cordon, the drain's start and `reboot-now`.
    /// Completing, giving back and re-reading always go on, and so does a reboot already told
    /// to go. A claim needs the window open; once claimed, `--finish-after-window` decides.
    pub fn stops(
        &self,
        action: &NodeAction,
        blocked: bool,
        finish_after_window: bool,
    ) -> Option<Hold> {
        if !action.is_fenced() {
            return None;
        }
        let claim = matches!(action, NodeAction::Claim { .. });
        // Once claimed, a closed window holds only with `--finish-after-window=false`.
        let window_open = self.window_open || (!claim && finish_after_window);
        Fence {
            window_open,
            ..*self
        }
        .hold()
        .or(blocked.then_some(Hold::BlockingPod))
    }

    /// Splits `actions` into those that may be made now and the nodes held back, with why.
    pub fn hold_back(
        &self,
        actions: Vec<NodeAction>,
        blocked: &BTreeSet<String>,
        finish_after_window: bool,
    ) -> (Vec<NodeAction>, Vec<(String, Hold)>) {
        let mut held: Vec<(String, Hold)> = Vec::new();
        let kept = actions
            .into_iter()
            .filter(|action| {
                let node = action.node();
                let Some(hold) = self.stops(action, blocked.contains(node), finish_after_window)
                else {
                    return true;
                };
                if !held.iter().any(|(n, _)| n == node) {
                    held.push((node.to_owned(), hold));
                }
                false
            })
            .collect();
        (kept, held)
    }
}

/// A write to one node (or a read, for `Refetch`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeAction {
    /// Put the ledger's grant on the node and cordon it; with `promote` (drain off) also
    /// swap the request for `reboot-now`, all in one write.
    Claim {
        node: String,
        grant: String,
        node_version: String,
        promote: bool,
    },
    /// The node holds its grant but was uncordoned by someone: cordon it again.
    Recordon { node: String, grant: String },
    /// Evict the pods of a claimed node.
    StartDrain { node: String, grant: String },
    /// Drained (or nothing to drain): `reboot-needed` becomes `reboot-now`.
    Promote { node: String, grant: String },
    /// The kubelet reports the proven boot: uncordon what we cordoned, drop the grant.
    Complete { node: String, grant: String },
    /// Give a node back without a reboot: drop its grant, uncordon what we cordoned.
    Release { node: String, reason: ReleaseReason },
    /// The node no longer waits for a slot of this pool (its request is no longer one, it is
    /// opted out, or it left the pool): remove the waiting taint the operator put on it.
    Untaint(String),
    /// Our copy of the node is older than the ledger's grant, or a slot holder is missing
    /// from the cache: read it from the API server before deciding about it.
    Refetch(String),
    /// `reboot-needed` has a value other than `true`.
    WarnInvalidRequest { node: String, value: String },
    /// The node waits for its slot: put the `PreferNoSchedule` taint on it, if one is asked
    /// for and it does not have it.
    Taint(String),
    /// An administrator gives the node up: clear its protocol, uncordon what we cordoned.
    /// Its slot is released once the node no longer carries the grant.
    Abandon { node: String },
    /// `--give-up-after` passed since the node was told to reboot, and it has not completed:
    /// write the request to give it up (`reboot-abandon`), which `Abandon` then carries out.
    GiveUp { node: String },
    /// The given-up node holds no slot of ours and nothing of the protocol any more: remove
    /// `reboot-abandon`.
    ForgetAbandon { node: String },
}

impl NodeAction {
    /// Whether it takes a granted node further (the claim's cordon, a re-cordon, the drain's
    /// start, `reboot-now`): the steps a fence holds. Completing, giving back and re-reading
    /// always go on, and so does a reboot already told to go.
    pub fn is_fenced(&self) -> bool {
        matches!(
            self,
            Self::Claim { .. }
                | Self::Recordon { .. }
                | Self::StartDrain { .. }
                | Self::Promote { .. }
        )
    }

    pub fn node(&self) -> &str {
        match self {
            Self::Claim { node, .. }
            | Self::Recordon { node, .. }
            | Self::StartDrain { node, .. }
            | Self::Promote { node, .. }
            | Self::Complete { node, .. }
            | Self::Release { node, .. }
            | Self::Refetch(node)
            | Self::Taint(node)
            | Self::Untaint(node)
            | Self::WarnInvalidRequest { node, .. }
            | Self::Abandon { node }
            | Self::GiveUp { node }
            | Self::ForgetAbandon { node } => node,
        }
    }
}

/// A value an administrator typed that is not one the protocol expects, as the round read it:
/// each is said in a Warning.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Unexpected {
    /// The `reboot-disabled` of a requested node: read as opted out.
    OptOut(String),
    /// A `reboot-abandon` that reads as no: not a give-up.
    Abandon(String),
    /// A `reboot-drain-failures` that is not a count: read as set aside (`--drain-attempts`).
    DrainFailures(String),
}

/// What one round decided.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Decision {
    pub ledger: LedgerChange,
    /// Why each released slot is released, for Events and metrics.
    pub release_reasons: Vec<(String, ReleaseReason)>,
    pub node_actions: Vec<NodeAction>,
    /// Requested nodes of the pool that got no slot this round, oldest first.
    pub waiting: Vec<String>,
    /// Of those, the ones the pool had room for but not their zone.
    pub zone_full: BTreeSet<String>,
    /// Of those, the ones the budgets had room for but not `--concurrency`.
    pub concurrency_full: BTreeSet<String>,
    /// Of those, the ones without a zone label while zone budgets are on: not granted until
    /// they have one.
    pub zone_unknown: BTreeSet<String>,
    /// Of those, the ones a blocking pod on the node holds (`--blocking-pod-selector`).
    pub blocked: BTreeSet<String>,
    /// Of those, the ones a pre-flight check holds, with which.
    pub preflight: BTreeMap<String, Preflight>,
    /// Requested nodes of the pool that are opted out (`reboot-disabled`, any value but
    /// `false`).
    pub opted_out: Vec<String>,
    /// Requested nodes of the pool set aside after failed drains (`--drain-attempts`): not
    /// granted until an administrator removes their `reboot-drain-failures`.
    pub set_aside: Vec<String>,
    /// Why the pool is stalled, if it is: more nodes set aside than `--max-blocked-nodes`, a
    /// failed canary, more failures than `--max-failures`. Nothing new is granted until an
    /// administrator acts; reboots under way go on.
    pub stalled: Option<Stall>,
    /// Failures of the rollout first seen this round (`--canary`, `--waves`,
    /// `--max-failures`), recorded with the ledger's change.
    pub rollout_failures: Vec<(String, FailureKind)>,
    /// The stage of the rollout that limits its nodes in the protocol now (`--canary`,
    /// `--waves`), if any.
    pub stage: Option<Stage>,
    /// Waiting nodes the budgets had room for but not the stage.
    pub stage_full: BTreeSet<String>,
    /// A reboot started now would not end before the window closes (`--reboot-estimate`):
    /// nothing new is granted until the next window.
    pub too_late_in_window: Option<WindowFit>,
    /// A request of the pool stands that is not set aside, granted or not (one waiting out
    /// its retry after a failed drain too): the rollout is not over.
    pub requests_standing: bool,
    /// The rollout's record as the round started from it, with the failures it saw, before
    /// its releases and grants ([`Decision::settle_rollout`]). `None`: no record is kept.
    pub rollout_base: Option<common::rollout::RolloutRecord>,
    /// Values typed by hand on nodes of the pool that are not what the protocol expects, and
    /// how they were read.
    pub unexpected: Vec<(String, Unexpected)>,
    /// Nodes that went NotReady during their soak (`--min-ready-seconds`): they keep their
    /// slot, and no new slot is granted while there is one.
    pub not_ready_after_reboot: Vec<String>,
    /// Nodes told to reboot that were not completed (new boot reported by the kubelet, and
    /// Ready) within `--reboot-timeout`: they keep their slot, and no new slot is granted while
    /// there is one. Reboots already under way go on.
    pub overdue: Vec<String>,
    /// Granted nodes whose next step (cordon, drain start, `reboot-now`) a fence holds back,
    /// with why: they keep their slot and stay where they are.
    pub held: Vec<(String, Hold)>,
    /// Nodes carrying a grant that is not this ledger's: another pool's (the node was
    /// relabelled into this pool mid-reboot), or one of an earlier version that this ledger
    /// does not hold. Counted as unavailable, never driven nor adopted here.
    pub foreign: Vec<String>,
    /// Nodes whose protocol annotations are in a format this build does not know (a newer
    /// operator wrote them): counted as unavailable, never driven, granted nor released.
    pub unknown_format: Vec<String>,
    /// The ledger is in a format this build does not know: nothing is decided at all, so
    /// every grant is held and nothing is released or driven (a ledger that cannot be read is
    /// not an empty one).
    pub ledger_unknown_format: bool,
}

impl Decision {
    fn release(&mut self, node: &str, reason: ReleaseReason) {
        self.ledger.release.push(node.to_owned());
        self.release_reasons.push((node.to_owned(), reason));
    }

    fn act(&mut self, action: NodeAction) {
        self.node_actions.push(action);
    }
}

/// The inputs of one round.
#[derive(Debug, Clone, Copy)]
pub struct Round<'a> {
    /// The nodes a round must see in full, in any order: every slot holder the cache has,
    /// and every node in the protocol (`pool_index::in_protocol`). Other nodes may be here
    /// too; those that are not are in `others`.
    pub nodes: &'a [NodeView],
    /// The rest of the pool, counted: nodes without a slot and outside the protocol, which a
    /// round only counts (per zone, and whether unavailable by themselves).
    pub others: &'a PoolCounts,
    pub ledger: &'a Ledger,
    /// Slot holders that a fresh read found deleted.
    pub deleted: &'a BTreeSet<String>,
    /// `--max-unavailable` resolved against the size of the pool.
    pub budget: usize,
    /// `--max-unavailable-per-zone`, resolved against each zone's size in the pool.
    pub zone_budget: Option<common::MaxUnavailable>,
    /// `--concurrency` resolved against the size of the pool: at most this many nodes hold a
    /// slot of the ledger (granted, cordoned, rebooting, or completed and soaking), whatever
    /// else is unavailable. `None`: no limit but the budget's.
    pub concurrency: Option<usize>,
    pub drain_enabled: bool,
    pub now: u64,
    /// The pause, the window and the gates: no new grant while they hold, and no granted
    /// node moves further (see [`Fence::stops`]).
    pub fence: Fence,
    /// Nodes that a blocking pod runs on: none of them gets a new grant or moves further.
    pub blocked: &'a BTreeSet<String>,
    /// Requested nodes that a pre-flight check holds: not granted while it does; the slot goes
    /// to the next eligible node. A node granted already goes on.
    pub preflight: &'a BTreeMap<String, Preflight>,
    /// Outside the windows, a node that was granted but not yet told to reboot goes on
    /// (`true`) or is given back until the next window (`false`). With `true`, one that a
    /// pause, a gate or a blocking pod holds is given back all the same.
    pub finish_after_window: bool,
    /// `--min-ready-seconds` in the unit of `now`: a completed node keeps its slot until it
    /// has been Ready this long.
    pub min_ready: u64,
    /// The wall clock now, in Unix milliseconds: compared with the recorded `approved_at`.
    pub clock: u64,
    /// `--reboot-timeout` in milliseconds.
    pub reboot_timeout: u64,
    /// `--give-up-after` in milliseconds (`u64::MAX`: never): a node told to reboot that has
    /// not completed within it is given up, as `kubectl reboot abandon` does.
    pub give_up_after: u64,
    /// `--drain-delay` and `--reboot-delay`.
    pub delays: Delays,
    /// `--drain-attempts` and `--max-blocked-nodes`.
    pub set_aside: SetAside,
    /// `--canary`, `--canary-soak`, `--waves` and `--max-failures`.
    pub rollout: RolloutRules,
    /// `--reboot-estimate`, while a window is open: a reboot that would not fit before it
    /// closes is not started. `None`: no fit is asked for, or nothing closes.
    pub window_fit: Option<WindowFit>,
}

/// The time a reboot needs and the time the open window has left (`--reboot-estimate`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowFit {
    /// When (as `clock`) the open windows close, or a blackout starts.
    pub closes_at: u64,
    /// A reboot's expected length, grant to completion, in milliseconds: the larger of
    /// `--reboot-estimate` and a high percentile of the pool's recent reboots.
    pub needs: u64,
}

impl WindowFit {
    /// Whether a reboot started at `clock` ends before the window closes.
    pub fn fits(&self, clock: u64) -> bool {
        clock.saturating_add(self.needs) <= self.closes_at
    }
}

/// Nodes whose drain keeps failing (`--drain-attempts`, `--max-blocked-nodes`): set aside
/// rather than retried for ever, and the pool stopped once too many are.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SetAside {
    /// `--drain-attempts`: a requested node whose drains failed this many times
    /// (`reboot-drain-failures`) is not granted again until an administrator removes that
    /// record. `None`: retried for ever.
    pub attempts: Option<u32>,
    /// `--max-blocked-nodes`: with more nodes of the pool set aside than this, no new slot is
    /// granted (the pool is stalled); reboots under way go on. `None`: no limit.
    pub most: Option<usize>,
    /// `--keep-set-aside-cordoned`: a node set aside keeps the operator's cordon (it stays out
    /// of scheduling, and so counts against the budgets) until an administrator tries it again,
    /// withdraws its request or uncordons it. `false`: it is uncordoned.
    pub keep_cordoned: bool,
    /// The pool is deleted: its cordon, which it kept on the nodes it set aside, goes from
    /// every node it still selects that holds no grant; the request and its record of failed
    /// drains stay, for the pool that selects the node next.
    pub retiring: bool,
}

impl SetAside {
    /// Whether a requested node is set aside: its failed drains reached the attempts, or their
    /// record cannot be read (edited by hand: that does less).
    pub fn sets_aside(&self, view: &NodeView) -> bool {
        common::drain_failures::DrainFailures::sets_aside(
            view.state.drain_failures.as_deref(),
            self.attempts,
        )
    }

    /// Whether the node keeps the operator's cordon though it holds no grant: set aside with
    /// its request standing, still cordoned, and `--keep-set-aside-cordoned`.
    pub fn keeps_cordon(&self, view: &NodeView) -> bool {
        self.keep_cordoned
            && view.state.request == Request::Needed
            && view.state.cordoned_by_operator
            && view.facts.unschedulable
            && self.sets_aside(view)
    }

    /// The count of failed drains at which a release keeps the operator's cordon: the attempts,
    /// with `--keep-set-aside-cordoned`.
    pub fn keep_cordon_at(&self) -> Option<u32> {
        self.attempts.filter(|_| self.keep_cordoned)
    }

    /// Whether this many nodes set aside stall the pool.
    pub fn stalls(&self, set_aside: usize) -> bool {
        self.most.is_some_and(|most| set_aside > most)
    }
}

/// Waits between the steps of a granted node, in milliseconds (the unit of `clock`). A node
/// that waits keeps its slot: it is cordoned, so it is unavailable anyway.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Delays {
    /// `--drain-delay`: from the cordon (`claimed_at`) to the drain's start.
    pub drain: u64,
    /// `--reboot-delay`: from the drain's end (`drained_at`; the cordon with the drain off) to
    /// `reboot-now`.
    pub reboot: u64,
}

impl<'a> Round<'a> {
    pub fn decide(&self) -> Decision {
        let mut decision = Decision::default();
        if self.ledger.unknown_format.is_some() {
            decision.ledger_unknown_format = true;
            return decision;
        }
        for view in self.nodes {
            if view.state.unknown_format().is_some() {
                decision.unknown_format.push(view.name().to_owned());
                continue;
            }
            match self.ledger.slots.get(view.name()) {
                Some(slot) => self.slot_holder(view, slot, &mut decision),
                None => self.without_slot(view, &mut decision),
            }
        }
        self.missing_slot_holders(&mut decision);
        self.read_unexpected(&mut decision);
        // Its own pool's: a node of this pool, one holding this ledger's slot, or one carrying
        // this ledger's grant (adopted this round by a ledger rebuilt or recreated without it,
        // after a relabel took it out of the pool).
        decision.overdue = self
            .nodes
            .iter()
            .filter(|v| v.in_pool || self.ours(v))
            .filter(|v| self.overdue(v))
            .map(|v| v.name().to_owned())
            .collect();
        self.grant_slots(&mut decision);
        decision.ledger.unpause = self.resumed_since_created();
        let actions = std::mem::take(&mut decision.node_actions);
        (decision.node_actions, decision.held) =
            self.fence
                .hold_back(actions, self.blocked, self.finish_after_window);
        decision
    }

    /// Whether a RebootPool's `spec.resumedAt` (reached by our clock) is no earlier than its
    /// ledger's creation while the ledger is paused: the pause it was recreated with (its
    /// soaks could not be known) is lifted by the administrator's resume, which needs no right
    /// on the Lease. Both are the API server's whole seconds: a resume in the second of the
    /// creation counts.
    fn resumed_since_created(&self) -> bool {
        let resumed = self.rollout.resumed_at.filter(|at| *at <= self.clock);
        self.ledger.paused
            && matches!((resumed, self.ledger.created_at), (Some(at), Some(created)) if at >= created)
    }

    /// The values typed by hand on the pool's nodes (and ours) that the round read otherwise
    /// than as they are written: an opt-out of a requested node, and a give-up that says no.
    fn read_unexpected(&self, decision: &mut Decision) {
        let ours = |v: &&NodeView| v.in_pool || self.ours(v);
        let readable = |v: &&NodeView| v.state.unknown_format().is_none();
        for view in self.nodes.iter().filter(ours).filter(readable) {
            let node = view.name();
            if let Some(value) = view.opt_out.unexpected()
                && view.state.request == Request::Needed
            {
                let value = Unexpected::OptOut(value.to_owned());
                decision.unexpected.push((node.to_owned(), value));
            }
            if let Some(value) = &view.state.abandon_declined {
                let value = Unexpected::Abandon(value.clone());
                decision.unexpected.push((node.to_owned(), value));
            }
            if let Some(value) = &view.state.drain_failures
                && self.set_aside.attempts.is_some()
                && view.state.request == Request::Needed
                && common::drain_failures::DrainFailures::read(value).is_none()
            {
                let value = Unexpected::DrainFailures(value.clone());
                decision.unexpected.push((node.to_owned(), value));
            }
        }
    }

    /// Whether the node holds this ledger's slot or carries its grant.
    fn ours(&self, view: &NodeView) -> bool {
        self.ledger.slots.contains_key(view.name())
            || view
                .state
                .grant
                .as_deref()
                .is_some_and(|g| self.ledger.owner_of(g) == Owner::Us)
    }

    fn slot_holder(&self, view: &NodeView, slot: &Slot, decision: &mut Decision) {
        let node = view.name().to_owned();
        let grant = slot.grant.as_str();
        match view.state.grant.as_deref() {
            // A cached copy may lag another replica's writes: re-keyed from it, two replicas
            // could flip the slot back and forth and stop the drain at every flip. Read the
            // node first.
            Some(carried)
                if carried != grant
                    && self.ledger.owner_of(carried) == Owner::Us
                    && !view.fresh =>
            {
                decision.act(NodeAction::Refetch(node));
            }
            // The node, as read now, is the truth about which of our grants it holds (another
            // controller re-keyed the slot, or the ledger was rebuilt): record that one instead,
            // in the zone the slot was granted in.
            Some(carried) if carried != grant && self.ledger.owner_of(carried) == Owner::Us => {
                decision.ledger.release.push(node.clone());
                let adopted = Grant::adopt(&node, carried, view.version());
                decision
                    .ledger
                    .grant
                    .push(adopted.in_zone(slot.zone.as_deref()));
            }
            Some(carried) if carried != grant => self.taken_by_another(view, slot, decision),
            // Given up: cleared first, the slot released once the node no longer carries it.
            _ if view.state.abandon.is_some() && view.state.anything_to_abandon() => {
                decision.act(NodeAction::Abandon { node })
            }
            _ if self.gives_up(view) => decision.act(NodeAction::GiveUp { node }),
            Some(_) => self.claimed(view, grant, decision),
            None if view.state.reboot_under_way() => self.claimed(view, grant, decision),
            None => self.unclaimed(view, slot, decision),
        }
    }

    /// The node carries its grant (or is rebooting without one, from before grants): move
    /// it on, or give it back.
    fn claimed(&self, view: &NodeView, grant: &str, decision: &mut Decision) {
        let node = view.name().to_owned();
        let grant = grant.to_owned();
        match &view.state.phase {
            Phase::RebootNow => {}
            phase @ (Phase::InProgress { .. } | Phase::Done { .. }) => {
                if view.facts.reboot_proven(phase) {
                    decision.act(NodeAction::Complete { node, grant });
                }
            }
            Phase::Idle => match (&view.state.request, view.drain) {
                (Request::Needed, DrainState::Failed) => decision.act(NodeAction::Release {
                    node,
                    reason: ReleaseReason::DrainFailed,
                }),
                (Request::Needed, _)
                    if self.window_stops_claims() || self.held_out_of_window(view) =>
                {
                    decision.act(NodeAction::Release {
                        node,
                        reason: ReleaseReason::WindowClosed,
                    })
                }
                (Request::Needed, drain) => self.advance(view, grant, drain, decision),
                _ => decision.act(NodeAction::Release {
                    node,
                    reason: ReleaseReason::Cancelled,
                }),
            },
        }
    }

    /// Whether a node told to reboot is not completed within `--reboot-timeout`: not back in
    /// a new boot, or back but not Ready (a bad kernel, most often). Such a node holds the
    /// pool (invariant 7 of docs/src/design.md), whatever slot it holds or is being adopted under;
    /// it keeps its slot and the rollout goes on by itself once it completes.
    fn overdue(&self, view: &NodeView) -> bool {
        if view.state.phase == Phase::Idle {
            return false;
        }
        !view.facts.reboot_proven(&view.state.phase)
            && view
                .approved_at
                .is_some_and(|at| self.clock >= at.saturating_add(self.reboot_timeout))
    }

    /// Whether `--give-up-after` has passed since the node was told to reboot, without the
    /// reboot proven. Never over a `reboot-abandon` already there, even one that says no: that
    /// value is the administrator's. Only a node that is NotReady: it goes on counting against
    /// the budget once its slot is released, while a Ready one whose agent has taken, or may
    /// still take, the go-ahead could go down after its slot went to another node.
    fn gives_up(&self, view: &NodeView) -> bool {
        view.facts.readiness != common::Readiness::Ready
            && view.state.abandon.is_none()
            && view.state.abandon_declined.is_none()
            && view.state.phase != Phase::Idle
            && !view.facts.reboot_proven(&view.state.phase)
            && view
                .approved_at
                .and_then(|at| at.checked_add(self.give_up_after))
                .is_some_and(|end| self.clock >= end)
    }

    /// A claimed node whose request stands: cordoned, drained, promoted.
    /// Each step waits for its delay (`--drain-delay`, `--reboot-delay`) to be over.
    fn advance(&self, view: &NodeView, grant: String, drain: DrainState, decision: &mut Decision) {
        let node = view.name().to_owned();
        let action = match (view.facts.unschedulable, self.drain_enabled, drain) {
            (false, _, _) => NodeAction::Recordon { node, grant },
            (true, false, _) | (true, true, DrainState::Drained) => {
                if self.delay_ends(view).is_some() {
                    return;
                }
                NodeAction::Promote { node, grant }
            }
            (true, true, DrainState::NotStarted) => {
                if self.delay_ends(view).is_some() {
                    return;
                }
                NodeAction::StartDrain { node, grant }
            }
            (true, true, DrainState::Running | DrainState::Failed) => return,
        };
        decision.act(action);
    }

    /// When (as `clock`) the delay before a cordoned node's next step ends, while it is not
    /// over: `--drain-delay` before its drain starts, `--reboot-delay` before `reboot-now`
    /// (from the drain's end, or from the cordon with the drain off).
    pub(crate) fn delay_ends(&self, view: &NodeView) -> Option<u64> {
        let (from, delay) = match (self.drain_enabled, view.drain) {
            (true, DrainState::NotStarted) => (view.claimed_at?, self.delays.drain),
            (true, DrainState::Drained) => (view.drained_at?, self.delays.reboot),
            (false, _) => (view.claimed_at?, self.delays.reboot),
            (true, DrainState::Running | DrainState::Failed) => return None,
        };
        let ends = from.saturating_add(delay);
        (delay > 0 && self.clock < ends).then_some(ends)
    }

    /// The ledger holds a grant the node does not carry: claim it if the node is still as it
    /// was when the grant was decided; release it once the node has moved past that version
    /// (then nobody can ever claim it); read the node again if our copy is older.
    fn unclaimed(&self, view: &NodeView, slot: &Slot, decision: &mut Decision) {
        let node = view.name().to_owned();
        let (grant, granted_at_version) = (slot.grant.as_str(), slot.node_version.as_deref());
        if granted_at_version.is_some() && view.version() == granted_at_version {
            // A fence (a pause, a closed window, a gate) holds the claim: the grant waits,
            // unclaimed (releasing it here would let a stale replica claim it later).
            if view.state.request == Request::Needed {
                decision.act(NodeAction::Claim {
                    node,
                    grant: grant.to_owned(),
                    node_version: granted_at_version.unwrap_or_default().to_owned(),
                    // With a reboot delay, `reboot-now` waits for it after the cordon.
                    promote: !self.drain_enabled && self.delays.reboot == 0,
                });
            }
            return;
        }
        if !version_is_newer(view.version(), granted_at_version) && granted_at_version.is_some() {
            decision.act(NodeAction::Refetch(node));
            return;
        }
        if view.state.cordoned_by_operator && !self.set_aside.keeps_cordon(view) {
            // Our cordon without a grant (left by a version before grants, or a node set aside
            // that no longer keeps it): undo it first.
            let reason = ReleaseReason::Cancelled;
            decision.act(NodeAction::Release { node, reason });
            return;
        }
        if view.state.abandon.is_some() {
            // Cleared (or never claimed): given up, soaking or not.
            decision.release(&node, ReleaseReason::Abandoned);
            return;
        }
        let completed = view.state.completed(grant);
        if completed && !self.soaked(view) {
            if view.facts.readiness != common::Readiness::Ready {
                decision.not_ready_after_reboot.push(node);
            }
            return;
        }
        // Completion writes `reboot-last-completed` and `reboot-last-grant` together, and only
        // an administrator removes the latter: that is how a soak is cleared by hand.
        let soak_cleared = view.state.last_grant.is_none()
            && view.state.last_completed.is_some()
            && view.state.request == Request::Absent
            && self.min_ready > 0;
        let reason = if completed {
            ReleaseReason::Completed
        } else if soak_cleared {
            ReleaseReason::SoakCleared
        } else if view.state.request != Request::Needed {
            // The administrator's cancel, even when the drain it stopped has ended first.
            ReleaseReason::Cancelled
        } else if view.drain == DrainState::Failed {
            ReleaseReason::DrainFailed
        } else {
            ReleaseReason::Unclaimed
        };
        decision.release(&node, reason);
    }

    /// Our slot's node carries a grant that is not ours (another pool's controller claimed it
    /// after a relabel; ours was never claimed): the slot is dropped from our ledger, with no
    /// write to the node, once our grant can no longer be claimed.
    fn taken_by_another(&self, view: &NodeView, slot: &Slot, decision: &mut Decision) {
        let node = view.name().to_owned();
        decision.foreign.push(node.clone());
        let decided_on = slot.node_version.as_deref();
        if decided_on.is_none() || version_is_newer(view.version(), decided_on) {
            decision.release(&node, ReleaseReason::Unclaimed);
        } else {
            decision.act(NodeAction::Refetch(node));
        }
    }

    /// A node without a slot in our ledger.
    fn without_slot(&self, view: &NodeView, decision: &mut Decision) {
        let node = view.name().to_owned();
        if let Some(carried) = &view.state.grant {
            match self.ledger.owner_of(carried) {
                // Our copy may be older than a release another replica made once the node no
                // longer carried the grant (it was deleted and created again): adopted from
                // that copy, the slot would hold a node that holds nothing and put the ledger
                // over the budget. Read it first; meanwhile it counts as unavailable anyway.
                Owner::Us if !view.fresh => decision.act(NodeAction::Refetch(node)),
                // Our grant the ledger lacks (the ledger was lost or edited, or our copy of
                // the node is behind): record it, whatever the budget and wherever the node's
                // labels put it now, so it counts and is finished.
                Owner::Us => {
                    decision
                        .ledger
                        .grant
                        .push(Grant::adopt(&node, carried, view.version()))
                }
                // Another ledger's (or, from an earlier version, unknown to ours): its own
                // controller finishes it; here it only counts as unavailable.
                Owner::Another | Owner::Unnamed if view.in_pool => decision.foreign.push(node),
                Owner::Another | Owner::Unnamed => {}
            }
            return;
        }
        if view.in_pool && view.state.abandon.is_some() {
            // Given up: whatever it has is cleared, then the request to give it up removed.
            decision.act(if view.state.anything_to_abandon() {
                NodeAction::Abandon { node }
            } else {
                NodeAction::ForgetAbandon { node }
            });
            return;
        }
        if view.in_pool {
            self.outside_the_protocol(view, decision);
        } else if self.set_aside.retiring
            && view.shared
            && view.state.cordoned_by_operator
            && view.state.grant.is_none()
        {
            decision.act(NodeAction::Release {
                node,
                reason: ReleaseReason::Cancelled,
            });
        } else if self.tainted_by_us(view) {
            // It left the pool while it waited: it waits for nothing of ours any more.
            decision.act(NodeAction::Untaint(node));
        }
    }

    /// The node carries the waiting taint this ledger's controller put on it (its record names
    /// this ledger): once it is out of the pool, that taint is ours alone to remove. Another
    /// pool's may be the node's now, and it puts its own there.
    fn tainted_by_us(&self, view: &NodeView) -> bool {
        view.state
            .tainted
            .as_deref()
            .and_then(|record| common::marks::recorded_taint(record).1)
            .is_some_and(|ledger| ledger == self.ledger.id)
    }

    fn outside_the_protocol(&self, view: &NodeView, decision: &mut Decision) {
        let node = view.name().to_owned();
        if view.state.reboot_under_way() {
            // A reboot under way without a grant (from before grants, or a hand edit).
            decision
                .ledger
                .grant
                .push(Grant::new(&node, view.version()));
            return;
        }
        match &view.state.request {
            Request::Invalid(value) => {
                decision.act(NodeAction::WarnInvalidRequest {
                    node: node.clone(),
                    value: value.clone(),
                });
                // Not a request: the node waits for nothing.
                if view.state.tainted.is_some() {
                    decision.act(NodeAction::Untaint(node));
                }
            }
            // Set aside with the operator's cordon it does not keep (the setting is off, or an
            // administrator uncordoned it and the marker stayed): the cordon goes, the request
            // and its count stay.
            Request::Needed
                if self.set_aside.sets_aside(view)
                    && view.state.cordoned_by_operator
                    && !self.set_aside.keeps_cordon(view) =>
            {
                decision.act(NodeAction::Release {
                    node,
                    reason: ReleaseReason::Cancelled,
                })
            }
            // Opted out, or set aside after failed drains: it is not granted, so it waits for
            // nothing either (until an administrator tries it again).
            Request::Needed
                if (view.opt_out.opts_out() || self.set_aside.sets_aside(view))
                    && view.state.tainted.is_some() =>
            {
                decision.act(NodeAction::Untaint(node))
            }
            // Ours to undo: a cordon, labels, a taint or the count of failed drains left on a
            // node whose request is gone.
            Request::Absent
                if view.state.cordoned_by_operator
                    || view.state.labelled.is_some()
                    || view.state.tainted.is_some()
                    || view.state.protected.is_some()
                    || view.state.drain_failures.is_some() =>
            {
                decision.act(NodeAction::Release {
                    node,
                    reason: ReleaseReason::Cancelled,
                })
            }
            _ => {}
        }
    }

    /// Slot holders the cache does not have: released once a fresh read found them deleted
    /// (a node created again gets a new version, so the grant cannot be claimed), read again
    /// otherwise (our cache may just be behind).
    fn missing_slot_holders(&self, decision: &mut Decision) {
        let present: BTreeSet<&str> = self.nodes.iter().map(NodeView::name).collect();
        for name in self.ledger.slots.keys() {
            if present.contains(name.as_str()) {
                continue;
            }
            if self.deleted.contains(name) {
                decision.release(name, ReleaseReason::NodeDeleted);
            } else {
                decision.act(NodeAction::Refetch(name.clone()));
            }
        }
    }

    /// Grants slots to waiting requests of the pool, oldest first, while the number of OTHER
    /// unavailable nodes stays below the budget: a node that is already unavailable does not
    /// count against its own grant. Slot holders outside the pool count too.
    fn grant_slots(&self, decision: &mut Decision) {
        let slots = decision.ledger.holders_after(&self.ledger.slots);
        decision.opted_out = self
            .nodes
            .iter()
            .filter(|v| v.opt_out.opts_out() && v.in_pool && v.state.request == Request::Needed)
            .map(|v| v.name().to_owned())
            .collect();
        decision.set_aside = self
            .nodes
            .iter()
            .filter(|v| self.is_requested(v) && self.set_aside.sets_aside(v))
            .map(|v| v.name().to_owned())
            .collect();
        let record = self.rollout_record(decision);
        let candidates = self.candidates(&slots);
        decision.stalled = self.stall(decision, record.as_ref(), &slots, &candidates);
        // A failing node stops the rollout, free slots or not: a bad kernel must not spread.
        let failing = !decision.not_ready_after_reboot.is_empty() || !decision.overdue.is_empty();
        decision.too_late_in_window = self.window_fit.filter(|fit| !fit.fits(self.clock));
        let late = decision.too_late_in_window.is_some();
        if self.fence.hold().is_some() || failing || decision.stalled.is_some() || late {
            decision.waiting = candidates.iter().map(|v| v.name().to_owned()).collect();
            decision.settle_rollout(self.rollout, self.ledger);
            return;
        }
        let room = record.as_ref().and_then(|r| self.rollout.room(r));
        decision.stage = room.map(|(stage, _)| stage);
        let mut usage = Usage::count(
            self.nodes,
            self.others,
            &slots,
            (self.budget, self.zone_budget),
        );
        // The operator's own reboots, for `--concurrency`: every slot the ledger keeps.
        let mut in_protocol = slots.len();
        for view in usage.spread(candidates) {
            if self.blocked.contains(view.name()) {
                decision.blocked.insert(view.name().to_owned());
                decision.waiting.push(view.name().to_owned());
                continue;
            }
            // Skipped before it takes room: the next candidate may use the slot instead.
            if let Some(check) = self.preflight.get(view.name()) {
                decision.preflight.insert(view.name().to_owned(), *check);
                decision.waiting.push(view.name().to_owned());
                continue;
            }
            match usage.admits(view) {
                Admission::Granted if self.concurrency.is_some_and(|most| in_protocol >= most) => {
                    decision.concurrency_full.insert(view.name().to_owned());
                    decision.waiting.push(view.name().to_owned());
                }
                Admission::Granted if room.is_some_and(|(_, most)| in_protocol >= most) => {
                    decision.stage_full.insert(view.name().to_owned());
                    decision.waiting.push(view.name().to_owned());
                }
                Admission::Granted => {
                    in_protocol += 1;
                    usage.take(view);
                    let grant = Grant::new(view.name(), view.version());
                    decision
                        .ledger
                        .grant
                        .push(grant.in_zone(view.zone.as_deref()));
                }
                Admission::NoZone => {
                    decision.zone_unknown.insert(view.name().to_owned());
                    decision.waiting.push(view.name().to_owned());
                }
                Admission::ZoneFull => {
                    decision.zone_full.insert(view.name().to_owned());
                    decision.waiting.push(view.name().to_owned());
                }
                Admission::PoolFull => decision.waiting.push(view.name().to_owned()),
            }
        }
        decision.settle_rollout(self.rollout, self.ledger);
    }

    /// Requested nodes of the pool without a slot, oldest request first.
    fn candidates(&self, slots: &Holders) -> Vec<&'a NodeView> {
        let mut candidates: Vec<&NodeView> = self
            .nodes
            .iter()
            .filter(|v| self.is_candidate(v, slots))
            .collect();
        candidates.sort_by_key(|v| (v.requested_at.unwrap_or(u64::MAX), v.name()));
        candidates
    }

    /// Whether a completed node has been Ready for its soak (`min_ready`, and `--canary-soak`
    /// for a canary; at once without one).
    fn soaked(&self, view: &NodeView) -> bool {
        let soak = self.soak(view);
        soak == 0
            || view
                .ready_since
                .is_some_and(|since| self.now >= since.saturating_add(soak))
    }

    /// The soak of a completed node: `min_ready`, at least `--canary-soak` for a canary.
    pub(crate) fn soak(&self, view: &NodeView) -> u64 {
        self.rollout
            .soak(self.ledger.rollout.as_ref(), view.name(), self.min_ready)
    }

    fn window_stops_claims(&self) -> bool {
        !self.fence.window_open && !self.finish_after_window
    }

    /// With the window closed, `--finish-after-window` lets a claimed node go on only while
    /// nothing else holds it: one that a pause, a closed gate or a blocking pod holds then is
    /// given back until the next window, so that it is not rebooted whenever the hold lifts,
    /// hours outside the window. A node told to reboot already goes on.
    fn held_out_of_window(&self, view: &NodeView) -> bool {
        !self.fence.window_open
            && (self.fence.paused || self.fence.gates_closed || self.blocked.contains(view.name()))
    }

    fn is_candidate(&self, view: &NodeView, slots: &Holders) -> bool {
        self.is_requested(view)
            && !self.set_aside.sets_aside(view)
            && view.state.grant.is_none()
            && !slots.contains_key(view.name())
            && !view.state.reboot_under_way()
            && view.state.unknown_format().is_none()
            && view.not_before.is_none_or(|t| t <= self.now)
    }
}

impl Round<'_> {
    /// A request of the pool that may be granted as far as the administrator's marks say: not
    /// opted out, not given up.
    fn is_requested(&self, view: &NodeView) -> bool {
        view.in_pool
            && !view.opt_out.opts_out()
            && view.state.request == Request::Needed
            && view.state.abandon.is_none()
    }
}

// When a round next needs to look: with access to the round's own predicates.
mod next_look;

// The rollout's rules, as a round applies them.
mod rollout;

#[cfg(test)]
pub(crate) mod tests;

#[cfg(test)]
mod format_tests;

#[cfg(test)]
mod fence_tests;

#[cfg(test)]
mod delay_tests;

#[cfg(test)]
mod abandon_tests;

#[cfg(test)]
mod opt_out_tests;

#[cfg(test)]
mod set_aside_tests;

#[cfg(test)]
mod rollout_tests;
