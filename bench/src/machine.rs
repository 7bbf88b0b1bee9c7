//! The machine and the commit a report was measured on: the table's header, so that figures
//! from different machines or commits are never taken for one another.

use serde::Serialize;
use std::path::Path;

#[derive(Debug, Clone, Default, Serialize)]
pub struct Machine {
    pub cores: usize,
    pub memory_gib: f64,
    pub cpu: String,
    pub kernel: String,
}

impl Machine {
    pub fn this() -> Self {
        let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
        let kib = crate::procstat::kib(&read("/proc/meminfo"), "MemTotal").unwrap_or(0.0);
        let cpu = read("/proc/cpuinfo")
            .lines()
            .find_map(|l| l.strip_prefix("model name"))
            .map(|v| v.trim_start_matches([' ', '\t', ':']).trim().to_owned())
            .unwrap_or_default();
        Self {
            cores: std::thread::available_parallelism().map_or(0, usize::from),
            memory_gib: (kib / 1024.0 / 1024.0 * 10.0).round() / 10.0,
            cpu,
            kernel: read("/proc/sys/kernel/osrelease").trim().to_owned(),
        }
    }

    pub fn describe(&self) -> String {
        format!(
            "{} cores ({}), {:.1} GiB memory, Linux {}",
            self.cores, self.cpu, self.memory_gib, self.kernel
        )
    }
}

/// `git rev-parse HEAD` of the workspace, with `-dirty` when the work tree has changes.
pub fn commit(workspace: &Path) -> String {
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .arg("-C")
            .arg(workspace)
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
    };
    let Some(head) = git(&["rev-parse", "--short=12", "HEAD"]) else {
        return "unknown".into();
    };
    match git(&["status", "--porcelain", "--untracked-files=no"]) {
        Some(s) if !s.is_empty() => format!("{head}-dirty"),
        _ => head,
    }
}
