//! report.json: the figures under stable keys, with the machine, the commit and the load
//! during each scenario. Filled from the scenarios' outcomes; the table is in [`crate::table`].

use crate::{
    load::Load,
    machine::Machine,
    scenarios::{idle, makespan, requests, scale},
    stats::Spread,
    turnover::Turnover,
};
use serde::Serialize;
use std::collections::BTreeMap;

/// A figure is `null` only when its scenario failed (the run then exits non-zero) or did not
/// run (`--only`). A figure measured several times is the median (its range is beside it).
#[derive(Debug, Clone, Default, Serialize)]
pub struct Report {
    /// The worst fleet size's median of the batches' p50 (and p99): the target holds at every
    /// size when these do.
    pub promotion_latency_p50_ms: Option<f64>,
    pub promotion_latency_p99_ms: Option<f64>,
    pub promotion_latency: Vec<SizeLatency>,
    pub makespan_s: Option<f64>,
    pub makespan: Option<Spread>,
    pub makespan_ideal_s: Option<f64>,
    pub makespan_ratio: Option<f64>,
    pub slot_turnover: Option<Turnover>,
    /// The rolling reboot with a soak: until the last slot is released.
    pub makespan_soak_s: Option<f64>,
    pub makespan_soak: Option<Spread>,
    pub makespan_soak_ideal_s: Option<f64>,
    pub makespan_soak_ratio: Option<f64>,
    pub controller_rss_mib_5000: Option<f64>,
    pub controller_cpu_percent_5000: Option<f64>,
    /// Measured, or extrapolated from the sizes measured (see `controller_rss_65000_basis`).
    pub controller_rss_mib_65000: Option<f64>,
    pub controller_rss_65000_basis: Option<String>,
    pub agent_rss_mib: Option<f64>,
    pub agent_requests_per_hour: Option<f64>,
    pub requests_per_reboot: Option<f64>,
    pub requests_per_drained_reboot: Option<f64>,
    pub requests_per_evicted_pod: Option<f64>,
    pub nodes_scale_max: Option<u64>,
    pub scale_stopped: Option<scale::Stop>,
    /// The 1-minute load average during each scenario (and each scale step, `scale <nodes>`).
    pub load: BTreeMap<String, Load>,
    pub machine: Machine,
    pub commit: String,
    pub date: String,
    pub mode: String,
    pub duration_s: f64,
    /// Scenarios left out with `--only`.
    pub not_run: Vec<String>,
}

/// Promotion latency at one fleet size.
#[derive(Debug, Clone, Serialize)]
pub struct SizeLatency {
    pub nodes: usize,
    pub trials_per_batch: usize,
    pub p50_ms: Spread,
    pub p99_ms: Spread,
    /// The pool's `RebootPool` status writes per second during the trials.
    pub status_writes_per_second: f64,
}

/// Every key a report must have a number under after a run of every scenario (what the CI
/// check looks for).
pub const KEYS: [&str; 17] = [
    "promotion_latency_p50_ms",
    "promotion_latency_p99_ms",
    "makespan_s",
    "makespan_ideal_s",
    "makespan_ratio",
    "makespan_soak_s",
    "makespan_soak_ideal_s",
    "makespan_soak_ratio",
    "controller_rss_mib_5000",
    "controller_cpu_percent_5000",
    "controller_rss_mib_65000",
    "agent_rss_mib",
    "agent_requests_per_hour",
    "requests_per_reboot",
    "requests_per_drained_reboot",
    "requests_per_evicted_pod",
    "nodes_scale_max",
];

fn worst(values: impl Iterator<Item = f64>) -> Option<f64> {
    values.fold(None, |w, v| Some(w.map_or(v, |w: f64| w.max(v))))
}

impl Report {
    pub fn scale(&mut self, o: &scale::Outcome) {
        self.promotion_latency = o
            .steps
            .iter()
            .map(|s| SizeLatency {
                nodes: s.nodes,
                trials_per_batch: s.latency.trials_per_batch,
                p50_ms: s.latency.p50_ms,
                p99_ms: s.latency.p99_ms,
                status_writes_per_second: s.controller.status_writes_per_second,
            })
            .collect();
        self.promotion_latency_p50_ms = worst(o.steps.iter().map(|s| s.latency.p50_ms.median));
        self.promotion_latency_p99_ms = worst(o.steps.iter().map(|s| s.latency.p99_ms.median));
        if let Some(step) = &o.reference {
            self.controller_rss_mib_5000 = Some(step.controller.peak_rss_mib);
            self.controller_cpu_percent_5000 = Some(step.controller.cpu_percent);
        }
        if let Some(large) = &o.large {
            self.controller_rss_mib_65000 = Some(large.mib);
            self.controller_rss_65000_basis = Some(large.show());
        }
        self.nodes_scale_max = Some(o.scale_max);
        self.scale_stopped = o.stopped.clone();
        for step in &o.steps {
            if let Some(load) = step.load {
                self.load.insert(format!("scale {}", step.nodes), load);
            }
        }
    }

    pub fn makespan(&mut self, o: &makespan::Outcome) {
        self.makespan_s = Some(o.makespan_s.median);
        self.makespan = Some(o.makespan_s);
        self.makespan_ideal_s = Some(o.ideal_s);
        self.makespan_ratio = Some(o.ratio.median);
        self.slot_turnover = o.turnover.clone();
    }

    pub fn makespan_soak(&mut self, o: &makespan::Outcome) {
        self.makespan_soak_s = Some(o.makespan_s.median);
        self.makespan_soak = Some(o.makespan_s);
        self.makespan_soak_ideal_s = Some(o.ideal_s);
        self.makespan_soak_ratio = Some(o.ratio.median);
    }

    pub fn requests(&mut self, o: &requests::Outcome) {
        self.requests_per_reboot = Some(o.drain_off.per_reboot);
        self.requests_per_drained_reboot = Some(o.drain_on.per_reboot);
        self.requests_per_evicted_pod = Some(o.per_evicted_pod);
    }

    pub fn idle(&mut self, o: &idle::Outcome) {
        self.agent_rss_mib = Some(o.peak_rss_mib);
        self.agent_requests_per_hour = Some(o.requests_per_hour);
    }
}
