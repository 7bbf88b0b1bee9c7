//! What a round says about nodes in a format this build does not know (a newer operator wrote
//! it): an error in the log, a Warning Event naming the version found, the one known and the
//! fix, and the `unknown_format` gauge. The decision core already leaves such state alone.
//! (The ledger's copy says the same of the ledger.)

use super::Shell;
use crate::cluster::events::Reason;
use common::{NodeFacts, format::CURRENT};
use controller_core::decide::Decision;
use k8s_openapi::api::core::v1::Node;
use std::{collections::HashMap, sync::Arc};

impl Shell {
    /// Nodes whose protocol annotations are in a format this build does not know: said once
    /// per episode; counted as unavailable, never driven.
    pub(super) fn announce_unknown_format(
        &mut self,
        decision: &Decision,
        nodes: &HashMap<&str, &Arc<Node>>,
    ) {
        self.metrics
            .unknown_format("node", decision.unknown_format.len());
        for name in self.said.first_unknown_format(&decision.unknown_format) {
            let Some(node) = nodes.get(name.as_str()) else {
                continue;
            };
            let state = NodeFacts::from_node(node).protocol(&self.keys);
            let Some(unknown) = state.unknown_format() else {
                continue;
            };
            let note = format!(
                "{}={:?}: this node's reboot annotations are in {unknown}. Until then this \
                 controller counts the node as unavailable and does not grant, drive or \
                 release it",
                self.keys.protocol_version, unknown.found
            );
            tracing::error!(node = %name, found = %unknown.found, known = CURRENT, "{note}");
            self.events.publish(node, Reason::UnknownFormat, note);
        }
    }
}
