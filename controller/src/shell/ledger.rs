//! The shell's copy of the slot ledger: taking in what was read or watched, writing a
//! round's changes with a compare-and-swap, and recreating the Lease when it was deleted.

use super::Shell;
use crate::{
    cluster::{
        events::{Events, Reason},
        leader::Leadership,
        ledger_store::{LedgerError, LedgerStore, ReadLedger},
    },
    metrics::Metrics,
};
use common::format::{CURRENT, UnknownFormat};
use controller_core::{
    decide::{Decision, ReleaseReason},
    ledger::{Ledger, new_grant_id},
};
use k8s_openapi::api::core::v1::Node;
use observability::ApiErrorKind;
use std::{collections::HashMap, ops::ControlFlow, sync::Arc};
use tokio::sync::watch;

/// A read or write of the ledger failed for a reason other than a stale read or a deletion
/// (counted and logged where it failed): the round stops and says so.
#[derive(Debug)]
pub(super) struct Failed;

/// The ledger as this replica last read, watched or wrote it, and what it knows of its
/// Lease: why the copy cannot be used, whether the Lease was deleted, and the warnings
/// already given about it. Its only writer is the shell's round.
#[allow(missing_debug_implementations)] // the ledger store holds an API client
pub(super) struct LedgerCopy {
    ledger: Ledger,
    /// Why the ledger as last read could not be used (it is rebuilt before any new grant).
    damage: Option<String>,
    /// The ledger Lease was deleted (the watch saw it, or a write found it gone): read it
    /// again, and recreate it from our last good copy if it is still gone.
    gone: bool,
    /// The damaged ledger version whose rebuild read every node fresh.
    reread_for: Option<String>,
    /// The watch has brought the Lease's deletion (and its last contents, taken into
    /// `ledger` when newer): what it is recreated from is the newest copy there was.
    deletion_seen: bool,
    /// The unexpected `reboot-paused` value last warned about.
    warned_pause: Option<String>,
    /// Why the rollout record could not be read, as last warned about.
    warned_rollout: Option<String>,
    /// The unknown ledger format last warned about.
    warned_format: Option<String>,
    store: LedgerStore,
    watch: watch::Receiver<ReadLedger>,
    metrics: Metrics,
    events: Events,
}

impl LedgerCopy {
    /// The copy of the ledger `read` at start.
    pub(super) fn new(
        read: ReadLedger,
        store: LedgerStore,
        watch: watch::Receiver<ReadLedger>,
        metrics: Metrics,
        events: Events,
    ) -> Self {
        let mut copy = Self {
            ledger: Ledger::default(),
            damage: None,
            gone: false,
            reread_for: None,
            deletion_seen: false,
            warned_pause: None,
            warned_rollout: None,
            warned_format: None,
            store,
            watch,
            metrics,
            events,
        };
        copy.take(read);
        copy
    }

    /// The ledger as last read or written.
    pub(super) fn current(&self) -> &Ledger {
        &self.ledger
    }

    /// The ledger Lease, for Events about the pool's rollout.
    pub(super) fn reference(&self) -> k8s_openapi::api::core::v1::ObjectReference {
        self.store.reference()
    }

    /// Whether the copy is damaged: it is rebuilt from the nodes before any new grant.
    pub(super) fn is_damaged(&self) -> bool {
        self.damage.is_some()
    }

    /// Whether the Lease is known to be deleted (to be read again, and recreated).
    pub(super) fn is_gone(&self) -> bool {
        self.gone
    }

    /// A write found the Lease gone.
    pub(super) fn mark_gone(&mut self) {
        self.gone = true;
    }

    /// Whether the damaged version held has not yet had every node read fresh for its rebuild.
    pub(super) fn wants_reread(&self) -> bool {
        self.damage.is_some() && self.reread_for != self.ledger.resource_version
    }

    /// Every node was read fresh for the rebuild of the damaged version held.
    pub(super) fn reread_done(&mut self) {
        self.reread_for.clone_from(&self.ledger.resource_version);
    }

    /// The pause as last seen: the watch may have seen it after this copy.
    pub(super) fn paused_now(&self) -> bool {
        let watched = self.watch.borrow();
        if self.ledger.is_older_than(&watched.ledger) {
            watched.ledger.paused
        } else {
            self.ledger.paused
        }
    }

