//! The benchmark of issue 8 against the targets of DESIGN.md section 7, on the local control
//! plane of `testenv/` with the release builds of the controller and the agent.
//!
//! Two control planes run: one for the idle agent alone (measured for 10 minutes in the
//! background), one for everything else in turn: promotion latency, requests per reboot, the
//! rolling-reboot makespan, then the scale steps. Each scenario's pool of nodes has its own
//! label, controller (`--node-selector`) and ledger, so they cannot disturb each other.
//!
//! Output: a markdown table on stdout, `report.json` (the figures under the keys of the
//! issue, the machine, the commit) and `details.json` (every sample and breakdown) in
//! `target/bench/`, logs in `target/bench/logs/`.

pub mod audit;
pub mod identity;
pub mod nodes;
pub mod plan;
pub mod procstat;
pub mod promotion;
pub mod proxy;
pub mod report;
pub mod scenarios;

use anyhow::Context as _;
use clap::{Parser, ValueEnum};
use k8s_openapi::jiff::Timestamp;
use plan::Plan;
use report::{Machine, Report};
use scenarios::{Cluster, Context};
use std::{
    path::{Path, PathBuf},
    time::Instant,
};

/// Runs the benchmark scenarios of issue 8 on the local control plane and reports them
/// against the targets of DESIGN.md section 7.
#[derive(Debug, Clone, Parser)]
#[command(name = "bench")]
pub struct Args {
    /// Reduced sizes and a 20 s idle window, for CI: every figure is produced, none is judged.
    #[arg(long)]
    pub quick: bool,

    /// Directory of report.json, details.json and logs/ (default: <target dir>/bench).
    #[arg(long, env = "BENCH_OUT")]
    pub out: Option<PathBuf>,

    /// Do not build reboot-controller and reboot-agent first; use those next to this binary.
    #[arg(long)]
    pub no_build: bool,

    /// Run only these scenarios (for development; the others' figures are null).
    #[arg(long, value_enum, value_delimiter = ',')]
    pub only: Vec<Scenario>,

    /// Fleet sizes of the scale scenario, instead of the mode's (for development).
    #[arg(long, value_delimiter = ',')]
    pub scale_steps: Vec<usize>,

    /// Seconds the idle agent is measured, instead of the mode's (600 s, quick 20 s).
    #[arg(long)]
    pub idle_seconds: Option<u64>,

    /// One more flag for every controller (repeatable), e.g. `--controller-arg=--log-format=json`.
    #[arg(long = "controller-arg", allow_hyphen_values = true)]
    pub controller_args: Vec<String>,

    /// One more flag for every agent (repeatable).
    #[arg(long = "agent-arg", allow_hyphen_values = true)]
    pub agent_args: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Scenario {
    Latency,
    Requests,
    Makespan,
    Scale,
    Idle,
}

impl Args {
    fn runs(&self, scenario: Scenario) -> bool {
        self.only.is_empty() || self.only.contains(&scenario)
    }

    fn plan(&self) -> Plan {
        let mut plan = if self.quick {
            Plan::quick()
        } else {
            Plan::full()
        };
        if !self.scale_steps.is_empty() {
            plan.scale_steps = self.scale_steps.clone();
            if !plan.scale_steps.contains(&plan.scale_reference) {
                plan.scale_reference = *plan.scale_steps.iter().max().unwrap_or(&0);
            }
        }
        if let Some(secs) = self.idle_seconds {
            plan.idle = std::time::Duration::from_secs(secs);
        }
        plan
    }
}

/// The workspace this benchmark was built from.
pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf)
}

fn default_out() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| workspace().join("target"), PathBuf::from)
        .join("bench")
}

