//! `--reboot-method command` (the default): run a command such as `systemctl reboot`, which
//! honours logind inhibitors so that the kubelet's graceful node shutdown runs.

use super::RebootCommand;
use super::{RebootError, Rebooter};
use crate::host_exec;
use std::process::{Command, Stdio};

/// Where the host's mount namespace is found (the agent runs with hostPID: true).
pub const HOST_MOUNT_NAMESPACE: &str = "/proc/1/ns/mnt";

/// Runs a command, in the host's mount namespace or in the agent's own.
#[derive(Debug, Clone)]
pub struct CommandRebooter {
    command: RebootCommand,
    host_mount_namespace: bool,
}

impl CommandRebooter {
    pub fn new(command: RebootCommand, host_mount_namespace: bool) -> Self {
        Self {
            command,
            host_mount_namespace,
        }
    }

    fn process(&self) -> Command {
        host_command(&self.command, self.host_mount_namespace)
    }
}

/// `command`, to run in the host's mount namespace or in the agent's own.
pub(crate) fn host_command(command: &RebootCommand, host_mount_namespace: bool) -> Command {
    if !host_mount_namespace {
        let mut process = Command::new(command.program());
        process.args(command.args());
        return process;
    }
    // setns(CLONE_NEWNS) is refused to a multi-threaded process (the agent runs tokio),
    // so a fresh, single-threaded copy of the agent enters the namespace and execs there.
    let mut process = Command::new("/proc/self/exe");
    process
        .arg(host_exec::MODE)
        .arg(HOST_MOUNT_NAMESPACE)
        .arg("--")
        .args(command.argv());
    process
}

impl Rebooter for CommandRebooter {
    fn reboot(&self) -> Result<(), RebootError> {
        let command = self.command.to_string();
        tracing::info!(
            %command,
            host_mount_namespace = self.host_mount_namespace,
            "running the reboot command"
        );
        let output = self
            .process()
            .stdin(Stdio::null())
            .output()
            .map_err(|source| RebootError::CommandNotStarted {
                command: command.clone(),
                source,
            })?;
        let stdout = String::from_utf8_lossy(&output.stdout);
        if !stdout.trim().is_empty() {
            tracing::info!(%command, output = %stdout.trim(), "reboot command output");
        }
        if !output.status.success() {
            return Err(RebootError::CommandFailed {
                command,
                status: output.status,
                stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
            });
        }
        Ok(())
    }
}
