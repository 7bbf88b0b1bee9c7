//! The targets the report judges (docs/src/performance.md), in one place: the table
//! states them, and the scale scenario finds the largest fleet within them.

/// Promotion latency, drain off, status reports going on: at every fleet size.
pub const P50_MS: f64 = 20.0;
pub const P99_MS: f64 = 100.0;
/// The controller's CPU with the reference fleet (5,000 realistic nodes) and its status reports.
pub const CPU_PERCENT: f64 = 3.0;
/// The fleet of the CPU target and of the first memory target.
pub const REFERENCE_NODES: usize = 5_000;
/// The controller's peak RSS up to the reference fleet, and at the large fleet (65,000).
pub const RSS_REFERENCE_MIB: f64 = 64.0;
pub const RSS_LARGE_MIB: f64 = 256.0;
/// The largest fleet measured within the targets must be at least this.
pub const LARGEST_FLEET: usize = 20_000;
/// API requests per reboot, controller and agent: drain off; drain on without a pod to evict;
/// added by each evicted pod.
pub const REQUESTS_PER_REBOOT: f64 = 10.0;
pub const REQUESTS_PER_DRAINED_REBOOT: f64 = 12.0;
pub const REQUESTS_PER_EVICTED_POD: f64 = 2.0;
/// Rolling reboot makespan, as a multiple of the ideal ceil(N/k) x T; with a soak, of
/// ceil(N/k) x (T + soak).
pub const MAKESPAN_RATIO: f64 = 1.05;
/// The idle agent.
pub const AGENT_RSS_MIB: f64 = 10.0;
pub const AGENT_REQUESTS_PER_HOUR: f64 = 15.0;

/// The controller's memory limit for a fleet of `nodes`: the reference target up to the
/// reference fleet, the large-fleet target above it.
pub fn rss_limit_mib(nodes: usize) -> f64 {
    if nodes <= REFERENCE_NODES {
        RSS_REFERENCE_MIB
    } else {
        RSS_LARGE_MIB
    }
}

/// Whether a fleet size's figures are within the targets: promotion latency (the medians over
/// the batches) and the controller's peak RSS.
pub fn within(nodes: usize, p50_ms: f64, p99_ms: f64, rss_mib: f64) -> bool {
    p50_ms <= P50_MS && p99_ms <= P99_MS && rss_mib <= rss_limit_mib(nodes)
}

/// A pool's status is written when it changes, at most about once a second whatever the
/// pool's size (a promotion trial changes the pool's counts twice).
pub const STATUS_WRITES_PER_SECOND: f64 = 1.1;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_memory_limit_grows_past_the_reference() {
        assert_eq!(rss_limit_mib(5_000), 64.0);
        assert_eq!(rss_limit_mib(20_000), 256.0);
        assert!(within(1_000, 12.0, 80.0, 40.0));
        assert!(!within(1_000, 21.0, 80.0, 40.0));
        assert!(!within(5_000, 12.0, 80.0, 70.0));
        assert!(within(20_000, 12.0, 80.0, 70.0));
    }
}
