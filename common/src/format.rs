//! The format version of what the operator stores: the protocol's annotations on a Node
//! (`reboot-protocol-version`) and the slot ledger (`node-reboot-operator/format` on its Lease).
//!
//! A version says how the rest of the object is to be read. State written before versions
//! existed carries none and reads as version 1, so nothing already in a cluster becomes
//! unreadable. A program that finds a version it does not know (a newer operator wrote it, and
//! this one was rolled back or is the old replica of an upgrade) refuses to act on that object
//! instead of misreading it: misread, a ledger could look emptier than it is and grant slots
//! beyond the budget.

use std::fmt;

/// The format this build reads and writes.
pub const CURRENT: u32 = 1;

/// A stored format version this build does not know: newer than [`CURRENT`], or not a version
/// at all (read as unknown, fail-safe: nothing is done on a guess).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownFormat {
    /// The value as found.
    pub found: String,
}

impl fmt::Display for UnknownFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "format version {:?}, but this operator knows only versions up to {CURRENT}: \
             a newer operator wrote it; upgrade the operator (the controller and the agents) \
             to the version that wrote it",
            self.found
        )
    }
}

/// The version an object's stored value says: `Ok` for none (written before versions
/// existed: version 1) or a version this build knows, the value otherwise.
pub fn check(value: Option<&str>) -> Result<u32, UnknownFormat> {
    let Some(value) = value else {
        return Ok(1);
    };
    match value.trim().parse::<u32>() {
        Ok(version) if (1..=CURRENT).contains(&version) => Ok(version),
        _ => Err(UnknownFormat {
            found: value.to_owned(),
        }),
    }
}

/// The value written with every write of the current format.
pub fn current() -> String {
    CURRENT.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn none_reads_as_the_first_version_and_only_known_versions_are_read() {
        assert_eq!(check(None), Ok(1));
        assert_eq!(check(Some("1")), Ok(1));
        assert_eq!(check(Some(&current())), Ok(CURRENT));
        for unknown in ["2", "999", "0", "-1", "", "v1", "1.0", "abc"] {
            let error = check(Some(unknown)).unwrap_err();
            assert_eq!(error.found, unknown);
            let said = error.to_string();
            assert!(
                said.contains("upgrade the operator") && said.contains("up to 1"),
                "{said}"
            );
        }
    }
}
