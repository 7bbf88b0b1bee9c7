//! JSON Patches for every transition of the protocol. Each one `test`s the values it depends
//! on, so a concurrent change (an administrator cancelling, another controller, a stale
//! cache) makes the API server refuse the write instead of the write overwriting the change.

use crate::{keys::AnnotationKeys, state::NodeFacts};
use json_patch::{
    AddOperation, Patch, PatchOperation, RemoveOperation, TestOperation,
    jsonptr::{PointerBuf, Token},
};
use serde_json::Value;

/// Accumulates operations on one Node.
#[derive(Debug)]
struct Ops {
    ops: Vec<PatchOperation>,
    annotations_exist: bool,
}

fn annotation_path(key: &str) -> PointerBuf {
    PointerBuf::from_tokens([
        Token::new("metadata"),
        Token::new("annotations"),
        Token::new(key),
    ])
}

fn path(tokens: &[&str]) -> PointerBuf {
    PointerBuf::from_tokens(tokens.iter().map(|t| Token::new(*t)))
}

impl Ops {
    fn on(node: &NodeFacts) -> Self {
        Self {
            ops: Vec::new(),
            annotations_exist: node.has_annotations,
        }
    }

    fn test(mut self, path: PointerBuf, value: Value) -> Self {
        self.ops
            .push(PatchOperation::Test(TestOperation { path, value }));
        self
    }

    fn test_annotation(self, key: &str, value: &str) -> Self {
        self.test(annotation_path(key), value.into())
    }

    /// Fails the patch if anything at all changed on the node since it was read.
    fn test_unchanged(self, node: &NodeFacts) -> Self {
        match &node.resource_version {
            Some(rv) => self.test(path(&["metadata", "resourceVersion"]), rv.as_str().into()),
            None => self,
        }
    }

    fn add(mut self, path: PointerBuf, value: Value) -> Self {
        self.ops
            .push(PatchOperation::Add(AddOperation { path, value }));
        self
    }

    fn set_annotation(mut self, key: &str, value: &str) -> Self {
        if !self.annotations_exist {
            self = self.add(
                path(&["metadata", "annotations"]),
                Value::Object(Default::default()),
            );
            self.annotations_exist = true;
        }
        self.add(annotation_path(key), value.into())
    }

    fn remove_annotation(mut self, key: &str) -> Self {
        let path = annotation_path(key);
        self.ops
            .push(PatchOperation::Remove(RemoveOperation { path }));
        self
    }

    fn set_unschedulable(self, unschedulable: bool) -> Self {
        self.add(path(&["spec", "unschedulable"]), unschedulable.into())
    }

    fn build(self) -> Patch {
        Patch(self.ops)
    }
}

/// The protocol's transitions, as patches of one node.
#[derive(Debug, Clone, Copy)]
pub struct Transition<'a> {
    keys: &'a AnnotationKeys,
}

impl<'a> Transition<'a> {
    pub fn new(keys: &'a AnnotationKeys) -> Self {
        Self { keys }
    }

    fn cordon_ops(&self, node: &NodeFacts, ops: Ops) -> Ops {
        // An administrator's cordon stays theirs: only a node we cordon gets our marker.
        let ops = ops.test_unchanged(node);
        if node.unschedulable {
            return ops;
        }
        ops.set_unschedulable(true)
            .set_annotation(&self.keys.cordoned, "true")
    }

    fn promote_ops(&self, ops: Ops) -> Ops {
        // `reboot-needed` leaves only together with the arrival of `reboot-now` (no lost request).
        ops.test_annotation(&self.keys.needed, "true")
            .remove_annotation(&self.keys.needed)
            .set_annotation(&self.keys.now, "true")
    }

    fn uncordon_ops(&self, node: &NodeFacts, ops: Ops) -> Ops {
        if !node.protocol(self.keys).cordoned_by_operator {
            return ops;
        }
        ops.test_annotation(&self.keys.cordoned, "true")
            .remove_annotation(&self.keys.cordoned)
            .set_unschedulable(false)
    }

