//! What the controller puts on a node around its reboot besides the protocol's annotations,
//! for load balancers, monitoring and the scheduler: labels while the node holds a slot,
//! labels once it is back, and a `PreferNoSchedule` taint while it waits for its reboot (so
//! new pods avoid a node that will soon be drained). kured users know them as
//! `--pre-reboot-node-labels`, `--post-reboot-node-labels` and `--prefer-no-schedule-taint`.

use std::collections::BTreeMap;
use thiserror::Error;

/// The effect of the waiting taint: advice to the scheduler, never an eviction.
pub const PREFER_NO_SCHEDULE: &str = "PreferNoSchedule";

/// The annotations that keep cluster-autoscaler and Karpenter from removing a node, with the
/// value that does: put on a node from its claim until it is back or given back, so that no
/// autoscaler picks a cordoned, drained node mid-reboot as empty and deletes it.
pub const SCALE_DOWN_PROTECTION: [(&str, &str); 2] = [
    (
        "cluster-autoscaler.kubernetes.io/scale-down-disabled",
        "true",
    ),
    ("karpenter.sh/do-not-disrupt", "true"),
];

/// The record of the protection set (`reboot-protected`): the keys, comma-separated.
pub fn protection_record<'a>(keys: impl IntoIterator<Item = &'a str>) -> String {
    keys.into_iter().collect::<Vec<_>>().join(",")
}

/// The keys a protection record names, of those the operator sets (a key edited into the
/// record by hand is not the operator's to remove).
pub fn recorded_protection(record: &str) -> Vec<(&'static str, &'static str)> {
    let named: Vec<&str> = record.split(',').map(str::trim).collect();
    SCALE_DOWN_PROTECTION
        .into_iter()
        .filter(|(key, _)| named.contains(key))
        .collect()
}

/// The labels and the taint the controller sets around a reboot (all off by default).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RebootMarks {
    /// Set when the node's slot is granted; removed when it is back or given back.
    pub pre_reboot_labels: BTreeMap<String, String>,
    /// Set when the node is back from its reboot, and left there (replacing a pre-reboot
    /// label of the same key).
    pub post_reboot_labels: BTreeMap<String, String>,
    /// The key of a `PreferNoSchedule` taint set while the node waits for its reboot.
    pub prefer_no_schedule_taint: Option<String>,
    /// The ledger (`<namespace>/<name>`) of the controller that sets them, recorded with the
    /// waiting taint (see [`taint_record`]); empty for the agent's transitions.
    pub ledger: String,
}

/// The empty marks, for transitions that set none (the agent's).
pub static NO_MARKS: RebootMarks = RebootMarks {
    pre_reboot_labels: BTreeMap::new(),
    post_reboot_labels: BTreeMap::new(),
    prefer_no_schedule_taint: None,
    ledger: String::new(),
};

impl RebootMarks {
    /// The marks as the controller of `ledger` sets them.
    pub fn of_ledger(self, ledger: String) -> Self {
        Self { ledger, ..self }
    }

    /// Every label key the marks may set, for the controller's trimmed cache to keep.
    pub fn label_keys(&self) -> impl Iterator<Item = &String> {
        self.pre_reboot_labels
            .keys()
            .chain(self.post_reboot_labels.keys())
    }

    /// Of the pre-reboot labels' keys, those a grant left as the node had them (somebody
    /// else's label): the node's `labels` of the keys its grant's `record` does not name, as
    /// `key=value`.
    pub fn kept_at_grant(
        &self,
        labels: &BTreeMap<String, String>,
        record: Option<&str>,
    ) -> Vec<String> {
        let set = record.map(recorded).unwrap_or_default();
        self.pre_reboot_labels
            .keys()
            .filter(|key| !set.contains_key(*key))
            .filter_map(|key| labels.get(key).map(|value| format!("{key}={value}")))
            .collect()
    }

    /// Of the post-reboot labels' keys, those a completion left as the node had them: the
    /// node's `labels` of those keys at another value, as `key=value`.
    pub fn kept_at_completion(&self, labels: &BTreeMap<String, String>) -> Vec<String> {
        self.post_reboot_labels
            .iter()
            .filter_map(|(key, value)| {
                let had = labels.get(key).filter(|had| *had != value)?;
                Some(format!("{key}={had}"))
            })
            .collect()
    }
}

/// A label or taint that Kubernetes would refuse.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum MarkError {
    #[error(
        "invalid node label {given:?}: {why}; write key=value, such as \
         `node.example.com/rebooting=true` (several: comma-separated or the flag repeated)"
    )]
    Label { given: String, why: String },
    #[error(
        "invalid taint key {given:?}: {why}; use a label-style key such as \
         `node.example.com/reboot-pending`"
    )]
    Taint { given: String, why: String },
}

