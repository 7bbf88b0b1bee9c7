//! The controller at scale: realistic Node objects (see [`crate::nodes`]) created directly
//! through the API in steps (1,000, 5,000, 20,000, 65,000), kubelet-like status reports going
//! on, and a fresh release controller at each step. At each step: its CPU over a window of
//! status reports (no reboot asked for), then promotion trials in batches, then its peak RSS
//! (VmHWM, the high-water mark since its start: the initial list, the reports and the trials).
//! The API server's and etcd's memory and the machine's load are recorded with each step.
//!
//! The steps stop at the first one the machine cannot hold (see [`crate::capacity`]): its
//! nodes would not fit in memory, would take too long to create, or the control plane failed
//! while they were created or measured. The reason is reported.

use super::{Cluster, Context, ControlPlaneMemory, ControllerSetup, start_controller};
use crate::{
    capacity::{self, Observed},
    identity,
    load::{Load, LoadSampler},
    nodes::{self, HeartbeatCounts, Heartbeats},
    procstat::{self, CpuWindow},
    promotion::{Batched, Promotions},
    stats::Line,
    targets,
};
use futures::{StreamExt, stream};
use serde::Serialize;
use std::time::{Duration, Instant};

const POOL: &str = "scale";
/// Node registrations in flight: enough to keep the API server's two cores busy.
const CREATE_CONCURRENCY: usize = 32;
/// The machine is looked at again after every so many nodes created.
const CHECK_EVERY: usize = 500;

/// How the nodes of a step were created.
#[derive(Debug, Clone, Serialize)]
pub struct Creation {
    /// Nodes created for this step (the earlier steps' nodes stay).
    pub nodes: usize,
    pub seconds: f64,
    pub per_second: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Step {
    pub nodes: usize,
    pub creation: Creation,
    /// The API server and etcd once the nodes were created, and at the step's end.
    pub control_plane_created: ControlPlaneMemory,
    pub control_plane_end: ControlPlaneMemory,
    pub available_gib_end: f64,
    pub controller: ControllerFigures,
    pub heartbeats: HeartbeatCounts,
    pub latency: Batched,
    /// Within the latency and memory targets (see [`targets::within`]).
    pub within: bool,
    pub load: Option<Load>,
    pub seconds: f64,
}

/// The controller's own figures at one fleet size.
#[derive(Debug, Clone, Serialize)]
pub struct ControllerFigures {
    /// VmHWM at the end: the peak since its start.
    pub peak_rss_mib: f64,
    /// VmRSS and VmHWM once it acts (its initial list done), VmRSS after the CPU window of
    /// status reports and at the end (after the trials).
    pub rss_ready_mib: f64,
    pub peak_ready_mib: f64,
    pub rss_after_updates_mib: f64,
    pub rss_after_mib: f64,
    pub cpu_percent: f64,
    /// The first trial, which may still include part of the controller's start.
    pub first_promotion_ms: f64,
    /// Writes of the pool's `RebootPool` status per second during the promotion trials (each
    /// trial changes the pool's counts twice): the status writes are coalesced to at most
    /// about one a second, whatever the pool's size.
    pub status_writes_per_second: f64,
}

/// The step the machine could not hold, and why.
#[derive(Debug, Clone, Serialize)]
pub struct Stop {
    pub nodes: usize,
    pub reason: String,
}

/// The controller's peak RSS at the large fleet: measured, or extrapolated by a line fitted
/// to the steps measured.
#[derive(Debug, Clone, Serialize)]
pub struct LargeFleetMemory {
    pub nodes: usize,
    pub mib: f64,
    pub measured: bool,
    /// MiB = intercept + slope x nodes, and the steps it was fitted to.
    pub fit: Option<Line>,
    pub fitted_to: Vec<usize>,
}

impl LargeFleetMemory {
    fn of(steps: &[Step], nodes: usize) -> Option<Self> {
        let points: Vec<(f64, f64)> = steps
            .iter()
            .map(|s| (s.nodes as f64, s.controller.peak_rss_mib))
            .collect();
        let fit = Line::fit(&points);
        let fitted_to = fit
            .map(|_| steps.iter().map(|s| s.nodes).collect())
            .unwrap_or_default();
        let measured = steps.iter().find(|s| s.nodes == nodes);
        let mib = match measured {
            Some(step) => step.controller.peak_rss_mib,
            None => fit?.at(nodes as f64),
        };
        Some(Self {
            nodes,
            mib,
            measured: measured.is_some(),
            fit,
            fitted_to,
        })
    }

