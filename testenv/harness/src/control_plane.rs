use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ServiceAccount;
use kube::Api;
use tempfile::TempDir;

use crate::components::Files;
use crate::options::{Binaries, Options, prepare_data_dir};
use crate::process::{Proc, stop_all};
use crate::{Error, bins, kubeconfig, ports, wait};

// Generous: on a loaded 2-core machine a cold API server can take tens of seconds.
const READY_TIMEOUT: Duration = Duration::from_secs(120);
const STOP_GRACE: Duration = Duration::from_secs(5);
const START_ATTEMPTS: u32 = 3;

/// A running local control plane; dropping it stops every process and removes its directory.
#[derive(Debug)]
pub struct ControlPlane {
    // Option so Drop can keep the directory (for its logs) when a test panics.
    dir: Option<TempDir>,
    dir_path: PathBuf,
    // In start order: etcd first.
    procs: Vec<Proc>,
    server_url: String,
    ca_pem: String,
    admin_token: String,
    kubeconfig: PathBuf,
    startup_time: Duration,
}

impl ControlPlane {
    /// Starts etcd and kube-apiserver (and, per `opts`, kube-controller-manager and
    /// kube-scheduler) and returns once the API server is ready.
    pub async fn start(opts: Options) -> Result<ControlPlane, Error> {
        let began = Instant::now();
        let bins = Binaries::find(&opts)?;
        if let Some(port) = opts.fixed_apiserver_port() {
            ports::ensure_free(port)?;
        }
        let data_dir = prepare_data_dir(opts.data_dir.as_deref())?;
        let mut attempt = 1;
        loop {
            match Self::start_once(&opts, &bins, &data_dir).await {
                Err(e) if e.is_port_race() && attempt < START_ATTEMPTS => {
                    tracing::warn!(
                        "a port picked as free was taken meanwhile; starting again: {e}"
                    );
                    attempt += 1;
                }
                Err(e) => return Err(e),
                Ok(mut cp) => {
                    cp.startup_time = began.elapsed();
                    tracing::info!(dir = %cp.dir_path.display(), "control plane ready in {:.2?}", cp.startup_time);
                    return Ok(cp);
                }
            }
        }
    }

    async fn start_once(
        opts: &Options,
        bins: &Binaries,
        data_dir: &Path,
    ) -> Result<ControlPlane, Error> {
        let began = Instant::now();
        let dir = tempfile::Builder::new()
            .prefix("testenv-")
            .tempdir_in(data_dir)
            .map_err(|source| Error::DataDir {
                path: data_dir.to_path_buf(),
                source,
            })?;
        let dir_path = dir.path().to_path_buf();
        let port = match opts.fixed_apiserver_port() {
            Some(port) => port,
            None => ports::pick()?,
        };
        let server_url = format!("https://127.0.0.1:{port}");
        let files = Files::write(&dir_path, &server_url)?;
        // From here on, Drop stops whatever was started if a later step fails.
        let mut cp = ControlPlane {
            dir: Some(dir),
            kubeconfig: dir_path.join("admin.kubeconfig"),
            dir_path,
            procs: Vec::new(),
            server_url,
            ca_pem: files.ca_pem.clone(),
            admin_token: files.admin_token.clone(),
            startup_time: Duration::ZERO,
        };

        cp.launch_storage_and_apiserver(opts, bins, &files, port)
            .await?;
        tracing::debug!("kube-apiserver ready after {:.2?}", began.elapsed());
        cp.launch_controllers(bins, &files).await?;
        Ok(cp)
    }

    async fn launch_storage_and_apiserver(
        &mut self,
        opts: &Options,
        bins: &Binaries,
        files: &Files,
        port: u16,
    ) -> Result<(), Error> {
        let (etcd_port, peer_port) = (ports::pick()?, ports::pick()?);
        let etcd_args = files.etcd_args(etcd_port, peer_port, &opts.extra_etcd_args);
        self.spawn("etcd", &bins.etcd, etcd_args)?;
        // The API server spends its first second or two setting itself up before it needs etcd,
        // and it retries while etcd comes up.
        let args = files.apiserver_args(port, etcd_port, &opts.extra_apiserver_args);
        self.spawn("kube-apiserver", &bins.apiserver, args)?;
        let etcd = self.proc_mut("etcd");
        wait::until_ready(etcd, READY_TIMEOUT, async || {
            wait::etcd_health(etcd_port).await
        })
        .await?;
        self.wait_apiserver_ready().await
    }

