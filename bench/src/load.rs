//! The machine's load during a scenario, so that a figure measured on a busy machine shows as
//! such: the 1-minute load average of `/proc/loadavg`, sampled in the background from the
//! scenario's start to its end.

use crate::stats::Spread;
use std::{
    sync::{Arc, Mutex},
    time::Duration,
};
use tokio::task::JoinHandle;

/// Between two samples: the 1-minute average moves little faster than this.
const EVERY: Duration = Duration::from_secs(5);

/// The 1-minute load average over a scenario: median and range of its samples.
pub type Load = Spread;

/// Samples the load until [`finish`](Self::finish).
#[derive(Debug)]
pub struct LoadSampler {
    samples: Arc<Mutex<Vec<f64>>>,
    task: JoinHandle<()>,
}

impl LoadSampler {
    pub fn start() -> Self {
        let samples: Arc<Mutex<Vec<f64>>> = Arc::default();
        let recorded = samples.clone();
        let task = tokio::spawn(async move {
            let mut tick = tokio::time::interval(EVERY);
            loop {
                tick.tick().await;
                if let Some(load) = one_minute() {
                    recorded
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push(load);
                }
            }
        });
        Self { samples, task }
    }

    /// The load seen so far, with one last sample taken now.
    pub fn finish(self) -> Option<Load> {
        self.task.abort();
        let mut samples = self
            .samples
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        samples.extend(one_minute());
        Spread::of(&samples)
    }
}

impl Drop for LoadSampler {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The first field of `/proc/loadavg`; `None` where there is no such file.
fn one_minute() -> Option<f64> {
    parse(&std::fs::read_to_string("/proc/loadavg").ok()?)
}

fn parse(loadavg: &str) -> Option<f64> {
    loadavg.split_whitespace().next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_one_minute_average_is_read() {
        assert_eq!(parse("1.39 1.38 1.62 2/345 6789\n"), Some(1.39));
        assert_eq!(parse(""), None);
    }

    #[tokio::test]
    async fn a_sampler_reports_at_least_one_sample() {
        let load = LoadSampler::start().finish().expect("a load on Linux");
        assert!(load.n >= 1 && load.min >= 0.0, "{load:?}");
    }
}
