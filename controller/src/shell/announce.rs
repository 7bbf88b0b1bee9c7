//! What a round says: Events, logs and gauges about waiting, held, failing and foreign nodes,
//! and a dry run's plan; and the notifications (`--notify-url`) of the
//! steps a rollout's followers care about, from the same places.

use super::{Shell, read::Reading};
use crate::{
    cluster::events::Reason,
    gates::{GateReading, preflight::PreflightReading},
    notify::Kind,
};
use common::{
    NodeFacts, Request,
    events::{NOTE_HELD, NOTE_REQUESTED, NOTE_REQUESTED_BUT},
};
use controller_core::{
    decide::{Decision, Hold, NodeAction, NodeView, Unexpected},
    dry_run,
};
use k8s_openapi::{api::core::v1::Node, jiff::Timestamp};
use std::{
    collections::{BTreeSet, HashMap, HashSet},
    sync::Arc,
};

/// A gate's waiting note without the words that say a request waits for a slot.
fn waiting_words(note: &str) -> &str {
    note.strip_prefix(NOTE_REQUESTED)
        .unwrap_or(note)
        .trim_start_matches("waiting while ")
        .trim_start_matches("waiting: ")
}

impl Shell {
    /// The round's say step: what the decision on `read` means for the nodes and the rollout,
    /// in Events, logs, gauges and notifications, each said once.
    pub(super) fn say(
        &mut self,
        read: &Reading,
        decision: &Decision,
        by_name: &HashMap<&str, &Arc<Node>>,
    ) {
        let Reading {
            pool,
            scheduled,
            gates,
            preflight,
            ..
        } = read;
        self.announce_waiting(decision, by_name, *pool, *scheduled, gates, preflight);
        self.announce_preflight(decision, by_name, preflight);
        self.warn_not_ready_after_reboot(decision, by_name);
        self.warn_reboots_overdue(decision, by_name);
        self.announce_foreign(decision, by_name);
        self.announce_unknown_format(decision, by_name);
        self.announce_opted_out(decision, by_name);
        self.announce_set_aside(decision, by_name);
        self.announce_rollout_rules(decision, by_name);
        self.announce_unexpected(decision, by_name);
        self.announce_rollout(decision, *scheduled, gates);
    }

    /// An Event on each granted node a fence holds back, once per reason and episode: it keeps
    /// its slot and is not moved further. A gate whose check is under way is not worth one.
    pub(super) fn announce_held(
        &mut self,
        held: &[(String, Hold)],
        nodes: &HashMap<&str, &Arc<Node>>,
        gates: &GateReading,
    ) {
        if self.reports_gauges {
            self.metrics.held_grants.set(held.len() as i64);
        }
        let now = self.clock.now();
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
        let first: BTreeSet<String> = self.said.first_held(&named).into_iter().collect();
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
                let (reason, why) = self.schedule.closed_event(now, "");
                (reason, format!("{why}; {stays} until then"))
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
        Some((reason, format!("{NOTE_HELD}{why}")))
    }

