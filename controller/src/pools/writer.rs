//! The leader's writes to the `RebootPool` objects: each pool's status, patched when it
//! changes and at most once a second (a pool of 65,000 nodes costs the API server one write a
//! second at most), the pool's finalizer while a node it granted may still be in the protocol,
//! and the Warnings of an invalid spec and of a node two pools select.

use super::{Plan, PoolConfig, status};
use crate::{
    cache::nodes::{SharedIndex, lock},
    cluster::leader::Leadership,
    cluster::{
        events::Events,
        ledger_store::{LedgerStore, ReadLedger},
    },
    metrics::PoolSummary,
    pools::watch::Listed,
    shell::PoolFacts,
};
use common::{
    AnnotationKeys, ControllerReason, NodeFacts,
    pool::{FINALIZER, RebootPool, RebootPoolStatus},
};
use k8s_openapi::{api::core::v1::Node, apimachinery::pkg::apis::meta::v1::Time};
use kube::{
    Api, Client, Resource, ResourceExt,
    api::{Patch, PatchParams},
    runtime::reflector::{ObjectRef, Store},
};
use std::{
    collections::{BTreeMap, BTreeSet},
    sync::Mutex,
    time::Duration,
};
use tokio::sync::watch;

/// At most one status write per pool in this period.
const STATUS_PERIOD: Duration = Duration::from_secs(1);

/// What the writer reads of the running pools.
#[allow(missing_debug_implementations)] // the reflector's store has no Debug
pub struct RunningView<'a> {
    pub store: &'a Store<Node>,
    /// The operator's namespace (of every ledger) and annotation keys.
    pub namespace: &'a str,
    pub keys: &'a AnnotationKeys,
    pub plan: &'a Plan,
    pub pools: Vec<PoolView<'a>>,
}

#[allow(missing_debug_implementations)]
pub struct PoolView<'a> {
    pub config: &'a PoolConfig,
    pub seen: &'a Mutex<status::Seen>,
    pub ledger: &'a watch::Receiver<ReadLedger>,
    pub ledger_store: &'a LedgerStore,
}

/// Records what a pool's round saw: the counts, and its nodes in the protocol.
pub fn record_seen(
    seen: &Mutex<status::Seen>,
    store: &Store<Node>,
    index: &SharedIndex,
    config: &PoolConfig,
    summary: PoolSummary,
    budget: usize,
    facts: PoolFacts,
) {
    let (names, completed): (Vec<String>, _) = {
        let index = lock(index);
        let completed = index
            .last_completed()
            .map(|(node, at)| (node.clone(), Time(*at)));
        (index.in_protocol().iter().cloned().collect(), completed)
    };
    let mut in_pool = Vec::new();
    for name in names {
        let Some(node) = store.get(&ObjectRef::new(&name)) else {
            continue;
        };
        if !config
            .args
            .node_selector
            .matches(node.metadata.labels.as_ref().unwrap_or(&BTreeMap::new()))
        {
            continue;
        }
        in_pool.push(name);
    }
    let mut seen = seen
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    seen.summary = summary;
    seen.budget = budget;
    let args = &config.args;
    seen.budget_given = matches!(args.max_unavailable, common::MaxUnavailable::Percent(_))
        .then(|| args.max_unavailable.to_string());
    seen.zone_budget = args.max_unavailable_per_zone.map(|z| z.to_string());
    seen.facts = facts;
    seen.in_protocol = in_pool;
    if let Some((node, at)) = completed
        && seen
            .last_completed
            .as_ref()
            .is_none_or(|(_, last)| at > *last)
    {
        seen.last_completed = Some((node, at));
    }
}

