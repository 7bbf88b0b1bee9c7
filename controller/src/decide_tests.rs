//! Table tests and property tests of the decision core. The property tests run the core
//! against a model fleet whose nodes are real Node JSON objects changed by the protocol's own
//! patches (from `common`), by simulated agents and kubelets, and by an administrator.

use super::*;
use crate::ledger::Slot;
use common::{AnnotationKeys, NodeFacts, Transition};
use k8s_openapi::api::core::v1::Node;
use proptest::prelude::*;
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};

fn node_json(name: &str, ready: bool) -> Value {
    json!({
        "metadata": {"name": name, "resourceVersion": "1"},
        "spec": {},
        "status": {"conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}],
                   "nodeInfo": {"bootID": format!("{name}-boot-0")}}
    })
}

fn facts(obj: &Value) -> NodeFacts {
    let node: Node = serde_json::from_value(obj.clone()).unwrap();
    NodeFacts::from_node(&node)
}

fn view(obj: &Value) -> NodeView {
    let facts = facts(obj);
    NodeView {
        state: facts.protocol(&AnnotationKeys::default()),
        facts,
        requested_at: None,
        not_before: None,
        drain: DrainState::NotStarted,
    }
}

fn annotate(obj: &mut Value, key: &str, value: &str) {
    obj["metadata"]["annotations"][key] = value.into();
}

fn ledger_of(names: &[&str]) -> Ledger {
    Ledger {
        resource_version: Some("7".into()),
        slots: names
            .iter()
            .map(|n| {
                (
                    (*n).to_owned(),
                    Slot {
                        granted_at: "t".into(),
                    },
                )
            })
            .collect(),
    }
}

fn decide(nodes: &[NodeView], ledger: &Ledger, budget: usize, drain: bool) -> Decision {
    Round {
        nodes,
        ledger,
        budget,
        drain_enabled: drain,
        now: 0,
    }
    .decide()
}

#[test]
fn grants_the_oldest_requests_up_to_the_budget() {
    let mut nodes: Vec<NodeView> = ["a", "b", "c"]
        .iter()
        .map(|n| {
            let mut obj = node_json(n, true);
            annotate(&mut obj, "reboot-needed", "true");
            view(&obj)
        })
        .collect();
    nodes[0].requested_at = Some(30);
    nodes[1].requested_at = Some(10);
    nodes[2].requested_at = Some(20);
    let d = decide(&nodes, &Ledger::default(), 2, false);
    assert_eq!(d.ledger.grant, vec!["b".to_owned(), "c".to_owned()]);
    assert_eq!(d.waiting, vec!["a".to_owned()]);
}

#[test]
fn a_not_ready_node_does_not_block_its_own_reboot() {
    let mut sick = node_json("sick", false);
    annotate(&mut sick, "reboot-needed", "true");
    let nodes = vec![view(&sick), view(&node_json("ok", true))];
    let d = decide(&nodes, &Ledger::default(), 1, false);
    assert_eq!(d.ledger.grant, vec!["sick".to_owned()]);
}

#[test]
fn another_unavailable_node_uses_up_the_budget() {
    let mut wants = node_json("wants", true);
    annotate(&mut wants, "reboot-needed", "true");
    let nodes = vec![view(&wants), view(&node_json("down", false))];
    let d = decide(&nodes, &Ledger::default(), 1, false);
    assert!(d.ledger.grant.is_empty());
    assert_eq!(d.waiting, vec!["wants".to_owned()]);
}

#[test]
fn a_granted_node_is_cordoned_drained_and_promoted() {
    let mut obj = node_json("n", true);
    annotate(&mut obj, "reboot-needed", "true");
    let ledger = ledger_of(&["n"]);
    let d = decide(&[view(&obj)], &ledger, 1, false);
    assert_eq!(
        d.node_actions,
        vec![NodeAction::CordonAndPromote("n".into())]
    );
    let d = decide(&[view(&obj)], &ledger, 1, true);
    assert_eq!(d.node_actions, vec![NodeAction::Cordon("n".into())]);
    obj["spec"]["unschedulable"] = true.into();
    let mut v = view(&obj);
    assert_eq!(
        decide(&[v.clone()], &ledger, 1, true).node_actions,
        vec![NodeAction::StartDrain("n".into())]
    );
    v.drain = DrainState::Running;
    assert!(
        decide(&[v.clone()], &ledger, 1, true)
            .node_actions
            .is_empty()
    );
    v.drain = DrainState::Drained;
    assert_eq!(
        decide(&[v], &ledger, 1, true).node_actions,
        vec![NodeAction::Promote("n".into())]
    );
}

