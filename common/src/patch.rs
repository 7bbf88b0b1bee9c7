//! JSON Patches for every transition of the protocol. Each one `test`s the values it depends
//! on, so a concurrent change (an administrator cancelling, another controller, a stale
//! cache) makes the API server refuse the write instead of the write overwriting the change.

use crate::{
    keys::AnnotationKeys,
    marks::{self, NO_MARKS, PREFER_NO_SCHEDULE, RebootMarks},
    state::{NodeFacts, Phase, Request},
};
use json_patch::{
    AddOperation, Patch, PatchOperation, RemoveOperation, TestOperation,
    jsonptr::{PointerBuf, Token},
};
use serde_json::Value;
use std::collections::BTreeMap;

/// Accumulates operations on one Node.
#[derive(Debug)]
struct Ops {
    ops: Vec<PatchOperation>,
    annotations_exist: bool,
    labels_exist: bool,
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
            labels_exist: node.has_labels,
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

    /// Adds a label the node does not have, tested to be still absent: one that somebody added
    /// since the node was read fails the write instead of being overwritten. (The API server's
    /// `test` of `null` passes only where the key is absent.)
    fn add_label(mut self, key: &str, value: &str) -> Self {
        let label = path(&["metadata", "labels", key]);
        if self.labels_exist {
            self = self.test(label.clone(), Value::Null);
        } else {
            let labels = path(&["metadata", "labels"]);
            self = self
                .test(labels.clone(), Value::Null)
                .add(labels, Value::Object(Default::default()));
            self.labels_exist = true;
        }
        self.add(label, value.into())
    }

    /// Sets a label of the operator's from `was` to `value`, only while it still has `was`.
    fn replace_label(self, key: &str, was: &str, value: &str) -> Self {
        let label = path(&["metadata", "labels", key]);
        self.test(label.clone(), was.into())
            .add(label, value.into())
    }

    /// Writes `key=value` as `write` says; `true` when the label is then the operator's.
    fn write_label(self, write: LabelWrite<'_>, key: &str, value: &str) -> (Self, bool) {
        match write {
            LabelWrite::Add => (self.add_label(key, value), true),
            LabelWrite::Replace { was } => (self.replace_label(key, was, value), true),
            LabelWrite::Leave => (self, false),
        }
    }

    /// Removes a label only while it still has `value`: one that somebody changed is theirs.
    fn remove_label(mut self, key: &str, value: &str) -> Self {
        let label = path(&["metadata", "labels", key]);
        self = self.test(label.clone(), value.into());
        self.ops
            .push(PatchOperation::Remove(RemoveOperation { path: label }));
        self
    }

    fn add_taint(self, node: &NodeFacts, key: &str) -> Self {
        let taint = serde_json::json!({"key": key, "effect": PREFER_NO_SCHEDULE});
        match &node.taints {
            Some(_) => self.add(path(&["spec", "taints", "-"]), taint),
            None => self.add(path(&["spec", "taints"]), Value::Array(vec![taint])),
        }
    }

    /// Removes the taint at `index`, tested to be `key`'s `PreferNoSchedule`: a list that
    /// changed since it was read fails the write, which is then decided again on a fresh copy.
    fn remove_taint(mut self, index: usize, key: &str) -> Self {
        let at = index.to_string();
        self = self
            .test(path(&["spec", "taints", &at, "key"]), key.into())
            .test(
                path(&["spec", "taints", &at, "effect"]),
                PREFER_NO_SCHEDULE.into(),
            );
        let path = path(&["spec", "taints", &at]);
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

/// What the controller may do to set one of its labels on a node: a label that is not its
/// own is the administrator's, never overwritten.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LabelWrite<'a> {
    /// The node has no label of the key: add it.
    Add,
    /// The node's label of the key is the operator's, at `was`: replace it.
    Replace { was: &'a str },
    /// The node already has it at that value, or has somebody else's label of the key.
    Leave,
}

/// How to set `key=value` on `node`, whose label of that key is the operator's only at
/// `ours` (the value it set there itself).
fn label_write<'a>(
    node: &'a NodeFacts,
    key: &str,
    value: &str,
    ours: Option<&str>,
) -> LabelWrite<'a> {
    match node.labels.get(key) {
        None => LabelWrite::Add,
        Some(was) if was != value && Some(was.as_str()) == ours => LabelWrite::Replace { was },
        Some(_) => LabelWrite::Leave,
    }
}

/// The protocol's transitions, as patches of one node.
#[derive(Debug, Clone, Copy)]
pub struct Transition<'a> {
    keys: &'a AnnotationKeys,
    marks: &'a RebootMarks,
}

/// The index of `key`'s `PreferNoSchedule` taint on the node, if it has one.
fn taint_index(node: &NodeFacts, key: &str) -> Option<usize> {
    node.taints
        .as_ref()?
        .iter()
        .position(|(k, effect)| k == key && effect == PREFER_NO_SCHEDULE)
}

impl<'a> Transition<'a> {
    pub fn new(keys: &'a AnnotationKeys) -> Self {
        Self {
            keys,
            marks: &NO_MARKS,
        }
    }

    /// The controller's transitions, which also set and remove `marks` around a reboot.
    pub fn with_marks(self, marks: &'a RebootMarks) -> Self {
        Self { marks, ..self }
    }

    /// At a grant: the pre-reboot labels the node does not have yet, and the record of those
    /// set. A label of the key already there is left as it is and not recorded (somebody
    /// else's, such as kubeadm's `node.kubernetes.io/exclude-from-external-load-balancers`),
    /// unless it is the post-reboot label of that key that an earlier reboot left (kured's
    /// pair, `lb=out` for the reboot and `lb=in` after it): the operator's own, replaced.
    fn set_pre_labels(&self, node: &NodeFacts, mut ops: Ops) -> Ops {
        let (mut set, mut replaced) = (BTreeMap::new(), BTreeMap::new());
        for (key, value) in &self.marks.pre_reboot_labels {
            let ours = self.marks.post_reboot_labels.get(key).map(String::as_str);
            let write = label_write(node, key, value, ours);
            if let LabelWrite::Replace { was } = write {
                replaced.insert(key.clone(), was.to_owned());
            }
            let written;
            (ops, written) = ops.write_label(write, key, value);
            if written {
                set.insert(key.clone(), value.clone());
            }
        }
        if set.is_empty() {
            return ops;
        }
        ops.set_annotation(&self.keys.labelled, &marks::record(&set, &replaced))
    }

