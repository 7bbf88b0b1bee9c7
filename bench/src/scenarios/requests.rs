//! API requests per node reboot, controller and agent together, as the API server's audit log
//! counts them (each program has its own ServiceAccount and talks to the API server directly).
//! One simulated node with a real agent and the real controller, in three settings, each with
//! a controller of its own: drain off; drain on with no pod to evict; drain on with pods on
//! the node that the drain evicts (their added requests, divided by their number, are the cost
//! of an evicted pod). Every reboot is counted from the write of `reboot-needed` until the
//! reboot is completed, the slot released and a quiet period passed (for trailing Events). The
//! agent's restart after the simulated reboot (its new list and watch) is part of the cost.
//! Requests to a Lease other than the ledger (leader-election renewals, which go on whether or
//! not anything reboots) are reported apart and not counted.

use super::{Cluster, Context, ControllerSetup, is_clean, ledger_name, slots, start_controller};
use crate::{
    audit::{Audited, RequestKind},
    identity::{self, Identity},
    nodes::POOL_LABEL,
    pods,
    stats::median,
};
use anyhow::Context as _;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Patch, PatchParams};
use nodesim::{ControllerProcess, Fleet, FleetConfig};
use serde::Serialize;
use serde_json::json;
use std::{
    collections::BTreeMap,
    path::Path,
    sync::Arc,
    time::{Duration, Instant, SystemTime},
};

const POOL: &str = "requests";

/// What the drain has to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Setting {
    DrainOff,
    DrainOn,
    DrainOnWithPods,
}

/// One counted reboot.
#[derive(Debug, Serialize)]
pub struct Counted {
    pub controller: usize,
    pub agent: usize,
    /// Leader-election renewals, not counted.
    pub background: usize,
    /// Pods on the node before the reboot that were gone after it.
    pub evicted: usize,
    /// `verb resource` -> (controller, agent).
    pub breakdown: BTreeMap<String, (usize, usize)>,
    pub seconds: f64,
}

/// The reboots of one setting.
#[derive(Debug, Serialize)]
pub struct Reboots {
    pub setting: Setting,
    pub pods: usize,
    pub reboots: Vec<Counted>,
    /// Median over the reboots of controller + agent.
    pub per_reboot: f64,
}

#[derive(Debug, Serialize)]
pub struct Outcome {
    pub drain_off: Reboots,
    pub drain_on: Reboots,
    pub drain_on_with_pods: Reboots,
    /// What each evicted pod adds to a drained reboot.
    pub per_evicted_pod: f64,
}

impl Outcome {
    /// One line per setting, for the report's notes.
    pub fn notes(&self) -> Vec<String> {
        [&self.drain_off, &self.drain_on, &self.drain_on_with_pods]
            .iter()
            .map(|r| {
                let each: Vec<String> = r
                    .reboots
                    .iter()
                    .map(|c| format!("controller {} + agent {}", c.controller, c.agent))
                    .collect();
                format!(
                    "Requests per reboot, {} ({} pods): {}.",
                    r.setting.describe(),
                    r.pods,
                    each.join("; ")
                )
            })
            .collect()
    }
}

impl Setting {
    fn describe(self) -> &'static str {
        match self {
            Setting::DrainOff => "drain off",
            Setting::DrainOn => "drain on, no pod to evict",
            Setting::DrainOnWithPods => "drain on, pods to evict",
        }
    }
}

fn background(kind: &RequestKind, ledger: &str) -> bool {
    kind.resource == "leases" && kind.name.as_deref() != Some(ledger)
}

/// What every setting shares: the node, its agent, the identities.
struct Bench<'a> {
    ctx: &'a Context,
    cluster: &'a Cluster,
    fleet: Fleet,
    node: String,
    controller: Identity,
    agent: Identity,
}

pub async fn run(ctx: &Context, cluster: &Cluster) -> anyhow::Result<Outcome> {
    let cp = &cluster.control_plane;
    let dir = ctx.logs.join("requests");
    let controller = identity::service_account(cp, &cluster.admin, "controller", &dir).await?;
    let agent = identity::service_account(cp, &cluster.admin, "agent", &dir).await?;
    // As every install has it: the controller watches the pools instead of asking for them.
    super::install_pool_crd(&cluster.admin).await?;
    let began = SystemTime::now();
    let fleet = start_fleet(ctx, cluster, &agent.kubeconfig, &dir).await?;
    let node = fleet.names().remove(0);
    wait_for_watch(cluster, &agent, began, None).await?;
    let bench = Bench {
        ctx,
        cluster,
        fleet,
        node,
        controller,
        agent,
    };
    let drain_off = bench.setting(Setting::DrainOff).await?;
    let drain_on = bench.setting(Setting::DrainOn).await?;
    let drain_on_with_pods = bench.setting(Setting::DrainOnWithPods).await?;
    bench.fleet.stop().await;
    let pods = drain_on_with_pods.pods.max(1) as f64;
    Ok(Outcome {
        per_evicted_pod: (drain_on_with_pods.per_reboot - drain_on.per_reboot) / pods,
        drain_off,
        drain_on,
        drain_on_with_pods,
    })
}

