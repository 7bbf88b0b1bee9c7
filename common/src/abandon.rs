//! The value of `reboot-abandon`: who gave the node up and why. `kubectl reboot abandon`
//! writes it as JSON; a value typed by hand is read as the reason, by someone unnamed, unless
//! it reads as no (`false`, `no`, `0`): that gives nothing up, and is warned about.

use serde::{Deserialize, Serialize};

/// Who gave a node up, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Abandon {
    /// The identity that asked: the user the API server authenticated, as the plugin read it.
    pub by: String,
    #[serde(default)]
    pub reason: String,
}

/// Whether a value of `reboot-abandon` reads as no (`false`, `no` or `0`, blanks and case
/// aside): not a give-up. Giving a node up stops its reboot and releases its slot, so a value
/// that says no must never do it.
pub fn reads_as_no(value: &str) -> bool {
    let value = value.trim();
    ["false", "no", "0"]
        .iter()
        .any(|no| value.eq_ignore_ascii_case(no))
}

impl Abandon {
    /// The annotation's value.
    pub fn to_value(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Reads any value: the plugin's JSON, or text typed by hand (the reason; nobody named).
    pub fn read(value: &str) -> Self {
        serde_json::from_str::<Self>(value).unwrap_or_else(|_| Self {
            by: String::new(),
            reason: value.trim().to_owned(),
        })
    }

    /// `by alice (the disk is dead)`, as Events and the status say it.
    pub fn describe(&self) -> String {
        let by = if self.by.trim().is_empty() {
            "by hand (no requester recorded)".to_owned()
        } else {
            format!("by {}", self.by.trim())
        };
        match self.reason.trim() {
            "" => format!("{by}, no reason given"),
            reason => format!("{by}: {reason}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_false_no_and_0_read_as_no() {
        for no in ["false", "no", "0", "No", " FALSE ", "NO"] {
            assert!(reads_as_no(no), "{no:?}");
        }
        let by_plugin = Abandon {
            by: "alice".into(),
            reason: "no".into(),
        };
        for give_up in ["", "yes", "true", "replaced", "none", &by_plugin.to_value()] {
            assert!(!reads_as_no(give_up), "{give_up:?}");
        }
    }

    #[test]
    fn the_plugins_value_reads_back_and_a_hand_typed_one_is_the_reason() {
        let written = Abandon {
            by: "alice".into(),
            reason: "disk dead".into(),
        };
        assert_eq!(Abandon::read(&written.to_value()), written);
        assert_eq!(written.describe(), "by alice: disk dead");
        let by_hand = Abandon::read(" replaced ");
        assert_eq!(by_hand.reason, "replaced");
        assert_eq!(
            by_hand.describe(),
            "by hand (no requester recorded): replaced"
        );
        assert_eq!(
            Abandon::read(r#"{"by":"bob"}"#).describe(),
            "by bob, no reason given"
        );
    }
}
