//! `--dry-run`: the whole rollout as this round's decision would carry it on, wave by wave
//! ([`controller_core::rollout_plan`]), logged once each time it changes.

use super::Shell;
use controller_core::{
    decide::{Decision, Round},
    dry_run,
    rollout_plan::{self, PlanInput, Wait},
};

impl Shell {
    /// The plan of the rollout from `round`, in words: the order of the waves and what no
    /// wave reaches. The reboots' length is not known here (nothing reboots in a dry run), so
    /// the waves have an order and the first its start; `kubectl reboot plan` times them.
    pub(super) fn rollout_plan(&self, round: &Round<'_>, decision: &Decision) -> Vec<String> {
        let failing = !decision.overdue.is_empty() || !decision.not_ready_after_reboot.is_empty();
        let held = if round.fence.paused {
            Some(Wait::Paused)
        } else if failing {
            Some(Wait::FailingNode)
        } else if round.fence.gates_closed {
            Some(Wait::GateClosed)
        } else {
            None
        };
        let now = self.clock.now();
        let pool_size = round.nodes.iter().filter(|v| v.counted()).count() + round.others.nodes();
        let plan = rollout_plan::plan(PlanInput {
            nodes: round.nodes.to_vec(),
            others: round.others,
            ledger: round.ledger,
            budget: self.budgets.base.resolve(pool_size),
            scheduled_budgets: &self.budgets.scheduled,
            pool_size,
            zone_budget: round.zone_budget,
            concurrency: round.concurrency,
            windows: &self.schedule.windows,
            held,
            blocked: round.blocked,
            reboot: None,
            min_ready: self.schedule.min_ready,
            set_aside: self.set_aside,
            rollout: self.rollout_rules,
            reboot_estimate: self.schedule.reboot_estimate,
            now,
            now_ms: round.now,
        });
        dry_run::rollout(&plan, now)
    }

    /// Logs the plan once each time it changes.
    pub(super) fn say_rollout_plan(&mut self, lines: Option<Vec<String>>) {
        let Some(lines) = lines else { return };
        if lines.is_empty() || !self.said.first_dry_run("", &lines.join("\n")) {
            return;
        }
        for line in lines {
            tracing::info!(dry_run = true, "dry run: rollout plan: {line}");
        }
    }
}
