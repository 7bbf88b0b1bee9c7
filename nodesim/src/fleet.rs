//! A fleet of simulated nodes on one API server.

use crate::{
    Error,
    node::{AgentLaunch, NodeCommand, NodeState, SimNode},
};
use futures::future::try_join_all;
use k8s_openapi::api::coordination::v1::Lease;
use kube::{Api, Client};
use std::{
    collections::BTreeMap,
    path::PathBuf,
    sync::{Arc, atomic::Ordering},
    time::Duration,
};
use tokio::{
    sync::{Notify, mpsc},
    task::JoinHandle,
};

/// Which kubeconfig each node's agent uses (admin by default; tests of least privilege give
/// each agent its own ServiceAccount token).
pub type AgentKubeconfig = Arc<dyn Fn(&str) -> PathBuf + Send + Sync>;

/// How long a simulated agent takes to start again after its node's boot, by default: a few
/// seconds, as a real agent's pod takes once the kubelet is up.
pub const AGENT_START_AFTER_BOOT: Duration = Duration::from_secs(3);

/// How to build a fleet.
#[derive(Clone)]
pub struct FleetConfig {
    pub nodes: usize,
    /// Nodes are named `<prefix>-1` .. `<prefix>-N`.
    pub name_prefix: String,
    pub reboot_duration: Duration,
    /// `Some(delay)`: reboots are short, as on a real node: Ready all along, the agent back at
    /// once, the new boot id in `status.nodeInfo.bootID` only `delay` later (see
    /// [`SimNode::kubelet_reports_boot_after`]).
    pub kubelet_reports_boot_after: Option<Duration>,
    /// How long after the kubelet reports a new boot the agent starts again (see
    /// [`SimNode::agent_start_after_boot`]); [`AGENT_START_AFTER_BOOT`] unless set.
    pub agent_start_after_boot: Duration,
    pub agent: AgentLaunch,
    pub work_dir: PathBuf,
    /// The admin kubeconfig; also the agents' unless `agent_kubeconfig` says otherwise.
    pub kubeconfig: PathBuf,
    pub agent_kubeconfig: Option<AgentKubeconfig>,
    pub labels: BTreeMap<String, String>,
}

impl std::fmt::Debug for FleetConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FleetConfig")
            .field("nodes", &self.nodes)
            .field("name_prefix", &self.name_prefix)
            .field("reboot_duration", &self.reboot_duration)
            .field(
                "kubelet_reports_boot_after",
                &self.kubelet_reports_boot_after,
            )
            .field("agent_start_after_boot", &self.agent_start_after_boot)
            .finish_non_exhaustive()
    }
}

impl FleetConfig {
    pub fn new(nodes: usize, agent_bin: PathBuf, work_dir: PathBuf, kubeconfig: PathBuf) -> Self {
        Self {
            nodes,
            name_prefix: "sim".into(),
            reboot_duration: Duration::from_secs(2),
            kubelet_reports_boot_after: None,
            agent_start_after_boot: AGENT_START_AFTER_BOOT,
            agent: AgentLaunch {
                bin: agent_bin,
                args: Vec::new(),
            },
            work_dir,
            kubeconfig,
            agent_kubeconfig: None,
            labels: BTreeMap::new(),
        }
    }
}

#[derive(Debug)]
struct Handle {
    commands: mpsc::Sender<NodeCommand>,
    state: Arc<NodeState>,
    task: JoinHandle<()>,
}

/// Running simulated nodes; dropping the fleet stops every agent.
#[derive(Debug)]
pub struct Fleet {
    nodes: BTreeMap<String, Handle>,
    kubelet: JoinHandle<()>,
    /// `None` when no inotify instance was to be had: the nodes poll.
    reboot_requests: Option<JoinHandle<()>>,
    work_dir: PathBuf,
}

impl Fleet {
    /// Registers the nodes (Ready), starts their agents and the kubelet stand-in.
    pub async fn start(client: Client, config: FleetConfig) -> Result<Fleet, Error> {
        let names: Vec<String> = (1..=config.nodes)
            .map(|i| format!("{}-{i}", config.name_prefix))
            .collect();
        let sims: Vec<SimNode> = names
            .iter()
            .map(|name| SimNode {
                name: name.clone(),
                dir: config.work_dir.join(name),
                nodes: Api::all(client.clone()),
                leases: Api::<Lease>::namespaced(client.clone(), "kube-node-lease"),
                agent: config.agent.clone(),
                kubeconfig: config
                    .agent_kubeconfig
                    .as_ref()
                    .map_or_else(|| config.kubeconfig.clone(), |f| f(name)),
                reboot_duration: config.reboot_duration,
                kubelet_reports_boot_after: config.kubelet_reports_boot_after,
                agent_start_after_boot: config.agent_start_after_boot,
                labels: config.labels.clone(),
                state: Arc::new(NodeState::default()),
                wake: Arc::new(Notify::new()),
            })
            .collect();
        // Registering is a few requests per node: do it concurrently, in bounded batches.
        for batch in sims.chunks(50) {
            try_join_all(batch.iter().map(SimNode::register)).await?;
        }
        let dirs: Vec<_> = sims
            .iter()
            .map(|s| (s.dir.clone(), s.wake.clone()))
            .collect();
        let reboot_requests = crate::reboot_requests::watch(&dirs)
            .inspect_err(|error| {
                tracing::warn!(%error, "cannot watch for reboot requests; the nodes poll for them")
            })
            .ok();
        let kubelet = tokio::spawn(crate::kubelet::run(
            client,
            Arc::new(
                sims.iter()
                    .map(|s| (s.name.clone(), s.state.clone()))
                    .collect::<BTreeMap<_, _>>(),
            ),
        ));
        let nodes = sims
            .into_iter()
            .map(|sim| {
                let (commands, receiver) = mpsc::channel(8);
                let state = sim.state.clone();
                let name = sim.name.clone();
                let task = tokio::spawn(sim.run(receiver));
                (
                    name,
                    Handle {
                        commands,
                        state,
                        task,
                    },
                )
            })
            .collect();
        Ok(Fleet {
            nodes,
            kubelet,
            reboot_requests,
            work_dir: config.work_dir.clone(),
        })
    }

