//! Rolling reboot makespan: N simulated nodes with real agents, all requested at once,
//! `--max-unavailable k`, simulated reboot of T, drain off. The makespan runs from just before
//! the first request is written until a watcher sees the last node completed (reboot proven,
//! uncordoned, a new `reboot-last-completed`); the ideal is ceil(N/k) x T. With a soak
//! (`--min-ready-seconds`, [`run_with_soak`]) a node keeps its slot for the soak after its
//! completion: the makespan then runs until the last slot is released, and the ideal is
//! ceil(N/k) x (T + soak); a controller that noticed the end of a soak only at a periodic
//! resync would show here. The whole pool is
//! rebooted several times with the same nodes and controller: the makespan is the median of the
//! runs, with their range. The same watcher checks the budget (at no moment more than k nodes
//! unavailable) and, with a watch of the ledger, records when each node reached each step of
//! the protocol (see [`crate::turnover`]).

use super::{Cluster, Context, ControllerSetup, controller_ready, ledger_name, start_controller};
use crate::{
    nodes::POOL_LABEL,
    stats::Spread,
    turnover::{self, Sightings, Step, Turnover},
};
use anyhow::Context as _;
use common::AnnotationKeys;
use futures::{StreamExt, stream};
use k8s_openapi::api::{coordination::v1::Lease, core::v1::Node};
use kube::{
    Api, Client,
    api::{Patch, PatchParams},
    runtime::watcher,
};
use nodesim::{ControllerProcess, Fleet, FleetConfig, sandbox::OPERATOR_NAMESPACE};
use serde::Serialize;
use serde_json::json;
use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    sync::Arc,
    time::Duration,
};
use tokio::{sync::watch, task::JoinHandle, time::Instant};

/// The pool of the scenario, and of the one with a soak.
const POOL: &str = "makespan";
const SOAK_POOL: &str = "makespan-soak";

/// Which of the two runs: its pool, and the soak of its controller (zero for none).
#[derive(Debug, Clone, Copy)]
struct Setup {
    pool: &'static str,
    soak: Duration,
}

/// One reboot of the whole pool.
#[derive(Debug, Serialize)]
pub struct Run {
    pub makespan_s: f64,
    /// Time to write every request.
    pub requests_written_s: f64,
    pub max_unavailable_seen: usize,
    /// Seconds from the start at which each node completed, in order.
    pub completions_s: Vec<f64>,
    pub turnover: Option<Turnover>,
}

#[derive(Debug, Serialize)]
pub struct Outcome {
    pub nodes: usize,
    pub max_unavailable: usize,
    pub reboot_s: f64,
    /// The controller's `--min-ready-seconds` (0: none, the makespan ends at the last
    /// completion).
    pub soak_s: f64,
    pub ideal_s: f64,
    pub makespan_s: Spread,
    pub ratio: Spread,
    pub reboots: u32,
    /// The runs together.
    pub turnover: Option<Turnover>,
    pub runs: Vec<Run>,
}

pub async fn run(ctx: &Context, cluster: &Cluster) -> anyhow::Result<Outcome> {
    let setup = Setup {
        pool: POOL,
        soak: Duration::ZERO,
    };
    run_setup(ctx, cluster, setup).await
}

/// The same with the soak of the sizes (`--min-ready-seconds`), on a pool of its own.
pub async fn run_with_soak(ctx: &Context, cluster: &Cluster) -> anyhow::Result<Outcome> {
    let setup = Setup {
        pool: SOAK_POOL,
        soak: ctx.sizes.makespan_soak,
    };
    let mut ctx = ctx.clone();
    ctx.controller_args
        .push(format!("--min-ready-seconds={}", setup.soak.as_secs()));
    run_setup(&ctx, cluster, setup).await
}

async fn run_setup(ctx: &Context, cluster: &Cluster, setup: Setup) -> anyhow::Result<Outcome> {
    let sizes = &ctx.sizes;
    let (n, k) = (sizes.makespan_nodes, sizes.makespan_max_unavailable);
    let (fleet, mut controller) = start(ctx, cluster, setup).await?;
    let names = fleet.names();
    let mut runs = Vec::new();
    let mut sightings = Vec::new();
    for r in 1..=sizes.makespan_runs {
        let (run, seen) = one_run(ctx, cluster, &names, &mut controller, setup).await?;
        tracing::info!(
            "{}, run {r}: {:.1} s for {n} nodes{}",
            setup.pool,
            run.makespan_s,
            run.turnover
                .as_ref()
                .map(|t| format!("; {}", t.line()))
                .unwrap_or_default()
        );
        runs.push(run);
        sightings.push(seen);
    }
    let reboots = fleet.total_reboots();
    controller.terminate(Duration::from_secs(5)).await;
    fleet.stop().await;
    let ideal = ideal_s(sizes, setup);
    let makespans: Vec<f64> = runs.iter().map(|r| r.makespan_s).collect();
    let ratios: Vec<f64> = makespans.iter().map(|m| m / ideal).collect();
    Ok(Outcome {
        nodes: n,
        max_unavailable: k,
        reboot_s: sizes.reboot.as_secs_f64(),
        soak_s: setup.soak.as_secs_f64(),
        ideal_s: ideal,
        makespan_s: Spread::of(&makespans).context("no makespan run")?,
        ratio: Spread::of(&ratios).context("no makespan run")?,
        reboots,
        turnover: Turnover::of(&sightings, k),
        runs,
    })
}

