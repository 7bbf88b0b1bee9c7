//! Command-line flags; every flag is also an environment variable. The flags that the
//! controller has too (`--annotation-prefix`, `--namespace`, `--ledger-name`,
//! `--node-selector`, `--max-unavailable`, `--drain-pod-selector`) take the same values and the
//! same variables, so one settings file serves both.

use clap::{Args, Parser, Subcommand, ValueEnum};
use common::{AnnotationKeys, MaxUnavailable};
use controller_core::{
    scheduled_budget::ScheduledBudget,
    window::{Period, Window},
};
use std::time::Duration;

/// The node-reboot-operator from kubectl: what every node of the pool is doing and why
/// (`status`), the whole rollout planned wave by wave (`plan`), and the administrator's
/// requests (`request`, `cancel`, `abandon`, `pause`, `resume`); and `migrate-from-kured`,
/// a running kured's settings as this operator's chart values.
/// It reads only what the operator already writes: the nodes' annotations, the slot ledger
/// Lease, the Events, and the controller's metrics if reachable (and kured's DaemonSet and
/// the nodes for `migrate-from-kured`).
#[derive(Debug, Parser)]
#[command(name = "kubectl-reboot", bin_name = "kubectl reboot", version)]
pub struct Cli {
    #[command(flatten)]
    pub global: Global,
    #[command(subcommand)]
    pub command: Command,
}

/// Where the operator is, and how to reach the cluster.
#[derive(Debug, Clone, Args)]
pub struct Global {
    /// The kubeconfig file(s) to use (`:`-separated, as kubectl); default: kubectl's.
    #[arg(long, global = true, env = "KUBECONFIG")]
    pub kubeconfig: Option<String>,

    /// The kubeconfig context to use; default: the current one.
    #[arg(long, global = true, env = "KUBECTL_REBOOT_CONTEXT")]
    pub context: Option<String>,

    /// Prefix of every annotation key (`<prefix>/reboot-needed`): the controller's.
    #[arg(long, global = true, env = "ANNOTATION_PREFIX", default_value = "", value_parser = parse_prefix)]
    pub annotation_prefix: AnnotationKeys,

    /// Namespace of the slot ledger: the controller's `--namespace`.
    #[arg(short = 'n', long, global = true, env = "POD_NAMESPACE", default_value = common::ledger::OPERATOR_NAMESPACE)]
    pub namespace: String,

    /// Name of the slot ledger Lease: the controller's `--ledger-name` (one per pool).
    #[arg(long, global = true, env = "LEDGER_NAME", default_value = common::ledger::LEDGER_NAME)]
    pub ledger_name: String,
}

#[derive(Debug, Clone, Subcommand)]
pub enum Command {
    /// Every node of each pool with its state (idle, requested, waiting and why, draining,
    /// rebooting, soaking), the slots in use against the budget, and when the queue should
    /// be done: the flags' pool, then each RebootPool (its budget from its spec), or only
    /// `--pool`'s. Needs only read access (the `node-reboot-viewer` roles).
    Status(StatusArgs),
    /// The whole rollout, wave by wave: which nodes reboot together, in what order and why,
    /// which wait (for a window, the pause, a gate, a blocking pod, their zone's budget) and
    /// when each wave should start and end, the maintenance windows taken into account. The
    /// controller's own decision run forward on a simulated clock; give it the controller's
    /// settings (the same flags and environment variables). Needs only read access.
    Plan(PlanArgs),
    /// Asks for a reboot of each node (`reboot-needed=true`): it happens when the budget,
    /// the windows and the gates allow.
    Request(NodesArgs),
    /// Withdraws each node's request: removes `reboot-needed`, and `reboot-now` if the agent
    /// has not taken it yet. A reboot the agent has started cannot be cancelled.
    Cancel(NodesArgs),
    /// Gives a node up (it will not come back, or is being replaced), through the controller:
    /// it releases the node's slot, removes its own cordon (not an administrator's), clears
    /// the protocol's annotations and records who and why in a `RebootAbandoned` Event. An
    /// error for a node that is not in the reboot protocol.
    Abandon(AbandonArgs),
    /// Pauses: no new reboot starts in any pool (`reboot-paused=true` on the flags' pool's
    /// ledger Lease, which holds every RebootPool too); with `--pool`, in that RebootPool alone
    /// (`spec.paused: true`). Reboots under way finish.
    Pause(PoolArgs),
    /// Resumes the pool (removes `reboot-paused` from the ledger Lease; with `--pool`, sets
    /// `spec.paused: false` on that RebootPool), and lifts a stall of its rollout: the failures
    /// recorded on its ledger Lease (a failed canary, more than `--max-failures`) are forgiven,
    /// and the canary stage and the waves start over. Look at the failed nodes first (`kubectl
    /// reboot status`): give each up or mend it. A rollout record edited by hand is replaced
    /// with an empty one.
    Resume(PoolArgs),
    /// Prints a running kured's settings as this operator's chart values (`> values.yaml`);
    /// with `--cleanup`, once kured is removed, takes kured's leftovers off the nodes.
    ///
    /// Reads the kured DaemonSet (found by its image in any namespace, or named with
    /// `--kured-namespace` and `--kured-name`), its container's args and `KURED_*`
    /// environment as kured reads them, and prints the chart values with every kured setting
    /// translated; what cannot be translated is listed at the top, and on standard error, with
    /// why and what to do instead. `--cleanup` (the values' first lines give its flags)
    /// removes from each node only what kured's configuration put there: its PreferNoSchedule
    /// taint, its labels with kured's values, its annotations; it says what, node by node, and
    /// is refused while kured runs. Needs to read DaemonSets (and Pods and to patch Nodes for
    /// `--cleanup`).
    MigrateFromKured(MigrateArgs),
}

