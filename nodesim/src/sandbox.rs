//! A whole local installation: a real control plane, a fleet of simulated nodes with real
//! agents, and the real controller. Used by `make sandbox`, the demo, the end-to-end tests and
//! the benchmark.

use crate::{ControllerProcess, Error, Fleet, FleetConfig, faults::Faults, workspace_binary};
use k8s_openapi::api::core::v1::Namespace;
use kube::{Api, Client, api::PostParams};
use std::{collections::BTreeMap, path::PathBuf, sync::Arc, time::Duration};
use testenv::{ControlPlane, Options};

/// The namespace of the controller's ledger (and of the manifests' resources).
pub use common::ledger::OPERATOR_NAMESPACE;

/// The simulated nodes run their agents as processes, not pods: the controller's agent check
/// (`--agent-selector`) would find none and grant nothing. A test of that check creates agent
/// pods and passes its own `--agent-selector`.
pub const NO_AGENT_PODS: &str = "--agent-selector=";

#[derive(Debug, Clone)]
pub struct SandboxConfig {
    pub nodes: usize,
    pub max_unavailable: String,
    pub reboot_duration: Duration,
    /// Reboots as a real kubelet shows short ones (see [`FleetConfig`]).
    pub kubelet_reports_boot_after: Option<Duration>,
    /// How long after a simulated boot the node's agent starts again (see [`FleetConfig`]).
    pub agent_start_after_boot: Duration,
    /// Labels of every simulated node (a pool for `--node-selector`, say).
    pub node_labels: BTreeMap<String, String>,
    pub controller_args: Vec<String>,
    pub agent_args: Vec<String>,
    /// Start the controller (tests of two controllers start their own).
    pub start_controller: bool,
    pub control_plane: Options,
    /// Each agent and each controller reaches the API server through a fault proxy of its
    /// own ([`Sandbox::proxy`]; see [`crate::faults`]).
    pub fault_proxies: bool,
}

impl Default for SandboxConfig {
    fn default() -> Self {
        Self {
            nodes: 3,
            max_unavailable: "1".into(),
            reboot_duration: Duration::from_secs(2),
            kubelet_reports_boot_after: None,
            agent_start_after_boot: crate::fleet::AGENT_START_AFTER_BOOT,
            node_labels: BTreeMap::new(),
            controller_args: Vec::new(),
            agent_args: Vec::new(),
            start_controller: true,
            control_plane: Options::default(),
            fault_proxies: false,
        }
    }
}

/// A fluent way to write a [`SandboxConfig`]: start from [`SandboxConfig::with_nodes`] and
/// change only what the scenario is about, the rest as [`Default`] says.
///
/// ```no_run
/// # use nodesim::sandbox::SandboxConfig;
/// let config = SandboxConfig::with_nodes(4)
///     .max_unavailable("2")
///     .controller_args(["--dry-run"])
///     .without_pods();
/// ```
impl SandboxConfig {
    /// `nodes` simulated nodes (`sim-1` ..), every other setting as [`Default`].
    pub fn with_nodes(nodes: usize) -> Self {
        Self {
            nodes,
            ..Self::default()
        }
    }

    /// The controllers' `--max-unavailable`: a number or a percentage.
    pub fn max_unavailable(mut self, value: impl Into<String>) -> Self {
        self.max_unavailable = value.into();
        self
    }

    /// How long a simulated reboot keeps a node down.
    pub fn reboot_duration(mut self, duration: Duration) -> Self {
        self.reboot_duration = duration;
        self
    }

    /// See [`SandboxConfig::kubelet_reports_boot_after`].
    pub fn kubelet_reports_boot_after(mut self, after: impl Into<Option<Duration>>) -> Self {
        self.kubelet_reports_boot_after = after.into();
        self
    }

    /// See [`SandboxConfig::agent_start_after_boot`].
    pub fn agent_start_after_boot(mut self, after: Duration) -> Self {
        self.agent_start_after_boot = after;
        self
    }

    /// Labels every simulated node carries.
    pub fn node_labels(mut self, labels: BTreeMap<String, String>) -> Self {
        self.node_labels = labels;
        self
    }

    /// Adds flags of every controller the sandbox starts.
    pub fn controller_args<S: AsRef<str>>(mut self, args: impl IntoIterator<Item = S>) -> Self {
        self.controller_args.extend(owned(args));
        self
    }

