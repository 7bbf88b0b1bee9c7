//! `request`, `cancel`, `pause`, `resume`: what the docs tell an administrator to do by
//! hand, done so that a concurrent change fails the write instead of being overwritten.
//! `resume` also forgives the rollout's failures that stalled the pool (its record on the
//! ledger Lease).
//! Deciding the patch is pure; the I/O reads the object, writes, and on a failed `test`
//! (the object changed meanwhile) reads it again and decides again.

use crate::error::{Error, is_not_found, is_stale};
use common::{
    AnnotationKeys, NodeFacts, Phase, Request,
    ledger::PAUSED_ANNOTATION,
    pool::RebootPool,
    rollout::{ROLLOUT_ANNOTATION, RolloutRecord, rollout_json, rollout_of},
};
use json_patch::{
    AddOperation, Patch, PatchOperation, RemoveOperation, TestOperation,
    jsonptr::{PointerBuf, Token},
};
use k8s_openapi::api::{coordination::v1::Lease, core::v1::Node};
use kube::{
    Api, Client,
    api::{Patch as KubePatch, PatchParams},
};
use serde_json::{Value, json};
use std::collections::BTreeMap;

/// How often a write is decided again after the object changed under it.
pub(crate) const ATTEMPTS: usize = 5;

/// What `request` does to one node.
#[derive(Debug, Clone, PartialEq)]
pub enum RequestPlan {
    /// `reboot-needed=true` is there already.
    Already,
    /// Write this; say `note` (something the administrator should know), if any.
    Write { patch: Patch, note: Option<String> },
}

/// What `cancel` does to one node.
#[derive(Debug, Clone, PartialEq)]
pub enum CancelPlan {
    /// No request and no go-ahead: nothing to withdraw.
    Nothing,
    /// The agent has taken the go-ahead: the reboot is under way and finishes.
    TooLate(String),
    /// Write this; `what` says what it withdraws.
    Write { patch: Patch, what: String },
}

fn annotation(key: &str) -> PointerBuf {
    PointerBuf::from_tokens([
        Token::new("metadata"),
        Token::new("annotations"),
        Token::new(key),
    ])
}

fn test(path: PointerBuf, value: Value) -> PatchOperation {
    PatchOperation::Test(TestOperation { path, value })
}

fn add(path: PointerBuf, value: Value) -> PatchOperation {
    PatchOperation::Add(AddOperation { path, value })
}

fn remove(path: PointerBuf) -> PatchOperation {
    PatchOperation::Remove(RemoveOperation { path })
}

/// `kubectl annotate node X reboot-needed=true`, decided on `node` as read: a value other
/// than `true` (not a request) is replaced only while it is still that value; a node without
/// annotations gets them only while it is unchanged.
pub fn request(keys: &AnnotationKeys, node: &NodeFacts) -> RequestPlan {
    let state = node.protocol(keys);
    let needed = || add(annotation(&keys.needed), "true".into());
    let mut notes = Vec::new();
    let ops = match &state.request {
        Request::Needed => return RequestPlan::Already,
        Request::Invalid(value) => {
            notes.push(format!("replaced the invalid {}={value:?}", keys.needed));
            vec![
                test(annotation(&keys.needed), value.as_str().into()),
                needed(),
            ]
        }
        Request::Absent if node.has_annotations => vec![needed()],
        Request::Absent => {
            let version =
                PointerBuf::from_tokens([Token::new("metadata"), Token::new("resourceVersion")]);
            let annotations =
                PointerBuf::from_tokens([Token::new("metadata"), Token::new("annotations")]);
            let rv = node.resource_version.clone().unwrap_or_default();
            vec![
                test(version, rv.into()),
                add(annotations, json!({ &keys.needed: "true" })),
            ]
        }
    };
    if state.reboot_under_way() {
        notes.push("a reboot is under way: this asks for one more after it".to_owned());
    }
    if state.abandon.is_some() {
        notes.push(format!(
            "the node is being given up ({}): the controller clears this request with it; ask \
             again once `kubectl reboot status` shows it idle",
            keys.abandon
        ));
    }
    RequestPlan::Write {
        patch: Patch(ops),
        note: (!notes.is_empty()).then(|| notes.join("; ")),
    }
}

