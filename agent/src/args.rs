//! The command line. Every flag can also be set through the environment variable named next
//! to it, as a DaemonSet does; values are validated into [`crate::Settings`].

use clap::{ArgAction, Parser};
use common::AnnotationKeys;
use common::duration::parse_duration;
use observability::BindAddress;
pub use observability::LogFormat;
use std::{path::PathBuf, time::Duration};

use crate::rebooter::{RebootCommand, RebootMethod, SYSTEMD_REBOOT_SIGNAL, parse_reboot_command};

fn parse_annotation_prefix(value: &str) -> Result<AnnotationKeys, String> {
    AnnotationKeys::new(value).map_err(|e| e.to_string())
}

fn parse_bind_address(value: &str) -> Result<BindAddress, String> {
    value.parse()
}

/// A signal number the agent can send, as kured's `--reboot-signal` takes it.
fn parse_reboot_signal(value: &str) -> Result<i32, String> {
    let number: i32 = value.trim().parse().map_err(|_| {
        format!(
            "`{value}` is not a signal number; give a number such as {SYSTEMD_REBOOT_SIGNAL} \
             (SIGRTMIN+5, on which systemd reboots)"
        )
    })?;
    crate::rebooter::signal_from_number(number).map(|_| number)
}

/// The path of a file the agent writes: not empty, not a directory's (a trailing `/`).
fn parse_file_path(value: &str) -> Result<PathBuf, String> {
    if value.trim().is_empty() || value.ends_with('/') {
        return Err(format!(
            "{value:?} is not a file's path; give one such as \
             /var/lib/reboot-agent/reboot-attempts"
        ));
    }
    Ok(PathBuf::from(value))
}

fn parse_reboot_timeout(value: &str) -> Result<Duration, String> {
    parse_duration(value).map_err(|e| e.to_string())
}

/// reboot-agent: reboots this node when the controller says `reboot-now`, then proves the
/// reboot by a new boot id.
#[derive(Debug, Clone, Parser)]
#[command(name = "reboot-agent", version)]
pub struct Args {
    /// Name of the Node this agent runs on (from the downward API, spec.nodeName). Required.
    #[arg(long, env = "NODE_NAME")]
    pub node_name: Option<String>,