/// Parses one `key=value` label.
pub fn parse_label(given: &str) -> Result<(String, String), MarkError> {
    let fail = |why: &str| MarkError::Label {
        given: given.to_owned(),
        why: why.to_owned(),
    };
    let (key, value) = given.split_once('=').ok_or_else(|| fail("no `=`"))?;
    let (key, value) = (key.trim(), value.trim());
    check_key(key).map_err(|why| fail(&why))?;
    check_name(value, true).map_err(|why| fail(&format!("the value {why}")))?;
    Ok((key.to_owned(), value.to_owned()))
}

/// Checks a taint key (the same syntax as a label key).
pub fn parse_taint_key(given: &str) -> Result<String, MarkError> {
    let key = given.trim();
    check_key(key).map_err(|why| MarkError::Taint {
        given: given.to_owned(),
        why,
    })?;
    Ok(key.to_owned())
}

/// Whether Kubernetes accepts `key` as a label key; the reason when not (for label selectors).
pub fn check_label_key(key: &str) -> Result<(), String> {
    check_key(key)
}

/// Whether Kubernetes accepts `value` as a label value (empty included); the reason when not.
pub fn check_label_value(value: &str) -> Result<(), String> {
    check_name(value, true).map_err(|why| format!("the value {why}"))
}

/// A label selector's key as given, or why Kubernetes would refuse it, naming the key: a
/// selector naming a label no node can carry would select nothing without a word.
pub fn selector_key(key: &str) -> Result<&str, String> {
    check_label_key(key)
        .map(|()| key)
        .map_err(|why| format!("{key:?} is not a label key: {why}"))
}

/// A label selector's value as given, or why Kubernetes would refuse it, naming the value.
pub fn selector_value(value: &str) -> Result<&str, String> {
    check_label_value(value)
        .map(|()| value)
        .map_err(|why| format!("{value:?} is not a label value: {why}"))
}

/// A qualified name: an optional DNS-subdomain prefix and `/`, then a name.
fn check_key(key: &str) -> Result<(), String> {
    let (prefix, name) = match key.rsplit_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    if let Some(prefix) = prefix
        && !is_dns_subdomain(prefix)
    {
        return Err(format!(
            "the prefix {prefix:?} is not a lowercase DNS subdomain"
        ));
    }
    check_name(name, false).map_err(|why| format!("the name {why}"))
}

/// Whether `text` is a DNS label as Kubernetes names a namespace: up to 63 lowercase letters,
/// digits and `-`, starting and ending with a letter or digit.
pub fn is_dns_label(text: &str) -> bool {
    !text.is_empty()
        && text.len() <= 63
        && text
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !text.starts_with('-')
        && !text.ends_with('-')
}

/// Whether `text` is a lowercase DNS subdomain, as Kubernetes names most objects (a Lease) and
/// prefixes label keys: DNS labels joined by `.`, up to 253 characters.
pub fn is_dns_subdomain(text: &str) -> bool {
    text.len() <= 253 && text.split('.').all(is_dns_label)
}

/// A label value (`may_be_empty`) or the name part of a key: up to 63 letters, digits, `-`,
/// `_` and `.`, starting and ending with a letter or digit.
fn check_name(name: &str, may_be_empty: bool) -> Result<(), String> {
    if name.is_empty() {
        return if may_be_empty {
            Ok(())
        } else {
            Err("is empty".into())
        };
    }
    let alnum = |c: char| c.is_ascii_alphanumeric();
    if name.len() > 63 {
        return Err(format!("{name:?} is longer than 63 characters"));
    }
    if !name
        .chars()
        .all(|c| alnum(c) || matches!(c, '-' | '_' | '.'))
    {
        return Err(format!(
            "{name:?} may hold only letters, digits, '-', '_' and '.'"
        ));
    }
    if !name.starts_with(alnum) || !name.ends_with(alnum) {
        return Err(format!(
            "{name:?} must start and end with a letter or digit"
        ));
    }
    Ok(())
}