    /// Uses a ledger as read; a damaged one is reported (once per version) and rebuilt.
    pub(super) fn take(&mut self, read: ReadLedger) {
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
                .publish_about(self.store.reference(), Reason::LedgerDamaged, note);
        }
        self.warn_unknown_format(read.ledger.unknown_format.as_deref());
        if read.unexpected_pause != self.warned_pause {
            if let Some(value) = &read.unexpected_pause {
                let note = self.store.unexpected_pause_note(value);
                tracing::warn!("{note}");
                self.events.publish_about(
                    self.store.reference(),
                    Reason::UnexpectedPauseValue,
                    note,
                );
            }
            self.warned_pause = read.unexpected_pause;
        }
        if read.ledger.rollout_unreadable != self.warned_rollout {
            if let Some(why) = &read.ledger.rollout_unreadable {
                let note = format!(
                    "{why}: the pool is read as stalled (no new reboot starts) while a rollout \
                     rule is on; do not edit it by hand"
                );
                tracing::warn!("{note}");
                self.events.publish_about(
                    self.store.reference(),
                    Reason::UnexpectedRolloutValue,
                    note,
                );
            }
            self.warned_rollout
                .clone_from(&read.ledger.rollout_unreadable);
        }
        self.damage = read.damage;
        self.ledger = read.ledger;
    }

    /// Said once per value found: the ledger cannot be read, so every grant is held.
    fn warn_unknown_format(&mut self, found: Option<&str>) {
        self.metrics
            .unknown_format("ledger", usize::from(found.is_some()));
        if found == self.warned_format.as_deref() {
            return;
        }
        self.warned_format = found.map(str::to_owned);
        let Some(found) = found else {
            tracing::info!("the slot ledger is in a format this controller knows again");
            return;
        };
        let unknown = UnknownFormat {
            found: found.to_owned(),
        };
        let note = format!(
            "the slot ledger ({}) is in {unknown}. Until then this controller grants, releases \
             and drives nothing (the ledger is not read as empty)",
            common::ledger::FORMAT_ANNOTATION
        );
        tracing::error!(found, known = CURRENT, "{note}");
        self.events
            .publish_about(self.store.reference(), Reason::UnknownFormat, note);
    }

    /// Takes a newer ledger from the watch (another controller's writes), or notes that the
    /// Lease was deleted after the copy we hold.
    pub(super) fn catch_up(&mut self) {
        let changed = self.watch.has_changed().unwrap_or(false);
        let watched = self.watch.borrow_and_update().clone();
        if watched.deleted {
            // A list that found no Lease carries no version: read again to know.
            let after_ours = watched.ledger.resource_version.is_none()
                || self.ledger.is_older_than(&watched.ledger);
            // Only a deletion the watch delivers: the value it keeps after a recreation is no
            // news, and must not let a later 404 recreate from our copy without the contents.
            let delivered = changed && after_ours;
            self.gone |= delivered;
            self.deletion_seen |= delivered;
            // The deletion brings the Lease's last contents: when they are newer than our copy
            // (another replica wrote meanwhile), they are what it is recreated from.
            // Damaged, they say nothing of the grants made since our copy: it is then recreated
            // as damaged, and rebuilt from a fresh read of every node before any new grant.
            if watched.ledger.resource_version.is_some()
                && self.ledger.is_older_than(&watched.ledger)
            {
                if watched.damage.is_some() {
                    self.take(watched);
                } else {
                    self.ledger = watched.ledger;
                }
            }
            return;
        }
        if watched.ledger.resource_version.is_some() && self.ledger.is_older_than(&watched.ledger) {
            self.take(watched);
        }
    }

    /// The ledger Lease was deleted: reads it again and, if it is still gone, recreates it
    /// from our last good copy, whose slots include the soaks under way (no node carries a
    /// grant for those, so a ledger rebuilt from the nodes would forget them). False when it
    /// could not be done yet; the next round tries again.
    ///
    /// It is recreated only once the watch has brought the deletion, with the Lease's last
    /// contents: a write that found it gone may come from a copy older than another
    /// replica's grants, and recreated from that copy, the Lease would forget them and grant
    /// their slots again.
    pub(super) async fn restore(&mut self, leadership: &Leadership) -> Result<bool, Failed> {
        let restored = match self.store.get().await {
            Ok(Some(read)) => Ok(read),
            // A deposed leader must not put back its own copy over what the new one does.
            Ok(None) if !leadership.is_leading() => return Ok(false),
            Ok(None) if !self.deletion_seen => {
                tracing::info!(
                    "the slot ledger Lease is gone; recreated once the watch brings its last contents"
                );
                return Ok(false);
            }
            // Our last copy could not be read: recreated from it, the Lease would forget the
            // grants the newer operator recorded. An operator that knows the format recreates it.
            Ok(None) if self.ledger.unknown_format.is_some() => {
                tracing::error!(
                    "the slot ledger Lease is gone and its last copy is in a format this \
                     controller does not know: not recreated; upgrade the operator"
                );
                return Ok(false);
            }
            // Recreated from a damaged copy, it is still to be rebuilt from the nodes.
            Ok(None) => {
                let damage = self.damage.clone();
                self.store
                    .recreate(&self.ledger)
                    .await
                    .map(|read| ReadLedger { damage, ..read })
                    .inspect(|read| self.say_recreated(&read.ledger))
            }
            Err(error) => Err(error),
        };
        match restored {
            Ok(read) => {
                self.gone = false;
                self.deletion_seen = false;
                self.take(read);
                Ok(true)
            }
            Err(error) => {
                self.metrics.api_error("ledger", error.kind());
                tracing::warn!(%error, "the slot ledger Lease is gone and could not be recreated; retrying");
                Err(Failed)
            }
        }
    }

    /// A Warning on the Lease (and the log, and the metric): it was deleted and recreated.
    fn say_recreated(&self, recreated: &Ledger) {
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
            .publish_about(self.store.reference(), Reason::LedgerRecreated, note);
    }

    /// Reads the ledger again after a lost compare-and-swap. Gone meanwhile, it is restored as
    /// any deleted Lease is, never created empty: an empty one would forget the soaks.
    pub(super) async fn reload(&mut self) -> bool {
        match self.store.get().await {
            Ok(Some(read)) => {
                self.take(read);
                true
            }
            Ok(None) => {
                self.gone = true;
                false
            }
            Err(error) => {
                self.metrics.api_error("ledger", error.kind());
                tracing::warn!(%error, "could not read the slot ledger");
                false
            }
        }
    }

    /// Writes the decision's grants and releases, made at `now`, with a compare-and-swap on
    /// the version held; written, the copy is no longer damaged.
    pub(super) async fn write(
        &mut self,
        decision: &Decision,
        now: &str,
    ) -> Result<(), LedgerError> {
        let id = self.ledger.id.clone();
        let slots = decision.ledger.apply(&self.ledger.slots, now, || {
            common::ledger::grant_id(&id, &new_grant_id())
        });
        let rollout = decision.ledger.rollout.as_ref();
        let unpause = decision.ledger.unpause;
        self.ledger = self
            .store
            .swap(&self.ledger, &slots, rollout, unpause)
            .await?;
        self.damage = None;
        Ok(())
    }

    /// Whether the ledger Lease is still the version we hold. If not, the version read is taken
    /// in (or its deletion noted) for the next round to decide on.
    pub(super) async fn is_current(&mut self) -> Result<bool, Failed> {
        match self.store.get().await {
            Ok(Some(read)) if read.ledger.resource_version == self.ledger.resource_version => {
                Ok(true)
            }
            Ok(Some(read)) => {
                self.take(read);
                Ok(false)
            }
            Ok(None) => {
                self.gone = true;
                Ok(false)
            }
            Err(error) => {
                self.metrics.api_error("ledger", error.kind());
                tracing::warn!(%error, "could not read the slot ledger before claiming");
                Err(Failed)
            }
        }
    }
}

