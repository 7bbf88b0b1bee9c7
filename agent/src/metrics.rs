//! The agent's Prometheus metrics (prefix `node_reboot_agent_`), served as OpenMetrics text
//! on `/metrics`. A reboot ends the agent's process, so its counters start again at zero after
//! each reboot, as Prometheus expects of counters.

use observability::ApiErrorKind;
use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{counter::Counter, family::Family, gauge::Gauge},
    registry::Registry,
};

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabels {
    pub kind: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    pub reason: String,
}

/// Every series the agent publishes; clones share them.
#[derive(Debug, Clone, Default)]
pub struct Metrics {
    pub reboots_started: Counter,
    pub reboot_retries: Counter,
    pub reboots_proven: Counter,
    pub reboot_failures: Family<ReasonLabels, Counter>,
    pub api_errors: Family<KindLabels, Counter>,
    pub watch_running: Gauge,
    pub reboots_requested: Counter,
    pub sentinel_persists: Gauge,
    pub sentinel_failures: Counter,
    pub reboot_required: Gauge,
    pub reboots_stopped: Gauge,
    pub unknown_format: Gauge,
}

impl Metrics {
    /// The metrics and the registry that serves them.
    pub fn new() -> (Self, Registry) {
        let metrics = Self::default();
        let mut registry = Registry::with_prefix("node_reboot_agent");
        let m = metrics.clone();
        registry.register(
            "reboots_started",
            "Reboots this agent asked the node for (a retry included)",
            m.reboots_started,
        );
        registry.register(
            "reboot_retries",
            "Reboots asked for again because the last one did not happen (same boot id)",
            m.reboot_retries,
        );
        registry.register(
            "reboots_proven",
            "Reboots proven by a new boot id and reported done",
            m.reboots_proven,
        );
        registry.register(
            "reboot_failures",
            "Reboots that failed, by reason (method_failed, timed_out, unproven)",
            m.reboot_failures,
        );
        registry.register(
            "api_errors",
            "Failed Kubernetes API requests, by kind of error",
            m.api_errors,
        );
        registry.register(
            "watch_running",
            "1 while the watch of this agent's Node runs, 0 before it started or after it failed",
            m.watch_running,
        );
        registry.register(
            "reboots_requested",
            "Reboots this agent requested because the node's reboot sentinel said so",
            m.reboots_requested,
        );
        registry.register(
            "sentinel_persists",
            "1 while the sentinel a reboot was requested for is still there after that reboot",
            m.sentinel_persists,
        );
        registry.register(
            "sentinel_failures",
            "Looks at the reboot sentinel that gave no answer: a command that did not run to one \
             (exit code 126 or 127, a signal, not started) or a file that cannot be read",
            m.sentinel_failures,
        );
        registry.register(
            "reboot_required",
            "1 while this node has a reboot requested and not completed yet (reboot-needed=true, \
             granted, draining or rebooting), as kured_reboot_required",
            m.reboot_required,
        );
        registry.register(
            "reboots_stopped",
            "1 while the agent has stopped rebooting its node: --max-unproven-reboots reboots \
             from the same boot id proved nothing",
            m.reboots_stopped,
        );
        registry.register(
            "unknown_format",
            "1 while the node's reboot annotations are in a format this agent does not know (a \
             newer operator wrote them): it does nothing on them; upgrade the operator",
            m.unknown_format,
        );
        // Every known reason from the start: a query finds 0, and increase() sees the first.
        for reason in ["method_failed", "timed_out", "unproven"] {
            let _ = metrics.reboot_failures.get_or_create(&ReasonLabels {
                reason: reason.into(),
            });
        }
        (metrics, registry)
    }

    pub fn api_error(&self, kind: ApiErrorKind) {
        self.api_errors
            .get_or_create(&KindLabels {
                kind: kind.as_str().into(),
            })
            .inc();
    }

    pub fn reboot_failed(&self, reason: &str) {
        self.reboot_failures
            .get_or_create(&ReasonLabels {
                reason: reason.into(),
            })
            .inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::encoding::text::encode;

    #[test]
    fn the_metrics_are_encoded_with_the_common_prefix() {
        let (metrics, registry) = Metrics::new();
        metrics.reboots_started.inc();
        metrics.api_error(ApiErrorKind::Forbidden);
        metrics.reboot_failed("timed_out");
        metrics.watch_running.set(1);
        let mut text = String::new();
        encode(&mut text, &registry).unwrap();
        for line in [
            "node_reboot_agent_reboots_started_total 1",
            "node_reboot_agent_reboot_retries_total 0",
            "node_reboot_agent_api_errors_total{kind=\"forbidden\"} 1",
            "node_reboot_agent_reboot_failures_total{reason=\"timed_out\"} 1",
            "node_reboot_agent_watch_running 1",
        ] {
            assert!(text.contains(line), "{line} in\n{text}");
        }
    }
}
