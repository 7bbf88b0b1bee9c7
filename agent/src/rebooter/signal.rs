//! `--reboot-method signal`: `--reboot-signal` (SIGRTMIN+5 by default) to the host's systemd,
//! which starts reboot.target (a clean reboot that needs only CAP_KILL).

use super::{RebootError, Rebooter};
use rustix::process::{Pid, Signal, kill_process};
use rustix_libc_wrappers::process::SignalExt;

/// systemd's SIGRTMIN+5. systemd counts from glibc's SIGRTMIN (34), whatever libc the agent
/// is built with (musl's SIGRTMIN is 35), so the number is fixed rather than computed here.
pub const SYSTEMD_REBOOT_SIGNAL: i32 = 34 + 5;

/// The signal of a number the kernel knows and the C library lets a program send (1 to 64,
/// but glibc's own real-time signals 32 and 33); the error says what to give instead.
pub fn signal_from_number(number: i32) -> Result<Signal, String> {
    Signal::from_raw(number).ok_or_else(|| {
        format!(
            "{number} is not a signal this agent can send; give a number from 1 to 64 (not 32 \
             or 33), such as {SYSTEMD_REBOOT_SIGNAL} (SIGRTMIN+5, on which systemd reboots)"
        )
    })
}

/// Signals `target_pid` (the host's PID 1 in production) with `signal`.
#[derive(Debug, Clone)]
pub struct SignalRebooter {
    target_pid: i32,
    signal: i32,
}

impl SignalRebooter {
    pub fn new(target_pid: i32, signal: i32) -> Self {
        Self { target_pid, signal }
    }
}

impl Rebooter for SignalRebooter {
    fn reboot(&self) -> Result<(), RebootError> {
        let signal =
            signal_from_number(self.signal).map_err(|_| RebootError::NoSuchSignal(self.signal))?;
        let fail = |source: std::io::Error| RebootError::Signal {
            pid: self.target_pid,
            signal: self.signal,
            source,
        };
        let pid = Pid::from_raw(self.target_pid)
            .ok_or_else(|| fail(std::io::Error::other("not a process id")))?;
        let name = if self.signal == SYSTEMD_REBOOT_SIGNAL {
            "SIGRTMIN+5 (reboot.target)".to_owned()
        } else {
            format!("signal {}", self.signal)
        };
        tracing::info!(pid = self.target_pid, "sending {name}");
        kill_process(pid, signal).map_err(|errno| fail(errno.into()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signal_number_is_sendable_from_1_to_64_but_glibcs_own() {
        for number in [1, 10, 15, 31, 34, SYSTEMD_REBOOT_SIGNAL, 64] {
            assert!(signal_from_number(number).is_ok(), "{number}");
        }
        for number in [-1, 0, 32, 33, 65] {
            let err = signal_from_number(number).unwrap_err();
            assert!(err.contains("from 1 to 64") && err.contains("39"), "{err}");
        }
    }
}