    /// `--dry-run`: logs and reports (once each) the writes this round would make.
    pub(super) async fn say_dry_run(
        &mut self,
        decision: &Decision,
        nodes: &HashMap<&str, &Arc<Node>>,
        budget: usize,
    ) {
        for step in dry_run::would_do(decision, budget, self.drains.enabled()) {
            if !self.said.first_dry_run(&step.node, &step.what) {
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

    /// A node that went NotReady during its soak holds the pool: a Warning once per episode.
    pub(super) fn warn_not_ready_after_reboot(
        &mut self,
        decision: &Decision,
        nodes: &HashMap<&str, &Arc<Node>>,
    ) {
        let sick = &decision.not_ready_after_reboot;
        if self.reports_gauges {
            self.metrics.not_ready_after_reboot.set(sick.len() as i64);
        }
        for name in self.said.first_not_ready_after_reboot(sick) {
            tracing::warn!(node = %name, "NotReady after its reboot: no new reboots until it is Ready");
            self.notify_stopped(
                Some(&name),
                "not_ready_after_reboot",
                &format!("{name} went NotReady within --min-ready-seconds of its reboot"),
            );
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
    pub(super) fn warn_reboots_overdue(
        &mut self,
        decision: &Decision,
        nodes: &HashMap<&str, &Arc<Node>>,
    ) {
        let late = &decision.overdue;
        self.pool_facts.overdue = late.clone();
        if self.reports_gauges {
            self.metrics.reboots_overdue.set(late.len() as i64);
        }
        for name in self.said.first_reboots_overdue(late) {
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
            let words = format!(
                "{name} was not back within --reboot-timeout ({}): {what}",
                common::duration::duration_text(self.schedule.reboot_timeout)
            );
            self.notify_stopped(Some(&name), "reboot_timeout", &words);
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
                 up (its slot is released, the operator's cordon removed): kubectl reboot \
                 abandon {name} --reason <why> (by hand: kubectl annotate node {name} {}; or \
                 delete the Node)",
                common::duration::duration_text(self.schedule.reboot_timeout),
                give_up.join(" "),
            );
            self.events.publish(node, Reason::RebootOverdue, note);
        }
    }

    /// A node of the pool carrying a grant that is not this ledger's: said once per episode.
    /// It counts against this pool's budget; its own ledger's controller finishes it.
    pub(super) fn announce_foreign(
        &mut self,
        decision: &Decision,
        nodes: &HashMap<&str, &Arc<Node>>,
    ) {
        for name in self.said.first_foreign(&decision.foreign) {
            let Some(node) = nodes.get(name.as_str()) else {
                continue;
            };
            let grant = NodeFacts::from_node(node)
                .protocol(&self.keys)
                .grant
                .unwrap_or_default();
            let ours = &self.ledger.current().id;
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

    /// A request on an opted-out node: an Event once per request, and the metric.
    pub(super) fn announce_opted_out(
        &mut self,
        decision: &Decision,
        nodes: &HashMap<&str, &Arc<Node>>,
    ) {
        self.metrics
            .opted_out_requests
            .set(decision.opted_out.len() as i64);
        for name in &decision.opted_out {
            let reason = Reason::RebootDisabled;
            if let Some(node) = nodes
                .get(name.as_str())
                .filter(|_| self.said.first_wait(name, reason.as_str()))
            {
                let label = self
                    .keys
                    .opt_out(node.metadata.labels.as_ref())
                    .describe(&self.keys.disabled)
                    .unwrap_or_else(|| self.keys.disabled.clone());
                let note = format!(
                    "{NOTE_REQUESTED_BUT}the node is labelled {label}: it is never rebooted \
                     while the label is there"
                );
                tracing::info!(node = %name, "{note}");
                self.events.publish(node, reason, note);
            }
        }
    }

    /// A node set aside after failed drains: a Warning once per episode, naming what blocked
    /// its last drain and how to try it again, and the metric.
    pub(super) fn announce_set_aside(
        &mut self,
        decision: &Decision,
        nodes: &HashMap<&str, &Arc<Node>>,
    ) {
        self.metrics
            .set_aside_nodes
            .set(decision.set_aside.len() as i64);
        for name in &decision.set_aside {
            let reason = Reason::SetAside;
            let Some(node) = nodes
                .get(name.as_str())
                .filter(|_| self.said.first_wait(name, reason.as_str()))
            else {
                continue;
            };
            let key = &self.keys.drain_failures;
            let recorded = (node.metadata.annotations.as_ref())
                .and_then(|a| a.get(key))
                .cloned()
                .unwrap_or_default();
            let failures = common::drain_failures::DrainFailures::read(&recorded);
            let what = match &failures {
                Some(f) if f.blocking.is_empty() => format!("its drain failed {} time(s)", f.count),
                Some(f) => format!(
                    "its drain failed {} time(s), the last blocked by {}",
                    f.count, f.blocking
                ),
                None => format!("{key}={recorded:?} is not a count of failed drains"),
            };
            let cordon = if self.set_aside.keep_cordoned {
                "stays cordoned (--keep-set-aside-cordoned), counting against the budget"
            } else {
                "is not cordoned"
            };
            let note = format!(
                "{NOTE_REQUESTED_BUT}set aside: {what} (--drain-attempts {}). It keeps its \
                 request and {cordon}; the rest of the pool goes on. Once what blocks the \
                 drain is fixed, try it again: kubectl annotate node {name} {key}-",
                self.set_aside.attempts.unwrap_or_default()
            );
            tracing::warn!(node = %name, "{note}");
            self.events.publish(node, reason, note);
        }
    }

    /// A Warning on each node whose value typed by hand the round read otherwise than it is
    /// written (an opt-out that is not `true`, a give-up that says no), once per value and
    /// episode: how it was read, and what to write instead.
    pub(super) fn announce_unexpected(
        &mut self,
        decision: &Decision,
        nodes: &HashMap<&str, &Arc<Node>>,
    ) {
        for (name, value) in self.said.first_unexpected(&decision.unexpected) {
            let Some(node) = nodes.get(name.as_str()) else {
                continue;
            };
            let (reason, note) = match &value {
                Unexpected::OptOut(typed) => (
                    Reason::UnexpectedOptOutValue,
                    format!(
                        "{NOTE_REQUESTED_BUT}the node is labelled {key}={typed:?}, which is \
                         not `true` or `false`: read as opted out, so it is never rebooted while \
                         the label is there. Keep it out with {key}=true; let it reboot by \
                         removing the label (kubectl label node {name} {key}-) or with \
                         {key}=false",
                        key = self.keys.disabled
                    ),
                ),
                Unexpected::DrainFailures(typed) => (
                    Reason::UnexpectedDrainFailuresValue,
                    format!(
                        "{key}={typed:?} is not a count of failed drains: read as set aside \
                         (--drain-attempts), so the node is not granted while it is there. To \
                         try the node again: kubectl annotate node {name} {key}-",
                        key = self.keys.drain_failures
                    ),
                ),
                Unexpected::Abandon(typed) => (
                    Reason::UnexpectedAbandonValue,
                    format!(
                        "{key}={typed:?} reads as no: not a give-up; the node's reboot goes on \
                         as if it were not there. To give the node up: kubectl reboot abandon \
                         {name} --reason <why>; else remove it: kubectl annotate node {name} \
                         {key}-",
                        key = self.keys.abandon
                    ),
                ),
            };
            tracing::warn!(node = %name, "{note}");
            self.events.publish(node, reason, note);
        }
    }

    /// An Event on each waiting node, once per reason: why it waits. A check under way
    /// (the gates have not answered yet) is not worth one.
    pub(super) fn announce_waiting(
        &mut self,
        decision: &Decision,
        nodes: &HashMap<&str, &Arc<Node>>,
        pool: usize,
        scheduled: Option<Hold>,
        gates: &GateReading,
        preflight: &PreflightReading,
    ) {
        let now = self.clock.now();
        let pool_event = match (self.schedule.waiting_event(scheduled, now), &gates.pool) {
            (Some(event), _) => Some(event),
            (None, Some(hold)) => hold.event.clone(),
            (None, None) if decision.too_late_in_window.is_some() => decision
                .too_late_in_window
                .as_ref()
                .map(|fit| (Reason::Requested, self.too_late_note(fit))),
            (None, None) if decision.stalled.is_some() => decision
                .stalled
                .as_ref()
                .map(|stall| (Reason::Stalled, self.stalled_note(stall, decision))),
            (None, None) if !decision.overdue.is_empty() => Some((
                Reason::Requested,
                format!(
                    "{NOTE_REQUESTED}waiting: no new reboot while {} has not completed its \
                     reboot within --reboot-timeout",
                    decision.overdue.join(", ")
                ),
            )),
            (None, None) => Some((
                Reason::Requested,
                format!(
                    "{NOTE_REQUESTED}waiting for a slot (max-unavailable {} of {pool} nodes)",
                    self.budgets.at(pool, now)
                ),
            )),
        };
        for name in &decision.waiting {
            let event = self.waiting_event(name, decision, gates, preflight, &pool_event);
            let Some((reason, note)) = event else {
                continue;
            };
            // Said again when the wait changes within one reason: after the canary, the wave,
            // and the window's fit are all `Requested`.
            let key = match reason {
                Reason::Requested if decision.stage_full.contains(name) => match decision.stage {
                    Some(controller_core::rollout::Stage::Canary { .. }) => "Requested/canary",
                    _ => "Requested/wave",
                },
                Reason::Requested if decision.too_late_in_window.is_some() => "Requested/fit",
                _ => reason.as_str(),
            };
            if let Some(node) = nodes
                .get(name.as_str())
                .filter(|_| self.said.first_wait(name, key))
            {
                tracing::info!(node = %name, "{note}");
                self.events.publish(node, reason, note);
            }
        }
    }

    /// The Event of a waiting node: why it waits (its pods, its pre-flight checks, its zone,
    /// the concurrency, or else `pool_event`, what the whole pool waits for), if worth one.
    fn waiting_event(
        &self,
        name: &str,
        decision: &Decision,
        gates: &GateReading,
        preflight: &PreflightReading,
        pool_event: &Option<(Reason, String)>,
    ) -> Option<(Reason, String)> {
        if decision.blocked.contains(name) {
            Some(gates.blocked_event(name))
        } else if decision.preflight.contains_key(name) {
            preflight.event(name)
        } else if decision.zone_unknown.contains(name) {
            let label = self.overlay.indexing().zone_label();
            let note = format!(
                "{NOTE_REQUESTED}waiting: the node has no {label} label, and with \
                 --max-unavailable-per-zone a node is granted only in a known zone (so that \
                 it counts against its real zone's budget); label it with its zone: \
                 kubectl label node {name} {label}=<zone>"
            );
            Some((Reason::ZoneLabelMissing, note))
        } else if decision.concurrency_full.contains(name) {
            let note = format!(
                "{NOTE_REQUESTED}waiting for a slot (concurrency {}: that many of the \
                 operator's reboots under way or soaking)",
                self.concurrency.map(|c| c.to_string()).unwrap_or_default()
            );
            Some((Reason::Requested, note))
        } else if decision.stage_full.contains(name) {
            Some((Reason::Requested, self.stage_note(decision.stage)))
        } else if decision.zone_full.contains(name) {
            let note = format!(
                "{NOTE_REQUESTED}waiting for a slot in its zone \
                 (max-unavailable-per-zone {})",
                self.zone_budget.map(|b| b.to_string()).unwrap_or_default()
            );
            Some((Reason::ZoneBudgetFull, note))
        } else {
            pool_event.clone()
        }
    }

    /// The pre-flight checks' Events on the nodes granted this round: a Warning for each check
    /// without an answer that the node goes without, and one when the Eviction API would refuse
    /// to evict one of its pods (`--force-reboot`). A node that waits goes without nothing yet.
    pub(super) fn announce_preflight(
        &self,
        decision: &Decision,
        nodes: &HashMap<&str, &Arc<Node>>,
        preflight: &PreflightReading,
    ) {
        // A dry run grants nothing.
        if self.dry_run {
            return;
        }
        for grant in &decision.ledger.grant {
            let Some(node) = nodes.get(grant.node.as_str()) else {
                continue;
            };
            for (reason, note) in preflight.grant_events(&grant.node) {
                tracing::warn!(node = %grant.node, "{note}");
                self.events.publish(node, reason, note);
            }
        }
    }

    /// A rollout's start is said where its first grant is written; here, whether it stops
    /// (new grants held while nodes wait) or finishes (nothing waits, no slot held).
    pub(super) fn announce_rollout(
        &mut self,
        decision: &Decision,
        scheduled: Option<Hold>,
        gates: &GateReading,
    ) {
        let gate_note = || {
            gates.pool.as_ref().map(|hold| {
                hold.event.as_ref().map_or_else(
                    || "a health gate is closed".to_owned(),
                    |(_, note)| waiting_words(note).to_owned(),
                )
            })
        };
        let why = match scheduled {
            _ if decision.waiting.is_empty() => None,
            Some(Hold::Paused) => Some(("paused", "the pool is paused".to_owned())),
            _ if decision.stalled.is_some() => decision.stalled.as_ref().map(|stall| {
                (
                    stall.as_str(),
                    format!("the pool is stalled, {}", stall.describe()),
                )
            }),
            Some(Hold::OutsideWindow) => {
                let (reason, why) = self.schedule.closed_event(self.clock.now(), "");
                let kind = match reason {
                    Reason::Blackout => "blackout",
                    _ => "window_closed",
                };
                Some((kind, why))
            }
            _ => gate_note().map(|note| ("gate", note)),
        };
        self.pool_facts.held = why.as_ref().map(|(_, words)| words.clone());
        self.pool_facts.stalled = decision.stalled.as_ref().map(|s| s.describe());
        if let Some(reason) = self.rollout.held(why.as_ref().map(|(reason, _)| *reason))
            && let Some((_, words)) = &why
        {
            let waiting = decision.waiting.len();
            self.notify_stopped(None, reason, &format!("{words}; {waiting} node(s) wait"));
        }
        // A node still to be completed (its slot released, its uncordon not yet written) is
        // not done: its `node_back` comes first. A warning about a request that is not one
        // stays as long as the value does, and is no work left.
        let acting = decision
            .node_actions
            .iter()
            .any(|a| !matches!(a, NodeAction::WarnInvalidRequest { .. }));
        let nothing_left =
            decision.waiting.is_empty() && self.ledger.current().slots.is_empty() && !acting;
        if self.rollout.idle(nothing_left) {
            let message = format!(
                "Reboot rollout of {} finished: no node waits for a reboot or holds a slot",
                self.ledger.current().id
            );
            self.notify_rollout(Kind::RolloutFinished, None, message, serde_json::json!({}));
        }
    }

    /// The rollout is stopped: no new reboot starts until `words` clears.
    pub(super) fn notify_stopped(&self, node: Option<&str>, reason: &str, words: &str) {
        let message = format!(
            "Reboot rollout of {} stopped: {words}. No new reboot starts until this clears; \
             reboots under way finish",
            self.ledger.current().id
        );
        let details = serde_json::json!({ "reason": reason });
        self.notify_rollout(Kind::RolloutStopped, node, message, details);
    }

    pub(super) fn notify_rollout(
        &self,
        kind: Kind,
        node: Option<&str>,
        message: String,
        details: serde_json::Value,
    ) {
        let now = self.clock.now();
        self.notifier
            .rollout(kind, node, message, &self.ledger.current().id, now, details);
    }

    pub(super) fn notify_node(&self, kind: Kind, node: &str, details: serde_json::Value) {
        let now = self.clock.now();
        self.notifier
            .node(kind, node, &self.ledger.current().id, now, details);
    }

    pub(super) fn warn_invalid(&mut self, node: &Node, name: &str, value: &str) {
        if self.said.first_warning(name, value) {
            tracing::warn!(node = %name, %value, "ignoring reboot-needed: not `true`");
            let note = format!(
                "{}={value:?} is not a reboot request: only \"true\" is; fix the value or remove the annotation",
                self.keys.needed
            );
            self.events.publish(node, Reason::InvalidRequest, note);
        }
    }
}

/// What the announcer has already said, so that each thing is said once: per reason and
/// wait, per value, or per episode (from the round a node shows it until the round it no
/// longer does).
#[derive(Debug, Default)]
pub(super) struct Said {
    /// Per waiting node, the reason it was last told it waits.
    announced_waiting: HashMap<String, &'static str>,
    /// Per granted node held back by a fence, the reason it was told so in this episode.
    announced_held: HashMap<String, &'static str>,
    warned_invalid: HashMap<String, String>,
    not_ready_after_reboot: HashSet<String>,
    reboots_overdue: HashSet<String>,
    /// Nodes carrying a grant that is not this ledger's, as of the last round.
    foreign: HashSet<String>,
    /// Nodes in a format this build does not know, as of the last round.
    unknown_format: HashSet<String>,
    /// Values typed by hand read otherwise than written, per node, as of the last round.
    unexpected: HashSet<(String, Unexpected)>,
    /// `--dry-run`: what was said already, per node.
    said_dry_run: HashSet<(String, String)>,
}

/// Of the nodes in `now`, those not in `last`; `last` becomes `now`.
fn first_in_episode<T: Clone + Eq + std::hash::Hash>(last: &mut HashSet<T>, now: &[T]) -> Vec<T> {
    let fresh = now.iter().filter(|n| !last.contains(*n)).cloned().collect();
    *last = now.iter().cloned().collect();
    fresh
}

impl Said {
    /// Forgets what was said about the nodes that no longer wait for a reboot or no longer
    /// carry an invalid request: a round views only the nodes in the protocol, so one that
    /// left it since the last round is no longer among `views`.
    pub(super) fn forget(&mut self, views: &[NodeView]) {
        let with = |wanted: fn(&Request) -> bool| -> HashSet<&str> {
            views
                .iter()
                .filter(|v| wanted(&v.state.request))
                .map(NodeView::name)
                .collect()
        };
        let waiting = with(|r| *r == Request::Needed);
        let invalid = with(|r| matches!(r, Request::Invalid(_)));
        self.announced_waiting
            .retain(|n, _| waiting.contains(n.as_str()));
        self.warned_invalid
            .retain(|n, _| invalid.contains(n.as_str()));
    }

    /// Of the nodes NotReady after their reboot now, those that were not in the last round
    /// (a Warning once per episode).
    pub(super) fn first_not_ready_after_reboot(&mut self, now: &[String]) -> Vec<String> {
        first_in_episode(&mut self.not_ready_after_reboot, now)
    }

    /// Of the nodes past their reboot timeout now, those that were not in the last round.
    pub(super) fn first_reboots_overdue(&mut self, now: &[String]) -> Vec<String> {
        first_in_episode(&mut self.reboots_overdue, now)
    }

    /// Of the granted nodes held back now (with the reason of their Event), those not told so
    /// yet: once per reason and episode. A node no longer held is forgotten.
    pub(super) fn first_held(&mut self, held: &[(String, &'static str)]) -> Vec<String> {
        self.announced_held
            .retain(|n, _| held.iter().any(|(h, _)| h == n));
        held.iter()
            .filter(|(name, reason)| {
                self.announced_held.insert(name.clone(), reason) != Some(reason)
            })
            .map(|(name, _)| name.clone())
            .collect()
    }

    /// Of the nodes carrying a grant that is not ours now, those that were not in the last
    /// round (said once per episode).
    pub(super) fn first_foreign(&mut self, now: &[String]) -> Vec<String> {
        first_in_episode(&mut self.foreign, now)
    }

    /// Of the nodes in a format this build does not know now, those that were not in the last
    /// round (said once per episode).
    pub(super) fn first_unknown_format(&mut self, now: &[String]) -> Vec<String> {
        first_in_episode(&mut self.unknown_format, now)
    }

    /// Of the values typed by hand that a round read otherwise than written, those that were
    /// not there in the last round (a Warning once per value and episode).
    pub(super) fn first_unexpected(
        &mut self,
        now: &[(String, Unexpected)],
    ) -> Vec<(String, Unexpected)> {
        first_in_episode(&mut self.unexpected, now)
    }

    /// True the first time a node is seen waiting for `reason` (a slot, the window, the
    /// end of a pause), for its Event: once per reason and wait.
    pub(super) fn first_wait(&mut self, node: &str, reason: &'static str) -> bool {
        self.announced_waiting.insert(node.to_owned(), reason) != Some(reason)
    }

    /// True the first time `--dry-run` says `what` about `node`.
    pub(super) fn first_dry_run(&mut self, node: &str, what: &str) -> bool {
        self.said_dry_run.insert((node.to_owned(), what.to_owned()))
    }

    /// True the first time this invalid value is seen on this node.
    pub(super) fn first_warning(&mut self, node: &str, value: &str) -> bool {
        self.warned_invalid
            .insert(node.to_owned(), value.to_owned())
            .as_deref()
            != Some(value)
    }
}
