//! The agent's last write to its node, so that the watch's events from before it are not acted
//! on. A watch delivers a node's changes in order: right after the agent writes, the watch may
//! still bring a change made just before (a kubelet's status report). That event shows the
//! node without the agent's write; acting on it would make the write again, which its JSON
//! Patch `test` refuses, for a refused write and a read more.
//!
//! "Before" is an order of resourceVersions (comparable integers since Kubernetes 1.35,
//! KEP-5504), not a wait for the write's own event: a write that changed nothing brings no
//! event, and an agent waiting for one would ignore its node until the watch relisted. Where
//! the versions are not integers, every event is acted on, as before this existed.

use common::ledger::version_order;

/// The resourceVersion of the agent's last write.
#[derive(Debug, Default)]
pub(crate) struct OwnWrite {
    written: Option<String>,
}

impl OwnWrite {
    /// The agent wrote the node; `version` is the resourceVersion the write returned.
    pub(crate) fn wrote(&mut self, version: Option<String>) {
        self.written = version;
    }

    /// Whether a watch event that shows the node at `version` is from before the agent's last
    /// write (skip it).
    pub(crate) fn predates(&self, version: Option<&str>) -> bool {
        version_order(version, self.written.as_deref()).is_some_and(|order| order.is_lt())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_before_the_write_are_skipped_until_the_write_itself() {
        let mut own = OwnWrite::default();
        assert!(
            !own.predates(Some("5")),
            "nothing written: every event counts"
        );
        own.wrote(Some("8".into()));
        assert!(
            own.predates(Some("7")),
            "a status report from before the write"
        );
        assert!(!own.predates(Some("8")), "the write itself");
        assert!(!own.predates(Some("9")), "and what comes after it");
    }

    #[test]
    fn a_relist_or_an_event_without_a_version_is_acted_on() {
        let mut own = OwnWrite::default();
        own.wrote(Some("8".into()));
        assert!(!own.predates(None));
        assert!(
            !own.predates(Some("12")),
            "a relist brings the node as it is now"
        );
        own.wrote(None);
        assert!(
            !own.predates(Some("13")),
            "a write without a version waits for nothing"
        );
    }

    #[test]
    fn a_write_whose_own_event_never_comes_does_not_blind_the_agent() {
        let mut own = OwnWrite::default();
        // The write changed nothing: it returned the version the watch has already brought.
        own.wrote(Some("8".into()));
        assert!(!own.predates(Some("9")), "the next change is acted on");
        assert!(!own.predates(Some("10")));
    }

    #[test]
    fn versions_that_are_not_integers_are_all_acted_on() {
        let mut own = OwnWrite::default();
        own.wrote(Some("b".into()));
        assert!(!own.predates(Some("a")));
        assert!(!own.predates(Some("c")));
    }
}