    async fn launch_controllers(&mut self, bins: &Binaries, files: &Files) -> Result<(), Error> {
        if let Some(kcm) = &bins.controller_manager {
            self.spawn(
                "kube-controller-manager",
                kcm,
                files.controller_manager_args(),
            )?;
        }
        if let Some(scheduler) = &bins.scheduler {
            self.spawn("kube-scheduler", scheduler, files.scheduler_args())?;
        }
        if bins.controller_manager.is_some() {
            self.wait_controller_manager_ready().await?;
        }
        // The scheduler shows no sign of readiness without a serving port; it must at least run.
        self.ensure_running()
    }

    fn spawn(
        &mut self,
        name: &'static str,
        program: &Path,
        args: Vec<String>,
    ) -> Result<(), Error> {
        let proc = Proc::spawn(name, program.to_path_buf(), args, &self.dir_path)?;
        self.procs.push(proc);
        Ok(())
    }

    fn proc_mut(&mut self, name: &str) -> &mut Proc {
        self.procs
            .iter_mut()
            .find(|p| p.name == name)
            .unwrap_or_else(|| unreachable!("{name} is started before anyone asks for it"))
    }

    async fn wait_apiserver_ready(&mut self) -> Result<(), Error> {
        let client =
            kubeconfig::probe_client(&self.server_url, &self.ca_pem, &self.admin_token).await?;
        let apiserver = self.proc_mut("kube-apiserver");
        wait::until_ready(apiserver, READY_TIMEOUT, async || {
            wait::apiserver_ready(&client).await
        })
        .await
    }

    /// The controller-manager is working once its ServiceAccount controller made `default/default`,
    /// which pods in that namespace need anyway.
    async fn wait_controller_manager_ready(&mut self) -> Result<(), Error> {
        let client =
            kubeconfig::probe_client(&self.server_url, &self.ca_pem, &self.admin_token).await?;
        let accounts: Api<ServiceAccount> = Api::namespaced(client, "default");
        let kcm = self.proc_mut("kube-controller-manager");
        wait::until_ready(kcm, READY_TIMEOUT, async || {
            match accounts.get_opt("default").await {
                Ok(Some(_)) => Ok(()),
                Ok(None) => Err("no ServiceAccount default/default yet".to_owned()),
                Err(e) => Err(format!("get ServiceAccount default/default: {e}")),
            }
        })
        .await
    }

    /// Fails, with the tail of its log, if any component has exited.
    pub fn ensure_running(&mut self) -> Result<(), Error> {
        self.procs.iter_mut().try_for_each(Proc::ensure_running)
    }

    /// Stops kube-apiserver and starts it again on the same port and etcd; returns once it is ready.
    pub async fn restart_apiserver(&mut self) -> Result<(), Error> {
        let began = Instant::now();
        let apiserver = self.proc_mut("kube-apiserver");
        apiserver.restart(STOP_GRACE)?;
        self.wait_apiserver_ready().await?;
        tracing::info!("kube-apiserver restarted in {:.2?}", began.elapsed());
        Ok(())
    }

    /// Stops kube-controller-manager and starts it again: it lists everything anew. After an
    /// API server restart, the controller-manager of this release can keep a
    /// PodDisruptionBudget's status stale for many minutes (its informers behind its own
    /// writes), which holds every drain that budget covers; a restart is the remedy.
    pub fn restart_controller_manager(&mut self) -> Result<(), Error> {
        self.proc_mut("kube-controller-manager")
            .restart(STOP_GRACE)?;
        tracing::info!("kube-controller-manager restarted");
        Ok(())
    }

    /// The admin kubeconfig (a token in group `system:masters`).
    pub fn kubeconfig_path(&self) -> &Path {
        &self.kubeconfig
    }

    /// A client with the admin's credentials.
    pub async fn client(&self) -> Result<kube::Client, Error> {
        self.client_for_token(&self.admin_token).await
    }

    /// A client that authenticates with `token`, e.g. one from a TokenRequest.
    pub async fn client_for_token(&self, token: &str) -> Result<kube::Client, Error> {
        kubeconfig::client(&self.server_url, &self.ca_pem, token).await
    }

    pub fn write_kubeconfig_for_token(&self, token: &str, path: &Path) -> Result<(), Error> {
        kubeconfig::write(path, &self.server_url, &self.ca_pem, token)
    }

