//! Memory and CPU time of a process, and the machine's memory, from `/proc`.

use std::time::Instant;

/// Clock ticks per second of the times in `/proc/<pid>/stat` (USER_HZ, 100 on Linux).
const USER_HZ: f64 = 100.0;

/// Resident memory of a process.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Memory {
    /// VmRSS: resident now.
    pub rss_mib: f64,
    /// VmHWM: the peak resident set since the process started.
    pub peak_mib: f64,
}

pub fn memory(pid: u32) -> std::io::Result<Memory> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    Ok(parse_status(&status))
}

/// The value of a `Key:   1234 kB` line of `/proc/<pid>/status` or `/proc/meminfo`, in KiB.
pub fn kib(text: &str, key: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
}

fn parse_status(status: &str) -> Memory {
    let mib = |key: &str| kib(status, key).unwrap_or(0.0) / 1024.0;
    Memory {
        rss_mib: mib("VmRSS"),
        peak_mib: mib("VmHWM"),
    }
}

/// Memory the machine can still give without swapping (MemAvailable), in GiB.
pub fn available_gib() -> std::io::Result<f64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo")?;
    kib(&meminfo, "MemAvailable")
        .map(|k| k / 1024.0 / 1024.0)
        .ok_or_else(|| std::io::Error::other("no MemAvailable in /proc/meminfo"))
}

/// Whether the process runs (an exited child that nobody reaped yet is a zombie: not running).
pub fn is_running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            let after = &stat[stat.rfind(')')? + 1..];
            after.split_whitespace().next().map(|state| state != "Z")
        })
        .unwrap_or(false)
}

/// User plus system CPU seconds the process has used.
pub fn cpu_seconds(pid: u32) -> std::io::Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    parse_cpu_seconds(&stat)
        .ok_or_else(|| std::io::Error::other(format!("cannot parse /proc/{pid}/stat")))
}

fn parse_cpu_seconds(stat: &str) -> Option<f64> {
    // The command name (field 2) may contain spaces; fields after it are space-separated,
    // starting with field 3 (state). utime and stime are fields 14 and 15.
    let after = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) / USER_HZ)
}

/// CPU use of a process over a window of wall time, in percent of one core.
#[derive(Debug)]
pub struct CpuWindow {
    pid: u32,
    began: Instant,
    cpu_at_start: f64,
}

impl CpuWindow {
    pub fn start(pid: u32) -> std::io::Result<Self> {
        Ok(Self {
            pid,
            began: Instant::now(),
            cpu_at_start: cpu_seconds(pid)?,
        })
    }

    pub fn percent(&self) -> std::io::Result<f64> {
        let used = cpu_seconds(self.pid)? - self.cpu_at_start;
        Ok(100.0 * used / self.began.elapsed().as_secs_f64())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_and_stat_are_read() {
        let status = "Name:\tx\nVmHWM:\t   20480 kB\nVmRSS:\t   10240 kB\n";
        assert_eq!(
            parse_status(status),
            Memory {
                rss_mib: 10.0,
                peak_mib: 20.0
            }
        );
        let stat = "123 (a (b) c) S 1 2 3 4 5 6 7 8 9 10 250 50 0 0 20 0 1 0";
        assert_eq!(parse_cpu_seconds(stat), Some(3.0));
    }

    #[test]
    fn this_process_can_be_measured() {
        let me = std::process::id();
        assert!(memory(me).unwrap().peak_mib > 0.0);
        assert!(cpu_seconds(me).unwrap() >= 0.0);
        assert!(is_running(me));
        assert!(available_gib().unwrap() > 0.0);
    }
}