    /// `212.0 MiB (measured)` or `180.3 MiB (extrapolated: 20.1 MiB + 2.46 MiB per 1,000
    /// nodes, fitted to 1000, 5000, 20000)`.
    pub fn show(&self) -> String {
        match (&self.fit, self.measured) {
            (_, true) => format!("{:.1} MiB (measured)", self.mib),
            (Some(fit), false) => {
                let to: Vec<String> = self.fitted_to.iter().map(usize::to_string).collect();
                format!(
                    "{:.1} MiB (extrapolated: {:.1} MiB + {:.2} MiB per 1,000 nodes, fitted to {} nodes)",
                    self.mib,
                    fit.intercept,
                    fit.slope * 1000.0,
                    to.join(", ")
                )
            }
            (None, false) => "n/a".into(),
        }
    }
}

#[derive(Debug, Serialize)]
pub struct Outcome {
    pub steps: Vec<Step>,
    /// The largest step such that it and every smaller one are within the targets.
    pub scale_max: u64,
    pub stopped: Option<Stop>,
    pub reference: Option<Step>,
    pub large: Option<LargeFleetMemory>,
}

impl Outcome {
    pub fn notes(&self) -> Vec<String> {
        let mut notes: Vec<String> = self.steps.iter().map(Step::note).collect();
        if let Some(stop) = &self.stopped {
            notes.push(format!(
                "Scale stopped at {} nodes: {}.",
                stop.nodes, stop.reason
            ));
        }
        notes
    }
}

impl Step {
    fn note(&self) -> String {
        format!(
            "Scale, {} nodes: created {} in {:.0} s ({:.0}/s); API server {:.0} MiB, etcd {:.0} MiB \
             (database {:.0} MiB); controller peak RSS {:.1} MiB, CPU {:.1} % during {:.1} status \
             reports/s ({:.1}/s sent); {:.2} RebootPool status writes/s; promotion p50 {}, p99 {}: \
             {} the targets; took {:.0} s.",
            self.nodes,
            self.creation.nodes,
            self.creation.seconds,
            self.creation.per_second,
            self.control_plane_end.apiserver_rss_mib,
            self.control_plane_end.etcd_rss_mib,
            self.control_plane_end.etcd_db_mib,
            self.controller.peak_rss_mib,
            self.controller.cpu_percent,
            self.heartbeats.rate,
            self.heartbeats.sent_per_second,
            self.controller.status_writes_per_second,
            self.latency.p50_ms.show(" ms", 1),
            self.latency.p99_ms.show(" ms", 1),
            if self.within { "within" } else { "not within" },
            self.seconds
        )
    }
}

pub async fn run(ctx: &Context, cluster: &Cluster) -> anyhow::Result<Outcome> {
    let sizes = &ctx.sizes;
    let mut created = 0;
    let mut steps: Vec<Step> = Vec::new();
    // The control plane before this scenario's nodes: the first step's growth is measured
    // from it, not from nothing (the API server's own start is not a cost per node).
    let mut history = vec![Observed {
        nodes: 0,
        memory: cluster.memory(),
        created_per_second: 0.0,
    }];
    let mut stopped = None;
    for &size in sizes.scale_steps.iter().filter(|&&s| s > 0) {
        if size <= created {
            tracing::warn!("scale: skipping {size} nodes, not more than the {created} before");
            continue;
        }
        let result = step(ctx, cluster, created, size, &history).await;
        let step = match result {
            Ok(step) => step,
            Err(reason) => {
                tracing::warn!("scale: stopped at {size} nodes: {reason}");
                stopped = Some(Stop {
                    nodes: size,
                    reason,
                });
                break;
            }
        };
        tracing::info!("{}", step.note());
        created = size;
        history.push(Observed {
            nodes: size,
            memory: step.control_plane_end,
            created_per_second: step.creation.per_second,
        });
        steps.push(step);
    }
    if steps.is_empty() {
        let why = stopped.map_or_else(|| "no scale step".into(), |s| s.reason);
        anyhow::bail!("no fleet size could be measured: {why}");
    }
    let scale_max = steps
        .iter()
        .take_while(|s| s.within)
        .last()
        .map_or(0, |s| s.nodes);
    Ok(Outcome {
        reference: steps
            .iter()
            .find(|s| s.nodes == sizes.scale_reference)
            .cloned(),
        large: LargeFleetMemory::of(&steps, sizes.scale_large),
        scale_max: scale_max as u64,
        stopped,
        steps,
    })
}

/// One fleet size: refused, created, measured; `Err` says why the machine could not hold it.
async fn step(
    ctx: &Context,
    cluster: &Cluster,
    created: usize,
    size: usize,
    history: &[Observed],
) -> Result<Step, String> {
    let sizes = &ctx.sizes;
    let available = procstat::available_gib().map_err(|e| format!("read /proc/meminfo: {e}"))?;
    let machine = capacity::Machine {
        available_gib: available,
        reserve_gib: sizes.memory_reserve_gib,
        create_limit: sizes.create_limit,
    };
    if let Some(reason) = capacity::refuse(history, size, machine) {
        return Err(reason);
    }
    let began = Instant::now();
    let load = LoadSampler::start();
    let creation = create(ctx, cluster, created, size).await?;
    let control_plane_created = cluster.memory();
    tracing::info!(
        "scale: {size} nodes in the API server ({} created in {:.0} s, {:.0}/s; API server {:.0} \
         MiB, etcd {:.0} MiB)",
        creation.nodes,
        creation.seconds,
        creation.per_second,
        control_plane_created.apiserver_rss_mib,
        control_plane_created.etcd_rss_mib
    );
    let all: Vec<String> = nodes::names(POOL, 1..size + 1)
        .into_iter()
        .map(|(_, n)| n)
        .collect();
    let heartbeats = Heartbeats::start(cluster.nodes(), all.clone(), sizes.heartbeat_rate(size));
    // The API server grows further while the reports go on: the measurement stops (dropping
    // the controller, which kills it) as soon as the machine cannot hold the step.
    let measured = tokio::select! {
        measured = measure(ctx, cluster, &all) => measured.map_err(|error| {
            // A control plane that failed is the reason, not what failed because of it.
            cluster.down().unwrap_or_else(|| format!("{error:#}"))
        }),
        why = watch_machine(cluster, sizes.memory_reserve_gib) => Err(why),
    };
    let heartbeats = heartbeats.finish();
    let (controller, latency) = measured?;
    Ok(Step {
        nodes: size,
        creation,
        control_plane_created,
        control_plane_end: cluster.memory(),
        available_gib_end: procstat::available_gib().unwrap_or(f64::NAN),
        within: targets::within(
            size,
            latency.p50_ms.median,
            latency.p99_ms.median,
            controller.peak_rss_mib,
        ),
        controller,
        heartbeats,
        latency,
        load: load.finish(),
        seconds: began.elapsed().as_secs_f64(),
    })
}

/// Creates nodes `created + 1 ..= size`, looking at the machine every [`CHECK_EVERY`] nodes;
/// `Err` says why it stopped.
async fn create(
    ctx: &Context,
    cluster: &Cluster,
    created: usize,
    size: usize,
) -> Result<Creation, String> {
    let sizes = &ctx.sizes;
    let began = Instant::now();
    let api = cluster.nodes();
    let registrations = nodes::names(POOL, created + 1..size + 1)
        .into_iter()
        .map(|(i, name)| nodes::register(api.clone(), i, name, POOL.to_owned()));
    let mut results = stream::iter(registrations).buffer_unordered(CREATE_CONCURRENCY);
    let mut done = 0;
    while let Some(result) = results.next().await {
        let now = created + done;
        let stopped = |why: String| format!("{why} (after {now} of {size} nodes)");
        if let Err(error) = result {
            return Err(stopped(cluster.down().unwrap_or_else(|| {
                format!("the API server refused a node: {error:#}")
            })));
        }
        done += 1;
        if done % CHECK_EVERY != 0 {
            continue;
        }
        held(cluster, sizes.memory_reserve_gib).map_err(stopped)?;
        if began.elapsed() > sizes.create_limit {
            return Err(stopped(format!(
                "creation time: more than {:.0} min",
                sizes.create_limit.as_secs_f64() / 60.0
            )));
        }
    }
    let seconds = began.elapsed().as_secs_f64();
    Ok(Creation {
        nodes: done,
        seconds,
        per_second: done as f64 / seconds.max(1e-3),
    })
}

/// Why the machine cannot hold the fleet, if it cannot: the control plane failed, or less memory
/// is available than is kept free.
fn held(cluster: &Cluster, reserve_gib: f64) -> Result<(), String> {
    if let Some(down) = cluster.down() {
        return Err(down);
    }
    let available = procstat::available_gib().unwrap_or(f64::INFINITY);
    if available < reserve_gib {
        let m = cluster.memory();
        return Err(format!(
            "memory: the machine had {available:.1} GiB left (API server {:.0} MiB, etcd \
             {:.0} MiB), less than the {reserve_gib:.1} GiB kept free",
            m.apiserver_rss_mib, m.etcd_rss_mib
        ));
    }
    Ok(())
}

/// Returns, with the reason, once the machine cannot hold the fleet.
async fn watch_machine(cluster: &Cluster, reserve_gib: f64) -> String {
    loop {
        if let Err(why) = held(cluster, reserve_gib) {
            return why;
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

/// The controller's figures at one size.
async fn measure(
    ctx: &Context,
    cluster: &Cluster,
    names: &[String],
) -> anyhow::Result<(ControllerFigures, Batched)> {
    let sizes = &ctx.sizes;
    // The pool is a RebootPool, run by a controller whose requests the audit log tells apart.
    super::pool_object(&cluster.admin, POOL, 1).await?;
    let dir = ctx.logs.join("identities");
    let identity = identity::service_account(
        &cluster.control_plane,
        &cluster.admin,
        "scale-controller",
        &dir,
    )
    .await?;
    let mut controller = start_controller(
        ctx,
        ControllerSetup {
            pool: POOL,
            kubeconfig: &identity.kubeconfig,
            max_unavailable: 1,
            drain: false,
        },
    )?;
    let pid = controller
        .pid()
        .ok_or_else(|| anyhow::anyhow!("the controller has no pid"))?;
    let promotions = Promotions::start(
        cluster.control_plane.client().await?,
        cluster.control_plane.client().await?,
        POOL,
        &common::pool::ledger_name(POOL),
    )
    .await?;
    super::controller_ready(
        &cluster.admin,
        &mut controller,
        POOL,
        Duration::from_secs(600),
    )
    .await?;
    let ready = procstat::memory(pid)?;
    let first = promotions.trial(&names[0], Duration::from_secs(60)).await?;
    // The later warm-up trials tell how long a trial takes at this size (with its clean-up
    // and the pause after it), for the budget of the timed ones.
    let warming = Instant::now();
    for i in 1..sizes.warmup_trials {
        promotions
            .trial(&names[i % names.len()], Duration::from_secs(30))
            .await?;
    }
    let each = match u32::try_from(sizes.warmup_trials.saturating_sub(1)) {
        Ok(n) if n > 0 => warming.elapsed() / n,
        _ => first,
    } + Duration::from_millis(35);
    let per_batch = sizes.batch_trials(each);
    // CPU over a window of status reports alone.
    let window = CpuWindow::start(pid)?;
    tokio::time::sleep(sizes.cpu_window).await;
    let cpu = window.percent()?;
    let after_updates = procstat::memory(pid)?;
    let trials_began = std::time::SystemTime::now();
    let latency = promotions
        .batches(
            names,
            (sizes.latency_batches, per_batch),
            sizes.batch_pause,
            || {
                anyhow::ensure!(
                    controller.is_running(),
                    "the controller exited: {}",
                    controller.log_tail(20)
                );
                Ok(())
            },
        )
        .await?;
    let memory = procstat::memory(pid)?;
    let trials_ended = std::time::SystemTime::now();
    let status_writes = cluster
        .audit
        .requests(&identity.user, trials_began, trials_ended)?
        .iter()
        .filter(|r| r.kind.label() == "patch rebootpools/status")
        .count();
    let trials_seconds = trials_ended
        .duration_since(trials_began)
        .unwrap_or_default()
        .as_secs_f64();
    controller.terminate(Duration::from_secs(5)).await;
    let figures = ControllerFigures {
        peak_rss_mib: memory.peak_mib,
        rss_ready_mib: ready.rss_mib,
        peak_ready_mib: ready.peak_mib,
        rss_after_updates_mib: after_updates.rss_mib,
        rss_after_mib: memory.rss_mib,
        cpu_percent: cpu,
        first_promotion_ms: first.as_secs_f64() * 1000.0,
        status_writes_per_second: status_writes as f64 / trials_seconds.max(1e-3),
    };
    Ok((figures, latency))
}