/// The docs' cancel (docs/src/concepts.md): remove `reboot-needed` before the node gets `reboot-now`, or remove
/// `reboot-now` before the agent takes it. Each removal `test`s the value it removes, so a
/// go-ahead the agent took meanwhile (it swaps `reboot-now` for `reboot-in-progress` in one
/// write) fails the cancel instead of being half undone.
pub fn cancel(keys: &AnnotationKeys, node: &NodeFacts) -> CancelPlan {
    let state = node.protocol(keys);
    if let Phase::InProgress { .. } | Phase::Done { .. } = state.phase {
        return CancelPlan::TooLate(format!(
            "the agent has started the reboot ({}): it cannot be cancelled, and finishes on its \
             own",
            if matches!(state.phase, Phase::Done { .. }) {
                &keys.done
            } else {
                &keys.in_progress
            }
        ));
    }
    let mut ops = Vec::new();
    let mut what = Vec::new();
    if let Some(value) = node.annotations.get(&keys.needed) {
        ops.push(test(annotation(&keys.needed), value.as_str().into()));
        ops.push(remove(annotation(&keys.needed)));
        what.push(format!("removed {}", keys.needed));
    }
    if state.phase == Phase::RebootNow {
        ops.push(test(annotation(&keys.now), "true".into()));
        ops.push(remove(annotation(&keys.now)));
        what.push(format!("removed {} before the agent took it", keys.now));
    }
    if ops.is_empty() {
        return CancelPlan::Nothing;
    }
    CancelPlan::Write {
        patch: Patch(ops),
        what: what.join(", "),
    }
}

const NODE_NEEDS: &str = "get and patch on nodes (the node-reboot-admin role)";

pub(crate) async fn read_node(
    api: &Api<Node>,
    name: &str,
    command: &'static str,
) -> Result<Node, Error> {
    match api.get_opt(name).await {
        Ok(Some(node)) => Ok(node),
        Ok(None) => Err(Error::NodeNotFound(name.to_owned())),
        Err(e) => Err(Error::api(
            format!("cannot read node {name}"),
            command,
            NODE_NEEDS,
        )(e)),
    }
}

pub(crate) async fn write_node(
    api: &Api<Node>,
    name: &str,
    patch: Patch,
    command: &'static str,
) -> Result<bool, Error> {
    match api
        .patch(name, &PatchParams::default(), &KubePatch::Json::<()>(patch))
        .await
    {
        Ok(_) => Ok(true),
        Err(e) if is_stale(&e) => Ok(false),
        Err(e) if is_not_found(&e) => Err(Error::NodeNotFound(name.to_owned())),
        Err(e) => Err(Error::api(
            format!("cannot change node {name}"),
            command,
            NODE_NEEDS,
        )(e)),
    }
}

/// Requests a reboot of one node; what was done, for the administrator.
pub async fn request_node(
    client: &Client,
    keys: &AnnotationKeys,
    name: &str,
) -> Result<String, Error> {
    let api: Api<Node> = Api::all(client.clone());
    for _ in 0..ATTEMPTS {
        let node = read_node(&api, name, "request").await?;
        let opted_out = keys
            .opt_out(node.metadata.labels.as_ref())
            .describe(&keys.disabled)
            .map(|label| {
                format!("; note: labelled {label}, it is never rebooted while the label is there")
            });
        let (patch, note) = match request(keys, &NodeFacts::from_node(&node)) {
            RequestPlan::Already => {
                return Ok(format!(
                    "node/{name} already requested ({}=true)",
                    keys.needed
                ));
            }
            RequestPlan::Write { patch, note } => (patch, note),
        };
        if write_node(&api, name, patch, "request").await? {
            let note = note.map(|n| format!("; {n}")).unwrap_or_default();
            return Ok(format!(
                "node/{name} reboot requested ({}=true){note}{}",
                keys.needed,
                opted_out.unwrap_or_default()
            ));
        }
    }
    Err(changing(name))
}

/// Cancels one node's request; what was done, for the administrator.
pub async fn cancel_node(
    client: &Client,
    keys: &AnnotationKeys,
    name: &str,
) -> Result<String, Error> {
    let api: Api<Node> = Api::all(client.clone());
    for _ in 0..ATTEMPTS {
        let node = NodeFacts::from_node(&read_node(&api, name, "cancel").await?);
        let (patch, what) = match cancel(keys, &node) {
            CancelPlan::Nothing => return Ok(format!("node/{name} has no request to cancel")),
            CancelPlan::TooLate(why) => return Err(Error::TooLate(format!("node/{name}: {why}"))),
            CancelPlan::Write { patch, what } => (patch, what),
        };
        if write_node(&api, name, patch, "cancel").await? {
            let slot = if node.protocol(keys).grant.is_some() {
                "; the controller gives its slot back and uncordons it if it cordoned it"
            } else {
                ""
            };
            return Ok(format!("node/{name} reboot cancelled ({what}){slot}"));
        }
    }
    Err(changing(name))
}