/// Builds the controller and the agent in the profile of this binary (release under
/// `cargo run --release`), so that what is measured is what the workspace holds now.
fn build_binaries() -> anyhow::Result<()> {
    let exe = std::env::current_exe()?;
    let profile = exe
        .parent()
        .and_then(Path::file_name)
        .and_then(|p| p.to_str())
        .unwrap_or_default()
        .to_owned();
    let mut args = vec!["build", "--quiet", "-p", "controller", "-p", "agent"];
    match profile.as_str() {
        "release" => args.insert(1, "--release"),
        "debug" => {}
        other => {
            tracing::warn!("running from target/{other}: not building the controller and agent");
            return Ok(());
        }
    }
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    tracing::info!("building the controller and the agent ({profile})");
    let status = std::process::Command::new(cargo)
        .args(&args)
        .current_dir(workspace())
        .status()
        .context("run cargo to build the controller and the agent")?;
    anyhow::ensure!(status.success(), "cargo {} failed", args.join(" "));
    Ok(())
}

/// A scenario's outcome, or why it failed (recorded; the run goes on and exits non-zero).
fn record<T: serde::Serialize>(
    name: &str,
    result: anyhow::Result<T>,
    details: &mut serde_json::Map<String, serde_json::Value>,
    errors: &mut Vec<String>,
) -> Option<T> {
    match result {
        Ok(outcome) => {
            details.insert(
                name.into(),
                serde_json::to_value(&outcome).unwrap_or_default(),
            );
            Some(outcome)
        }
        Err(error) => {
            let message = format!("{name}: {error:#}");
            tracing::error!("{message}");
            details.insert(name.into(), serde_json::json!({"error": message}));
            errors.push(message);
            None
        }
    }
}