    /// Adds flags of every agent.
    pub fn agent_args<S: AsRef<str>>(mut self, args: impl IntoIterator<Item = S>) -> Self {
        self.agent_args.extend(owned(args));
        self
    }

    /// Starts no controller: the scenario starts its own.
    pub fn no_controller(self) -> Self {
        self.start_controller(false)
    }

    /// Whether the sandbox starts a controller (a scenario's parameter, say).
    pub fn start_controller(mut self, start: bool) -> Self {
        self.start_controller = start;
        self
    }

    /// Puts each agent and each controller behind a fault proxy of its own.
    pub fn fault_proxies(mut self) -> Self {
        self.fault_proxies = true;
        self
    }

    /// The control plane's options, as a whole.
    pub fn control_plane(mut self, options: Options) -> Self {
        self.control_plane = options;
        self
    }

    /// No scheduler and no controller-manager: quicker to start, for scenarios without pods.
    pub fn without_pods(mut self) -> Self {
        self.control_plane.controller_manager = false;
        self.control_plane.scheduler = false;
        self
    }

    /// Adds flags of the API server.
    pub fn apiserver_args<S: AsRef<str>>(mut self, args: impl IntoIterator<Item = S>) -> Self {
        self.control_plane.extra_apiserver_args.extend(owned(args));
        self
    }
}

/// Flags as a scenario writes them (`["--dry-run"]`, `&[&str]`, `Vec<String>`), owned.
fn owned<S: AsRef<str>>(args: impl IntoIterator<Item = S>) -> impl Iterator<Item = String> {
    args.into_iter().map(|a| a.as_ref().to_owned())
}

pub struct Sandbox {
    pub fleet: Fleet,
    pub controllers: Vec<ControllerProcess>,
    pub client: Client,
    pub config: SandboxConfig,
    /// With [`SandboxConfig::fault_proxies`].
    pub faults: Option<Faults>,
    // Last: dropped after the processes that talk to it.
    pub control_plane: ControlPlane,
}

impl std::fmt::Debug for Sandbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sandbox")
            .field("dir", &self.control_plane.dir())
            .finish_non_exhaustive()
    }
}

impl Sandbox {
    pub async fn start(config: SandboxConfig) -> Result<Sandbox, Error> {
        let agent_bin = workspace_binary("reboot-agent")?;
        let control_plane = ControlPlane::start(config.control_plane.clone()).await?;
        let client = control_plane.client().await?;
        create_namespace(&client, OPERATOR_NAMESPACE).await?;
        install_crds(&control_plane)?;
        let mut fleet_config = FleetConfig::new(
            config.nodes,
            agent_bin,
            control_plane.dir().join("nodes"),
            control_plane.kubeconfig_path().to_path_buf(),
        );
        fleet_config.reboot_duration = config.reboot_duration;
        fleet_config.kubelet_reports_boot_after = config.kubelet_reports_boot_after;
        fleet_config.agent_start_after_boot = config.agent_start_after_boot;
        fleet_config.labels = config.node_labels.clone();
        fleet_config.agent.args = config.agent_args.clone();
        let faults = if config.fault_proxies {
            let (faults, kubeconfigs) =
                agents_behind_proxies(&control_plane, &fleet_config).await?;
            fleet_config.agent_kubeconfig = Some(Arc::new(move |node: &str| {
                kubeconfigs.get(node).cloned().unwrap_or_default()
            }));
            Some(faults)
        } else {
            None
        };
        // Many agents on one host: each serves /metrics on a port of its own, named in its log.
        if !config
            .agent_args
            .iter()
            .any(|a| a.starts_with("--metrics-bind-address"))
        {
            fleet_config
                .agent
                .args
                .push("--metrics-bind-address=127.0.0.1:0".into());
        }
        let fleet = Fleet::start(client.clone(), fleet_config).await?;
        let mut sandbox = Sandbox {
            fleet,
            controllers: Vec::new(),
            client,
            config,
            faults,
            control_plane,
        };
        if sandbox.config.start_controller {
            if sandbox.faults.is_some() {
                sandbox.start_proxied_controller(&[]).await?;
            } else {
                sandbox.start_controller(&[])?;
            }
        }
        Ok(sandbox)
    }

    /// The fault proxy between `program` (`sim-1`, `controller-2`) and the API server.
    pub fn proxy(&self, program: &str) -> Option<&testenv::toxiproxy::Proxy> {
        self.faults.as_ref().and_then(|f| f.proxy(program))
    }

