//! `RebootPool`: a pool of nodes and its reboot policy, as a cluster-scoped custom resource.
//!
//! The API group is `node-reboot-operator.io`: a DNS name the project holds (groups under
//! `k8s.io` need the Kubernetes API review), the same name that prefixes the operator's own
//! annotations. `v1alpha1`: the fields may still change; a later version will be served beside
//! it with the same schema plus its additions, so that no conversion webhook is needed until a
//! field changes meaning.
//!
//! The spec holds what is a pool's policy (the settings that are flags for the flags' pool);
//! process-wide settings (Prometheus, notifications, leader election) stay flags. Its fields
//! are named as Kubernetes names them elsewhere: `nodeSelector` is a label selector as in a
//! Deployment's `selector`, `maxUnavailable` an int or a percentage as in a rolling update,
//! durations are whole numbers with a unit (`ms`, `s`, `m`, `h`), added up (`15m`, `1h30m`),
//! as the flags take them.
//! The CRD's CEL rules refuse what they can; the controller refuses the rest with an
//! `InvalidSpec` condition.

use crate::marks::{selector_key, selector_value};
use k8s_openapi::apimachinery::pkg::{
    apis::meta::v1::{Condition, LabelSelector, Time},
    util::intstr::IntOrString,
};
use kube::{
    CustomResource, KubeSchema,
    core::{Expression, Selector, SelectorExt},
};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The API group of the operator's resources.
pub const GROUP: &str = "node-reboot-operator.io";
/// The finalizer a pool keeps while a node it granted is still in the protocol.
pub const FINALIZER: &str = "node-reboot-operator.io/pool-nodes";
/// Each pool's slot ledger is a Lease in the operator's namespace named this plus the pool.
pub const LEDGER_PREFIX: &str = "node-reboot-pool-";

/// Condition types: kstatus reads `Ready`, `Reconciling` and `Stalled`; the others say more.
pub mod condition {
    pub const READY: &str = "Ready";
    pub const RECONCILING: &str = "Reconciling";
    pub const STALLED: &str = "Stalled";
    /// A node of the pool is overdue: its reboot has not been proven in time.
    pub const NODE_OVERDUE: &str = "NodeOverdue";
    /// A node of the pool is also selected by another pool, and neither grants it.
    pub const OVERLAP: &str = "Overlap";
}

/// The reasons of the conditions.
pub mod reason {
    pub const INVALID_SPEC: &str = "InvalidSpec";
    pub const IDLE: &str = "Idle";
    pub const REBOOTING: &str = "Rebooting";
    pub const WAITING: &str = "Waiting";
    pub const PAUSED: &str = "Paused";
    pub const OVERDUE: &str = "NodeOverdue";
    /// A failed canary, more failures than `maxFailures`, or more nodes set aside than
    /// `maxBlockedNodes`: nothing new starts until `kubectl reboot resume --pool`.
    pub const ROLLOUT_STALLED: &str = "RolloutStalled";
    pub const OVERLAP: &str = "Overlap";
    pub const DELETING: &str = "Deleting";
}

