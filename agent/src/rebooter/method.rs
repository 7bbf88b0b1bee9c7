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
        f.write_str(&self.0.join(" "))
    }
}

impl std::str::FromStr for RebootCommand {
    type Err = String;

    fn from_str(value: &str) -> Result<Self, String> {
        parse_reboot_command(value)
    }
}

pub(crate) fn parse_reboot_command(value: &str) -> Result<RebootCommand, String> {
    let argv: Vec<String> = value.split_whitespace().map(str::to_owned).collect();
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