pub(crate) fn changing(name: &str) -> Error {
    Error::TooLate(format!(
        "node/{name} kept changing while it was being written ({ATTEMPTS} attempts); try again"
    ))
}

const LEASE_NEEDS: &str = "get and patch on the ledger Lease (the node-reboot-admin role)";

/// Sets (`Some`) or removes (`None`) `reboot-paused` on the ledger Lease, creating nothing:
/// a Lease that does not exist is an error.
pub async fn set_paused(
    client: &Client,
    namespace: &str,
    name: &str,
    pause: bool,
) -> Result<String, Error> {
    let command = if pause { "pause" } else { "resume" };
    let api: Api<Lease> = Api::namespaced(client.clone(), namespace);
    let what = format!("the ledger Lease {namespace}/{name}");
    let lease = api
        .get_opt(name)
        .await
        .map_err(Error::api(
            format!("cannot read {what}"),
            command,
            LEASE_NEEDS,
        ))?
        .ok_or_else(|| Error::NoLedger {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
        })?;
    let annotations = lease.metadata.annotations.as_ref();
    let present = annotations.is_some_and(|a| a.contains_key(PAUSED_ANNOTATION));
    let paused = common::ledger::is_paused(annotations);
    if pause && paused {
        // Any value but `false` pauses (fail-safe): say which one this is.
        let value = annotations
            .and_then(|a| a.get(PAUSED_ANNOTATION))
            .map_or("true", String::as_str);
        return Ok(format!(
            "already paused ({PAUSED_ANNOTATION}={value:?} on {what})"
        ));
    }
    if !pause && !present {
        return Ok(format!("not paused (no {PAUSED_ANNOTATION} on {what})"));
    }
    // A merge patch of the one annotation, as `kubectl annotate` writes it: the controller's
    // compare-and-swap of the slots fails on this change, so a grant decided before the pause
    // is not made.
    let value = if pause { json!("true") } else { Value::Null };
    let patch = json!({"metadata": {"annotations": {PAUSED_ANNOTATION: value}}});
    match api
        .patch(name, &PatchParams::default(), &KubePatch::Merge(&patch))
        .await
    {
        Ok(_) if pause => Ok(format!(
            "paused: no new reboot starts in any pool, the flags' pool and every RebootPool \
             ({PAUSED_ANNOTATION}=true on {what}); reboots under way finish. \
             `kubectl reboot resume` resumes"
        )),
        Ok(_) => Ok(format!("resumed ({PAUSED_ANNOTATION} removed from {what})")),
        Err(e) if is_not_found(&e) => Err(Error::NoLedger {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
        }),
        Err(e) => Err(Error::api(
            format!("cannot change {what}"),
            command,
            LEASE_NEEDS,
        )(e)),
    }
}

/// What `resume` does to the rollout's record on the ledger Lease.
#[derive(Debug, Clone, PartialEq)]
pub enum Forgive {
    /// No record (no rollout under way, or no rule on), or no failure that counts.
    Nothing,
    /// Write this record; `said` tells the administrator what it changes.
    Write { record: RolloutRecord, said: String },
}

/// The rollout's record after `resume`, decided on the ledger Lease's annotations as read:
/// every failure that counts forgiven, the canary stage and the waves started over
/// ([`RolloutRecord::resumed`]); a record that does not read (edited by hand), which the
/// controller reads as a stall, replaced with an empty one. A record without a failure that
/// counts is left as it is: a resume after a plain pause does not send the canaries again.
pub fn forgive(annotations: Option<&BTreeMap<String, String>>) -> Forgive {
    let record = match rollout_of(annotations) {
        Ok(None) => return Forgive::Nothing,
        Ok(Some(record)) => record,
        Err(_) => {
            return Forgive::Write {
                record: RolloutRecord::default(),
                said: format!(
                    "replaced the rollout record ({ROLLOUT_ANNOTATION}), which did not read \
                     (edited by hand?), with an empty one: the controller no longer reads the \
                     pool as stalled for it, and the rollout's counts start over"
                ),
            };
        }
    };
    forgive_record(&record)
}