/// A pool of nodes rebooted under its own budget.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "node-reboot-operator.io",
    version = "v1alpha1",
    kind = "RebootPool",
    plural = "rebootpools",
    shortname = "rpool",
    status = "RebootPoolStatus",
    validation = Rule::new("size(self.metadata.name) <= 236").message("a RebootPool's name is at most 236 characters: its ledger is the Lease node-reboot-pool-<name>"),
    printcolumn = r#"{"name":"Nodes","type":"integer","jsonPath":".status.nodes"}"#,
    printcolumn = r#"{"name":"Budget","type":"string","jsonPath":".status.budget"}"#,
    printcolumn = r#"{"name":"Unavailable","type":"integer","jsonPath":".status.unavailable"}"#,
    printcolumn = r#"{"name":"Rebooting","type":"integer","jsonPath":".status.rebooting"}"#,
    printcolumn = r#"{"name":"Waiting","type":"integer","jsonPath":".status.waiting"}"#,
    printcolumn = r#"{"name":"Held","type":"string","jsonPath":".status.held"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct RebootPoolSpec {
    /// The nodes of the pool. Empty selects every node. A node that two pools select is
    /// rebooted by neither until the overlap is resolved.
    #[serde(default)]
    #[x_kube(validation = Rule::new("!has(self.matchExpressions) || self.matchExpressions.all(e, (e.operator == 'In' || e.operator == 'NotIn') ? (has(e.values) && size(e.values) > 0) : ((e.operator == 'Exists' || e.operator == 'DoesNotExist') && (!has(e.values) || size(e.values) == 0)))").message("nodeSelector.matchExpressions: In and NotIn need values, Exists and DoesNotExist take none (no other operator is known)"))]
    pub node_selector: LabelSelector,
    /// How many of the pool's nodes may be unavailable at once (NotReady, cordoned, or in the
    /// protocol): a number (`2`) or a percentage of the pool (`"25%"`, rounded down, at least
    /// 1). `0` holds every new reboot; those under way finish. Default 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("type(self) == int ? self >= 0 : self.matches('^0*([0-9]{1,2}|100)%$')").message("maxUnavailable must be a number of nodes (0 or more) or a percentage up to 100% such as \"25%\""))]
    pub max_unavailable: Option<IntOrString>,
    /// The same budget per zone (`zoneLabel`'s value); unset, zones are not counted apart.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("type(self) == int ? self >= 0 : self.matches('^0*([0-9]{1,2}|100)%$')").message("maxUnavailablePerZone must be a number of nodes (0 or more) or a percentage up to 100% such as \"25%\""))]
    pub max_unavailable_per_zone: Option<IntOrString>,
    /// How many nodes may be in the protocol at once, below `maxUnavailable`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("type(self) == int ? self >= 0 : self.matches('^0*([0-9]{1,2}|100)%$')").message("concurrency must be a number of nodes (0 or more) or a percentage up to 100% such as \"25%\""))]
    pub concurrency: Option<IntOrString>,
    /// The label that names a node's zone. Default `topology.kubernetes.io/zone`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("size(self) > 0").message("zoneLabel must be a label key such as \"topology.kubernetes.io/zone\"; leave it out for that default"))]
    pub zone_label: Option<String>,
    /// When a reboot may start, each as `--reboot-window` takes it: days and hours in a time
    /// zone (`mon-fri 22:00-06:00 Europe/Berlin`) or a cron schedule and a duration
    /// (`0 22 * * 1-5 8h Europe/Berlin`). Empty: any time.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub windows: Vec<String>,
    /// When no reboot may start, whatever `windows` say, each as `--reboot-blackout` takes it:
    /// a range of days (`2026-12-20..2027-01-03 Europe/Berlin`, both included) or of times
    /// (`2026-12-24T18:00..2026-12-27T06:00`), or anything `windows` takes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub blackouts: Vec<String>,
    /// Budgets that apply while their period is under way, each as `--scheduled-budget` takes
    /// it: `BUDGET WHEN`, such as `1 Mon-Fri 06:00-22:00 Europe/Berlin` or
    /// `0 2026-12-20..2027-01-03`. Of `maxUnavailable` and those under way, the lowest applies.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scheduled_budgets: Vec<String>,
    /// Whether a reboot under way may finish after its window closes. Default true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finish_after_window: Option<bool>,
    /// With `windows`: how long a reboot takes, from its grant to its completion, until the
    /// pool has a history (then the larger of this and the 90th percentile of its last 20
    /// reboots). A reboot that would not end before its window closes (or a blackout starts)
    /// is not started: it waits for the next window. Unset: a reboot starts whenever the
    /// window is open.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self.matches('^([0-9]+(ms|s|m|h))+$') && duration(self) > duration('0s')").message("rebootEstimate must be a positive duration such as \"45m\""))]
    pub reboot_estimate: Option<String>,
    /// How long a rebooted node must stay Ready before its slot frees (the soak). Default 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self >= 0").message("minReadySeconds cannot be negative"))]
    pub min_ready_seconds: Option<i64>,
    /// How long a reboot may take, from the grant to the node back Ready, before it is overdue
    /// and holds the pool. Default `30m`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self.matches('^([0-9]+(ms|s|m|h))+$') && duration(self) > duration('0s')").message("rebootTimeout must be a positive duration such as \"30m\""))]
    pub reboot_timeout: Option<String>,
    /// After this long overdue, the slot of a node that never came back is released. Unset:
    /// never.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self.matches('^([0-9]+(ms|s|m|h))+$') && duration(self) > duration('0s')").message("giveUpAfter must be a positive duration such as \"2h\""))]
    pub give_up_after: Option<String>,
    /// After this many failed drains of its request, a node is set aside (not granted again
    /// until its `reboot-drain-failures` is removed) and the rest of the pool goes on. Unset: a
    /// failing drain is retried for ever.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self >= 1").message("drainAttempts must be 1 or more"))]
    pub drain_attempts: Option<i64>,
    /// With more nodes set aside than this, the pool is stalled: nothing new starts. Needs
    /// `drainAttempts`. Unset: no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self >= 0").message("maxBlockedNodes cannot be negative"))]
    pub max_blocked_nodes: Option<i64>,
    /// A node set aside stays cordoned instead of being uncordoned; cordoned, it counts against
    /// the budgets. Needs `drainAttempts`. Default false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keep_set_aside_cordoned: Option<bool>,
    /// The first this many nodes of each rollout go alone; the rest wait until they have
    /// completed and soaked for `canarySoak`. A canary that fails stalls the pool until
    /// `kubectl reboot resume --pool`. Default 0: no canary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self >= 0 && self <= 4294967295").message("canary must be a number of nodes from 0 to 4294967295"))]
    pub canary: Option<i64>,
    /// How long a canary is Ready after its reboot before the rest start. Default `0s`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self.matches('^([0-9]+(ms|s|m|h))+$')").message("canarySoak must be a duration such as \"30m\""))]
    pub canary_soak: Option<String>,
    /// Waves that grow: the nodes in the protocol start at 1 (twice `canary` after a canary)
    /// and double after each wave completes; a failure drops them back to 1. Default false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waves: Option<bool>,
    /// With more of a rollout's nodes failed than this (a number, or a percentage of the
    /// rollout's nodes such as `"10%"`), the pool is stalled until `kubectl reboot resume
    /// --pool`. Unset: no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("type(self) == int ? self >= 0 : self.matches('^0*([0-9]{1,2}|100)%$')").message("maxFailures must be a number of nodes (0 or more) or a percentage such as \"10%\", at most 100%"))]
    pub max_failures: Option<IntOrString>,
    /// Set by `kubectl reboot resume --pool` to the time it ran (RFC 3339): the rollout's
    /// failures counted before it are forgiven, and the canary stage and the waves start over,
    /// as `kubectl reboot resume` does for the flags' pool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self.matches('^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}([.][0-9]+)?(Z|[+-][0-9]{2}:[0-9]{2})$')").message("resumedAt must be an RFC 3339 time such as \"2026-12-03T07:40:00Z\""))]
    pub resumed_at: Option<String>,
    /// Grants nothing new while true; reboots under way finish. `kubectl reboot pause --pool`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub paused: bool,
    /// How a node is drained before its reboot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drain: Option<DrainSpec>,
    /// What holds the pool: alerts and blocking pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gates: Option<GatesSpec>,
    /// The labels and the taint a node carries around its reboot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub marks: Option<MarksSpec>,
}

