//! The round's node writes and reads, and what each result means for the next round.

use super::Shell;
use crate::cluster::events::Reason;
use common::{NodeFacts, Transition};
use controller_core::{
    decide::{Decision, NodeAction, ReleaseReason},
    effects,
};
use futures::{StreamExt, stream};
use k8s_openapi::{api::core::v1::Node, jiff::Timestamp};
use observability::ApiErrorKind;
use std::{collections::HashMap, ops::ControlFlow, sync::Arc};

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

/// Node writes of one round in flight at once: a round that grants k slots writes k nodes.
const WRITES_IN_FLIGHT: usize = 16;

impl Shell {
    /// The round's write step: the ledger's changes first (a compare-and-swap), then each
    /// node's, every step that takes a granted node further checked against the fence as it is
    /// now. True when something was written and another round should follow at once.
    pub(super) async fn write(
        &mut self,
        mut decision: Decision,
        by_name: &HashMap<&str, &Arc<Node>>,
    ) -> bool {
        if !self.leadership.is_leading() {
            return false;
        }
        self.confirm_releases(&mut decision, by_name).await;
        // What holds new grants is read again now: the round may have waited on the API.
        if self.fence_now().0.hold().is_some() {
            effects::drop_new_grants(&mut decision);
        }
        // The rollout's record counts what is released and granted now, not what was dropped.
        decision.settle_rollout(self.rollout_rules, self.ledger.current());
        let wrote_ledger = match self.write_slots(&decision, by_name).await {
            ControlFlow::Continue(wrote) => wrote,
            ControlFlow::Break(again) => return again,
        };
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
        if claims && !wrote_ledger && !self.ledger_is_current().await {
            return true;
        }
        // Each step that takes a granted node further is checked against the pause, the window
        // and the gates as they are now, not as the round began: this round (or the replica
        // that wrote the grant) may have decided on an older reading. A RebootPool's pause is
        // read from the API server then.
        let moves_further = decision.node_actions.iter().any(NodeAction::is_fenced);
        let paused_now = moves_further && self.pool_paused.now_fresh().await;
        let (mut fence, gates) = self.fence_now();
        fence.paused |= paused_now;
        let (actions, held) = effects::fence_actions(
            &mut decision,
            fence,
            &gates.blocked_nodes(),
            self.schedule.finish_after_window,
        );
        self.announce_held(&held, by_name, &gates);
        wrote_ledger | self.execute(actions, by_name).await
    }

    /// Executes a round's node actions; true when any changed something. The writes go out
    /// together (each is a compare-and-swap on its own node), so that a round that grants ten
    /// slots starts ten reboots at once rather than one after the other; one node's actions
    /// keep their order. What the writes did is then taken in, in the decision's order.
    pub(super) async fn execute(
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
        let t = Transition::new(&self.keys).with_marks(&self.marks);
        if let NodeAction::Release {
            reason: ReleaseReason::DrainFailed,
            ..
        } = &action
            && self.set_aside.attempts.is_some()
        {
            // Counted on the node, fenced by its grant: once per grant whichever replica
            // writes it, and kept across restarts. Only with --drain-attempts: without it
            // nothing reads the count, and turning it on later starts from none.
            let grant = facts.protocol(&self.keys).grant.unwrap_or_default();
            let blocking = self.drains.blocking(&grant);
            let patch = t.release_failed_drain(&facts, blocking, self.set_aside.keep_cordon_at());
            return Prepared::Write(action, patch);
        }
        if let Some(patch) = effects::node_patch(&action, &facts, &t, &self.clock.now().to_string())
        {
            return Prepared::Write(action, patch);
        }
        match &action {
            NodeAction::Refetch(_) => {
                let carried = facts.protocol(&self.keys).grant;
                let rekey = carried.is_some()
                    && carried.as_deref() != self.ledger.current().grant_of(&name);
                Prepared::Refetch(name, node.metadata.resource_version.clone(), rekey)
            }
            NodeAction::StartDrain { grant, .. } => {
                // The drain publishes `Draining` once it knows it has pods to evict.
                tracing::info!(node = %name, %grant, "draining");
                self.drains.start(&node, grant);
                Prepared::Done
            }
            NodeAction::WarnInvalidRequest { value, .. } => {
                self.warn_invalid(&node, &name, value);
                Prepared::Done
            }
            // A release with nothing to remove.
            _ => Prepared::Done,
        }
    }

