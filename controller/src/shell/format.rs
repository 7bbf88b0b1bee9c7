//! What a round says about state in a format this build does not know (a newer operator wrote
//! it): an error in the log, a Warning Event naming the version found, the one known and the
//! fix, and the `unknown_format` gauge. The decision core already leaves such state alone.

use super::*;
use common::format::{CURRENT, UnknownFormat};

impl Shell {
    /// Said once per value found: the ledger cannot be read, so every grant is held.
    pub(super) fn warn_unknown_ledger_format(&mut self, found: Option<&str>) {
        self.metrics
            .unknown_format("ledger", usize::from(found.is_some()));
        if found == self.warned_format.as_deref() {
            return;
        }
        self.warned_format = found.map(str::to_owned);
        let Some(found) = found else {
            tracing::info!("the slot ledger is in a format this controller knows again");
            return;
        };
        let unknown = UnknownFormat {
            found: found.to_owned(),
        };
        let note = format!(
            "the slot ledger ({}) is in {unknown}. Until then this controller grants, releases \
             and drives nothing (the ledger is not read as empty)",
            common::ledger::FORMAT_ANNOTATION
        );
        tracing::error!(found, known = CURRENT, "{note}");
        self.events
            .publish_about(self.ledger_store.reference(), Reason::UnknownFormat, note);
    }

    /// Nodes whose protocol annotations are in a format this build does not know: said once
    /// per episode; counted as unavailable, never driven.
    pub(super) fn announce_unknown_format(
        &mut self,
        decision: &Decision,
        nodes: &HashMap<&str, &Arc<Node>>,
    ) {
        self.metrics
            .unknown_format("node", decision.unknown_format.len());
        for name in self.memory.first_unknown_format(&decision.unknown_format) {
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
