//! One simulated node: its Node object and heartbeat, its real `reboot-agent` process (restarted
//! when it exits, as a kubelet restarts a pod), and its simulated reboots.

use crate::Error;
use k8s_openapi::{
    api::{coordination::v1::Lease, core::v1::Node},
    apimachinery::pkg::apis::meta::v1::MicroTime,
    jiff::Timestamp,
};
use kube::{
    Api,
    api::{Patch, PatchParams, PostParams},
};
use serde_json::json;
use std::{
    collections::BTreeMap,
    path::PathBuf,
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU32, Ordering},
    },
    time::{Duration, Instant},
};
use tokio::{
    process::{Child, Command},
    sync::{Notify, mpsc},
};

/// The file in the node's directory where its agents log, one start after the other.
pub(crate) const AGENT_LOG: &str = "agent.log";

/// How the agents of simulated nodes are started.
#[derive(Debug, Clone)]
pub struct AgentLaunch {
    pub bin: PathBuf,
    /// Extra flags for every agent (`--annotation-prefix`, `--reboot-timeout`, ...);
    /// `{node_dir}` in them becomes the node's own directory, whose `run/` folder a reboot
    /// empties, as a tmpfs `/run` (`--reboot-sentinel-file={node_dir}/run/reboot-required`).
    pub args: Vec<String>,
}

/// What a test can observe of, and do to, a simulated node while it runs.
#[derive(Debug, Default)]
pub struct NodeState {
    pub reboots: AtomicU32,
    /// The next reboot request is dropped, as if the reboot command had no effect.
    pub swallow_next_reboot: AtomicBool,
    pub agent_starts: AtomicU32,
    /// The kubelet hangs (see [`NodeCommand::Wedge`]): it confirms no pod deletion and starts
    /// no pod until the node reboots or is unwedged.
    pub kubelet_hung: AtomicBool,
    /// Woken when `kubelet_hung` is cleared, for the deletions that waited for it.
    pub kubelet_back: Notify,
    /// The hung kubelet renews no Lease either (a wedged node).
    pub kubelet_silent: AtomicBool,
    /// The node boots a bad kernel: after a reboot its agent runs and the kubelet reports the
    /// new boot id, but NotReady, until told Ready again ([`NodeCommand::SetReady`]).
    pub bad_kernel: AtomicBool,
    /// The node's reboots keep the boot id, as `systemctl soft-reboot` does: userspace (the
    /// agent) restarts, the kernel and its boot id stay. Not counted in `reboots`.
    pub soft_reboots: AtomicBool,
}

impl NodeState {
    pub fn kubelet_hung(&self) -> bool {
        self.kubelet_hung.load(Ordering::SeqCst)
    }

    fn set_kubelet_hung(&self, hung: bool) {
        self.kubelet_hung.store(hung, Ordering::SeqCst);
        if !hung {
            self.kubelet_silent.store(false, Ordering::SeqCst);
            self.kubelet_back.notify_waiters();
        }
    }

    /// Until the kubelet confirms deletions again.
    pub async fn until_kubelet_is_back(&self) {
        loop {
            let back = self.kubelet_back.notified();
            if !self.kubelet_hung() {
                return;
            }
            back.await;
        }
    }
}

/// Commands to a running simulated node.
#[derive(Debug)]
pub enum NodeCommand {
    /// SIGKILL the agent (it is restarted a moment later, as a kubelet would).
    KillAgent,
    /// The kubelet reports Ready or NotReady (a fault outside the operator).
    SetReady(bool),
    /// Stop the agent and keep it stopped (a node whose agent pod is not running).
    PauseAgent,
    ResumeAgent,
    /// The kubelet hangs (`hung`): pods on the node are neither started nor their deletions
    /// confirmed; its agent (a container that keeps running) still works. With `not_ready`
    /// the node reports NotReady once, then nothing (no Lease renewal either): a wedged node.
    /// Without, its status loop lives on and it stays Ready. A reboot cures it, as does
    /// `hung: false` (the kubelet is back, Ready, and finishes the deletions it owed).
    HangKubelet {
        hung: bool,
        not_ready: bool,
    },
    Stop,
}

const HEARTBEAT: Duration = Duration::from_secs(10);
const POLL: Duration = Duration::from_millis(25);
const AGENT_RESTART_DELAY: Duration = Duration::from_millis(500);

