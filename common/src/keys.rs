//! Annotation keys. Bare by default (`reboot-needed`), as an administrator types them; a
//! `--annotation-prefix` turns every key into `<prefix>/<key>` for clusters where bare keys
//! collide. Agent and controller must be started with the same prefix.

use thiserror::Error;

/// Asks for a reboot; written by the administrator, removed only together with `reboot-now`.
pub const REBOOT_NEEDED: &str = "reboot-needed";
/// The controller's go-ahead: the node is drained and holds a slot.
pub const REBOOT_NOW: &str = "reboot-now";
/// The agent has started the reboot.
pub const REBOOT_IN_PROGRESS: &str = "reboot-in-progress";
/// The boot id the node had when the agent started the reboot: the proof that it happened is
/// a different boot id after it.
pub const REBOOT_BOOT_ID: &str = "reboot-boot-id";
/// The agent has proven the reboot (new boot id); the controller finishes and clears it.
pub const REBOOT_DONE: &str = "reboot-done";
/// The operator cordoned this node, so the operator (and only it) uncordons it afterwards.
pub const REBOOT_CORDONED: &str = "reboot-cordoned";
/// RFC 3339 time at which the last reboot of this node was completed.
pub const REBOOT_LAST_COMPLETED: &str = "reboot-last-completed";
/// The id of the slot grant the node holds: written by the controller only after the ledger's
/// compare-and-swap granted it, `test`ed by every later write of that grant, removed before
/// the slot is released. A write of a grant that is no longer the node's fails.
pub const REBOOT_GRANT: &str = "reboot-grant";
/// The id of the grant whose reboot was last completed: tells a slot that ended in a reboot
/// from a cancelled one without comparing clocks.
pub const REBOOT_LAST_GRANT: &str = "reboot-last-grant";
/// RFC 3339 time at which the controller set `reboot-now`, written in that same patch and
/// removed when the reboot is completed or given back: `--reboot-timeout` counts from it.
pub const REBOOT_APPROVED_AT: &str = "reboot-approved-at";
/// The labels the controller set when it granted the node's slot (`--pre-reboot-node-labels`),
/// as `key=value,...`: removed as recorded when the node is back or given back.
pub const REBOOT_LABELLED: &str = "reboot-labelled";
/// The key of the `PreferNoSchedule` taint (`--prefer-no-schedule-taint`) the controller put on
/// the node while it waited, so it (and only it) removes it afterwards.
pub const REBOOT_TAINTED: &str = "reboot-tainted";
/// The format version of the node's protocol annotations (`common::format`), written by the
/// controller with the grant and removed with it. None (every node before versions existed)
/// reads as version 1; a version this build does not know makes it leave the node alone.
pub const REBOOT_PROTOCOL_VERSION: &str = "reboot-protocol-version";
/// How many drains of the node's standing request failed, and what blocked the last one
/// (`crate::drain_failures`): written by the controller when it gives a failed drain's slot
/// back, removed when the node completes a reboot or its request goes. With `--drain-attempts`,
/// a node that failed that many times is set aside until an administrator removes this.
pub const REBOOT_DRAIN_FAILURES: &str = "reboot-drain-failures";
/// The autoscalers' annotations against scale-down (`crate::marks::SCALE_DOWN_PROTECTION`) that
/// the controller put on the node at its claim, as `key,key`: removed as recorded when the node
/// is back or given back. A key the node already had is the administrator's: neither set nor
/// recorded, never removed.
pub const REBOOT_PROTECTED: &str = "reboot-protected";

/// Who asked for the last reboot and why, when it was not an administrator: written with
/// `reboot-needed` by an agent that found its node's reboot sentinel
/// (`agent: /var/run/reboot-required`).
pub const REBOOT_REQUESTED_BY: &str = "reboot-requested-by";
/// `<boot id> <fingerprint>`: the sentinel an agent requested a reboot for, and the boot it
/// asked in. The same sentinel in a later boot is reported, never acted on again; the record
/// is removed once the sentinel is gone, so that its return is a new need.
pub const REBOOT_SENTINEL: &str = "reboot-sentinel";
/// An administrator gives the node up (`kubectl reboot abandon`): `{"by": .., "reason": ..}`,
/// or any text by hand. The controller releases its slot, removes its own cordon and clears
/// the protocol's keys, then removes this one.
pub const REBOOT_ABANDON: &str = "reboot-abandon";
/// A node LABEL: `reboot-disabled=true` opts the node out (no grant, no automatic request).
/// Any value but `false` does, read fail-safe (see [`crate::OptOut`]).
pub const REBOOT_DISABLED: &str = "reboot-disabled";