    /// File holding the current boot id; a reboot is proven when it changes.
    #[arg(
        long,
        env = "BOOT_ID_FILE",
        default_value = "/proc/sys/kernel/random/boot_id"
    )]
    pub boot_id_file: PathBuf,

    /// DNS subdomain put in front of every annotation key (`<prefix>/reboot-now`); empty for
    /// bare keys. Must match the controller's.
    #[arg(long = "annotation-prefix", env = "ANNOTATION_PREFIX", default_value = "",
          value_name = "PREFIX",
          value_parser = parse_annotation_prefix)]
    pub annotation_keys: AnnotationKeys,

    /// How to reboot.
    #[arg(long, env = "REBOOT_METHOD", value_enum, default_value_t = RebootMethod::Command)]
    pub reboot_method: RebootMethod,

    /// Command for `--reboot-method command`, split into words as a shell splits them (quotes
    /// and backslashes kept, as kured splits its commands), but run without a shell.
    #[arg(long, env = "REBOOT_COMMAND", default_value = "systemctl reboot",
          value_parser = parse_reboot_command)]
    pub reboot_command: RebootCommand,

    /// Run the reboot command in the host's mount namespace (that of PID 1). `false` runs it
    /// in the agent's own, for tests and simulators.
    #[arg(long, env = "HOST_MOUNT_NAMESPACE", default_value_t = true, action = ArgAction::Set)]
    pub host_mount_namespace: bool,

    /// Process that `--reboot-method signal` signals: the host's systemd, PID 1 with hostPID.
    #[arg(long, env = "SIGNAL_TARGET_PID", default_value_t = 1,
          value_parser = clap::value_parser!(i32).range(1..))]
    pub signal_target_pid: i32,

    /// Signal number that `--reboot-method signal` sends, as kured's `--reboot-signal`: 39 is
    /// SIGRTMIN+5, on which systemd starts reboot.target (counted from glibc's SIGRTMIN, 34).
    #[arg(long, env = "REBOOT_SIGNAL", default_value_t = SYSTEMD_REBOOT_SIGNAL,
          value_parser = parse_reboot_signal)]
    pub reboot_signal: i32,

    /// How long a triggered reboot may take before the agent reports that it did not happen
    /// and exits (so that its pod restarts and tries again). Such as `30s`, `10m`.
    #[arg(long, env = "REBOOT_TIMEOUT", default_value = "10m", value_name = "DURATION",
          value_parser = parse_reboot_timeout)]
    pub reboot_timeout: Duration,

    /// How many reboots from one boot id the agent makes before it stops: a reboot method
    /// that keeps the boot id (`systemctl soft-reboot`, a command that does nothing) would
    /// otherwise reboot again for ever. Stopped, it says why (a Warning Event `RebootUnproven`
    /// and the gauge `node_reboot_agent_reboots_stopped`) and waits for the node to change.
    /// `0`: no bound.
    #[arg(
        long,
        env = "MAX_UNPROVEN_REBOOTS",
        default_value_t = 3,
        value_name = "COUNT"
    )]
    pub max_unproven_reboots: u32,

    /// Where the agent counts its reboots from the current boot id: a file on a volume that
    /// outlives the agent's container (an emptyDir in the manifests).
    #[arg(
        long,
        env = "REBOOT_ATTEMPTS_FILE",
        default_value = "/var/lib/reboot-agent/reboot-attempts",
        value_name = "PATH",
        value_parser = parse_file_path
    )]
    pub reboot_attempts_file: PathBuf,

    /// Request a reboot of this node when this file exists, such as `/var/run/reboot-required`
    /// (written by Debian's and Ubuntu's unattended upgrades), read through a read-only
    /// hostPath mount. Off by default: requests by annotation stay the primary use.
    #[arg(
        long,
        env = "REBOOT_SENTINEL_FILE",
        value_name = "PATH",
        conflicts_with = "reboot_sentinel_command"
    )]
    pub reboot_sentinel_file: Option<PathBuf>,

    /// Request a reboot of this node when this command exits with
    /// --reboot-sentinel-exit-code, run like the reboot command (split into words as a shell
    /// splits them, run without one, in the host's mount namespace). For RHEL and Fedora:
    /// `needs-restarting -r` with exit code 1, or kured's `sh -c '! needs-restarting -r'` with
    /// 0. Any other exit means no reboot is needed, except 126 and 127 (the command could not
    /// run, or the host's mount namespace could not be entered) and a signal: those are no
    /// answer, with a `SentinelFailed` Warning on the node and a count in
    /// `node_reboot_agent_sentinel_failures_total`. Off by default.
    #[arg(long, env = "REBOOT_SENTINEL_COMMAND", value_name = "COMMAND", value_parser = parse_reboot_command)]
    pub reboot_sentinel_command: Option<RebootCommand>,

    /// The exit code of --reboot-sentinel-command that means a reboot is needed.
    #[arg(long, env = "REBOOT_SENTINEL_EXIT_CODE", default_value_t = 0,
          value_parser = clap::value_parser!(i32).range(0..=255))]
    pub reboot_sentinel_exit_code: i32,

    /// How often to look at the sentinel, with up to 10 % of jitter so that nodes do not all
    /// ask at once. Such as `5m`, `30s`.
    #[arg(long, env = "CHECK_PERIOD", default_value = "5m", value_name = "DURATION",
          value_parser = parse_reboot_timeout)]
    pub check_period: Duration,

    /// Format of the log lines: `text`, or `json` (one object per line). The level comes from
    /// RUST_LOG (default info).
    #[arg(long, env = "LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,

    /// Where to serve /metrics, /healthz and /readyz: IP:PORT, `:PORT` for every interface, or
    /// `0` for no server. With the host's network, pick a port free on every node. When it
    /// cannot be bound the agent says so and goes on without it: a busy port must never keep
    /// a node from finishing its reboot.
    #[arg(long, env = "METRICS_BIND_ADDRESS", default_value = "0.0.0.0:8081",
          value_parser = parse_bind_address)]
    pub metrics_bind_address: BindAddress,

    /// Check the flags as a start does, print `valid` (exit code 0) or what is wrong (exit
    /// code 2), and exit without connecting to anything. What is read on the node at start
    /// (its name, its boot id) is not checked.
    #[arg(long, env = "VALIDATE")]
    pub validate: bool,

    /// FOR TESTS ONLY: trigger the reboot method once, without any API server, and exit.
    /// Deliberately hidden and without an environment variable, so that no pod spec can turn
    /// it on by accident.
    #[arg(long, hide = true)]
    pub reboot_once_for_test: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(extra: &[&str]) -> Result<Args, clap::Error> {
        let argv = ["reboot-agent", "--node-name", "n1"].iter().chain(extra);
        Args::try_parse_from(argv)
    }

    #[test]
    fn defaults_are_the_production_ones() {
        let args = parse(&[]).unwrap();
        assert_eq!(args.reboot_method, RebootMethod::Command);
        assert_eq!(args.reboot_command.argv(), ["systemctl", "reboot"]);
        assert!(args.host_mount_namespace);
        assert_eq!(args.signal_target_pid, 1);
        assert_eq!(args.reboot_signal, 39);
        assert_eq!(args.reboot_timeout, Duration::from_secs(600));
        assert_eq!(args.annotation_keys, AnnotationKeys::default());
        assert_eq!(
            args.boot_id_file,
            PathBuf::from("/proc/sys/kernel/random/boot_id")
        );
        assert!(!args.reboot_once_for_test);
        assert_eq!(args.metrics_bind_address.to_string(), "0.0.0.0:8081");
        assert_eq!(args.log_format, LogFormat::Text);
        assert_eq!(args.max_unproven_reboots, 3);
        assert_eq!(
            args.reboot_attempts_file,
            PathBuf::from("/var/lib/reboot-agent/reboot-attempts")
        );
    }

    #[test]
    fn flags_are_parsed() {
        let args = parse(&[
            "--reboot-method=signal",
            "--reboot-signal=10",
            "--host-mount-namespace=false",
            "--reboot-timeout=1h30m",
            "--annotation-prefix=reboot.example.com",
            "--reboot-command",
            "  /bin/touch   /tmp/x ",
        ])
        .unwrap();
        assert_eq!(args.reboot_method, RebootMethod::Signal);
        assert_eq!(args.reboot_signal, 10);
        assert!(!args.host_mount_namespace);
        assert_eq!(args.reboot_timeout, Duration::from_secs(5400));
        assert_eq!(args.annotation_keys.now, "reboot.example.com/reboot-now");
        assert_eq!(args.reboot_command.program(), "/bin/touch");
        assert_eq!(args.reboot_command.args(), ["/tmp/x"]);
    }

    fn refused(extra: &[&str]) -> String {
        let err = parse(extra).unwrap_err();
        assert_eq!(err.exit_code(), 2, "{err}");
        err.to_string()
    }

    #[test]
    fn a_bad_reboot_timeout_is_refused_with_the_fix() {
        let err = refused(&["--reboot-timeout", "ten minutes"]);
        assert!(err.contains("--reboot-timeout"), "{err}");
        assert!(err.contains("such as `30s`, `10m`"), "{err}");
    }

    #[test]
    fn a_bad_prefix_is_refused_with_commons_message() {
        let err = refused(&["--annotation-prefix", "Not_A_Domain"]);
        assert!(err.contains("--annotation-prefix"), "{err}");
        assert!(err.contains("use a DNS subdomain"), "{err}");
    }

    #[test]
    fn other_bad_values_are_refused() {
        assert!(refused(&["--reboot-command", "  "]).contains("reboot command is empty"));
        assert!(refused(&["--reboot-method", "magic"]).contains("syscall"));
        assert!(refused(&["--signal-target-pid", "0"]).contains("--signal-target-pid"));
        for bad in ["0", "65", "-9", "SIGTERM"] {
            let err = refused(&[&format!("--reboot-signal={bad}")]);
            assert!(
                err.contains("--reboot-signal") && err.contains("39"),
                "{err}"
            );
        }
        assert!(refused(&["--host-mount-namespace", "maybe"]).contains("true"));
        assert!(refused(&["--metrics-bind-address", "8081"]).contains("`0.0.0.0:8080`"));
    }
}
