//! The sizes of each scenario: the full benchmark, or the reduced CI mode.

use std::time::Duration;

#[derive(Debug, Clone)]
pub struct Sizes {
    pub quick: bool,
    /// Promotion latency at each scale step: batches of trials (each batch gives a p50 and a
    /// p99; the report gives the median of the batches with their range), untimed warm-up
    /// trials before them, and a pause between two batches.
    pub latency_batches: usize,
    pub latency_batch_trials: usize,
    pub warmup_trials: usize,
    pub batch_pause: Duration,
    /// The trials of one fleet size may take this long: when the warm-up trials show that the
    /// planned ones would take longer (a slow controller at a large fleet), each batch has
    /// fewer trials, but no fewer than `latency_min_batch_trials`; the table says how many.
    pub latency_budget: Duration,
    pub latency_min_batch_trials: usize,
    /// Rolling reboot: simulated nodes with real agents, `--max-unavailable`, reboot time, and
    /// how many times the whole pool is rebooted (the makespan is the median of the runs).
    pub makespan_nodes: usize,
    pub makespan_max_unavailable: usize,
    pub reboot: Duration,
    pub makespan_runs: usize,
    /// The soak (`--min-ready-seconds`, whole seconds) of the rolling reboot with a soak.
    pub makespan_soak: Duration,
    /// Requests per reboot: reboots of one node counted in each drain setting, and the pods
    /// on the node that the drain evicts in the setting that has some.
    pub counted_reboots: usize,
    pub evicted_pods: usize,
    /// Quiet time after each counted reboot, so that trailing requests (Events) are counted.
    pub settle: Duration,
    /// Scale: fleet sizes; the one whose memory and CPU are the `_5000` figures; the size of
    /// the large-fleet memory target (measured when it is a step the machine holds, otherwise
    /// extrapolated); the window over which the controller's CPU is measured.
    pub scale_steps: Vec<usize>,
    pub scale_reference: usize,
    pub scale_large: usize,
    pub cpu_window: Duration,
    /// Each node reports its status once per this period (a kubelet's default
    /// nodeStatusReportFrequency is 5 minutes), but no fewer than `heartbeat_min_rate` reports
    /// per second in total.
    pub heartbeat_period: Duration,
    pub heartbeat_min_rate: f64,
    /// A scale step is not started, or its creation stops, when the machine would keep less
    /// memory available than this (the machine may be shared; nothing may be pushed into the
    /// OOM killer), or when creating its nodes would take longer than `create_limit`.
    pub memory_reserve_gib: f64,
    pub create_limit: Duration,
    /// Idle agent: measured window after a warm-up.
    pub idle: Duration,
}

impl Sizes {
    pub fn full() -> Self {
        Self {
            quick: false,
            latency_batches: 5,
            latency_batch_trials: 100,
            warmup_trials: 5,
            batch_pause: Duration::from_secs(3),
            latency_budget: Duration::from_secs(8 * 60),
            latency_min_batch_trials: 20,
            makespan_nodes: 100,
            makespan_max_unavailable: 10,
            reboot: Duration::from_secs(2),
            makespan_runs: 3,
            makespan_soak: Duration::from_secs(1),
            counted_reboots: 3,
            evicted_pods: 3,
            settle: Duration::from_secs(3),
            scale_steps: vec![1_000, 5_000, 20_000, 65_000],
            scale_reference: 5_000,
            scale_large: 65_000,
            cpu_window: Duration::from_secs(60),
            heartbeat_period: Duration::from_secs(300),
            heartbeat_min_rate: 10.0,
            memory_reserve_gib: 3.0,
            create_limit: Duration::from_secs(20 * 60),
            idle: Duration::from_secs(600),
        }
    }

    /// Every figure, at sizes that take about a minute on a loaded 2-core machine.
    pub fn quick() -> Self {
        Self {
            quick: true,
            latency_batches: 2,
            latency_batch_trials: 5,
            warmup_trials: 2,
            batch_pause: Duration::from_millis(200),
            latency_budget: Duration::from_secs(30),
            latency_min_batch_trials: 5,
            makespan_nodes: 6,
            makespan_max_unavailable: 2,
            reboot: Duration::from_secs(1),
            makespan_runs: 2,
            makespan_soak: Duration::from_secs(1),
            counted_reboots: 1,
            evicted_pods: 2,
            settle: Duration::from_secs(1),
            scale_steps: vec![100, 300],
            scale_reference: 300,
            scale_large: 65_000,
            cpu_window: Duration::from_secs(5),
            heartbeat_period: Duration::from_secs(300),
            heartbeat_min_rate: 10.0,
            memory_reserve_gib: 3.0,
            create_limit: Duration::from_secs(120),
            idle: Duration::from_secs(20),
        }
    }

    /// Status reports per second for a fleet of `nodes`.
    pub fn heartbeat_rate(&self, nodes: usize) -> f64 {
        (nodes as f64 / self.heartbeat_period.as_secs_f64()).max(self.heartbeat_min_rate)
    }

    /// Trials per batch at a fleet size where one trial takes `each`: as planned, or fewer so
    /// that the batches fit in the budget, but not fewer than the minimum.
    pub fn batch_trials(&self, each: Duration) -> usize {
        let batches = self.latency_batches.max(1) as f64;
        let fit = self.latency_budget.as_secs_f64() / batches / each.as_secs_f64().max(1e-3);
        (fit as usize).clamp(
            self.latency_min_batch_trials.min(self.latency_batch_trials),
            self.latency_batch_trials,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slow_trials_make_smaller_batches() {
        let sizes = Sizes::full();
        assert_eq!(sizes.batch_trials(Duration::from_millis(100)), 100);
        // 8 minutes for 5 batches of 2 s trials: 48 each.
        assert_eq!(sizes.batch_trials(Duration::from_secs(2)), 48);
        assert_eq!(sizes.batch_trials(Duration::from_secs(60)), 20);
        assert_eq!(Sizes::quick().batch_trials(Duration::from_secs(60)), 5);
    }
}
