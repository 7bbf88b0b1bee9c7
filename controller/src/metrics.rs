//! The controller's Prometheus metrics (prefix `node_reboot_`), served as OpenMetrics text on
//! `/metrics`. One [`Metrics`] value is built at start and handed to the parts that count;
//! clones share the same series.
//!
//! The gauges that describe the pool (nodes by state, slots, budget) are published by every
//! replica from its own cache; the counters of what the controller did, by the replica that
//! did it (`node_reboot_leader` says which one leads).

use common::{AnnotationKeys, NodeFacts, Phase, ProtocolState, Request};
use controller_core::{ledger::Ledger, pool_index::PoolCounts};
use k8s_openapi::api::core::v1::Node;
use observability::ApiErrorKind;
use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{counter::Counter, family::Family, gauge::Gauge, histogram::Histogram},
    registry::Registry,
};
use std::{sync::Arc, time::Duration};

/// Every protocol state a node can be in, as the `state` label of `node_reboot_nodes`.
pub const NODE_STATES: [&str; 8] = [
    "idle",
    "requested",
    "invalid_request",
    "draining",
    "reboot_now",
    "rebooting",
    "rebooted",
    "releasing",
];

/// Pure: the protocol state of one node, from its annotations and whether it holds a slot.
pub fn node_state(state: &ProtocolState, holds_slot: bool) -> &'static str {
    match (&state.phase, holds_slot, &state.request) {
        (Phase::Done { .. }, _, _) => "rebooted",
        (Phase::InProgress { .. }, _, _) => "rebooting",
        (Phase::RebootNow, _, _) => "reboot_now",
        (Phase::Idle, true, Request::Needed) => "draining",
        (Phase::Idle, true, _) => "releasing",
        (Phase::Idle, false, Request::Needed) => "requested",
        (Phase::Idle, false, Request::Invalid(_)) => "invalid_request",
        (Phase::Idle, false, Request::Absent) => "idle",
    }
}

/// The pool at one moment, as the gauges show it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PoolSummary {
    /// Count per entry of [`NODE_STATES`].
    pub by_state: [i64; NODE_STATES.len()],
    pub nodes: usize,
    /// Nodes unavailable as the budget counts them (not Ready, cordoned, or holding a slot).
    pub unavailable: usize,
    pub slots_in_use: usize,
    /// When the oldest slot still held was granted (Unix seconds); `None` without slots.
    pub oldest_grant: Option<i64>,
}

impl PoolSummary {
    /// Pure: the summary of the pool's `nodes` with the slots of `ledger`, and of `others`
    /// (the rest of the pool: idle nodes without a slot, counted by the pool index).
    pub fn of(
        nodes: &[Arc<Node>],
        others: &PoolCounts,
        ledger: &Ledger,
        keys: &AnnotationKeys,
    ) -> Self {
        let mut summary = Self {
            nodes: nodes.len() + others.nodes(),
            unavailable: others.unavailable(),
            slots_in_use: ledger.slots.len(),
            oldest_grant: ledger
                .slots
                .values()
                .filter_map(|slot| slot.granted_at.parse::<k8s_openapi::jiff::Timestamp>().ok())
                .map(|at| at.as_second())
                .min(),
            ..Self::default()
        };
        for node in nodes {
            let facts = NodeFacts::from_node(node);
            let state = facts.protocol(keys);
            let holds = ledger.holds(&facts.name);
            let label = node_state(&state, holds);
            summary.count_state(label, 1);
            if common::unavailable(&facts, &state, holds) {
                summary.unavailable += 1;
            }
        }
        summary.count_state("idle", others.nodes());
        summary
    }