/// Writes the statuses and finalizers of the pool objects until dropped.
pub async fn write_statuses(
    client: &Client,
    objects: &watch::Receiver<Option<Listed>>,
    view: RunningView<'_>,
    events: &Events,
    leadership: &Leadership,
) {
    let api: Api<RebootPool> = Api::all(client.clone());
    let mut said: BTreeSet<String> = BTreeSet::new();
    loop {
        let listed = objects.borrow().clone().unwrap_or_default();
        let overlaps = overlaps(&view);
        for object in &listed.objects {
            let name = object.name_any();
            // The finalizer first: its patch is refused if the object changed meanwhile.
            tend_finalizer(&api, &view, object, leadership).await;
            let wanted = wanted_status(&view, object, &overlaps);
            if let Some(wanted) = wanted
                && object.status.as_ref() != Some(&wanted)
            {
                patch_status(&api, &name, &wanted).await;
            }
            warn_once(&view, object, &overlaps, events, &mut said);
        }
        tokio::time::sleep(STATUS_PERIOD).await;
    }
}

/// The nodes two or more `RebootPool`s select, per pool.
fn overlaps(view: &RunningView<'_>) -> BTreeMap<String, Vec<common::pool::OverlappingNode>> {
    let selectors: Vec<_> = view
        .pools
        .iter()
        .filter_map(|p| Some((p.config.name.clone()?, p.config.args.node_selector.clone())))
        .collect();
    if selectors.len() < 2 {
        return BTreeMap::new();
    }
    let empty = BTreeMap::new();
    let nodes = view.store.state();
    status::overlaps(
        nodes.iter().map(|n| {
            (
                n.metadata.name.as_deref().unwrap_or_default(),
                n.metadata.labels.as_ref().unwrap_or(&empty),
            )
        }),
        &selectors,
    )
}

fn wanted_status(
    view: &RunningView<'_>,
    object: &RebootPool,
    overlaps: &BTreeMap<String, Vec<common::pool::OverlappingNode>>,
) -> Option<RebootPoolStatus> {
    let name = object.name_any();
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    let previous = object
        .status
        .as_ref()
        .map_or(&[][..], |s| s.conditions.as_slice());
    let generation = object.metadata.generation;
    if let Some(invalid) = view.plan.invalid.iter().find(|i| i.name == name) {
        return Some(status::invalid(
            generation,
            &invalid.problems,
            previous,
            &now,
        ));
    }
    let pool = view
        .pools
        .iter()
        .find(|p| p.config.name.as_deref() == Some(name.as_str()))?;
    let seen = pool
        .seen
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone();
    let mut wanted = status::running(
        generation,
        &seen,
        overlaps.get(&name).cloned().unwrap_or_default(),
        object.spec.paused,
        pool.config.deleting,
        previous,
        &now,
    );
    // The last completion stays known across restarts of the pools.
    if wanted.last_completed.is_none() {
        wanted.last_completed = object
            .status
            .as_ref()
            .and_then(|s| s.last_completed.clone());
    }
    Some(wanted)
}

/// `status` as a whole, so that a field now absent is removed (a merge patch would keep it).
async fn patch_status(api: &Api<RebootPool>, name: &str, status: &RebootPoolStatus) {
    let patch = serde_json::json!([{ "op": "add", "path": "/status", "value": status }]);
    let patch = match serde_json::from_value::<json_patch::Patch>(patch) {
        Ok(patch) => patch,
        Err(error) => {
            tracing::warn!(pool = name, %error, "cannot write the pool's status");
            return;
        }
    };
    let params = PatchParams::default();
    if let Err(error) = api
        .patch_status(name, &params, &Patch::<()>::Json(patch))
        .await
    {
        tracing::warn!(pool = name, %error, "cannot write the pool's status; retrying");
    }
}

