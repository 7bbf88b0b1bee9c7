//! The scenarios and what they share: the binaries under test, where logs go, the control
//! plane with its audit log, and starting a controller on one pool.

pub mod idle;
pub mod makespan;
pub mod requests;
pub mod scale;

use crate::{audit::Audit, nodes::POOL_LABEL, sizes::Sizes};
use anyhow::Context as _;
use k8s_openapi::api::{coordination::v1::Lease, core::v1::Node};
use kube::{Api, Client};
use nodesim::{ControllerProcess, sandbox::OPERATOR_NAMESPACE};
use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    time::Duration,
};
use testenv::{ControlPlane, Options};

/// What every scenario needs.
#[derive(Debug, Clone)]
pub struct Context {
    pub sizes: Sizes,
    pub controller_bin: PathBuf,
    pub agent_bin: PathBuf,
    /// Logs and kubeconfigs of this run (`target/bench/logs`).
    pub logs: PathBuf,
    pub controller_args: Vec<String>,
    pub agent_args: Vec<String>,
    /// `--help` of each binary, to pass newer flags only to binaries that have them.
    pub controller_help: String,
    pub agent_help: String,
}

impl Context {
    /// Flags for every agent: a metrics server on a free loopback port (as in a cluster, the
    /// agent serves /metrics; on one machine they cannot all take the default port), then the
    /// ones given on the command line.
    pub fn agent_flags(&self) -> Vec<String> {
        let mut flags = Vec::new();
        if self.agent_help.contains("--metrics-bind-address") {
            flags.push("--metrics-bind-address=127.0.0.1:0".to_owned());
        }
        flags.extend(self.agent_args.iter().cloned());
        flags
    }
}

/// The `--help` text of a program (empty when it cannot be run).
pub fn help_of(bin: &Path) -> String {
    std::process::Command::new(bin)
        .arg("--help")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default()
}

/// etcd's largest recommended quota, 8 GiB, instead of the default 2 GiB: 65,000 Nodes of about
/// 14 KB plus the revisions that their status reports leave between two compactions of the API
/// server (every 5 minutes) outgrow 2 GiB, and etcd then refuses every write.
const ETCD_QUOTA: &str = "--quota-backend-bytes=8589934592";

/// A control plane for the benchmark: no controller-manager (its node lifecycle controller
/// would mark agent-less nodes NotReady) and no scheduler (the few pods of the drain runs are
/// created on their node), with an audit log of the benchmark's ServiceAccounts.
pub struct Cluster {
    pub admin: Client,
    pub audit: Audit,
    pub control_plane: ControlPlane,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("control_plane", &self.control_plane)
            .finish_non_exhaustive()
    }
}

impl Cluster {
    pub async fn start(name: &str, logs: &Path) -> anyhow::Result<Self> {
        let audit = Audit::prepare(&logs.join(format!("{name}-audit")))?;
        let control_plane = ControlPlane::start(Options {
            controller_manager: false,
            scheduler: false,
            extra_apiserver_args: audit.apiserver_args(),
            extra_etcd_args: vec![ETCD_QUOTA.into()],
            ..Options::default()
        })
        .await
        .with_context(|| format!("start the {name} control plane"))?;
        let admin = control_plane.client().await?;
        nodesim::sandbox::create_namespace(&admin, OPERATOR_NAMESPACE).await?;
        tracing::info!(
            "{name} control plane ready in {:.1?}",
            control_plane.startup_time()
        );
        Ok(Self {
            admin,
            audit,
            control_plane,
        })
    }

    pub fn nodes(&self) -> Api<Node> {
        Api::all(self.admin.clone())
    }

