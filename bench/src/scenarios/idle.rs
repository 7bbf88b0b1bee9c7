//! One idle agent, on a control plane of its own: its peak RSS and its API requests per hour.
//! The agent runs as in a cluster (the release binary, its own ServiceAccount), on a realistic
//! Node that gets a kubelet-like status report every 10 s (so the agent's watch delivers
//! events it must ignore); its requests are counted by the API server's audit log. After a
//! warm-up (until the agent has opened its watch, plus 2 s) its requests are counted over the
//! measured window: the requests of its start (list, watch) are reported apart, as they are
//! not a rate.

use super::{Cluster, Context};
use crate::{audit, identity, nodes, procstat};
use serde::Serialize;
use std::{
    collections::BTreeMap,
    time::{Duration, Instant, SystemTime},
};
use tokio::process::Command;

const POOL: &str = "idle";

#[derive(Debug, Serialize)]
pub struct Outcome {
    pub window_s: f64,
    pub peak_rss_mib: f64,
    pub rss_at_end_mib: f64,
    pub startup_requests: usize,
    pub requests: usize,
    pub requests_per_hour: f64,
    /// Seconds into the window of each counted request, with what it was.
    pub timeline: Vec<(f64, String)>,
    pub breakdown: BTreeMap<String, usize>,
}

pub async fn run(ctx: &Context) -> anyhow::Result<Outcome> {
    let cluster = Cluster::start("idle", &ctx.logs).await?;
    let result = measure(ctx, &cluster).await;
    drop(cluster);
    result
}

async fn measure(ctx: &Context, cluster: &Cluster) -> anyhow::Result<Outcome> {
    let dir = ctx.logs.join("idle");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let identity =
        identity::service_account(&cluster.control_plane, &cluster.admin, "idle-agent", &dir)
            .await?;
    let node = format!("{POOL}-1");
    nodes::create(&cluster.nodes(), &[(1, node.clone())], POOL, 1).await?;
    let boot_id = dir.join("boot_id");
    std::fs::write(&boot_id, "bench-idle-boot\n")?;
    let log = std::fs::File::create(dir.join("agent.log"))?;
    let mut agent = Command::new(&ctx.agent_bin)
        .arg("--node-name")
        .arg(&node)
        .arg("--boot-id-file")
        .arg(&boot_id)
        .args([
            "--reboot-method",
            "command",
            "--host-mount-namespace",
            "false",
        ])
        .arg("--reboot-command")
        .arg(format!("touch {}", dir.join("reboot-requested").display()))
        .args(ctx.agent_flags())
        .env("KUBECONFIG", &identity.kubeconfig)
        .env("RUST_LOG", "info")
        .stdout(log.try_clone()?)
        .stderr(log)
        .kill_on_drop(true)
        .spawn()?;
    let pid = agent
        .id()
        .ok_or_else(|| anyhow::anyhow!("the agent has no pid"))?;
    // A status report every 10 s, as a kubelet whose node keeps changing would send.
    let heartbeats = nodes::Heartbeats::start(cluster.nodes(), vec![node.clone()], 0.1);

    let deadline = Instant::now() + Duration::from_secs(120);
    while !cluster
        .audit
        .sent_since(&identity.user, "watch nodes", SystemTime::UNIX_EPOCH)?
    {
        anyhow::ensure!(
            Instant::now() < deadline,
            "the agent did not open its watch within 120 s"
        );
        anyhow::ensure!(
            agent.try_wait()?.is_none(),
            "the agent exited; see {}",
            dir.join("agent.log").display()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let from = SystemTime::now();
    let began = Instant::now();
    tracing::info!("idle: measuring the agent for {:?}", ctx.sizes.idle);
    while began.elapsed() < ctx.sizes.idle {
        anyhow::ensure!(
            agent.try_wait()?.is_none(),
            "the agent exited during the idle window; see {}",
            dir.join("agent.log").display()
        );
        let left = ctx.sizes.idle.saturating_sub(began.elapsed());
        tokio::time::sleep(left.min(Duration::from_secs(5))).await;
    }
    let to = SystemTime::now();
    let window = began.elapsed().as_secs_f64();
    let memory = procstat::memory(pid)?;
    heartbeats.stop();
    let _ = agent.kill().await;

    let counted = cluster.audit.requests(&identity.user, from, to)?;
    let startup = cluster
        .audit
        .requests(&identity.user, SystemTime::UNIX_EPOCH, from)?
        .len();
    let outcome = Outcome {
        window_s: window,
        peak_rss_mib: memory.peak_mib,
        rss_at_end_mib: memory.rss_mib,
        startup_requests: startup,
        requests: counted.len(),
        requests_per_hour: counted.len() as f64 * 3600.0 / window,
        timeline: counted
            .iter()
            .map(|a| {
                let at = a.at.duration_since(from).unwrap_or_default().as_secs_f64();
                (at, a.kind.label())
            })
            .collect(),
        breakdown: audit::breakdown(&counted),
    };
    tracing::info!(
        "idle: agent peak RSS {:.1} MiB, {} requests in {:.0} s ({:.1}/h)",
        outcome.peak_rss_mib,
        outcome.requests,
        window,
        outcome.requests_per_hour,
    );
    Ok(outcome)
}
