//! `--dry-run`: what a round would write, in words, instead of writing it. Pure: the shell
//! adds the pods a drain would evict, logs each line once, and reports it in an Event.

use crate::decide::{Decision, NodeAction};

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
pub fn plan(decision: &Decision, budget: usize, drain: bool) -> Vec<WouldDo> {
    let mut plan = Vec::new();
    let line = |node: &str, what: String, new_grant: bool| WouldDo {
        node: node.to_owned(),
        what,
        new_grant,
    };
    for grant in &decision.ledger.grant {
        if grant.adopted.is_some() {
            plan.push(line(
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
            plan.push(line(
                &grant.node,
                format!("would grant a slot (budget {budget}), {then}"),
                true,
            ));
        }
    }
    for (node, reason) in &decision.release_reasons {
        plan.push(line(
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
            NodeAction::Abandon { .. } => {
                "would give it up: clear its protocol, uncordon it if the operator cordoned it"
            }
            NodeAction::ForgetAbandon { .. } => "would remove its reboot-abandon",
            NodeAction::Refetch(_) | NodeAction::WarnInvalidRequest { .. } => continue,
        };
        plan.push(line(action.node(), what.to_owned(), false));
    }
    plan
}

#[cfg(test)]
mod tests {
    use super::*;
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
        let plan = plan(&decision, 2, true);
        let said: Vec<(&str, &str)> = plan
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
        assert!(plan[0].new_grant && !plan[1].new_grant);
    }
}
