//! An independent watcher of the budget invariant (DESIGN.md section 3): it counts
//! unavailable nodes from Node objects alone, without asking the operator, and records the
//! first moment more than the budget were unavailable. Tests fail on it; the demo and the
//! benchmark report the most nodes that were ever down at once. Its watch resumes after
//! errors (an API server restart) and it fails when it could not observe.

use crate::observe::{Coverage, Observe, ResumingWatch};
use common::{AnnotationKeys, NodeFacts};
use k8s_openapi::api::core::v1::Node;
use kube::{Api, Client, runtime::watcher};
use std::collections::BTreeMap;

/// Whether a node is unavailable as DESIGN.md invariant 1 counts it, from the Node alone: not
/// Ready, cordoned, or in the reboot protocol. The one place every observer asks.
pub fn unavailable(node: &Node, keys: &AnnotationKeys) -> bool {
    let facts = NodeFacts::from_node(node);
    common::unavailable(&facts, &facts.protocol(keys), false)
}

/// The budget as the watch saw it so far.
#[derive(Debug)]
struct Tally {
    keys: AnnotationKeys,
    budget: usize,
    unavailable: BTreeMap<String, bool>,
    max: usize,
    violation: Option<String>,
}

impl Tally {
    fn record(&mut self, node: &Node) {
        let name = node.metadata.name.clone().unwrap_or_default();
        self.unavailable.insert(name, unavailable(node, &self.keys));
    }

    fn count(&mut self) {
        let down: Vec<&String> = self
            .unavailable
            .iter()
            .filter(|(_, u)| **u)
            .map(|(n, _)| n)
            .collect();
        let count = down.len();
        if count > self.budget && self.violation.is_none() {
            self.violation = Some(format!(
                "{count} nodes unavailable at once with a budget of {}: {down:?}",
                self.budget
            ));
        }
        self.max = self.max.max(count);
    }
}

impl Observe<Node> for Tally {
    fn listed(&mut self, nodes: &[Node]) {
        self.unavailable.clear();
        nodes.iter().for_each(|n| self.record(n));
        self.count();
    }

    fn applied(&mut self, node: &Node) {
        self.record(node);
        self.count();
    }

    fn deleted(&mut self, node: &Node) {
        self.unavailable
            .remove(node.metadata.name.as_deref().unwrap_or_default());
        self.count();
    }
}

/// Watches every Node, independently of the operator, and records the first moment more
/// than `budget` nodes are unavailable.
#[derive(Debug)]
pub struct BudgetWatch {
    watch: ResumingWatch<Tally>,
    budget: usize,
}

impl BudgetWatch {
    /// Returns once every Node has been listed.
    ///
    /// # Panics
    /// When the Nodes cannot be listed within [`crate::observe::BLIND_LIMIT`]: an observer
    /// that cannot observe must not let a test pass.
    pub async fn start(client: Client, budget: usize) -> BudgetWatch {
        let tally = Tally {
            keys: AnnotationKeys::default(),
            budget,
            unavailable: BTreeMap::new(),
            max: 0,
            violation: None,
        };
        let watch = ResumingWatch::start(
            Api::<Node>::all(client),
            watcher::Config::default(),
            "every Node (budget watch)",
            tally,
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
        BudgetWatch { watch, budget }
    }

    /// Fails once the budget was exceeded, or when the watch stopped or was blind too long.
    pub fn check(&self) -> Result<(), String> {
        if let Some(v) = self.watch.with(|t| t.violation.clone()) {
            return Err(format!("budget invariant broken: {v}"));
        }
        self.watch.check()
    }

    /// The most nodes that were unavailable at once.
    pub fn max_seen(&self) -> usize {
        self.watch.with(|t| t.max)
    }

    pub fn budget(&self) -> usize {
        self.budget
    }

    /// What the watch could not see one by one (errors, re-lists, missed changes).
    pub fn coverage(&self) -> Coverage {
        self.watch.coverage()
    }
}
