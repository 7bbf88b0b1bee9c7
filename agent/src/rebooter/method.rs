//! How the agent reboots its node, as configured: the method, the command and the settings a
//! [`super::Rebooter`] is built from. The rebooter's own vocabulary, which the command line and
//! the configuration use (and not the other way round).

use clap::ValueEnum;

/// How the agent reboots its node (docs/src/reference.md, `--reboot-method`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum RebootMethod {
    /// Run `--reboot-command` in the host's mount namespace; honours logind inhibitors.
    Command,
    /// Send `--reboot-signal` (SIGRTMIN+5, systemd's reboot.target) to `--signal-target-pid`.
    Signal,
    /// `sync()` then `reboot(RB_AUTOBOOT)`: the last resort.
    Syscall,
}

/// A `--reboot-command`: a program and its arguments, split on whitespace, run without a shell.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RebootCommand(Vec<String>);

impl RebootCommand {
    pub fn argv(&self) -> &[String] {
        &self.0
    }

    pub fn program(&self) -> &str {
        &self.0[0]
    }

    pub fn args(&self) -> &[String] {
        &self.0[1..]
    }
}

impl std::fmt::Display for RebootCommand {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Quoted as it was given, so that `sh -c '! needs-restarting -r'` reads back as one.
        f.write_str(&shell_words::join(&self.0))
    }
}

impl std::str::FromStr for RebootCommand {
    type Err = String;

    fn from_str(value: &str) -> Result<Self, String> {
        parse_reboot_command(value)
    }
}

/// Splits `value` into a program and its arguments as a POSIX shell would (quotes and
/// backslashes kept, as kured splits its commands), without running a shell: kured's
/// `sh -c '! needs-restarting -r'` is `sh`, `-c` and `! needs-restarting -r`.
pub(crate) fn parse_reboot_command(value: &str) -> Result<RebootCommand, String> {
    let argv = shell_words::split(value).map_err(|_| {
        format!(
            "the command {value:?} has a quote that is not closed; close it, or escape it \
             with a backslash"
        )
    })?;
    if argv.is_empty() {
        return Err(
            "the reboot command is empty; give a program and its arguments, \
                    such as `systemctl reboot`"
                .into(),
        );
    }
    Ok(RebootCommand(argv))
}

/// How to reboot, as configured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RebootSettings {
    pub method: RebootMethod,
    pub command: RebootCommand,
    pub host_mount_namespace: bool,
    pub signal_target_pid: i32,
    pub signal: i32,
}
