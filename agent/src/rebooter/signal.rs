//! `--reboot-method signal`: SIGRTMIN+5 to the host's systemd, which starts reboot.target (a
//! clean reboot that needs only CAP_KILL).

use super::{RebootError, Rebooter};
use rustix::process::{Pid, Signal, kill_process};
use rustix_libc_wrappers::process::SignalExt;

/// systemd's SIGRTMIN+5. systemd counts from glibc's SIGRTMIN (34), whatever libc the agent
/// is built with (musl's SIGRTMIN is 35), so the number is fixed rather than computed here.
pub const SYSTEMD_REBOOT_SIGNAL: i32 = 34 + 5;

/// Signals `target_pid` (the host's PID 1 in production).
#[derive(Debug, Clone)]
pub struct SignalRebooter {
    target_pid: i32,
}

impl SignalRebooter {
    pub fn new(target_pid: i32) -> Self {
        Self { target_pid }
    }
}

impl Rebooter for SignalRebooter {
    fn reboot(&self) -> Result<(), RebootError> {
        let signal = Signal::from_raw(SYSTEMD_REBOOT_SIGNAL)
            .ok_or(RebootError::NoSuchSignal(SYSTEMD_REBOOT_SIGNAL))?;
        let fail = |source: std::io::Error| RebootError::Signal {
            pid: self.target_pid,
            signal: SYSTEMD_REBOOT_SIGNAL,
            source,
        };
        let pid = Pid::from_raw(self.target_pid)
            .ok_or_else(|| fail(std::io::Error::other("not a process id")))?;
        tracing::info!(pid = self.target_pid, "sending SIGRTMIN+5 (reboot.target)");
        kill_process(pid, signal).map_err(|errno| fail(errno.into()))
    }
}