    /// At a completion: the post-reboot labels, where the key is free or holds the operator's
    /// pre-reboot label (`recorded`); somebody else's label of the key stays as it is.
    fn set_post_labels(
        &self,
        node: &NodeFacts,
        mut ops: Ops,
        recorded: &BTreeMap<String, String>,
    ) -> Ops {
        for (key, value) in &self.marks.post_reboot_labels {
            let ours = recorded.get(key).map(String::as_str);
            (ops, _) = ops.write_label(label_write(node, key, value, ours), key, value);
        }
        ops
    }

    /// The labels recorded at the grant (`recorded`) go, unless the post-reboot labels set
    /// them anew (`replaced`); one that replaced an earlier post-reboot label gives that label
    /// back; one whose value somebody changed since stays. Each write tests the value recorded.
    fn remove_pre_labels(
        &self,
        node: &NodeFacts,
        mut ops: Ops,
        recorded: &BTreeMap<String, String>,
        replaced: &BTreeMap<String, String>,
    ) -> Ops {
        let Some(record) = node.protocol(self.keys).labelled else {
            return ops;
        };
        // The post-reboot labels a grant replaced: put back when the reboot is given back.
        let put_back = marks::recorded_replaced(&record);
        for (key, value) in recorded {
            if replaced.contains_key(key) || node.labels.get(key) != Some(value) {
                continue;
            }
            ops = match put_back.get(key) {
                Some(was) => ops.replace_label(key, value, was),
                None => ops.remove_label(key, value),
            };
        }
        ops.test_annotation(&self.keys.labelled, &record)
            .remove_annotation(&self.keys.labelled)
    }

    /// The labels the node's record says the operator set at its grant.
    fn recorded_labels(&self, node: &NodeFacts) -> BTreeMap<String, String> {
        node.protocol(self.keys)
            .labelled
            .map(|record| marks::recorded(&record))
            .unwrap_or_default()
    }

    /// At a claim: the autoscalers' annotations against scale-down that the node does not
    /// have, and the record of those set. A key already there, whatever its value, is the
    /// administrator's: left as it is, not recorded.
    fn protect_from_scale_down(&self, node: &NodeFacts, mut ops: Ops) -> Ops {
        let mut set = Vec::new();
        for (key, value) in marks::SCALE_DOWN_PROTECTION {
            if !node.annotations.contains_key(key) {
                ops = ops.set_annotation(key, value);
                set.push(key);
            }
        }
        if set.is_empty() {
            return ops;
        }
        ops.set_annotation(&self.keys.protected, &marks::protection_record(set))
    }

    /// The node is back or given back: the annotations its record says the operator set go,
    /// each only while it still has the operator's value (one somebody changed since is theirs
    /// now), and the record with them.
    fn unprotect(&self, node: &NodeFacts, mut ops: Ops) -> Ops {
        let Some(record) = node.protocol(self.keys).protected else {
            return ops;
        };
        for (key, value) in marks::recorded_protection(&record) {
            if node.annotations.get(key).map(String::as_str) == Some(value) {
                ops = ops.test_annotation(key, value).remove_annotation(key);
            }
        }
        ops.test_annotation(&self.keys.protected, &record)
            .remove_annotation(&self.keys.protected)
    }

    /// Our waiting taint goes (with its marker), if the node has it.
    fn remove_waiting_taint(&self, node: &NodeFacts, mut ops: Ops) -> Ops {
        let Some(record) = node.protocol(self.keys).tainted else {
            return ops;
        };
        let (key, _) = marks::recorded_taint(&record);
        if let Some(index) = taint_index(node, key) {
            ops = ops.remove_taint(index, key);
        }
        ops.test_annotation(&self.keys.tainted, &record)
            .remove_annotation(&self.keys.tainted)
    }

    /// Controller, a node that no longer waits for a slot of this pool (its request is no
    /// longer one, it is opted out, or it left the pool): the waiting taint the operator put
    /// on it goes, with its record, while the node is as it was read. `None` when it has none
    /// (an administrator's taint of the same key has no record, and stays theirs).
    pub fn untaint(&self, node: &NodeFacts) -> Option<Patch> {
        node.protocol(self.keys).tainted?;
        let ops = Ops::on(node).test_unchanged(node);
        Some(self.remove_waiting_taint(node, ops).build())
    }