#[derive(Debug)]
pub struct SimNode {
    pub name: String,
    pub dir: PathBuf,
    pub nodes: Api<Node>,
    pub leases: Api<Lease>,
    pub agent: AgentLaunch,
    pub kubeconfig: PathBuf,
    pub reboot_duration: Duration,
    /// `None`: a reboot shows as NotReady for `reboot_duration`, then Ready with the new boot
    /// id. `Some(delay)`: as a real kubelet shows a short reboot, the node stays Ready all
    /// along (the node monitor's grace period outlasts it), the agent is back at once with the
    /// new boot id, and the kubelet reports that boot id in `status.nodeInfo.bootID` only
    /// `delay` later.
    pub kubelet_reports_boot_after: Option<Duration>,
    /// How long after its kubelet reports the new boot the agent starts again, as a real
    /// agent's pod takes (containerd creates its sandbox and starts it).
    pub agent_start_after_boot: Duration,
    pub labels: BTreeMap<String, String>,
    pub state: Arc<NodeState>,
    /// Woken when something is created or touched in `dir` (see [`crate::reboot_requests`]).
    pub wake: Arc<Notify>,
}

/// A new boot id the kubelet has not reported yet, and when it will.
#[derive(Debug)]
struct BootReport {
    boot_id: String,
    due: Instant,
}

fn new_boot_id(name: &str) -> String {
    let nanos = Timestamp::now().as_nanosecond();
    format!("{name}-{nanos:x}")
}

impl SimNode {
    fn boot_id_file(&self) -> PathBuf {
        self.dir.join("boot_id")
    }

    fn reboot_request_file(&self) -> PathBuf {
        self.dir.join("reboot-requested")
    }

