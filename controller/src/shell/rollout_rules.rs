//! What the rollout's rules (`--canary`, `--waves`, `--max-failures`, `--max-blocked-nodes`)
//! mean for the administrator: the failures counted, the stall and how to lift it, the
//! canaries passed, in Events, logs and gauges.

use super::Shell;
use crate::cluster::events::Reason;
use common::{
    events::{NOTE_REQUESTED, WAITING_FOR_CANARY, WAITING_FOR_WAVE, WAITING_STALLED},
    pool::LEDGER_PREFIX,
    rollout::{ROLLOUT_ANNOTATION, RolloutRecord},
};
use controller_core::{
    decide::Decision,
    ledger::RolloutChange,
    rollout::{Stage, Stall},
};
use k8s_openapi::api::core::v1::Node;
use std::{collections::HashMap, sync::Arc};

impl Shell {
    /// The ledger's namespace and Lease, and the RebootPool it belongs to (`None`: the flags'
    /// pool).
    fn ledger_place(&self) -> (Option<&str>, &str, Option<&str>) {
        let id = &self.ledger.current().id;
        let (namespace, lease) = id
            .rsplit_once('/')
            .map_or((None, id.as_str()), |(ns, name)| (Some(ns), name));
        (namespace, lease, lease.strip_prefix(LEDGER_PREFIX))
    }

    /// The command that lifts a stall of this pool.
    fn resume_command(&self) -> String {
        match self.ledger_place().2 {
            Some(pool) => format!("kubectl reboot resume --pool {pool}"),
            None => "kubectl reboot resume".to_owned(),
        }
    }

    /// What lifts the stall of a rollout record that does not read: `kubectl reboot resume`
    /// writes a good one on the flags' pool's Lease; a RebootPool's is removed by hand (its
    /// `resume --pool` reaches the controller only, which never writes over it).
    fn unreadable_lift(&self) -> String {
        match self.ledger_place() {
            (Some(namespace), lease, Some(_)) => format!(
                "an administrator removes it: `kubectl annotate lease -n {namespace} {lease} \
                 {ROLLOUT_ANNOTATION}-`"
            ),
            _ => format!("`{}` writes a good rollout record", self.resume_command()),
        }
    }

    /// The waiting nodes' note while the pool is stalled: why, and what lifts it.
    pub(super) fn stalled_note(&self, stall: &Stall, decision: &Decision) -> String {
        let lift = match stall {
            Stall::SetAside { .. } => format!(
                "an administrator fixes what blocks the drains of {} and removes their {}, or \
                 gives them up",
                decision.set_aside.join(", "),
                self.keys.drain_failures
            ),
            Stall::CanaryFailed { .. } | Stall::TooManyFailures { .. } => format!(
                "an administrator has looked at the failed nodes (give up or mend each) and runs \
                 `{}`",
                self.resume_command()
            ),
            Stall::Unreadable(_) => self.unreadable_lift(),
        };
        format!(
            "{NOTE_REQUESTED}{WAITING_STALLED}{}; no new reboot starts until {lift}. Reboots \
             under way finish",
            stall.describe()
        )
    }

    /// The waiting note of a node that the rollout's stage keeps out.
    pub(super) fn stage_note(&self, stage: Option<Stage>) -> String {
        match stage {
            Some(Stage::Canary { size }) => format!(
                "{NOTE_REQUESTED}{WAITING_FOR_CANARY}: the first {size} node(s) of the rollout go \
                 alone until they have completed and soaked (--canary, --canary-soak)"
            ),
            Some(Stage::Wave { size }) => format!(
                "{NOTE_REQUESTED}{WAITING_FOR_WAVE}: this one holds {size} node(s) and the next, \
                 twice as many, starts once it has completed (--waves)"
            ),
            None => format!("{NOTE_REQUESTED}waiting for a slot"),
        }
    }

    /// The round's rollout failures (a Warning on each node, counted) and the gauges.
    pub(super) fn announce_rollout_rules(
        &mut self,
        decision: &Decision,
        nodes: &HashMap<&str, &Arc<Node>>,
    ) {
        if self.reports_gauges {
            self.metrics
                .rollout_stalled
                .set(i64::from(decision.stalled.is_some()));
            let room = match decision.stage {
                Some(Stage::Canary { size } | Stage::Wave { size }) => i64::from(size),
                None => 0,
            };
            self.metrics.rollout_stage_nodes.set(room);
        }
        // Counted once: the failure is new to the record this round decided on; a round whose
        // ledger write fails decides it again, and the next Event is the same.
        for (name, kind) in &decision.rollout_failures {
            self.metrics.rollout_failure(kind.as_str());
            let what = match &decision.stalled {
                Some(stall @ (Stall::CanaryFailed { .. } | Stall::TooManyFailures { .. })) => {
                    format!(
                        "the pool is stalled ({}) until `{}`",
                        stall.describe(),
                        self.resume_command()
                    )
                }
                _ => match self.rollout_rules.max_failures {
                    Some(most) => format!("--max-failures is {most}"),
                    None => "no limit is set (--max-failures)".to_owned(),
                },
            };
            let note = format!(
                "counted as a failure of the rollout: {}; {what}",
                kind.describe()
            );
            tracing::warn!(node = %name, "{note}");
            if let Some(node) = nodes.get(name.as_str()) {
                self.events.publish(node, Reason::RolloutFailure, note);
            }
        }
    }

    /// Once the record is written: the canary stage passed, if this write ended it.
    pub(super) fn announce_rollout_written(
        &self,
        before: Option<&RolloutRecord>,
        decision: &Decision,
    ) {
        let Some(RolloutChange::Write(after)) = &decision.ledger.rollout else {
            return;
        };
        let canary = self.rollout_rules.canary;
        let passed = |r: Option<&RolloutRecord>| r.is_some_and(|r| r.canaries_completed >= canary);
        if canary == 0 || passed(before) || !passed(Some(after)) {
            return;
        }
        let note = format!(
            "the canary stage of the rollout passed: {canary} node(s) completed and soaked \
             (--canary-soak); the rest of the rollout starts"
        );
        tracing::info!("{note}");
        self.events
            .publish_about(self.ledger.reference(), Reason::CanaryPassed, note);
    }
}