/// [`forgive`] of a record that reads.
fn forgive_record(record: &RolloutRecord) -> Forgive {
    let failed: Vec<String> = record
        .counted_failures()
        .map(|(node, f)| format!("{node}: {}", f.kind.describe()))
        .collect();
    if failed.is_empty() {
        return Forgive::Nothing;
    }
    let mut said = format!(
        "forgave {} failure(s) of the rollout ({})",
        failed.len(),
        failed.join("; ")
    );
    // The record shows a canary stage when one ran (canaries granted, passed, or failed).
    let canary = record.canaries_completed > 0
        || !record.canaries.is_empty()
        || record.failures.values().any(|f| f.canary);
    if canary {
        said.push_str("; the canary stage starts over");
    }
    if record.wave.is_some() {
        said.push_str("; the waves start small again");
    }
    Forgive::Write {
        record: record.resumed(),
        said,
    }
}

/// The merge patch that writes `record` on the ledger Lease only if nobody changed the Lease
/// since it was read at `version` (else 409 Conflict): the controller's compare-and-swap of
/// its slots and record must not be overwritten.
pub fn forgive_patch(version: Option<&str>, record: &RolloutRecord) -> Value {
    json!({"metadata": {
        "resourceVersion": version,
        "annotations": {ROLLOUT_ANNOTATION: rollout_json(record)},
    }})
}

/// `resume`'s second part: forgives the failures of the rollout recorded on the flags' pool's
/// ledger Lease `namespace/name`, re-reading and deciding again when the Lease changed under
/// the write. What was done, or `None` when there was nothing to forgive (no Lease, no
/// record, no failure that counts). A RebootPool's are forgiven by its controller instead
/// ([`resume_pool`]).
pub async fn forgive_rollout(
    client: &Client,
    namespace: &str,
    name: &str,
) -> Result<Option<String>, Error> {
    let needs = LEASE_NEEDS;
    let api: Api<Lease> = Api::namespaced(client.clone(), namespace);
    let what = format!("the ledger Lease {namespace}/{name}");
    for _ in 0..ATTEMPTS {
        let lease = api.get_opt(name).await.map_err(Error::api(
            format!("cannot read {what}"),
            "resume",
            needs,
        ))?;
        let Some(lease) = lease else {
            return Ok(None);
        };
        let (record, said) = match forgive(lease.metadata.annotations.as_ref()) {
            Forgive::Nothing => return Ok(None),
            Forgive::Write { record, said } => (record, said),
        };
        let patch = forgive_patch(lease.metadata.resource_version.as_deref(), &record);
        match api
            .patch(name, &PatchParams::default(), &KubePatch::Merge(&patch))
            .await
        {
            Ok(_) => return Ok(Some(said)),
            // The controller wrote meanwhile: read again, decide again.
            Err(kube::Error::Api(status)) if status.is_conflict() => {}
            Err(e) if is_not_found(&e) => return Ok(None),
            Err(e) => {
                return Err(Error::api(format!("cannot change {what}"), "resume", needs)(e));
            }
        }
    }
    Err(Error::TooLate(format!(
        "{what} kept changing while the rollout's failures were being forgiven ({ATTEMPTS} \
         attempts); run `kubectl reboot resume` again"
    )))
}

const POOL_NEEDS: &str = "get and patch on rebootpools (the node-reboot-admin ClusterRole)";

/// What `resume --pool` asks of the pool's controller, from its ledger Lease as far as the
/// caller may read it (the node-reboot-admin Role does not name the pools' Leases).
#[derive(Debug, Clone, PartialEq)]
pub enum PoolForgive {
    /// No failure counts: `spec.resumedAt` is not written.
    Nothing,
    /// Failures count, as `said`; `spec.resumedAt` after the last of them.
    Failures { said: String, after: Option<u64> },
    /// The Lease could not be read: `spec.resumedAt` is written, in case.
    Unknown,
    /// The Lease is paused (recreated so by the controller, its soaks unknown): the
    /// controller lifts that pause at a `spec.resumedAt` after the Lease's creation.
    Paused,
    /// The record does not read: the controller never writes over it, so it is removed by
    /// hand (`resume --pool` says how); `spec.resumedAt` would change nothing.
    Unreadable,
}

impl PoolForgive {
    /// From the pool's ledger Lease annotations as read.
    pub fn of(annotations: Option<&BTreeMap<String, String>>) -> Self {
        if common::ledger::is_paused(annotations) {
            return Self::Paused;
        }
        let record = match rollout_of(annotations) {
            Err(_) => return Self::Unreadable,
            Ok(None) => return Self::Nothing,
            Ok(Some(record)) => record,
        };
        match forgive_record(&record) {
            Forgive::Nothing => Self::Nothing,
            Forgive::Write { said, .. } => Self::Failures {
                after: record.counted_failures().filter_map(|(_, f)| f.at).max(),
                said: said.replacen("forgave", "forgives", 1),
            },
        }
    }

