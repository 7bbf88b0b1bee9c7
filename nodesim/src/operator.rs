//! The real `reboot-controller` as a child process, for tests that kill and restart it.
//!
//! Each process serves `/metrics`, `/healthz` and `/readyz` on a loopback port of its own
//! (chosen here unless the arguments name one), and is named after its log file in the leader
//! Lease (`POD_NAME=controller-1` for `controller-1.log`): a restarted process keeps its name,
//! as a restarted container keeps its pod's, so it resumes leading at once.

use crate::Error;
use nix::{sys::signal, unistd::Pid};
use std::{
    hash::{BuildHasher, Hasher},
    net::{Ipv4Addr, SocketAddr, TcpListener},
    path::PathBuf,
    time::Duration,
};
use tokio::process::{Child, Command};

const METRICS_FLAG: &str = "--metrics-bind-address";

#[derive(Debug)]
pub struct ControllerProcess {
    bin: PathBuf,
    kubeconfig: PathBuf,
    args: Vec<String>,
    /// Extra environment (kept for restarts), such as a skewed clock's `LD_PRELOAD`.
    env: Vec<(String, String)>,
    log: PathBuf,
    child: Option<Child>,
    metrics: Option<SocketAddr>,
}

impl ControllerProcess {
    /// Starts `reboot-controller <args>` with `KUBECONFIG`, logging (appending) to `log`.
    /// Without `--metrics-bind-address` in `args`, it gets a free loopback port.
    pub fn start(
        bin: PathBuf,
        kubeconfig: PathBuf,
        args: Vec<String>,
        log: PathBuf,
    ) -> Result<Self, Error> {
        Self::start_with_env(bin, kubeconfig, args, log, Vec::new())
    }

    /// As [`start`](Self::start), with `env` added to its environment (and to every restart's).
    pub fn start_with_env(
        bin: PathBuf,
        kubeconfig: PathBuf,
        mut args: Vec<String>,
        log: PathBuf,
        env: Vec<(String, String)>,
    ) -> Result<Self, Error> {
        let metrics = match given_metrics_address(&args) {
            Some(given) => given,
            None => {
                let address = SocketAddr::from((Ipv4Addr::LOCALHOST, free_port()?));
                args.push(format!("{METRICS_FLAG}={address}"));
                Some(address)
            }
        };
        let mut process = Self {
            bin,
            kubeconfig,
            args,
            env,
            log,
            child: None,
            metrics,
        };
        process.spawn()?;
        Ok(process)
    }

    /// Where to reach its `/metrics`, `/healthz` and `/readyz` (`None` with
    /// `--metrics-bind-address=0`).
    pub fn metrics_address(&self) -> Option<SocketAddr> {
        self.metrics
    }

    /// `http://<address>/metrics`, for people.
    pub fn metrics_url(&self) -> Option<String> {
        self.metrics.map(|a| format!("http://{a}/metrics"))
    }

    /// Its name in the leader Lease and in its Events (`POD_NAME`).
    pub fn identity(&self) -> String {
        self.log
            .file_stem()
            .map_or_else(|| "controller".into(), |s| s.to_string_lossy().into_owned())
    }

    fn spawn(&mut self) -> Result<(), Error> {
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .map_err(Error::io(format!("open {}", self.log.display())))?;
        let err = out.try_clone().map_err(Error::io("dup controller log"))?;
        let child = Command::new(&self.bin)
            .args(&self.args)
            .env("KUBECONFIG", &self.kubeconfig)
            .env("POD_NAME", self.identity())
            .env(
                "RUST_LOG",
                std::env::var("RUST_LOG").unwrap_or_else(|_| "info".into()),
            )
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdout(out)
            .stderr(err)
            .kill_on_drop(true)
            .spawn()
            .map_err(Error::io(format!("start {}", self.bin.display())))?;
        self.child = Some(child);
        Ok(())
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().and_then(Child::id)
    }

    pub fn log_path(&self) -> &PathBuf {
        &self.log
    }

