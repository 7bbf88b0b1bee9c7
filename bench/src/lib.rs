//! The benchmark of the performance targets (docs/src/performance.md), on the
//! local control plane of `testenv/` with the release builds of the controller and the agent.
//!
//! Two control planes run, one after the other, so that no scenario shares the machine with
//! another: one for requests per reboot, the rolling-reboot makespan, then the scale steps
//! (which also measure the promotion latency at each size); then one for the idle agent alone,
//! measured for 10 minutes, on a control plane of its own: beside the others it slows the
//! makespan's hand-offs, writes of a few milliseconds each (21.3 s instead of 20.9 s).
//! Each scenario's pool of nodes has its own label, controller (`--node-selector`) and ledger,
//! so they cannot disturb each other. The machine's load is recorded during each scenario.
//!
//! Output: a markdown table on stdout, `report.json` (the figures, the machine, the commit)
//! and `details.json` (every sample and breakdown) in `target/bench/`, logs in
//! `target/bench/logs/`.

pub mod audit;
pub mod capacity;
pub mod identity;
pub mod load;
pub mod machine;
pub mod nodes;
pub mod pods;
pub mod procstat;
pub mod promotion;
pub mod report;
pub mod scenarios;
pub mod sizes;
pub mod stats;
pub mod table;
pub mod targets;
pub mod turnover;

use anyhow::Context as _;
use clap::{Parser, ValueEnum};
use k8s_openapi::jiff::Timestamp;
use load::{Load, LoadSampler};
use machine::Machine;
use report::Report;
use scenarios::{Cluster, Context};
use sizes::Sizes;
use std::{
    path::{Path, PathBuf},
    time::Instant,
};

/// Runs the benchmark scenarios on the local control plane and reports them against the
/// targets of docs/src/performance.md.
#[derive(Debug, Clone, Parser)]
#[command(name = "bench")]
pub struct Args {
    /// Reduced sizes and a 20 s idle window, for CI: every figure is produced, none is judged.
    #[arg(long)]
    pub quick: bool,

    /// Directory of report.json, details.json and logs/ (default: <target dir>/bench).
    #[arg(long, env = "BENCH_OUT")]
    pub out: Option<PathBuf>,

    /// Do not build reboot-controller and reboot-agent first: a release run uses the static
    /// ones of `make static`, a debug run those next to this binary.
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

/// The scenarios; the promotion latency is measured at each fleet size of `scale`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Scenario {
    Requests,
    Makespan,
    /// The rolling reboot with a soak after each node (`--min-ready-seconds`).
    MakespanSoak,
    Scale,
    Idle,
}

impl Args {
    fn runs(&self, scenario: Scenario) -> bool {
        self.only.is_empty() || self.only.contains(&scenario)
    }