/// The drain of a pool's nodes; each field as the flag of the same name.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DrainSpec {
    /// Drain before the reboot. Default true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// How long a drain may take before it is retried. Default `15m`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self.matches('^([0-9]+(ms|s|m|h))+$') && duration(self) > duration('0s')").message("drain.timeout must be a positive duration such as \"15m\""))]
    pub timeout: Option<String>,
    /// The grace period given to each evicted pod; unset, each pod's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self.matches('^([0-9]+(ms|s|m|h))+$') && duration(self) > duration('0s')").message("drain.gracePeriod must be a positive duration such as \"30s\""))]
    pub grace_period: Option<String>,
    /// Only the pods this label selector selects are evicted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_selector: Option<String>,
    /// A wait between the cordon and the drain.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self.matches('^(([0-9]+(ms|s|m|h))+|0)$')").message("drain.delay must be a duration such as \"1m\""))]
    pub delay: Option<String>,
    /// Reboot even when the drain cannot finish (kured's --force-reboot). Default false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub force_reboot: Option<bool>,
}

/// The gates of a pool; each field as the flag of the same name.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct GatesSpec {
    /// A regular expression on alert names, read as the controller's `--alert-filter-mode`
    /// says: by default (`exclude`) the alerts it matches do not hold the pool, and every other
    /// active alert does; with `include` only those it matches do. The controller's
    /// `--prometheus-url` is asked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alert_filter: Option<String>,
    /// Pods matching any of these label selectors hold the pool.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub blocking_pod_selectors: Vec<String>,
}