    /// Makes the writes, up to [`WRITES_IN_FLIGHT`] at once, one node's in order; the results
    /// in the order of `writes`.
    async fn write_all(
        &self,
        writes: Vec<(NodeAction, json_patch::Patch)>,
    ) -> Vec<(NodeAction, Written)> {
        let groups = effects::by_node(writes, |(action, _)| action.node());
        let mut done: Vec<(usize, NodeAction, Written)> = stream::iter(groups)
            .map(|node_writes| async move {
                let mut done = Vec::with_capacity(node_writes.len());
                for (i, (action, patch)) in node_writes {
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

    fn after_write(&mut self, action: &NodeAction, node: &Node) {
        let name = node.metadata.name.as_deref().unwrap_or_default();
        self.announce_kept_labels(action, node);
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
                let details = serde_json::json!({ "grant": grant });
                self.notify_node(crate::notify::Kind::NodeRebooting, name, details);
            }
            NodeAction::Complete { .. } => self.completed(node, name),
            NodeAction::Claim { grant, .. } => {
                tracing::info!(node = %name, %grant, "cordoned");
                let now = self.wall_ms();
                self.sightings.claimed(grant, now);
                self.announce_delay(node);
            }
            NodeAction::Recordon { grant, .. } => {
                // Pods may have landed while it was uncordoned: its drain starts over.
                self.drains.restart(grant);
                tracing::info!(node = %name, "cordoned again");
            }
            NodeAction::Release { reason, .. } => {
                tracing::info!(node = %name, ?reason, "grant dropped; uncordoned if ours");
            }
            NodeAction::Taint(_) => {
                tracing::info!(node = %name, "tainted PreferNoSchedule while it waits");
            }
            NodeAction::Untaint(_) => {
                tracing::info!(node = %name, "waiting taint removed: the node waits for nothing here");
            }
            NodeAction::Abandon { .. } => self.abandoned(node, name),
            NodeAction::GiveUp { .. } => self.gave_up(node, name),
            NodeAction::ForgetAbandon { .. } => {
                tracing::info!(node = %name, "given up: slot released, reboot-abandon removed");
            }
            _ => {}
        }
    }

    /// After a claim or a completion, a Warning naming the labels of the marks' keys that the
    /// node already had and that were left as they are (somebody else's).
    fn announce_kept_labels(&self, action: &NodeAction, node: &Node) {
        let labels = node.metadata.labels.clone().unwrap_or_default();
        let (kept, flag, when) = match action {
            NodeAction::Claim { .. } => {
                let record = NodeFacts::from_node(node).protocol(&self.keys).labelled;
                let kept = self.marks.kept_at_grant(&labels, record.as_deref());
                let what = "not set for the reboot, and not removed after it";
                (kept, "--pre-reboot-node-labels", what)
            }
            NodeAction::Complete { .. } => (
                self.marks.kept_at_completion(&labels),
                "--post-reboot-node-labels",
                "not replaced after the reboot",
            ),
            _ => return,
        };
        if kept.is_empty() {
            return;
        }
        let note = format!(
            "already labelled {}, not by the operator: left as it is, {when} ({flag} sets \
             only a label the node does not have, and removes only what it set)",
            kept.join(", ")
        );
        tracing::warn!(node = %node.metadata.name.as_deref().unwrap_or_default(), "{note}");
        self.events.publish(node, Reason::LabelKept, note);
    }

    /// Right after the cordon, an Event saying how long the next step waits, if it does.
    fn announce_delay(&self, node: &Node) {
        let (delay, what, action) = if self.drains.enabled() {
            (
                self.schedule.drain_delay,
                "the drain starts",
                "DrainDelayed",
            )
        } else {
            (self.schedule.reboot_delay, "reboot-now", "RebootDelayed")
        };
        if delay.is_zero() {
            return;
        }
        let flag = if self.drains.enabled() {
            "--drain-delay"
        } else {
            "--reboot-delay"
        };
        let note = format!(
            "cordoned; {what} in {} ({flag})",
            common::duration::duration_text(delay)
        );
        tracing::info!(node = %node.metadata.name.as_deref().unwrap_or_default(), "{note}");
        self.events
            .publish_action(node, Reason::Draining, action, note);
    }

    /// A node given up by an administrator, its protocol cleared: who, why, and what is left.
    /// `--give-up-after` passed: the request to give the node up is written; the next round
    /// carries it out as an administrator's (the `RebootAbandoned` Event follows).
    fn gave_up(&mut self, node: &Node, name: &str) {
        let after = self
            .schedule
            .give_up_after
            .map(common::duration::duration_text)
            .unwrap_or_default();
        let note = format!(
            "not completed within --give-up-after {after} of being told to reboot: given up, as \
             kubectl reboot abandon does; its slot will be released and the rollout goes on. \
             Look at the machine: it may not have come back"
        );
        tracing::warn!(node = %name, "{note}");
        self.metrics.reboots_given_up.inc();
        self.events.publish(node, Reason::GaveUp, note);
        let message = format!("Node {name} given up: not completed within --give-up-after {after}");
        self.notify_rollout(
            crate::notify::Kind::NodeGivenUp,
            Some(name),
            message,
            serde_json::json!({ "giveUpAfter": after }),
        );
    }

    fn abandoned(&mut self, node: &Node, name: &str) {
        let facts = NodeFacts::from_node(node);
        let state = facts.protocol(&self.keys);
        let who = common::abandon::Abandon::read(state.abandon.as_deref().unwrap_or_default());
        let cordon = if facts.unschedulable {
            "it stays cordoned: the cordon is not the operator's (kubectl uncordon it when you \
             want)"
        } else {
            "it is schedulable (the operator's cordon, if any, removed)"
        };
        let ready = if facts.readiness == common::Readiness::Ready {
            ""
        } else {
            "; while NotReady it still counts as unavailable"
        };
        let note = format!(
            "reboot given up {}: the protocol's annotations are cleared and its slot is \
             released; {cordon}{ready}",
            who.describe()
        );
        tracing::warn!(node = %name, "{note}");
        self.drains.forget_retries(name);
        self.metrics.reboot_failed("abandoned");
        self.events.publish(node, Reason::RebootAbandoned, note);
    }

    fn completed(&mut self, node: &Node, name: &str) {
        self.drains.forget_retries(name);
        let since = self
            .ledger
            .current()
            .slots
            .get(name)
            .map(|s| s.granted_at.clone())
            .unwrap_or_default();
        let took = since.parse::<Timestamp>().ok().map(|granted| {
            self.clock
                .now()
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
        let details = serde_json::json!({
            "boot_id": boot_id,
            "seconds": took,
            "slot_held_since": since,
        });
        self.notify_node(crate::notify::Kind::NodeBack, name, details);
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
        match self.api.patch(name, patch).await {
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
    pub(super) async fn refetch(&mut self, name: &str) -> Option<String> {
        match self.api.get(name).await {
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

    /// A slot is released after the soak (`--min-ready-seconds`, or a canary's `canarySoak`)
    /// only on a fresh read of the node: a node that crashed
    /// stays Ready in the cache for the node monitor's grace period, and another replica's copy
    /// may lag. Not Ready (or not readable) now, or cordoned now where the copy the round
    /// decided on was not (the round would have granted its slot away while it stays
    /// unavailable): the release and the round's new grants wait for the next round, which
    /// sees the node as read here. A give-up that releases a slot (during a soak, so that the
    /// pool goes on past a node NotReady in it) must still be there on that read: an
    /// administrator may have taken it back.
    pub(super) async fn confirm_releases(
        &mut self,
        decision: &mut Decision,
        decided_on: &HashMap<&str, &Arc<Node>>,
    ) {
        // A node without a soak (no `--min-ready-seconds`, not a canary under `canarySoak`) is
        // released on the round's copy, as the completion the kubelet proved.
        let min_ready = u64::from(!self.schedule.min_ready.is_zero());
        let record = self.ledger.current().rollout.clone();
        let soaks = |name: &str| self.rollout_rules.soak(record.as_ref(), name, min_ready) > 0;
        let to_confirm: Vec<_> = effects::to_confirm(decision)
            .into_iter()
            .filter(|(name, _)| soaks(name))
            .collect();
        for (name, reason) in to_confirm {
            let settled = match self.api.get(&name).await {
                Ok(Some(node)) => {
                    let now = NodeFacts::from_node(&node);
                    let was_cordoned = decided_on.get(name.as_str()).is_some_and(|n| {
                        n.spec.as_ref().and_then(|s| s.unschedulable) == Some(true)
                    });
                    let given_up = now.protocol(&self.keys).abandon.is_some();
                    let decided = decided_on.get(name.as_str());
                    if decided.is_none_or(|d| d.metadata.resource_version != now.resource_version) {
                        effects::drop_new_grant_to(decision, &name);
                    }
                    self.overlay.record_read(node);
                    match reason {
                        ReleaseReason::Abandoned => given_up,
                        _ => {
                            now.readiness == common::Readiness::Ready
                                && (!now.unschedulable || was_cordoned)
                        }
                    }
                }
                Ok(None) => true,
                Err(error) => {
                    self.metrics.api_error("node", ApiErrorKind::of(&error));
                    self.failed = true;
                    false
                }
            };
            if !settled {
                tracing::info!(
                    node = %name,
                    ?reason,
                    "soaked but not Ready or newly cordoned, or no longer given up, on a fresh \
                     read: slot kept for now"
                );
                effects::keep_soaking(decision, &name);
            }
        }
    }
}
