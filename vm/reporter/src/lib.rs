//! vm-node-reporter: the part of a kubelet that the reboot protocol reads, for the VM test
//! tier, which runs real Linux guests but no kubelet. It registers the Node, then reports it
//! Ready with the guest's REAL boot id (`status.nodeInfo.bootID`) and renews its heartbeat
//! Lease, every `--heartbeat` until stopped. A reboot ends it (systemd stops it) and the next
//! boot starts it again with the new boot id, as a kubelet would.

use anyhow::Context as _;
use backon::{ExponentialBuilder, Retryable as _};
use clap::Parser;
use k8s_openapi::api::{coordination::v1::Lease, core::v1::Node};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::{
    Api, Client,
    api::{Patch, PatchParams, PostParams},
};
use serde_json::json;
use std::{path::PathBuf, time::Duration};

/// Registers this guest as a Node and reports it Ready with its boot id.
#[derive(Debug, Clone, Parser)]
#[command(name = "vm-node-reporter", version)]
pub struct Args {
    /// Name of the Node to register and report.
    #[arg(long, env = "NODE_NAME")]
    pub node_name: String,

    /// The kernel's boot id: what the kubelet reports as `status.nodeInfo.bootID`.
    #[arg(
        long,
        env = "BOOT_ID_FILE",
        default_value = "/proc/sys/kernel/random/boot_id"
    )]
    pub boot_id_file: PathBuf,

    /// How often to report Ready and renew the Lease, in seconds (a kubelet: 10).
    #[arg(long, env = "HEARTBEAT_SECONDS", default_value_t = 10,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub heartbeat_seconds: u64,
}

/// [`run`] on a single-threaded runtime.
pub fn run_blocking(args: Args) -> anyhow::Result<()> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(run(args))
}

/// Registers the Node and reports it until SIGTERM.
pub async fn run(args: Args) -> anyhow::Result<()> {
    let boot_id = std::fs::read_to_string(&args.boot_id_file)
        .with_context(|| format!("read the boot id from {}", args.boot_id_file.display()))?
        .trim()
        .to_owned();
    let client = Client::try_default()
        .await
        .context("no kubeconfig: set KUBECONFIG")?;
    let reporter = Reporter {
        nodes: Api::all(client.clone()),
        leases: Api::namespaced(client, "kube-node-lease"),
        name: args.node_name,
        boot_id,
    };
    // Until the network and the API server answer, as a kubelet keeps trying.
    let retry = ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(200))
        .with_max_delay(Duration::from_secs(2))
        .without_max_times();
    (|| reporter.register())
        .retry(retry)
        .notify(|error, _| tracing::warn!("cannot register yet: {error:#}"))
        .await?;
    (|| reporter.heartbeat())
        .retry(retry)
        .notify(|error, _| tracing::warn!("cannot report Ready yet: {error:#}"))
        .await?;
    // The line the VM tier's serial console check reads: one per boot.
    println!(
        "vm-node-reporter: node {} Ready with boot id {}",
        reporter.name, reporter.boot_id
    );
    let mut sigterm = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let mut tick = tokio::time::interval(Duration::from_secs(args.heartbeat_seconds));
    loop {
        tokio::select! {
            _ = sigterm.recv() => return Ok(()),
            _ = tick.tick() => {
                if let Err(error) = reporter.heartbeat().await {
                    tracing::warn!("heartbeat failed: {error:#}");
                }
            }
        }
    }
}

struct Reporter {
    nodes: Api<Node>,
    leases: Api<Lease>,
    name: String,
    boot_id: String,
}

impl Reporter {
    async fn register(&self) -> anyhow::Result<()> {
        let node: Node = serde_json::from_value(json!({
            "metadata": {"name": self.name, "labels": {
                "kubernetes.io/hostname": self.name, "kubernetes.io/os": "linux"}},
        }))?;
        match self.nodes.create(&PostParams::default(), &node).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.is_already_exists() => {}
            Err(e) => return Err(e).context("create the Node"),
        }
        let lease: Lease = serde_json::from_value(json!({
            "metadata": {"name": self.name},
            "spec": {"holderIdentity": self.name, "leaseDurationSeconds": 40},
        }))?;
        match self.leases.create(&PostParams::default(), &lease).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.is_already_exists() => Ok(()),
            Err(e) => Err(e).context("create the heartbeat Lease"),
        }
    }

    /// Ready, with this boot's id, and the Lease renewed.
    async fn heartbeat(&self) -> anyhow::Result<()> {
        let now = Timestamp::now().to_string();
        let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
        let status = json!({"status": {
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                "message": "vm-node-reporter: the guest is up",
                "lastHeartbeatTime": now, "lastTransitionTime": now}],
            "nodeInfo": {"bootID": self.boot_id, "kernelVersion": kernel.trim(),
                "osImage": "Debian GNU/Linux 12 (bookworm)", "operatingSystem": "linux",
                "architecture": "amd64", "kubeletVersion": "vm-node-reporter",
                "machineID": "", "systemUUID": "", "containerRuntimeVersion": "",
                "kubeProxyVersion": ""},
        }});
        self.nodes
            .patch_status(
                &self.name,
                &PatchParams::default(),
                &Patch::Strategic(status),
            )
            .await
            .context("report the Node's status")?;
        let renew = json!({"spec": {"renewTime": MicroTime(Timestamp::now())}});
        self.leases
            .patch(&self.name, &PatchParams::default(), &Patch::Merge(renew))
            .await
            .context("renew the heartbeat Lease")?;
        Ok(())
    }
}
