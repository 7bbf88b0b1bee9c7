//! The agent of one node: what it holds (the API, its settings, the rebooter). What it does
//! lives beside it: the run loop in `run_loop`, one state of the node acted upon in `steps`;
//! both build on this module, and neither on the other's loop.

use crate::{Observed, events::NodeEvents, rebooter::Rebooter, settings::Settings};
use k8s_openapi::api::core::v1::Node;
use kube::{Api, Client};
use std::sync::{Arc, atomic::AtomicBool};

/// The agent of one node.
#[derive(Debug)]
pub struct NodeAgent {
    pub(crate) nodes: Api<Node>,
    pub(crate) events: NodeEvents,
    pub(crate) settings: Settings,
    pub(crate) rebooter: Arc<dyn Rebooter>,
    pub(crate) observed: Observed,
    /// Stopped rebooting (`--max-unproven-reboots`), and said so.
    pub(crate) stopped: AtomicBool,
}

impl NodeAgent {
    pub fn new(
        client: Client,
        settings: Settings,
        rebooter: Arc<dyn Rebooter>,
        observed: Observed,
    ) -> Self {
        Self {
            nodes: Api::all(client.clone()),
            events: NodeEvents::new(client, &settings.node_name, observed.metrics.clone()),
            settings,
            rebooter,
            observed,
            stopped: AtomicBool::new(false),
        }
    }

    pub(crate) fn name(&self) -> &str {
        &self.settings.node_name
    }
}
