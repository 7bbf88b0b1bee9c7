//! FOR TESTS ONLY (`--reboot-once-for-test`, hidden): trigger the configured reboot method
//! once, without an API server, so that tests run each method's real code path.

use crate::{
    args::Args,
    rebooter::{RebootMethod, RebootSettings, rebooter_for},
};
use std::process::ExitCode;

/// Triggers the reboot method once: exit 0 when it was asked for, 1 when it failed.
pub fn reboot_once_for_test(args: &Args) -> ExitCode {
    let settings = RebootSettings::from_args(args);
    // A mistaken test run must never reboot the machine it runs on: the syscall is made only
    // as the init of a PID namespace of its own, where reboot(2) ends just that namespace.
    if settings.method == RebootMethod::Syscall && nix::unistd::getpid().as_raw() != 1 {
        eprintln!(
            "reboot-agent: --reboot-once-for-test with --reboot-method syscall runs only as PID 1 \
             of its own PID namespace (`unshare --pid --fork`), never on a real host"
        );
        return ExitCode::from(crate::error::EXIT_USAGE);
    }
    match rebooter_for(&settings).reboot() {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("reboot-agent: {error}");
            ExitCode::FAILURE
        }
    }
}
