//! The one destructive side effect, behind a small trait so that the run loop can be driven
//! with a simulated reboot (tests, the node simulator) and the real methods can be tested on
//! their own.

pub(crate) mod command;
mod method;
mod signal;
mod syscall;

pub use command::{CommandRebooter, HOST_MOUNT_NAMESPACE};
pub(crate) use method::parse_reboot_command;
pub use method::{RebootCommand, RebootMethod, RebootSettings};
pub use signal::{SYSTEMD_REBOOT_SIGNAL, SignalRebooter, signal_from_number};
pub use syscall::SyscallRebooter;

use std::{process::ExitStatus, sync::Arc};
use thiserror::Error;

/// Starts a reboot of this node. `Ok` means the reboot was asked for, not that it happened:
/// that is proven only by a new boot id after it.
pub trait Rebooter: std::fmt::Debug + Send + Sync {
    /// Blocking: it may run a command. Called at most once per reboot.
    fn reboot(&self) -> Result<(), RebootError>;
}

/// A reboot that could not even be asked for.
#[derive(Debug, Error)]
pub enum RebootError {
    #[error("cannot start the reboot command `{command}`: {source}")]
    CommandNotStarted {
        command: String,
        source: std::io::Error,
    },
    #[error("the reboot command `{command}` failed ({status}){}", stderr_suffix(.stderr))]
    CommandFailed {
        command: String,
        status: ExitStatus,
        stderr: String,
    },
    #[error(
        "cannot send SIGRTMIN+5 (signal {signal}) to PID {pid}: {source}; the agent needs \
         hostPID: true and CAP_KILL to signal the host's systemd"
    )]
    Signal {
        pid: i32,
        signal: i32,
        source: std::io::Error,
    },
    #[error("this platform cannot name signal {0}")]
    NoSuchSignal(i32),
    #[error("the reboot method stopped unexpectedly: {0}")]
    Panicked(String),
    #[error("reboot(RB_AUTOBOOT) failed: {0}; the agent needs CAP_SYS_BOOT")]
    Syscall(nix::Error),
}

fn stderr_suffix(stderr: &str) -> String {
    match stderr.trim() {
        "" => String::new(),
        text => format!(": {text}"),
    }
}

/// The rebooter that `settings` ask for.
pub fn rebooter_for(settings: &RebootSettings) -> Arc<dyn Rebooter> {
    match settings.method {
        RebootMethod::Command => Arc::new(CommandRebooter::new(
            settings.command.clone(),
            settings.host_mount_namespace,
        )),
        RebootMethod::Signal => Arc::new(SignalRebooter::new(
            settings.signal_target_pid,
            settings.signal,
        )),
        RebootMethod::Syscall => Arc::new(SyscallRebooter),
    }
}
