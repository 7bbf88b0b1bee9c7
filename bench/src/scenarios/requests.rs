//! API requests per node reboot, controller and agent together, drain off. One simulated node
//! with a real agent, the real controller, each behind its own counting proxy and with its own
//! ServiceAccount; every reboot is counted from the write of `reboot-needed` until the reboot
//! is completed, the slot released and a quiet period passed (for trailing Events). The agent's
//! restart after the simulated reboot (its new list and watch) is part of the reboot's cost.
//! Requests to a Lease other than the ledger (leader election renewals, which go on whether
//! or not anything reboots) are reported apart and not counted.

use super::{Cluster, Context, is_clean, ledger_name, slots, start_controller};
use crate::{
    identity,
    nodes::POOL_LABEL,
    proxy::{CountingProxy, RequestKind},
};
use anyhow::Context as _;
use kube::api::{Patch, PatchParams};
use nodesim::{Fleet, FleetConfig};
use serde::Serialize;
use serde_json::json;
use std::{
    collections::BTreeMap,
    sync::Arc,
    time::{Duration, Instant, SystemTime},
};

const POOL: &str = "requests";

#[derive(Debug, Serialize)]
pub struct Counted {
    pub controller: usize,
    pub agent: usize,
    /// Leader-election and other background requests, not counted.
    pub background: usize,
    pub controller_audited: usize,
    pub agent_audited: usize,
    /// `verb resource` -> (controller, agent), as the proxies saw them.
    pub breakdown: BTreeMap<String, (usize, usize)>,
    pub seconds: f64,
}

#[derive(Debug, Serialize)]
pub struct Outcome {
    pub reboots: Vec<Counted>,
    /// Median over the reboots of controller + agent.
    pub per_reboot: f64,
    /// Whether the audit log saw as many requests as the proxies for every reboot.
    pub audit_agrees: bool,
}

fn background(kind: &RequestKind, ledger: &str) -> bool {
    kind.resource == "leases" && kind.name.as_deref() != Some(ledger)
}

pub async fn run(ctx: &Context, cluster: &Cluster) -> anyhow::Result<Outcome> {
    let cp = &cluster.control_plane;
    let dir = ctx.logs.join("requests");
    let controller_id = identity::service_account(cp, &cluster.admin, "controller", &dir).await?;
    let agent_id = identity::service_account(cp, &cluster.admin, "agent", &dir).await?;
    let controller_proxy = CountingProxy::start(controller_id.client.clone()).await?;
    let agent_proxy = CountingProxy::start(agent_id.client.clone()).await?;
    let controller_kubeconfig = dir.join("controller-via-proxy.kubeconfig");
    let agent_kubeconfig = dir.join("agent-via-proxy.kubeconfig");
    controller_proxy.write_kubeconfig(&controller_kubeconfig)?;
    agent_proxy.write_kubeconfig(&agent_kubeconfig)?;

    let mut config = FleetConfig::new(
        1,
        ctx.agent_bin.clone(),
        dir.join("nodes"),
        cp.kubeconfig_path().to_path_buf(),
    );
    config.name_prefix = POOL.into();
    config.reboot_duration = ctx.plan.reboot;
    config.agent.args = ctx.agent_flags();
    config.labels = BTreeMap::from([(POOL_LABEL.to_owned(), POOL.to_owned())]);
    let via_proxy = agent_kubeconfig.clone();
    config.agent_kubeconfig = Some(Arc::new(move |_| via_proxy.clone()));
    let fleet = Fleet::start(cluster.admin.clone(), config).await?;
    let node = fleet.names().remove(0);
    let mut controller = start_controller(ctx, POOL, &controller_kubeconfig, 1)?;

    // Both programs are up once each has opened its watch of nodes.
    let watching = |proxy: &CountingProxy| {
        proxy
            .sent()
            .iter()
            .any(|s| s.kind().label() == "watch nodes")
    };
    let deadline = Instant::now() + Duration::from_secs(120);
    while !(watching(&controller_proxy) && watching(&agent_proxy)) {
        anyhow::ensure!(
            Instant::now() < deadline,
            "controller and agent did not start watching within 120 s"
        );
        anyhow::ensure!(
            controller.is_running(),
            "the controller exited: {}",
            controller.log_tail(20)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    super::controller_ready(
        &cluster.admin,
        &mut controller,
        POOL,
        Duration::from_secs(30),
    )
    .await?;
    tokio::time::sleep(ctx.plan.settle).await;

    let ledger = ledger_name(POOL);
    let nodes = cluster.nodes();
    let mut reboots = Vec::new();
    for round in 1..=ctx.plan.counted_reboots {
        let before = nodes.get(&node).await?;
        let last = |n: &k8s_openapi::api::core::v1::Node| {
            n.metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(common::keys::REBOOT_LAST_COMPLETED).cloned())
        };
        let previous = last(&before);
        let began = Instant::now();
        let from = SystemTime::now();
        nodes
            .patch(
                &node,
                &PatchParams::default(),
                &Patch::Merge(
                    json!({"metadata": {"annotations": {common::keys::REBOOT_NEEDED: "true"}}}),
                ),
            )
            .await?;
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let n = nodes.get(&node).await?;
            if fleet.reboots(&node) as usize == round
                && last(&n).is_some()
                && last(&n) != previous
                && is_clean(&n)
                && slots(&cluster.admin, POOL).await?.is_empty()
            {
                break;
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "reboot {round} of {node} did not complete within 120 s"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        tokio::time::sleep(ctx.plan.settle).await;
        let to = SystemTime::now();
        // Let the API server write its last audit events.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let mut counted = Counted {
            controller: 0,
            agent: 0,
            background: 0,
            controller_audited: 0,
            agent_audited: 0,
            breakdown: BTreeMap::new(),
            seconds: began.elapsed().as_secs_f64(),
        };
        for (proxy, is_controller) in [(&controller_proxy, true), (&agent_proxy, false)] {
            for sent in proxy.sent_between(from, to) {
                let kind = sent.kind();
                if background(&kind, &ledger) {
                    counted.background += 1;
                    continue;
                }
                let entry = counted.breakdown.entry(kind.label()).or_default();
                if is_controller {
                    counted.controller += 1;
                    entry.0 += 1;
                } else {
                    counted.agent += 1;
                    entry.1 += 1;
                }
            }
        }
        let audited = |user: &str| -> anyhow::Result<usize> {
            Ok(cluster
                .audit
                .requests(user, from, to)?
                .iter()
                .filter(|a| !background(&a.kind, &ledger))
                .count())
        };
        counted.controller_audited = audited(&controller_id.user)?;
        counted.agent_audited = audited(&agent_id.user)?;
        tracing::info!(
            "requests: reboot {round}: controller {} (audit {}), agent {} (audit {}): {:?}",
            counted.controller,
            counted.controller_audited,
            counted.agent,
            counted.agent_audited,
            counted.breakdown
        );
        reboots.push(counted);
    }
    controller.terminate(Duration::from_secs(5)).await;
    fleet.stop().await;
    let totals: Vec<f64> = reboots
        .iter()
        .map(|c| (c.controller + c.agent) as f64)
        .collect();
    let audit_agrees = reboots
        .iter()
        .all(|c| c.controller == c.controller_audited && c.agent == c.agent_audited);
    if !audit_agrees {
        tracing::warn!("requests: the audit log and the proxies disagree; see details.json");
    }
    Ok(Outcome {
        per_reboot: super::median(&totals).context("no reboot counted")?,
        reboots,
        audit_agrees,
    })
}
