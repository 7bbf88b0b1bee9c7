//! `--reboot-method syscall`: flush the disks and reboot at once, without a clean shutdown.
//! The last resort, for hosts where neither systemctl nor systemd's signal works.

use super::{RebootError, Rebooter};
use nix::sys::reboot::{RebootMode, reboot};

#[derive(Debug, Clone, Copy)]
pub struct SyscallRebooter;

impl Rebooter for SyscallRebooter {
    fn reboot(&self) -> Result<(), RebootError> {
        tracing::warn!("calling sync() and reboot(RB_AUTOBOOT): no clean shutdown");
        nix::unistd::sync();
        // Returns only on failure; in a non-initial PID namespace the kernel ends the
        // namespace's init (with SIGHUP) instead, which is how the tests exercise this path.
        match reboot(RebootMode::RB_AUTOBOOT) {
            Ok(never) => match never {},
            Err(errno) => Err(RebootError::Syscall(errno)),
        }
    }
}
