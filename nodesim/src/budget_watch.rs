//! An independent watcher of the budget invariant (docs/src/design.md, the safety invariants): it
//! counts unavailable nodes from Node objects alone, without asking the operator, and records the
//! first moment more than the budget were unavailable. Tests fail on it; the demo and the
//! benchmark report the most nodes that were ever down at once. Its watch resumes after
//! errors (an API server restart) and it fails when it could not observe.

use crate::observe::{Coverage, Observe, ResumingWatch};
use common::{AnnotationKeys, NodeFacts};
use k8s_openapi::api::core::v1::Node;
use kube::{Api, Client, runtime::watcher};
use std::collections::BTreeMap;

/// Whether a node is unavailable as invariant 1 of docs/src/design.md counts it, from the Node
/// alone: not Ready, cordoned, or in the reboot protocol. The one place every observer asks.
pub fn unavailable(node: &Node, keys: &AnnotationKeys) -> bool {
    let facts = NodeFacts::from_node(node);
    common::unavailable(&facts, &facts.protocol(keys), false)
}

/// A budget per zone: the zone label and how many of a zone may be unavailable at once.
#[derive(Debug, Clone)]
pub struct ZoneBudget {
    pub label: String,
    pub budget: usize,
}

/// The budget as the watch saw it so far.
#[derive(Debug)]
struct Tally {
    keys: AnnotationKeys,
    budget: usize,
    zones: Option<ZoneBudget>,
    unavailable: BTreeMap<String, bool>,
    zone_of: BTreeMap<String, Option<String>>,
    max: usize,
    zone_max: usize,
    violation: Option<String>,
}

impl Tally {
    fn record(&mut self, node: &Node) {
        let name = node.metadata.name.clone().unwrap_or_default();
        self.unavailable
            .insert(name.clone(), unavailable(node, &self.keys));
        if let Some(zones) = &self.zones {
            let zone = node
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(&zones.label));
            self.zone_of.insert(name, zone.cloned());
        }
    }

    /// Nodes without the label form one zone of their own, as the controller counts them.
    fn count_zones(&mut self) {
        let Some(zones) = &self.zones else { return };
        let mut down: BTreeMap<Option<&String>, Vec<&String>> = BTreeMap::new();
        for (name, _) in self.unavailable.iter().filter(|(_, u)| **u) {
            let zone = self.zone_of.get(name).and_then(Option::as_ref);
            down.entry(zone).or_default().push(name);
        }
        for (zone, nodes) in &down {
            if nodes.len() > zones.budget && self.violation.is_none() {
                self.violation = Some(format!(
                    "{} nodes of zone {zone:?} unavailable at once with a zone budget of {}: \
                     {nodes:?}",
                    nodes.len(),
                    zones.budget
                ));
            }
            self.zone_max = self.zone_max.max(nodes.len());
        }
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
        self.count_zones();
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
        Self::start_with_zones(client, budget, None).await
    }

    /// [`BudgetWatch::start`] that also holds each zone to its own budget.
    pub async fn start_with_zones(
        client: Client,
        budget: usize,
        zones: Option<ZoneBudget>,
    ) -> BudgetWatch {
        let tally = Tally {
            keys: AnnotationKeys::default(),
            budget,
            zones,
            unavailable: BTreeMap::new(),
            zone_of: BTreeMap::new(),
            max: 0,
            zone_max: 0,
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

    /// The most nodes of one zone that were unavailable at once (with zones).
    pub fn zone_max_seen(&self) -> usize {
        self.watch.with(|t| t.zone_max)
    }

    pub fn budget(&self) -> usize {
        self.budget
    }

    /// What the watch could not see one by one (errors, re-lists, missed changes).
    pub fn coverage(&self) -> Coverage {
        self.watch.coverage()
    }
}
