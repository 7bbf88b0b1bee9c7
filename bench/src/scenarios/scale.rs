//! The controller at scale: realistic Node objects (see [`crate::nodes`]) created directly
//! through the API in steps (1,000, 5,000, 10,000), kubelet-like status reports going on, and a
//! fresh release controller at each step. At each step: its CPU over a window of status updates
//! (no reboot asked for), then promotion trials, then its peak RSS (VmHWM, the high-water mark
//! since its start: the initial list, the updates and the trials). A step passes when the
//! peak RSS is <= 64 MiB and the promotion p99 < 100 ms; the largest step such that it and
//! every smaller one pass is `nodes_scale_max`. The reference step (5,000) always runs, for
//! `controller_rss_mib_5000` and `controller_cpu_percent_5000`; steps after a failed one do not.

use super::{Cluster, Context, start_controller};
use crate::{
    nodes::{self, Heartbeats},
    procstat::{self, CpuWindow},
    promotion::{Latencies, Promotions},
};
use serde::Serialize;
use std::{
    sync::atomic::Ordering,
    time::{Duration, Instant},
};

const POOL: &str = "scale";
const MEMORY_TARGET_MIB: f64 = 64.0;
const P99_TARGET_MS: f64 = 100.0;

#[derive(Debug, Clone, Serialize)]
pub struct Step {
    pub nodes: usize,
    pub create_s: f64,
    pub controller_peak_rss_mib: f64,
    /// VmRSS and VmHWM once the controller acts (its initial list done), after the CPU
    /// window of status updates, and at the end (after the trials).
    pub controller_rss_ready_mib: f64,
    pub controller_peak_ready_mib: f64,
    pub controller_rss_after_updates_mib: f64,
    pub controller_rss_after_mib: f64,
    pub controller_cpu_percent: f64,
    pub heartbeat_rate: f64,
    pub heartbeats_sent: u64,
    pub heartbeats_failed: u64,
    pub heartbeats_skipped: u64,
    pub first_promotion_ms: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub trials: usize,
    pub passed: bool,
    pub seconds: f64,
}

#[derive(Debug, Serialize)]
pub struct Outcome {
    pub steps: Vec<Step>,
    pub scale_max: u64,
    pub reference: Option<Step>,
}

pub async fn run(ctx: &Context, cluster: &Cluster) -> anyhow::Result<Outcome> {
    let plan = &ctx.plan;
    let api = cluster.nodes();
    let mut created = 0;
    let mut steps = Vec::new();
    let mut scale_max = 0;
    let mut all_passed = true;
    for &size in &plan.scale_steps {
        if !all_passed && size > plan.scale_reference {
            tracing::info!("scale: skipping {size} nodes, a smaller fleet failed already");
            break;
        }
        let began = Instant::now();
        let names = nodes::names(POOL, created + 1..size + 1);
        nodes::create(&api, &names, POOL, 32).await?;
        created = size;
        let create_s = began.elapsed().as_secs_f64();
        tracing::info!(
            "scale: {size} nodes in the API server ({create_s:.0} s to create {})",
            names.len()
        );
        let all: Vec<String> = nodes::names(POOL, 1..size + 1)
            .into_iter()
            .map(|(_, n)| n)
            .collect();
        let heartbeats = Heartbeats::start(api.clone(), all.clone(), plan.heartbeat_rate(size));
        let step = measure(ctx, cluster, size, &all, create_s).await;
        let rate = heartbeats.rate;
        let (sent, failed, skipped) = (
            heartbeats.sent.load(Ordering::Relaxed),
            heartbeats.failed.load(Ordering::Relaxed),
            heartbeats.skipped.load(Ordering::Relaxed),
        );
        heartbeats.stop();
        let mut step = step?;
        step.heartbeat_rate = rate;
        step.heartbeats_sent = sent;
        step.heartbeats_failed = failed;
        step.heartbeats_skipped = skipped;
        step.seconds = began.elapsed().as_secs_f64();
        tracing::info!(
            "scale: {size} nodes: controller peak RSS {:.1} MiB, CPU {:.1} %, promotion p50 {:.1} ms p99 {:.1} ms: {}",
            step.controller_peak_rss_mib,
            step.controller_cpu_percent,
            step.p50_ms,
            step.p99_ms,
            if step.passed { "pass" } else { "miss" }
        );
        all_passed &= step.passed;
        if all_passed {
            scale_max = size;
        }
        steps.push(step);
    }
    let reference = steps
        .iter()
        .find(|s| s.nodes == plan.scale_reference)
        .cloned();
    Ok(Outcome {
        steps,
        scale_max: scale_max as u64,
        reference,
    })
}

async fn measure(
    ctx: &Context,
    cluster: &Cluster,
    size: usize,
    names: &[String],
    create_s: f64,
) -> anyhow::Result<Step> {
    let plan = &ctx.plan;
    let mut controller = start_controller(ctx, POOL, cluster.control_plane.kubeconfig_path(), 1)?;
    let pid = controller
        .pid()
        .ok_or_else(|| anyhow::anyhow!("the controller has no pid"))?;
    let promotions = Promotions::start(
        cluster.control_plane.client().await?,
        cluster.control_plane.client().await?,
        POOL,
    )
    .await?;
    super::controller_ready(
        &cluster.admin,
        &mut controller,
        POOL,
        Duration::from_secs(300),
    )
    .await?;
    let ready = procstat::memory(pid)?;
    // The first trial may still include part of the controller's start.
    let first = promotions.trial(&names[0], Duration::from_secs(60)).await?;
    for i in 1..plan.warmup_trials {
        promotions
            .trial(&names[i % names.len()], Duration::from_secs(10))
            .await?;
    }
    // CPU over a window of status updates alone.
    let window = CpuWindow::start(pid)?;
    tokio::time::sleep(plan.cpu_window).await;
    let cpu = window.percent()?;
    let after_updates = procstat::memory(pid)?;
    let mut latencies = Latencies::default();
    for i in 0..plan.scale_trials {
        // Spread over the pool.
        let node = &names[(i * 7919 + 13) % names.len()];
        latencies.push(promotions.trial(node, Duration::from_secs(30)).await?);
        anyhow::ensure!(
            controller.is_running(),
            "the controller exited: {}",
            controller.log_tail(20)
        );
        tokio::time::sleep(Duration::from_millis(20 + (i as u64 * 7) % 30)).await;
    }
    let memory = procstat::memory(pid)?;
    controller.terminate(Duration::from_secs(5)).await;
    let p50 = latencies.percentile(50.0).unwrap_or(f64::NAN);
    let p99 = latencies.percentile(99.0).unwrap_or(f64::NAN);
    Ok(Step {
        nodes: size,
        create_s,
        controller_peak_rss_mib: memory.peak_mib,
        controller_rss_ready_mib: ready.rss_mib,
        controller_peak_ready_mib: ready.peak_mib,
        controller_rss_after_updates_mib: after_updates.rss_mib,
        controller_rss_after_mib: memory.rss_mib,
        controller_cpu_percent: cpu,
        heartbeat_rate: 0.0,
        heartbeats_sent: 0,
        heartbeats_failed: 0,
        heartbeats_skipped: 0,
        first_promotion_ms: first.as_secs_f64() * 1000.0,
        p50_ms: p50,
        p99_ms: p99,
        trials: plan.scale_trials,
        passed: memory.peak_mib <= MEMORY_TARGET_MIB && p99 < P99_TARGET_MS,
        seconds: 0.0,
    })
}