#[test]
fn a_withdrawn_request_is_uncordoned_then_released() {
    let mut obj = node_json("n", true);
    obj["spec"]["unschedulable"] = true.into();
    annotate(&mut obj, "reboot-cordoned", "true");
    let ledger = ledger_of(&["n"]);
    let d = decide(&[view(&obj)], &ledger, 1, true);
    assert_eq!(
        d.node_actions,
        vec![NodeAction::Uncordon("n".into(), ReleaseReason::Cancelled)]
    );
    assert!(
        d.ledger.release.is_empty(),
        "slot is kept until the uncordon is written"
    );
    let d = decide(&[view(&node_json("n", true))], &ledger, 1, true);
    assert_eq!(d.ledger.release, vec!["n".to_owned()]);
}

#[test]
fn a_slot_released_after_completion_is_not_a_cancel() {
    let mut obj = node_json("n", true);
    annotate(&mut obj, "reboot-last-completed", "2026-01-01T00:00:05Z");
    let mut ledger = ledger_of(&["n"]);
    ledger.slots.get_mut("n").unwrap().granted_at = "2026-01-01T00:00:01.5Z".into();
    let d = decide(&[view(&obj)], &ledger, 1, false);
    assert_eq!(
        d.release_reasons,
        vec![("n".to_owned(), ReleaseReason::Completed)]
    );
    ledger.slots.get_mut("n").unwrap().granted_at = "2026-01-01T00:00:06Z".into();
    let d = decide(&[view(&obj)], &ledger, 1, false);
    assert_eq!(
        d.release_reasons,
        vec![("n".to_owned(), ReleaseReason::Cancelled)]
    );
}

#[test]
fn completion_waits_for_ready() {
    let mut obj = node_json("n", false);
    annotate(&mut obj, "reboot-done", "true");
    let ledger = ledger_of(&["n"]);
    assert!(
        decide(&[view(&obj)], &ledger, 1, false)
            .node_actions
            .is_empty()
    );
    let mut obj = node_json("n", true);
    annotate(&mut obj, "reboot-done", "true");
    assert_eq!(
        decide(&[view(&obj)], &ledger, 1, false).node_actions,
        vec![NodeAction::Complete("n".into())]
    );
}

#[test]
fn invalid_requests_are_warned_about_and_not_granted() {
    let mut obj = node_json("n", true);
    annotate(&mut obj, "reboot-needed", "banana");
    let d = decide(&[view(&obj)], &Ledger::default(), 1, false);
    assert!(d.ledger.grant.is_empty());
    assert_eq!(
        d.node_actions,
        vec![NodeAction::WarnInvalidRequest {
            node: "n".into(),
            value: "banana".into()
        }]
    );
}

#[test]
fn a_reboot_under_way_without_a_slot_is_recorded_whatever_the_budget() {
    let mut obj = node_json("n", true);
    annotate(&mut obj, "reboot-in-progress", "true");
    let others = [view(&node_json("x", false)), view(&obj)];
    let d = decide(&others, &Ledger::default(), 1, false);
    assert_eq!(d.ledger.grant, vec!["n".to_owned()]);
}

#[test]
fn slots_of_departed_nodes_are_released() {
    let d = decide(&[], &ledger_of(&["gone"]), 1, false);
    assert_eq!(d.ledger.release, vec!["gone".to_owned()]);
}

#[test]
fn a_failed_drain_gives_the_slot_back_and_waits_before_retrying() {
    let mut obj = node_json("n", true);
    annotate(&mut obj, "reboot-needed", "true");
    let mut v = view(&obj);
    v.drain = DrainState::Failed;
    let d = decide(&[v.clone()], &ledger_of(&["n"]), 1, true);
    assert_eq!(
        d.release_reasons,
        vec![("n".to_owned(), ReleaseReason::DrainFailed)]
    );
    v.drain = DrainState::NotStarted;
    v.not_before = Some(5);
    assert!(
        decide(&[v], &Ledger::default(), 1, true)
            .ledger
            .grant
            .is_empty()
    );
}

