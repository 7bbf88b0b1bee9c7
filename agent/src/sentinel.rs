//! Whether the node needs a reboot by the operating system's own word: a sentinel file
//! (`/var/run/reboot-required` on Debian and Ubuntu) or a command (RHEL's
//! `needs-restarting -r`). The check is cheap (a stat, or one command) and makes no API
//! request while nothing changes: only a found sentinel on a node without a request, or a
//! record of one that is gone, leads to one patch.
//!
//! A sentinel that survives the reboot it asked for (the update did not apply, the file is on
//! a persistent disk) must not cause a reboot loop: the request records the boot it was made
//! in and the sentinel's fingerprint (`reboot-sentinel`), and the same fingerprint in a later
//! boot is reported, never acted on, until the sentinel changes. In the same boot it means
//! that no reboot happened: an administrator cancelled the request, and that is respected.
//! Once the sentinel is gone the record is forgotten, so the next need, even identical, is
//! a new one.

use crate::rebooter::{RebootCommand, command::host_command};
use common::{OptOut, Phase, ProtocolState, Request};
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
    /// The sentinel is there, but the node is opted out (`reboot-disabled`, any value but
    /// `false`): no request; an unexpected value is warned about.
    OptedOut,
    /// The sentinel is still the one a past reboot was requested for, and the node has booted
    /// since: report it, do not request again.
    Persists,
    /// The sentinel is gone: remove the record (`reboot-sentinel`), so that it coming back,
    /// even byte for byte the same, is a new need.
    Forget,
}

/// What `reboot-sentinel` says: the sentinel a past automatic request was made for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SentinelRecord<'a> {
    /// The boot the request was made in; `None` for a record without one (written by an
    /// agent before boot ids were recorded, or edited by hand).
    pub boot_id: Option<&'a str>,
    pub fingerprint: &'a str,
}

const FILE: &str = "file";
const COMMAND: &str = "command";
/// The first word of every fingerprint: tells a record without a boot id from one with it.
const FINGERPRINT_KINDS: [&str; 2] = [FILE, COMMAND];

impl<'a> SentinelRecord<'a> {
    /// The annotation's value: `<boot-id> <fingerprint>`.
    pub fn format(boot_id: &str, fingerprint: &str) -> String {
        format!("{boot_id} {fingerprint}")
    }

    /// Reads a value of `reboot-sentinel`. An older agent wrote the bare fingerprint (it starts
    /// with its kind); that, or a value without a space, is a record of an unknown boot.
    pub fn parse(value: &'a str) -> Self {
        let unknown_boot = Self {
            boot_id: None,
            fingerprint: value,
        };
        match value.split_once(' ') {
            Some((first, _)) if FINGERPRINT_KINDS.contains(&first) => unknown_boot,
            Some((boot_id, fingerprint)) => Self {
                boot_id: Some(boot_id),
                fingerprint,
            },
            None => unknown_boot,
        }
    }

