//! Helpers shared by the agent's process-level tests.
#![allow(dead_code)] // each test file uses a different part

use std::{
    path::Path,
    process::{Command, Output},
    time::{Duration, Instant},
};

pub const AGENT: &str = env!("CARGO_BIN_EXE_reboot-agent");

/// The agent binary with a clean environment: no flag comes from the runner's variables.
pub fn agent() -> Command {
    let mut command = Command::new(AGENT);
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
