//! Command-line flags; every flag is also an environment variable.

use clap::{Parser, ValueEnum};
use common::{AnnotationKeys, MaxUnavailable};
use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// Reboots the cluster's nodes safely: grants `reboot-needed` nodes a slot while at most
/// `--max-unavailable` nodes are unavailable, cordons them, tells their agent to reboot, and
/// uncordons them once the reboot is proven and the node is Ready.
#[derive(Debug, Clone, Parser)]
#[command(name = "reboot-controller", version)]
pub struct Args {
    /// How many nodes of the pool may be unavailable at once: a number (`2`) or a
    /// percentage of the pool (`25%`, rounded down, at least 1).
    #[arg(long, env = "MAX_UNAVAILABLE", default_value = "1", allow_negative_numbers = true, value_parser = parse_max_unavailable)]
    pub max_unavailable: MaxUnavailable,

    /// Label selector of the pool of nodes this controller manages (default: all nodes).
    #[arg(long, env = "NODE_SELECTOR")]
    pub node_selector: Option<String>,

    /// Prefix of every annotation key (`<prefix>/reboot-needed`); must match the agents'.
    #[arg(long, env = "ANNOTATION_PREFIX", default_value = "", value_parser = parse_prefix)]
    pub annotation_prefix: AnnotationKeys,

    /// Namespace of the slot ledger (and of the leader Lease).
    #[arg(long, env = "POD_NAMESPACE", default_value = "node-reboot-operator")]
    pub namespace: String,

    /// Name of the Lease that records which nodes hold a slot. Controllers of different
    /// pools need different ledgers.
    #[arg(
        long,
        env = "LEDGER_NAME",
        default_value = "node-reboot-operator-slots"
    )]
    pub ledger_name: String,

    /// Evict the node's pods (Eviction API, so PodDisruptionBudgets hold) before the reboot.
    /// `--drain=false` reboots without draining.
    #[arg(long, env = "DRAIN", default_value_t = true, action = clap::ArgAction::Set)]
    pub drain: bool,

    /// How long a drain may take; then the attempt is abandoned (node uncordoned, slot
    /// released, request kept) and retried later. Such as `90s`, `15m`.
    #[arg(long, env = "DRAIN_TIMEOUT", default_value = "15m", allow_hyphen_values = true, value_parser = parse_duration)]
    pub drain_timeout: Duration,

    /// Grace period given to each evicted pod instead of its own terminationGracePeriodSeconds.
    #[arg(long, env = "DRAIN_GRACE_PERIOD", allow_hyphen_values = true, value_parser = parse_duration)]
    pub drain_grace_period: Option<Duration>,

    /// Label selector: evict only matching pods (default: every pod but DaemonSet and mirror pods).
    #[arg(long, env = "DRAIN_POD_SELECTOR")]
    pub drain_pod_selector: Option<String>,

    /// Log format.
    #[arg(long, env = "LOG_FORMAT", value_enum, default_value = "text")]
    pub log_format: LogFormat,
}

fn parse_max_unavailable(value: &str) -> Result<MaxUnavailable, String> {
    value
        .parse()
        .map_err(|e: common::MaxUnavailableError| e.to_string())
}

fn parse_duration(value: &str) -> Result<Duration, String> {
    common::duration::parse_duration(value).map_err(|e| e.to_string())
}

fn parse_prefix(value: &str) -> Result<AnnotationKeys, String> {
    AnnotationKeys::new(value).map_err(|e| e.to_string())
}
