//! When new slots may be granted: the maintenance windows (`--reboot-window`) and the
//! administrator's pause (`reboot-paused=true` on the ledger Lease). Pure: the time and the
//! pause are arguments; the shell reads them and passes the resulting hold to the core.

use crate::{decide::Hold, window::Windows};
use common::events::ControllerReason as Reason;
use jiff::Timestamp;
use std::time::Duration;

#[derive(Debug, Clone, Default)]
pub struct Schedule {
    pub windows: Windows,
    pub finish_after_window: bool,
    /// `--min-ready-seconds`: how long a completed node keeps its slot, Ready.
    pub min_ready: Duration,
    /// `--reboot-timeout`: how long a node told to reboot may take to complete.
    pub reboot_timeout: Duration,
    /// `--give-up-after`: when a node told to reboot that has not completed is given up;
    /// `None`: never (an administrator does it).
    pub give_up_after: Option<Duration>,
    /// `--drain-delay`: from the cordon to the drain's start.
    pub drain_delay: Duration,
    /// `--reboot-delay`: from the drain's end to `reboot-now`.
    pub reboot_delay: Duration,
    /// `--reboot-estimate`: how long a reboot takes, grant to completion, before the pool has
    /// a history; with windows, a reboot that would not end before the window closes is not
    /// started. `None`: no such check.
    pub reboot_estimate: Option<Duration>,
    /// `--drain-timeout` with the drain on: how long a drain may take before it fails.
    pub drain_timeout: Option<Duration>,
}

impl Schedule {
    /// The delays as the decision core takes them (milliseconds).
    pub fn delays(&self) -> crate::decide::Delays {
        let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        crate::decide::Delays {
            drain: ms(self.drain_delay),
            reboot: ms(self.reboot_delay),
        }
    }

    /// The longest a reboot that went well may take from its grant to the release of its slot:
    /// the drain's timeout, both delays, the reboot timeout and the soak. A longer one was
    /// overdue or NotReady in its soak: a failure, not a length to plan windows with.
    pub fn longest_reboot(&self) -> Duration {
        [
            self.drain_timeout.unwrap_or_default(),
            self.drain_delay,
            self.reboot_delay,
            self.reboot_timeout,
            self.min_ready,
        ]
        .into_iter()
        .fold(Duration::ZERO, Duration::saturating_add)
    }

    /// Why no new grant may be made, if so. A pause outranks a closed window: it is the one
    /// an administrator must lift by hand.
    pub fn hold(paused: bool, window_open: bool) -> Option<Hold> {
        if paused {
            Some(Hold::Paused)
        } else if !window_open {
            Some(Hold::OutsideWindow)
        } else {
            None
        }
    }

    /// When the next window opens, if it is closed at `now`.
    pub fn next_opening(&self, now: Timestamp) -> Option<Timestamp> {
        self.windows.next_opening(now).filter(|at| *at > now)
    }

    /// How long until the next window opens, to wake for it rather than poll.
    pub fn until_next_opening(&self, now: Timestamp) -> Option<Duration> {
        let at = self.next_opening(now)?;
        Duration::try_from(at.duration_since(now)).ok()
    }

    /// How long until a window opens or closes, to wake for it rather than poll.
    pub fn until_next_change(&self, now: Timestamp) -> Option<Duration> {
        let at = self.windows.next_change(now)?;
        Duration::try_from(at.duration_since(now)).ok()
    }

    /// The Event a waiting node gets, and its note (the gates give their own).
    pub fn waiting_event(&self, hold: Option<Hold>, now: Timestamp) -> Option<(Reason, String)> {
        match hold? {
            Hold::Unhealthy | Hold::BlockingPod => None,
            Hold::Paused => Some((
                Reason::Paused,
                "reboot requested; the pool is paused (reboot-paused=true on the ledger Lease): \
                 no new reboot starts until an administrator removes it"
                    .to_owned(),
            )),
            Hold::OutsideWindow => Some(self.closed_event(now, "reboot requested; ")),
        }
    }

    /// Why the windows are closed at `now` (a blackout, or no window open), and until when:
    /// the Event's reason and its note, after `prefix`.
    pub fn closed_event(&self, now: Timestamp, prefix: &str) -> (Reason, String) {
        let next = self
            .next_opening(now)
            .map_or_else(|| "never".to_owned(), |t| t.to_string());
        match self.windows.blackout_at(now) {
            Some(blackout) => (
                Reason::Blackout,
                format!(
                    "{prefix}the blackout `{blackout}` holds new reboots, whatever the \
                     maintenance windows say; they may start again at {next}"
                ),
            ),
            None => (
                Reason::OutsideWindow,
                format!(
                    "{prefix}waiting for the next maintenance window ({}), which opens at \
                     {next}",
                    self.windows
                ),
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(utc: &str) -> Timestamp {
        utc.parse().unwrap()
    }

    #[test]
    fn a_pause_outranks_a_closed_window_and_no_window_is_always_open() {
        let schedule = Schedule {
            windows: crate::window::Windows::new(vec!["Mon 22:00-23:00".parse().unwrap()]),
            finish_after_window: true,
            min_ready: Duration::ZERO,
            reboot_timeout: Duration::from_secs(1800),
            give_up_after: None,
            drain_delay: Duration::ZERO,
            reboot_delay: Duration::ZERO,
            reboot_estimate: None,
            drain_timeout: Some(Duration::from_secs(900)),
        };
        assert_eq!(schedule.longest_reboot(), Duration::from_secs(2700));
        let monday_noon = at("2026-11-23T12:00:00Z");
        let open = |t: Timestamp| schedule.windows.is_open(t);
        assert_eq!(
            Schedule::hold(false, open(monday_noon)),
            Some(Hold::OutsideWindow)
        );
        assert_eq!(Schedule::hold(true, open(monday_noon)), Some(Hold::Paused));
        assert_eq!(
            Schedule::hold(false, open(at("2026-11-23T22:30:00Z"))),
            None
        );
        assert_eq!(
            schedule.until_next_opening(monday_noon),
            Some(Duration::from_secs(10 * 3600))
        );
        let (reason, note) = schedule
            .waiting_event(Some(Hold::OutsideWindow), monday_noon)
            .unwrap();
        assert_eq!(reason, Reason::OutsideWindow);
        assert!(note.contains("2026-11-23T22:00:00Z"), "{note}");
        let frozen = Schedule {
            windows: schedule
                .windows
                .clone()
                .with_blackouts(vec!["2026-11-23..2026-11-24".parse().unwrap()]),
            ..schedule.clone()
        };
        let (reason, note) = frozen
            .waiting_event(Some(Hold::OutsideWindow), at("2026-11-23T22:30:00Z"))
            .unwrap();
        assert_eq!(reason, Reason::Blackout, "{note}");
        assert!(note.contains("`2026-11-23..2026-11-24`"), "{note}");
        assert!(
            note.contains("2026-11-30T22:00:00Z"),
            "the next window after it: {note}"
        );
        assert!(Schedule::default().windows.is_open(monday_noon));
        assert_eq!(Schedule::default().until_next_opening(monday_noon), None);
    }
}
