//! The figures, their targets (DESIGN.md section 7), the markdown table and report.json.

use crate::plan::Plan;
use serde::Serialize;
use std::path::Path;

/// report.json: the figures under the keys of issue 8, the machine, the commit. A figure is
/// `null` only when its scenario failed (the run then exits non-zero).
#[derive(Debug, Clone, Default, Serialize)]
pub struct Report {
    pub promotion_latency_p50_ms: Option<f64>,
    pub promotion_latency_p99_ms: Option<f64>,
    pub makespan_s: Option<f64>,
    pub makespan_ideal_s: Option<f64>,
    pub makespan_ratio: Option<f64>,
    pub controller_rss_mib_5000: Option<f64>,
    pub controller_cpu_percent_5000: Option<f64>,
    pub agent_rss_mib: Option<f64>,
    pub agent_requests_per_hour: Option<f64>,
    pub requests_per_reboot: Option<f64>,
    pub nodes_scale_max: Option<u64>,
    pub machine: Machine,
    pub commit: String,
    pub date: String,
    pub mode: String,
    pub duration_s: f64,
}

/// Every key a report must have (what the CI check looks for).
pub const KEYS: [&str; 11] = [
    "promotion_latency_p50_ms",
    "promotion_latency_p99_ms",
    "makespan_s",
    "makespan_ideal_s",
    "makespan_ratio",
    "controller_rss_mib_5000",
    "controller_cpu_percent_5000",
    "agent_rss_mib",
    "agent_requests_per_hour",
    "requests_per_reboot",
    "nodes_scale_max",
];

#[derive(Debug, Clone, Default, Serialize)]
pub struct Machine {
    pub cores: usize,
    pub memory_gib: f64,
    pub cpu: String,
    pub kernel: String,
}

impl Machine {
    pub fn this() -> Self {
        let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
        let meminfo = read("/proc/meminfo");
        let kib: f64 = meminfo
            .lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0.0);
        let cpu = read("/proc/cpuinfo")
            .lines()
            .find_map(|l| l.strip_prefix("model name"))
            .map(|v| v.trim_start_matches([' ', '\t', ':']).trim().to_owned())
            .unwrap_or_default();
        Self {
            cores: std::thread::available_parallelism().map_or(0, usize::from),
            memory_gib: (kib / 1024.0 / 1024.0 * 10.0).round() / 10.0,
            cpu,
            kernel: read("/proc/sys/kernel/osrelease").trim().to_owned(),
        }
    }

    pub fn describe(&self) -> String {
        format!(
            "{} cores ({}), {:.1} GiB memory, Linux {}",
            self.cores, self.cpu, self.memory_gib, self.kernel
        )
    }
}

/// `git rev-parse HEAD` of the workspace, with `-dirty` when the work tree has changes.
pub fn commit(workspace: &Path) -> String {
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .arg("-C")
            .arg(workspace)
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
    };
    let Some(head) = git(&["rev-parse", "--short=12", "HEAD"]) else {
        return "unknown".into();
    };
    match git(&["status", "--porcelain", "--untracked-files=no"]) {
        Some(s) if !s.is_empty() => format!("{head}-dirty"),
        _ => head,
    }
}

enum Verdict {
    Pass,
    Miss,
    NotJudged,
    Missing,
}

struct Row {
    measure: String,
    target: String,
    result: String,
    verdict: Verdict,
}

fn judged(value: Option<f64>, limit: f64, quick: bool) -> Verdict {
    match value {
        None => Verdict::Missing,
        Some(_) if quick => Verdict::NotJudged,
        Some(v) if v <= limit => Verdict::Pass,
        Some(_) => Verdict::Miss,
    }
}

fn show(value: Option<f64>, unit: &str, decimals: usize) -> String {
    value.map_or_else(|| "n/a".into(), |v| format!("{v:.decimals$}{unit}"))
}

