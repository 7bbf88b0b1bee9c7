//! The markdown table: each target of [`crate::targets`] with its result, the machine's load
//! during the scenario that measured it, and whether it was met. Headed by the date, the
//! machine and the commit. Nothing is judged in quick mode.

use crate::{Scenario, load::Load, report::Report, sizes::Sizes, targets};

#[derive(Debug, PartialEq, Eq)]
enum Verdict {
    Pass,
    Miss,
    NotJudged,
    Missing,
}

struct Row {
    scenario: Scenario,
    measure: String,
    target: String,
    result: String,
    load: Option<Load>,
    verdict: Verdict,
}

/// Pass when `value` is at most `limit` (a missing value is a missing figure).
fn at_most(value: Option<f64>, limit: f64) -> Verdict {
    match value {
        None => Verdict::Missing,
        Some(v) if v <= limit => Verdict::Pass,
        Some(_) => Verdict::Miss,
    }
}

/// Pass when `value` is above nothing and at most `limit`: a rate that must be kept low, of
/// something that must happen (0 would be a pass for nothing done).
fn some_and_at_most(value: Option<f64>, limit: f64) -> Verdict {
    match value {
        Some(v) if v <= 0.0 => Verdict::Miss,
        _ => at_most(value, limit),
    }
}

/// Pass when `value` is at least `floor`.
fn at_least(value: Option<f64>, floor: f64) -> Verdict {
    match value {
        None => Verdict::Missing,
        Some(v) if v >= floor => Verdict::Pass,
        Some(_) => Verdict::Miss,
    }
}

fn show(value: Option<f64>, unit: &str, decimals: usize) -> String {
    value.map_or_else(|| "n/a".into(), |v| format!("{v:.decimals$}{unit}"))
}