impl Shell {
    /// Writes the round's ledger changes, or the rebuild of a damaged copy. `Continue` with
    /// whether it wrote; `Break` when the round ends here, with whether another round should
    /// follow at once (to decide again on the ledger as it is now).
    pub(super) async fn write_slots(
        &mut self,
        decision: &Decision,
        nodes: &HashMap<&str, &Arc<Node>>,
    ) -> ControlFlow<bool, bool> {
        if decision.ledger.is_empty() && !self.ledger.is_damaged() {
            return ControlFlow::Continue(false);
        }
        if !self.leadership.is_leading() {
            return ControlFlow::Break(false);
        }
        match self.write_ledger(decision, nodes).await {
            Ok(()) => ControlFlow::Continue(true),
            // Another controller moved first: decide again on the ledger as it is now.
            Err(LedgerError::Conflict) => {
                self.metrics.api_error("ledger", ApiErrorKind::Conflict);
                ControlFlow::Break(self.ledger.reload().await)
            }
            // Deleted by hand: recreate it, then decide again on it.
            Err(LedgerError::Gone) => {
                self.metrics.api_error("ledger", ApiErrorKind::NotFound);
                self.ledger.mark_gone();
                ControlFlow::Break(self.restore_ledger().await)
            }
            Err(error) => {
                self.metrics.api_error("ledger", error.kind());
                tracing::warn!(%error, "could not write the slot ledger");
                self.failed = true;
                ControlFlow::Break(false)
            }
        }
    }