async fn start_fleet(
    ctx: &Context,
    cluster: &Cluster,
    agent_kubeconfig: &Path,
    dir: &Path,
) -> anyhow::Result<Fleet> {
    let mut config = FleetConfig::new(
        1,
        ctx.agent_bin.clone(),
        dir.join("nodes"),
        cluster.control_plane.kubeconfig_path().to_path_buf(),
    );
    config.name_prefix = POOL.into();
    config.reboot_duration = ctx.sizes.reboot;
    config.agent.args = ctx.agent_flags();
    config.labels = BTreeMap::from([(POOL_LABEL.to_owned(), POOL.to_owned())]);
    let own = agent_kubeconfig.to_path_buf();
    config.agent_kubeconfig = Some(Arc::new(move |_| own.clone()));
    Ok(Fleet::start(cluster.admin.clone(), config).await?)
}

/// Waits until the audit log shows `who` watching nodes since `since` (the program is up).
async fn wait_for_watch(
    cluster: &Cluster,
    who: &Identity,
    since: SystemTime,
    mut controller: Option<&mut ControllerProcess>,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(120);
    while !cluster.audit.sent_since(&who.user, "watch nodes", since)? {
        anyhow::ensure!(
            Instant::now() < deadline,
            "{} did not start watching nodes within 120 s",
            who.user
        );
        if let Some(c) = controller.as_deref_mut() {
            anyhow::ensure!(c.is_running(), "the controller exited: {}", c.log_tail(20));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}

impl Bench<'_> {
    async fn setting(&self, setting: Setting) -> anyhow::Result<Reboots> {
        let sizes = &self.ctx.sizes;
        let began = SystemTime::now();
        let mut controller = start_controller(
            self.ctx,
            ControllerSetup {
                pool: POOL,
                kubeconfig: &self.controller.kubeconfig,
                max_unavailable: 1,
                drain: setting != Setting::DrainOff,
            },
        )?;
        wait_for_watch(self.cluster, &self.controller, began, Some(&mut controller)).await?;
        super::controller_ready(
            &self.cluster.admin,
            &mut controller,
            POOL,
            Duration::from_secs(30),
        )
        .await?;
        tokio::time::sleep(sizes.settle).await;
        let pods = if setting == Setting::DrainOnWithPods {
            sizes.evicted_pods
        } else {
            0
        };
        let mut reboots = Vec::new();
        for round in 1..=sizes.counted_reboots {
            let on_node = pods::start_on(&self.cluster.admin, &self.node, round, pods).await?;
            let mut counted = self.reboot(&mut controller).await?;
            counted.evicted = pods::gone(&self.cluster.admin, &on_node).await?;
            tracing::info!(
                "requests, {}: controller {}, agent {}, {} pods evicted: {:?}",
                setting.describe(),
                counted.controller,
                counted.agent,
                counted.evicted,
                counted.breakdown
            );
            reboots.push(counted);
        }
        controller.terminate(Duration::from_secs(5)).await;
        let totals: Vec<f64> = reboots
            .iter()
            .map(|c| (c.controller + c.agent) as f64)
            .collect();
        Ok(Reboots {
            setting,
            pods,
            per_reboot: median(&totals).context("no reboot counted")?,
            reboots,
        })
    }

    /// One reboot of the node, counted from the request until it is completed and quiet.
    async fn reboot(&self, controller: &mut ControllerProcess) -> anyhow::Result<Counted> {
        let nodes = self.cluster.nodes();
        let last = |n: &Node| {
            n.metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(common::keys::REBOOT_LAST_COMPLETED).cloned())
        };
        let previous = last(&nodes.get(&self.node).await?);
        let expected = self.fleet.reboots(&self.node) + 1;
        let began = Instant::now();
        let from = SystemTime::now();
        let request = json!({"metadata": {"annotations": {common::keys::REBOOT_NEEDED: "true"}}});
        nodes
            .patch(&self.node, &PatchParams::default(), &Patch::Merge(request))
            .await?;
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let n = nodes.get(&self.node).await?;
            if self.fleet.reboots(&self.node) == expected
                && last(&n).is_some_and(|l| Some(&l) != previous.as_ref())
                && is_clean(&n)
                && slots(&self.cluster.admin, POOL).await?.is_empty()
            {
                break;
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "the reboot of {} did not complete within 120 s; controller log: {}",
                self.node,
                controller.log_tail(20)
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        tokio::time::sleep(self.ctx.sizes.settle).await;
        let to = SystemTime::now();
        let audited = |who: &Identity| self.cluster.audit.requests(&who.user, from, to);
        Ok(count(
            &audited(&self.controller)?,
            &audited(&self.agent)?,
            &ledger_name(POOL),
            began.elapsed(),
        ))
    }
}

fn count(controller: &[Audited], agent: &[Audited], ledger: &str, took: Duration) -> Counted {
    let mut counted = Counted {
        controller: 0,
        agent: 0,
        background: 0,
        evicted: 0,
        breakdown: BTreeMap::new(),
        seconds: took.as_secs_f64(),
    };
    for (requests, is_controller) in [(controller, true), (agent, false)] {
        for request in requests {
            if background(&request.kind, ledger) {
                counted.background += 1;
                continue;
            }
            let entry = counted.breakdown.entry(request.kind.label()).or_default();
            if is_controller {
                counted.controller += 1;
                entry.0 += 1;
            } else {
                counted.agent += 1;
                entry.1 += 1;
            }
        }
    }
    counted
}