    fn count_state(&mut self, label: &str, nodes: usize) {
        if let Some(i) = NODE_STATES.iter().position(|s| *s == label) {
            self.by_state[i] += i64::try_from(nodes).unwrap_or(i64::MAX);
        }
    }
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StateLabels {
    pub state: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct GateLabels {
    pub gate: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CheckLabels {
    pub check: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ObjectLabels {
    pub object: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    pub reason: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabels {
    pub outcome: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ApiErrorLabels {
    pub resource: String,
    pub kind: String,
}

fn duration_histogram() -> Histogram {
    // From seconds (simulated nodes) to an hour (a slow drain or a big server's firmware).
    Histogram::new([
        1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0, 900.0, 1800.0, 3600.0,
    ])
}

/// Every series the controller publishes.
#[derive(Debug, Clone)]
pub struct Metrics {
    pub nodes: Family<StateLabels, Gauge>,
    pub unavailable_nodes: Gauge,
    pub slots_in_use: Gauge,
    pub oldest_slot_granted: Gauge,
    pub max_unavailable: Gauge,
    pub reboots_approved: Counter,
    pub reboots_completed: Counter,
    pub reboots_cancelled: Counter,
    pub reboots_failed: Family<ReasonLabels, Counter>,
    pub reboot_duration: Histogram,
    pub drain_duration: Family<OutcomeLabels, Histogram>,
    pub drain_timeouts: Counter,
    pub reboots_forced: Counter,
    pub reboots_given_up: Counter,
    pub api_errors: Family<ApiErrorLabels, Counter>,
    pub leader: Gauge,
    pub ledger_damaged: Counter,
    pub ledger_recreated: Counter,
    pub rounds: Counter,
    pub paused: Gauge,
    pub window_open: Gauge,
    pub window_next_open: Gauge,
    pub not_ready_after_reboot: Gauge,
    pub reboots_overdue: Gauge,
    pub held_grants: Gauge,
    pub opted_out_requests: Gauge,
    pub set_aside_nodes: Gauge,
    pub rollout_failures: Family<ReasonLabels, Counter>,
    pub rollout_stalled: Gauge,
    pub rollout_stage_nodes: Gauge,
    pub gates_open: Family<GateLabels, Gauge>,
    pub blocked_nodes: Gauge,
    pub preflight_held: Family<CheckLabels, Gauge>,
    pub preflight_unanswered: Family<CheckLabels, Gauge>,
    pub notifications: Family<OutcomeLabels, Counter>,
    pub notifications_dropped: Family<ReasonLabels, Counter>,
    pub unknown_format: Family<ObjectLabels, Gauge>,
}

impl Metrics {
    /// The metrics and the registry that serves them.
    pub fn new() -> (Self, Registry) {
        let metrics = Self {
            nodes: Family::default(),
            unavailable_nodes: Gauge::default(),
            slots_in_use: Gauge::default(),
            oldest_slot_granted: Gauge::default(),
            max_unavailable: Gauge::default(),
            reboots_approved: Counter::default(),
            reboots_completed: Counter::default(),
            reboots_cancelled: Counter::default(),
            reboots_failed: Family::default(),
            reboot_duration: duration_histogram(),
            drain_duration: Family::new_with_constructor(duration_histogram),
            drain_timeouts: Counter::default(),
            reboots_forced: Counter::default(),
            reboots_given_up: Counter::default(),
            api_errors: Family::default(),
            leader: Gauge::default(),
            ledger_damaged: Counter::default(),
            ledger_recreated: Counter::default(),
            rounds: Counter::default(),
            paused: Gauge::default(),
            window_open: Gauge::default(),
            window_next_open: Gauge::default(),
            not_ready_after_reboot: Gauge::default(),
            reboots_overdue: Gauge::default(),
            held_grants: Gauge::default(),
            opted_out_requests: Gauge::default(),
            set_aside_nodes: Gauge::default(),
            rollout_failures: Family::default(),
            rollout_stalled: Gauge::default(),
            rollout_stage_nodes: Gauge::default(),
            gates_open: Family::default(),
            blocked_nodes: Gauge::default(),
            preflight_held: Family::default(),
            preflight_unanswered: Family::default(),
            notifications: Family::default(),
            notifications_dropped: Family::default(),
            unknown_format: Family::default(),
        };
        let mut registry = Registry::with_prefix("node_reboot");
        let m = metrics.clone();
        registry.register(
            "nodes",
            "Nodes of the pool by reboot protocol state",
            m.nodes,
        );
        registry.register(
            "unavailable_nodes",
            "Nodes of the pool unavailable as the budget counts them (not Ready, cordoned, or holding a slot)",
            m.unavailable_nodes,
        );
        registry.register(
            "slots_in_use",
            "Reboot slots granted in the slot ledger",
            m.slots_in_use,
        );
        registry.register(
            "oldest_slot_granted_timestamp_seconds",
            "When the longest-held reboot slot was granted (Unix time), 0 while no slot is held: \
             a node stuck in the protocol shows as an old one",
            m.oldest_slot_granted,
        );
        registry.register(
            "max_unavailable",
            "The budget: --max-unavailable resolved against the size of the pool",
            m.max_unavailable,
        );
        registry.register(
            "reboots_approved",
            "Nodes told to reboot (reboot-now set) by this replica",
            m.reboots_approved,
        );
        registry.register(
            "reboots_completed",
            "Reboots proven and completed (node Ready, uncordoned) by this replica",
            m.reboots_completed,
        );
        registry.register(
            "reboots_cancelled",
            "Reboots cancelled by the administrator before the agent took them",
            m.reboots_cancelled,
        );
        registry.register(
            "reboots_failed",
            "Reboot attempts given up without a reboot, by reason (drain_timeout, node_removed)",
            m.reboots_failed,
        );
        registry.register(
            "reboot_duration_seconds",
            "Time from the slot grant to the completed reboot",
            m.reboot_duration,
        );
        registry.register(
            "drain_duration_seconds",
            "Time a drain took, by outcome (drained, timed_out)",
            m.drain_duration,
        );
        registry.register(
            "ledger_damaged",
            "Times the slot ledger's annotation could not be read and was rebuilt from the nodes",
            m.ledger_damaged.clone(),
        );
        registry.register(
            "ledger_recreated",
            "Times the slot ledger Lease was found deleted and recreated from the leader's last copy",
            m.ledger_recreated.clone(),
        );
        registry.register(
            "rounds",
            "Rounds of decisions this replica completed as the leader, every pool's: a test (or an \
             administrator) that sees it grow knows the controller looked again",
            m.rounds.clone(),
        );
        registry.register(
            "drain_timeouts",
            "Drains abandoned after --drain-timeout",
            m.drain_timeouts,
        );
        registry.register(
            "reboots_given_up",
            "Nodes given up because they had not completed within --give-up-after of being told \
             to reboot",
            m.reboots_given_up,
        );
        registry.register(
            "reboots_forced",
            "Nodes rebooted with pods still on them: their drain timed out and --force-reboot is on",
            m.reboots_forced,
        );
        registry.register(
            "api_errors",
            "Failed Kubernetes API requests, by resource and kind of error",
            m.api_errors,
        );
        registry.register(
            "leader",
            "1 when this replica leads (acts), 0 when it stands by",
            m.leader,
        );
        registry.register(
            "paused",
            "1 while an administrator pauses new grants (reboot-paused=true on the ledger Lease)",
            m.paused,
        );
        registry.register(
            "window_open",
            "1 while a --reboot-window is open (always 1 without windows)",
            m.window_open,
        );
        registry.register(
            "window_next_open_timestamp_seconds",
            "When the next --reboot-window opens (Unix time); now while one is open",
            m.window_next_open,
        );
        registry.register(
            "not_ready_after_reboot",
            "Nodes NotReady within --min-ready-seconds of their reboot; no new grant while above 0",
            m.not_ready_after_reboot,
        );
        registry.register(
            "reboots_overdue",
            "Nodes told to reboot and not completed (new boot reported, Ready) within \
             --reboot-timeout; no new grant while above 0",
            m.reboots_overdue,
        );
        registry.register(
            "held_grants",
            "Granted nodes that a pause, a closed window or a closed health gate holds where they \
             stand: not cordoned, drained or told to reboot until it lifts",
            m.held_grants,
        );
        registry.register(
            "opted_out_requests",
            "Requested nodes opted out (labelled reboot-disabled, any value but false), which are \
             never granted",
            m.opted_out_requests,
        );
        registry.register(
            "set_aside_nodes",
            "Requested nodes set aside after --drain-attempts failed drains, which are not granted \
             until an administrator removes their reboot-drain-failures; more than \
             --max-blocked-nodes stall the pool",
            m.set_aside_nodes,
        );
        registry.register(
            "rollout_failures",
            "Failures of the pool's rollouts, by reason (drain_timeout, reboot_timeout, unproven, \
             not_ready_after_reboot), each node counted once per grant; past --max-failures, or \
             one of a canary, the pool is stalled",
            m.rollout_failures,
        );
        registry.register(
            "rollout_stalled",
            "1 while the pool is stalled (a failed canary, more failures than --max-failures, \
             more nodes set aside than --max-blocked-nodes): nothing new starts until an \
             administrator acts",
            m.rollout_stalled,
        );
        registry.register(
            "rollout_stage_nodes",
            "How many nodes the rollout's stage lets into the protocol at once (the canary, or \
             the current wave with --waves); 0 without one",
            m.rollout_stage_nodes,
        );
        registry.register(
            "gate_open",
            "Health gates configured, by gate (alerts, blocking_pods): 1 open, 0 holding new reboots",
            m.gates_open,
        );
        registry.register(
            "blocked_nodes",
            "Nodes that a blocking pod (--blocking-pod-selector) runs on",
            m.blocked_nodes,
        );
        registry.register(
            "preflight_held_nodes",
            "Requested nodes not granted because a pre-flight check fails, by check (no_agent: no \
             Running and Ready agent pod; disruption_budget: the Eviction API would refuse to \
             evict one of its pods; checking: a check has no answer yet, until its watch lists, for \
             at most --preflight-timeout while the watch fails)",
            m.preflight_held,
        );
        registry.register(
            "preflight_unanswered",
            "Pre-flight checks without an answer whose watch has failed (cannot list) for \
             --preflight-timeout, by check (no_agent, disruption_budget): 1 while the check holds \
             no node and the nodes granted go without it",
            m.preflight_unanswered,
        );
        registry.register(
            "notifications",
            "Notifications to --notify-url webhooks by outcome: sent, or failed after the retries",
            m.notifications,
        );
        registry.register(
            "notifications_dropped",
            "Notifications not sent because the webhook's queue was full (it is slow or hangs)",
            m.notifications_dropped,
        );
        registry.register(
            "unknown_format",
            "Objects this controller leaves alone because a newer operator wrote them in a format \
             it does not know, by object (node: nodes whose protocol annotations it cannot read, \
             counted as unavailable; ledger: 1 while the slot ledger cannot be read, every grant \
             held). Upgrade the operator",
            m.unknown_format.clone(),
        );
        // Every state and every known reason from the start, so that a query for one finds 0
        // rather than nothing (and `increase()` sees the first failure).
        metrics.pool(&PoolSummary::default(), 0);
        for reason in ["drain_timeout", "node_removed"] {
            let _ = metrics.reboots_failed.get_or_create(&ReasonLabels {
                reason: reason.into(),
            });
        }
        for outcome in ["sent", "failed"] {
            let _ = metrics.notifications.get_or_create(&OutcomeLabels {
                outcome: outcome.into(),
            });
        }
        let _ = metrics.notifications_dropped.get_or_create(&ReasonLabels {
            reason: "queue_full".into(),
        });
        metrics.no_preflight();
        for object in ["node", "ledger"] {
            metrics.unknown_format(object, 0);
        }
        for outcome in ["drained", "timed_out"] {
            let _ = metrics.drain_duration.get_or_create(&OutcomeLabels {
                outcome: outcome.into(),
            });
        }
        (metrics, registry)
    }

    pub fn api_error(&self, resource: &str, kind: ApiErrorKind) {
        self.api_errors
            .get_or_create(&ApiErrorLabels {
                resource: resource.into(),
                kind: kind.as_str().into(),
            })
            .inc();
    }

    /// How many objects of `object` (`node`, `ledger`) are in a format this build does not know.
    pub fn unknown_format(&self, object: &str, count: usize) {
        self.unknown_format
            .get_or_create(&ObjectLabels {
                object: object.into(),
            })
            .set(i64::try_from(count).unwrap_or(i64::MAX));
    }

    pub fn gate_open(&self, gate: &str, open: bool) {
        self.gates_open
            .get_or_create(&GateLabels { gate: gate.into() })
            .set(i64::from(open));
    }

    /// This replica no longer leads: the gauges only the leader keeps say nothing of its own,
    /// or a stale 1 would fire an alert (`max` over the replicas).
    pub fn stepped_down(&self) {
        self.leader.set(0);
        self.no_preflight();
    }

    /// The pre-flight gauges of a replica that checks nothing: every check, 0.
    fn no_preflight(&self) {
        for check in ["no_agent", "disruption_budget"] {
            self.preflight_held(check, 0);
            self.preflight_unanswered(check, false);
        }
        self.preflight_held("checking", 0);
    }

    pub fn preflight_held(&self, check: &str, nodes: usize) {
        self.preflight_held
            .get_or_create(&CheckLabels {
                check: check.into(),
            })
            .set(i64::try_from(nodes).unwrap_or(i64::MAX));
    }

    pub fn preflight_unanswered(&self, check: &str, unanswered: bool) {
        self.preflight_unanswered
            .get_or_create(&CheckLabels {
                check: check.into(),
            })
            .set(i64::from(unanswered));
    }

    pub fn rollout_failure(&self, reason: &str) {
        self.rollout_failures
            .get_or_create(&ReasonLabels {
                reason: reason.into(),
            })
            .inc();
    }

    pub fn reboot_failed(&self, reason: &str) {
        self.reboots_failed
            .get_or_create(&ReasonLabels {
                reason: reason.into(),
            })
            .inc();
    }

    pub fn notification(&self, outcome: &str) {
        self.notifications
            .get_or_create(&OutcomeLabels {
                outcome: outcome.into(),
            })
            .inc();
    }

    pub fn notification_dropped(&self, reason: &str) {
        self.notifications_dropped
            .get_or_create(&ReasonLabels {
                reason: reason.into(),
            })
            .inc();
    }

    pub fn drain_finished(&self, outcome: &str, took: Duration) {
        self.drain_duration
            .get_or_create(&OutcomeLabels {
                outcome: outcome.into(),
            })
            .observe(took.as_secs_f64());
    }

    /// Publishes the pool gauges.
    pub fn pool(&self, summary: &PoolSummary, budget: usize) {
        for (state, count) in NODE_STATES.iter().zip(summary.by_state) {
            self.nodes
                .get_or_create(&StateLabels {
                    state: (*state).into(),
                })
                .set(count);
        }
        let gauge = |v: usize| i64::try_from(v).unwrap_or(i64::MAX);
        self.unavailable_nodes.set(gauge(summary.unavailable));
        self.slots_in_use.set(gauge(summary.slots_in_use));
        self.oldest_slot_granted
            .set(summary.oldest_grant.unwrap_or_default());
        self.max_unavailable.set(gauge(budget));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use common::test_util::NodeBuilder;
    use controller_core::{ledger::Slot, pool_index::ZoneCount};
    use prometheus_client::encoding::text::encode;

    fn node(name: &str, ready: bool, annotations: &[(&str, &str)]) -> Arc<Node> {
        Arc::new(
            NodeBuilder::new(name)
                .ready(ready)
                .annotations(annotations)
                .object(),
        )
    }

    #[test]
    fn nodes_are_counted_by_state() {
        let nodes = vec![
            node("idle", true, &[]),
            node("down", false, &[]),
            node("waiting", true, &[("reboot-needed", "true")]),
            node("banana", true, &[("reboot-needed", "banana")]),
            node("granted", true, &[("reboot-needed", "true")]),
            node("now", true, &[("reboot-now", "true")]),
            node("going", false, &[("reboot-in-progress", "true")]),
            node("back", true, &[("reboot-done", "true")]),
            node("cancelled", true, &[]),
        ];
        let slot = || Slot {
            grant: "g".into(),
            granted_at: "2026-01-01T00:00:00Z".into(),
            node_version: None,
            zone: None,
        };
        let ledger = Ledger {
            id: "ns/slots".into(),
            resource_version: Some("1".into()),
            slots: ["granted", "now", "going", "back", "cancelled"]
                .into_iter()
                .map(|n| (n.to_owned(), slot()))
                .collect(),
            paused: false,
            ..Ledger::default()
        };
        // The rest of the pool, as the index counts it: 10 idle nodes, 3 of them NotReady.
        let mut others = PoolCounts::default();
        others.zones.insert(
            None,
            ZoneCount {
                size: 10,
                unavailable: 3,
            },
        );
        let summary = PoolSummary::of(&nodes, &others, &ledger, &AnnotationKeys::default());
        let count =
            |state: &str| summary.by_state[NODE_STATES.iter().position(|s| *s == state).unwrap()];
        assert_eq!(count("idle"), 2 + 10);
        for state in [
            "requested",
            "invalid_request",
            "draining",
            "reboot_now",
            "rebooting",
            "rebooted",
            "releasing",
        ] {
            assert_eq!(count(state), 1, "{state}");
        }
        assert_eq!(summary.nodes, 9 + 10);
        assert_eq!(summary.slots_in_use, 5);
        assert_eq!(
            summary.oldest_grant,
            Some(1_767_225_600),
            "2026-01-01T00:00:00Z"
        );
        // down, the five slot holders and the three others.
        assert_eq!(summary.unavailable, 6 + 3);
    }

    #[test]
    fn the_metrics_are_encoded_with_the_common_prefix() {
        let (metrics, registry) = Metrics::new();
        metrics.reboots_completed.inc();
        metrics.reboot_duration.observe(42.0);
        metrics.api_error("node", ApiErrorKind::Conflict);
        metrics.reboot_failed("drain_timeout");
        metrics.drain_finished("drained", Duration::from_secs(3));
        metrics.pool(&PoolSummary::default(), 2);
        let mut text = String::new();
        encode(&mut text, &registry).unwrap();
        for line in [
            "node_reboot_reboots_completed_total 1",
            "node_reboot_reboot_duration_seconds_count 1",
            "node_reboot_reboot_duration_seconds_bucket{le=\"60.0\"} 1",
            "node_reboot_api_errors_total{resource=\"node\",kind=\"conflict\"} 1",
            "node_reboot_reboots_failed_total{reason=\"drain_timeout\"} 1",
            "node_reboot_drain_duration_seconds_count{outcome=\"drained\"} 1",
            "node_reboot_reboots_failed_total{reason=\"node_removed\"} 0",
            "node_reboot_drain_duration_seconds_count{outcome=\"timed_out\"} 0",
            "node_reboot_oldest_slot_granted_timestamp_seconds 0",
            "node_reboot_nodes{state=\"rebooting\"} 0",
            "node_reboot_max_unavailable 2",
            "node_reboot_slots_in_use 0",
            "node_reboot_leader 0",
            "node_reboot_notifications_total{outcome=\"failed\"} 0",
            "node_reboot_notifications_dropped_total{reason=\"queue_full\"} 0",
        ] {
            assert!(text.contains(line), "{line} in\n{text}");
        }
    }

    #[test]
    fn a_replica_that_steps_down_reports_no_pre_flight_check_of_its_own() {
        let (metrics, registry) = Metrics::new();
        metrics.leader.set(1);
        metrics.preflight_held("disruption_budget", 3);
        metrics.preflight_held("checking", 2);
        metrics.preflight_unanswered("no_agent", true);
        metrics.stepped_down();
        let mut text = String::new();
        encode(&mut text, &registry).unwrap();
        for line in [
            "node_reboot_leader 0",
            "node_reboot_preflight_held_nodes{check=\"disruption_budget\"} 0",
            "node_reboot_preflight_held_nodes{check=\"checking\"} 0",
            "node_reboot_preflight_unanswered{check=\"no_agent\"} 0",
        ] {
            assert!(text.contains(line), "{line} in\n{text}");
        }
    }
}
