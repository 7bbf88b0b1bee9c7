//! What the decision reads that is not in the API server: when this process first saw each
//! request (for the promotion order) and since when each node has been Ready (for the soak).
//! (Drains and their retry times belong to the `DrainTracker`; what was already said, to the
//! shell's announcer.) Losing it on a restart costs nothing but a possibly different order
//! among waiting requests.

use crate::{
    cache::{nodes::Overlay, sightings::Seen},
    drain::tracker::DrainTracker,
};
use common::{AnnotationKeys, NodeFacts, Request};
use controller_core::{decide::NodeView, ledger::Ledger};
use k8s_openapi::api::core::v1::Node;
use std::{
    collections::{HashMap, HashSet},
    sync::Arc,
};

/// The decision's inputs that only this process knows, turned into the core's views.
#[derive(Debug, Clone, Default)]
pub struct Memory {
    requested_at: HashMap<String, u64>,
    soak: SoakClock,
}
/// What the soak (`--min-ready-seconds`) is measured from: since when each node has been
/// Ready without a break, and when its last completion was first seen (a short reboot may
/// never show NotReady).
#[derive(Debug, Clone, Default)]
pub struct SoakClock {
    ready_since: HashMap<String, u64>,
    /// Per node, the last completed grant (`reboot-last-grant`) and when it was first seen.
    completed_seen: HashMap<String, (String, u64)>,
}

impl SoakClock {
    /// Since when `node` has been Ready without a break and since its last completion was
    /// first seen; `None` while it is not Ready.
    pub fn ready_since(
        &mut self,
        node: &str,
        ready: bool,
        last_grant: Option<&str>,
        now: u64,
    ) -> Option<u64> {
        if !ready {
            self.ready_since.remove(node);
            return None;
        }
        let since = *self.ready_since.entry(node.to_owned()).or_insert(now);
        let completed = last_grant.map(|grant| {
            let seen = self
                .completed_seen
                .entry(node.to_owned())
                .or_insert_with(|| (grant.to_owned(), now));
            if seen.0 != grant {
                *seen = (grant.to_owned(), now);
            }
            seen.1
        });
        Some(completed.map_or(since, |at| at.max(since)))
    }

    /// Forgets the nodes `keep` says are gone.
    pub fn retain(&mut self, keep: impl Fn(&str) -> bool) {
        self.ready_since.retain(|n, _| keep(n));
        self.completed_seen.retain(|n, _| keep(n));
    }
}

/// When the node was told to reboot, in Unix milliseconds: its `reboot-approved-at`, else
/// (`reboot-now` set by a version that did not record it, or a hand edit that does not parse)
/// the time of its grant, which is earlier. Written by the clock of the replica that approved
/// it and compared with ours: `--reboot-timeout` needs the replicas' clocks in step (a
/// replica ahead calls a reboot overdue early, which holds the pool: the safe side).
fn approved_at(
    state: &common::ProtocolState,
    slot: Option<&controller_core::ledger::Slot>,
) -> Option<u64> {
    state
        .approved_at
        .as_deref()
        .and_then(millis)
        .or_else(|| slot.and_then(|s| millis(&s.granted_at)))
}

/// An RFC 3339 time written by the controller, in Unix milliseconds.
fn millis(at: &str) -> Option<u64> {
    let at: k8s_openapi::jiff::Timestamp = at.parse().ok()?;
    u64::try_from(at.as_millisecond()).ok()
}

/// What a round's views are made of besides the nodes.
#[derive(Debug, Clone, Copy)]
pub struct ViewInputs<'a> {
    pub keys: &'a AnnotationKeys,
    pub ledger: &'a Ledger,
    pub drains: &'a DrainTracker,
    pub overlay: &'a Overlay,
    pub now: u64,
    /// When this process first saw each grant of the ledger claimed (or claimed it).
    pub seen: &'a Seen,
}

impl Memory {
    /// The decision core's view of the nodes; forgets nodes and requests that are gone.
    pub fn views(&mut self, nodes: &[Arc<Node>], inputs: ViewInputs<'_>) -> Vec<NodeView> {
        let ViewInputs {
            keys,
            ledger,
            drains,
            overlay,
            now,
            seen,
        } = inputs;
        let views: Vec<NodeView> = nodes
            .iter()
            .map(|node| {
                let facts = NodeFacts::from_node(node);
                let state = facts.protocol(keys);
                let name = facts.name.clone();
                let requested_at = if state.request == Request::Needed {
                    Some(*self.requested_at.entry(name.clone()).or_insert(now))
                } else {
                    self.requested_at.remove(&name);
                    None
                };
                let ready_since = self.soak.ready_since(
                    &name,
                    facts.readiness == common::Readiness::Ready,
                    state.last_grant.as_deref(),
                    now,
                );
                NodeView {
                    requested_at,
                    not_before: drains.not_before(&name),
                    drain: ledger
                        .grant_of(&name)
                        .map(|grant| drains.state(grant, facts.resource_version.as_deref()))
                        .unwrap_or_default(),
                    in_pool: overlay.in_pool(node),
                    shared: overlay.shared(node),
                    zone: overlay.zone_of(node),
                    opt_out: keys.opt_out(node.metadata.labels.as_ref()),
                    ready_since,
                    approved_at: approved_at(&state, ledger.slots.get(&name)),
                    // Since when (this replica's clock) the node has been cordoned for its
                    // grant, for the delays: as this process first saw the claim.
                    claimed_at: ledger
                        .grant_of(&name)
                        .and_then(|grant| seen.get(grant).copied()),
                    drained_at: ledger
                        .grant_of(&name)
                        .and_then(|grant| drains.drained_since(grant)),
                    fresh: overlay.is_fresh(&name, facts.resource_version.as_deref()),
                    facts,
                    state,
                }
            })
            .collect();
        let present: HashSet<&str> = views.iter().map(|v| v.name()).collect();
        self.requested_at
            .retain(|n, _| present.contains(n.as_str()));
        self.soak.retain(|n| present.contains(n));
        views
    }
}