// ---- property tests -------------------------------------------------------------------

#[derive(Debug, Clone)]
enum Step {
    Controller,
    Agent(usize),
    DrainEnds { node: usize, ok: bool },
    Request(usize),
    Cancel(usize),
    InvalidRequest(usize),
    AdminCordon(usize),
    Flap(usize),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        6 => Just(Step::Controller),
        4 => (0..12usize).prop_map(Step::Agent),
        2 => (0..12usize, proptest::bool::weighted(0.8)).prop_map(|(node, ok)| Step::DrainEnds { node, ok }),
        3 => (0..12usize).prop_map(Step::Request),
        1 => (0..12usize).prop_map(Step::Cancel),
        1 => (0..12usize).prop_map(Step::InvalidRequest),
        1 => (0..12usize).prop_map(Step::AdminCordon),
        1 => (0..12usize).prop_map(Step::Flap),
    ]
}

/// A fleet of node objects, an agent and kubelet per node, an administrator, and a
/// controller shell that executes the core's decisions with the protocol's real patches.
struct Fleet {
    nodes: Vec<Value>,
    ledger: Ledger,
    drains: BTreeMap<String, DrainState>,
    not_before: BTreeMap<String, u64>,
    requested_at: BTreeMap<String, u64>,
    boots: Vec<u32>,
    admin_cordoned: BTreeSet<usize>,
    budget: usize,
    drain_enabled: bool,
    now: u64,
    keys: AnnotationKeys,
}

impl Fleet {
    fn new(size: usize, budget: usize, drain_enabled: bool, not_ready: &[bool]) -> Self {
        Self {
            nodes: (0..size)
                .map(|i| node_json(&format!("n{i}"), !not_ready[i]))
                .collect(),
            ledger: Ledger::default(),
            drains: BTreeMap::new(),
            not_before: BTreeMap::new(),
            requested_at: BTreeMap::new(),
            boots: vec![0; size],
            admin_cordoned: BTreeSet::new(),
            budget,
            drain_enabled,
            now: 0,
            keys: AnnotationKeys::default(),
        }
    }

    fn annotation(&self, i: usize, key: &str) -> Option<String> {
        self.nodes[i]["metadata"]["annotations"][key]
            .as_str()
            .map(str::to_owned)
    }

    fn name(&self, i: usize) -> String {
        format!("n{i}")
    }

    fn index(&self, name: &str) -> usize {
        name[1..].parse().unwrap()
    }

    fn set_ready(&mut self, i: usize, ready: bool) {
        self.nodes[i]["status"]["conditions"][0]["status"] =
            (if ready { "True" } else { "False" }).into();
    }

    fn views(&self) -> Vec<NodeView> {
        self.nodes
            .iter()
            .map(|obj| {
                let mut v = view(obj);
                let name = v.facts.name.clone();
                v.requested_at = self.requested_at.get(&name).copied();
                v.not_before = self.not_before.get(&name).copied();
                v.drain = self.drains.get(&name).copied().unwrap_or_default();
                v
            })
            .collect()
    }

    fn unavailable_count(&self) -> usize {
        self.views()
            .iter()
            .filter(|v| v.unavailable(self.ledger.holds(v.name())))
            .count()
    }