/// ceil(N/k) x (T + soak): every slot busy all the time, no hand-off costing anything.
fn ideal_s(sizes: &crate::sizes::Sizes, setup: Setup) -> f64 {
    let waves = sizes
        .makespan_nodes
        .div_ceil(sizes.makespan_max_unavailable.max(1));
    waves as f64 * (sizes.reboot + setup.soak).as_secs_f64()
}

/// The fleet with every agent watching its node, and the controller acting.
async fn start(
    ctx: &Context,
    cluster: &Cluster,
    setup: Setup,
) -> anyhow::Result<(Fleet, ControllerProcess)> {
    let sizes = &ctx.sizes;
    let pool = setup.pool;
    let n = sizes.makespan_nodes;
    let cp = &cluster.control_plane;
    let dir = ctx.logs.join(format!("{pool}-nodes"));
    let _ = std::fs::remove_dir_all(&dir);
    let mut config = FleetConfig::new(
        n,
        ctx.agent_bin.clone(),
        dir.clone(),
        cp.kubeconfig_path().to_path_buf(),
    );
    config.name_prefix = pool.into();
    config.reboot_duration = sizes.reboot;
    config.agent.args = ctx.agent_flags();
    config.labels = BTreeMap::from([(POOL_LABEL.to_owned(), pool.to_owned())]);
    let fleet = Fleet::start(cluster.admin.clone(), config).await?;
    let mut controller = start_controller(
        ctx,
        ControllerSetup {
            pool,
            kubeconfig: cp.kubeconfig_path(),
            max_unavailable: sizes.makespan_max_unavailable,
            drain: false,
        },
    )?;
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        let watching = fleet
            .names()
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
        pool,
        Duration::from_secs(60),
    )
    .await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    Ok((fleet, controller))
}

/// What the watches saw of one run.
#[derive(Debug, Clone, Default)]
struct Progress {
    nodes_listed: bool,
    ledger_listed: bool,
    /// `reboot-last-completed` of each node when the run began.
    before: HashMap<String, Option<String>>,
    unavailable: HashMap<String, bool>,
    max_unavailable: usize,
    sightings: Sightings,
}

impl Progress {
    fn node(&mut self, node: &Node, keys: &AnnotationKeys, at: Instant) {
        let name = node.metadata.name.clone().unwrap_or_default();
        let last = node
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(&keys.last_completed).cloned());
        if !self.nodes_listed {
            self.before.insert(name.clone(), last);
        } else {
            let before = self.before.get(&name).cloned().flatten();
            for step in turnover::shown_by(node, keys, before.as_deref()) {
                self.sightings.saw(&name, step, at);
            }
        }
        self.unavailable
            .insert(name, nodesim::budget_watch::unavailable(node, keys));
        let now = self.unavailable.values().filter(|u| **u).count();
        self.max_unavailable = self.max_unavailable.max(now);
    }

    /// Nodes at their last step: completed, or with a soak, their slot released after it.
    fn finished(&self, setup: Setup) -> Vec<Instant> {
        let last = if setup.soak.is_zero() {
            Step::Completed
        } else {
            Step::Released
        };
        self.sightings.times(last)
    }
}

type Shared = Arc<watch::Sender<Progress>>;