#[derive(Debug, Clone, Args)]
pub struct MigrateArgs {
    /// kured's namespace (default: every namespace; kube-system with `--kured-name`).
    #[arg(long, env = "KUBECTL_REBOOT_KURED_NAMESPACE")]
    pub kured_namespace: Option<String>,

    /// kured's DaemonSet (default: the one DaemonSet that runs kured's image).
    #[arg(long, env = "KUBECTL_REBOOT_KURED_NAME")]
    pub kured_name: Option<String>,

    /// Instead of translating, remove what kured left on the nodes; refused while kured runs.
    #[arg(long, env = "KUBECTL_REBOOT_KURED_CLEANUP")]
    pub cleanup: bool,

    /// With `--cleanup`: say what would be removed from each node, and change nothing.
    #[arg(long, env = "KUBECTL_REBOOT_DRY_RUN", requires = "cleanup")]
    pub dry_run: bool,

    /// With `--cleanup`: kured's `--prefer-no-schedule-taint`; its PreferNoSchedule taint
    /// comes off.
    #[arg(
        long,
        env = "KUBECTL_REBOOT_KURED_PREFER_NO_SCHEDULE_TAINT",
        requires = "cleanup"
    )]
    pub prefer_no_schedule_taint: Option<String>,

    /// With `--cleanup`: kured's `--pre-reboot-node-labels` (`key=value`, repeat or separate
    /// with commas); a label comes off a node only with that value.
    #[arg(long, env = "KUBECTL_REBOOT_KURED_PRE_REBOOT_NODE_LABELS", requires = "cleanup",
          value_delimiter = ',', value_parser = parse_label)]
    pub pre_reboot_node_labels: Vec<(String, String)>,

    /// With `--cleanup`: kured's `--post-reboot-node-labels`, as above. Leave out those that
    /// the operator's own postRebootNodeLabels set again, or that something selects nodes by.
    #[arg(long, env = "KUBECTL_REBOOT_KURED_POST_REBOOT_NODE_LABELS", requires = "cleanup",
          value_delimiter = ',', value_parser = parse_label)]
    pub post_reboot_node_labels: Vec<(String, String)>,

    /// With `--cleanup`: kured ran with `--annotate-nodes`; its
    /// `weave.works/kured-reboot-in-progress` and `weave.works/kured-most-recent-reboot-needed`
    /// node annotations come off.
    #[arg(
        long,
        env = "KUBECTL_REBOOT_KURED_ANNOTATE_NODES",
        requires = "cleanup"
    )]
    pub annotate_nodes: bool,
}

fn parse_label(value: &str) -> Result<(String, String), String> {
    match value.split_once('=') {
        Some((key, value)) if !key.is_empty() => Ok((key.to_owned(), value.to_owned())),
        _ => Err(format!("`{value}` is not key=value, as kured's labels are")),
    }
}

#[derive(Debug, Clone, Args)]
pub struct NodesArgs {
    /// The nodes.
    #[arg(required = true, value_name = "NODE")]
    pub nodes: Vec<String>,
}

#[derive(Debug, Clone, Args)]
pub struct AbandonArgs {
    /// The node.
    #[arg(value_name = "NODE")]
    pub node: String,

