//! Promotion latency on an idle fleet, drain off: the time from writing `reboot-needed` to a
//! watcher seeing `reboot-now`. The nodes are realistic Node objects without agents (the
//! controller needs only Nodes), so nothing reboots; each trial is cancelled and cleaned up
//! before the next (see [`crate::promotion`]).

use super::{Cluster, Context, start_controller};
use crate::{
    nodes,
    promotion::{Latencies, Promotions},
};
use serde::Serialize;
use std::time::{Duration, Instant};

const POOL: &str = "latency";

#[derive(Debug, Serialize)]
pub struct Outcome {
    pub nodes: usize,
    pub trials: usize,
    pub warmup_trials: usize,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    pub controller_peak_rss_mib: f64,
    /// Each trial's time from the write to the sight of `reboot-now`.
    pub samples_ms: Vec<f64>,
    /// How long the write of `reboot-needed` itself took (included in the sample), p50.
    pub write_p50_ms: f64,
    pub write_samples_ms: Vec<f64>,
    pub seconds: f64,
}

pub async fn run(ctx: &Context, cluster: &Cluster) -> anyhow::Result<Outcome> {
    let began = Instant::now();
    let plan = &ctx.plan;
    let names = nodes::names(POOL, 1..plan.latency_nodes + 1);
    nodes::create(&cluster.nodes(), &names, POOL, 16).await?;
    let mut controller = start_controller(ctx, POOL, cluster.control_plane.kubeconfig_path(), 1)?;
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
        Duration::from_secs(120),
    )
    .await?;
    for i in 0..plan.warmup_trials {
        let within = if i == 0 { 60 } else { 10 };
        promotions
            .trial(&names[i % names.len()].1, Duration::from_secs(within))
            .await?;
    }
    let mut latencies = Latencies::default();
    let mut writes = Latencies::default();
    for i in 0..plan.latency_trials {
        let node = &names[i % names.len()].1;
        let latency = promotions.timed_trial(node, Duration::from_secs(10)).await;
        anyhow::ensure!(
            controller.is_running(),
            "the controller exited: {}",
            controller.log_tail(20)
        );
        let (latency, write) = latency?;
        latencies.push(latency);
        writes.push(write);
        // A short, varying pause: the controller finishes the cancel (Events) and trials do
        // not fall in step with anything periodic.
        tokio::time::sleep(Duration::from_millis(20 + (i as u64 * 7) % 30)).await;
    }
    let memory = controller
        .pid()
        .and_then(|pid| crate::procstat::memory(pid).ok())
        .unwrap_or_default();
    controller.terminate(Duration::from_secs(5)).await;
    let p = |q| latencies.percentile(q).unwrap_or(f64::NAN);
    let outcome = Outcome {
        nodes: plan.latency_nodes,
        trials: plan.latency_trials,
        warmup_trials: plan.warmup_trials,
        p50_ms: p(50.0),
        p90_ms: p(90.0),
        p99_ms: p(99.0),
        max_ms: p(100.0),
        controller_peak_rss_mib: memory.peak_mib,
        samples_ms: latencies.samples_ms,
        write_p50_ms: writes.percentile(50.0).unwrap_or(f64::NAN),
        write_samples_ms: writes.samples_ms,
        seconds: began.elapsed().as_secs_f64(),
    };
    tracing::info!(
        "latency: p50 {:.1} ms, p99 {:.1} ms over {} trials",
        outcome.p50_ms,
        outcome.p99_ms,
        outcome.trials
    );
    Ok(outcome)
}
