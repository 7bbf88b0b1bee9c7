//! Whether a rollout is under way, to say when one starts, stops and finishes. Pure.

/// A rollout runs from the first grant while the pool had none under way until no node waits
/// for or holds a slot.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rollout {
    active: bool,
    /// Why new grants are held, as last said (said again only when it changes).
    stopped: Option<&'static str>,
}

impl Rollout {
    /// A leader that takes over a pool with slots held is in the middle of a rollout: it does
    /// not announce a start, and it announces the finish.
    pub fn taken_over(slots_held: bool) -> Self {
        Self {
            active: slots_held,
            stopped: None,
        }
    }

    pub fn active(&self) -> bool {
        self.active
    }

    /// New slots were granted: true when that starts a rollout. Grants mean nothing holds
    /// them any more.
    pub fn granted(&mut self) -> bool {
        self.stopped = None;
        !std::mem::replace(&mut self.active, true)
    }

    /// What holds new grants while nodes wait (`None`: nothing): the reason, when it is news
    /// about a rollout under way.
    pub fn held(&mut self, why: Option<&'static str>) -> Option<&'static str> {
        if !self.active || why == self.stopped {
            return None;
        }
        self.stopped = why;
        why
    }

    /// Whether the round leaves nothing to do (no node waits, no slot held): true when that
    /// finishes a rollout.
    pub fn idle(&mut self, nothing_left: bool) -> bool {
        if !(self.active && nothing_left) {
            return false;
        }
        *self = Self::default();
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rollout_starts_once_stops_once_per_reason_and_finishes_once() {
        let mut rollout = Rollout::default();
        assert!(!rollout.idle(true), "nothing to finish");
        assert_eq!(rollout.held(Some("paused")), None, "nothing to stop");
        assert!(rollout.granted(), "the first grant starts it");
        assert!(!rollout.granted(), "later grants do not");
        assert_eq!(rollout.held(Some("paused")), Some("paused"));
        assert_eq!(rollout.held(Some("paused")), None, "said once");
        assert_eq!(rollout.held(Some("window_closed")), Some("window_closed"));
        assert_eq!(rollout.held(None), None, "a lifted hold is no stop");
        assert_eq!(
            rollout.held(Some("paused")),
            Some("paused"),
            "a new episode"
        );
        assert!(!rollout.granted(), "going on is no new start");
        assert!(!rollout.idle(false));
        assert!(rollout.idle(true), "finished");
        assert!(!rollout.idle(true), "once");
        assert!(rollout.granted(), "the next rollout");
        assert!(
            Rollout::taken_over(true).idle(true),
            "a new leader finishes it"
        );
        assert!(!Rollout::taken_over(true).granted(), "without starting it");
    }
}