    fn sizes(&self) -> Sizes {
        let mut sizes = if self.quick {
            Sizes::quick()
        } else {
            Sizes::full()
        };
        if !self.scale_steps.is_empty() {
            // Without the reference size among them, its rows say so rather than judge
            // another size against its targets.
            sizes.scale_steps = self.scale_steps.clone();
        }
        if let Some(secs) = self.idle_seconds {
            sizes.idle = std::time::Duration::from_secs(secs);
        }
        sizes
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

/// The target of the images' binaries, as the Makefile's `STATIC_TARGET`.
fn static_target() -> String {
    format!("{}-unknown-linux-gnu", std::env::consts::ARCH)
}

/// Where the controller and the agent to measure are. A release run (`make bench`)
/// measures what the images ship: the static binaries that `make static` builds (glibc linked
/// in, no dynamic loader; an agent starts with 15 % less CPU and 1 MiB less RSS than the
/// dynamic build). It builds them first unless `no_build`. A debug run (the quick mode under
/// `cargo test`) uses the debug binaries of the workspace: `None`.
fn static_binaries_dir(no_build: bool) -> anyhow::Result<Option<PathBuf>> {
    let exe = std::env::current_exe()?;
    let dir = exe.parent().map(Path::to_path_buf).unwrap_or_default();
    if dir.file_name().and_then(|p| p.to_str()) != Some("release") {
        return Ok(None);
    }
    let target = static_target();
    let static_dir = dir
        .parent()
        .map_or_else(|| PathBuf::from("target"), Path::to_path_buf)
        .join(&target)
        .join("release");
    if no_build {
        return Ok(Some(static_dir));
    }
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    tracing::info!("building the controller and the agent (release, static, {target})");
    let status = std::process::Command::new(cargo)
        .args([
            "build",
            "--quiet",
            "--release",
            "--locked",
            "--target",
            &target,
        ])
        .args(["-p", "controller", "-p", "agent"])
        .env("RUSTFLAGS", "-C target-feature=+crt-static")
        .current_dir(workspace())
        .status()
        .context("run cargo to build the controller and the agent")?;
    anyhow::ensure!(
        status.success(),
        "cargo build of the static binaries failed"
    );
    Ok(Some(static_dir))
}

/// `name` in the static binaries' `dir` (else the workspace's), or where `<NAME>_BIN` points.
fn binary(dir: Option<&Path>, name: &str) -> anyhow::Result<PathBuf> {
    Ok(match dir {
        None => nodesim::workspace_binary(name)?,
        Some(dir) => nodesim::binary_in(
            &[dir],
            name,
            "run `make static` (or `make bench` without --no-build)",
        )?,
    })
}

/// What the scenarios produced so far: the report, every detail, the notes under the table,
/// and the scenarios that failed (recorded; the run goes on and exits non-zero).
#[derive(Debug, Default)]
struct Outcomes {
    report: Report,
    details: serde_json::Map<String, serde_json::Value>,
    notes: Vec<String>,
    errors: Vec<String>,
}

impl Outcomes {
    /// Records a scenario's outcome, or why it failed, and the load during it.
    fn record<T: serde::Serialize>(
        &mut self,
        name: &str,
        (result, load): (anyhow::Result<T>, Option<Load>),
    ) -> Option<T> {
        if let Some(load) = load {
            self.report.load.insert(name.into(), load);
        }
        match result {
            Ok(outcome) => {
                let value = serde_json::to_value(&outcome).unwrap_or_default();
                self.details.insert(name.into(), value);
                Some(outcome)
            }
            Err(error) => {
                let message = format!("{name}: {error:#}");
                tracing::error!("{message}");
                self.details
                    .insert(name.into(), serde_json::json!({"error": message}));
                self.errors.push(message);
                None
            }
        }
    }

    /// The scenarios on the main control plane, in turn.
    async fn main(&mut self, args: &Args, ctx: &Context, cluster: &Cluster) {
        if args.runs(Scenario::Requests) {
            let result = sampled(scenarios::requests::run(ctx, cluster)).await;
            if let Some(o) = self.record("requests", result) {
                self.report.requests(&o);
                self.notes.extend(o.notes());
            }
        }
        if args.runs(Scenario::Makespan) {
            let result = sampled(scenarios::makespan::run(ctx, cluster)).await;
            if let Some(o) = self.record("makespan", result) {
                self.report.makespan(&o);
            }
        }
        if args.runs(Scenario::MakespanSoak) {
            let result = sampled(scenarios::makespan::run_with_soak(ctx, cluster)).await;
            if let Some(o) = self.record("makespan_soak", result) {
                self.report.makespan_soak(&o);
            }
        }
        if args.runs(Scenario::Scale) {
            let result = sampled(scenarios::scale::run(ctx, cluster)).await;
            if let Some(o) = self.record("scale", result) {
                self.report.scale(&o);
                self.notes.extend(o.notes());
            }
        }
    }

    /// The idle agent on a control plane of its own, once the main one is stopped.
    async fn idle(&mut self, ctx: &Context) {
        let result = sampled(scenarios::idle::run(ctx)).await;
        if let Some(o) = self.record("idle", result) {
            self.report.idle(&o);
            self.notes.push(format!(
                "Idle agent: {} requests in {:.0} s (and {} at its start, not in the rate).",
                o.requests, o.window_s, o.startup_requests
            ));
        }
    }
}

/// A scenario's result with the machine's load while it ran.
type Sampled<T> = (anyhow::Result<T>, Option<Load>);

async fn sampled<T>(scenario: impl std::future::Future<Output = anyhow::Result<T>>) -> Sampled<T> {
    let load = LoadSampler::start();
    let result = scenario.await;
    (result, load.finish())
}

/// Runs the benchmark; fails when a scenario failed (the report is written anyway).
pub async fn run(args: Args) -> anyhow::Result<()> {
    let started = Instant::now();
    let sizes = args.sizes();
    let out = args.out.clone().unwrap_or_else(default_out);
    let logs = out.join("logs");
    let _ = std::fs::remove_dir_all(&logs);
    std::fs::create_dir_all(&logs).with_context(|| format!("create {}", logs.display()))?;
    let dir = static_binaries_dir(args.no_build)?;
    let controller_bin = binary(dir.as_deref(), "reboot-controller")?;
    let agent_bin = binary(dir.as_deref(), "reboot-agent")?;
    let ctx = Context {
        sizes: sizes.clone(),
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
        if sizes.quick { "quick" } else { "full" },
        ctx.controller_bin.display(),
        ctx.agent_bin.display()
    );
    let mut outcomes = Outcomes::default();
    let main = [
        Scenario::Requests,
        Scenario::Makespan,
        Scenario::MakespanSoak,
        Scenario::Scale,
    ];
    if main.iter().any(|s| args.runs(*s)) {
        match Cluster::start("main", &ctx.logs).await {
            Err(error) => outcomes
                .errors
                .push(format!("main control plane: {error:#}")),
            // Dropped at the end of its arm: stopped before the idle agent's starts.
            Ok(cluster) => outcomes.main(&args, &ctx, &cluster).await,
        }
    }
    if args.runs(Scenario::Idle) {
        outcomes.idle(&ctx).await;
    }
    outcomes.report.not_run = Scenario::value_variants()
        .iter()
        .filter(|s| !args.runs(**s))
        .map(|s| format!("{s:?}"))
        .collect();
    write(outcomes, &sizes, &out, started)
}

/// Writes report.json and details.json, prints the table and its notes.
fn write(outcomes: Outcomes, sizes: &Sizes, out: &Path, started: Instant) -> anyhow::Result<()> {
    let Outcomes {
        mut report,
        mut details,
        notes,
        errors,
    } = outcomes;
    report.machine = Machine::this();
    report.commit = machine::commit(&workspace());
    report.date = Timestamp::now().strftime("%Y-%m-%d").to_string();
    report.mode = if sizes.quick { "quick" } else { "full" }.into();
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
    println!("{}", report.table(sizes));
    for note in &notes {
        println!("{note}");
    }
    let misses = report.misses(sizes);
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