    /// Whether the node booted since the record was made. Unknown for a record without a boot
    /// id: taken as yes, so that an agent upgrade never turns a sentinel that an older agent
    /// already saw survive its reboot into a new request (no loop; at worst a report).
    fn booted_since(&self, current_boot_id: &str) -> bool {
        self.boot_id != Some(current_boot_id)
    }
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
    pub fn check(&self) -> Result<Option<String>, SentinelFailure> {
        match self {
            Self::File(path) => match std::fs::File::open(path) {
                Ok(mut file) => {
                    let meta = file.metadata().map_err(|e| SentinelFailure::io(path, &e))?;
                    let modified = meta
                        .modified()
                        .ok()
                        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                        .unwrap_or_default();
                    let mut content = Vec::new();
                    (&mut file)
                        .take(64 * 1024)
                        .read_to_end(&mut content)
                        .map_err(|e| SentinelFailure::io(path, &e))?;
                    Ok(Some(format!(
                        "{} {}.{:09} {} {:016x}",
                        FILE,
                        modified.as_secs(),
                        modified.subsec_nanos(),
                        meta.len(),
                        fnv1a(&content)
                    )))
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
                Err(e) => Err(SentinelFailure::io(path, &e)),
            },
            Self::Command {
                command,
                needed,
                host_mount_namespace,
            } => {
                let output = host_command(command, *host_mount_namespace)
                    .stdin(Stdio::null())
                    .output()
                    .map_err(|e| SentinelFailure {
                        cause: "not started".into(),
                        message: format!("cannot run `{command}`: {e}"),
                    })?;
                match answer(output.status.code(), *needed) {
                    Answer::Needed => {
                        Ok(Some(format!("{} {:016x}", COMMAND, fnv1a(&output.stdout))))
                    }
                    Answer::NotNeeded => Ok(None),
                    Answer::Failed(cause) => Err(SentinelFailure {
                        message: format!(
                            "`{command}` did not answer ({cause}; it says {} for \"reboot \
                             needed\"), so whether the node needs a reboot is not known: {}",
                            needed,
                            stderr_of(&output.stderr)
                        ),
                        cause,
                    }),
                }
            }
        }
    }
}

/// Why a sentinel could not be looked at: `cause` is short and stable (one Warning per cause),
/// `message` says everything, with the command's own error output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SentinelFailure {
    pub cause: String,
    pub message: String,
}

impl SentinelFailure {
    fn io(path: &std::path::Path, error: &std::io::Error) -> Self {
        Self {
            cause: "unreadable".into(),
            message: format!("cannot read {}: {error}", path.display()),
        }
    }
}

/// What a sentinel command's exit says.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Answer {
    Needed,
    NotNeeded,
    /// The command did not run to an answer: a shell's 126 (found, not executable, or the
    /// host's mount namespace could not be entered), its 127 (not found), or a signal.
    Failed(String),
}

/// Pure: the answer of a command that exited with `code` (`None`: killed by a signal) when
/// `needed` means a reboot is needed. Any other exit is "not needed", as kured reads it,
/// except those of a command that did not run to an answer.
fn answer(code: Option<i32>, needed: i32) -> Answer {
    match code {
        Some(code) if code == needed => Answer::Needed,
        Some(code @ (126 | 127)) => Answer::Failed(format!("exit code {code}")),
        Some(_) => Answer::NotNeeded,
        None => Answer::Failed("killed by a signal".into()),
    }
}

/// The command's error output for a message: its last 300 bytes, or that it wrote none.
fn stderr_of(stderr: &[u8]) -> String {
    let text = String::from_utf8_lossy(stderr);
    let text = text.trim();
    if text.is_empty() {
        return "it wrote nothing on its error output".into();
    }
    let start = text.len().saturating_sub(300);
    let start = (start..text.len())
        .find(|i| text.is_char_boundary(*i))
        .unwrap_or(0);
    format!("its error output ends with {:?}", &text[start..])
}

/// FNV-1a: a stable 64-bit hash (the fingerprint is kept on the Node across agent versions).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(*byte)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Pure: what to do about a sentinel found with `fingerprint` (`None`: not found) on a node in
/// `state`, opted out as `opt_out` says, booted as `boot_id`, `recorded` being the value of
/// `reboot-sentinel` (the sentinel its last automatic request was made for).
pub fn decide_sentinel(
    state: &ProtocolState,
    opt_out: &OptOut,
    fingerprint: Option<&str>,
    recorded: Option<&str>,
    boot_id: &str,
) -> SentinelAction {
    // While a request is pending or a reboot under way, the record belongs to it. While the
    // node is being given up (`reboot-abandon`), the give-up would clear a request made now,
    // and the record of this boot would keep the sentinel from asking again in this boot.
    let idle = state.request == Request::Absent
        && state.phase == Phase::Idle
        && state.grant.is_none()
        && state.abandon.is_none()
        && !state.reboot_under_way();
    if !idle {
        return SentinelAction::Nothing;
    }
    let recorded = recorded.map(SentinelRecord::parse);
    let Some(fingerprint) = fingerprint else {
        // Forgetting is no request, so an opted-out node forgets too.
        return if recorded.is_some() {
            SentinelAction::Forget
        } else {
            SentinelAction::Nothing
        };
    };
    match recorded {
        _ if opt_out.opts_out() => SentinelAction::OptedOut,
        Some(record) if record.fingerprint == fingerprint => {
            if record.booted_since(boot_id) {
                SentinelAction::Persists
            } else {
                // No reboot since the request: an administrator cancelled it.
                SentinelAction::Nothing
            }
        }
        _ => SentinelAction::Request,
    }
}

