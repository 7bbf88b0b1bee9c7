//! The controller's two clocks, behind one small trait so that the model test can drive them:
//! the wall clock (maintenance windows, the times written on nodes and in the ledger) and the
//! decision clock (milliseconds since start: soaks, retries, how long a request has waited).

use k8s_openapi::jiff::Timestamp;
use std::{fmt::Debug, time::Instant};

pub trait Clock: Send + Sync + Debug {
    /// The wall clock.
    fn now(&self) -> Timestamp;
    /// Milliseconds on the decision clock, which never goes back.
    fn elapsed_ms(&self) -> u64;
}

/// The machine's clocks.
#[derive(Debug)]
pub struct SystemClock {
    started: Instant,
}

impl Default for SystemClock {
    fn default() -> Self {
        Self {
            started: Instant::now(),
        }
    }
}

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        Timestamp::now()
    }

    fn elapsed_ms(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX)
    }
}