/// The keys the admission policy lets an agent change on its own node: those of its own
/// protocol steps, and only in the transitions those steps make (see the policy).
pub const AGENT_MAY_CHANGE: [&str; 7] = [
    REBOOT_NEEDED,
    REBOOT_NOW,
    REBOOT_IN_PROGRESS,
    REBOOT_BOOT_ID,
    REBOOT_DONE,
    REBOOT_REQUESTED_BY,
    REBOOT_SENTINEL,
];

/// The controller's alone: the grant keys, so no agent can forge a slot, and the cordon marker
/// and completion time, so no agent can mark an administrator's cordon as the operator's.
pub const CONTROLLER_ONLY: [&str; 10] = [
    REBOOT_CORDONED,
    REBOOT_LAST_COMPLETED,
    REBOOT_GRANT,
    REBOOT_LAST_GRANT,
    REBOOT_APPROVED_AT,
    REBOOT_LABELLED,
    REBOOT_TAINTED,
    REBOOT_PROTOCOL_VERSION,
    REBOOT_DRAIN_FAILURES,
    REBOOT_PROTECTED,
];

/// The administrator's alone: no agent may give its own node up (it would free its slot while
/// its reboot may still take the node down).
pub const ADMINISTRATOR_ONLY: [&str; 1] = [REBOOT_ABANDON];

/// Every key, for documentation: the agent's, the controller's, then the administrator's.
pub const ALL: [&str; 18] = {
    let mut all = [""; 18];
    let mut i = 0;
    let controllers = AGENT_MAY_CHANGE.len() + CONTROLLER_ONLY.len();
    while i < all.len() {
        all[i] = if i < AGENT_MAY_CHANGE.len() {
            AGENT_MAY_CHANGE[i]
        } else if i < controllers {
            CONTROLLER_ONLY[i - AGENT_MAY_CHANGE.len()]
        } else {
            ADMINISTRATOR_ONLY[i - controllers]
        };
        i += 1;
    }
    all
};

/// A `--annotation-prefix` that is not a DNS subdomain.
#[derive(Debug, Error, PartialEq, Eq)]
#[error(
    "invalid annotation prefix {prefix:?}: {why}; use a DNS subdomain such as \
     `reboot.example.com` (keys become `reboot.example.com/reboot-needed`) or leave it empty"
)]
pub struct PrefixError {
    prefix: String,
    why: &'static str,
}

/// The annotation keys in use, with the configured prefix applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AnnotationKeys {
    pub needed: String,
    pub now: String,
    pub in_progress: String,
    pub boot_id: String,
    pub done: String,
    pub cordoned: String,
    pub last_completed: String,
    pub grant: String,
    pub last_grant: String,
    pub approved_at: String,
    pub labelled: String,
    pub tainted: String,
    pub protocol_version: String,
    pub drain_failures: String,
    pub protected: String,
    pub requested_by: String,
    pub sentinel: String,
    pub abandon: String,
    /// A label, not an annotation: `reboot-disabled`.
    pub disabled: String,
}

impl Default for AnnotationKeys {
    fn default() -> Self {
        Self::with_valid_prefix("")
    }
}

impl AnnotationKeys {
    /// Keys for `prefix` (empty for bare keys). A trailing `/` is accepted and ignored.
    pub fn new(prefix: &str) -> Result<Self, PrefixError> {
        let prefix = prefix.strip_suffix('/').unwrap_or(prefix);
        validate_prefix(prefix)?;
        Ok(Self::with_valid_prefix(prefix))
    }

    fn with_valid_prefix(prefix: &str) -> Self {
        let key = |name: &str| {
            if prefix.is_empty() {
                name.to_owned()
            } else {
                format!("{prefix}/{name}")
            }
        };
        Self {
            needed: key(REBOOT_NEEDED),
            now: key(REBOOT_NOW),
            in_progress: key(REBOOT_IN_PROGRESS),
            boot_id: key(REBOOT_BOOT_ID),
            done: key(REBOOT_DONE),
            cordoned: key(REBOOT_CORDONED),
            last_completed: key(REBOOT_LAST_COMPLETED),
            grant: key(REBOOT_GRANT),
            last_grant: key(REBOOT_LAST_GRANT),
            approved_at: key(REBOOT_APPROVED_AT),
            labelled: key(REBOOT_LABELLED),
            tainted: key(REBOOT_TAINTED),
            protocol_version: key(REBOOT_PROTOCOL_VERSION),
            drain_failures: key(REBOOT_DRAIN_FAILURES),
            protected: key(REBOOT_PROTECTED),
            requested_by: key(REBOOT_REQUESTED_BY),
            sentinel: key(REBOOT_SENTINEL),
            abandon: key(REBOOT_ABANDON),
            disabled: key(REBOOT_DISABLED),
        }
    }

