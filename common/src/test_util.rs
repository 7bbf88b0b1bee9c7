//! Test fixtures shared by the crates' unit tests (the `test-util` feature): one way to write a
//! Node, so that each test says only what differs from a plain Ready node and the crates do not
//! each keep a hand-written `fn node(...)` that drifts from the others.

use crate::state::{NodeFacts, Readiness};
use k8s_openapi::api::core::v1::Node;
use serde_json::{Map, Value, json};

/// A Node as a test wants it. Without a call: Ready, schedulable, at resourceVersion `1`, with
/// no annotations, labels, taints or boot id (the kubelet has not reported one).
///
/// The node comes out as JSON (`json`), as the API object (`object`) or as the protocol's
/// facts (`facts`); all three are the same node, the facts read out of the object exactly as
/// the programs read a Node from the API server.
#[derive(Debug, Clone)]
pub struct NodeBuilder {
    name: String,
    resource_version: String,
    readiness: Readiness,
    unschedulable: bool,
    annotations: Option<Map<String, Value>>,
    labels: Option<Map<String, Value>>,
    taints: Option<Vec<Value>>,
    boot_id: Option<String>,
    heartbeat: Option<String>,
}

impl NodeBuilder {
    pub fn new(name: &str) -> Self {
        Self {
            name: name.to_owned(),
            resource_version: "1".to_owned(),
            readiness: Readiness::Ready,
            unschedulable: false,
            annotations: None,
            labels: None,
            taints: None,
            boot_id: None,
            heartbeat: None,
        }
    }

    pub fn resource_version(mut self, version: &str) -> Self {
        self.resource_version = version.to_owned();
        self
    }

    /// The Ready condition: `True`, `False`, `Unknown`, or none at all for `Missing`.
    pub fn readiness(mut self, readiness: Readiness) -> Self {
        self.readiness = readiness;
        self
    }

    /// Ready or NotReady.
    pub fn ready(self, ready: bool) -> Self {
        self.readiness(if ready {
            Readiness::Ready
        } else {
            Readiness::NotReady
        })
    }

    /// Cordoned (`spec.unschedulable`).
    pub fn unschedulable(mut self, unschedulable: bool) -> Self {
        self.unschedulable = unschedulable;
        self
    }

    /// Adds these annotations. The map exists only once it holds one, as the API server stores
    /// a Node: `has_annotations` is false for a node given none (see `annotation_map`).
    pub fn annotations(mut self, pairs: &[(&str, &str)]) -> Self {
        for (key, value) in pairs {
            self = self.annotation(key, value);
        }
        self
    }

    pub fn annotation(mut self, key: &str, value: &str) -> Self {
        insert(&mut self.annotations, key, value);
        self
    }

    /// `metadata.annotations` present even when empty, as a client may write `{}`.
    pub fn annotation_map(mut self) -> Self {
        self.annotations.get_or_insert_with(Map::new);
        self
    }

    pub fn label(mut self, key: &str, value: &str) -> Self {
        insert(&mut self.labels, key, value);
        self
    }

    /// Adds a taint to `spec.taints`, after those already given (the API keeps their order).
    pub fn taint(mut self, key: &str, effect: &str) -> Self {
        self.taints
            .get_or_insert_with(Vec::new)
            .push(json!({"key": key, "effect": effect}));
        self
    }

    /// `status.nodeInfo.bootID`.
    pub fn boot_id(mut self, boot_id: &str) -> Self {
        self.boot_id = Some(boot_id.to_owned());
        self
    }

    /// The Ready condition's `lastHeartbeatTime` (the kubelet renews it without other change).
    pub fn heartbeat(mut self, time: &str) -> Self {
        self.heartbeat = Some(time.to_owned());
        self
    }

    /// The Node as the API server would send it.
    pub fn json(&self) -> Value {
        let mut metadata = json!({"name": self.name, "resourceVersion": self.resource_version});
        if let Some(annotations) = &self.annotations {
            metadata["annotations"] = Value::Object(annotations.clone());
        }
        if let Some(labels) = &self.labels {
            metadata["labels"] = Value::Object(labels.clone());
        }
        let mut spec = json!({});
        if self.unschedulable {
            spec["unschedulable"] = Value::Bool(true);
        }
        if let Some(taints) = &self.taints {
            spec["taints"] = Value::Array(taints.clone());
        }
        let mut status = json!({"conditions": self.conditions()});
        if let Some(boot_id) = &self.boot_id {
            status["nodeInfo"] = json!({"bootID": boot_id});
        }
        json!({"metadata": metadata, "spec": spec, "status": status})
    }

    fn conditions(&self) -> Vec<Value> {
        let status = match self.readiness {
            Readiness::Ready => "True",
            Readiness::NotReady => "False",
            Readiness::Unknown => "Unknown",
            Readiness::Missing => return Vec::new(),
        };
        let mut ready = json!({"type": "Ready", "status": status});
        if let Some(time) = &self.heartbeat {
            ready["lastHeartbeatTime"] = Value::from(time.as_str());
        }
        vec![ready]
    }

    /// The Node as the API object.
    pub fn object(&self) -> Node {
        serde_json::from_value(self.json()).expect("the builder writes a valid Node")
    }

    /// The protocol's facts, read out of the object as the programs read them.
    pub fn facts(&self) -> NodeFacts {
        NodeFacts::from_node(&self.object())
    }
}

/// The facts of a Node written as JSON, as the programs read them from the API.
pub fn facts_of_json(obj: &Value) -> crate::NodeFacts {
    let node: k8s_openapi::api::core::v1::Node =
        serde_json::from_value(obj.clone()).expect("the JSON of a Node");
    crate::NodeFacts::from_node(&node)
}