/// Adds the finalizer to a pool that runs; removes it from a deleted pool once nothing of
/// the operator's is left on its nodes (its ledger Lease is deleted once its rounds stopped:
/// `ledgers::delete_ledgers_of_gone_pools`).
async fn tend_finalizer(
    api: &Api<RebootPool>,
    view: &RunningView<'_>,
    object: &RebootPool,
    leadership: &Leadership,
) {
    let name = object.name_any();
    let has = object.finalizers().iter().any(|f| f == FINALIZER);
    let deleting = object.meta().deletion_timestamp.is_some();
    let version = object.resource_version().unwrap_or_default();
    let patch = if !deleting && !has {
        if object.finalizers().is_empty() {
            serde_json::json!([
                { "op": "test", "path": "/metadata/resourceVersion", "value": version },
                { "op": "add", "path": "/metadata/finalizers", "value": [FINALIZER] },
            ])
        } else {
            serde_json::json!([
                { "op": "test", "path": "/metadata/resourceVersion", "value": version },
                { "op": "add", "path": "/metadata/finalizers/-", "value": FINALIZER },
            ])
        }
    } else if deleting
        && has
        && finished(view, &name)
        && released_now(view, &name, leadership).await
    {
        let Some(at) = object.finalizers().iter().position(|f| f == FINALIZER) else {
            return;
        };
        tracing::info!(pool = %name, "deleted pool: nothing of ours is left on its nodes; releasing it");
        serde_json::json!([
            { "op": "test", "path": "/metadata/resourceVersion", "value": version },
            { "op": "remove", "path": format!("/metadata/finalizers/{at}") },
        ])
    } else {
        return;
    };
    let Ok(patch) = serde_json::from_value::<json_patch::Patch>(patch) else {
        return;
    };
    if let Err(error) = api
        .patch(&name, &PatchParams::default(), &Patch::<()>::Json(patch))
        .await
    {
        tracing::debug!(pool = %name, %error, "finalizer not written (a newer version, or gone)");
    }
}

/// Whether the pool's ledger holds no slot as read now, by a replica that still leads: the
/// cache and the watched ledger may be stale (a leader frozen past its lease), and a finalizer
/// removed too early leaves a node mid-reboot with a grant that no pool finishes. A node is
/// granted only after its slot is in the ledger, and its grant is removed before the slot is
/// released, so a ledger empty now means no node carries its grant.
async fn released_now(view: &RunningView<'_>, name: &str, leadership: &Leadership) -> bool {
    let Some(pool) = view
        .pools
        .iter()
        .find(|p| p.config.name.as_deref() == Some(name))
    else {
        return true;
    };
    let fresh = pool.ledger_store.get().await;
    leadership.is_leading() && matches!(fresh, Ok(Some(read)) if read.ledger.slots.is_empty())
}

/// Whether a deleted pool's nodes are finished: its ledger holds no slot, and none of its
/// nodes carries a grant of its ledger, our cordon, or a label or taint of ours.
fn finished(view: &RunningView<'_>, name: &str) -> bool {
    let Some(pool) = view
        .pools
        .iter()
        .find(|p| p.config.name.as_deref() == Some(name))
    else {
        // A pool whose ledger cannot be named never ran, so it granted nothing under this
        // name; what an earlier spec granted is found by the nodes' grants.
        let ledger = common::ledger::ledger_id(view.namespace, &common::pool::ledger_name(name));
        return no_grant_of(view.store, &ledger, view.keys);
    };
    let ledger = pool.ledger.borrow();
    ledger.ledger.resource_version.is_some()
        && ledger.ledger.slots.is_empty()
        && no_grant_of(view.store, &pool.ledger_store.id(), view.keys)
        && no_cordon_kept_by(view.store, pool.config, view.keys)
}

/// Whether no node the deleted pool selects carries our cordon without a grant: a node it set
/// aside and kept cordoned, which its last rounds uncordon (`SetAside::retiring`).
fn no_cordon_kept_by(store: &Store<Node>, config: &PoolConfig, keys: &AnnotationKeys) -> bool {
    let indexing = config.args.indexing();
    store.state().iter().all(|node| {
        let state = NodeFacts::from_node(node).protocol(keys);
        !(indexing.shared(node) && state.cordoned_by_operator && state.grant.is_none())
    })
}

