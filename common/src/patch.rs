//! JSON Patches for every transition of the protocol. Each one `test`s the values it depends
//! on, so a concurrent change (an administrator cancelling, another controller, a stale
//! cache) makes the API server refuse the write instead of the write overwriting the change.

use crate::{
    keys::AnnotationKeys,
    state::{NodeFacts, Phase},
};
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
        if node.unschedulable {
            return ops;
        }
        ops.set_unschedulable(true)
            .set_annotation(&self.keys.cordoned, "true")
    }

    /// `now` (RFC 3339) is recorded as `reboot-approved-at`, what `--reboot-timeout` counts from.
    fn promote_ops(&self, ops: Ops, now: &str) -> Ops {
        // `reboot-needed` leaves only together with the arrival of `reboot-now` (no lost request).
        ops.test_annotation(&self.keys.needed, "true")
            .remove_annotation(&self.keys.needed)
            .set_annotation(&self.keys.now, "true")
            .set_annotation(&self.keys.approved_at, now)
    }

    /// Drops `reboot-approved-at` (tested), if the node has it: the reboot is over or given back.
    fn forget_approval(&self, node: &NodeFacts, ops: Ops) -> Ops {
        match node.annotations.get(&self.keys.approved_at) {
            Some(at) => ops
                .test_annotation(&self.keys.approved_at, at)
                .remove_annotation(&self.keys.approved_at),
            None => ops,
        }
    }

    fn uncordon_ops(&self, node: &NodeFacts, ops: Ops) -> Ops {
        if !node.protocol(self.keys).cordoned_by_operator {
            return ops;
        }
        ops.test_annotation(&self.keys.cordoned, "true")
            .remove_annotation(&self.keys.cordoned)
            .set_unschedulable(false)
    }

    /// Ops of a write that belongs to `grant`: it fails unless the node still holds it.
    fn of_grant(&self, node: &NodeFacts, grant: &str) -> Ops {
        Ops::on(node).test_annotation(&self.keys.grant, grant)
    }

    /// Controller, right after the ledger's compare-and-swap granted `grant` to the node from
    /// its version `node_version`: put the grant on the node and cordon it (unless the
    /// administrator already did), and with `promote` also swap the request for `reboot-now`.
    /// The write tests that the node is still at `node_version`, so a grant that another
    /// controller released (after the node changed) can never be claimed. `now` is the time of
    /// the write.
    pub fn claim(
        &self,
        node: &NodeFacts,
        grant: &str,
        node_version: &str,
        promote: bool,
        now: &str,
    ) -> Patch {
        let ops = Ops::on(node)
            .test(path(&["metadata", "resourceVersion"]), node_version.into())
            .test_annotation(&self.keys.needed, "true")
            .set_annotation(&self.keys.grant, grant);
        let ops = self.cordon_ops(node, ops);
        if promote {
            self.promote_ops(ops, now).build()
        } else {
            ops.build()
        }
    }

    /// Controller: the node holds `grant` but someone uncordoned it: cordon it again.
    pub fn recordon(&self, node: &NodeFacts, grant: &str) -> Patch {
        let ops = self.of_grant(node, grant).test_unchanged(node);
        self.cordon_ops(node, ops).build()
    }

    /// Controller, node drained under `grant`: `reboot-needed` becomes `reboot-now` in one
    /// write, only while the node holds that grant, is cordoned, and is still the version the
    /// drain ended on (`node`'s): pods cannot have come back since. `now` is the time of the
    /// write.
    pub fn promote(&self, node: &NodeFacts, grant: &str, now: &str) -> Patch {
        let ops = self
            .of_grant(node, grant)
            .test_unchanged(node)
            .test(path(&["spec", "unschedulable"]), true.into());
        self.promote_ops(ops, now).build()
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

    /// Agent, its node's reboot sentinel found: requests a reboot, saying who asked and why
    /// and recording which sentinel in which boot (`sentinel_record`), only if the node is
    /// unchanged since it was seen without a request.
    pub fn request(&self, node: &NodeFacts, requested_by: &str, sentinel_record: &str) -> Patch {
        Ops::on(node)
            .test_unchanged(node)
            .set_annotation(&self.keys.needed, "true")
            .set_annotation(&self.keys.requested_by, requested_by)
            .set_annotation(&self.keys.sentinel, sentinel_record)
            .build()
    }

    /// Agent, the sentinel a past request was made for is gone: forget it, so that a sentinel
    /// that comes back, even the same, is a new need. Holds only while the record is still
    /// `recorded`; `reboot-requested-by` stays, as the history of the last request.
    pub fn forget_sentinel(&self, node: &NodeFacts, recorded: &str) -> Patch {
        Ops::on(node)
            .test_annotation(&self.keys.sentinel, recorded)
            .remove_annotation(&self.keys.sentinel)
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

    /// Agent, after boot in `new_boot_id`, other than `recorded_boot_id`: the reboot is
    /// proven. The new boot id stays, so the controller can wait until the kubelet reports it.
    pub fn finish_reboot(
        &self,
        node: &NodeFacts,
        recorded_boot_id: Option<&str>,
        new_boot_id: &str,
    ) -> Patch {
        let mut ops = Ops::on(node).test_annotation(&self.keys.in_progress, "true");
        if let Some(recorded) = recorded_boot_id {
            ops = ops.test_annotation(&self.keys.boot_id, recorded);
        }
        ops.remove_annotation(&self.keys.in_progress)
            .set_annotation(&self.keys.boot_id, new_boot_id)
            .set_annotation(&self.keys.done, "true")
            .build()
    }

    /// Controller, reboot proven and the kubelet reports the proven boot: uncordon what we
    /// cordoned, record the time and the grant that ended in this reboot, drop the grant.
    pub fn complete(&self, node: &NodeFacts, grant: Option<&str>, completed_at: &str) -> Patch {
        let state = node.protocol(self.keys);
        let mut ops = Ops::on(node).test_annotation(&self.keys.done, "true");
        if let Phase::Done {
            boot_id: Some(proven),
        } = &state.phase
        {
            ops = ops
                .test_annotation(&self.keys.boot_id, proven)
                .remove_annotation(&self.keys.boot_id);
        }
        ops = self
            .forget_approval(node, ops)
            .remove_annotation(&self.keys.done)
            .set_annotation(&self.keys.last_completed, completed_at);
        if let Some(grant) = grant {
            ops = ops.set_annotation(&self.keys.last_grant, grant);
        }
        if state.grant.is_some() {
            let held = state.grant.as_deref().unwrap_or_default();
            ops = ops
                .test_annotation(&self.keys.grant, held)
                .remove_annotation(&self.keys.grant);
        }
        self.uncordon_ops(node, ops).build()
    }

    /// Controller, request withdrawn before `reboot-now`, drain given up, or a leftover: give
    /// the node back as it was, dropping `grant` (the node's, when `None`). `None` when there
    /// is nothing to undo.
    pub fn release(&self, node: &NodeFacts) -> Option<Patch> {
        let state = node.protocol(self.keys);
        if !state.cordoned_by_operator && state.grant.is_none() && state.approved_at.is_none() {
            return None;
        }
        let mut ops = self.forget_approval(node, Ops::on(node).test_unchanged(node));
        if let Some(grant) = &state.grant {
            ops = ops
                .test_annotation(&self.keys.grant, grant)
                .remove_annotation(&self.keys.grant);
        }
        Some(self.uncordon_ops(node, ops).build())
    }
    /// Controller, an administrator gives the node up (`reboot-abandon`): clears every key of
    /// the protocol it has (the request, the go-ahead, the reboot under way, its proof, the
    /// grant), and uncordons it if the operator cordoned it, all while the node is unchanged
    /// since it was read (an agent that took `reboot-now` meanwhile fails the write, which is
    /// then decided again). `reboot-abandon` stays until the slot is out of the ledger
    /// ([`Self::forget_abandon`]). `None` when there is nothing to clear.
    pub fn abandon(&self, node: &NodeFacts) -> Option<Patch> {
        let state = node.protocol(self.keys);
        if !state.anything_to_abandon() {
            return None;
        }
        let mut ops = self.forget_approval(node, Ops::on(node).test_unchanged(node));
        for key in [
            &self.keys.needed,
            &self.keys.now,
            &self.keys.in_progress,
            &self.keys.boot_id,
            &self.keys.done,
            &self.keys.grant,
        ] {
            if let Some(value) = node.annotations.get(key) {
                ops = ops.test_annotation(key, value).remove_annotation(key);
            }
        }
        Some(self.uncordon_ops(node, ops).build())
    }

    /// Controller, the given-up node holds no slot and nothing of the protocol any more: the
    /// request to give it up is done. Holds only while it is still the value read; `None`
    /// without one.
    pub fn forget_abandon(&self, node: &NodeFacts) -> Option<Patch> {
        let value = node.annotations.get(&self.keys.abandon)?;
        Some(
            Ops::on(node)
                .test_annotation(&self.keys.abandon, value)
                .remove_annotation(&self.keys.abandon)
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
    fn a_claim_with_promotion_swaps_the_request_for_the_go_ahead_and_carries_the_grant() {
        let keys = AnnotationKeys::default();
        let facts = node(&[("reboot-needed", "true")], false);
        let mut obj = json!({"metadata": {"resourceVersion": "42",
            "annotations": {"reboot-needed": "true"}}, "spec": {}});
        apply(
            &mut obj,
            &Transition::new(&keys).claim(&facts, "g1", "42", true, "t0"),
        )
        .unwrap();
        assert_eq!(
            obj,
            json!({"metadata": {"resourceVersion": "42", "annotations": {
                "reboot-now": "true", "reboot-cordoned": "true", "reboot-grant": "g1",
                "reboot-approved-at": "t0"}},
                "spec": {"unschedulable": true}})
        );
    }

    #[test]
    fn a_grant_cannot_be_claimed_once_the_node_changed() {
        let keys = AnnotationKeys::default();
        let facts = node(&[("reboot-needed", "true")], false);
        let mut obj = json!({"metadata": {"resourceVersion": "43",
            "annotations": {"reboot-needed": "true"}}, "spec": {}});
        let claim = Transition::new(&keys).claim(&facts, "g1", "42", false, "t0");
        assert!(apply(&mut obj, &claim).is_err());
    }

    #[test]
    fn a_withdrawn_request_or_another_grant_fails_the_promotion() {
        let keys = AnnotationKeys::default();
        let t = Transition::new(&keys);
        let facts = node(&[("reboot-needed", "true"), ("reboot-grant", "g1")], true);
        let mut obj = json!({"metadata": {"annotations": {"other": "x", "reboot-grant": "g1"}},
            "spec": {"unschedulable": true}});
        assert!(apply(&mut obj, &t.promote(&facts, "g1", "t0")).is_err());
        let mut obj = json!({"metadata": {"annotations": {"reboot-needed": "true",
            "reboot-grant": "g2"}}, "spec": {"unschedulable": true}});
        assert!(apply(&mut obj, &t.promote(&facts, "g1", "t0")).is_err());
        let mut obj = json!({"metadata": {"annotations": {"reboot-needed": "true",
            "reboot-grant": "g1"}}, "spec": {"unschedulable": false}});
        assert!(
            apply(&mut obj, &t.promote(&facts, "g1", "t0")).is_err(),
            "not cordoned"
        );
    }

    #[test]
    fn an_administrators_cordon_is_not_marked_as_ours() {
        let keys = AnnotationKeys::default();
        let facts = node(&[("reboot-needed", "true")], true);
        let patch = Transition::new(&keys).claim(&facts, "g1", "42", false, "t0");
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
        let annotations = [
            ("reboot-done", "true"),
            ("reboot-boot-id", "b2"),
            ("reboot-cordoned", "true"),
            ("reboot-grant", "g1"),
            ("reboot-approved-at", "t0"),
        ];
        let ours = node(&annotations, true);
        let mut obj = json!({"metadata": {"annotations": {"reboot-done": "true",
            "reboot-boot-id": "b2", "reboot-cordoned": "true", "reboot-grant": "g1",
            "reboot-approved-at": "t0"}},
            "spec": {"unschedulable": true}});
        apply(
            &mut obj,
            &t.complete(&ours, Some("g1"), "2026-01-01T00:00:00Z"),
        )
        .unwrap();
        assert_eq!(obj["spec"]["unschedulable"], json!(false));
        assert_eq!(
            obj["metadata"]["annotations"],
            json!({"reboot-last-completed": "2026-01-01T00:00:00Z", "reboot-last-grant": "g1"})
        );

        let admins = node(&[("reboot-done", "true")], true);
        let mut obj = json!({"metadata": {"annotations": {"reboot-done": "true"}},
            "spec": {"unschedulable": true}});
        apply(&mut obj, &t.complete(&admins, None, "t")).unwrap();
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
        let patch = Transition::new(&keys).finish_reboot(&facts, Some("b1"), "b2");
        assert!(apply(&mut obj, &patch).is_err());
        let mut obj = json!({"metadata": {"annotations": {"reboot-in-progress": "true",
            "reboot-boot-id": "b1"}}});
        apply(&mut obj, &patch).unwrap();
        assert_eq!(
            obj["metadata"]["annotations"],
            json!({"reboot-done": "true", "reboot-boot-id": "b2"}),
            "the proven boot stays for the controller to compare with the kubelet's"
        );
    }

    #[test]
    fn a_sentinel_record_is_forgotten_only_while_it_is_the_one_seen() {
        let keys = AnnotationKeys::new("reboot.example.com").unwrap();
        let key = "reboot.example.com/reboot-sentinel";
        let facts = node(&[(key, "b1 command 1")], false);
        let patch = Transition::new(&keys).forget_sentinel(&facts, "b1 command 1");
        let mut obj = json!({"metadata": {"annotations": {key: "b1 command 1",
            "reboot.example.com/reboot-requested-by": "agent: `x`"}}});
        apply(&mut obj, &patch).unwrap();
        assert_eq!(
            obj["metadata"]["annotations"],
            json!({"reboot.example.com/reboot-requested-by": "agent: `x`"})
        );
        for changed in [json!({key: "b2 command 2"}), json!({"other": "x"})] {
            let mut obj = json!({"metadata": {"annotations": changed}});
            assert!(apply(&mut obj, &patch).is_err(), "{obj}");
        }
    }

    #[test]
    fn a_release_drops_the_grant_only_if_it_is_still_the_nodes() {
        let keys = AnnotationKeys::default();
        let facts = node(&[("reboot-grant", "g1"), ("reboot-cordoned", "true")], true);
        let patch = Transition::new(&keys).release(&facts).unwrap();
        let mut obj = json!({"metadata": {"resourceVersion": "42", "annotations": {
            "reboot-grant": "g1", "reboot-cordoned": "true"}}, "spec": {"unschedulable": true}});
        apply(&mut obj, &patch).unwrap();
        assert_eq!(obj["metadata"]["annotations"], json!({}));
        assert_eq!(obj["spec"]["unschedulable"], json!(false));
    }
}