    /// The API server's and etcd's memory now, and the size of etcd's database file.
    pub fn memory(&self) -> ControlPlaneMemory {
        let rss = |name: &str| {
            self.control_plane
                .pid(name)
                .and_then(|pid| crate::procstat::memory(pid).ok())
                .map_or(0.0, |m| m.rss_mib)
        };
        let db = self.control_plane.dir().join("etcd/member/snap/db");
        ControlPlaneMemory {
            apiserver_rss_mib: rss("kube-apiserver"),
            etcd_rss_mib: rss("etcd"),
            etcd_db_mib: std::fs::metadata(db).map_or(0.0, |m| m.len() as f64 / 1024.0 / 1024.0),
        }
    }

    /// Why the control plane cannot go on, if it cannot: a component exited.
    pub fn down(&self) -> Option<String> {
        ["etcd", "kube-apiserver"].into_iter().find_map(|name| {
            let running = self
                .control_plane
                .pid(name)
                .is_some_and(crate::procstat::is_running);
            (!running).then(|| {
                let log = self.control_plane.dir().join(format!("{name}.log"));
                let text = std::fs::read_to_string(&log).unwrap_or_default();
                let tail: Vec<&str> = text.lines().rev().take(5).collect();
                format!(
                    "{name} exited; the end of {}: {}",
                    log.display(),
                    tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
                )
            })
        })
    }
}

/// The control plane's share of the machine's memory.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct ControlPlaneMemory {
    pub apiserver_rss_mib: f64,
    pub etcd_rss_mib: f64,
    pub etcd_db_mib: f64,
}

impl ControlPlaneMemory {
    pub fn rss_mib(&self) -> f64 {
        self.apiserver_rss_mib + self.etcd_rss_mib
    }
}

/// The ledger Lease of a pool's controller.
pub fn ledger_name(pool: &str) -> String {
    format!("bench-{pool}")
}

/// How a controller is started.
#[derive(Debug, Clone, Copy)]
pub struct ControllerSetup<'a> {
    pub pool: &'a str,
    /// The identity it talks to the API server with.
    pub kubeconfig: &'a Path,
    pub max_unavailable: usize,
    pub drain: bool,
}

/// Starts the controller of a pool (with its own ledger), logging to
/// `<logs>/<pool>-controller.log`. The log of an earlier controller of the pool is kept as
/// `<pool>-controller.<n>.log`: the new one keeps the name, which is also its identity in the
/// leader Lease, so that it leads at once instead of waiting for the old lease to expire.
pub fn start_controller(
    ctx: &Context,
    setup: ControllerSetup<'_>,
) -> anyhow::Result<ControllerProcess> {
    let pool = setup.pool;
    let log = ctx.logs.join(format!("{pool}-controller.log"));
    if log.exists() {
        let kept = (1..)
            .map(|n| ctx.logs.join(format!("{pool}-controller.{n}.log")))
            .find(|p| !p.exists())
            .unwrap_or_default();
        std::fs::rename(&log, &kept).with_context(|| format!("keep {}", log.display()))?;
    }
    let mut args: Vec<String> = vec![
        "--max-unavailable".into(),
        setup.max_unavailable.to_string(),
        format!("--drain={}", setup.drain),
        "--node-selector".into(),
        format!("{POOL_LABEL}={pool}"),
        "--namespace".into(),
        OPERATOR_NAMESPACE.into(),
        "--ledger-name".into(),
        ledger_name(pool),
    ];
    if ctx.controller_help.contains("--leader-election-lease-name") {
        // Leader election stays on, as deployed; each pool's controller has a Lease of its own.
        args.push(format!(
            "--leader-election-lease-name={}-leader",
            ledger_name(pool)
        ));
    }
    if ctx.controller_help.contains("--agent-selector") {
        // The simulated agents are processes, not pods.
        args.push(nodesim::sandbox::NO_AGENT_PODS.into());
    }
    args.extend(ctx.controller_args.iter().cloned());
    Ok(ControllerProcess::start(
        ctx.controller_bin.clone(),
        setup.kubeconfig.to_path_buf(),
        args,
        log,
    )?)
}