fn no_grant_of(store: &Store<Node>, ledger: &str, keys: &AnnotationKeys) -> bool {
    store.state().iter().all(|node| {
        let state = NodeFacts::from_node(node).protocol(keys);
        let ours = |grant: Option<&str>| common::ledger::is_grant_of(grant, ledger);
        !(ours(state.grant.as_deref())
            || (ours(state.last_grant.as_deref())
                && (state.cordoned_by_operator
                    || state.labelled.is_some()
                    || state.tainted.is_some())))
    })
}

/// What to say of a `spec.resumedAt` ahead of the controller's clock (written from a machine
/// whose clock is ahead): it forgives nothing until the clock reaches it.
fn resumed_ahead(object: &RebootPool, now: k8s_openapi::jiff::Timestamp) -> Option<String> {
    let text = object.spec.resumed_at.as_deref()?;
    let at = common::pool::resumed_at_millis(text).ok()?;
    let now = u64::try_from(now.as_millisecond()).unwrap_or(0);
    let ahead = at.checked_sub(now).filter(|ms| *ms > 0)?;
    Some(format!(
        "RebootPool {}'s spec.resumedAt {text} is {} ahead of the controller's clock: it \
         forgives no failure until then; set it to the time now (`kubectl reboot resume --pool \
         {}` does) or fix the clock that wrote it",
        object.name_any(),
        common::duration::duration_text(std::time::Duration::from_millis(ahead)),
        object.name_any()
    ))
}

/// A Warning on an invalid spec (once per generation) and on each node two pools select (once
/// per node and pools).
fn warn_once(
    view: &RunningView<'_>,
    object: &RebootPool,
    overlaps: &BTreeMap<String, Vec<common::pool::OverlappingNode>>,
    events: &Events,
    said: &mut BTreeSet<String>,
) {
    let name = object.name_any();
    if let Some(invalid) = view.plan.invalid.iter().find(|i| i.name == name) {
        let key = format!("invalid/{name}/{:?}", object.metadata.generation);
        if said.insert(key) {
            let note = format!(
                "RebootPool {name} grants no new reboot, and finishes the nodes it holds: {}; \
                 fix its spec",
                invalid.problems.join("; ")
            );
            events.publish_about(object.object_ref(&()), ControllerReason::InvalidSpec, note);
        }
    }
    if let Some(note) = resumed_ahead(object, k8s_openapi::jiff::Timestamp::now()) {
        let key = format!("resumed-ahead/{name}/{:?}", object.metadata.generation);
        if said.insert(key) {
            events.publish_about(object.object_ref(&()), ControllerReason::InvalidSpec, note);
        }
    }
    for overlap in overlaps.get(&name).into_iter().flatten() {
        let key = format!(
            "overlap/{}/{name}/{}",
            overlap.node,
            overlap.pools.join(",")
        );
        if said.insert(key)
            && let Some(node) = view.store.get(&ObjectRef::new(&overlap.node))
        {
            let note = format!(
                "selected by the RebootPools {name} and {}: neither reboots it until their \
                 nodeSelectors no longer both select it",
                overlap.pools.join(" and ")
            );
            events.publish(&node, ControllerReason::PoolOverlap, note);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_resumed_at_ahead_of_the_clock_is_said_and_one_behind_is_not() {
        let pool = |at: &str| {
            let spec = serde_json::from_value(serde_json::json!({"resumedAt": at})).unwrap();
            RebootPool::new("gpu", spec)
        };
        let now: k8s_openapi::jiff::Timestamp = "2026-12-07T12:00:00Z".parse().unwrap();
        let note = resumed_ahead(&pool("2026-12-07T13:30:00Z"), now).expect("ahead");
        assert!(
            note.contains("1h 30m ahead") || note.contains("1h30m ahead"),
            "{note}"
        );
        assert!(note.contains("kubectl reboot resume --pool gpu"), "{note}");
        assert_eq!(resumed_ahead(&pool("2026-12-07T11:00:00Z"), now), None);
        assert_eq!(resumed_ahead(&pool("2026-12-07T12:00:00Z"), now), None);
    }
}