impl Report {
    fn rows(&self, plan: &Plan) -> Vec<Row> {
        let quick = self.mode == "quick";
        let ratio = self.makespan_ratio;
        let latency = format!(
            "request to `reboot-now` ({} idle nodes, drain off, {} trials)",
            plan.latency_nodes, plan.latency_trials
        );
        let steps: Vec<String> = plan.scale_steps.iter().map(|n| n.to_string()).collect();
        vec![
            Row {
                measure: format!("{latency}, p50"),
                target: "<= 20 ms".into(),
                result: show(self.promotion_latency_p50_ms, " ms", 1),
                verdict: judged(self.promotion_latency_p50_ms, 20.0, quick),
            },
            Row {
                measure: format!("{latency}, p99"),
                target: "<= 100 ms".into(),
                result: show(self.promotion_latency_p99_ms, " ms", 1),
                verdict: judged(self.promotion_latency_p99_ms, 100.0, quick),
            },
            Row {
                measure: format!(
                    "rolling reboot makespan ({} nodes, max-unavailable {}, reboot {} s, drain off)",
                    plan.makespan_nodes,
                    plan.makespan_max_unavailable,
                    plan.reboot.as_secs_f64()
                ),
                target: format!(
                    "<= 1.10 x ideal ceil(N/k) x T = {}",
                    show(self.makespan_ideal_s.map(|i| i * 1.1), " s", 1)
                ),
                result: format!(
                    "{} ({} x ideal {})",
                    show(self.makespan_s, " s", 1),
                    show(ratio, "", 2),
                    show(self.makespan_ideal_s, " s", 0)
                ),
                verdict: judged(ratio, 1.10, quick),
            },
            Row {
                measure: format!(
                    "controller peak RSS, {} realistic Nodes, status updates going on",
                    plan.scale_reference
                ),
                target: "<= 64 MiB".into(),
                result: show(self.controller_rss_mib_5000, " MiB", 1),
                verdict: judged(self.controller_rss_mib_5000, 64.0, quick),
            },
            Row {
                measure: format!(
                    "controller CPU during those updates ({:.0}/s)",
                    plan.heartbeat_rate(plan.scale_reference)
                ),
                target: "(no target)".into(),
                result: show(self.controller_cpu_percent_5000, " % of one core", 1),
                verdict: Verdict::NotJudged,
            },
            Row {
                measure: format!("idle agent peak RSS ({} s)", plan.idle.as_secs()),
                target: "<= 10 MiB".into(),
                result: show(self.agent_rss_mib, " MiB", 1),
                verdict: judged(self.agent_rss_mib, 10.0, quick),
            },
            Row {
                measure: "idle agent API requests per hour".into(),
                target: "<= 15".into(),
                result: show(self.agent_requests_per_hour, "", 1),
                verdict: judged(self.agent_requests_per_hour, 15.0, quick),
            },
            Row {
                measure: "API requests per node reboot (controller + agent, drain off)".into(),
                target: "<= 10".into(),
                result: show(self.requests_per_reboot, "", 0),
                verdict: judged(self.requests_per_reboot, 10.0, quick),
            },
            Row {
                measure: format!(
                    "largest fleet (steps {}) with controller RSS <= 64 MiB and p99 < 100 ms",
                    steps.join(", ")
                ),
                target: "(measured)".into(),
                result: self
                    .nodes_scale_max
                    .map_or_else(|| "n/a".into(), |n| format!("{n} nodes")),
                verdict: if self.nodes_scale_max.is_some() {
                    Verdict::NotJudged
                } else {
                    Verdict::Missing
                },
            },
        ]
    }

    /// The markdown table, headed by the date, machine, commit and mode.
    pub fn table(&self, plan: &Plan) -> String {
        let mut out = format!(
            "Benchmark of {} on {}, commit {} ({} mode, {:.0} s).\n\n",
            self.date,
            self.machine.describe(),
            self.commit,
            self.mode,
            self.duration_s
        );
        out.push_str("| measure | target | result | pass/miss |\n|---|---|---|---|\n");
        for row in self.rows(plan) {
            let verdict = match row.verdict {
                Verdict::Pass => "pass",
                Verdict::Miss => "**miss**",
                Verdict::NotJudged if self.mode == "quick" => "not judged (quick)",
                Verdict::NotJudged => "-",
                Verdict::Missing => "**failed**",
            };
            out.push_str(&format!(
                "| {} | {} | {} | {} |\n",
                row.measure, row.target, row.result, verdict
            ));
        }
        out
    }

    /// The targets missed, by key (empty in quick mode).
    pub fn misses(&self, plan: &Plan) -> Vec<String> {
        self.rows(plan)
            .into_iter()
            .filter(|r| matches!(r.verdict, Verdict::Miss))
            .map(|r| r.measure)
            .collect()
    }
}