    /// Starts one more controller (its log is `controller-<n>.log` in the sandbox directory),
    /// with the sandbox's controller flags plus `extra`, straight to the API server.
    pub fn start_controller(&mut self, extra: &[&str]) -> Result<&mut ControllerProcess, Error> {
        self.start_controller_with_env(extra, Vec::new())
    }

    /// As [`start_controller`](Self::start_controller), with `env` added to the process's
    /// environment (a clock set off with libfaketime, say).
    pub fn start_controller_with_env(
        &mut self,
        extra: &[&str],
        env: Vec<(String, String)>,
    ) -> Result<&mut ControllerProcess, Error> {
        let kubeconfig = self.control_plane.kubeconfig_path().to_path_buf();
        self.spawn_controller(extra, kubeconfig, env)
    }

    /// As [`start_controller`](Self::start_controller), but through a fault proxy of its own
    /// ([`proxy`](Self::proxy) with its identity, `controller-<n>`); needs
    /// [`SandboxConfig::fault_proxies`].
    pub async fn start_proxied_controller(
        &mut self,
        extra: &[&str],
    ) -> Result<&mut ControllerProcess, Error> {
        self.start_proxied_controller_with_env(extra, Vec::new())
            .await
    }

    /// As [`start_proxied_controller`](Self::start_proxied_controller), with `env` added to
    /// the process's environment.
    pub async fn start_proxied_controller_with_env(
        &mut self,
        extra: &[&str],
        env: Vec<(String, String)>,
    ) -> Result<&mut ControllerProcess, Error> {
        let identity = format!("controller-{}", self.controllers.len() + 1);
        let Some(faults) = &mut self.faults else {
            return Err(Error::Setup(
                "start_proxied_controller needs SandboxConfig::fault_proxies".into(),
            ));
        };
        let kubeconfig = faults.add(&self.control_plane, &identity).await?;
        self.spawn_controller(extra, kubeconfig, env)
    }

    fn spawn_controller(
        &mut self,
        extra: &[&str],
        kubeconfig: PathBuf,
        env: Vec<(String, String)>,
    ) -> Result<&mut ControllerProcess, Error> {
        let mut args = vec![
            "--max-unavailable".to_owned(),
            self.config.max_unavailable.clone(),
        ];
        args.extend(self.config.controller_args.iter().cloned());
        args.extend(extra.iter().map(|s| (*s).to_owned()));
        if !args.iter().any(|a| a.starts_with("--agent-selector")) {
            args.push(NO_AGENT_PODS.to_owned());
        }
        let log = self
            .control_plane
            .dir()
            .join(format!("controller-{}.log", self.controllers.len() + 1));
        let process = ControllerProcess::start_with_env(
            workspace_binary("reboot-controller")?,
            kubeconfig,
            args,
            log,
            env,
        )?;
        self.controllers.push(process);
        let last = self.controllers.len() - 1;
        Ok(&mut self.controllers[last])
    }

    /// Stops agents and controllers, then the control plane.
    pub async fn stop(mut self) {
        for controller in &mut self.controllers {
            controller.terminate(Duration::from_secs(5)).await;
        }
        self.fleet.stop().await;
    }
}

/// A fault proxy for each node's agent, and the kubeconfigs through them by node name.
async fn agents_behind_proxies(
    cp: &ControlPlane,
    fleet: &FleetConfig,
) -> Result<(Faults, BTreeMap<String, PathBuf>), Error> {
    let mut faults = Faults::start(cp).await?;
    let mut kubeconfigs = BTreeMap::new();
    for i in 1..=fleet.nodes {
        let node = format!("{}-{i}", fleet.name_prefix);
        let kubeconfig = faults.add(cp, &node).await?;
        kubeconfigs.insert(node, kubeconfig);
    }
    Ok((faults, kubeconfigs))
}

/// The RebootPool CustomResourceDefinition as the chart ships it (its `crds/`, generated from
/// `common::pool::RebootPool` by `make crd`).
pub const REBOOTPOOL_CRD: &str =
    include_str!("../../charts/node-reboot-operator/crds/rebootpools.yaml");