/// Applies a JSON Patch to `doc` as the Kubernetes API server does (with evanphx/json-patch):
/// all of it or nothing, and a `test` of `null` passes where the key is absent (its parent
/// object must exist), which is how a write tests that a label is not there yet. RFC 6902, and
/// the json-patch crate with it, know no test of absence: there a missing path fails a `test`.
/// The unit tests and the model test apply the protocol's patches with this.
pub fn apply_patch(doc: &mut Value, patch: &json_patch::Patch) -> Result<(), String> {
    let mut next = doc.clone();
    for op in &patch.0 {
        match op {
            json_patch::PatchOperation::Test(test) if test.value.is_null() => {
                test_absent(&next, &test.path)?;
            }
            other => json_patch::patch(&mut next, &json_patch::Patch(vec![other.clone()]))
                .map_err(|e| e.to_string())?,
        }
    }
    *doc = next;
    Ok(())
}

/// The API server's `test` of `null`: the parent object exists and holds no value at the key.
fn test_absent(doc: &Value, path: &json_patch::jsonptr::Pointer) -> Result<(), String> {
    let (parent, key) = path
        .split_back()
        .ok_or_else(|| format!("test of null at the root {path}"))?;
    let object = doc
        .pointer(parent.as_str())
        .and_then(Value::as_object)
        .ok_or_else(|| format!("test operation does not apply: is missing path: {path}"))?;
    match object.get(key.decoded().as_ref()) {
        None | Some(Value::Null) => Ok(()),
        Some(_) => Err(format!("testing value {path} failed")),
    }
}

/// Puts `key: value` in a metadata map, creating the map.
fn insert(map: &mut Option<Map<String, Value>>, key: &str, value: &str) {
    map.get_or_insert_with(Map::new)
        .insert(key.to_owned(), Value::from(value));
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn a_plain_node_is_ready_schedulable_and_bare() {
        assert_eq!(
            NodeBuilder::new("n1").facts(),
            NodeFacts {
                name: "n1".into(),
                resource_version: Some("1".into()),
                readiness: Readiness::Ready,
                unschedulable: false,
                has_annotations: false,
                annotations: BTreeMap::new(),
                boot_id: None,
                has_labels: false,
                labels: BTreeMap::new(),
                taints: None,
            }
        );
    }

    #[test]
    fn each_call_shows_in_the_facts() {
        let facts = NodeBuilder::new("n2")
            .resource_version("42")
            .readiness(Readiness::Unknown)
            .unschedulable(true)
            .annotations(&[("a", "1"), ("b", "2")])
            .label("zone", "z1")
            .taint("t1", "NoSchedule")
            .taint("t0", "NoExecute")
            .boot_id("b1")
            .facts();
        assert_eq!(facts.resource_version.as_deref(), Some("42"));
        assert_eq!(facts.readiness, Readiness::Unknown);
        assert!(facts.unschedulable);
        assert!(facts.has_annotations);
        assert_eq!(facts.annotations.len(), 2);
        assert_eq!(facts.annotations["b"], "2");
        assert!(facts.has_labels);
        assert_eq!(facts.labels["zone"], "z1");
        assert_eq!(
            facts.taints,
            Some(vec![
                ("t1".into(), "NoSchedule".into()),
                ("t0".into(), "NoExecute".into())
            ])
        );
        assert_eq!(facts.boot_id.as_deref(), Some("b1"));
    }

    /// As the API server applies a patch: a `test` of `null` passes only where the key is
    /// absent under an existing object, and a failed operation leaves the document unchanged.
    #[test]
    fn a_test_of_null_passes_only_for_an_absent_key() {
        let patch = |ops: Value| -> json_patch::Patch { serde_json::from_value(ops).unwrap() };
        let absent_then_add = patch(json!([
            {"op": "test", "path": "/metadata/labels/k", "value": null},
            {"op": "add", "path": "/metadata/labels/k", "value": "v"},
        ]));
        let mut doc = json!({"metadata": {"labels": {"other": "x"}}});
        apply_patch(&mut doc, &absent_then_add).unwrap();
        assert_eq!(doc["metadata"]["labels"], json!({"other": "x", "k": "v"}));
        for present in [json!("v"), json!(""), json!("other")] {
            let before = json!({"metadata": {"labels": {"k": present}}});
            let mut doc = before.clone();
            assert!(apply_patch(&mut doc, &absent_then_add).is_err(), "{before}");
            assert_eq!(doc, before, "nothing applied");
        }
        let mut no_labels = json!({"metadata": {}});
        assert!(apply_patch(&mut no_labels, &absent_then_add).is_err());
        let map_absent = patch(json!([{"op": "test", "path": "/metadata/labels", "value": null}]));
        apply_patch(&mut no_labels, &map_absent).unwrap();
        let mut with_labels = json!({"metadata": {"labels": {}}});
        assert!(apply_patch(&mut with_labels, &map_absent).is_err());
    }

    #[test]
    fn readiness_missing_is_no_condition_and_an_empty_map_is_kept() {
        let builder = NodeBuilder::new("n3")
            .readiness(Readiness::Missing)
            .annotation_map();
        assert_eq!(builder.json()["status"]["conditions"], json!([]));
        let facts = builder.facts();
        assert_eq!(facts.readiness, Readiness::Missing);
        assert!(facts.has_annotations && facts.annotations.is_empty());
        assert_eq!(
            NodeBuilder::new("n4").ready(false).facts().readiness,
            Readiness::NotReady
        );
    }
}