    /// The `spec.resumedAt` to write at `now` (Unix milliseconds), if any: after every
    /// counted failure even when this machine's clock is behind the controller's.
    pub fn resumed_at(&self, now: i64) -> Option<String> {
        let after = match self {
            Self::Nothing | Self::Unreadable => return None,
            Self::Failures { after, .. } => after.and_then(|a| i64::try_from(a).ok()),
            Self::Unknown | Self::Paused => None,
        };
        let at = after.map_or(now, |a| now.max(a.saturating_add(1)));
        let at = k8s_openapi::jiff::Timestamp::from_millisecond(at).ok()?;
        Some(format!("{at:.3}"))
    }
}

/// `resume --pool`: `spec.paused: false` on the RebootPool and, while its rollout has
/// failures that count, `spec.resumedAt`, which has its controller forgive them (in its own
/// compare-and-swap of the pool's Lease) and start the canary stage and the waves over; one
/// merge patch, with the rights of the node-reboot-admin ClusterRole alone.
pub async fn resume_pool(client: &Client, namespace: &str, pool: &str) -> Result<String, Error> {
    let leases: Api<Lease> = Api::namespaced(client.clone(), namespace);
    let forgive = match leases.get_opt(&common::pool::ledger_name(pool)).await {
        Ok(lease) => PoolForgive::of(lease.as_ref().and_then(|l| l.metadata.annotations.as_ref())),
        Err(_) => PoolForgive::Unknown,
    };
    let now = server_now(client).await;
    set_pool_paused(client, pool, false, forgive.resumed_at(now).as_deref())
        .await
        .map(|done| match forgive {
            PoolForgive::Failures { said, .. } => {
                format!("{done}; at its next round the controller {said}")
            }
            PoolForgive::Unknown => format!(
                "{done}; at its next round the controller forgives the rollout's failures \
                 counted before spec.resumedAt, if any, and lifts the pause its ledger Lease \
                 was recreated with, if it was"
            ),
            PoolForgive::Paused => format!(
                "{done}; at its next round the controller lifts the pause its ledger Lease \
                 {} was recreated with, and forgives the rollout's failures counted before \
                 spec.resumedAt",
                common::pool::ledger_name(pool)
            ),
            PoolForgive::Unreadable => format!(
                "{done}; its rollout record ({ROLLOUT_ANNOTATION}) does not read (edited by \
                 hand?) and holds the pool stalled: remove it with `kubectl annotate lease -n \
                 {namespace} {} {ROLLOUT_ANNOTATION}-`",
                common::pool::ledger_name(pool)
            ),
            PoolForgive::Nothing => done,
        })
}

/// The API server's clock (in milliseconds), from the `Date` of its answer to `GET /version`
/// (whole seconds, so at most a second behind it): `spec.resumedAt` is compared with the
/// controller's clock, which this machine's may be far from. This machine's clock where the
/// answer has no date.
async fn server_now(client: &Client) -> i64 {
    use k8s_openapi::jiff::{Timestamp, fmt::rfc2822};
    let local = Timestamp::now().as_millisecond();
    let Ok(request) = http::Request::get("/version").body(kube::client::Body::empty()) else {
        return local;
    };
    let Ok(answer) = client.send(request).await else {
        return local;
    };
    answer
        .headers()
        .get(http::header::DATE)
        .and_then(|date| date.to_str().ok())
        .and_then(|date| rfc2822::parse(date).ok())
        .map_or(local, |at| at.timestamp().as_millisecond())
}