    /// The admin kubeconfig, but with `server` as the API server's address: a proxy in front
    /// of it (the server's certificate is valid for 127.0.0.1 on any port).
    pub fn write_admin_kubeconfig_for_server(
        &self,
        server: &str,
        path: &Path,
    ) -> Result<(), Error> {
        kubeconfig::write(path, server, &self.ca_pem, &self.admin_token)
    }

    /// The real `kubectl` of `testenv/bin`, talking to this control plane as the admin.
    pub fn kubectl(&self) -> Command {
        let mut kubectl = Command::new(bins::bin_dir().join("kubectl"));
        kubectl.arg(format!("--kubeconfig={}", self.kubeconfig.display()));
        kubectl
    }

    /// Runs the real kubectl with `input` on its stdin (for `apply -f -`); its stdout.
    pub fn kubectl_with_input(&self, args: &[&str], input: &str) -> Result<String, Error> {
        use std::io::Write;
        use std::process::Stdio;
        let io = |what: &str| {
            let what = format!("run kubectl {what}");
            move |source| Error::Io { what, source }
        };
        let mut child = self
            .kubectl()
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(io("start"))?;
        if let Some(mut stdin) = child.stdin.take() {
            stdin
                .write_all(input.as_bytes())
                .map_err(io("write stdin"))?;
        }
        let output = child.wait_with_output().map_err(io("wait"))?;
        if !output.status.success() {
            return Err(Error::Kubectl {
                args: args.join(" "),
                stderr: String::from_utf8_lossy(&output.stderr).trim().to_owned(),
            });
        }
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    }

    /// `kubectl apply -f -` of a manifest.
    pub fn apply(&self, manifest: &str) -> Result<(), Error> {
        self.kubectl_with_input(&["apply", "-f", "-"], manifest)
            .map(|_| ())
    }

    /// `https://127.0.0.1:<port>`
    /// A kubelet's client certificate and key (PEM) for node `node`: user
    /// `system:node:<node>` in group `system:nodes`, which the Node authorizer and the
    /// NodeRestriction admission plugin hold to that node.
    pub fn node_client_certificate(&self, node: &str) -> Result<(String, String), Error> {
        let path = self.dir_path.join("ca.key");
        let ca_key = std::fs::read_to_string(&path)
            .map_err(Error::io(format!("read {}", path.display())))?;
        crate::pki::client_certificate(&ca_key, &format!("system:node:{node}"), "system:nodes")
    }

    /// A serving certificate and key (PEM) for `names` (host names or addresses), signed by
    /// the CA of [`Self::ca_pem`]: what a test's server on loopback shows in a real service's
    /// name to a client that trusts this CA.
    pub fn server_certificate(&self, names: &[&str]) -> Result<(String, String), Error> {
        let path = self.dir_path.join("ca.key");
        let ca_key = std::fs::read_to_string(&path)
            .map_err(Error::io(format!("read {}", path.display())))?;
        crate::pki::server_certificate(&ca_key, names)
    }

    pub fn server_url(&self) -> &str {
        &self.server_url
    }

    /// The CA that signed the API server's serving certificate, PEM.
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// The temporary directory: certificates, kubeconfigs, etcd data and `<component>.log`.
    pub fn dir(&self) -> &Path {
        &self.dir_path
    }

    /// Keeps [`dir`](Self::dir) after the control plane stops (for its logs), as a panic does.
    pub fn keep_dir(&mut self) {
        if let Some(dir) = self.dir.take() {
            let _ = dir.keep();
        }
    }

    /// The process id of a running component (`etcd`, `kube-apiserver`, ...), so that a
    /// benchmark can read its memory from `/proc`.
    pub fn pid(&self, name: &str) -> Option<u32> {
        self.procs
            .iter()
            .find(|p| p.name == name)
            .and_then(Proc::pid)
    }

    /// How long [`ControlPlane::start`] took.
    pub fn startup_time(&self) -> Duration {
        self.startup_time
    }

    /// `testenv/bin/<name>` (or `$TESTENV_BIN/<name>`), which must exist.
    pub fn bin(name: &str) -> Result<PathBuf, Error> {
        bins::bin(name)
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        // In reverse start order: the API server is slow to stop while clients still watch it,
        // and slower still when etcd is gone.
        for proc in self.procs.iter_mut().rev() {
            stop_all(std::slice::from_mut(proc), STOP_GRACE);
        }
        if std::thread::panicking()
            && let Some(dir) = self.dir.take()
        {
            eprintln!("testenv: kept {} for its logs", dir.keep().display());
        }
    }
}
