//! What the controller remembers between rounds that is not in the API server: when it first
//! saw each request (for the promotion order) and which Events it already sent. (Drains and
//! their retry times belong to the `DrainTracker`.) Losing all of it on a restart costs
//! nothing but a possibly different order among waiting requests and a repeated Event.

use crate::{
    cache::{nodes::Overlay, sightings::Seen},
    drain::tracker::DrainTracker,
};
use common::{AnnotationKeys, NodeFacts, Request};
use controller_core::{
    decide::{NodeView, Unexpected},
    ledger::Ledger,
};
use k8s_openapi::api::core::v1::Node;
use std::{
    collections::{HashMap, HashSet},
    sync::Arc,
};

#[derive(Debug, Clone, Default)]
pub struct Memory {
    requested_at: HashMap<String, u64>,
    soak: SoakClock,
    /// Per waiting node, the reason it was last told it waits.
    announced_waiting: HashMap<String, &'static str>,
    /// Per granted node held back by a fence, the reason it was told so in this episode.
    announced_held: HashMap<String, &'static str>,
    warned_invalid: HashMap<String, String>,
    not_ready_after_reboot: HashSet<String>,
    reboots_overdue: HashSet<String>,
    /// Nodes carrying a grant that is not this ledger's, as of the last round.
    foreign: HashSet<String>,
    /// Nodes in a format this build does not know, as of the last round.
    unknown_format: HashSet<String>,
    /// Values typed by hand read otherwise than written, per node, as of the last round.
    unexpected: HashSet<(String, Unexpected)>,
    /// `--dry-run`: what was said already, per node.
    said_dry_run: HashSet<(String, String)>,
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

/// Of the nodes in `now`, those not in `last`; `last` becomes `now`.
fn first_in_episode<T: Clone + Eq + std::hash::Hash>(last: &mut HashSet<T>, now: &[T]) -> Vec<T> {
    let fresh = now.iter().filter(|n| !last.contains(*n)).cloned().collect();
    *last = now.iter().cloned().collect();
    fresh
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
                    self.announced_waiting.remove(&name);
                    None
                };
                let ready_since = self.soak.ready_since(
                    &name,
                    facts.readiness == common::Readiness::Ready,
                    state.last_grant.as_deref(),
                    now,
                );
                if !matches!(state.request, Request::Invalid(_)) {
                    self.warned_invalid.remove(&name);
                }
                NodeView {
                    requested_at,
                    not_before: drains.not_before(&name),
                    drain: ledger
                        .grant_of(&name)
                        .map(|grant| drains.state(grant, facts.resource_version.as_deref()))
                        .unwrap_or_default(),
                    in_pool: overlay.in_pool(node),
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
        // A round views only the nodes in the protocol: one that left it since the last
        // round is no longer viewed, so what was said about it is forgotten here.
        let requested = &self.requested_at;
        self.announced_waiting
            .retain(|n, _| requested.contains_key(n));
        self.warned_invalid
            .retain(|n, _| present.contains(n.as_str()));
        views
    }

    /// Of the nodes NotReady after their reboot now, those that were not in the last round
    /// (a Warning once per episode).
    pub fn first_not_ready_after_reboot(&mut self, now: &[String]) -> Vec<String> {
        first_in_episode(&mut self.not_ready_after_reboot, now)
    }

    /// Of the nodes past their reboot timeout now, those that were not in the last round.
    pub fn first_reboots_overdue(&mut self, now: &[String]) -> Vec<String> {
        first_in_episode(&mut self.reboots_overdue, now)
    }

    /// Of the granted nodes held back now (with the reason of their Event), those not told so
    /// yet: once per reason and episode. A node no longer held is forgotten.
    pub fn first_held(&mut self, held: &[(String, &'static str)]) -> Vec<String> {
        self.announced_held
            .retain(|n, _| held.iter().any(|(h, _)| h == n));
        held.iter()
            .filter(|(name, reason)| {
                self.announced_held.insert(name.clone(), reason) != Some(reason)
            })
            .map(|(name, _)| name.clone())
            .collect()
    }

    /// Of the nodes carrying a grant that is not ours now, those that were not in the last
    /// round (said once per episode).
    pub fn first_foreign(&mut self, now: &[String]) -> Vec<String> {
        first_in_episode(&mut self.foreign, now)
    }

    /// Of the nodes in a format this build does not know now, those that were not in the last
    /// round (said once per episode).
    pub fn first_unknown_format(&mut self, now: &[String]) -> Vec<String> {
        first_in_episode(&mut self.unknown_format, now)
    }

    /// Of the values typed by hand that a round read otherwise than written, those that were
    /// not there in the last round (a Warning once per value and episode).
    pub fn first_unexpected(&mut self, now: &[(String, Unexpected)]) -> Vec<(String, Unexpected)> {
        first_in_episode(&mut self.unexpected, now)
    }

    /// True the first time a node is seen waiting for `reason` (a slot, the window, the
    /// end of a pause), for its Event: once per reason and wait.
    pub fn first_wait(&mut self, node: &str, reason: &'static str) -> bool {
        self.announced_waiting.insert(node.to_owned(), reason) != Some(reason)
    }

    /// True the first time `--dry-run` says `what` about `node`.
    pub fn first_dry_run(&mut self, node: &str, what: &str) -> bool {
        self.said_dry_run.insert((node.to_owned(), what.to_owned()))
    }

    /// True the first time this invalid value is seen on this node.
    pub fn first_warning(&mut self, node: &str, value: &str) -> bool {
        self.warned_invalid
            .insert(node.to_owned(), value.to_owned())
            .as_deref()
            != Some(value)
    }
}