    /// Restores the deleted ledger Lease; false when it could not be done yet.
    pub(super) async fn restore_ledger(&mut self) -> bool {
        self.ledger
            .restore(&self.leadership)
            .await
            .unwrap_or_else(|Failed| {
                self.failed = true;
                false
            })
    }

    /// Whether the ledger Lease is still the version we hold (see [`LedgerCopy::is_current`]).
    pub(super) async fn ledger_is_current(&mut self) -> bool {
        self.ledger.is_current().await.unwrap_or_else(|Failed| {
            self.failed = true;
            false
        })
    }

    pub(super) async fn write_ledger(
        &mut self,
        decision: &Decision,
        nodes: &HashMap<&str, &Arc<Node>>,
    ) -> Result<(), LedgerError> {
        let now = self.clock.now().to_string();
        let before = self.ledger.current().rollout.clone();
        let granted_at: HashMap<String, String> = (decision.release_reasons.iter())
            .filter(|(_, reason)| *reason == ReleaseReason::Completed)
            .filter_map(|(node, _)| {
                let slot = self.ledger.current().slots.get(node)?;
                Some((node.clone(), slot.granted_at.clone()))
            })
            .collect();
        self.ledger.write(decision, &now).await?;
        for at in granted_at.values() {
            self.measure_reboot(at);
        }
        self.announce_rollout_written(before.as_ref(), decision);
        let ledger = self.ledger.current();
        self.drains
            .retain(|grant| ledger.slots.values().any(|s| s.grant == grant));
        for grant in &decision.ledger.grant {
            let id = ledger.grant_of(&grant.node).unwrap_or_default();
            tracing::info!(node = %grant.node, grant = %id, adopted = grant.adopted.is_some(),
                           slots = ledger.slots.len(), "slot granted");
        }
        self.announce_started(decision);
        for (name, reason) in &decision.release_reasons {
            let slots = self.ledger.current().slots.len();
            tracing::info!(node = %name, ?reason, slots, "slot released");
            match reason {
                // A given-up node's Event was published when its protocol was cleared.
                ReleaseReason::Completed
                | ReleaseReason::Unclaimed
                | ReleaseReason::WindowClosed
                | ReleaseReason::Abandoned => {}
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

    /// New grants (not adoptions of grants the nodes already carry) after a pool with none
    /// under way start a rollout.
    fn announce_started(&mut self, decision: &Decision) {
        let granted: Vec<&str> = decision
            .ledger
            .grant
            .iter()
            .filter(|g| g.adopted.is_none())
            .map(|g| g.node.as_str())
            .collect();
        if granted.is_empty() || !self.rollout.granted() {
            return;
        }
        let waiting = decision.waiting.len();
        let message = format!(
            "Reboot rollout of {} started: {} granted a reboot slot, {waiting} more node(s) \
             wait (max-unavailable {})",
            self.ledger.current().id,
            granted.join(", "),
            self.budgets
        );
        let details = serde_json::json!({
            "nodes": granted,
            "waiting": waiting,
            "max_unavailable": self.budgets.to_string(),
        });
        self.notify_rollout(crate::notify::Kind::RolloutStarted, None, message, details);
    }
}