    /// SIGKILL: a crash at an arbitrary point.
    pub async fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill().await;
        }
    }

    /// SIGTERM (and SIGCONT, should it be frozen), then SIGKILL after `grace`; returns whether
    /// it exited within the grace.
    pub async fn terminate(&mut self, grace: Duration) -> bool {
        let Some(mut child) = self.child.take() else {
            return true;
        };
        if let Some(pid) = child.id().and_then(|p| i32::try_from(p).ok()) {
            let _ = signal::kill(Pid::from_raw(pid), signal::Signal::SIGTERM);
            // A frozen process would hold the SIGTERM until thawed.
            let _ = signal::kill(Pid::from_raw(pid), signal::Signal::SIGCONT);
        }
        match tokio::time::timeout(grace, child.wait()).await {
            Ok(_) => true,
            Err(_) => {
                let _ = child.kill().await;
                false
            }
        }
    }

    /// SIGSTOP: the process stops mid-step without knowing it (a long GC pause, a frozen VM,
    /// a throttled container) and, once thawed, goes on with what it believed before.
    pub fn freeze(&self) {
        self.signal(signal::Signal::SIGSTOP);
    }

    /// SIGCONT after [`freeze`](Self::freeze).
    pub fn thaw(&self) {
        self.signal(signal::Signal::SIGCONT);
    }

    fn signal(&self, which: signal::Signal) {
        if let Some(pid) = self.pid().and_then(|p| i32::try_from(p).ok()) {
            let _ = signal::kill(Pid::from_raw(pid), which);
        }
    }

    pub async fn restart(&mut self) -> Result<(), Error> {
        self.kill().await;
        self.spawn()
    }

    /// Whether the process is still running (an exit is logged in its log file).
    pub fn is_running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    /// The last lines of its log, for failure messages.
    pub fn log_tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }
}

/// The address `--metrics-bind-address` names in `args`, made reachable (an unspecified IP is
/// reached on loopback); `Some(None)` when it turns the server off, `None` when not given.
fn given_metrics_address(args: &[String]) -> Option<Option<SocketAddr>> {
    let value = args.iter().enumerate().find_map(|(i, arg)| {
        if arg == METRICS_FLAG {
            args.get(i + 1).cloned()
        } else {
            arg.strip_prefix(METRICS_FLAG)
                .and_then(|rest| rest.strip_prefix('='))
                .map(str::to_owned)
        }
    })?;
    let value = value.trim();
    if value == "0" {
        return Some(None);
    }
    let address = match value.strip_prefix(':') {
        Some(port) => port
            .parse::<u16>()
            .ok()
            .map(|p| SocketAddr::from((Ipv4Addr::UNSPECIFIED, p))),
        None => value.parse::<SocketAddr>().ok(),
    };
    Some(address.map(|mut a| {
        if a.ip().is_unspecified() {
            a.set_ip(Ipv4Addr::LOCALHOST.into());
        }
        a
    }))
}

/// A loopback port nothing listens on, below Linux's ephemeral range (32768-60999) so that no
/// outgoing connection takes it before the controller binds it.
fn free_port() -> Result<u16, Error> {
    let mut last = None;
    for _ in 0..100 {
        let random = std::collections::hash_map::RandomState::new()
            .build_hasher()
            .finish();
        let port = 20_000 + u16::try_from(random % 12_000).unwrap_or(0);
        match TcpListener::bind((Ipv4Addr::LOCALHOST, port)) {
            Ok(_) => return Ok(port),
            Err(error) => last = Some(error),
        }
    }
    Err(Error::io("find a free port for the controller's metrics")(
        last.unwrap_or_else(|| std::io::Error::other("no attempt")),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn a_given_metrics_address_is_kept_and_made_reachable() {
        assert_eq!(
            given_metrics_address(&args(&["--max-unavailable", "1"])),
            None
        );
        assert_eq!(
            given_metrics_address(&args(&["--metrics-bind-address=127.0.0.1:9000"])),
            Some(Some("127.0.0.1:9000".parse().unwrap()))
        );
        assert_eq!(
            given_metrics_address(&args(&["--metrics-bind-address", ":9001"])),
            Some(Some("127.0.0.1:9001".parse().unwrap()))
        );
        assert_eq!(
            given_metrics_address(&args(&["--metrics-bind-address=0"])),
            Some(None)
        );
        assert!((20_000..32_000).contains(&free_port().unwrap()));
    }
}
