//! What the agent does about its node: a pure function of the node's protocol state and the
//! boot id of the running system. Nothing destructive is ever decided without `reboot-now` or
//! `reboot-in-progress` on the node.

use common::{Phase, ProtocolState};

/// The agent's next step for its node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AgentAction {
    /// Nothing for the agent to do (no reboot asked for, or the controller's turn).
    Nothing,
    /// `reboot-now`: record the current boot id with `reboot-in-progress`, then reboot.
    BeginReboot,
    /// `reboot-in-progress` from another boot id: the reboot is proven; report it done.
    FinishReboot { recorded_boot_id: String },
    /// `reboot-in-progress` from THIS boot id: the reboot did not happen (the agent died or
    /// the reboot failed); reboot again without reporting anything done.
    RebootAgain,
    /// `reboot-in-progress` without a recorded boot id: nothing proves a reboot, so record
    /// the current boot id and reboot.
    RecordBootIdAndReboot,
    /// The node's protocol annotations are in a format this build does not know (a newer
    /// operator wrote them): nothing is done on a guess; the agent says so and waits to be
    /// upgraded.
    UnknownFormat { found: String },
}

impl AgentAction {
    /// Whether this action ends in a reboot of the node.
    pub fn reboots(&self) -> bool {
        matches!(
            self,
            Self::BeginReboot | Self::RebootAgain | Self::RecordBootIdAndReboot
        )
    }
}

/// Decides the agent's next step from its node's protocol state and the current boot id. A
/// node an administrator gives up (`reboot-abandon`) is not rebooted, nor rebooted again: the
/// controller is about to clear its protocol and free its slot.
pub fn decide(state: &ProtocolState, current_boot_id: &str) -> AgentAction {
    if let Some(unknown) = state.unknown_format() {
        return AgentAction::UnknownFormat {
            found: unknown.found,
        };
    }
    let action = decide_protocol(state, current_boot_id);
    if state.abandon.is_some() && action.reboots() {
        return AgentAction::Nothing;
    }
    action
}