/// `65,000`
fn thousands(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A row of the reference fleet: not judged when `--scale-steps` left that size out.
fn reference_row(sizes: &Sizes, mut row: Row) -> Row {
    if !sizes.scale_steps.contains(&sizes.scale_reference) {
        row.result = format!(
            "not measured ({} is not among the steps)",
            thousands(sizes.scale_reference)
        );
        row.verdict = Verdict::NotJudged;
    }
    row
}

fn scale_rows(r: &Report, sizes: &Sizes) -> Vec<Row> {
    let load = |nodes: usize| r.load.get(&format!("scale {nodes}")).copied();
    let reference = sizes.scale_reference;
    let mut rows = vec![reference_row(
        sizes,
        Row {
            scenario: Scenario::Scale,
            measure: format!(
                "controller CPU, {} realistic nodes and their status reports ({:.0}/s)",
                thousands(reference),
                sizes.heartbeat_rate(reference)
            ),
            target: format!("<= {} % of one core", targets::CPU_PERCENT),
            result: show(r.controller_cpu_percent_5000, " % of one core", 1),
            load: load(reference),
            verdict: at_most(r.controller_cpu_percent_5000, targets::CPU_PERCENT),
        },
    )];
    for size in &r.promotion_latency {
        let within = size.p50_ms.median <= targets::P50_MS && size.p99_ms.median <= targets::P99_MS;
        rows.push(Row {
            scenario: Scenario::Scale,
            measure: format!(
                "promotion latency p50 / p99, {} nodes, status reports going on (median of {} \
                 batches of {} trials, min–max)",
                thousands(size.nodes),
                sizes.latency_batches,
                size.trials_per_batch
            ),
            target: format!("<= {} ms / <= {} ms", targets::P50_MS, targets::P99_MS),
            result: format!(
                "{} / {}",
                size.p50_ms.show(" ms", 1),
                size.p99_ms.show(" ms", 1)
            ),
            load: load(size.nodes),
            verdict: if within { Verdict::Pass } else { Verdict::Miss },
        });
    }
    for size in &r.promotion_latency {
        rows.push(Row {
            scenario: Scenario::Scale,
            measure: format!(
                "RebootPool status writes per second during the promotion trials, {} nodes",
                thousands(size.nodes)
            ),
            target: format!("> 0 and <= {} /s", targets::STATUS_WRITES_PER_SECOND),
            result: show(Some(size.status_writes_per_second), " /s", 2),
            load: load(size.nodes),
            verdict: some_and_at_most(
                Some(size.status_writes_per_second),
                targets::STATUS_WRITES_PER_SECOND,
            ),
        });
    }
    let steps: Vec<String> = sizes.scale_steps.iter().map(|n| thousands(*n)).collect();
    let stopped = r.scale_stopped.as_ref().map_or_else(String::new, |s| {
        format!(" ({} not held: {})", thousands(s.nodes), s.reason)
    });
    rows.push(Row {
        scenario: Scenario::Scale,
        measure: format!(
            "largest fleet measured on this machine within those targets (steps {})",
            steps.join(", ")
        ),
        target: format!(
            ">= {}; {} if the local control plane holds it",
            thousands(targets::LARGEST_FLEET),
            thousands(sizes.scale_large)
        ),
        result: r.nodes_scale_max.map_or_else(
            || "n/a".into(),
            |n| format!("{} nodes{stopped}", thousands(n as usize)),
        ),
        load: r.load.get("scale").copied(),
        verdict: at_least(
            r.nodes_scale_max.map(|n| n as f64),
            targets::LARGEST_FLEET as f64,
        ),
    });
    rows.push(reference_row(
        sizes,
        Row {
            scenario: Scenario::Scale,
            measure: format!("controller peak RSS, {} nodes", thousands(reference)),
            target: format!("<= {} MiB", targets::RSS_REFERENCE_MIB),
            result: show(r.controller_rss_mib_5000, " MiB", 1),
            load: load(reference),
            verdict: at_most(r.controller_rss_mib_5000, targets::RSS_REFERENCE_MIB),
        },
    ));
    rows.push(Row {
        scenario: Scenario::Scale,
        measure: format!(
            "controller peak RSS, {} nodes",
            thousands(sizes.scale_large)
        ),
        target: format!("<= {} MiB", targets::RSS_LARGE_MIB),
        result: r
            .controller_rss_65000_basis
            .clone()
            .unwrap_or_else(|| "n/a".into()),
        load: load(sizes.scale_large),
        verdict: at_most(r.controller_rss_mib_65000, targets::RSS_LARGE_MIB),
    });
    rows
}

fn requests_rows(r: &Report, sizes: &Sizes) -> Vec<Row> {
    let load = r.load.get("requests").copied();
    let row = |measure: String, limit: f64, value: Option<f64>, decimals: usize| Row {
        scenario: Scenario::Requests,
        measure,
        target: format!("<= {limit}"),
        result: show(value, "", decimals),
        load,
        verdict: at_most(value, limit),
    };
    vec![
        row(
            "API requests per reboot, controller + agent, drain off".into(),
            targets::REQUESTS_PER_REBOOT,
            r.requests_per_reboot,
            0,
        ),
        row(
            "API requests per reboot, drain on, no pod to evict".into(),
            targets::REQUESTS_PER_DRAINED_REBOOT,
            r.requests_per_drained_reboot,
            0,
        ),
        row(
            format!(
                "API requests added by each evicted pod (drain on, {} pods)",
                sizes.evicted_pods
            ),
            targets::REQUESTS_PER_EVICTED_POD,
            r.requests_per_evicted_pod,
            1,
        ),
    ]
}

fn makespan_rows(r: &Report, sizes: &Sizes) -> Vec<Row> {
    let load = r.load.get("makespan").copied();
    let ideal = r.makespan_ideal_s;
    vec![
        Row {
            scenario: Scenario::Makespan,
            measure: format!(
                "rolling makespan, {} nodes, max-unavailable {}, reboot {} s, drain off \
                 (median of {} runs, min–max)",
                sizes.makespan_nodes,
                sizes.makespan_max_unavailable,
                sizes.reboot.as_secs_f64(),
                sizes.makespan_runs
            ),
            target: format!(
                "<= {} x ideal ceil(N/k) x T = {}",
                targets::MAKESPAN_RATIO,
                show(ideal.map(|i| i * targets::MAKESPAN_RATIO), " s", 1)
            ),
            result: format!(
                "{} ({} x ideal {})",
                r.makespan.map_or_else(|| "n/a".into(), |m| m.show(" s", 1)),
                show(r.makespan_ratio, "", 2),
                show(ideal, " s", 0)
            ),
            load,
            verdict: at_most(r.makespan_ratio, targets::MAKESPAN_RATIO),
        },
        Row {
            scenario: Scenario::Makespan,
            measure: "where a slot's turnover goes (medians per node)".into(),
            target: "(no target)".into(),
            result: r
                .slot_turnover
                .as_ref()
                .map_or_else(|| "n/a".into(), |t| t.line()),
            load,
            verdict: if r.slot_turnover.is_some() {
                Verdict::NotJudged
            } else {
                Verdict::Missing
            },
        },
    ]
}

fn makespan_soak_row(r: &Report, sizes: &Sizes) -> Row {
    let ideal = r.makespan_soak_ideal_s;
    Row {
        scenario: Scenario::MakespanSoak,
        measure: format!(
            "rolling makespan with a soak, {} nodes, max-unavailable {}, reboot {} s, \
             --min-ready-seconds {}, drain off, until the last slot is released (median of {} \
             runs, min–max)",
            sizes.makespan_nodes,
            sizes.makespan_max_unavailable,
            sizes.reboot.as_secs_f64(),
            sizes.makespan_soak.as_secs(),
            sizes.makespan_runs
        ),
        target: format!(
            "<= {} x ideal ceil(N/k) x (T + soak) = {}",
            targets::MAKESPAN_RATIO,
            show(ideal.map(|i| i * targets::MAKESPAN_RATIO), " s", 1)
        ),
        result: format!(
            "{} ({} x ideal {})",
            r.makespan_soak
                .map_or_else(|| "n/a".into(), |m| m.show(" s", 1)),
            show(r.makespan_soak_ratio, "", 2),
            show(ideal, " s", 0)
        ),
        load: r.load.get("makespan_soak").copied(),
        verdict: at_most(r.makespan_soak_ratio, targets::MAKESPAN_RATIO),
    }
}

fn idle_rows(r: &Report, sizes: &Sizes) -> Vec<Row> {
    let load = r.load.get("idle").copied();
    vec![
        Row {
            scenario: Scenario::Idle,
            measure: format!("idle agent peak RSS ({} s)", sizes.idle.as_secs()),
            target: format!("<= {} MiB", targets::AGENT_RSS_MIB),
            result: show(r.agent_rss_mib, " MiB", 1),
            load,
            verdict: at_most(r.agent_rss_mib, targets::AGENT_RSS_MIB),
        },
        Row {
            scenario: Scenario::Idle,
            measure: "idle agent API requests per hour".into(),
            target: format!("<= {}", targets::AGENT_REQUESTS_PER_HOUR),
            result: show(r.agent_requests_per_hour, "", 1),
            load,
            verdict: at_most(r.agent_requests_per_hour, targets::AGENT_REQUESTS_PER_HOUR),
        },
    ]
}

impl Report {
    fn rows(&self, sizes: &Sizes) -> Vec<Row> {
        let quick = self.mode == "quick";
        let mut rows = scale_rows(self, sizes);
        rows.extend(requests_rows(self, sizes));
        rows.extend(makespan_rows(self, sizes));
        rows.push(makespan_soak_row(self, sizes));
        rows.extend(idle_rows(self, sizes));
        for row in &mut rows {
            if quick && !matches!(row.verdict, Verdict::Missing) {
                row.verdict = Verdict::NotJudged;
            }
        }
        rows
    }

    fn verdict(&self, row: &Row) -> &'static str {
        let not_run = self.not_run.contains(&format!("{:?}", row.scenario));
        match row.verdict {
            Verdict::Pass => "pass",
            Verdict::Miss => "**miss**",
            Verdict::NotJudged if self.mode == "quick" => "not judged (quick)",
            Verdict::NotJudged => "-",
            Verdict::Missing if not_run => "not run",
            Verdict::Missing => "**failed**",
        }
    }

    /// The markdown table, headed by the date, machine, commit and mode.
    pub fn table(&self, sizes: &Sizes) -> String {
        let mut out = format!(
            "Benchmark of {} on {}, commit {} ({} mode, {:.0} s).\n\n",
            self.date,
            self.machine.describe(),
            self.commit,
            self.mode,
            self.duration_s
        );
        out.push_str(
            "| measure | target | result | load (1-min avg) | pass/miss |\n|---|---|---|---|---|\n",
        );
        for row in self.rows(sizes) {
            let load = row.load.map_or_else(|| "-".into(), |l| l.show("", 2));
            out.push_str(&format!(
                "| {} | {} | {} | {} | {} |\n",
                row.measure,
                row.target,
                row.result,
                load,
                self.verdict(&row)
            ));
        }
        out
    }

    /// The targets missed (none in quick mode).
    pub fn misses(&self, sizes: &Sizes) -> Vec<String> {
        self.rows(sizes)
            .into_iter()
            .filter(|r| matches!(r.verdict, Verdict::Miss))
            .map(|r| r.measure)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thousands_are_separated() {
        assert_eq!(thousands(300), "300");
        assert_eq!(thousands(5_000), "5,000");
        assert_eq!(thousands(65_000), "65,000");
        assert_eq!(thousands(1_234_567), "1,234,567");
    }

    /// A pool whose status was never written did not keep it: no pass for a rate of 0.
    #[test]
    fn no_status_write_at_all_misses_the_status_target() {
        let limit = targets::STATUS_WRITES_PER_SECOND;
        assert_eq!(some_and_at_most(Some(0.0), limit), Verdict::Miss);
        assert_eq!(some_and_at_most(Some(0.5), limit), Verdict::Pass);
        assert_eq!(some_and_at_most(Some(limit + 0.5), limit), Verdict::Miss);
        assert_eq!(some_and_at_most(None, limit), Verdict::Missing);
    }

    #[test]
    fn a_full_report_without_figures_shows_failed_and_not_run() {
        let sizes = Sizes::full();
        let report = Report {
            mode: "full".into(),
            not_run: vec!["Idle".into()],
            ..Report::default()
        };
        let table = report.table(&sizes);
        assert!(
            table.contains("| idle agent API requests per hour | <= 15 | n/a | - | not run |"),
            "{table}"
        );
        assert!(table.contains("| **failed** |"), "{table}");
        assert!(report.misses(&sizes).is_empty());
    }

    #[test]
    fn the_reference_fleet_left_out_is_not_judged() {
        let sizes = Sizes {
            scale_steps: vec![1_000, 20_000],
            ..Sizes::full()
        };
        let report = Report {
            mode: "full".into(),
            ..Report::default()
        };
        let table = report.table(&sizes);
        assert!(
            table.contains("| not measured (5,000 is not among the steps) | - | - |"),
            "{table}"
        );
    }
}