    /// Why, for the Event and the people who read it later (such as "disk failed, replaced").
    #[arg(long, env = "KUBECTL_REBOOT_REASON", default_value = "")]
    pub reason: String,
}

#[derive(Debug, Clone, Args)]
pub struct PoolArgs {
    /// A RebootPool, by name; without it, the flags' pool (its ledger Lease `--ledger-name`).
    #[arg(long, env = "KUBECTL_REBOOT_POOL", value_name = "NAME")]
    pub pool: Option<String>,
}

#[derive(Debug, Clone, Args)]
pub struct StatusArgs {
    /// Only this RebootPool. Without it, every pool: the flags' pool (the nodes no RebootPool
    /// selects) and each RebootPool.
    #[arg(long, env = "KUBECTL_REBOOT_POOL", value_name = "NAME")]
    pub pool: Option<String>,

    /// Label selector of the pool: the controller's `--node-selector` (default: all nodes).
    #[arg(long, env = "NODE_SELECTOR", default_value = "")]
    pub node_selector: String,

    /// The controller's `/metrics` URL (such as `http://127.0.0.1:8080/metrics` after
    /// `kubectl -n node-reboot-operator port-forward deploy/reboot-controller 8080`): the
    /// budget as the controller resolved it. Without it, or when it cannot be read, the budget
    /// is `--max-unavailable` resolved here.
    #[arg(long, env = "KUBECTL_REBOOT_METRICS_URL", value_parser = parse_http_url)]
    pub metrics_url: Option<String>,

    /// The controller's `--max-unavailable` (a number or a percentage of the pool), for the
    /// budget when the metrics cannot be read.
    #[arg(long, env = "MAX_UNAVAILABLE", value_parser = parse_max_unavailable)]
    pub max_unavailable: Option<MaxUnavailable>,

    /// The controller's `--drain-pod-selector`: only matching pods are counted as left to
    /// evict on a draining node.
    #[arg(long, env = "DRAIN_POD_SELECTOR")]
    pub drain_pod_selector: Option<String>,

    /// `text` for people, `json` for scripts (one document; with `--watch`, one per line).
    #[arg(short = 'o', long, env = "KUBECTL_REBOOT_OUTPUT", value_enum, default_value_t = Output::Text)]
    pub output: Output,

    /// Refresh every `--interval` until Ctrl-C (in place on a terminal).
    #[arg(short = 'w', long, env = "KUBECTL_REBOOT_WATCH")]
    pub watch: bool,

    /// How often `--watch` refreshes, such as `2s`.
    #[arg(long, env = "KUBECTL_REBOOT_INTERVAL", default_value = "2s", value_parser = parse_duration)]
    pub interval: Duration,

    /// The controller's `--reboot-window`s, for the estimate: new reboots start only inside
    /// one (repeat the flag, or separate windows with `;` in REBOOT_WINDOW). Default: always.
    #[arg(long = "reboot-window", env = "REBOOT_WINDOW", value_name = "WINDOW",
          value_delimiter = ';', value_parser = parse_window)]
    pub reboot_windows: Vec<Window>,

    /// The controller's `--reboot-blackout`s, for the estimate: no new reboot starts during
    /// one (repeat the flag, or separate them with `;` in REBOOT_BLACKOUT).
    #[arg(long = "reboot-blackout", env = "REBOOT_BLACKOUT", value_name = "PERIOD",
          value_delimiter = ';', value_parser = parse_period)]
    pub reboot_blackouts: Vec<Period>,
}

#[derive(Debug, Clone, Args)]
pub struct PlanArgs {
    /// Plan this RebootPool's nodes, with the budget, zone budget, concurrency, zone label,
    /// windows and soak of its spec (the flags below that say the same are then not read).
    /// Without it, the flags' pool (the nodes no RebootPool selects).
    #[arg(long, env = "KUBECTL_REBOOT_POOL", value_name = "NAME")]
    pub pool: Option<String>,

    /// Label selector of the pool: the controller's `--node-selector` (default: all nodes).
    #[arg(long, env = "NODE_SELECTOR", default_value = "")]
    pub node_selector: String,

    /// The controller's `/metrics` URL: the budget as the controller resolved it, the mean
    /// reboot length it measured, and whether a health gate holds new reboots now.
    #[arg(long, env = "KUBECTL_REBOOT_METRICS_URL", value_parser = parse_http_url)]
    pub metrics_url: Option<String>,

