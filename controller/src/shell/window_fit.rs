//! `--reboot-estimate`: how long the pool's reboots take, grant to completion, as this
//! controller measured them, and whether one started now would end before the window closes.

use super::Shell;
use controller_core::decide::WindowFit;
use std::collections::VecDeque;

/// The reboots measured at most: the recent ones say how the pool reboots now.
const KEPT: usize = 20;
/// Fewer than this say nothing yet: the configured estimate alone applies.
const ENOUGH: usize = 3;

/// The lengths of the pool's last reboots, in milliseconds, grant to completion.
#[derive(Debug, Clone, Default)]
pub(super) struct RebootLengths(VecDeque<u64>);

impl RebootLengths {
    pub(super) fn record(&mut self, ms: u64) {
        if self.0.len() == KEPT {
            self.0.pop_front();
        }
        self.0.push_back(ms);
    }

    /// The 90th percentile of the lengths kept, once there are enough.
    pub(super) fn high(&self) -> Option<u64> {
        if self.0.len() < ENOUGH {
            return None;
        }
        let mut sorted: Vec<u64> = self.0.iter().copied().collect();
        sorted.sort_unstable();
        let rank = (sorted.len() * 9).div_ceil(10);
        sorted.get(rank.saturating_sub(1)).copied()
    }

    pub(super) fn len(&self) -> usize {
        self.0.len()
    }
}

impl Shell {
    /// With `--reboot-estimate` and a window open that closes: the time it has left and the
    /// time a reboot needs (the larger of the estimate and the pool's recent reboots).
    pub(super) fn window_fit(&self) -> Option<WindowFit> {
        let estimate = self.schedule.reboot_estimate?;
        let closes = self.schedule.windows.closes_at(self.clock.now())?;
        let estimate = u64::try_from(estimate.as_millis()).unwrap_or(u64::MAX);
        Some(WindowFit {
            closes_at: u64::try_from(closes.as_millisecond()).unwrap_or_default(),
            needs: self
                .reboot_lengths
                .high()
                .map_or(estimate, |h| h.max(estimate)),
        })
    }

    /// A slot released as completed: the reboot's length, from its grant (the granting
    /// replica's clock, never before this one first saw it: `sightings`) to now.
    pub(super) fn measure_reboot(&mut self, granted_at: &str) {
        let Ok(granted) = granted_at.parse::<k8s_openapi::jiff::Timestamp>() else {
            return;
        };
        let took = self.clock.now().duration_since(granted);
        // Overdue or NotReady in its soak (or held across a window's close): a failure, not
        // a length. Counted, one such reboot would keep every later one from fitting.
        let longest = self.schedule.longest_reboot();
        if took.as_secs_f64() > longest.as_secs_f64() {
            tracing::debug!(
                ?took,
                ?longest,
                "a reboot longer than it may take is not measured"
            );
            return;
        }
        if let Ok(ms) = u64::try_from(took.as_millis()) {
            self.reboot_lengths.record(ms);
        }
    }

    /// The waiting nodes' note while a reboot would not fit before the window closes.
    pub(super) fn too_late_note(&self, fit: &WindowFit) -> String {
        let minutes = |ms: u64| ms.div_ceil(60_000);
        let left = fit.closes_at.saturating_sub(self.wall_ms());
        let measured = match self.reboot_lengths.len() {
            n if n >= ENOUGH => format!("the 90th percentile of the pool's last {n} reboots"),
            _ => "--reboot-estimate".to_owned(),
        };
        format!(
            "{}{}: a reboot takes about {} min ({measured}) and the window closes in {} min, so \
             one started now would not end in it",
            common::events::NOTE_REQUESTED,
            common::events::WAITING_FOR_FIT,
            minutes(fit.needs),
            minutes(left)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_high_length_is_the_90th_percentile_of_the_last_twenty_once_there_are_three() {
        let mut lengths = RebootLengths::default();
        lengths.record(5);
        lengths.record(7);
        assert_eq!(lengths.high(), None, "two say nothing yet");
        lengths.record(6);
        assert_eq!(lengths.high(), Some(7));
        for ms in 1..=20 {
            lengths.record(ms * 1000);
        }
        assert_eq!(lengths.len(), 20, "the oldest forgotten");
        assert_eq!(lengths.high(), Some(18_000));
    }
}
