//! `--dry-run`: what a round would write, in words, instead of writing it. Pure: the shell
//! adds the pods a drain would evict, logs each line once, and reports it in an Event.

use crate::{
    decide::{Decision, NodeAction},
    rollout_plan::RolloutPlan,
};
use jiff::Timestamp;

/// One write the round would have made, about one node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WouldDo {
    pub node: String,
    pub what: String,
    /// A new grant: the node would be cordoned and drained next (the shell names the pods).
    pub new_grant: bool,
}

/// The writes of `decision` in the order the shell would make them: the ledger's, then the
/// nodes'. `budget` is the pool's, for the grant lines.
pub fn would_do(decision: &Decision, budget: usize, drain: bool) -> Vec<WouldDo> {
    let mut would = Vec::new();
    let line = |node: &str, what: String, new_grant: bool| WouldDo {
        node: node.to_owned(),
        what,
        new_grant,
    };
    for grant in &decision.ledger.grant {
        if grant.adopted.is_some() {
            would.push(line(
                &grant.node,
                "would record the reboot under way in the ledger".into(),
                false,
            ));
        } else {
            let then = if drain {
                "cordon it, evict its pods, then set reboot-now"
            } else {
                "cordon it and set reboot-now (--drain=false)"
            };
            would.push(line(
                &grant.node,
                format!("would grant a slot (budget {budget}), {then}"),
                true,
            ));
        }
    }
    for (node, reason) in &decision.release_reasons {
        would.push(line(
            node,
            format!("would release its slot ({reason:?})"),
            false,
        ));
    }
    for action in &decision.node_actions {
        let what = match action {
            NodeAction::Claim { promote: true, .. } => "would cordon it and set reboot-now",
            NodeAction::Claim { .. } => "would cordon it",
            NodeAction::Recordon { .. } => "would cordon it again",
            NodeAction::StartDrain { .. } => "would evict its pods",
            NodeAction::Promote { .. } => "would set reboot-now",
            NodeAction::Complete { .. } => "would complete its reboot and uncordon it",
            NodeAction::Release { .. } => "would give it back, uncordoned",
            NodeAction::Taint(_) => "would taint it PreferNoSchedule while it waits",
            NodeAction::Untaint(_) => "would remove its waiting taint: it waits for nothing here",
            NodeAction::Abandon { .. } => {
                "would give it up: clear its protocol, uncordon it if the operator cordoned it"
            }
            NodeAction::ForgetAbandon { .. } => "would remove its reboot-abandon",
            NodeAction::GiveUp { .. } => {
                "would give it up: not completed within --give-up-after (reboot-abandon)"
            }
            NodeAction::Refetch(_) | NodeAction::WarnInvalidRequest { .. } => continue,
        };
        would.push(line(action.node(), what.to_owned(), false));
    }
    would
}

/// The rollout plan in words, a line each: the slots held, each wave with its nodes and its
/// start (when known), and the requests no wave reaches with why. Empty when nothing waits.
pub fn rollout(plan: &RolloutPlan, now: Timestamp) -> Vec<String> {
    if plan.waves.is_empty() && plan.left.is_empty() {
        return Vec::new();
    }
    let mut lines = Vec::new();
    if let Some(held) = plan.held {
        lines.push(format!(
            "held ({}): no wave starts until that changes",
            held.as_str()
        ));
    }
    if !plan.under_way.is_empty() {
        let names: Vec<&str> = plan.under_way.iter().map(|u| u.name.as_str()).collect();
        lines.push(format!("under way: {}", names.join(", ")));
    }
    for wave in &plan.waves {
        let start = match wave.start {
            Some(t) if t <= now => "starts now".to_owned(),
            Some(t) => format!("starts at {t}"),
            None if wave.number == 1 => "after the reboots under way".to_owned(),
            None => format!("after wave {}", wave.number - 1),
        };
        let names: Vec<&str> = wave.nodes.iter().map(|n| n.name.as_str()).collect();
        lines.push(format!(
            "wave {} ({start}): {}",
            wave.number,
            names.join(", ")
        ));
    }
    if !plan.left.is_empty() {
        let left: Vec<String> = plan
            .left
            .iter()
            .map(|(name, why)| format!("{name} ({})", why.as_str()))
            .collect();
        lines.push(format!("not planned: {}", left.join(", ")));
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rollout_plan::{Planned, UnderWay, Wait, Wave};

    #[test]
    fn the_rollout_is_said_wave_by_wave() {
        let now: Timestamp = "2026-11-24T21:00:00Z".parse().unwrap();
        let opening: Timestamp = "2026-11-24T22:00:00Z".parse().unwrap();
        let node = |name: &str| Planned {
            name: name.into(),
            zone: None,
            waited: Vec::new(),
        };
        let plan = RolloutPlan {
            under_way: vec![UnderWay {
                name: "u".into(),
                frees_at: None,
            }],
            waves: vec![
                Wave {
                    number: 1,
                    nodes: vec![node("a"), node("b")],
                    start: Some(opening),
                    end: None,
                    window_opening: None,
                },
                Wave {
                    number: 2,
                    nodes: vec![node("c")],
                    start: None,
                    end: None,
                    window_opening: None,
                },
            ],
            left: vec![("x".into(), Wait::OptedOut)],
            held: None,
            done_at: None,
        };
        assert_eq!(
            rollout(&plan, now),
            [
                "under way: u",
                "wave 1 (starts at 2026-11-24T22:00:00Z): a, b",
                "wave 2 (after wave 1): c",
                "not planned: x (opted out)",
            ]
        );
        assert!(
            rollout(
                &RolloutPlan {
                    waves: vec![],
                    left: vec![],
                    ..plan
                },
                now
            )
            .is_empty()
        );
    }
    use crate::{decide::ReleaseReason, ledger::Grant};

    #[test]
    fn grants_releases_and_node_writes_are_said_in_order() {
        let mut decision = Decision::default();
        decision.ledger.grant.push(Grant::new("n1", Some("7")));
        decision
            .release_reasons
            .push(("n2".into(), ReleaseReason::Completed));
        decision.node_actions.push(NodeAction::Promote {
            node: "n3".into(),
            grant: "g".into(),
        });
        decision.node_actions.push(NodeAction::Refetch("n4".into()));
        let would = would_do(&decision, 2, true);
        let said: Vec<(&str, &str)> = would
            .iter()
            .map(|w| (w.node.as_str(), w.what.as_str()))
            .collect();
        assert_eq!(
            said,
            [
                (
                    "n1",
                    "would grant a slot (budget 2), cordon it, evict its pods, then set reboot-now"
                ),
                ("n2", "would release its slot (Completed)"),
                ("n3", "would set reboot-now"),
            ]
        );
        assert!(would[0].new_grant && !would[1].new_grant);
    }
}
