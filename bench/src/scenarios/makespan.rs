//! Rolling reboot makespan: N simulated nodes with real agents, all requested at once,
//! `--max-unavailable k`, simulated reboot of T, drain off. The makespan runs from just before
//! the first request is written until a watcher sees the last node completed (reboot proven,
//! uncordoned, `reboot-last-completed` recorded); the ideal is ceil(N/k) x T. The same
//! watcher checks the budget: at no moment more than k nodes unavailable.

use super::{Cluster, Context, controller_ready, is_clean, start_controller};
use crate::nodes::POOL_LABEL;
use anyhow::Context as _;
use common::{AnnotationKeys, NodeFacts, Readiness};
use futures::{StreamExt, stream};
use k8s_openapi::api::core::v1::Node;
use kube::{
    Api,
    api::{Patch, PatchParams},
    runtime::{WatchStreamExt, watcher},
};
use nodesim::{Fleet, FleetConfig};
use serde::Serialize;
use serde_json::json;
use std::{
    collections::{BTreeMap, HashMap},
    time::Duration,
};
use tokio::{sync::watch, time::Instant};

const POOL: &str = "makespan";

#[derive(Debug, Serialize)]
pub struct Outcome {
    pub nodes: usize,
    pub max_unavailable: usize,
    pub reboot_s: f64,
    pub makespan_s: f64,
    pub ideal_s: f64,
    pub ratio: f64,
    /// Time to write every request.
    pub requests_written_s: f64,
    pub reboots: u32,
    pub max_unavailable_seen: usize,
    /// Seconds from the start at which each node completed, in order.
    pub completions_s: Vec<f64>,
}

#[derive(Debug, Clone, Default)]
struct Progress {
    completed: usize,
    unavailable: usize,
    max_unavailable: usize,
    completions: Vec<Instant>,
}

pub async fn run(ctx: &Context, cluster: &Cluster) -> anyhow::Result<Outcome> {
    let plan = &ctx.plan;
    let (n, k) = (plan.makespan_nodes, plan.makespan_max_unavailable);
    let cp = &cluster.control_plane;
    let dir = ctx.logs.join("makespan-nodes");
    let _ = std::fs::remove_dir_all(&dir);
    let mut config = FleetConfig::new(
        n,
        ctx.agent_bin.clone(),
        dir.clone(),
        cp.kubeconfig_path().to_path_buf(),
    );
    config.name_prefix = POOL.into();
    config.reboot_duration = plan.reboot;
    config.agent.args = ctx.agent_flags();
    config.labels = BTreeMap::from([(POOL_LABEL.to_owned(), POOL.to_owned())]);
    let fleet = Fleet::start(cluster.admin.clone(), config).await?;
    let names = fleet.names();
    let mut controller = start_controller(ctx, POOL, cp.kubeconfig_path(), k)?;

    // Every agent watching its node, the controller synced.
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        let watching = names
            .iter()
            .filter(|name| {
                std::fs::read_to_string(dir.join(name).join("agent.log"))
                    .is_ok_and(|log| log.contains("watching the node"))
            })
            .count();
        if watching == n {
            break;
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "only {watching} of {n} agents started within 180 s"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    controller_ready(
        &cluster.admin,
        &mut controller,
        POOL,
        Duration::from_secs(60),
    )
    .await?;
    tokio::time::sleep(Duration::from_secs(3)).await;

    let (progress_tx, mut progress) = watch::channel(Progress::default());
    let watch_client = cp.client().await?;
    let watcher_task = tokio::spawn(async move {
        let keys = AnnotationKeys::default();
        let config = watcher::Config::default().labels(&format!("{POOL_LABEL}={POOL}"));
        let stream = watcher(Api::<Node>::all(watch_client), config).touched_objects();
        futures::pin_mut!(stream);
        let mut seen: HashMap<String, (bool, bool)> = HashMap::new();
        while let Some(event) = stream.next().await {
            let Ok(node) = event else { continue };
            let facts = NodeFacts::from_node(&node);
            let done = is_clean(&node)
                && facts.readiness == Readiness::Ready
                && facts.annotations.contains_key(&keys.last_completed);
            let unavailable = nodesim::budget_watch::unavailable(&node, &keys);
            let was_done = seen.get(&facts.name).is_some_and(|s| s.0);
            seen.insert(facts.name.clone(), (done, unavailable));
            progress_tx.send_modify(|p| {
                p.completed = seen.values().filter(|s| s.0).count();
                p.unavailable = seen.values().filter(|s| s.1).count();
                p.max_unavailable = p.max_unavailable.max(p.unavailable);
                if done && !was_done {
                    p.completions.push(Instant::now());
                }
            });
        }
    });

    let nodes: Api<Node> = cluster.nodes();
    let request = json!({"metadata": {"annotations": {common::keys::REBOOT_NEEDED: "true"}}});
    let began = Instant::now();
    stream::iter(&names)
        .map(|name| {
            let (nodes, request) = (&nodes, request.clone());
            async move {
                nodes
                    .patch(name, &PatchParams::default(), &Patch::Merge(request))
                    .await
            }
        })
        .buffer_unordered(16)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<Result<Vec<_>, _>>()?;
    let written = began.elapsed();

    let ideal = (n.div_ceil(k)) as f64 * plan.reboot.as_secs_f64();
    let limit = Duration::from_secs_f64(ideal * 10.0 + 120.0);
    let done = tokio::time::timeout(limit, async {
        progress.wait_for(|p| p.completed == n).await.map(|_| ())
    })
    .await;
    let last = progress.borrow().clone();
    watcher_task.abort();
    let finished = match done {
        Ok(Ok(_)) => *last.completions.last().context("no completion recorded")?,
        _ => {
            anyhow::bail!(
                "only {} of {n} nodes completed within {limit:?}; controller log: {}",
                last.completed,
                controller.log_tail(20)
            )
        }
    };
    let makespan = finished.duration_since(began).as_secs_f64();
    let reboots = fleet.total_reboots();
    controller.terminate(Duration::from_secs(5)).await;
    fleet.stop().await;
    anyhow::ensure!(
        last.max_unavailable <= k,
        "the budget was exceeded: {} nodes unavailable at once with max-unavailable {k}",
        last.max_unavailable
    );
    let outcome = Outcome {
        nodes: n,
        max_unavailable: k,
        reboot_s: plan.reboot.as_secs_f64(),
        makespan_s: makespan,
        ideal_s: ideal,
        ratio: makespan / ideal,
        requests_written_s: written.as_secs_f64(),
        reboots,
        max_unavailable_seen: last.max_unavailable,
        completions_s: last
            .completions
            .iter()
            .map(|t| t.duration_since(began).as_secs_f64())
            .collect(),
    };
    tracing::info!(
        "makespan: {:.1} s for {n} nodes (ideal {ideal:.0} s, ratio {:.2}), {reboots} reboots",
        outcome.makespan_s,
        outcome.ratio
    );
    Ok(outcome)
}
