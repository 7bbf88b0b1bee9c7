//! The opt-out label (`reboot-disabled`), as an administrator types it, read fail-safe: a
//! node labelled to be left alone is left alone whatever the value says, unless it says
//! `false`. `kubectl label node db-1 reboot-disabled=` (the usual presence label), `=True`,
//! `=yes` and `=1` all opt the node out; only no label, or `false` (blanks and case aside:
//! `FALSE` says what `false` says), lets it be rebooted. The controller (no grant), the agent
//! (no automatic request) and `kubectl reboot` (status, plan, request) read it here, and say
//! how a value other than `true` or `false` was read.

use std::collections::BTreeMap;

/// How a node's opt-out label reads.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum OptOut {
    /// No label, or `false`: the node may be rebooted.
    #[default]
    No,
    /// `true`: opted out.
    Yes,
    /// Any other value, read as opted out (fail-safe); the value as found, for the Warning.
    Unexpected(String),
}

impl OptOut {
    /// How `value` (the label's, `None` without one) reads.
    pub fn of(value: Option<&str>) -> Self {
        let Some(value) = value else {
            return Self::No;
        };
        match value.trim() {
            "true" => Self::Yes,
            other if other.eq_ignore_ascii_case("false") => Self::No,
            _ => Self::Unexpected(value.to_owned()),
        }
    }

    /// How the label `key` among `labels` reads.
    pub fn of_labels(key: &str, labels: Option<&BTreeMap<String, String>>) -> Self {
        Self::of(labels.and_then(|l| l.get(key)).map(String::as_str))
    }

    /// The node is left alone: no grant, no automatic request.
    pub fn opts_out(&self) -> bool {
        !matches!(self, Self::No)
    }

    /// The value, when it is not one the operator expects (`true`, `false`, no label), read as
    /// opted out.
    pub fn unexpected(&self) -> Option<&str> {
        match self {
            Self::Unexpected(value) => Some(value),
            _ => None,
        }
    }

    /// The label as found, and how an unexpected value was read, for Events, logs and
    /// `kubectl reboot`: `reboot-disabled=true`, or `reboot-disabled="yes" (read as opted out:
    /// only false or no label lets the node reboot)`. `None` when the node is not opted out.
    pub fn describe(&self, key: &str) -> Option<String> {
        match self {
            Self::No => None,
            Self::Yes => Some(format!("{key}=true")),
            Self::Unexpected(value) => Some(format!(
                "{key}={value:?} (read as opted out: only `false` or no label lets the node \
                 reboot)"
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn anything_but_no_label_or_false_opts_out_and_unexpected_values_are_named() {
        use OptOut::{No, Unexpected, Yes};
        let unexpected = |v: &str| Unexpected(v.to_owned());
        let table: [(Option<&str>, OptOut); 14] = [
            (None, No),
            (Some("false"), No),
            (Some("FALSE"), No),
            (Some("False"), No),
            (Some(" false "), No),
            (Some("true"), Yes),
            (Some(" true\n"), Yes),
            (Some(""), unexpected("")),
            (Some("True"), unexpected("True")),
            (Some("yes"), unexpected("yes")),
            (Some("1"), unexpected("1")),
            (Some("no"), unexpected("no")),
            (Some("0"), unexpected("0")),
            (Some("off"), unexpected("off")),
        ];
        for (value, expected) in table {
            let read = OptOut::of(value);
            assert_eq!(read, expected, "{value:?}");
            assert_eq!(read.opts_out(), expected != No, "{value:?}");
            assert_eq!(
                read.unexpected().is_some(),
                matches!(expected, Unexpected(_)),
                "{value:?}"
            );
            let labels = value.map(|v| BTreeMap::from([("reboot-disabled".into(), v.into())]));
            assert_eq!(OptOut::of_labels("reboot-disabled", labels.as_ref()), read);
        }
        // Other labels do not opt a node out.
        let other = BTreeMap::from([("reboot-disabled-not".to_owned(), "true".to_owned())]);
        assert_eq!(OptOut::of_labels("reboot-disabled", Some(&other)), No);
    }

    #[test]
    fn the_label_is_described_as_found() {
        assert_eq!(OptOut::No.describe("reboot-disabled"), None);
        assert_eq!(
            OptOut::Yes.describe("reboot-disabled").as_deref(),
            Some("reboot-disabled=true")
        );
        let described = OptOut::of(Some("")).describe("reboot-disabled").unwrap();
        assert!(
            described.starts_with("reboot-disabled=\"\" (read as opted out"),
            "{described}"
        );
    }
}
