//! Recorded fixtures of the state a rollout leaves at each step of the protocol (nodes and the
//! slot ledger, as this version writes them), and putting such a state on a fresh control
//! plane: what a controller (and agents) of a later build find when they take over in the
//! middle of a rollout.
//!
//! A fixture is JSON: `{"step", "node", "nodes": {name: {"unschedulable", "annotations"}},
//! "ledger": {annotation: value}}`. Only the operator's annotations are kept. A value equal
//! to the node's boot id when recorded is stored as [`BOOT_ID`] and becomes the boot id of the
//! node it is put on, so that a recorded reboot under way means the same thing there (the
//! boot it started from is the one running).

use common::{
    AnnotationKeys, NodeFacts,
    ledger::{LEDGER_NAME, OPERATOR_NAMESPACE, SLOTS_ANNOTATION},
};
use k8s_openapi::api::{coordination::v1::Lease, core::v1::Node};
use kube::{
    Api, Client,
    api::{Patch, PatchParams, PostParams},
};
use serde_json::{Map, Value, json};
use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
};

/// Stands for the boot id of the node a fixture is put on.
pub const BOOT_ID: &str = "{{bootID}}";

/// The steps recorded, in the order a node goes through them. `granted` is also the stored
/// state of a drain under way: drain progress lives in the controller's memory, not on the
/// node, and a new controller starts the drain of a granted node again.
pub const STEPS: [&str; 7] = [
    "requested",
    "granted",
    "reboot-now",
    "reboot-in-progress",
    "rebooted",
    "reboot-done",
    "released",
];

/// Where the fixtures are kept in the repository.
pub fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/protocol-steps")
}

/// The step a node is at, as its annotations and status say; `None` outside a rollout.
pub fn step_of(node: &Node) -> Option<&'static str> {
    let keys = AnnotationKeys::default();
    let facts = NodeFacts::from_node(node);
    let is = |key: &str| facts.annotations.get(key).is_some_and(|v| v == "true");
    let recorded_boot = facts.annotations.get(&keys.boot_id);
    Some(if is(&keys.done) {
        "reboot-done"
    } else if is(&keys.in_progress) && recorded_boot != facts.boot_id.as_ref() {
        "rebooted"
    } else if is(&keys.in_progress) {
        "reboot-in-progress"
    } else if is(&keys.now) {
        "reboot-now"
    } else if facts.annotations.contains_key(&keys.grant) {
        "granted"
    } else if is(&keys.needed) {
        "requested"
    } else if facts.annotations.contains_key(&keys.last_completed)
        && !facts.annotations.keys().any(|k| keys.is_protocol_state(k))
    {
        "released"
    } else {
        return None;
    })
}

/// The fixture of `step` (reached by `node`) from the nodes and the ledger Lease as they are.
pub fn snapshot(step: &str, node: &str, nodes: &[Node], ledger: Option<&Lease>) -> Value {
    let keys = AnnotationKeys::default();
    let mut recorded = Map::new();
    for n in nodes {
        let facts = NodeFacts::from_node(n);
        let annotations: Map<String, Value> = facts
            .annotations
            .iter()
            .filter(|(k, _)| keys.all().contains(&k.as_str()))
            .map(|(k, v)| {
                let v = if Some(v) == facts.boot_id.as_ref() {
                    BOOT_ID
                } else {
                    v
                };
                (k.clone(), json!(v))
            })
            .collect();
        recorded.insert(
            facts.name.clone(),
            json!({"unschedulable": facts.unschedulable, "annotations": annotations}),
        );
    }
    let ledger: BTreeMap<String, String> = ledger
        .and_then(|l| l.metadata.annotations.clone())
        .unwrap_or_default()
        .into_iter()
        .filter(|(k, _)| k.starts_with("node-reboot-operator/") || k == "reboot-paused")
        .collect();
    json!({"step": step, "node": node, "nodes": recorded, "ledger": ledger})
}

/// The fixtures in the repository, by file name, in step order.
pub fn load_all() -> Vec<(String, Value)> {
    let dir = fixtures_dir();
    let mut fixtures: Vec<(String, Value)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .map(|p| {
            let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{p:?}: {e}"));
            let value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{p:?}: {e}"));
            let name = p.file_name().unwrap_or_default().to_string_lossy().into();
            (name, value)
        })
        .collect();
    fixtures.sort_by(|a, b| a.0.cmp(&b.0));
    fixtures
}

/// How many reboots the node must make once the fixture is put back: one for a node whose
/// reboot is still to happen (requested, granted, told, or under way from the running boot),
/// none for one that already rebooted or is not in the rollout.
pub fn reboots_due(recorded: &Value) -> u32 {
    let annotation = |key: &str| recorded["annotations"][key].as_str();
    if annotation("reboot-done") == Some("true") {
        return 0;
    }
    if annotation("reboot-in-progress") == Some("true") {
        return u32::from(annotation("reboot-boot-id") == Some(BOOT_ID));
    }
    u32::from(
        annotation("reboot-now") == Some("true") || annotation("reboot-needed") == Some("true"),
    )
}

/// Whether the node is in the rollout in the fixture (it must end completed).
pub fn in_rollout(recorded: &Value) -> bool {
    let keys = AnnotationKeys::default();
    recorded["annotations"]
        .as_object()
        .is_some_and(|a| a.keys().any(|k| keys.is_protocol_state(k)))
}

/// Puts a fixture's state on the fresh control plane of `client`: each node's annotations and
/// cordon ([`BOOT_ID`] becomes that node's boot id), then the ledger Lease.
///
/// A slot's `nodeVersion` is a resourceVersion of the recording's cluster, which means nothing
/// here (a fresh cluster's may be lower): it becomes the version of the node as put, the state
/// of a grant decided on the node as it is.
pub async fn put(client: &Client, fixture: &Value) {
    let nodes: Api<Node> = Api::all(client.clone());
    let mut versions = BTreeMap::new();
    let recorded = fixture["nodes"].as_object().expect("nodes");
    for (name, state) in recorded {
        let node = nodes
            .get(name)
            .await
            .expect("the fixture's node is simulated");
        let boot_id = NodeFacts::from_node(&node).boot_id.unwrap_or_default();
        let annotations: Map<String, Value> = state["annotations"]
            .as_object()
            .expect("annotations")
            .iter()
            .map(|(k, v)| {
                let v = v.as_str().unwrap_or_default().replace(BOOT_ID, &boot_id);
                (k.clone(), json!(v))
            })
            .collect();
        let patch = json!({
            "metadata": {"annotations": annotations},
            "spec": {"unschedulable": state["unschedulable"]},
        });
        let put = nodes
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .expect("put the fixture's node state");
        versions.insert(name.clone(), put.metadata.resource_version);
    }
    let mut ledger = fixture["ledger"].clone();
    if let Some(slots) = ledger[SLOTS_ANNOTATION].as_str() {
        let mut slots: Value = serde_json::from_str(slots).expect("the fixture's slots");
        for (name, slot) in slots.as_object_mut().into_iter().flatten() {
            if let Some(version) = versions.get(name) {
                slot["nodeVersion"] = json!(version);
            }
        }
        ledger[SLOTS_ANNOTATION] = json!(slots.to_string());
    }
    let leases: Api<Lease> = Api::namespaced(client.clone(), OPERATOR_NAMESPACE);
    let lease: Lease = serde_json::from_value(json!({
        "metadata": {"name": LEDGER_NAME, "annotations": ledger},
    }))
    .expect("a Lease");
    leases
        .create(&PostParams::default(), &lease)
        .await
        .expect("create the ledger Lease");
}