/// `pause --pool` and `resume --pool`: `spec.paused` of the RebootPool, set (or cleared) with
/// a merge patch, and with `resumed_at` its `spec.resumedAt`; what was done, or that there was
/// nothing to do.
pub async fn set_pool_paused(
    client: &Client,
    pool: &str,
    pause: bool,
    resumed_at: Option<&str>,
) -> Result<String, Error> {
    let command = if pause { "pause" } else { "resume" };
    let api: Api<RebootPool> = Api::all(client.clone());
    let what = format!("the RebootPool {pool}");
    let unknown = |known: Vec<String>| Error::UnknownPool {
        name: pool.to_owned(),
        known,
    };
    let found = match api.get_opt(pool).await {
        Ok(found) => found,
        // No CRD: no RebootPool at all.
        Err(e) if is_not_found(&e) => None,
        Err(e) => {
            return Err(Error::api(
                format!("cannot read {what}"),
                command,
                POOL_NEEDS,
            )(e));
        }
    };
    let Some(found) = found else {
        let known = match api.list(&Default::default()).await {
            Ok(list) => list
                .items
                .iter()
                .filter_map(|p| p.metadata.name.clone())
                .collect(),
            Err(_) => Vec::new(),
        };
        return Err(unknown(known));
    };
    match (pause, found.spec.paused, resumed_at) {
        (true, true, _) => return Ok(format!("already paused (spec.paused on {what})")),
        (false, false, None) => {
            return Ok(format!("not paused (spec.paused is false on {what})"));
        }
        _ => {}
    }
    let patch = match resumed_at {
        Some(at) => json!({"spec": {"paused": pause, "resumedAt": at}}),
        None => json!({"spec": {"paused": pause}}),
    };
    match api
        .patch(pool, &PatchParams::default(), &KubePatch::Merge(&patch))
        .await
    {
        Ok(_) if pause => Ok(format!(
            "paused: no new reboot starts in the RebootPool {pool} (spec.paused: true); reboots \
             under way finish. `kubectl reboot resume --pool {pool}` resumes"
        )),
        Ok(_) => Ok(match resumed_at {
            Some(at) => format!("resumed (spec.paused: false, spec.resumedAt: {at} on {what})"),
            None => format!("resumed (spec.paused: false on {what})"),
        }),
        Err(e) if is_not_found(&e) => Err(unknown(Vec::new())),
        Err(e) => Err(Error::api(
            format!("cannot change {what}"),
            command,
            POOL_NEEDS,
        )(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use common::{
        rollout::{Failure, FailureKind},
        test_util::NodeBuilder,
    };
    use std::collections::BTreeSet;

    /// A Ready node `n1` at version 42 with these annotations.
    fn node(annotations: &[(&str, &str)]) -> NodeFacts {
        NodeBuilder::new("n1")
            .resource_version("42")
            .annotations(annotations)
            .facts()
    }

    use common::test_util::apply_patch as apply;

    #[test]
    fn a_request_adds_reboot_needed_and_keeps_other_annotations() {
        let keys = AnnotationKeys::default();
        let RequestPlan::Write { patch, note } = request(&keys, &node(&[("x", "y")])) else {
            panic!("a write")
        };
        assert_eq!(note, None);
        let mut obj = json!({"metadata": {"resourceVersion": "43", "annotations": {"x": "y"}}});
        apply(&mut obj, &patch).unwrap();
        assert_eq!(
            obj["metadata"]["annotations"],
            json!({"x": "y", "reboot-needed": "true"})
        );
        assert_eq!(
            request(&keys, &node(&[("reboot-needed", "true")])),
            RequestPlan::Already
        );
    }

    #[test]
    fn a_node_without_annotations_gets_them_only_while_unchanged() {
        let keys = AnnotationKeys::new("reboot.example.com").unwrap();
        let RequestPlan::Write { patch, .. } = request(&keys, &node(&[])) else {
            panic!("a write")
        };
        let mut obj = json!({"metadata": {"resourceVersion": "42"}});
        apply(&mut obj, &patch).unwrap();
        assert_eq!(
            obj["metadata"]["annotations"],
            json!({"reboot.example.com/reboot-needed": "true"})
        );
        let mut changed = json!({"metadata": {"resourceVersion": "43", "annotations": {"a": "b"}}});
        assert!(
            apply(&mut changed, &patch).is_err(),
            "would replace the new annotations"
        );
    }

    #[test]
    fn an_invalid_value_is_replaced_only_while_it_is_still_there() {
        let keys = AnnotationKeys::default();
        let RequestPlan::Write { patch, note } = request(&keys, &node(&[("reboot-needed", "yes")]))
        else {
            panic!("a write")
        };
        assert!(note.unwrap().contains("invalid"));
        let mut obj = json!({"metadata": {"annotations": {"reboot-needed": "yes"}}});
        apply(&mut obj, &patch).unwrap();
        assert_eq!(
            obj["metadata"]["annotations"]["reboot-needed"],
            json!("true")
        );
        let mut obj = json!({"metadata": {"annotations": {"reboot-needed": "no"}}});
        assert!(apply(&mut obj, &patch).is_err());
    }

    #[test]
    fn a_request_during_a_reboot_says_it_asks_for_another() {
        let keys = AnnotationKeys::default();
        let plan = request(&keys, &node(&[("reboot-in-progress", "true")]));
        let RequestPlan::Write { note, .. } = plan else {
            panic!("a write")
        };
        assert!(note.unwrap().contains("one more after it"));
    }

    #[test]
    fn cancel_removes_the_request_and_a_go_ahead_not_yet_taken() {
        let keys = AnnotationKeys::default();
        let waiting = node(&[("reboot-needed", "true"), ("reboot-grant", "g1")]);
        let CancelPlan::Write { patch, what } = cancel(&keys, &waiting) else {
            panic!("a write")
        };
        assert_eq!(what, "removed reboot-needed");
        let mut obj = json!({"metadata": {"annotations": {"reboot-needed": "true",
            "reboot-grant": "g1"}}});
        apply(&mut obj, &patch).unwrap();
        assert_eq!(
            obj["metadata"]["annotations"],
            json!({"reboot-grant": "g1"})
        );

        let told = node(&[("reboot-now", "true"), ("reboot-grant", "g1")]);
        let CancelPlan::Write { patch, what } = cancel(&keys, &told) else {
            panic!("a write")
        };
        assert!(
            what.contains("reboot-now before the agent took it"),
            "{what}"
        );
        let mut obj = json!({"metadata": {"annotations": {"reboot-now": "true"}}});
        apply(&mut obj, &patch).unwrap();
        assert_eq!(obj["metadata"]["annotations"], json!({}));
        // The agent took it meanwhile: the cancel fails instead of half undoing the reboot.
        let mut taken = json!({"metadata": {"annotations": {"reboot-in-progress": "true",
            "reboot-boot-id": "b1"}}});
        assert!(apply(&mut taken, &patch).is_err());
    }

    fn failure(kind: FailureKind, canary: bool, forgiven: bool) -> Failure {
        Failure {
            grant: "ns/l/g1".into(),
            kind,
            canary,
            forgiven,
            at: None,
        }
    }

    /// `resume --pool` writes `spec.resumedAt` only while failures count, its Lease is paused
    /// (or it cannot tell), after the last failure even on a clock behind the controller's.
    #[test]
    fn resume_pool_asks_for_forgiveness_after_the_last_counted_failure() {
        let mut record = RolloutRecord::default();
        let mut late = failure(FailureKind::NotReadyAfterReboot, true, false);
        late.at = Some(1_700_000_000_000);
        record.failures.insert("a".into(), late);
        let text = rollout_json(&record);
        let forgive = PoolForgive::of(Some(&unpaused(&text)));
        let PoolForgive::Failures { said, after } = &forgive else {
            panic!("{forgive:?}");
        };
        assert!(said.starts_with("forgives 1 failure"), "{said}");
        assert_eq!(*after, Some(1_700_000_000_000));
        let behind = forgive.resumed_at(1_600_000_000_000).expect("written");
        assert_eq!(behind, "2023-11-14T22:13:20.001Z");
        let ahead = forgive.resumed_at(1_800_000_000_000).expect("written");
        assert_eq!(ahead, "2027-01-15T08:00:00.000Z");
        for at in [&behind, &ahead] {
            let read = common::pool::resumed_at_millis(at).expect("the controller reads it");
            assert!(record.resumed_at(read).is_some(), "{at} forgives it");
        }
        let forgiven = rollout_json(&record.resumed());
        assert_eq!(
            PoolForgive::of(Some(&unpaused(&forgiven))),
            PoolForgive::Nothing
        );
        assert_eq!(PoolForgive::Nothing.resumed_at(1), None);
        let damaged = PoolForgive::of(Some(&unpaused("{not json")));
        assert_eq!(damaged, PoolForgive::Unreadable, "not promised as forgiven");
        assert_eq!(damaged.resumed_at(1), None);
        assert!(PoolForgive::Unknown.resumed_at(1_600_000_000_000).is_some());
        // A Lease recreated paused: resumedAt is written, which lifts that pause.
        let paused = PoolForgive::of(Some(&annotations(&forgiven)));
        assert_eq!(paused, PoolForgive::Paused);
        assert!(paused.resumed_at(1_600_000_000_000).is_some());
    }

    fn unpaused(rollout: &str) -> BTreeMap<String, String> {
        BTreeMap::from([(ROLLOUT_ANNOTATION.to_owned(), rollout.to_owned())])
    }

    fn annotations(rollout: &str) -> BTreeMap<String, String> {
        BTreeMap::from([
            (ROLLOUT_ANNOTATION.to_owned(), rollout.to_owned()),
            (PAUSED_ANNOTATION.to_owned(), "true".to_owned()),
        ])
    }

    /// What `resume` writes over `record`, and what it says: it must write.
    fn forgiven(record: &RolloutRecord) -> (RolloutRecord, String) {
        match forgive(Some(&annotations(&rollout_json(record)))) {
            Forgive::Write { record, said } => (record, said),
            _ => panic!("a write"),
        }
    }

    #[test]
    fn resume_forgives_the_failures_that_count_and_starts_the_canary_over() {
        let mut record = RolloutRecord {
            completed: 2,
            canaries: BTreeSet::from(["n4".to_owned()]),
            ..RolloutRecord::default()
        };
        let failures = [
            ("n1", failure(FailureKind::DrainTimeout, true, false)),
            ("n2", failure(FailureKind::RebootTimeout, false, false)),
            ("n3", failure(FailureKind::Unproven, false, true)),
        ];
        for (node, f) in failures {
            record.failures.insert(node.into(), f);
        }
        let (written, said) = forgiven(&record);
        assert_eq!(written, record.resumed());
        assert_eq!(written.counted_failures().count(), 0);
        assert_eq!(
            said,
            "forgave 2 failure(s) of the rollout (n1: its drain timed out; n2: it was not back \
             within --reboot-timeout); the canary stage starts over"
        );
    }

    #[test]
    fn waves_without_a_canary_start_small_again() {
        let mut record = RolloutRecord {
            wave: Some(4),
            wave_completed: 1,
            ..RolloutRecord::default()
        };
        record.failures.insert(
            "n1".into(),
            failure(FailureKind::NotReadyAfterReboot, false, false),
        );
        let (written, said) = forgiven(&record);
        assert_eq!((written.wave, written.wave_completed), (None, 0));
        assert_eq!(
            said,
            "forgave 1 failure(s) of the rollout (n1: it went NotReady after its reboot); the \
             waves start small again"
        );
    }

    #[test]
    fn nothing_to_forgive_leaves_the_record_and_its_canary_stage_as_they_are() {
        assert_eq!(forgive(None), Forgive::Nothing);
        let paused_only = BTreeMap::from([(PAUSED_ANNOTATION.to_owned(), "true".to_owned())]);
        assert_eq!(forgive(Some(&paused_only)), Forgive::Nothing);
        // Passed its canary, one failure forgiven already: a resume after a plain pause must
        // not send the canaries again.
        let mut passed = RolloutRecord {
            canaries_completed: 1,
            wave: Some(2),
            ..RolloutRecord::default()
        };
        passed
            .failures
            .insert("n1".into(), failure(FailureKind::DrainTimeout, true, true));
        assert_eq!(
            forgive(Some(&annotations(&rollout_json(&passed)))),
            Forgive::Nothing
        );
    }

    #[test]
    fn a_record_that_does_not_read_is_replaced_with_an_empty_one() {
        let Forgive::Write { record, said } = forgive(Some(&annotations("{\"completed\": -1")))
        else {
            panic!("a write")
        };
        assert_eq!(record, RolloutRecord::default());
        assert!(said.starts_with("replaced the rollout record"), "{said}");
    }

    #[test]
    fn the_forgiving_patch_writes_the_record_only_at_the_version_read() {
        let mut record = RolloutRecord::default();
        record
            .failures
            .insert("n1".into(), failure(FailureKind::DrainTimeout, false, true));
        let patch = forgive_patch(Some("42"), &record);
        assert_eq!(patch["metadata"]["resourceVersion"], "42");
        let mut lease = json!({"metadata": {"resourceVersion": "42", "annotations": {
            "node-reboot-operator/slots": "{}", ROLLOUT_ANNOTATION: "{}"}}});
        json_patch::merge(&mut lease, &patch);
        let annotations: BTreeMap<String, String> =
            serde_json::from_value(lease["metadata"]["annotations"].clone()).unwrap();
        assert_eq!(rollout_of(Some(&annotations)), Ok(Some(record)));
        assert_eq!(
            annotations["node-reboot-operator/slots"], "{}",
            "the rest kept"
        );
    }

    #[test]
    fn a_reboot_under_way_cannot_be_cancelled_and_nothing_is_nothing() {
        let keys = AnnotationKeys::default();
        let rebooting = node(&[("reboot-in-progress", "true")]);
        assert!(
            matches!(cancel(&keys, &rebooting), CancelPlan::TooLate(why) if why.contains("reboot-in-progress"))
        );
        assert_eq!(
            cancel(&keys, &node(&[("reboot-last-completed", "t")])),
            CancelPlan::Nothing
        );
    }
}