    /// Applies a patch the way the API server would: all of it or nothing.
    fn patch(&mut self, i: usize, patch: &json_patch::Patch) -> bool {
        let mut next = self.nodes[i].clone();
        if json_patch::patch(&mut next, patch).is_err() {
            return false;
        }
        let rv: u64 = next["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap();
        next["metadata"]["resourceVersion"] = (rv + 1).to_string().into();
        self.nodes[i] = next;
        true
    }

    fn touch(&mut self, i: usize) {
        let rv: u64 = self.nodes[i]["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap();
        self.nodes[i]["metadata"]["resourceVersion"] = (rv + 1).to_string().into();
    }

    /// One controller round; checks the invariants that the round itself must keep.
    fn controller_round(&mut self) {
        let views = self.views();
        for v in &views {
            if v.state.request == Request::Needed {
                self.requested_at
                    .entry(v.facts.name.clone())
                    .or_insert(self.now);
            }
        }
        let needed_before: Vec<bool> = (0..self.nodes.len())
            .map(|i| self.annotation(i, "reboot-needed").as_deref() == Some("true"))
            .collect();
        let decision = Round {
            nodes: &views,
            ledger: &self.ledger,
            budget: self.budget,
            drain_enabled: self.drain_enabled,
            now: self.now,
        }
        .decide();

        let granted_new = decision.ledger.grant.iter().any(|g| !self.ledger.holds(g));
        for (name, reason) in &decision.release_reasons {
            self.drains.remove(name);
            if *reason == ReleaseReason::DrainFailed {
                self.not_before.insert(name.clone(), self.now + 5);
            }
        }
        for name in &decision.ledger.release {
            self.drains.remove(name);
        }
        self.ledger.slots = decision.ledger.apply(&self.ledger.slots, "t");
        if granted_new {
            assert!(
                self.unavailable_count() <= self.budget,
                "a grant left {} nodes unavailable with a budget of {}",
                self.unavailable_count(),
                self.budget
            );
        }
        assert!(
            self.ledger.slots.len() <= self.budget,
            "more slots than the budget"
        );
        // A request waits only while OTHER nodes use the whole budget: an unavailable node
        // never blocks its own reboot, and no slot is left idle.
        let after = self.views();
        for name in &decision.waiting {
            let others = after
                .iter()
                .filter(|v| &v.facts.name != name && v.unavailable(self.ledger.holds(v.name())))
                .count();
            assert!(
                others >= self.budget,
                "{name} waits while only {others} others are unavailable"
            );
        }

        for action in decision.node_actions {
            self.execute(&views, action);
        }
        for (i, was_needed) in needed_before.into_iter().enumerate() {
            let needed_now = self.annotation(i, "reboot-needed").as_deref() == Some("true");
            if was_needed && !needed_now {
                assert_eq!(
                    self.annotation(i, "reboot-now").as_deref(),
                    Some("true"),
                    "lost request"
                );
            }
        }
        for &i in &self.admin_cordoned {
            assert_eq!(
                self.nodes[i]["spec"]["unschedulable"],
                json!(true),
                "stolen cordon"
            );
        }
    }

    fn execute(&mut self, views: &[NodeView], action: NodeAction) {
        let keys = self.keys.clone();
        let t = Transition::new(&keys);
        let facts_of = |name: &str| {
            views
                .iter()
                .find(|v| v.facts.name == name)
                .unwrap()
                .facts
                .clone()
        };
        match action {
            NodeAction::Cordon(n) => {
                let i = self.index(&n);
                self.patch(i, &t.cordon(&facts_of(&n)));
            }
            NodeAction::CordonAndPromote(n) => {
                let i = self.index(&n);
                self.patch(i, &t.cordon_and_promote(&facts_of(&n)));
            }
            NodeAction::Promote(n) => {
                let i = self.index(&n);
                self.patch(i, &t.promote(&facts_of(&n)));
            }
            NodeAction::StartDrain(n) => {
                self.drains.insert(n, DrainState::Running);
            }
            NodeAction::Complete(n) => {
                let i = self.index(&n);
                self.patch(i, &t.complete(&facts_of(&n), "t"));
            }
            NodeAction::Uncordon(n, _) => {
                let i = self.index(&n);
                if let Some(p) = t.release(&facts_of(&n)) {
                    self.patch(i, &p);
                }
            }
            NodeAction::WarnInvalidRequest { .. } => {}
        }
    }

    /// The agent and kubelet of node i take their next step: reboot on reboot-now (node goes
    /// NotReady), come back with a new boot id, then prove the reboot.
    fn agent(&mut self, i: usize) {
        let keys = self.keys.clone();
        let t = Transition::new(&keys);
        let f = facts(&self.nodes[i]);
        let boot_id = f.boot_id.clone().unwrap();
        match f.protocol(&keys).phase {
            Phase::RebootNow if self.patch(i, &t.begin_reboot(&f, &boot_id)) => {
                self.set_ready(i, false);
                self.boots[i] += 1;
                self.nodes[i]["status"]["nodeInfo"]["bootID"] =
                    format!("n{i}-boot-{}", self.boots[i]).into();
            }
            Phase::InProgress { boot_id: recorded } if recorded.as_deref() != Some(&boot_id) => {
                self.set_ready(i, true);
                self.touch(i);
                let f = facts(&self.nodes[i]);
                assert!(self.patch(i, &t.finish_reboot(&f, recorded.as_deref())));
            }
            _ => {}
        }
    }

    fn apply(&mut self, step: &Step) {
        self.now += 1;
        let n = self.nodes.len();
        match *step {
            Step::Controller => self.controller_round(),
            Step::Agent(i) => self.agent(i % n),
            Step::DrainEnds { node, ok } => {
                let name = self.name(node % n);
                if self.drains.get(&name) == Some(&DrainState::Running) {
                    self.drains.insert(
                        name,
                        if ok {
                            DrainState::Drained
                        } else {
                            DrainState::Failed
                        },
                    );
                }
            }
            Step::Request(i) => {
                annotate(&mut self.nodes[i % n], "reboot-needed", "true");
                self.touch(i % n);
            }
            Step::Cancel(i) => {
                if let Some(map) = self.nodes[i % n]["metadata"]["annotations"].as_object_mut() {
                    map.remove("reboot-needed");
                    self.requested_at.remove(&self.name(i % n));
                }
                self.touch(i % n);
            }
            Step::InvalidRequest(i) => {
                annotate(&mut self.nodes[i % n], "reboot-needed", "banana");
                self.touch(i % n);
            }
            Step::AdminCordon(i) => {
                let i = i % n;
                if self.nodes[i]["spec"]["unschedulable"] != json!(true) {
                    self.nodes[i]["spec"]["unschedulable"] = true.into();
                    self.admin_cordoned.insert(i);
                    self.touch(i);
                }
            }
            Step::Flap(i) => {
                let i = i % n;
                let f = facts(&self.nodes[i]);
                if !f.protocol(&self.keys).reboot_under_way() {
                    self.set_ready(i, f.readiness != common::Readiness::Ready);
                    self.touch(i);
                }
            }
        }
    }

    /// Disturbances stop: the administrator uncordons what they cordoned, every node is
    /// Ready, drains finish. Every standing request must then end in a proven reboot.
    fn settle(&mut self) {
        for i in std::mem::take(&mut self.admin_cordoned) {
            if self.annotation(i, "reboot-cordoned").is_none() {
                self.nodes[i]["spec"]["unschedulable"] = false.into();
                self.touch(i);
            }
        }
        for i in 0..self.nodes.len() {
            let f = facts(&self.nodes[i]);
            if !f.protocol(&self.keys).reboot_under_way() && f.readiness != common::Readiness::Ready
            {
                self.set_ready(i, true);
                self.touch(i);
            }
        }
        let requested: Vec<usize> = (0..self.nodes.len())
            .filter(|&i| self.annotation(i, "reboot-needed").as_deref() == Some("true"))
            .collect();
        let boots_before = self.boots.clone();
        for _ in 0..40 * self.nodes.len() {
            self.now += 10;
            self.controller_round();
            for i in 0..self.nodes.len() {
                self.agent(i);
            }
            let running: Vec<String> = self
                .drains
                .iter()
                .filter(|(_, s)| **s == DrainState::Running)
                .map(|(n, _)| n.clone())
                .collect();
            for name in running {
                self.drains.insert(name, DrainState::Drained);
            }
        }
        for i in requested {
            assert!(
                self.boots[i] > boots_before[i],
                "request of n{i} never completed"
            );
        }
        assert!(
            self.ledger.slots.is_empty(),
            "slots left: {:?}",
            self.ledger.slots
        );
        for i in 0..self.nodes.len() {
            let f = facts(&self.nodes[i]);
            assert_eq!(f.protocol(&self.keys).phase, Phase::Idle, "n{i} stuck");
            assert!(
                !f.protocol(&self.keys).cordoned_by_operator,
                "n{i} left cordoned"
            );
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn the_budget_holds_no_request_is_lost_and_every_request_completes(
        size in 1..12usize,
        budget in 1..4usize,
        drain_enabled in any::<bool>(),
        not_ready in proptest::collection::vec(proptest::bool::weighted(0.2), 12),
        steps in proptest::collection::vec(step(), 0..150),
    ) {
        let mut fleet = Fleet::new(size, budget, drain_enabled, &not_ready);
        for s in &steps {
            fleet.apply(s);
        }
        fleet.settle();
    }
}
