//! The validated configuration of a running agent: [`crate::Args`] plus what they point to.

use crate::args::Args;
use crate::attempts::AttemptsFile;
use crate::rebooter::RebootSettings;
use crate::sentinel::Sentinel;
use common::AnnotationKeys;
use std::{path::PathBuf, time::Duration};
use thiserror::Error;

/// A configuration the agent cannot start with (exit code 2).
#[derive(Debug, Error)]
pub enum ConfigError {
    #[error(
        "NODE_NAME is not set: the agent must know which Node it runs on; set the environment \
         variable NODE_NAME (in a DaemonSet from the downward API, fieldRef spec.nodeName) or \
         pass --node-name"
    )]
    MissingNodeName,
    #[error(
        "cannot read the boot id from {path}: {source}; the agent proves reboots by this file \
         changing, so point --boot-id-file (env BOOT_ID_FILE) at a readable file \
         (normally /proc/sys/kernel/random/boot_id)"
    )]
    BootIdUnreadable {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "the boot id file {path} is empty; point --boot-id-file (env BOOT_ID_FILE) at a file \
         that holds the boot id (normally /proc/sys/kernel/random/boot_id)"
    )]
    BootIdEmpty { path: PathBuf },
}

// Built here, beside the rest of the configuration; the type is the rebooter's.
impl RebootSettings {
    pub fn from_args(args: &Args) -> Self {
        Self {
            method: args.reboot_method,
            command: args.reboot_command.clone(),
            host_mount_namespace: args.host_mount_namespace,
            signal_target_pid: args.signal_target_pid,
            signal: args.reboot_signal,
        }
    }
}

/// Everything the agent's run loop needs.
#[derive(Debug, Clone)]
pub struct Settings {
    pub node_name: String,
    /// The boot id of the running system, read once at start: a reboot ends this process.
    pub boot_id: String,
    pub keys: AnnotationKeys,
    pub reboot_timeout: Duration,
    pub reboot: RebootSettings,
    /// Where the operating system says a reboot is needed (`None`: on request only).
    pub sentinel: Option<Sentinel>,
    pub check_period: Duration,
    /// The count of reboots from this boot id, and its bound.
    pub attempts: AttemptsFile,
}

impl Settings {
    pub fn from_args(args: &Args) -> Result<Self, ConfigError> {
        let node_name = args
            .node_name
            .as_deref()
            .map(str::trim)
            .filter(|name| !name.is_empty())
            .ok_or(ConfigError::MissingNodeName)?;
        Ok(Self {
            node_name: node_name.to_owned(),
            boot_id: read_boot_id(&args.boot_id_file)?,
            keys: args.annotation_keys.clone(),
            reboot_timeout: args.reboot_timeout,
            reboot: RebootSettings::from_args(args),
            sentinel: sentinel_from_args(args),
            check_period: args.check_period,
            attempts: AttemptsFile::new(&args.reboot_attempts_file, args.max_unproven_reboots),
        })
    }
}

fn sentinel_from_args(args: &Args) -> Option<Sentinel> {
    if let Some(path) = &args.reboot_sentinel_file {
        return Some(Sentinel::File(path.clone()));
    }
    args.reboot_sentinel_command
        .clone()
        .map(|command| Sentinel::Command {
            command,
            needed: args.reboot_sentinel_exit_code,
            host_mount_namespace: args.host_mount_namespace,
        })
}

/// Reads a boot id file (one line, such as the kernel's `boot_id`).
pub fn read_boot_id(path: &std::path::Path) -> Result<String, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::BootIdUnreadable {
        path: path.to_owned(),
        source,
    })?;
    let boot_id = text.trim();
    if boot_id.is_empty() {
        return Err(ConfigError::BootIdEmpty {
            path: path.to_owned(),
        });
    }
    Ok(boot_id.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use std::io::Write;

    fn args(extra: &[&str]) -> Args {
        Args::try_parse_from(["reboot-agent"].iter().chain(extra)).unwrap()
    }

    #[test]
    fn a_missing_or_blank_node_name_names_the_variable_and_the_flag() {
        for extra in [&[][..], &["--node-name", " "][..]] {
            let mut args = args(extra);
            if extra.is_empty() {
                args.node_name = None; // independent of the test runner's environment
            }
            let err = Settings::from_args(&args).unwrap_err().to_string();
            assert!(
                err.contains("NODE_NAME") && err.contains("--node-name"),
                "{err}"
            );
        }
    }

    #[test]
    fn the_boot_id_is_read_and_trimmed() {
        let mut file = tempfile::NamedTempFile::new().unwrap();
        writeln!(file, "6d1c3f2e-0000-4000-8000-000000000001").unwrap();
        let path = file.path().to_str().unwrap();
        let settings =
            Settings::from_args(&args(&["--node-name", "n1", "--boot-id-file", path])).unwrap();
        assert_eq!(settings.boot_id, "6d1c3f2e-0000-4000-8000-000000000001");
        assert_eq!(settings.node_name, "n1");
    }

    #[test]
    fn an_unreadable_or_empty_boot_id_file_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing");
        let err = read_boot_id(&missing).unwrap_err().to_string();
        assert!(err.contains(missing.to_str().unwrap()), "{err}");
        assert!(err.contains("--boot-id-file"), "{err}");

        let empty = dir.path().join("empty");
        std::fs::write(&empty, "\n").unwrap();
        let err = read_boot_id(&empty).unwrap_err().to_string();
        assert!(
            err.contains("is empty") && err.contains(empty.to_str().unwrap()),
            "{err}"
        );
    }
}
