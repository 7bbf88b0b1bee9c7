//! Backoff between retries of a failed step: 1 s doubling up to 1 min (backon's schedule).

use backon::{BackoffBuilder, ExponentialBackoff, ExponentialBuilder};
use std::time::Duration;

const FIRST: Duration = Duration::from_secs(1);
const MAX: Duration = Duration::from_secs(60);

fn schedule() -> ExponentialBackoff {
    ExponentialBuilder::new()
        .with_min_delay(FIRST)
        .with_max_delay(MAX)
        .without_max_times()
        .build()
}

#[derive(Debug)]
pub struct Backoff {
    delays: ExponentialBackoff,
}

impl Default for Backoff {
    fn default() -> Self {
        Self { delays: schedule() }
    }
}

impl Backoff {
    pub fn next_delay(&mut self) -> Duration {
        self.delays.next().unwrap_or(MAX)
    }

    pub fn reset(&mut self) {
        self.delays = schedule();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_up_to_a_minute_and_resets() {
        let mut backoff = Backoff::default();
        let delays: Vec<u64> = (0..9).map(|_| backoff.next_delay().as_secs()).collect();
        assert_eq!(delays, [1, 2, 4, 8, 16, 32, 60, 60, 60]);
        backoff.reset();
        assert_eq!(backoff.next_delay(), FIRST);
    }
}