#[cfg(test)]
mod answers {
    use super::*;

    #[test]
    fn a_command_that_did_not_run_to_an_answer_is_no_answer() {
        assert_eq!(answer(Some(0), 0), Answer::Needed);
        assert_eq!(answer(Some(1), 0), Answer::NotNeeded, "kured's reading");
        assert_eq!(answer(Some(1), 1), Answer::Needed);
        assert_eq!(answer(Some(0), 1), Answer::NotNeeded);
        for code in [126, 127] {
            assert!(matches!(answer(Some(code), 0), Answer::Failed(_)), "{code}");
        }
        assert_eq!(answer(None, 0), Answer::Failed("killed by a signal".into()));
        // The code said to mean "needed" wins, even one a shell uses for its own failures.
        assert_eq!(answer(Some(126), 126), Answer::Needed);
    }

    #[test]
    fn the_error_output_is_cut_to_its_end() {
        assert_eq!(stderr_of(b"  \n"), "it wrote nothing on its error output");
        let long = "é".repeat(400);
        let shown = stderr_of(long.as_bytes());
        assert!(shown.len() < 340, "{shown}");
        assert!(shown.ends_with("é\""), "{shown}");
    }

    #[test]
    fn kureds_commands_split_as_a_shell_splits_them() {
        let command = crate::rebooter::parse_reboot_command("sh -c '! needs-restarting -r'")
            .expect("a command");
        assert_eq!(command.argv(), ["sh", "-c", "! needs-restarting -r"]);
        assert_eq!(command.to_string(), "sh -c '! needs-restarting -r'");
        let plain = crate::rebooter::parse_reboot_command("systemctl  reboot").expect("a command");
        assert_eq!(plain.argv(), ["systemctl", "reboot"]);
        let error = crate::rebooter::parse_reboot_command("sh -c 'exit 1").expect_err("open quote");
        assert!(error.contains("quote that is not closed"), "{error}");
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
    fn requests_reports_respects_a_cancel_and_forgets() {
        use SentinelAction::*;
        let idle = state(&[]);
        // (what, opted out, found, recorded, expected), all in boot `b2`.
        let cases = [
            (
                "nothing found, nothing recorded",
                false,
                None,
                None,
                Nothing,
            ),
            ("a need", false, Some("command 1"), None, Request),
            ("opted out", true, Some("command 1"), None, OptedOut),
            (
                "another sentinel than the recorded one",
                false,
                Some("command 2"),
                Some("b1 command 1"),
                Request,
            ),
            (
                "the same one after a reboot",
                false,
                Some("command 1"),
                Some("b1 command 1"),
                Persists,
            ),
            (
                "the same one in the same boot: the request was cancelled",
                false,
                Some("command 1"),
                Some("b2 command 1"),
                Nothing,
            ),
            (
                "the same one, recorded by an older agent without a boot id",
                false,
                Some("command 1"),
                Some("command 1"),
                Persists,
            ),
            (
                "an unreadable record",
                false,
                Some("command 1"),
                Some("banana"),
                Request,
            ),
            ("gone: forget", false, None, Some("b1 command 1"), Forget),
            (
                "gone, cancelled in this boot: forget",
                false,
                None,
                Some("b2 command 1"),
                Forget,
            ),
            (
                "gone, opted out: forget",
                true,
                None,
                Some("b1 file 1"),
                Forget,
            ),
            (
                "gone, an old record: forget",
                false,
                None,
                Some("file 1"),
                Forget,
            ),
            (
                "the same one opted out after a reboot",
                true,
                Some("command 1"),
                Some("b1 command 1"),
                OptedOut,
            ),
        ];
        for (what, opted_out, found, recorded, expected) in cases {
            let opt_out = if opted_out { OptOut::Yes } else { OptOut::No };
            assert_eq!(
                decide_sentinel(&idle, &opt_out, found, recorded, "b2"),
                expected,
                "{what}"
            );
        }
    }

    /// Whatever an administrator typed as `reboot-disabled`, only `false` (any case) lets the
    /// sentinel request a reboot.
    #[test]
    fn any_opt_out_value_but_false_keeps_the_sentinel_from_requesting() {
        let keys = AnnotationKeys::default();
        for (typed, requests) in [
            (None, true),
            (Some("false"), true),
            (Some("FALSE"), true),
            (Some("true"), false),
            (Some(""), false),
            (Some("True"), false),
            (Some("yes"), false),
            (Some("1"), false),
        ] {
            let labels: BTreeMap<String, String> = typed
                .map(|v| (keys.disabled.clone(), v.to_owned()))
                .into_iter()
                .collect();
            let opt_out = keys.opt_out(Some(&labels));
            let action = decide_sentinel(&state(&[]), &opt_out, Some("command 1"), None, "b2");
            let expected = if requests {
                SentinelAction::Request
            } else {
                SentinelAction::OptedOut
            };
            assert_eq!(action, expected, "{typed:?}");
            // Said in a Warning when it is neither `true` nor `false`.
            assert_eq!(
                opt_out.unexpected(),
                typed.filter(|t| !requests && *t != "true"),
                "{typed:?}"
            );
        }
    }

    #[test]
    fn never_acts_while_a_request_is_pending_or_a_reboot_under_way() {
        for busy in [
            state(&[("reboot-needed", "true")]),
            state(&[("reboot-needed", "banana")]),
            state(&[("reboot-now", "true")]),
            state(&[("reboot-in-progress", "true"), ("reboot-boot-id", "b")]),
            state(&[("reboot-done", "true")]),
            state(&[("reboot-grant", "g")]),
        ] {
            for (found, recorded) in [
                (Some("command 1"), None),
                (Some("command 1"), Some("b1 command 1")),
                (None, Some("b1 command 1")),
            ] {
                assert_eq!(
                    decide_sentinel(&busy, &OptOut::No, found, recorded, "b2"),
                    SentinelAction::Nothing,
                    "{busy:?} {found:?} {recorded:?}"
                );
            }
        }
    }

    /// A node being given up: the controller's give-up would clear a request made now, and the
    /// record of this boot would keep the sentinel from asking again until the next boot. It
    /// asks once the give-up is over.
    #[test]
    fn never_requests_while_the_node_is_being_given_up() {
        let given_up = state(&[("reboot-abandon", "{\"by\":\"alice\"}")]);
        assert_eq!(
            decide_sentinel(&given_up, &OptOut::No, Some("command 1"), None, "b2"),
            SentinelAction::Nothing
        );
        assert_eq!(
            decide_sentinel(&state(&[]), &OptOut::No, Some("command 1"), None, "b2"),
            SentinelAction::Request,
            "once the give-up is over"
        );
    }

    #[test]
    fn a_record_is_read_with_its_boot_and_an_old_one_without() {
        let record = SentinelRecord::format("b1", "file 1.000000002 3 00000000000000ff");
        assert_eq!(
            SentinelRecord::parse(&record),
            SentinelRecord {
                boot_id: Some("b1"),
                fingerprint: "file 1.000000002 3 00000000000000ff"
            }
        );
        for old in ["command 00000000000000ff", "file 1.000000002 3 ff", "x", ""] {
            assert_eq!(
                SentinelRecord::parse(old),
                SentinelRecord {
                    boot_id: None,
                    fingerprint: old
                },
                "{old}"
            );
        }
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
