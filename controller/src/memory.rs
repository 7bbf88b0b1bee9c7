//! What the controller remembers between rounds that is not in the API server: when it first
//! saw each request (for the promotion order), which Events it already sent, drain progress
//! and retry times. Losing all of it on a restart costs nothing but a possibly different
//! order among waiting requests and a repeated Event.

use crate::decide::{DrainState, NodeView};
use common::{AnnotationKeys, NodeFacts, Request};
use k8s_openapi::api::core::v1::Node;
use std::{
    collections::{HashMap, HashSet},
    sync::Arc,
};

#[derive(Debug, Default)]
pub struct Memory {
    requested_at: HashMap<String, u64>,
    announced_waiting: HashSet<String>,
    warned_invalid: HashMap<String, String>,
    pub drains: HashMap<String, DrainState>,
    pub not_before: HashMap<String, u64>,
    /// Failed drains of each node, for the backoff before the next attempt.
    pub drain_failures: HashMap<String, u32>,
}

impl Memory {
    /// The decision core's view of the pool; forgets nodes and requests that are gone.
    pub fn views(&mut self, nodes: &[Arc<Node>], keys: &AnnotationKeys, now: u64) -> Vec<NodeView> {
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
                if !matches!(state.request, Request::Invalid(_)) {
                    self.warned_invalid.remove(&name);
                }
                NodeView {
                    requested_at,
                    not_before: self.not_before.get(&name).copied(),
                    drain: self.drains.get(&name).copied().unwrap_or_default(),
                    facts,
                    state,
                }
            })
            .collect();
        let present: HashSet<&str> = views.iter().map(|v| v.name()).collect();
        self.requested_at
            .retain(|n, _| present.contains(n.as_str()));
        self.drains.retain(|n, _| present.contains(n.as_str()));
        self.not_before.retain(|n, _| present.contains(n.as_str()));
        self.drain_failures
            .retain(|n, _| present.contains(n.as_str()));
        views
    }

    /// True the first time a node is seen waiting for a slot, for its `Requested` Event.
    pub fn first_wait(&mut self, node: &str) -> bool {
        self.announced_waiting.insert(node.to_owned())
    }

    /// True the first time this invalid value is seen on this node.
    pub fn first_warning(&mut self, node: &str, value: &str) -> bool {
        self.warned_invalid
            .insert(node.to_owned(), value.to_owned())
            .as_deref()
            != Some(value)
    }
}