    /// Controller, a node that waits for its slot: the `PreferNoSchedule` taint, so that new
    /// pods avoid it. `None` when the marks have no taint, the node has one of that key
    /// already (an administrator's stays theirs), or ours is there.
    pub fn taint_waiting(&self, node: &NodeFacts) -> Option<Patch> {
        let key = self.marks.prefer_no_schedule_taint.as_deref()?;
        let state = node.protocol(self.keys);
        if state.request != Request::Needed
            || state.tainted.is_some()
            || taint_index(node, key).is_some()
        {
            return None;
        }
        let ops = Ops::on(node)
            .test_unchanged(node)
            .test_annotation(&self.keys.needed, "true")
            .add_taint(node, key)
            .set_annotation(
                &self.keys.tainted,
                &marks::taint_record(key, &self.marks.ledger),
            );
        Some(ops.build())
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

    /// The format version goes with the grant it was written with: a node back at rest carries
    /// none, so an operator of any version reads it.
    fn forget_format(&self, node: &NodeFacts, ops: Ops) -> Ops {
        match node.annotations.get(&self.keys.protocol_version) {
            Some(version) => ops
                .test_annotation(&self.keys.protocol_version, version)
                .remove_annotation(&self.keys.protocol_version),
            None => ops,
        }
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
            .set_annotation(&self.keys.grant, grant)
            .set_annotation(&self.keys.protocol_version, &crate::format::current());
        let ops = self.set_pre_labels(node, self.cordon_ops(node, ops));
        let ops = self.protect_from_scale_down(node, ops);
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

    /// The agent's writes: each holds only while the node is still the version the agent
    /// decided on, so a change since its read (an administrator giving the node up, say)
    /// fails the write, and the agent decides again on a fresh copy.
    fn agents(node: &NodeFacts) -> Ops {
        Ops::on(node).test_unchanged(node)
    }

    /// Agent, on `reboot-now`: record the boot id the reboot starts from.
    pub fn begin_reboot(&self, node: &NodeFacts, boot_id: &str) -> Patch {
        Self::agents(node)
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
        Self::agents(node)
            .set_annotation(&self.keys.needed, "true")
            .set_annotation(&self.keys.requested_by, requested_by)
            .set_annotation(&self.keys.sentinel, sentinel_record)
            .build()
    }

    /// Agent, the sentinel a past request was made for is gone: forget it, so that a sentinel
    /// that comes back, even the same, is a new need. Holds only while the record is still
    /// `recorded`; `reboot-requested-by` stays, as the history of the last request.
    pub fn forget_sentinel(&self, node: &NodeFacts, recorded: &str) -> Patch {
        Self::agents(node)
            .test_annotation(&self.keys.sentinel, recorded)
            .remove_annotation(&self.keys.sentinel)
            .build()
    }

    /// Agent, `reboot-in-progress` without a recorded boot id (a hand edit): record the current
    /// one while the reboot is still in progress, so that the next start can prove or retry it.
    pub fn record_boot_id(&self, node: &NodeFacts, boot_id: &str) -> Patch {
        Self::agents(node)
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
        let mut ops = Self::agents(node).test_annotation(&self.keys.in_progress, "true");
        if let Some(recorded) = recorded_boot_id {
            ops = ops.test_annotation(&self.keys.boot_id, recorded);
        }
        ops.remove_annotation(&self.keys.in_progress)
            .set_annotation(&self.keys.boot_id, new_boot_id)
            .set_annotation(&self.keys.done, "true")
            .build()
    }

    /// Controller, reboot proven and the kubelet reports the new boot: uncordon what we
    /// cordoned, record the time and the grant that ended in this reboot, drop the grant.
    /// Proven by the agent (`reboot-done`), or by the kubelet alone (`reboot-in-progress` from
    /// another boot): then the write holds only while the kubelet still reports the boot it was
    /// decided on, and the agent that starts later finds nothing to do.
    pub fn complete(&self, node: &NodeFacts, grant: Option<&str>, completed_at: &str) -> Patch {
        let state = node.protocol(self.keys);
        let mut ops = Ops::on(node);
        let (phase_key, boot_id) = match &state.phase {
            Phase::InProgress { boot_id } => {
                let kubelets = node.boot_id.as_deref().unwrap_or_default();
                ops = ops.test(path(&["status", "nodeInfo", "bootID"]), kubelets.into());
                (&self.keys.in_progress, boot_id)
            }
            Phase::Done { boot_id } => (&self.keys.done, boot_id),
            Phase::Idle | Phase::RebootNow => (&self.keys.done, &None),
        };
        ops = ops.test_annotation(phase_key, "true");
        if let Some(recorded) = boot_id {
            ops = ops
                .test_annotation(&self.keys.boot_id, recorded)
                .remove_annotation(&self.keys.boot_id);
        }
        ops = self
            .forget_approval(node, ops)
            .remove_annotation(phase_key)
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
        ops = self.forget_format(node, ops);
        // The reboot is done: the failed drains of its request are history.
        if let Some(failures) = &state.drain_failures {
            ops = ops
                .test_annotation(&self.keys.drain_failures, failures)
                .remove_annotation(&self.keys.drain_failures);
        }
        let recorded = self.recorded_labels(node);
        ops = self.remove_pre_labels(node, ops, &recorded, &self.marks.post_reboot_labels);
        ops = self.set_post_labels(node, ops, &recorded);
        ops = self.remove_waiting_taint(node, ops);
        ops = self.unprotect(node, ops);
        self.uncordon_ops(node, ops).build()
    }

    /// Controller, request withdrawn before `reboot-now`, drain given up, or a leftover: give
    /// the node back as it was, dropping `grant` (the node's, when `None`). `None` when there
    /// is nothing to undo.
    pub fn release(&self, node: &NodeFacts) -> Option<Patch> {
        self.release_ops(node, false).map(Ops::build)
    }

    /// Controller, the drain of the node's grant failed: give it back as [`Self::release`]
    /// does, and count the failure in `reboot-drain-failures` with the pods that blocked it
    /// (`blocking`, each with why), all while the node is as it was read. With `keep_cordon_at`
    /// (`--drain-attempts` with `--keep-set-aside-cordoned`), a count that reaches it sets the
    /// node aside cordoned: the operator's cordon and its marker stay.
    pub fn release_failed_drain(
        &self,
        node: &NodeFacts,
        blocking: &[String],
        keep_cordon_at: Option<u32>,
    ) -> Patch {
        let recorded = node.protocol(self.keys).drain_failures;
        let failures = crate::drain_failures::DrainFailures::next(recorded.as_deref(), blocking);
        let keep_cordon = keep_cordon_at.is_some_and(|at| failures.count >= at);
        self.release_ops(node, keep_cordon)
            .unwrap_or_else(|| Ops::on(node).test_unchanged(node))
            .set_annotation(&self.keys.drain_failures, &failures.to_value())
            .build()
    }

    fn release_ops(&self, node: &NodeFacts, keep_cordon: bool) -> Option<Ops> {
        let state = node.protocol(self.keys);
        // A node whose request stands waits again: its waiting taint, and the count of its
        // failed drains, stay.
        let withdrawn = state.request != Request::Needed;
        let untaint = state.tainted.is_some() && withdrawn;
        let forget_failures = state.drain_failures.is_some() && withdrawn;
        if !state.cordoned_by_operator
            && state.grant.is_none()
            && state.approved_at.is_none()
            && state.labelled.is_none()
            && state.protected.is_none()
            && !untaint
            && !forget_failures
        {
            return None;
        }
        let mut ops = self.forget_approval(node, Ops::on(node).test_unchanged(node));
        if let Some(grant) = &state.grant {
            ops = ops
                .test_annotation(&self.keys.grant, grant)
                .remove_annotation(&self.keys.grant);
        }
        ops = self.forget_format(node, ops);
        ops = self.remove_pre_labels(node, ops, &self.recorded_labels(node), &BTreeMap::new());
        if untaint {
            ops = self.remove_waiting_taint(node, ops);
        }
        if forget_failures {
            ops = ops.remove_annotation(&self.keys.drain_failures);
        }
        ops = self.unprotect(node, ops);
        if keep_cordon {
            return Some(ops);
        }
        Some(self.uncordon_ops(node, ops))
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
            &self.keys.protocol_version,
            &self.keys.drain_failures,
        ] {
            if let Some(value) = node.annotations.get(key) {
                ops = ops.test_annotation(key, value).remove_annotation(key);
            }
        }
        ops = self.remove_pre_labels(node, ops, &self.recorded_labels(node), &BTreeMap::new());
        ops = self.remove_waiting_taint(node, ops);
        ops = self.unprotect(node, ops);
        Some(self.uncordon_ops(node, ops).build())
    }

    /// `kubectl reboot abandon`, or the controller after `--give-up-after`: the request to give
    /// the node up (`reboot-abandon`, who and why), written only while the node is the version
    /// read, so that a node that finished its reboot meanwhile is decided again. The
    /// controller then clears the protocol and releases the slot ([`Self::abandon`]).
    pub fn request_abandon(&self, node: &NodeFacts, request: &crate::abandon::Abandon) -> Patch {
        Ops::on(node)
            .test_unchanged(node)
            .set_annotation(&self.keys.abandon, &request.to_value())
            .build()
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
    use crate::test_util::NodeBuilder;
    use serde_json::json;

    /// A Ready node `n1` at version 42 with these annotations.
    fn node(annotations: &[(&str, &str)], unschedulable: bool) -> NodeFacts {
        NodeBuilder::new("n1")
            .resource_version("42")
            .annotations(annotations)
            .unschedulable(unschedulable)
            .facts()
    }

    /// As the API server applies it (a `test` of `null` passes for an absent key).
    fn apply(node_json: &mut Value, patch: &Patch) -> Result<(), String> {
        crate::test_util::apply_patch(node_json, patch)
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
                "reboot-protocol-version": "1", "reboot-approved-at": "t0",
                "cluster-autoscaler.kubernetes.io/scale-down-disabled": "true",
                "karpenter.sh/do-not-disrupt": "true",
                "reboot-protected":
                    "cluster-autoscaler.kubernetes.io/scale-down-disabled,karpenter.sh/do-not-disrupt"}},
                "spec": {"unschedulable": true}})
        );
    }

    /// From the claim until the node is back or given back it carries the autoscalers'
    /// annotations against scale-down; one the administrator set (any value) is theirs: not
    /// set, not recorded, not removed. One of ours somebody changed since stays theirs.
    #[test]
    fn the_scale_down_protection_is_ours_only_where_we_set_it() {
        let keys = AnnotationKeys::default();
        let t = Transition::new(&keys);
        const CA: &str = "cluster-autoscaler.kubernetes.io/scale-down-disabled";
        const KARPENTER: &str = "karpenter.sh/do-not-disrupt";
        let annotations = |obj: &Value| obj["metadata"]["annotations"].clone();
        for ending in ["complete", "release", "abandon"] {
            // The administrator's own Karpenter annotation, typed `True`.
            let mut obj = json!({"metadata": {"resourceVersion": "42", "annotations": {
                "reboot-needed": "true", KARPENTER: "True"}}, "spec": {}});
            let facts = crate::test_util::facts_of_json(&obj);
            apply(&mut obj, &t.claim(&facts, "g1", "42", false, "t0")).unwrap();
            let claimed = annotations(&obj);
            assert_eq!(claimed[CA], "true", "{ending}");
            assert_eq!(claimed[KARPENTER], "True", "{ending}: the administrator's");
            assert_eq!(claimed["reboot-protected"], CA, "{ending}");
            let facts = crate::test_util::facts_of_json(&obj);
            let patch = match ending {
                "complete" => {
                    obj["metadata"]["annotations"]["reboot-done"] = "true".into();
                    let facts = crate::test_util::facts_of_json(&obj);
                    t.complete(&facts, Some("g1"), "t1")
                }
                "release" => t.release(&facts).expect("a grant to give back"),
                _ => {
                    obj["metadata"]["annotations"]["reboot-abandon"] = "x".into();
                    let facts = crate::test_util::facts_of_json(&obj);
                    t.abandon(&facts).expect("a protocol to clear")
                }
            };
            apply(&mut obj, &patch).unwrap();
            let after = annotations(&obj);
            assert!(after.get(CA).is_none(), "{ending}: ours removed: {after}");
            assert!(after.get("reboot-protected").is_none(), "{ending}: {after}");
            assert_eq!(
                after[KARPENTER], "True",
                "{ending}: the administrator's kept"
            );
        }
        // Ours, changed by somebody since (`false`): theirs now, it stays.
        let mut obj = json!({"metadata": {"resourceVersion": "42", "annotations": {
            "reboot-needed": "true"}}, "spec": {}});
        let facts = crate::test_util::facts_of_json(&obj);
        apply(&mut obj, &t.claim(&facts, "g1", "42", false, "t0")).unwrap();
        obj["metadata"]["annotations"][CA] = "false".into();
        let facts = crate::test_util::facts_of_json(&obj);
        apply(&mut obj, &t.release(&facts).unwrap()).unwrap();
        let after = annotations(&obj);
        assert_eq!(after[CA], "false", "{after}");
        assert!(after.get(KARPENTER).is_none() && after.get("reboot-protected").is_none());
    }

    /// The format version goes with the grant: a node back at rest, or given back, carries
    /// none (so any operator reads it); one written before versions existed needs no removal.
    #[test]
    fn the_format_version_leaves_with_the_grant() {
        let keys = AnnotationKeys::default();
        let t = Transition::new(&keys);
        let done = [
            ("reboot-done", "true"),
            ("reboot-boot-id", "b2"),
            ("reboot-grant", "g1"),
            ("reboot-protocol-version", "1"),
        ];
        let given_back = [
            ("reboot-grant", "g1"),
            ("reboot-cordoned", "true"),
            ("reboot-protocol-version", "1"),
        ];
        for (pairs, write) in [
            (&done[..], t.complete(&node(&done, true), Some("g1"), "t1")),
            (
                &given_back[..],
                t.release(&node(&given_back, true)).unwrap(),
            ),
            (
                &given_back[..2],
                t.release(&node(&given_back[..2], true)).unwrap(),
            ),
        ] {
            let annotations: serde_json::Map<String, Value> = pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), json!(v)))
                .collect();
            let mut obj = json!({"metadata": {"resourceVersion": "42", "annotations": annotations},
                "spec": {"unschedulable": true}});
            apply(&mut obj, &write).unwrap();
            let left = &obj["metadata"]["annotations"];
            assert!(left.get("reboot-protocol-version").is_none(), "{left}");
            assert!(left.get("reboot-grant").is_none(), "{left}");
        }
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
        let mut obj = json!({"metadata": {"resourceVersion": "42",
            "annotations": {"reboot.example.com/reboot-now": "true"}}});
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

    /// Completed from the kubelet's report alone: `reboot-in-progress` and the boot id the
    /// agent recorded go, and the write holds only while the node is still in progress from
    /// that boot and its kubelet still reports the boot the completion was decided on.
    #[test]
    fn completion_from_the_kubelets_report_holds_only_on_the_boot_it_was_decided_on() {
        let keys = AnnotationKeys::default();
        let t = Transition::new(&keys);
        let in_progress = [
            ("reboot-in-progress", "true"),
            ("reboot-boot-id", "b1"),
            ("reboot-cordoned", "true"),
            ("reboot-grant", "g1"),
        ];
        let back = NodeBuilder::new("n1")
            .annotations(&in_progress)
            .unschedulable(true)
            .boot_id("b2");
        let patch = t.complete(&back.facts(), Some("g1"), "t1");
        let mut obj = back.json();
        apply(&mut obj, &patch).unwrap();
        assert_eq!(
            obj["metadata"]["annotations"],
            json!({"reboot-last-completed": "t1", "reboot-last-grant": "g1"})
        );
        assert_eq!(obj["spec"]["unschedulable"], json!(false));

        let mut rebooted_again = NodeBuilder::new("n1")
            .annotations(&in_progress)
            .unschedulable(true)
            .boot_id("b3")
            .json();
        assert!(apply(&mut rebooted_again, &patch).is_err());
        let mut proved_meanwhile = NodeBuilder::new("n1")
            .annotations(&[
                ("reboot-done", "true"),
                ("reboot-boot-id", "b2"),
                ("reboot-cordoned", "true"),
                ("reboot-grant", "g1"),
            ])
            .unschedulable(true)
            .boot_id("b2")
            .json();
        assert!(apply(&mut proved_meanwhile, &patch).is_err());
    }

    #[test]
    fn records_the_boot_id_only_while_in_progress() {
        let keys = AnnotationKeys::new("reboot.example.com").unwrap();
        let facts = node(&[("reboot.example.com/reboot-in-progress", "true")], false);
        let patch = Transition::new(&keys).record_boot_id(&facts, "b2");
        let mut obj = json!({"metadata": {"resourceVersion": "42", "annotations": {
            "reboot.example.com/reboot-in-progress": "true"}}});
        apply(&mut obj, &patch).unwrap();
        assert_eq!(
            obj["metadata"]["annotations"]["reboot.example.com/reboot-boot-id"],
            json!("b2")
        );
        let mut finished =
            json!({"metadata": {"resourceVersion": "42", "annotations": {"other": "x"}}});
        assert!(apply(&mut finished, &patch).is_err());
    }

    #[test]
    fn finishing_checks_the_recorded_boot_id() {
        let keys = AnnotationKeys::default();
        let facts = node(
            &[("reboot-in-progress", "true"), ("reboot-boot-id", "b1")],
            false,
        );
        let mut obj = json!({"metadata": {"resourceVersion": "42",
            "annotations": {"reboot-in-progress": "true", "reboot-boot-id": "other"}}});
        let patch = Transition::new(&keys).finish_reboot(&facts, Some("b1"), "b2");
        assert!(apply(&mut obj, &patch).is_err());
        let mut obj = json!({"metadata": {"resourceVersion": "42",
            "annotations": {"reboot-in-progress": "true", "reboot-boot-id": "b1"}}});
        apply(&mut obj, &patch).unwrap();
        assert_eq!(
            obj["metadata"]["annotations"],
            json!({"reboot-done": "true", "reboot-boot-id": "b2"}),
            "the proven boot stays for the controller to compare with the kubelet's"
        );
    }

    /// The agent decides on the copy of its node it read: each of its writes holds only while
    /// the node is still that version. A give-up (`reboot-abandon`) that landed in between
    /// fails the write, and the agent decides again on a fresh copy (where it does nothing).
    #[test]
    fn the_agents_writes_hold_only_on_the_version_they_were_decided_on() {
        let keys = AnnotationKeys::default();
        let t = Transition::new(&keys);
        type Write<'a> = Box<dyn Fn(&NodeFacts) -> Patch + 'a>;
        let writes: [(&[(&str, &str)], Write); 5] = [
            (
                &[("reboot-now", "true")],
                Box::new(|f| t.begin_reboot(f, "b1")),
            ),
            (
                &[("reboot-in-progress", "true")],
                Box::new(|f| t.record_boot_id(f, "b1")),
            ),
            (
                &[("reboot-in-progress", "true"), ("reboot-boot-id", "b1")],
                Box::new(|f| t.finish_reboot(f, Some("b1"), "b2")),
            ),
            (&[], Box::new(|f| t.request(f, "agent: x", "b1 file 1"))),
            (
                &[("reboot-sentinel", "b1 file 1")],
                Box::new(|f| t.forget_sentinel(f, "b1 file 1")),
            ),
        ];
        for (annotations, write) in writes {
            let patch = write(&node(annotations, false));
            let as_read: serde_json::Map<String, Value> = annotations
                .iter()
                .map(|(k, v)| ((*k).to_owned(), json!(v)))
                .collect();
            let mut read = json!({"metadata": {"resourceVersion": "42", "annotations": as_read}});
            apply(&mut read, &patch).unwrap_or_else(|e| panic!("{annotations:?}: {e}"));
            let mut given_up = json!({"metadata": {"resourceVersion": "43",
                "annotations": as_read}});
            given_up["metadata"]["annotations"]["reboot-abandon"] = json!("by alice");
            assert!(
                apply(&mut given_up, &patch).is_err(),
                "{annotations:?}: written on a node given up since it was read"
            );
        }
    }

    #[test]
    fn a_sentinel_record_is_forgotten_only_while_it_is_the_one_seen() {
        let keys = AnnotationKeys::new("reboot.example.com").unwrap();
        let key = "reboot.example.com/reboot-sentinel";
        let facts = node(&[(key, "b1 command 1")], false);
        let patch = Transition::new(&keys).forget_sentinel(&facts, "b1 command 1");
        let mut obj = json!({"metadata": {"resourceVersion": "42", "annotations": {
            key: "b1 command 1", "reboot.example.com/reboot-requested-by": "agent: `x`"}}});
        apply(&mut obj, &patch).unwrap();
        assert_eq!(
            obj["metadata"]["annotations"],
            json!({"reboot.example.com/reboot-requested-by": "agent: `x`"})
        );
        for changed in [json!({key: "b2 command 2"}), json!({"other": "x"})] {
            let mut obj = json!({"metadata": {"resourceVersion": "42", "annotations": changed}});
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

    fn marks() -> RebootMarks {
        let labels = |pairs: &[(&str, &str)]| {
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect()
        };
        RebootMarks {
            pre_reboot_labels: labels(&[("ex.com/rebooting", "true"), ("lb", "out")]),
            post_reboot_labels: labels(&[("lb", "in")]),
            prefer_no_schedule_taint: Some("ex.com/reboot-pending".into()),
            ledger: "ns/slots".into(),
        }
    }

    use crate::test_util::facts_of_json as facts_of;

    /// Applies `patch(facts of obj)` to `obj`, bumping its resourceVersion as the API would.
    fn step(obj: &mut Value, patch: impl Fn(&NodeFacts) -> Option<Patch>) {
        let patch = patch(&facts_of(obj)).expect("a write");
        apply(obj, &patch).unwrap();
        let rv: u64 = obj["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap();
        obj["metadata"]["resourceVersion"] = (rv + 1).to_string().into();
    }

    #[test]
    fn labels_and_the_taint_go_on_around_a_reboot_and_come_off_as_they_were_set() {
        let keys = AnnotationKeys::default();
        let marks = marks();
        let t = Transition::new(&keys).with_marks(&marks);
        let mut obj = json!({"metadata": {"name": "n1", "resourceVersion": "1",
            "labels": {"kubernetes.io/hostname": "n1"}, "annotations": {"reboot-needed": "true"}},
            "spec": {"taints": [{"key": "other", "effect": "NoSchedule"}]}});
        step(&mut obj, |f| t.taint_waiting(f));
        assert_eq!(
            obj["spec"]["taints"][1],
            json!({"key": "ex.com/reboot-pending", "effect": "PreferNoSchedule"})
        );
        assert!(t.taint_waiting(&facts_of(&obj)).is_none(), "tainted once");
        step(&mut obj, |f| Some(t.claim(f, "g1", "2", true, "t0")));
        assert_eq!(obj["metadata"]["labels"]["ex.com/rebooting"], json!("true"));
        assert_eq!(obj["metadata"]["labels"]["lb"], json!("out"));
        // Somebody else took the node taint list's first entry away meanwhile: the index moves.
        obj["spec"]["taints"].as_array_mut().unwrap().remove(0);
        for (k, v) in [
            ("reboot-now", None),
            ("reboot-done", Some("true")),
            ("reboot-boot-id", Some("b1")),
        ] {
            let annotations = obj["metadata"]["annotations"].as_object_mut().unwrap();
            match v {
                Some(v) => annotations.insert(k.into(), v.into()),
                None => annotations.remove(k),
            };
        }
        step(&mut obj, |f| Some(t.complete(f, Some("g1"), "t1")));
        assert_eq!(
            obj["metadata"]["labels"],
            json!({"kubernetes.io/hostname": "n1", "lb": "in"}),
            "the pre-reboot labels replaced or removed"
        );
        assert_eq!(obj["spec"]["taints"], json!([]));
        let annotations = obj["metadata"]["annotations"].as_object().unwrap();
        assert!(
            !annotations.contains_key("reboot-labelled")
                && !annotations.contains_key("reboot-tainted")
        );
    }

    #[test]
    fn a_release_removes_what_was_set_but_a_waiting_node_keeps_its_taint() {
        let keys = AnnotationKeys::default();
        let marks = marks();
        let t = Transition::new(&keys).with_marks(&marks);
        let mut obj = json!({"metadata": {"name": "n1", "resourceVersion": "1",
            "annotations": {"reboot-needed": "true"}}, "spec": {}});
        step(&mut obj, |f| t.taint_waiting(f));
        assert_eq!(
            obj["spec"]["taints"][0]["key"],
            json!("ex.com/reboot-pending")
        );
        step(&mut obj, |f| Some(t.claim(f, "g1", "2", false, "t0")));
        // Somebody changed one of our labels: it is theirs now.
        obj["metadata"]["labels"]["lb"] = "manual".into();
        // The drain failed: the grant goes, the request and its taint stay.
        step(&mut obj, |f| t.release(f));
        assert_eq!(obj["metadata"]["labels"], json!({"lb": "manual"}));
        assert_eq!(obj["spec"]["taints"].as_array().unwrap().len(), 1);
        // Cancelled: the taint goes too.
        obj["metadata"]["annotations"]
            .as_object_mut()
            .unwrap()
            .remove("reboot-needed");
        step(&mut obj, |f| t.release(f));
        assert_eq!(obj["spec"]["taints"], json!([]));
        assert_eq!(obj["metadata"]["annotations"], json!({}));
        assert!(t.release(&facts_of(&obj)).is_none(), "nothing left to undo");
    }

    #[test]
    fn an_administrators_taint_of_the_same_key_is_left_alone() {
        let keys = AnnotationKeys::default();
        let marks = marks();
        let t = Transition::new(&keys).with_marks(&marks);
        let obj = json!({"metadata": {"name": "n1", "resourceVersion": "1",
            "annotations": {"reboot-needed": "true"}},
            "spec": {"taints": [{"key": "ex.com/reboot-pending", "effect": "PreferNoSchedule"}]}});
        assert!(t.taint_waiting(&facts_of(&obj)).is_none());
        let without = Transition::new(&keys);
        let obj = json!({"metadata": {"name": "n1", "resourceVersion": "1",
            "annotations": {"reboot-needed": "true"}}, "spec": {}});
        assert!(
            without.taint_waiting(&facts_of(&obj)).is_none(),
            "no taint unless asked"
        );
    }

    #[test]
    fn a_node_that_stops_waiting_loses_the_operators_taint_only() {
        let keys = AnnotationKeys::default();
        let marks = marks();
        let t = Transition::new(&keys).with_marks(&marks);
        let mut obj = json!({"metadata": {"name": "n1", "resourceVersion": "1",
            "annotations": {"reboot-needed": "true"}},
            "spec": {"taints": [{"key": "other", "effect": "NoSchedule"}]}});
        step(&mut obj, |f| t.taint_waiting(f));
        assert_eq!(
            obj["metadata"]["annotations"]["reboot-tainted"],
            json!("ex.com/reboot-pending ns/slots"),
            "the record names the ledger that put it there"
        );
        let stale = t.untaint(&facts_of(&obj)).expect("a write");
        step(&mut obj, |f| t.untaint(f));
        assert_eq!(
            obj["spec"]["taints"],
            json!([{"key": "other", "effect": "NoSchedule"}])
        );
        assert_eq!(
            obj["metadata"]["annotations"],
            json!({"reboot-needed": "true"})
        );
        assert!(t.untaint(&facts_of(&obj)).is_none(), "nothing left to undo");
        assert!(apply(&mut obj, &stale).is_err(), "tests the node's version");
        // The administrator's taint of that key has no record: theirs.
        let theirs = json!({"metadata": {"name": "n1", "resourceVersion": "1"},
            "spec": {"taints": [{"key": "ex.com/reboot-pending", "effect": "PreferNoSchedule"}]}});
        assert!(t.untaint(&facts_of(&theirs)).is_none());
    }

    #[test]
    fn a_node_given_up_loses_the_labels_and_the_taint_the_operator_set() {
        let keys = AnnotationKeys::default();
        let marks = marks();
        let t = Transition::new(&keys).with_marks(&marks);
        let mut obj = json!({"metadata": {"name": "n1", "resourceVersion": "1",
            "annotations": {"reboot-needed": "true"}}, "spec": {}});
        step(&mut obj, |f| t.taint_waiting(f));
        step(&mut obj, |f| Some(t.claim(f, "g1", "2", true, "t0")));
        obj["metadata"]["annotations"]["reboot-abandon"] = "by admin".into();
        step(&mut obj, |f| t.abandon(f));
        assert_eq!(obj["metadata"]["labels"], json!({}));
        assert_eq!(obj["spec"]["taints"], json!([]));
        assert_eq!(
            obj["metadata"]["annotations"],
            json!({"reboot-abandon": "by admin"})
        );
        assert!(t.abandon(&facts_of(&obj)).is_none(), "nothing left to undo");
    }

    /// The pre-reboot labels' keys already on the node (an administrator's: kubeadm's
    /// `node.kubernetes.io/exclude-from-external-load-balancers` is the usual case), one at the
    /// value the marks set and one at another, which is not the post-reboot label's either.
    fn labelled_by_the_administrator() -> Value {
        json!({"metadata": {"name": "n1", "resourceVersion": "1",
            "labels": {"ex.com/rebooting": "true", "lb": "admin"},
            "annotations": {"reboot-needed": "true"}}, "spec": {}})
    }

    /// `obj`, told to reboot and back from it: as the agent leaves it for the completion.
    fn rebooted(obj: &mut Value) {
        let annotations = obj["metadata"]["annotations"].as_object_mut().unwrap();
        annotations.remove("reboot-now");
        annotations.insert("reboot-done".into(), "true".into());
        annotations.insert("reboot-boot-id".into(), "b1".into());
    }

    #[test]
    fn labels_the_node_already_has_are_left_as_they_are_and_not_recorded() {
        let keys = AnnotationKeys::default();
        let marks = marks();
        let t = Transition::new(&keys).with_marks(&marks);
        let admins = labelled_by_the_administrator()["metadata"]["labels"].clone();
        let mut obj = labelled_by_the_administrator();
        step(&mut obj, |f| Some(t.claim(f, "g1", "1", true, "t0")));
        assert_eq!(obj["metadata"]["labels"], admins, "claimed");
        assert!(
            annotation(&obj, "reboot-labelled").is_none(),
            "nothing recorded as the operator's: {obj}"
        );
        rebooted(&mut obj);
        step(&mut obj, |f| Some(t.complete(f, Some("g1"), "t1")));
        assert_eq!(obj["metadata"]["labels"], admins, "completed");

        // Given back before the reboot (a cancel, a drain timeout, a window that closed), or
        // given up: the same.
        for given_up in [false, true] {
            let mut obj = labelled_by_the_administrator();
            step(&mut obj, |f| Some(t.claim(f, "g1", "1", false, "t0")));
            if given_up {
                obj["metadata"]["annotations"]["reboot-abandon"] = "by admin".into();
                step(&mut obj, |f| t.abandon(f));
            } else {
                step(&mut obj, |f| t.release(f));
            }
            assert_eq!(obj["metadata"]["labels"], admins, "given back: {obj}");
        }
    }

    #[test]
    fn only_the_labels_the_node_did_not_have_are_set_and_recorded() {
        let keys = AnnotationKeys::default();
        let marks = marks();
        let t = Transition::new(&keys).with_marks(&marks);
        let mut obj = json!({"metadata": {"name": "n1", "resourceVersion": "1",
            "labels": {"lb": ""}, "annotations": {"reboot-needed": "true"}}, "spec": {}});
        step(&mut obj, |f| Some(t.claim(f, "g1", "1", true, "t0")));
        assert_eq!(
            obj["metadata"]["labels"],
            json!({"lb": "", "ex.com/rebooting": "true"})
        );
        assert_eq!(
            annotation(&obj, "reboot-labelled").as_deref(),
            Some("ex.com/rebooting=true")
        );
        rebooted(&mut obj);
        step(&mut obj, |f| Some(t.complete(f, Some("g1"), "t1")));
        assert_eq!(obj["metadata"]["labels"], json!({"lb": ""}));
    }

    /// kured's pair of labels of one key (`lb=out` for the reboot, `lb=in` after it): the
    /// post-reboot label an earlier reboot left is the operator's, replaced for the next one.
    #[test]
    fn the_post_reboot_label_an_earlier_reboot_left_is_replaced_for_the_next() {
        let keys = AnnotationKeys::default();
        let marks = marks();
        let t = Transition::new(&keys).with_marks(&marks);
        let mut obj = json!({"metadata": {"name": "n1", "resourceVersion": "1",
            "labels": {"lb": "in"}, "annotations": {"reboot-needed": "true"}}, "spec": {}});
        step(&mut obj, |f| Some(t.claim(f, "g1", "1", true, "t0")));
        assert_eq!(
            obj["metadata"]["labels"],
            json!({"lb": "out", "ex.com/rebooting": "true"})
        );
        rebooted(&mut obj);
        step(&mut obj, |f| Some(t.complete(f, Some("g1"), "t1")));
        assert_eq!(obj["metadata"]["labels"], json!({"lb": "in"}));
    }

    /// A reboot given back (released or given up) after its grant replaced the post-reboot
    /// label an earlier reboot left puts that label back: the node is not left with neither.
    #[test]
    fn a_reboot_given_back_puts_back_the_post_reboot_label_its_grant_replaced() {
        let keys = AnnotationKeys::default();
        let marks = marks();
        let t = Transition::new(&keys).with_marks(&marks);
        for given_up in [false, true] {
            let mut obj = json!({"metadata": {"name": "n1", "resourceVersion": "1",
                "labels": {"lb": "in"}, "annotations": {"reboot-needed": "true"}}, "spec": {}});
            step(&mut obj, |f| Some(t.claim(f, "g1", "1", false, "t0")));
            assert_eq!(
                annotation(&obj, "reboot-labelled").as_deref(),
                Some("ex.com/rebooting=true,lb=out/in")
            );
            if given_up {
                obj["metadata"]["annotations"]["reboot-abandon"] = "by admin".into();
                step(&mut obj, |f| t.abandon(f));
            } else {
                step(&mut obj, |f| t.release(f));
            }
            assert_eq!(
                obj["metadata"]["labels"],
                json!({"lb": "in"}),
                "given up: {given_up}"
            );
        }
    }

    /// A label an administrator adds between the controller's read and its write fails the
    /// write (the label is tested absent), rather than being overwritten; a label of ours that
    /// changed since fails its removal (tested at the value recorded).
    #[test]
    fn a_label_that_changed_since_the_read_fails_the_write_instead_of_being_overwritten() {
        let keys = AnnotationKeys::default();
        let marks = marks();
        let t = Transition::new(&keys).with_marks(&marks);
        for labels in [json!({"other": "x"}), Value::Null] {
            let mut read = json!({"metadata": {"name": "n1", "resourceVersion": "1",
                "annotations": {"reboot-needed": "true"}}, "spec": {}});
            if !labels.is_null() {
                read["metadata"]["labels"] = labels;
            }
            let claim = t.claim(&facts_of(&read), "g1", "1", true, "t0");
            let mut now = read.clone();
            now["metadata"]["labels"] = json!({"other": "x", "lb": "admin"});
            assert!(apply(&mut now, &claim).is_err(), "claim over {now}");

            let mut done = read.clone();
            step(&mut done, |f| Some(t.claim(f, "g1", "1", true, "t0")));
            rebooted(&mut done);
            let complete = t.complete(&facts_of(&done), Some("g1"), "t1");
            let mut now = done.clone();
            now["metadata"]["labels"]["ex.com/rebooting"] = "admin".into();
            assert!(apply(&mut now, &complete).is_err(), "completion over {now}");
            // Our pre-reboot label `lb=out` replaced by the post-reboot one only while ours.
            let mut now = done.clone();
            now["metadata"]["labels"]["lb"] = "admin".into();
            assert!(apply(&mut now, &complete).is_err(), "completion over {now}");
        }
    }

    fn annotation(obj: &Value, key: &str) -> Option<String> {
        obj["metadata"]["annotations"][key]
            .as_str()
            .map(str::to_owned)
    }
}
