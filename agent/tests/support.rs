//! Helpers shared by the agent's process-level tests.
#![allow(dead_code)] // each test file uses a different part

use std::{
    path::Path,
    process::{Command, Output},
    sync::LazyLock,
    time::{Duration, Instant},
};

/// The agent under test: this build's, or the one `REBOOT_AGENT_BIN` names (as for the
/// simulated nodes), which is how hack/test-arm64.sh runs these tests against the arm64
/// binary of the image (under QEMU's user-mode emulation, through binfmt_misc).
pub static AGENT: LazyLock<String> = LazyLock::new(|| {
    std::env::var("REBOOT_AGENT_BIN")
        .ok()
        .filter(|path| !path.is_empty())
        .unwrap_or_else(|| env!("CARGO_BIN_EXE_reboot-agent").to_owned())
});

/// The agent binary with a clean environment: no flag comes from the runner's variables.
pub fn agent() -> Command {
    let mut command = Command::new(AGENT.as_str());
    command
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default());
    command
}

/// `reboot-agent --reboot-once-for-test` with the given flags.
pub fn reboot_once(flags: &[&str]) -> Command {
    let mut command = agent();
    command.arg("--reboot-once-for-test").args(flags);
    command
}

pub fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Waits until `path` exists, at most `limit`.
pub fn wait_for_file(path: &Path, limit: Duration) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        if path.exists() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    path.exists()
}
