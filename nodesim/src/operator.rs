//! The real `reboot-controller` as a child process, for tests that kill and restart it.

use crate::Error;
use nix::{sys::signal, unistd::Pid};
use std::{path::PathBuf, time::Duration};
use tokio::process::{Child, Command};

#[derive(Debug)]
pub struct ControllerProcess {
    bin: PathBuf,
    kubeconfig: PathBuf,
    args: Vec<String>,
    log: PathBuf,
    child: Option<Child>,
}

impl ControllerProcess {
    /// Starts `reboot-controller <args>` with `KUBECONFIG`, logging (appending) to `log`.
    pub fn start(
        bin: PathBuf,
        kubeconfig: PathBuf,
        args: Vec<String>,
        log: PathBuf,
    ) -> Result<Self, Error> {
        let mut process = Self {
            bin,
            kubeconfig,
            args,
            log,
            child: None,
        };
        process.spawn()?;
        Ok(process)
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
            .env(
                "RUST_LOG",
                std::env::var("RUST_LOG").unwrap_or_else(|_| "info".into()),
            )
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

    /// SIGTERM, then SIGKILL after `grace`; returns whether it exited within the grace.
    pub async fn terminate(&mut self, grace: Duration) -> bool {
        let Some(mut child) = self.child.take() else {
            return true;
        };
        if let Some(pid) = child.id().and_then(|p| i32::try_from(p).ok()) {
            let _ = signal::kill(Pid::from_raw(pid), signal::Signal::SIGTERM);
        }
        match tokio::time::timeout(grace, child.wait()).await {
            Ok(_) => true,
            Err(_) => {
                let _ = child.kill().await;
                false
            }
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