fn decide_protocol(state: &ProtocolState, current_boot_id: &str) -> AgentAction {
    match &state.phase {
        Phase::Idle | Phase::Done { .. } => AgentAction::Nothing,
        Phase::RebootNow => AgentAction::BeginReboot,
        Phase::InProgress { boot_id } => match boot_id.as_deref().map(str::trim) {
            None | Some("") => AgentAction::RecordBootIdAndReboot,
            Some(recorded) if recorded == current_boot_id => AgentAction::RebootAgain,
            Some(recorded) => AgentAction::FinishReboot {
                recorded_boot_id: recorded.to_owned(),
            },
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use common::AnnotationKeys;

    const CURRENT: &str = "boot-b";

    fn decide_for(annotations: &[(&str, &str)]) -> AgentAction {
        let annotations = annotations
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        let state = ProtocolState::from_annotations(&AnnotationKeys::default(), &annotations);
        decide(&state, CURRENT)
    }

    #[test]
    fn decisions_follow_the_protocol() {
        use AgentAction::*;
        let finish_from_a = FinishReboot {
            recorded_boot_id: "boot-a".into(),
        };
        let table: &[(&[(&str, &str)], AgentAction)] = &[
            (&[], Nothing),
            (&[("unrelated", "x")], Nothing),
            // A request alone is the controller's business, never the agent's.
            (&[("reboot-needed", "true")], Nothing),
            (&[("reboot-cordoned", "true")], Nothing),
            // Only `true` is a go-ahead.
            (&[("reboot-now", "false")], Nothing),
            (&[("reboot-now", "yes")], Nothing),
            (&[("reboot-now", "true")], BeginReboot),
            (
                &[("reboot-now", "true"), ("reboot-needed", "true")],
                BeginReboot,
            ),
            // Proven: the boot id differs from the one recorded before the reboot.
            (
                &[("reboot-in-progress", "true"), ("reboot-boot-id", "boot-a")],
                finish_from_a.clone(),
            ),
            (
                &[
                    ("reboot-in-progress", "true"),
                    ("reboot-boot-id", " boot-a\n"),
                ],
                finish_from_a,
            ),
            // Same boot id: the reboot did not happen.
            (
                &[("reboot-in-progress", "true"), ("reboot-boot-id", CURRENT)],
                RebootAgain,
            ),
            // No proof possible without a recorded boot id.
            (&[("reboot-in-progress", "true")], RecordBootIdAndReboot),
            (
                &[("reboot-in-progress", "true"), ("reboot-boot-id", "")],
                RecordBootIdAndReboot,
            ),
            (
                &[
                    ("reboot-in-progress", "false"),
                    ("reboot-boot-id", "boot-a"),
                ],
                Nothing,
            ),
            // In progress wins over a stale go-ahead (only a hand edit makes both).
            (
                &[
                    ("reboot-in-progress", "true"),
                    ("reboot-now", "true"),
                    ("reboot-boot-id", CURRENT),
                ],
                RebootAgain,
            ),
            // Done is the controller's to finish.
            (&[("reboot-done", "true")], Nothing),
            // Given up: no reboot starts, and none is made again; a proven one is reported.
            (
                &[("reboot-now", "true"), ("reboot-abandon", "lost")],
                Nothing,
            ),
            (
                &[
                    ("reboot-in-progress", "true"),
                    ("reboot-boot-id", CURRENT),
                    ("reboot-abandon", "lost"),
                ],
                Nothing,
            ),
            (
                &[
                    ("reboot-in-progress", "true"),
                    ("reboot-boot-id", "boot-a"),
                    ("reboot-abandon", "lost"),
                ],
                FinishReboot {
                    recorded_boot_id: "boot-a".into(),
                },
            ),
            (
                &[
                    ("reboot-done", "true"),
                    ("reboot-in-progress", "true"),
                    ("reboot-boot-id", CURRENT),
                ],
                Nothing,
            ),
        ];
        for (annotations, expected) in table {
            assert_eq!(&decide_for(annotations), expected, "{annotations:?}");
        }
    }

    /// A newer operator's node is left alone, even with a go-ahead (its meaning may have
    /// changed); today's nodes carry no version, or version 1, and are read as always.
    #[test]
    fn a_node_in_an_unknown_format_is_left_alone() {
        let newer = [("reboot-now", "true"), ("reboot-protocol-version", "2")];
        assert_eq!(
            decide_for(&newer),
            AgentAction::UnknownFormat { found: "2".into() }
        );
        let known = [("reboot-now", "true"), ("reboot-protocol-version", "1")];
        assert_eq!(decide_for(&known), AgentAction::BeginReboot);
        assert_eq!(
            decide_for(&[("reboot-now", "true")]),
            AgentAction::BeginReboot
        );
    }

    #[test]
    fn only_a_go_ahead_or_a_reboot_under_way_can_reboot() {
        let keys = AnnotationKeys::default();
        let values = ["true", "false", "", "boot-a", CURRENT];
        // Every combination of the protocol's keys with a few values.
        let mut count = 0;
        // The grant keys are the controller's and never change what the agent does.
        let agent_keys = &keys.all()[..common::keys::AGENT_MAY_CHANGE.len()];
        for mask in 0..(values.len() + 1).pow(agent_keys.len() as u32) {
            let mut rest = mask;
            let mut annotations = std::collections::BTreeMap::new();
            for key in agent_keys {
                if let Some(value) = values.get(rest % (values.len() + 1)) {
                    annotations.insert((*key).to_owned(), (*value).to_owned());
                }
                rest /= values.len() + 1;
            }
            let state = ProtocolState::from_annotations(&keys, &annotations);
            let action = decide(&state, CURRENT);
            let asked = annotations.get("reboot-now").is_some_and(|v| v == "true")
                || annotations
                    .get("reboot-in-progress")
                    .is_some_and(|v| v == "true");
            assert!(!action.reboots() || asked, "{annotations:?} -> {action:?}");
            let proven = matches!(action, AgentAction::FinishReboot { .. });
            let recorded = annotations.get("reboot-boot-id").map(|v| v.trim());
            assert!(!proven || (recorded.is_some_and(|id| !id.is_empty() && id != CURRENT)));
            count += 1;
        }
        assert!(count > 100_000);
    }
}