    /// Controller, slot granted: cordon the node (unless the administrator already did),
    /// while the request still stands.
    pub fn cordon(&self, node: &NodeFacts) -> Patch {
        let ops = Ops::on(node).test_annotation(&self.keys.needed, "true");
        self.cordon_ops(node, ops).build()
    }

    /// Controller, node drained: `reboot-needed` becomes `reboot-now` in one write.
    pub fn promote(&self, node: &NodeFacts) -> Patch {
        self.promote_ops(Ops::on(node)).build()
    }

    /// Controller, nothing to drain: cordon and promote in one write.
    pub fn cordon_and_promote(&self, node: &NodeFacts) -> Patch {
        let ops = self.cordon_ops(node, Ops::on(node));
        self.promote_ops(ops).build()
    }

    /// Agent, on `reboot-now`: record the boot id the reboot starts from.
    pub fn begin_reboot(&self, node: &NodeFacts, boot_id: &str) -> Patch {
        Ops::on(node)
            .test_annotation(&self.keys.now, "true")
            .remove_annotation(&self.keys.now)
            .set_annotation(&self.keys.in_progress, "true")
            .set_annotation(&self.keys.boot_id, boot_id)
            .build()
    }

    /// Agent, `reboot-in-progress` without a recorded boot id (a hand edit): record the current
    /// one while the reboot is still in progress, so that the next start can prove or retry it.
    pub fn record_boot_id(&self, node: &NodeFacts, boot_id: &str) -> Patch {
        Ops::on(node)
            .test_annotation(&self.keys.in_progress, "true")
            .set_annotation(&self.keys.boot_id, boot_id)
            .build()
    }

    /// Agent, after boot with a boot id other than `recorded_boot_id`: the reboot is proven.
    pub fn finish_reboot(&self, node: &NodeFacts, recorded_boot_id: Option<&str>) -> Patch {
        let mut ops = Ops::on(node).test_annotation(&self.keys.in_progress, "true");
        if let Some(recorded) = recorded_boot_id {
            ops = ops
                .test_annotation(&self.keys.boot_id, recorded)
                .remove_annotation(&self.keys.boot_id);
        }
        ops.remove_annotation(&self.keys.in_progress)
            .set_annotation(&self.keys.done, "true")
            .build()
    }

    /// Controller, reboot proven and node Ready: uncordon what we cordoned, record the time.
    pub fn complete(&self, node: &NodeFacts, completed_at: &str) -> Patch {
        let ops = Ops::on(node)
            .test_annotation(&self.keys.done, "true")
            .remove_annotation(&self.keys.done)
            .set_annotation(&self.keys.last_completed, completed_at);
        self.uncordon_ops(node, ops).build()
    }