/// Installs the `RebootPool` CRD (unless there), as the chart and `manifests/` do, and waits
/// until it is served.
pub async fn install_pool_crd(admin: &Client) -> anyhow::Result<()> {
    use common::pool::RebootPool;
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    use kube::CustomResourceExt;
    let crds: Api<CustomResourceDefinition> = Api::all(admin.clone());
    crate::identity::create_or_keep(&crds, serde_json::to_value(RebootPool::crd())?).await?;
    let pools: Api<RebootPool> = Api::all(admin.clone());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while pools.list(&Default::default()).await.is_err() {
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "the RebootPool CRD was not served within 60 s"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok(())
}

/// Installs the `RebootPool` CRD (unless there) and creates the pool `pool` over the nodes
/// labelled with it, with budget `max_unavailable` and no drain.
pub async fn pool_object(admin: &Client, pool: &str, max_unavailable: usize) -> anyhow::Result<()> {
    use common::pool::RebootPool;
    install_pool_crd(admin).await?;
    let pools: Api<RebootPool> = Api::all(admin.clone());
    let object = serde_json::json!({
        "apiVersion": "node-reboot-operator.io/v1alpha1",
        "kind": "RebootPool",
        "metadata": {"name": pool},
        "spec": {
            "nodeSelector": {"matchLabels": {POOL_LABEL: pool}},
            "maxUnavailable": max_unavailable,
            "drain": {"enabled": false},
        },
    });
    crate::identity::create_or_keep(&pools, object).await
}

/// The nodes holding a slot in a pool's ledger (none when the ledger does not exist yet).
pub async fn slots(
    admin: &Client,
    pool: &str,
) -> anyhow::Result<BTreeMap<String, serde_json::Value>> {
    slots_of(admin, &ledger_name(pool)).await
}

/// The nodes holding a slot in the ledger Lease `ledger`.
pub async fn slots_of(
    admin: &Client,
    ledger: &str,
) -> anyhow::Result<BTreeMap<String, serde_json::Value>> {
    let leases: Api<Lease> = Api::namespaced(admin.clone(), OPERATOR_NAMESPACE);
    let json = leases
        .get_opt(ledger)
        .await?
        .and_then(|l| l.metadata.annotations)
        .and_then(|mut a| a.remove(common::ledger::SLOTS_ANNOTATION))
        .unwrap_or_default();
    Ok(serde_json::from_str(&json).unwrap_or_default())
}

/// Waits until the controller of `pool` is acting on it: its log says it leads (or that it
/// acts without leader election; older builds: that its cache synced) and its ledger exists.
/// After `within` it goes on with a warning, since the wording of logs may change.
pub async fn controller_ready(
    admin: &Client,
    controller: &mut ControllerProcess,
    pool: &str,
    within: Duration,
) -> anyhow::Result<()> {
    let leases: Api<Lease> = Api::namespaced(admin.clone(), OPERATOR_NAMESPACE);
    let deadline = tokio::time::Instant::now() + within;
    loop {
        anyhow::ensure!(
            controller.is_running(),
            "the {pool} controller exited: {}",
            controller.log_tail(20)
        );
        let log = std::fs::read_to_string(controller.log_path()).unwrap_or_default();
        let acting = log.contains("acting on the pool")
            || log.contains("this replica acts")
            || (log.contains("synced") && !log.contains("leader election"));
        if acting && leases.get_opt(&ledger_name(pool)).await?.is_some() {
            return Ok(());
        }
        if tokio::time::Instant::now() > deadline {
            tracing::warn!(
                "the {pool} controller did not log that it acts within {within:?}; going on"
            );
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Whether a node is back from the protocol: no protocol annotation, schedulable.
pub fn is_clean(node: &Node) -> bool {
    let keys = common::AnnotationKeys::default();
    let annotations = node.metadata.annotations.clone().unwrap_or_default();
    !annotations.keys().any(|k| keys.is_protocol_state(k))
        && !node
            .spec
            .as_ref()
            .and_then(|s| s.unschedulable)
            .unwrap_or(false)
}