    /// The controller's `--max-unavailable` (a number or a percentage of the pool), when the
    /// metrics cannot be read.
    #[arg(long, env = "MAX_UNAVAILABLE", value_parser = parse_max_unavailable)]
    pub max_unavailable: Option<MaxUnavailable>,

    /// The controller's `--max-unavailable-per-zone` (default: no per-zone limit).
    #[arg(long, env = "MAX_UNAVAILABLE_PER_ZONE", value_parser = parse_max_unavailable)]
    pub max_unavailable_per_zone: Option<MaxUnavailable>,

    /// The controller's `--concurrency` (default: no limit but the budget's).
    #[arg(long, env = "CONCURRENCY", value_parser = parse_max_unavailable)]
    pub concurrency: Option<MaxUnavailable>,

    /// The controller's `--zone-label`.
    #[arg(
        long,
        env = "ZONE_LABEL",
        default_value = "topology.kubernetes.io/zone"
    )]
    pub zone_label: String,

    /// The controller's `--reboot-window`s (repeat the flag, or separate windows with `;` in
    /// REBOOT_WINDOW). Default: always.
    #[arg(long = "reboot-window", env = "REBOOT_WINDOW", value_name = "WINDOW",
          value_delimiter = ';', value_parser = parse_window)]
    pub reboot_windows: Vec<Window>,

    /// The controller's `--reboot-blackout`s (repeat the flag, or separate them with `;` in
    /// REBOOT_BLACKOUT): no wave starts during one.
    #[arg(long = "reboot-blackout", env = "REBOOT_BLACKOUT", value_name = "PERIOD",
          value_delimiter = ';', value_parser = parse_period)]
    pub reboot_blackouts: Vec<Period>,

    /// The controller's `--scheduled-budget`s (repeat the flag, or separate them with `;` in
    /// SCHEDULED_BUDGET): each lowers the budget while under way.
    #[arg(long = "scheduled-budget", env = "SCHEDULED_BUDGET", value_name = "BUDGET WHEN", allow_hyphen_values = true,
          value_delimiter = ';', value_parser = parse_scheduled_budget)]
    pub scheduled_budgets: Vec<ScheduledBudget>,

    /// The controller's `--min-ready-seconds`: each wave holds its slots this much longer.
    #[arg(long, env = "MIN_READY_SECONDS", default_value_t = 0)]
    pub min_ready_seconds: u64,

    /// How long one reboot takes, grant to completion, such as `4m`. Default: the median of
    /// the recent reboots in the Events, else the controller's mean; without either the
    /// waves are planned in order, without times.
    #[arg(long, env = "KUBECTL_REBOOT_REBOOT_DURATION", value_parser = parse_duration)]
    pub reboot_duration: Option<Duration>,

    /// `text` for people, `json` for scripts.
    #[arg(short = 'o', long, env = "KUBECTL_REBOOT_OUTPUT", value_enum, default_value_t = Output::Text)]
    pub output: Output,
}

