//! A bound on reboots that prove nothing. A reboot method that keeps the boot id
//! (`systemctl soft-reboot` as the reboot command, a command that does nothing) ends the agent
//! and starts it again in the same boot: it finds `reboot-in-progress` from its own boot id and
//! reboots again, for ever. The agent counts its attempts from one boot id and stops after
//! `--max-unproven-reboots` of them.
//!
//! The count must outlive the agent's process (each attempt ends it), so it is kept in a small
//! file on a volume that survives a restart of the container (an emptyDir), keyed by the boot
//! id: a real reboot, which changes the boot id, starts the count again. It is a guard, not
//! protocol state: lost with the pod, it costs at most `--max-unproven-reboots` more attempts.

use std::path::{Path, PathBuf};

/// What to do about the next reboot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Next {
    /// Reboot: attempt `number` from this boot id; `record` is what to keep for the next one.
    Attempt { number: u32, record: String },
    /// `made` attempts from this boot id proved nothing: stop rebooting.
    Stop { made: u32 },
}

/// The attempts a record counts from `boot_id` (none when it is of another boot, or unreadable).
fn made_from(record: Option<&str>, boot_id: &str) -> u32 {
    let Some((recorded, count)) = record.and_then(|r| r.trim().split_once(' ')) else {
        return 0;
    };
    if recorded != boot_id {
        return 0;
    }
    count.trim().parse().unwrap_or(0)
}

/// Decides the next reboot from the record, the current boot id and the bound (`0`: none).
/// A new go-ahead (`reboot-now`) starts the count again: the controller asked anew.
pub fn next(record: Option<&str>, boot_id: &str, go_ahead: bool, max: u32) -> Next {
    let made = if go_ahead {
        0
    } else {
        made_from(record, boot_id)
    };
    if max > 0 && made >= max {
        return Next::Stop { made };
    }
    let number = made.saturating_add(1);
    Next::Attempt {
        number,
        record: format!("{boot_id} {number}\n"),
    }
}

/// The count's file.
#[derive(Debug, Clone)]
pub struct AttemptsFile {
    pub path: PathBuf,
    pub max: u32,
}

impl AttemptsFile {
    pub fn new(path: &Path, max: u32) -> Self {
        Self {
            path: path.to_owned(),
            max,
        }
    }

    /// The next reboot as the file counts it; the attempt is recorded before it is made. A
    /// file that cannot be written never keeps a node from its reboot: the error is returned
    /// beside the attempt, for a warning.
    pub fn next(&self, boot_id: &str, go_ahead: bool) -> (Next, Option<std::io::Error>) {
        let record = std::fs::read_to_string(&self.path).ok();
        let next = next(record.as_deref(), boot_id, go_ahead, self.max);
        let error = match &next {
            Next::Attempt { record, .. } => self.write(record).err(),
            Next::Stop { .. } => None,
        };
        (next, error)
    }

    fn write(&self, record: &str) -> std::io::Result<()> {
        if let Some(dir) = self.path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::write(&self.path, record)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each attempt ends the process; what the file keeps is the next one's `record`.
    fn run(max: u32, boots: &[(&str, bool)]) -> Vec<Next> {
        let mut record: Option<String> = None;
        boots
            .iter()
            .map(|(boot_id, go_ahead)| {
                let next = next(record.as_deref(), boot_id, *go_ahead, max);
                if let Next::Attempt { record: r, .. } = &next {
                    record = Some(r.clone());
                }
                next
            })
            .collect()
    }

    #[test]
    fn a_reboot_that_keeps_the_boot_id_is_tried_a_few_times_then_stops() {
        let steps = run(3, &[("a", true), ("a", false), ("a", false), ("a", false)]);
        let numbers: Vec<Option<u32>> = steps
            .iter()
            .map(|n| match n {
                Next::Attempt { number, .. } => Some(*number),
                Next::Stop { .. } => None,
            })
            .collect();
        assert_eq!(numbers, [Some(1), Some(2), Some(3), None]);
        assert_eq!(steps[3], Next::Stop { made: 3 });
        // Stopped, it stays stopped while the boot id stays.
        assert_eq!(next(Some("a 3\n"), "a", false, 3), Next::Stop { made: 3 });
    }

    #[test]
    fn a_new_boot_or_a_new_go_ahead_starts_the_count_again() {
        assert!(matches!(
            next(Some("a 3\n"), "b", false, 3),
            Next::Attempt { number: 1, .. }
        ));
        assert!(matches!(
            next(Some("a 3\n"), "a", true, 3),
            Next::Attempt { number: 1, .. }
        ));
        // Garbage counts nothing; 0 turns the bound off.
        assert!(matches!(
            next(Some("oops"), "a", false, 3),
            Next::Attempt { number: 1, .. }
        ));
        assert!(matches!(
            next(Some("a 99\n"), "a", false, 0),
            Next::Attempt { number: 100, .. }
        ));
    }

    #[test]
    fn the_file_keeps_the_count_across_processes() {
        let dir = std::env::temp_dir().join(format!("attempts-{}", std::process::id()));
        let file = AttemptsFile::new(&dir.join("state").join("reboot-attempts"), 2);
        assert!(matches!(
            file.next("a", true),
            (Next::Attempt { number: 1, .. }, None)
        ));
        assert!(matches!(
            file.next("a", false),
            (Next::Attempt { number: 2, .. }, None)
        ));
        assert!(matches!(
            file.next("a", false),
            (Next::Stop { made: 2 }, None)
        ));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