/// The record of the labels the controller set at a grant (`k=v,k=v`), kept in an annotation
/// so that they are removed as they were set even after the controller's flags changed. A label
/// that replaced the post-reboot label an earlier reboot left (`replaced`: its key and that
/// label's value) is recorded as `k=v/was`, so that a reboot given back puts `was` back
/// instead of leaving the node with neither (label values hold no `/`).
pub fn record(labels: &BTreeMap<String, String>, replaced: &BTreeMap<String, String>) -> String {
    labels
        .iter()
        .map(|(k, v)| match replaced.get(k) {
            Some(was) => format!("{k}={v}/{was}"),
            None => format!("{k}={v}"),
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// The labels a record names, at the value set; what does not parse (a hand edit) is skipped.
pub fn recorded(record: &str) -> BTreeMap<String, String> {
    recorded_entries(record).map(|(k, v, _)| (k, v)).collect()
}

/// The labels a record says replaced an earlier post-reboot label, with that label's value.
pub fn recorded_replaced(record: &str) -> BTreeMap<String, String> {
    recorded_entries(record)
        .filter_map(|(k, _, was)| Some((k, was?)))
        .collect()
}

fn recorded_entries(record: &str) -> impl Iterator<Item = (String, String, Option<String>)> {
    record.split(',').filter_map(|entry| {
        let (label, was) = match entry.split_once('=') {
            Some((key, value)) => match value.split_once('/') {
                Some((value, was)) => (format!("{key}={value}"), Some(was.to_owned())),
                None => (entry.to_owned(), None),
            },
            None => (entry.to_owned(), None),
        };
        let (key, value) = parse_label(&label).ok()?;
        Some((key, value, was))
    })
}

/// The record of the waiting taint (`reboot-tainted`): its key and the ledger of the controller
/// that put it there, `<key> <namespace>/<ledger>`. A node that leaves the pool loses only the
/// taint its own pool's controller put there: another pool's controller may have put its own,
/// under the same key, once the node waits in that pool.
pub fn taint_record(key: &str, ledger: &str) -> String {
    if ledger.is_empty() {
        key.to_owned()
    } else {
        format!("{key} {ledger}")
    }
}

/// The key of the taint a record names, and the ledger whose controller put it there (`None`
/// for a record without one: a hand edit, or written before records named their ledger).
pub fn recorded_taint(record: &str) -> (&str, Option<&str>) {
    let record = record.trim();
    match record.split_once(' ') {
        Some((key, ledger)) => (key, Some(ledger.trim()).filter(|l| !l.is_empty())),
        None => (record, None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_parse_as_kubernetes_accepts_them() {
        assert_eq!(
            parse_label("node.example.com/rebooting=true"),
            Ok(("node.example.com/rebooting".into(), "true".into()))
        );
        assert_eq!(
            parse_label("maintenance="),
            Ok(("maintenance".into(), "".into()))
        );
        for bad in [
            "noequals",
            "=v",
            "Bad_Prefix.com/x=1",
            "a/-x=1",
            "k=has space",
            "k=-leading",
            &format!("k={}", "x".repeat(64)),
        ] {
            let err = parse_label(bad).unwrap_err().to_string();
            assert!(err.contains("write key=value"), "{bad}: {err}");
        }
    }

    #[test]
    fn taint_keys_are_checked_like_label_keys() {
        assert_eq!(
            parse_taint_key("node.example.com/reboot-pending"),
            Ok("node.example.com/reboot-pending".into())
        );
        let err = parse_taint_key("reboot pending").unwrap_err().to_string();
        assert!(err.contains("label-style key"), "{err}");
    }

    #[test]
    fn the_labels_left_as_the_node_had_them_are_those_not_recorded_or_of_another_value() {
        let pairs = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect()
        };
        let marks = RebootMarks {
            pre_reboot_labels: pairs(&[("a", "1"), ("b", "1"), ("c", "1")]),
            post_reboot_labels: pairs(&[("b", "2"), ("c", "2")]),
            prefer_no_schedule_taint: None,
            ledger: String::new(),
        };
        let labels = pairs(&[("a", "1"), ("b", ""), ("c", "2"), ("other", "x")]);
        assert_eq!(
            marks.kept_at_grant(&labels, Some("c=1")),
            ["a=1", "b="],
            "a and b were there before the grant"
        );
        assert_eq!(marks.kept_at_grant(&labels, None), ["a=1", "b=", "c=2"]);
        assert_eq!(marks.kept_at_completion(&labels), ["b="]);
    }

    #[test]
    fn a_label_record_reads_back_with_what_each_label_replaced() {
        let map = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect()
        };
        let set = map(&[("a", "1"), ("lb", "out"), ("ex.com/x", "")]);
        let replaced = map(&[("lb", "in"), ("ex.com/x", "")]);
        let record = record(&set, &replaced);
        assert_eq!(record, "a=1,ex.com/x=/,lb=out/in");
        assert_eq!(recorded(&record), set);
        assert_eq!(recorded_replaced(&record), replaced);
        // A record of labels only (as every record before replacements were noted) reads as
        // replacing nothing; a hand edit that does not parse is skipped.
        assert_eq!(recorded_replaced("a=1,lb=out"), BTreeMap::new());
        assert_eq!(recorded("a=1,bad key=x"), map(&[("a", "1")]));
    }

    #[test]
    fn a_taint_record_names_its_key_and_its_ledger() {
        let record = taint_record("example.com/reboot-pending", "ns/slots");
        assert_eq!(record, "example.com/reboot-pending ns/slots");
        assert_eq!(
            recorded_taint(&record),
            ("example.com/reboot-pending", Some("ns/slots"))
        );
        assert_eq!(taint_record("reboot-pending", ""), "reboot-pending");
        assert_eq!(recorded_taint("reboot-pending"), ("reboot-pending", None));
    }

    #[test]
    fn a_record_gives_back_the_labels_it_was_made_of() {
        let labels: BTreeMap<String, String> = [("a/b", "1"), ("c", "")]
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        assert_eq!(recorded(&record(&labels, &BTreeMap::new())), labels);
        assert!(recorded("").is_empty());
    }
}