/// The marks of a pool's nodes around a reboot; each field as the flag of the same name.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct MarksSpec {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub pre_reboot_node_labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub post_reboot_node_labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefer_no_schedule_taint: Option<String>,
}

/// What the controller last saw of the pool.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RebootPoolStatus {
    /// The spec's generation this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Nodes the selector selects (overlapping nodes included).
    #[serde(default)]
    pub nodes: i64,
    /// The budget as resolved in nodes (`2`, or `2 (25%)`; per zone: `2, 1/zone`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<String>,
    /// Nodes unavailable now: NotReady, cordoned or in the protocol.
    #[serde(default)]
    pub unavailable: i64,
    /// Nodes granted a slot and not yet completed.
    #[serde(default)]
    pub rebooting: i64,
    /// Nodes that asked for a reboot and have no slot yet.
    #[serde(default)]
    pub waiting: i64,
    /// Why the waiting nodes wait, when something holds them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held: Option<String>,
    /// The nodes in the protocol (at most 50, then `andMore` says how many more).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nodes_in_protocol: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub and_more: Option<i64>,
    /// Nodes also selected by another pool, which neither grants.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub overlapping: Vec<OverlappingNode>,
    /// The last node whose reboot completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_completed: Option<LastCompleted>,
    /// `Ready`, `Reconciling` and `Stalled` as kstatus reads them, and `NodeOverdue`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// A node that two pools select.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct OverlappingNode {
    pub node: String,
    /// The other pools that select it.
    pub pools: Vec<String>,
}

/// A completed reboot.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct LastCompleted {
    pub node: String,
    pub time: Time,
}

/// The name of a pool's ledger Lease.
pub fn ledger_name(pool: &str) -> String {
    format!("{LEDGER_PREFIX}{pool}")
}

/// Whether `pool` selects a node with these labels. An empty selector selects every node. A
/// selector that cannot be read (an `In` without values, an unknown operator: the API
/// server's schema lets them through) selects every node too: a broken pool holds the nodes
/// it may have meant (they overlap with every other pool, and it grants nothing while its spec
/// is invalid) rather than let another pool's rules reboot them.
pub fn selects(pool: &RebootPool, labels: &BTreeMap<String, String>) -> bool {
    node_selector(&pool.spec.node_selector).map_or(true, |s| s.matches(labels))
}

/// A pool's `nodeSelector` as the controller runs it and the plugin shows it: read as the API
/// server reads a label selector, each key and value checked as Kubernetes checks labels (a
/// label it would refuse is on no node, so a selector naming one would select nothing without
/// a word). `Err` names what cannot be read.
pub fn node_selector(selector: &LabelSelector) -> Result<Selector, String> {
    let parsed = Selector::try_from(selector.clone()).map_err(|e| e.to_string())?;
    for expression in parsed.clone() {
        match &expression {
            Expression::In(k, values) | Expression::NotIn(k, values) => {
                selector_key(k)?;
                if values.is_empty() {
                    return Err(format!(
                        "the expression on {k:?} has no values: In and NotIn need at least one"
                    ));
                }
                values
                    .iter()
                    .try_for_each(|v| selector_value(v).map(drop))?;
            }
            Expression::Equal(k, v) | Expression::NotEqual(k, v) => {
                selector_key(k)?;
                selector_value(v)?;
            }
            Expression::Exists(k) | Expression::DoesNotExist(k) => {
                selector_key(k)?;
            }
        }
    }
    Ok(parsed)
}

/// The names of the pools that select a node with these labels, in the order of `pools`:
/// none, the node is the flags' pool's; one, it is that pool's; two or more, it overlaps and
/// no pool grants it.
pub fn pools_of<'p>(labels: &BTreeMap<String, String>, pools: &'p [RebootPool]) -> Vec<&'p str> {
    pools
        .iter()
        .filter(|pool| selects(pool, labels))
        .map(|pool| pool.metadata.name.as_deref().unwrap_or_default())
        .collect()
}

