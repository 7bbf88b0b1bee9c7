//! The agent's last write to its node, so that the watch's events from before it are not acted
//! on. A watch delivers a node's changes in order: right after the agent writes, the watch may
//! still bring a change made just before (a kubelet's status report). That event shows the
//! node without the agent's write; acting on it would make the write again, which its JSON
//! Patch `test` refuses, for a refused write and a read more. Such events are skipped until the
//! watch brings the agent's own write.

/// The resourceVersion of the agent's last write that the watch has not brought yet.
#[derive(Debug, Default)]
pub(crate) struct OwnWrite {
    awaited: Option<String>,
}

impl OwnWrite {
    /// The agent wrote the node; `version` is the resourceVersion the write returned.
    pub(crate) fn wrote(&mut self, version: Option<String>) {
        self.awaited = version;
    }

    /// The watch starts over: what its list brings is the node as it is now.
    pub(crate) fn relisted(&mut self) {
        self.awaited = None;
    }

    /// Whether a watch event that shows the node at `version` is from before the agent's last
    /// write (skip it). The event of the write itself ends the wait.
    pub(crate) fn predates(&mut self, version: Option<&str>) -> bool {
        match (self.awaited.as_deref(), version) {
            (Some(awaited), Some(version)) if awaited != version => true,
            (Some(_), Some(_)) => {
                self.awaited = None;
                false
            }
            _ => false,
        }
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
        own.relisted();
        assert!(!own.predates(Some("12")));
        own.wrote(None);
        assert!(
            !own.predates(Some("13")),
            "a write without a version waits for nothing"
        );
    }
}