/// Runs the benchmark; fails when a scenario failed (the report is written anyway).
pub async fn run(args: Args) -> anyhow::Result<()> {
    let started = Instant::now();
    let plan = args.plan();
    let out = args.out.clone().unwrap_or_else(default_out);
    let logs = out.join("logs");
    let _ = std::fs::remove_dir_all(&logs);
    std::fs::create_dir_all(&logs).with_context(|| format!("create {}", logs.display()))?;
    if !args.no_build {
        build_binaries()?;
    }
    let controller_bin = nodesim::workspace_binary("reboot-controller")?;
    let agent_bin = nodesim::workspace_binary("reboot-agent")?;
    let ctx = Context {
        plan: plan.clone(),
        controller_help: scenarios::help_of(&controller_bin),
        agent_help: scenarios::help_of(&agent_bin),
        controller_bin,
        agent_bin,
        logs,
        controller_args: args.controller_args.clone(),
        agent_args: args.agent_args.clone(),
    };
    tracing::info!(
        "bench ({} mode): controller {}, agent {}",
        if plan.quick { "quick" } else { "full" },
        ctx.controller_bin.display(),
        ctx.agent_bin.display()
    );

    // The idle agent's 10 minutes go on in the background, on a control plane of its own
    // (and a runtime of its own: the control plane's start is not a Send future).
    let idle = args.runs(Scenario::Idle).then(|| {
        let ctx = ctx.clone();
        std::thread::spawn(move || {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()?
                .block_on(scenarios::idle::run(&ctx))
        })
    });

    let mut report = Report::default();
    let mut details = serde_json::Map::new();
    let mut errors = Vec::new();
    let mut notes = Vec::new();
    let main = [
        Scenario::Latency,
        Scenario::Requests,
        Scenario::Makespan,
        Scenario::Scale,
    ];
    if main.iter().any(|s| args.runs(*s)) {
        match Cluster::start("main", &ctx.logs).await {
            Err(error) => errors.push(format!("main control plane: {error:#}")),
            Ok(cluster) => {
                if args.runs(Scenario::Latency) {
                    let result = scenarios::latency::run(&ctx, &cluster).await;
                    if let Some(o) = record("latency", result, &mut details, &mut errors) {
                        report.promotion_latency_p50_ms = Some(o.p50_ms);
                        report.promotion_latency_p99_ms = Some(o.p99_ms);
                    }
                }
                if args.runs(Scenario::Requests) {
                    let result = scenarios::requests::run(&ctx, &cluster).await;
                    if let Some(o) = record("requests", result, &mut details, &mut errors) {
                        report.requests_per_reboot = Some(o.per_reboot);
                        let each: Vec<String> = o
                            .reboots
                            .iter()
                            .map(|c| {
                                format!(
                                    "controller {} + agent {} (audit log: {} + {})",
                                    c.controller, c.agent, c.controller_audited, c.agent_audited
                                )
                            })
                            .collect();
                        notes.push(format!("Requests per reboot: {}.", each.join("; ")));
                    }
                }
                if args.runs(Scenario::Makespan) {
                    let result = scenarios::makespan::run(&ctx, &cluster).await;
                    if let Some(o) = record("makespan", result, &mut details, &mut errors) {
                        report.makespan_s = Some(o.makespan_s);
                        report.makespan_ideal_s = Some(o.ideal_s);
                        report.makespan_ratio = Some(o.ratio);
                    }
                }
                if args.runs(Scenario::Scale) {
                    let result = scenarios::scale::run(&ctx, &cluster).await;
                    if let Some(o) = record("scale", result, &mut details, &mut errors) {
                        report.nodes_scale_max = Some(o.scale_max);
                        for step in &o.steps {
                            notes.push(format!(
                                "Scale, {} nodes: controller peak RSS {:.1} MiB (RSS {:.1} MiB once \
                                 acting), CPU {:.1} % during {:.1} status updates/s, promotion p50 \
                                 {:.1} ms p99 {:.1} ms: {}.",
                                step.nodes,
                                step.controller_peak_rss_mib,
                                step.controller_rss_ready_mib,
                                step.controller_cpu_percent,
                                step.heartbeat_rate,
                                step.p50_ms,
                                step.p99_ms,
                                if step.passed { "within" } else { "not within" }
                            ));
                        }
                        if let Some(step) = &o.reference {
                            report.controller_rss_mib_5000 = Some(step.controller_peak_rss_mib);
                            report.controller_cpu_percent_5000 = Some(step.controller_cpu_percent);
                        }
                    }
                }
            }
        }
    }
    if let Some(idle) = idle {
        let result = tokio::task::spawn_blocking(move || idle.join())
            .await
            .map_err(anyhow::Error::from)
            .and_then(|joined| {
                joined.unwrap_or_else(|_| Err(anyhow::anyhow!("the idle scenario panicked")))
            });
        if let Some(o) = record("idle", result, &mut details, &mut errors) {
            report.agent_rss_mib = Some(o.peak_rss_mib);
            report.agent_requests_per_hour = Some(o.requests_per_hour);
            notes.push(format!(
                "Idle agent: {} requests in {:.0} s counted by its proxy, {} in the audit log \
                 (and {} at its start, not in the rate).",
                o.requests, o.window_s, o.audited_requests, o.startup_requests
            ));
        }
    }

    report.machine = Machine::this();
    report.commit = report::commit(&workspace());
    report.date = Timestamp::now().strftime("%Y-%m-%d").to_string();
    report.mode = if plan.quick { "quick" } else { "full" }.into();
    report.duration_s = started.elapsed().as_secs_f64().round();
    details.insert("errors".into(), serde_json::json!(errors));
    std::fs::write(
        out.join("report.json"),
        serde_json::to_string_pretty(&report)? + "\n",
    )?;
    std::fs::write(
        out.join("details.json"),
        serde_json::to_string_pretty(&details)? + "\n",
    )?;
    println!("{}", report.table(&plan));
    for note in &notes {
        println!("{note}");
    }
    let misses = report.misses(&plan);
    if !misses.is_empty() {
        println!("Targets missed: {}.", misses.join("; "));
    }
    println!(
        "Figures: {}; samples and breakdowns: {}",
        out.join("report.json").display(),
        out.join("details.json").display()
    );
    anyhow::ensure!(
        errors.is_empty(),
        "some scenarios failed:\n{}",
        errors.join("\n")
    );
    Ok(())
}