/// A RebootPool's `spec.resumedAt` as Unix milliseconds, or why it is not a time.
pub fn resumed_at_millis(value: &str) -> Result<u64, String> {
    let at: k8s_openapi::jiff::Timestamp = value.trim().parse().map_err(|e| {
        format!("{value:?} is not an RFC 3339 time such as \"2026-12-03T07:40:00Z\" ({e})")
    })?;
    u64::try_from(at.as_millisecond()).map_err(|_| format!("{value:?} is before 1970"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::CustomResourceExt;

    fn pool(name: &str, selector: serde_json::Value) -> RebootPool {
        let spec: RebootPoolSpec =
            serde_json::from_value(serde_json::json!({ "nodeSelector": selector })).unwrap();
        RebootPool::new(name, spec)
    }

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn a_node_belongs_to_the_pools_whose_selectors_select_it() {
        let pools = [
            pool("gpu", serde_json::json!({"matchLabels": {"pool": "gpu"}})),
            pool(
                "big",
                serde_json::json!({"matchExpressions": [
                    {"key": "size", "operator": "In", "values": ["xl", "xxl"]}]}),
            ),
            pool(
                "untainted",
                serde_json::json!({"matchExpressions": [
                    {"key": "dedicated", "operator": "DoesNotExist"}]}),
            ),
        ];
        let dedicated = labels(&[("dedicated", "db")]);
        assert!(pools_of(&dedicated, &pools).is_empty(), "the flags' pool's");
        let gpu = labels(&[("pool", "gpu"), ("dedicated", "ml")]);
        assert_eq!(pools_of(&gpu, &pools), ["gpu"]);
        let both = labels(&[("pool", "gpu"), ("size", "xl"), ("dedicated", "ml")]);
        assert_eq!(pools_of(&both, &pools), ["gpu", "big"], "an overlap");
        assert_eq!(pools_of(&labels(&[]), &pools), ["untainted"]);
    }

    #[test]
    fn an_empty_selector_selects_every_node_and_a_broken_one_too() {
        let every = pool("every", serde_json::json!({}));
        let broken = pool(
            "broken",
            serde_json::json!({"matchExpressions": [{"key": "pool", "operator": "In"}]}),
        );
        let node = labels(&[("pool", "web")]);
        assert!(selects(&every, &node));
        assert!(
            selects(&broken, &node),
            "a broken selector holds, never frees"
        );
        assert_eq!(pools_of(&node, &[every, broken]), ["every", "broken"]);
    }

    /// A label Kubernetes would refuse is on no node: a selector naming one cannot be what the
    /// administrator meant, so it is read as broken (selecting every node), exactly as the
    /// controller reads it.
    #[test]
    fn a_selector_on_a_label_kubernetes_refuses_is_broken() {
        let spaced = pool(
            "spaced",
            serde_json::json!({"matchLabels": {"pool name": "gpu"}}),
        );
        let error = node_selector(&spaced.spec.node_selector).unwrap_err();
        assert!(
            error.contains("\"pool name\" is not a label key"),
            "{error}"
        );
        let bad_value = serde_json::json!({"matchExpressions": [
            {"key": "pool", "operator": "In", "values": ["gpu", "a b"]}]});
        let bad_value = pool("bad-value", bad_value);
        let error = node_selector(&bad_value.spec.node_selector).unwrap_err();
        assert!(error.contains("\"a b\" is not a label value"), "{error}");
        assert!(selects(&spaced, &labels(&[("pool", "web")])));
        let fine = pool(
            "fine",
            serde_json::json!({"matchLabels": {"example.com/pool": "gpu"}}),
        );
        assert!(!selects(&fine, &labels(&[("pool", "web")])));
    }

    #[test]
    fn the_crd_is_cluster_scoped_with_status_and_cel_rules() {
        let crd = RebootPool::crd();
        assert_eq!(crd.spec.scope, "Cluster");
        assert_eq!(crd.spec.group, GROUP);
        let json = serde_json::to_string(&crd).unwrap();
        assert!(json.contains("x-kubernetes-validations"), "{json}");
        assert!(json.contains("\"status\":{}"), "status subresource: {json}");
    }

    #[test]
    fn a_minimal_pool_reads_with_defaults() {
        let pool: RebootPoolSpec = serde_json::from_value(serde_json::json!({
            "nodeSelector": {"matchLabels": {"pool": "gpu"}},
            "maxUnavailable": "25%",
        }))
        .unwrap();
        assert_eq!(
            pool.max_unavailable,
            Some(IntOrString::String("25%".into()))
        );
        assert!(!pool.paused);
        assert!(pool.windows.is_empty());
    }
}