    /// Creates the node's files, Node object (Ready) and heartbeat Lease.
    pub async fn register(&self) -> Result<(), Error> {
        std::fs::create_dir_all(&self.dir)
            .map_err(Error::io(format!("create {}", self.dir.display())))?;
        let boot_id = new_boot_id(&self.name);
        self.write_boot_id(&boot_id)?;
        let mut labels = self.labels.clone();
        labels.insert("kubernetes.io/hostname".into(), self.name.clone());
        labels.insert("kubernetes.io/os".into(), "linux".into());
        let node: Node = serde_json::from_value(json!({
            "metadata": {"name": self.name, "labels": labels},
            "spec": {},
        }))
        .map_err(|e| Error::Setup(e.to_string()))?;
        match self.nodes.create(&PostParams::default(), &node).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.is_already_exists() => {}
            Err(e) => return Err(e.into()),
        }
        self.report(true, Some(&boot_id)).await?;
        let lease: Lease = serde_json::from_value(json!({
            "metadata": {"name": self.name},
            "spec": {"holderIdentity": self.name, "leaseDurationSeconds": 40},
        }))
        .map_err(|e| Error::Setup(e.to_string()))?;
        match self.leases.create(&PostParams::default(), &lease).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.is_already_exists() => {}
            Err(e) => return Err(e.into()),
        }
        self.heartbeat().await;
        Ok(())
    }

    fn write_boot_id(&self, boot_id: &str) -> Result<(), Error> {
        let path = self.boot_id_file();
        std::fs::write(&path, format!("{boot_id}\n"))
            .map_err(Error::io(format!("write {}", path.display())))
    }

    /// Reports the Ready condition (and a new boot id), as a kubelet does.
    async fn report(&self, ready: bool, boot_id: Option<&str>) -> Result<(), Error> {
        let now = Timestamp::now().to_string();
        let (status, reason) = if ready {
            ("True", "KubeletReady")
        } else {
            ("False", "KubeletNotReady")
        };
        let mut patch = json!({"status": {
            "conditions": [{"type": "Ready", "status": status, "reason": reason,
                "message": format!("simulated kubelet: {reason}"),
                "lastHeartbeatTime": now, "lastTransitionTime": now}],
            "capacity": {"cpu": "4", "memory": "16Gi", "pods": "110"},
            "allocatable": {"cpu": "4", "memory": "16Gi", "pods": "110"},
        }});
        if let Some(boot_id) = boot_id {
            patch["status"]["nodeInfo"] = json!({"bootID": boot_id, "kubeletVersion": "simulated",
                "operatingSystem": "linux", "architecture": "amd64"});
        }
        self.nodes
            .patch_status(
                &self.name,
                &PatchParams::default(),
                &Patch::Strategic(patch),
            )
            .await?;
        Ok(())
    }

    /// Reports until the API server takes it, as a kubelet keeps trying while the API server
    /// is down (a restart, say).
    async fn report_until_accepted(&self, ready: bool, boot_id: Option<&str>) {
        use backon::{BackoffBuilder, ExponentialBuilder};
        let mut delays = ExponentialBuilder::new()
            .with_min_delay(Duration::from_millis(100))
            .with_max_delay(Duration::from_secs(2))
            .without_max_times()
            .build();
        while let Err(error) = self.report(ready, boot_id).await {
            tracing::debug!(node = %self.name, %error, "status report failed; retrying");
            tokio::time::sleep(delays.next().unwrap_or(Duration::from_secs(2))).await;
        }
    }

    async fn heartbeat(&self) {
        let patch = json!({"spec": {"renewTime": MicroTime(Timestamp::now())}});
        if let Err(error) = self
            .leases
            .patch(&self.name, &PatchParams::default(), &Patch::Merge(patch))
            .await
        {
            tracing::debug!(node = %self.name, %error, "heartbeat failed");
        }
    }

    fn spawn_agent(&self) -> Result<Child, Error> {
        let log_path = self.dir.join(AGENT_LOG);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .map_err(Error::io(format!("open {}", log_path.display())))?;
        let err_log = log.try_clone().map_err(Error::io("dup agent log"))?;
        let child = Command::new(&self.agent.bin)
            .arg("--node-name")
            .arg(&self.name)
            .arg("--boot-id-file")
            .arg(self.boot_id_file())
            .args([
                "--reboot-method",
                "command",
                "--host-mount-namespace",
                "false",
            ])
            .arg("--reboot-command")
            .arg(format!("touch {}", self.reboot_request_file().display()))
            .args(
                self.agent
                    .args
                    .iter()
                    .map(|a| a.replace("{node_dir}", &self.dir.display().to_string())),
            )
            .env("KUBECONFIG", &self.kubeconfig)
            // Each simulated node counts its agent's reboots in a file of its own, which
            // outlives the agent as an emptyDir outlives its container.
            .env("REBOOT_ATTEMPTS_FILE", self.dir.join("reboot-attempts"))
            .stdout(log)
            .stderr(err_log)
            .kill_on_drop(true)
            .spawn()
            .map_err(Error::io(format!("start {}", self.agent.bin.display())))?;
        self.state.agent_starts.fetch_add(1, Ordering::SeqCst);
        Ok(child)
    }

    /// The node reboots: power off (the agent dies with it), then back with a new boot id and
    /// a fresh agent; how the kubelet shows it depends on `kubelet_reports_boot_after`. A boot
    /// id the kubelet reports later is returned, for the run loop to report when due.
    async fn reboot(&self, agent: &mut Option<Child>) -> Result<Option<BootReport>, Error> {
        if let Some(mut child) = agent.take() {
            let _ = child.kill().await;
        }
        // `/run` is a tmpfs: what was in it is gone after a reboot.
        let _ = std::fs::remove_dir_all(self.dir.join("run"));
        let boot_id = new_boot_id(&self.name);
        let report = match self.kubelet_reports_boot_after {
            None => {
                self.down_then_ready(&boot_id).await?;
                None
            }
            Some(delay) => {
                tracing::info!(node = %self.name, "simulated short reboot: Ready all along, boot id reported in {delay:?}");
                self.write_boot_id(&boot_id)?;
                *agent = Some(self.spawn_agent()?);
                self.state.set_kubelet_hung(false);
                Some(BootReport {
                    boot_id,
                    due: Instant::now() + delay,
                })
            }
        };
        self.state.reboots.fetch_add(1, Ordering::SeqCst);
        Ok(report)
    }

    /// Down for `reboot_duration` from the moment the reboot was asked for, reported NotReady
    /// meanwhile; then up with the new boot id, reported by the kubelet. The run loop starts
    /// the agent `agent_start_after_boot` later, as a real agent's pod starts after the
    /// kubelet.
    async fn down_then_ready(&self, boot_id: &str) -> Result<(), Error> {
        tracing::info!(node = %self.name, "simulated reboot: down for {:?}", self.reboot_duration);
        tokio::join!(
            self.report_until_accepted(false, None),
            tokio::time::sleep(self.reboot_duration)
        );
        self.write_boot_id(boot_id)?;
        let ready = !self.state.bad_kernel.load(Ordering::SeqCst);
        if !ready {
            tracing::info!(node = %self.name, "simulated bad kernel: back in a new boot, NotReady");
        }
        self.report_until_accepted(ready, Some(boot_id)).await;
        // A fresh kubelet: it confirms the deletions the hung one owed.
        self.state.set_kubelet_hung(false);
        Ok(())
    }

    /// Runs the node until `Stop` (or the command channel closes).
    pub async fn run(self, mut commands: mpsc::Receiver<NodeCommand>) {
        let mut agent = match self.spawn_agent() {
            Ok(child) => Some(child),
            Err(error) => {
                tracing::error!(node = %self.name, %error, "cannot start agent");
                None
            }
        };
        let mut restart_at: Option<Instant> = None;
        let mut boot_report: Option<BootReport> = None;
        let mut paused = false;
        let mut heartbeat = tokio::time::interval(HEARTBEAT);
        let mut poll = tokio::time::interval(POLL);
        loop {
            tokio::select! {
                _ = poll.tick() => {}
                _ = self.wake.notified() => {}
                _ = heartbeat.tick() => {
                    // A hung kubelet renews no Lease either.
                    if !self.state.kubelet_silent.load(Ordering::SeqCst) { self.heartbeat().await; }
                    continue;
                }
                command = commands.recv() => match command {
                    Some(NodeCommand::KillAgent) => {
                        if let Some(child) = agent.as_mut() { let _ = child.start_kill(); }
                    }
                    Some(NodeCommand::SetReady(ready)) => {
                        if let Err(error) = self.report(ready, None).await {
                            tracing::warn!(node = %self.name, %error, "could not report readiness");
                        }
                    }
                    Some(NodeCommand::PauseAgent) => {
                        paused = true;
                        if let Some(mut child) = agent.take() { let _ = child.kill().await; }
                    }
                    Some(NodeCommand::ResumeAgent) => {
                        paused = false;
                        restart_at = Some(Instant::now());
                    }
                    Some(NodeCommand::HangKubelet { hung, not_ready }) => {
                        if hung {
                            self.state.set_kubelet_hung(true);
                            tracing::info!(node = %self.name, not_ready, "simulated kubelet hangs: no pod deletion confirmed");
                            if not_ready {
                                self.state.kubelet_silent.store(true, Ordering::SeqCst);
                                self.report_until_accepted(false, None).await;
                            }
                        } else {
                            self.state.kubelet_silent.store(false, Ordering::SeqCst);
                            self.report_until_accepted(true, None).await;
                            self.state.set_kubelet_hung(false);
                        }
                    }
                    Some(NodeCommand::Stop) | None => break,
                },
            }
            if std::fs::remove_file(self.reboot_request_file()).is_ok() {
                if self.state.swallow_next_reboot.swap(false, Ordering::SeqCst) {
                    tracing::info!(node = %self.name, "reboot request swallowed (simulated failed reboot)");
                } else if self.state.soft_reboots.load(Ordering::SeqCst) {
                    tracing::info!(node = %self.name, "simulated soft reboot: agent restarted, same boot id");
                    if let Some(mut child) = agent.take() {
                        let _ = child.kill().await;
                    }
                    restart_at = Some(Instant::now() + AGENT_RESTART_DELAY);
                } else {
                    match self.reboot(&mut agent).await {
                        Ok(report) => {
                            boot_report = report;
                            if agent.is_none() {
                                restart_at = Some(Instant::now() + self.agent_start_after_boot);
                            }
                        }
                        Err(error) => {
                            tracing::error!(node = %self.name, %error, "simulated reboot failed");
                            restart_at = Some(Instant::now() + AGENT_RESTART_DELAY);
                        }
                    }
                }
            }
            if let Some(report) = boot_report.take_if(|r| Instant::now() >= r.due) {
                tracing::info!(node = %self.name, boot_id = %report.boot_id, "kubelet reports the new boot");
                self.report_until_accepted(true, Some(&report.boot_id))
                    .await;
            }
            if let Some(child) = agent.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                tracing::info!(node = %self.name, %status, "agent exited; restarting it");
                agent = None;
                restart_at = Some(Instant::now() + AGENT_RESTART_DELAY);
            }
            if agent.is_none() && !paused && restart_at.is_some_and(|t| Instant::now() >= t) {
                restart_at = None;
                match self.spawn_agent() {
                    Ok(child) => agent = Some(child),
                    Err(error) => {
                        tracing::error!(node = %self.name, %error, "cannot restart agent")
                    }
                }
            }
        }
        if let Some(mut child) = agent {
            let _ = child.kill().await;
        }
    }
}