/// The pool's Nodes, as they change.
fn watch_nodes(client: Client, progress: Shared, pool: &'static str) -> JoinHandle<()> {
    tokio::spawn(async move {
        let keys = AnnotationKeys::default();
        let config = watcher::Config::default().labels(&format!("{POOL_LABEL}={pool}"));
        let stream = watcher(Api::<Node>::all(client), config);
        futures::pin_mut!(stream);
        while let Some(event) = stream.next().await {
            let at = Instant::now();
            match event {
                Ok(watcher::Event::Apply(node) | watcher::Event::InitApply(node)) => {
                    progress.send_modify(|p| p.node(&node, &keys, at));
                }
                Ok(watcher::Event::InitDone) => progress.send_modify(|p| p.nodes_listed = true),
                Ok(_) => {}
                Err(error) => {
                    tracing::warn!(%error, "makespan: the node watch failed; retrying");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    })
}

/// The pool's ledger: which nodes hold a slot.
fn watch_ledger(client: Client, progress: Shared, pool: &'static str) -> JoinHandle<()> {
    tokio::spawn(async move {
        let leases: Api<Lease> = Api::namespaced(client, OPERATOR_NAMESPACE);
        let config =
            watcher::Config::default().fields(&format!("metadata.name={}", ledger_name(pool)));
        let stream = watcher(leases, config);
        futures::pin_mut!(stream);
        while let Some(event) = stream.next().await {
            let at = Instant::now();
            match event {
                Ok(watcher::Event::Apply(lease) | watcher::Event::InitApply(lease)) => {
                    let holders = holders(&lease);
                    progress.send_modify(|p| p.sightings.ledger(&holders, at));
                }
                Ok(watcher::Event::InitDone) => progress.send_modify(|p| p.ledger_listed = true),
                Ok(_) => {}
                Err(error) => {
                    tracing::warn!(%error, "makespan: the ledger watch failed; retrying");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    })
}

fn holders(lease: &Lease) -> BTreeSet<String> {
    let slots = lease
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(common::ledger::SLOTS_ANNOTATION));
    slots
        .and_then(|json| serde_json::from_str::<BTreeMap<String, serde_json::Value>>(json).ok())
        .map(|map| map.into_keys().collect())
        .unwrap_or_default()
}

/// Requests a reboot of every node and waits until all are completed.
async fn one_run(
    ctx: &Context,
    cluster: &Cluster,
    names: &[String],
    controller: &mut ControllerProcess,
    setup: Setup,
) -> anyhow::Result<(Run, Sightings)> {
    let sizes = &ctx.sizes;
    let (n, k) = (sizes.makespan_nodes, sizes.makespan_max_unavailable);
    let cp = &cluster.control_plane;
    let (tx, mut progress) = watch::channel(Progress::default());
    let tx = Arc::new(tx);
    let tasks = [
        watch_nodes(cp.client().await?, tx.clone(), setup.pool),
        watch_ledger(cp.client().await?, tx.clone(), setup.pool),
    ];
    let listed = tokio::time::timeout(
        Duration::from_secs(60),
        progress.wait_for(|p| p.nodes_listed && p.ledger_listed),
    )
    .await
    .is_ok_and(|r| r.is_ok());
    anyhow::ensure!(
        listed,
        "the watches of the pool and its ledger did not list within 60 s"
    );

    let began = Instant::now();
    request_all(&cluster.nodes(), names).await?;
    let written = began.elapsed();
    let ideal = ideal_s(sizes, setup);
    let limit = Duration::from_secs_f64(ideal * 10.0 + 120.0);
    let done = tokio::time::timeout(limit, progress.wait_for(|p| p.finished(setup).len() == n))
        .await
        .is_ok_and(|r| r.is_ok());
    let last = progress.borrow().clone();
    tasks.iter().for_each(JoinHandle::abort);
    anyhow::ensure!(
        done,
        "only {} of {n} nodes finished within {limit:?}; controller log: {}",
        last.finished(setup).len(),
        controller.log_tail(20)
    );
    anyhow::ensure!(
        last.max_unavailable <= k,
        "the budget was exceeded: {} nodes unavailable at once with max-unavailable {k}",
        last.max_unavailable
    );
    let completions = last.sightings.times(Step::Completed);
    let finished = *last
        .finished(setup)
        .last()
        .context("no completion recorded")?;
    let run = Run {
        makespan_s: finished.duration_since(began).as_secs_f64(),
        requests_written_s: written.as_secs_f64(),
        max_unavailable_seen: last.max_unavailable,
        completions_s: completions
            .iter()
            .map(|t| t.duration_since(began).as_secs_f64())
            .collect(),
        turnover: Turnover::of(std::slice::from_ref(&last.sightings), k),
    };
    Ok((run, last.sightings))
}

/// `reboot-needed=true` on every node, 16 writes at a time.
async fn request_all(nodes: &Api<Node>, names: &[String]) -> anyhow::Result<()> {
    let request = json!({"metadata": {"annotations": {common::keys::REBOOT_NEEDED: "true"}}});
    stream::iter(names)
        .map(|name| {
            let request = request.clone();
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
    Ok(())
}