impl PlanArgs {
    /// What `status` would read for the same pool.
    pub fn status_args(&self) -> StatusArgs {
        StatusArgs {
            pool: self.pool.clone(),
            node_selector: self.node_selector.clone(),
            metrics_url: self.metrics_url.clone(),
            max_unavailable: self.max_unavailable,
            drain_pod_selector: None,
            output: self.output,
            watch: false,
            interval: Duration::from_secs(2),
            reboot_windows: self.reboot_windows.clone(),
            reboot_blackouts: self.reboot_blackouts.clone(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Output {
    Text,
    Json,
}

fn parse_prefix(value: &str) -> Result<AnnotationKeys, String> {
    AnnotationKeys::new(value).map_err(|e| e.to_string())
}

fn parse_max_unavailable(value: &str) -> Result<MaxUnavailable, String> {
    value
        .parse()
        .map_err(|e: common::MaxUnavailableError| e.to_string())
}

fn parse_window(value: &str) -> Result<Window, String> {
    value.parse()
}

fn parse_period(value: &str) -> Result<Period, String> {
    value.parse()
}

fn parse_scheduled_budget(value: &str) -> Result<ScheduledBudget, String> {
    value.parse()
}

fn parse_duration(value: &str) -> Result<Duration, String> {
    match common::duration::parse_duration(value) {
        Ok(d) if d.is_zero() => Err("the duration must be longer than 0".to_owned()),
        Ok(d) => Ok(d),
        Err(e) => Err(e.to_string()),
    }
}

fn parse_http_url(value: &str) -> Result<String, String> {
    let hint = "give an http:// or https:// URL such as http://127.0.0.1:8080/metrics";
    let uri: hyper::Uri = value.parse().map_err(|e| format!("{e}; {hint}"))?;
    match uri.scheme_str() {
        Some("http" | "https") if uri.host().is_some() => Ok(value.to_owned()),
        _ => Err(format!("not an http(s) URL; {hint}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("kubectl-reboot").chain(args.iter().copied()))
    }

    #[test]
    fn the_flags_parse_and_default_to_the_controllers_defaults() {
        let cli = parse(&["status", "-o", "json", "--max-unavailable", "25%"]).unwrap();
        assert_eq!(cli.global.namespace, "node-reboot-operator");
        assert_eq!(cli.global.ledger_name, "node-reboot-operator-slots");
        let Command::Status(status) = cli.command else {
            panic!("status")
        };
        assert_eq!(status.output, Output::Json);
        assert_eq!(status.max_unavailable, Some(MaxUnavailable::Percent(25)));
        let cli = parse(&["request", "a", "b", "--annotation-prefix", "x.example.com"]).unwrap();
        assert_eq!(
            cli.global.annotation_prefix.needed,
            "x.example.com/reboot-needed"
        );
        assert!(matches!(cli.command, Command::Request(n) if n.nodes == ["a", "b"]));
    }

    #[test]
    fn bad_values_are_refused_with_the_fix() {
        assert!(parse(&["cancel"]).is_err(), "a node is required");
        assert!(parse(&["abandon"]).is_err(), "a node is required");
        let cli = parse(&["abandon", "n1", "--reason", "disk dead"]).unwrap();
        assert!(
            matches!(cli.command, Command::Abandon(a) if a.node == "n1" && a.reason == "disk dead")
        );
        let err = parse(&["status", "--metrics-url", "localhost:8080"]).unwrap_err();
        assert!(err.to_string().contains("http://"), "{err}");
        let err = parse(&["status", "--annotation-prefix", "A_B"]).unwrap_err();
        assert!(err.to_string().contains("DNS subdomain"), "{err}");
        assert!(parse(&["status", "--interval", "0s"]).is_err());
        let err = parse(&["plan", "--reboot-window", "Mon 25:00-26:00"]).unwrap_err();
        assert!(err.to_string().contains("DAYS HH:MM-HH:MM"), "{err}");
        let err = parse(&["plan", "--max-unavailable-per-zone", "150%"]).unwrap_err();
        assert!(
            err.to_string().contains("max-unavailable-per-zone"),
            "{err}"
        );
    }

    #[test]
    fn migrate_from_kured_names_kured_apart_from_the_operators_namespace() {
        let cli = parse(&[
            "migrate-from-kured",
            "-n",
            "ops",
            "--kured-namespace",
            "kube-system",
        ])
        .unwrap();
        assert_eq!(cli.global.namespace, "ops");
        let Command::MigrateFromKured(m) = cli.command else {
            panic!("migrate-from-kured")
        };
        assert_eq!(m.kured_namespace.as_deref(), Some("kube-system"));
        assert!(
            parse(&["migrate-from-kured", "--dry-run"]).is_err(),
            "--dry-run needs --cleanup"
        );
        let cli = parse(&[
            "migrate-from-kured",
            "--cleanup",
            "--post-reboot-node-labels=lb=in,zone=a",
        ])
        .unwrap();
        let Command::MigrateFromKured(m) = cli.command else {
            panic!("migrate-from-kured")
        };
        assert_eq!(
            m.post_reboot_node_labels,
            [("lb".into(), "in".into()), ("zone".into(), "a".into())]
        );
        assert!(
            parse(&[
                "migrate-from-kured",
                "--cleanup",
                "--pre-reboot-node-labels=lb"
            ])
            .is_err()
        );
    }

    #[test]
    fn the_plan_takes_the_controllers_settings() {
        let cli = parse(&[
            "plan",
            "--reboot-window",
            "Tue 22:00-23:00",
            "--reboot-window",
            "Sat 01:00-05:00 Europe/Berlin",
            "--max-unavailable-per-zone",
            "1",
            "--min-ready-seconds",
            "30",
        ])
        .unwrap();
        let Command::Plan(plan) = cli.command else {
            panic!("plan")
        };
        assert_eq!(plan.reboot_windows.len(), 2);
        assert_eq!(
            plan.max_unavailable_per_zone,
            Some(MaxUnavailable::Count(1))
        );
        assert_eq!(plan.min_ready_seconds, 30);
        assert_eq!(plan.zone_label, "topology.kubernetes.io/zone");
    }
}
