//! The pool inputs the unit tests of `status`, `plan` and the estimate are computed from, built
//! one way.

use crate::input::{BudgetInput, LedgerInput, NodeEvent, NodeInput, PoolInput};
use common::{MaxUnavailable, NodeFacts, ledger::Slot};
use k8s_openapi::jiff::Timestamp;

pub fn at(t: &str) -> Timestamp {
    t.parse().unwrap()
}

/// A node of the pool with these facts (its labels are theirs), no Events, no pods left.
pub fn node_input(facts: NodeFacts) -> NodeInput {
    NodeInput {
        labels: facts.labels.clone(),
        facts,
        in_pool: true,
        events: Vec::new(),
        pods_left: None,
        overlap: Vec::new(),
    }
}

pub fn event(reason: &str, component: &str, time: &str, message: &str) -> NodeEvent {
    NodeEvent {
        reason: reason.into(),
        component: component.into(),
        message: message.into(),
        time: at(time),
    }
}

pub fn slot(grant: &str, at: &str) -> Slot {
    Slot {
        grant: grant.into(),
        granted_at: at.into(),
        node_version: None,
        zone: None,
    }
}

/// The pool of `nodes`, its ledger found (version 7) with `slots`, maybe paused, and
/// `--max-unavailable=budget` given to the plugin; no windows, nothing unread.
pub fn pool(nodes: Vec<NodeInput>, slots: &[(&str, Slot)], paused: bool, budget: u32) -> PoolInput {
    PoolInput {
        name: None,
        selector: String::new(),
        spec: None,
        nodes,
        ledger: LedgerInput {
            name: "node-reboot-operator/node-reboot-operator-slots".into(),
            version: Some("7".into()),
            found: true,
            slots: slots
                .iter()
                .map(|(n, s)| ((*n).to_owned(), s.clone()))
                .collect(),
            paused,
            damage: None,
            rollout: None,
            rollout_unreadable: None,
        },
        budget: BudgetInput {
            flag: Some(MaxUnavailable::Count(budget)),
            ..BudgetInput::default()
        },
        warnings: Vec::new(),
        windows: Default::default(),
    }
}
