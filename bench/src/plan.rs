//! The sizes of each scenario: the full benchmark of issue 8, or the reduced CI mode.

use std::time::Duration;

#[derive(Debug, Clone)]
pub struct Plan {
    pub quick: bool,
    /// Promotion latency: idle nodes without agents, trials, and untimed warm-up trials.
    pub latency_nodes: usize,
    pub latency_trials: usize,
    pub warmup_trials: usize,
    /// Rolling reboot: simulated nodes with real agents, `--max-unavailable`, reboot time.
    pub makespan_nodes: usize,
    pub makespan_max_unavailable: usize,
    pub reboot: Duration,
    /// Requests per reboot: reboots of one node, each counted on its own.
    pub counted_reboots: usize,
    /// Quiet time after each counted reboot, so that trailing requests (Events) are counted.
    pub settle: Duration,
    /// Scale: fleet sizes, the one whose memory and CPU are the `_5000` figures, promotion
    /// trials at each size, and the window over which the controller's CPU is measured.
    pub scale_steps: Vec<usize>,
    pub scale_reference: usize,
    pub scale_trials: usize,
    pub cpu_window: Duration,
    /// Each node reports its status once per this period (a kubelet's default
    /// nodeStatusReportFrequency is 5 minutes), but no fewer than `heartbeat_min_rate` reports
    /// per second in total.
    pub heartbeat_period: Duration,
    pub heartbeat_min_rate: f64,
    /// Idle agent: measured window after a warm-up.
    pub idle: Duration,
}

impl Plan {
    pub fn full() -> Self {
        Self {
            quick: false,
            latency_nodes: 50,
            latency_trials: 200,
            warmup_trials: 5,
            makespan_nodes: 100,
            makespan_max_unavailable: 10,
            reboot: Duration::from_secs(2),
            counted_reboots: 3,
            settle: Duration::from_secs(3),
            scale_steps: vec![1_000, 5_000, 10_000],
            scale_reference: 5_000,
            scale_trials: 100,
            cpu_window: Duration::from_secs(60),
            heartbeat_period: Duration::from_secs(300),
            heartbeat_min_rate: 10.0,
            idle: Duration::from_secs(600),
        }
    }

    /// Every figure, at sizes that take a few minutes on a loaded 2-core machine.
    pub fn quick() -> Self {
        Self {
            quick: true,
            latency_nodes: 5,
            latency_trials: 20,
            warmup_trials: 2,
            makespan_nodes: 6,
            makespan_max_unavailable: 2,
            reboot: Duration::from_secs(1),
            counted_reboots: 1,
            settle: Duration::from_secs(2),
            scale_steps: vec![100, 300],
            scale_reference: 300,
            scale_trials: 10,
            cpu_window: Duration::from_secs(10),
            heartbeat_period: Duration::from_secs(300),
            heartbeat_min_rate: 10.0,
            idle: Duration::from_secs(20),
        }
    }

    /// Status reports per second for a fleet of `nodes`.
    pub fn heartbeat_rate(&self, nodes: usize) -> f64 {
        (nodes as f64 / self.heartbeat_period.as_secs_f64()).max(self.heartbeat_min_rate)
    }
}