    /// Every annotation key in use, in the order of [`ALL`].
    pub fn all(&self) -> [&str; 18] {
        [
            &self.needed,
            &self.now,
            &self.in_progress,
            &self.boot_id,
            &self.done,
            &self.requested_by,
            &self.sentinel,
            &self.cordoned,
            &self.last_completed,
            &self.grant,
            &self.last_grant,
            &self.approved_at,
            &self.labelled,
            &self.tainted,
            &self.protocol_version,
            &self.drain_failures,
            &self.protected,
            &self.abandon,
        ]
    }

    /// Keys that stay on a node after its reboot is over: history, not protocol state.
    pub fn is_bookkeeping(&self, key: &str) -> bool {
        [
            &self.last_completed,
            &self.last_grant,
            &self.requested_by,
            &self.sentinel,
        ]
        .contains(&&key.to_owned())
    }

    /// How the node's labels opt it out (`reboot-disabled`): any value but `false` does.
    pub fn opt_out(
        &self,
        labels: Option<&std::collections::BTreeMap<String, String>>,
    ) -> crate::OptOut {
        crate::OptOut::of_labels(&self.disabled, labels)
    }

    /// Keys that say the node is somewhere in the protocol (a request included): none is
    /// left on a node that is done.
    pub fn is_protocol_state(&self, key: &str) -> bool {
        self.all().contains(&key) && !self.is_bookkeeping(key)
    }
}

fn validate_prefix(prefix: &str) -> Result<(), PrefixError> {
    let fail = |why| {
        Err(PrefixError {
            prefix: prefix.to_owned(),
            why,
        })
    };
    if prefix.is_empty() {
        return Ok(());
    }
    if prefix.len() > 253 {
        return fail("longer than 253 characters");
    }
    for label in prefix.split('.') {
        let alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
        if label.is_empty() || label.len() > 63 {
            return fail("every dot-separated part must have 1 to 63 characters");
        }
        if !label.chars().all(|c| alnum(c) || c == '-') {
            return fail("only lowercase letters, digits, '-' and '.' are allowed");
        }
        if !label.starts_with(alnum) || !label.ends_with(alnum) {
            return fail("every part must start and end with a letter or digit");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bare_keys_are_what_an_administrator_types() {
        let keys = AnnotationKeys::new("").unwrap();
        assert_eq!(keys.needed, "reboot-needed");
        assert_eq!(keys.now, "reboot-now");
        assert_eq!(keys.in_progress, "reboot-in-progress");
    }

    #[test]
    fn prefix_applies_to_every_key() {
        let keys = AnnotationKeys::new("reboot.example.com/").unwrap();
        assert!(
            keys.all()
                .iter()
                .all(|k| k.starts_with("reboot.example.com/"))
        );
        assert_eq!(keys.needed, "reboot.example.com/reboot-needed");
    }

    #[test]
    fn the_admission_policy_lets_agents_change_their_keys_and_never_the_controllers() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../manifests/agent-node-policy.yaml"
        );
        let policy = std::fs::read_to_string(path).expect("the manifests are there");
        let listed = policy
            .split("name: keys")
            .nth(1)
            .and_then(|rest| rest.split('}').next())
            .expect("the policy has its keys map");
        for key in AGENT_MAY_CHANGE {
            assert!(
                listed.contains(&format!("'{key}'")),
                "{key} missing: {listed}"
            );
        }
        for key in CONTROLLER_ONLY.iter().chain(&ADMINISTRATOR_ONLY) {
            assert!(
                !listed.contains(&format!("'{key}'")),
                "{key} must not be there"
            );
        }
    }

    #[test]
    fn bad_prefixes_are_refused_with_the_fix() {
        for bad in ["Example.com", "-a.com", "a..b", "a/b", "a_b"] {
            let err = AnnotationKeys::new(bad).unwrap_err().to_string();
            assert!(err.contains("DNS subdomain"), "{bad}: {err}");
        }
    }
}
