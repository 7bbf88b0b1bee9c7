//! The figures a soak ends with: a table on stdout and the same as JSON.

use crate::{
    Args,
    faults::{Faults, Kind},
    load::Load,
};
use e2e::observer::Observer;
use k8s_openapi::api::core::v1::Node;
use kube::{Api, ResourceExt, api::ListParams};
use nodesim::sandbox::Sandbox;
use serde::Serialize;
use std::{collections::BTreeMap, fmt::Write as _, path::Path, time::Duration};

#[derive(Debug, Serialize)]
pub struct Figures {
    pub seed: u64,
    pub planned_seconds: u64,
    pub ran_seconds: u64,
    pub nodes: usize,
    pub budget: usize,
    pub controllers: usize,
    pub clock_skew_seconds: u64,
    pub requests: u32,
    pub rollouts_finished: u32,
    pub cancels: u32,
    pub faults: BTreeMap<Kind, u32>,
    pub violations: Vec<String>,
    pub max_unavailable_seen: usize,
    /// Times an administrator's cordon took the count over the budget (not the operator's
    /// doing; it must add no node then).
    pub over_budget_by_others: u64,
    /// Grants written as an administrator's cordon landed (within seconds, before the
    /// operator's cache could show it): one node over the budget, not a violation.
    pub grants_that_raced_a_cordon: u64,
    /// Pods a scheduler bound to a cordoned node as its `reboot-now` was written (no drain
    /// can see those): counted, not violations.
    pub pods_bound_as_reboot_now_was_written: Vec<String>,
    pub requests_lost: Vec<String>,
    pub nodes_left_cordoned: Vec<String>,
    pub admin_cordons_kept: u32,
    pub admin_cordons_lost: Vec<String>,
    pub slowest_recovery: Option<(Kind, f64)>,
    pub request_to_back_median_seconds: Option<f64>,
    pub request_to_back_max_seconds: Option<f64>,
    pub node_events: u64,
    pub pod_events: u64,
    /// Changes the observer's watches did not see one by one (it must see every one).
    pub changes_not_observed: u64,
    pub kubectl_retries: u32,
}

impl Figures {
    #[allow(clippy::too_many_arguments)]
    pub async fn gather(
        args: &Args,
        seed: u64,
        ran: Duration,
        sb: &Sandbox,
        observer: &Observer,
        load: &Load,
        faults: &Faults,
    ) -> Figures {
        let report = observer.report();
        let total = report.total();
        let admin = faults.admin_cordoned();
        let nodes_left_cordoned = match Api::<Node>::all(sb.client.clone())
            .list(&ListParams::default())
            .await
        {
            Ok(list) => list
                .items
                .iter()
                .filter(|n| n.spec.as_ref().and_then(|s| s.unschedulable) == Some(true))
                .map(ResourceExt::name_any)
                .filter(|n| !admin.contains(&n.as_str()))
                .collect(),
            Err(e) => vec![format!("(could not list the nodes: {e})")],
        };
        let mut latencies = load.request_to_back.clone();
        latencies.sort();
        Figures {
            seed,
            planned_seconds: args.duration.as_secs(),
            ran_seconds: ran.as_secs(),
            nodes: args.nodes,
            budget: args.max_unavailable,
            controllers: args.controllers,
            clock_skew_seconds: args.clock_skew.as_secs(),
            requests: load.requests,
            rollouts_finished: total.reboots,
            cancels: total.cancels,
            faults: faults.injected.clone(),
            violations: report.violations.clone(),
            max_unavailable_seen: report.max_unavailable,
            over_budget_by_others: report.external_excess,
            grants_that_raced_a_cordon: report.raced_external,
            pods_bound_as_reboot_now_was_written: report.late_bindings.clone(),
            requests_lost: load.lost.clone(),
            nodes_left_cordoned,
            admin_cordons_kept: faults.cordons_kept,
            admin_cordons_lost: faults.cordons_lost.clone(),
            slowest_recovery: faults.slowest_recovery.map(|(k, d)| (k, d.as_secs_f64())),
            request_to_back_median_seconds: latencies
                .get(latencies.len() / 2)
                .map(Duration::as_secs_f64),
            request_to_back_max_seconds: latencies.last().map(Duration::as_secs_f64),
            node_events: report.node_events,
            pod_events: report.pod_events,
            changes_not_observed: report.nodes.unobserved_changes + report.pods.unobserved_changes,
            kubectl_retries: load.kubectl_failures,
        }
    }