    pub fn names(&self) -> Vec<String> {
        self.nodes.keys().cloned().collect()
    }

    fn handle(&self, node: &str) -> &Handle {
        self.nodes
            .get(node)
            .unwrap_or_else(|| panic!("no simulated node {node}"))
    }

    /// The node's own directory (`{node_dir}` in agent flags); its `run/` is emptied by a
    /// reboot.
    pub fn node_dir(&self, node: &str) -> PathBuf {
        self.work_dir.join(node)
    }

    /// What the node's agents logged so far, across their starts (empty before the first).
    pub fn agent_log(&self, node: &str) -> String {
        std::fs::read_to_string(self.node_dir(node).join(crate::node::AGENT_LOG))
            .unwrap_or_default()
    }

    /// How many simulated reboots the node went through.
    pub fn reboots(&self, node: &str) -> u32 {
        self.handle(node).state.reboots.load(Ordering::SeqCst)
    }

    /// How many times the node's agent process was started (once, plus once per reboot and
    /// per kill).
    pub fn agent_starts(&self, node: &str) -> u32 {
        self.handle(node).state.agent_starts.load(Ordering::SeqCst)
    }

    pub fn total_reboots(&self) -> u32 {
        self.nodes
            .values()
            .map(|h| h.state.reboots.load(Ordering::SeqCst))
            .sum()
    }

    /// The node's next reboot request has no effect (a reboot that did not happen).
    pub fn swallow_next_reboot(&self, node: &str) {
        self.handle(node)
            .state
            .swallow_next_reboot
            .store(true, Ordering::SeqCst);
    }

    pub async fn kill_agent(&self, node: &str) {
        let _ = self
            .handle(node)
            .commands
            .send(NodeCommand::KillAgent)
            .await;
    }

    pub async fn pause_agent(&self, node: &str) {
        let _ = self
            .handle(node)
            .commands
            .send(NodeCommand::PauseAgent)
            .await;
    }

    pub async fn resume_agent(&self, node: &str) {
        let _ = self
            .handle(node)
            .commands
            .send(NodeCommand::ResumeAgent)
            .await;
    }

    pub async fn set_ready(&self, node: &str, ready: bool) {
        let _ = self
            .handle(node)
            .commands
            .send(NodeCommand::SetReady(ready))
            .await;
    }

    /// The node's reboots keep its boot id (`true`), as `systemctl soft-reboot` does: its
    /// agent is restarted, the boot id stays, and the reboot proves nothing.
    pub fn soft_reboots(&self, node: &str, soft: bool) {
        self.handle(node)
            .state
            .soft_reboots
            .store(soft, Ordering::SeqCst);
    }

    /// The node's next boots are of a bad kernel (`true`): it comes back in a new boot, its
    /// agent runs, and its kubelet reports NotReady, until [`Fleet::set_ready`] (a fixed node).
    pub fn bad_kernel(&self, node: &str, bad: bool) {
        self.handle(node)
            .state
            .bad_kernel
            .store(bad, Ordering::SeqCst);
    }

    /// The node's kubelet hangs (`true`): NotReady, no Lease renewal, no pod started and no
    /// pod deletion confirmed, while its agent keeps working: the node an administrator
    /// reboots because it is stuck. Its next reboot cures it, as does `false`.
    pub async fn wedge(&self, node: &str, hung: bool) {
        self.hang_kubelet(node, hung, hung).await;
    }

    /// The node's kubelet confirms no pod deletion and starts no pod (`true`) while the node
    /// stays Ready: a pod stuck terminating on a healthy node. A reboot cures it, as does
    /// `false`.
    pub async fn stop_confirming_deletions(&self, node: &str, stop: bool) {
        self.hang_kubelet(node, stop, false).await;
    }

    async fn hang_kubelet(&self, node: &str, hung: bool, not_ready: bool) {
        let _ = self
            .handle(node)
            .commands
            .send(NodeCommand::HangKubelet { hung, not_ready })
            .await;
    }

    /// Whether the node's kubelet hangs (see [`Fleet::wedge`]).
    pub fn kubelet_hung(&self, node: &str) -> bool {
        self.handle(node).state.kubelet_hung()
    }

    /// Stops every agent and the kubelet stand-in.
    pub async fn stop(mut self) {
        for handle in self.nodes.values() {
            let _ = handle.commands.send(NodeCommand::Stop).await;
        }
        for (_, handle) in std::mem::take(&mut self.nodes) {
            let _ = handle.task.await;
        }
        self.kubelet.abort();
        self.reboot_requests.take().inspect(JoinHandle::abort);
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        // Aborting a node's task drops its agent Child, which kills the process.
        for handle in self.nodes.values() {
            handle.task.abort();
        }
        self.kubelet.abort();
        self.reboot_requests.take().inspect(JoinHandle::abort);
    }
}
