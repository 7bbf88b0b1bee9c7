//! Whether the node needs a reboot by the operating system's own word: a sentinel file
//! (`/var/run/reboot-required` on Debian and Ubuntu) or a command (RHEL's
//! `needs-restarting -r`). The check is cheap (a stat, or one command) and makes no API
//! request; only a found sentinel on a node without a request leads to one patch.
//!
//! A sentinel that survives the reboot it asked for (the update did not apply, the file is on
//! a persistent disk) must not cause a reboot loop: the request records the sentinel's
//! fingerprint (`reboot-sentinel`), and the same fingerprint after that reboot is reported,
//! never acted on, until the sentinel changes.

use crate::{args::RebootCommand, rebooter::command::host_command};
use common::{Phase, ProtocolState, Request};
use std::{io::Read, path::PathBuf, process::Stdio};

/// Where the agent looks for the operating system's request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sentinel {
    File(PathBuf),
    /// A command whose exit code `needed` means a reboot is needed.
    Command {
        command: RebootCommand,
        needed: i32,
        host_mount_namespace: bool,
    },
}

/// What the agent does about the sentinel on one check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SentinelAction {
    Nothing,
    /// Write `reboot-needed` with who asked and the fingerprint.
    Request,
    /// The sentinel is still the one a past reboot was requested for.
    Persists,
}

impl Sentinel {
    /// `agent: <what>` for `reboot-requested-by` and the Events.
    pub fn describe(&self) -> String {
        match self {
            Self::File(path) => path.display().to_string(),
            Self::Command { command, .. } => format!("`{command}`"),
        }
    }

    /// The sentinel's fingerprint when it says a reboot is needed; `None` when it does not.
    /// Changes whenever the file's modification time, size or content, or the command's
    /// output, changes.
    pub fn check(&self) -> Result<Option<String>, String> {
        match self {
            Self::File(path) => match std::fs::File::open(path) {
                Ok(mut file) => {
                    let meta = file.metadata().map_err(|e| e.to_string())?;
                    let modified = meta
                        .modified()
                        .ok()
                        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                        .unwrap_or_default();
                    let mut content = Vec::new();
                    (&mut file)
                        .take(64 * 1024)
                        .read_to_end(&mut content)
                        .map_err(|e| e.to_string())?;
                    Ok(Some(format!(
                        "file {}.{:09} {} {:016x}",
                        modified.as_secs(),
                        modified.subsec_nanos(),
                        meta.len(),
                        fnv1a(&content)
                    )))
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
                Err(e) => Err(format!("cannot read {}: {e}", path.display())),
            },
            Self::Command {
                command,
                needed,
                host_mount_namespace,
            } => {
                let output = host_command(command, *host_mount_namespace)
                    .stdin(Stdio::null())
                    .output()
                    .map_err(|e| format!("cannot run {command}: {e}"))?;
                Ok((output.status.code() == Some(*needed))
                    .then(|| format!("command {:016x}", fnv1a(&output.stdout))))
            }
        }
    }
}

/// FNV-1a: a stable 64-bit hash (the fingerprint is kept on the Node across agent versions).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(*byte)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Pure: what to do about a sentinel found with `fingerprint` (`None`: not found) on a node in
/// `state`, `recorded` being the fingerprint its last automatic request was made for.
pub fn decide_sentinel(
    state: &ProtocolState,
    opted_out: bool,
    fingerprint: Option<&str>,
    recorded: Option<&str>,
) -> SentinelAction {
    let Some(fingerprint) = fingerprint else {
        return SentinelAction::Nothing;
    };
    let idle = state.request == Request::Absent
        && state.phase == Phase::Idle
        && state.grant.is_none()
        && !state.reboot_under_way();
    if opted_out || !idle {
        SentinelAction::Nothing
    } else if recorded == Some(fingerprint) {
        SentinelAction::Persists
    } else {
        SentinelAction::Request
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use common::AnnotationKeys;
    use std::collections::BTreeMap;

    fn state(annotations: &[(&str, &str)]) -> ProtocolState {
        let map: BTreeMap<String, String> = annotations
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        ProtocolState::from_annotations(&AnnotationKeys::default(), &map)
    }

    #[test]
    fn requests_once_never_during_its_reboot_and_reports_a_sentinel_that_survived() {
        use SentinelAction::*;
        let idle = state(&[]);
        assert_eq!(decide_sentinel(&idle, false, None, None), Nothing);
        assert_eq!(decide_sentinel(&idle, false, Some("a"), None), Request);
        assert_eq!(
            decide_sentinel(&idle, true, Some("a"), None),
            Nothing,
            "opted out"
        );
        for busy in [
            state(&[("reboot-needed", "true")]),
            state(&[("reboot-now", "true")]),
            state(&[("reboot-in-progress", "true"), ("reboot-boot-id", "b")]),
            state(&[("reboot-done", "true")]),
            state(&[("reboot-grant", "g")]),
        ] {
            assert_eq!(decide_sentinel(&busy, false, Some("a"), None), Nothing);
        }
        // After the reboot requested for `a`: the same sentinel persists, a new one requests.
        assert_eq!(
            decide_sentinel(&idle, false, Some("a"), Some("a")),
            Persists
        );
        assert_eq!(decide_sentinel(&idle, false, Some("b"), Some("a")), Request);
        assert_eq!(decide_sentinel(&idle, false, None, Some("a")), Nothing);
    }

    #[test]
    fn a_files_fingerprint_changes_with_its_content_and_a_missing_file_is_none() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("reboot-required");
        let sentinel = Sentinel::File(path.clone());
        assert_eq!(sentinel.check(), Ok(None));
        std::fs::write(&path, "*** System restart required ***\n").unwrap();
        let first = sentinel.check().unwrap().expect("found");
        assert_eq!(sentinel.check().unwrap().as_ref(), Some(&first), "stable");
        std::fs::write(&path, "*** System restart required *** (linux-image)\n").unwrap();
        assert_ne!(sentinel.check().unwrap(), Some(first));
    }

    #[test]
    fn a_command_says_needed_by_its_exit_code() {
        let command = |text: &str, needed| Sentinel::Command {
            command: text.parse().unwrap(),
            needed,
            host_mount_namespace: false,
        };
        assert!(command("true", 0).check().unwrap().is_some());
        assert!(command("false", 0).check().unwrap().is_none());
        assert!(
            command("false", 1).check().unwrap().is_some(),
            "needs-restarting -r style"
        );
        assert!(command("/nonexistent/needs-restarting", 0).check().is_err());
    }
}