    /// Every figure held: no violation, nothing lost, nothing left cordoned, and an observer
    /// that saw everything.
    pub fn held(&self) -> bool {
        self.violations.is_empty()
            && self.requests_lost.is_empty()
            && self.nodes_left_cordoned.is_empty()
            && self.admin_cordons_lost.is_empty()
            && self.changes_not_observed == 0
    }

    /// A Markdown table, as the docs show it.
    pub fn table(&self) -> String {
        let mut rows: Vec<(String, String)> = vec![
            (
                "ran".into(),
                format!(
                    "{} min ({} planned), {} simulated nodes, budget {}, {} controller replicas \
                     (clocks in step, {} s ahead, {} s behind), seed {}",
                    self.ran_seconds / 60,
                    self.planned_seconds / 60,
                    self.nodes,
                    self.budget,
                    self.controllers,
                    self.clock_skew_seconds,
                    self.clock_skew_seconds,
                    self.seed
                ),
            ),
            (
                "load held".into(),
                format!(
                    "{} requests: {} rollouts finished, {} cancelled",
                    self.requests, self.rollouts_finished, self.cancels
                ),
            ),
        ];
        let faults: u32 = self.faults.values().sum();
        rows.push(("faults injected".into(), faults.to_string()));
        for (kind, n) in &self.faults {
            rows.push((format!("- {}", kind.describe()), n.to_string()));
        }
        rows.extend([
            ("violations".into(), self.violations.len().to_string()),
            (
                "most nodes unavailable at once".into(),
                format!(
                    "{} (budget {}; over it {} time(s) by an administrator's cordon, {} by a \
                     grant that raced one)",
                    self.max_unavailable_seen,
                    self.budget,
                    self.over_budget_by_others,
                    self.grants_that_raced_a_cordon
                ),
            ),
            (
                "pods a scheduler bound to a cordoned node as its reboot-now was written".into(),
                self.pods_bound_as_reboot_now_was_written.len().to_string(),
            ),
            ("requests lost".into(), count(&self.requests_lost)),
            (
                "nodes left cordoned".into(),
                count(&self.nodes_left_cordoned),
            ),
            (
                "administrators' cordons kept through the reboot / lost".into(),
                format!(
                    "{} / {}",
                    self.admin_cordons_kept,
                    count(&self.admin_cordons_lost)
                ),
            ),
            (
                "slowest recovery (fault healed to the next reboot finished)".into(),
                self.slowest_recovery.map_or("-".into(), |(k, s)| {
                    format!("{s:.1} s, after {}", k.describe())
                }),
            ),
            (
                "request to node back (median / slowest)".into(),
                format!(
                    "{} / {}",
                    seconds(self.request_to_back_median_seconds),
                    seconds(self.request_to_back_max_seconds)
                ),
            ),
            (
                "events observed (nodes / pods)".into(),
                format!(
                    "{} / {}, {} not seen one by one",
                    self.node_events, self.pod_events, self.changes_not_observed
                ),
            ),
        ]);
        let mut table = String::from("| figure | value |\n|---|---|\n");
        for (name, value) in rows {
            let _ = writeln!(table, "| {name} | {value} |");
        }
        for v in self.violations.iter().take(5) {
            let _ = writeln!(table, "\nviolation: {v}");
        }
        table
    }

    pub fn write(&self, path: &Path) -> anyhow::Result<()> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::write(path, serde_json::to_string_pretty(self)? + "\n")?;
        Ok(())
    }
}

fn count(nodes: &[String]) -> String {
    if nodes.is_empty() {
        "0".into()
    } else {
        format!("{} ({})", nodes.len(), nodes.join(", "))
    }
}

fn seconds(s: Option<f64>) -> String {
    s.map_or("-".into(), |s| format!("{s:.1} s"))
}