    /// Controller, request withdrawn before `reboot-now` (or a drain abandoned): give the node
    /// back as it was. `None` when there is nothing to undo.
    pub fn release(&self, node: &NodeFacts) -> Option<Patch> {
        if !node.protocol(self.keys).cordoned_by_operator {
            return None;
        }
        Some(
            self.uncordon_ops(node, Ops::on(node).test_unchanged(node))
                .build(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::Readiness;
    use serde_json::json;

    fn node(annotations: &[(&str, &str)], unschedulable: bool) -> NodeFacts {
        NodeFacts {
            name: "n1".into(),
            resource_version: Some("42".into()),
            readiness: Readiness::Ready,
            unschedulable,
            has_annotations: !annotations.is_empty(),
            annotations: annotations
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            boot_id: None,
        }
    }

    fn apply(node_json: &mut Value, patch: &Patch) -> Result<(), json_patch::PatchError> {
        json_patch::patch(node_json, patch)
    }

    #[test]
    fn cordon_and_promote_swaps_the_request_for_the_go_ahead() {
        let keys = AnnotationKeys::default();
        let facts = node(&[("reboot-needed", "true")], false);
        let mut obj = json!({"metadata": {"resourceVersion": "42",
            "annotations": {"reboot-needed": "true"}}, "spec": {}});
        apply(&mut obj, &Transition::new(&keys).cordon_and_promote(&facts)).unwrap();
        assert_eq!(
            obj,
            json!({"metadata": {"resourceVersion": "42", "annotations": {
                "reboot-now": "true", "reboot-cordoned": "true"}},
                "spec": {"unschedulable": true}})
        );
    }

    #[test]
    fn a_withdrawn_request_fails_the_promotion() {
        let keys = AnnotationKeys::default();
        let facts = node(&[("reboot-needed", "true")], true);
        let mut obj = json!({"metadata": {"annotations": {"other": "x"}}, "spec": {}});
        assert!(apply(&mut obj, &Transition::new(&keys).promote(&facts)).is_err());
    }

    #[test]
    fn an_administrators_cordon_is_not_marked_as_ours() {
        let keys = AnnotationKeys::default();
        let facts = node(&[("reboot-needed", "true")], true);
        let patch = Transition::new(&keys).cordon(&facts);
        let text = serde_json::to_string(&patch).unwrap();
        assert!(!text.contains("reboot-cordoned"), "{text}");
        assert!(!text.contains("unschedulable"), "{text}");
    }

    #[test]
    fn prefixed_keys_are_escaped_in_pointers() {
        let keys = AnnotationKeys::new("reboot.example.com").unwrap();
        let facts = node(&[("reboot.example.com/reboot-now", "true")], false);
        let patch = Transition::new(&keys).begin_reboot(&facts, "b1");
        let mut obj =
            json!({"metadata": {"annotations": {"reboot.example.com/reboot-now": "true"}}});
        apply(&mut obj, &patch).unwrap();
        assert_eq!(
            obj["metadata"]["annotations"],
            json!({"reboot.example.com/reboot-in-progress": "true",
                   "reboot.example.com/reboot-boot-id": "b1"})
        );
    }

    #[test]
    fn completion_uncordons_only_what_we_cordoned() {
        let keys = AnnotationKeys::default();
        let t = Transition::new(&keys);
        let ours = node(
            &[("reboot-done", "true"), ("reboot-cordoned", "true")],
            true,
        );
        let mut obj = json!({"metadata": {"annotations": {"reboot-done": "true",
            "reboot-cordoned": "true"}}, "spec": {"unschedulable": true}});
        apply(&mut obj, &t.complete(&ours, "2026-01-01T00:00:00Z")).unwrap();
        assert_eq!(obj["spec"]["unschedulable"], json!(false));
        assert_eq!(
            obj["metadata"]["annotations"],
            json!({"reboot-last-completed": "2026-01-01T00:00:00Z"})
        );

        let admins = node(&[("reboot-done", "true")], true);
        let mut obj = json!({"metadata": {"annotations": {"reboot-done": "true"}},
            "spec": {"unschedulable": true}});
        apply(&mut obj, &t.complete(&admins, "t")).unwrap();
        assert_eq!(obj["spec"]["unschedulable"], json!(true));
        assert!(t.release(&admins).is_none());
    }

    #[test]
    fn records_the_boot_id_only_while_in_progress() {
        let keys = AnnotationKeys::new("reboot.example.com").unwrap();
        let facts = node(&[("reboot.example.com/reboot-in-progress", "true")], false);
        let patch = Transition::new(&keys).record_boot_id(&facts, "b2");
        let mut obj = json!({"metadata": {"annotations": {
            "reboot.example.com/reboot-in-progress": "true"}}});
        apply(&mut obj, &patch).unwrap();
        assert_eq!(
            obj["metadata"]["annotations"]["reboot.example.com/reboot-boot-id"],
            json!("b2")
        );
        let mut finished = json!({"metadata": {"annotations": {"other": "x"}}});
        assert!(apply(&mut finished, &patch).is_err());
    }

    #[test]
    fn finishing_checks_the_recorded_boot_id() {
        let keys = AnnotationKeys::default();
        let facts = node(
            &[("reboot-in-progress", "true"), ("reboot-boot-id", "b1")],
            false,
        );
        let mut obj = json!({"metadata": {"annotations": {"reboot-in-progress": "true",
            "reboot-boot-id": "other"}}});
        let patch = Transition::new(&keys).finish_reboot(&facts, Some("b1"));
        assert!(apply(&mut obj, &patch).is_err());
    }
}