/// Installs the operator's CRDs as a user upgrades them (`kubectl apply --server-side` of the
/// chart's file) and waits until the API server serves them: the controller watches RebootPools.
pub fn install_crds(cp: &ControlPlane) -> Result<(), Error> {
    cp.kubectl_with_input(&["apply", "--server-side", "-f", "-"], REBOOTPOOL_CRD)?;
    cp.kubectl_with_input(
        &[
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            "customresourcedefinition/rebootpools.node-reboot-operator.io",
        ],
        "",
    )?;
    Ok(())
}

pub async fn create_namespace(client: &Client, name: &str) -> Result<(), Error> {
    let ns: Namespace = serde_json::from_value(serde_json::json!({"metadata": {"name": name}}))
        .map_err(|e| Error::Setup(e.to_string()))?;
    match Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.is_already_exists() => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// How many controller replicas `make sandbox` runs, as the Deployment does: one leads.
pub const SANDBOX_REPLICAS: usize = 2;

/// `make sandbox`: start, print where to look, wait for Ctrl-C or SIGTERM, stop everything.
/// On stdout: `KUBECONFIG=<path>`, then `CONTROLLER_<n>_METRICS=http://<address>/metrics` for
/// each controller replica.
pub async fn run_until_signal(config: SandboxConfig) -> anyhow::Result<()> {
    eprintln!(
        "sandbox: starting a control plane, {} simulated nodes and {SANDBOX_REPLICAS} controller \
         replicas (--max-unavailable {}) ...",
        config.nodes, config.max_unavailable
    );
    let replicas = SANDBOX_REPLICAS - usize::from(config.start_controller);
    let mut sandbox = Sandbox::start(config).await?;
    for _ in 0..replicas {
        sandbox.start_controller(&[])?;
    }
    let dir = sandbox.control_plane.dir().display().to_string();
    eprintln!("sandbox: ready. Logs: {dir}/controller-<n>.log, {dir}/nodes/<node>/agent.log");
    eprintln!(
        "sandbox: try  kubectl annotate node sim-1 reboot-needed=true  then  kubectl get nodes -w"
    );
    eprintln!(
        "sandbox: the leader:  kubectl -n {OPERATOR_NAMESPACE} get lease reboot-controller \
         -o jsonpath='{{.spec.holderIdentity}}'"
    );
    eprintln!(
        "sandbox: the RebootPool CRD is installed (the chart's crds/rebootpools.yaml): try  \
         kubectl get rebootpools"
    );
    println!(
        "KUBECONFIG={}",
        sandbox.control_plane.kubeconfig_path().display()
    );
    for (i, controller) in sandbox.controllers.iter().enumerate() {
        if let (Some(url), Some(address)) = (controller.metrics_url(), controller.metrics_address())
        {
            eprintln!(
                "sandbox: {}: metrics {url}, health http://{address}/healthz and /readyz",
                controller.identity()
            );
            println!("CONTROLLER_{}_METRICS={url}", i + 1);
        }
    }
    wait_for_signal().await;
    eprintln!("sandbox: stopping ...");
    sandbox.stop().await;
    Ok(())
}

async fn wait_for_signal() {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(term) => term,
        Err(_) => return std::future::pending().await,
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}

#[cfg(test)]
mod builder_tests {
    use super::*;

    #[test]
    fn the_builder_changes_what_it_is_told_and_keeps_the_defaults_of_the_rest() {
        // A scenario's helper gets its flags as a slice.
        let agent: &[&str] = &["--check-period=1s"];
        let config = SandboxConfig::with_nodes(4)
            .max_unavailable("25%")
            .controller_args(["--dry-run"])
            .controller_args(vec![String::from("--reboot-timeout=10s")])
            .agent_args(agent)
            .apiserver_args(["--feature-gates=WatchList=false"])
            .without_pods()
            .no_controller();
        let default = SandboxConfig::default();
        assert_eq!(config.nodes, 4);
        assert_eq!(config.max_unavailable, "25%");
        assert_eq!(
            config.controller_args,
            ["--dry-run", "--reboot-timeout=10s"]
        );
        assert_eq!(config.agent_args, ["--check-period=1s"]);
        assert!(!config.start_controller);
        let cp = &config.control_plane;
        assert!(!cp.scheduler && !cp.controller_manager);
        // Without pods keeps the API server's flags given before it.
        assert_eq!(cp.extra_apiserver_args, ["--feature-gates=WatchList=false"]);
        assert_eq!(config.reboot_duration, default.reboot_duration);
        assert_eq!(config.kubelet_reports_boot_after, None);
        assert!(config.node_labels.is_empty() && !config.fault_proxies);
    }
}
