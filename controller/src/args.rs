//! Command-line flags; every flag is also an environment variable.

use crate::{cache::pool::PoolSelector, cluster::leader::Timing, gates::blocking_pods::Scope};
use clap::{CommandFactory, Parser};
use common::{AnnotationKeys, MaxUnavailable, rollout::MaxFailures};
use controller_core::{
    alerts::{AlertFilter, FilterMode},
    decide::SetAside,
    rollout::RolloutRules,
    scheduled_budget::{Budgets, ScheduledBudget},
    window::{Period, Window, Windows},
};
use observability::BindAddress;
pub use observability::LogFormat;
use std::time::Duration;

/// Reboots the cluster's nodes safely: grants `reboot-needed` nodes a slot while at most
/// `--max-unavailable` nodes are unavailable, cordons them, tells their agent to reboot, and
/// uncordons them once the reboot is proven and the node is Ready.
#[derive(Debug, Clone, Parser)]
#[command(name = "reboot-controller", version)]
pub struct Args {
    /// How many nodes of the pool may be unavailable at once: a number (`2`) or a
    /// percentage of the pool (`25%`, rounded down, at least 1). `0` holds every new reboot;
    /// the reboots under way finish.
    #[arg(long, env = "MAX_UNAVAILABLE", default_value = "1", allow_negative_numbers = true, value_parser = parse_max_unavailable)]
    pub max_unavailable: MaxUnavailable,

    /// Label selector of the pool of nodes this controller manages (default: all nodes),
    /// such as `pool=a,zone in (z1,z2)`. A node that leaves the pool while it holds a slot
    /// is still finished by this controller.
    #[arg(long, env = "NODE_SELECTOR", default_value = "", value_parser = parse_pool)]
    pub node_selector: PoolSelector,

    /// How many nodes of each zone may be unavailable at once, on top of --max-unavailable:
    /// a number or a percentage of the zone's nodes in the pool (rounded down, at least 1).
    /// Zones are the values of --zone-label; nodes without it form one zone of their own.
    /// Default: no per-zone limit.
    #[arg(long, env = "MAX_UNAVAILABLE_PER_ZONE", allow_negative_numbers = true, value_parser = parse_max_unavailable)]
    pub max_unavailable_per_zone: Option<MaxUnavailable>,

    /// At most this many nodes of the pool in the operator's own reboots at once (granted,
    /// cordoned, draining, rebooting, or completed and soaking), such as `2` or `10%` of the
    /// pool (rounded down, at least 1): kured's `--concurrency`. A grant needs room in both
    /// this and --max-unavailable, which counts every unavailable node (cordoned by anyone,
    /// NotReady). Unset: no limit but --max-unavailable's.
    #[arg(long, env = "CONCURRENCY", allow_negative_numbers = true, value_parser = parse_max_unavailable)]
    pub concurrency: Option<MaxUnavailable>,

    /// The node label that names a node's zone, for --max-unavailable-per-zone and for
    /// spreading reboots across zones.
    #[arg(
        long,
        env = "ZONE_LABEL",
        default_value = "topology.kubernetes.io/zone",
        value_parser = parse_label_key
    )]
    pub zone_label: String,

    /// Prefix of every annotation key (`<prefix>/reboot-needed`); must match the agents'.
    #[arg(long, env = "ANNOTATION_PREFIX", default_value = "", value_parser = parse_prefix)]
    pub annotation_prefix: AnnotationKeys,

    /// Namespace of the slot ledger (and of the leader Lease).
    #[arg(long, env = "POD_NAMESPACE", default_value = common::ledger::OPERATOR_NAMESPACE,
          value_parser = parse_namespace)]
    pub namespace: String,

    /// Name of the Lease that records which nodes of the flags' pool hold a slot (each
    /// `RebootPool`'s is `node-reboot-pool-<name>`, so a name starting `node-reboot-pool-` is
    /// refused). Two controller Deployments need different ledgers.
    #[arg(long, env = "LEDGER_NAME", default_value = common::ledger::LEDGER_NAME,
          value_parser = parse_lease_name)]
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

    /// On a node that is not Ready, a pod whose deletion the kubelet has not confirmed counts
    /// as gone once the drain has seen it terminating for its grace period plus this margin
    /// (`kubectl drain --skip-wait-for-delete-timeout`, for NotReady nodes only): a node whose
    /// kubelet hangs confirms no deletion, and rebooting it is the cure. `0s` waits for every
    /// pod. The default, 5m, is the time Kubernetes lets pods sit on a NotReady node before
    /// evicting them (the default not-ready toleration, 300 s): a kubelet silent that long
    /// past a grace period is not about to finish it.
    #[arg(long, env = "DRAIN_SKIP_WAIT_FOR_DELETE_MARGIN", default_value = "5m", allow_hyphen_values = true, value_parser = parse_duration_or_zero)]
    pub drain_skip_wait_for_delete_margin: Duration,

    /// The longest wait between two tries of an eviction that a PodDisruptionBudget refused,
    /// such as `5s`: the first wait is a 25th of it (200 ms for `5s`), and each next one twice
    /// the last. With --check-disruption-budgets
    /// (the default) the controller watches the budgets and tries again as soon as the budget
    /// that refused the pod allows a disruption: this wait is then only the fallback.
    #[arg(long, env = "EVICTION_RETRY_MAX_DELAY", default_value = "5s", allow_hyphen_values = true, value_parser = parse_duration)]
    pub eviction_retry_max_delay: Duration,

    /// How long to wait between the cordon and the start of the drain (kured's
    /// `--drain-delay`), such as `30s`: time for what watches cordons (a load balancer taking
    /// the node out, a job queue moving work elsewhere) before pods are evicted. Counted from
    /// the cordon, by the acting controller's own clock: a controller that takes over (restart,
    /// new leader) counts from when it first saw the node cordoned for its grant, so the delay
    /// may be longer than asked then, never shorter. `0s`: no delay.
    #[arg(long, env = "DRAIN_DELAY", default_value = "0s", allow_hyphen_values = true, value_parser = parse_duration_or_zero)]
    pub drain_delay: Duration,

    /// How long to wait between the end of the drain and `reboot-now` (kured's
    /// `--reboot-delay`), such as `1m`: the node stays cordoned and drained, holding its slot.
    /// With `--drain=false`, counted from the cordon. A controller that takes over (restart,
    /// new leader) drains again (usually nothing is left to evict) and waits the whole delay
    /// again: the delay may be longer than asked then, never shorter. `0s`: no delay.
    #[arg(long, env = "REBOOT_DELAY", default_value = "0s", allow_hyphen_values = true, value_parser = parse_duration_or_zero)]
    pub reboot_delay: Duration,

    /// DANGEROUS: a drain that has not finished within --drain-timeout reboots the node anyway,
    /// with the pods still on it, instead of being abandoned (kured's `--force-reboot`). A
    /// PodDisruptionBudget that blocks the drain is then broken: the pods still there stop with
    /// the node, not gracefully evicted. Each forced reboot gets a Warning Event
    /// (`RebootForced`) naming those pods, and counts in `node_reboot_reboots_forced_total`.
    #[arg(long, env = "FORCE_REBOOT", default_value_t = false, action = clap::ArgAction::Set,
          num_args = 0..=1, default_missing_value = "true")]
    pub force_reboot: bool,

    /// Set a node aside once this many drains of its request have failed (timed out): it keeps
    /// its request but is not granted again, uncordoned, with a Warning (`SetAside`) naming the
    /// pods that blocked it, and the rest of the pool goes on. The count is kept on the node
    /// (`reboot-drain-failures`, written only while this is set); remove it to try the node
    /// again. A reboot completed or a request withdrawn clears it. Unset: a failing drain is
    /// retried for ever (after 30 s, growing to 15 minutes).
    #[arg(long, env = "DRAIN_ATTEMPTS", value_parser = parse_drain_attempts)]
    pub drain_attempts: Option<u32>,

    /// With more nodes of the pool set aside (--drain-attempts) than this, the pool is stalled:
    /// no new reboot starts (a `Stalled` Event on the waiting nodes) until an administrator
    /// fixes their drains and removes their `reboot-drain-failures`, or gives them up. Reboots
    /// under way finish. Unset: no limit.
    #[arg(long, env = "MAX_BLOCKED_NODES", requires = "drain_attempts", allow_hyphen_values = true,
          value_parser = parse_max_blocked_nodes)]
    pub max_blocked_nodes: Option<u32>,

    /// With --drain-attempts: a node set aside keeps the operator's cordon, so that nothing is
    /// scheduled back onto it while the drain is looked into (AKS's `undrainableNodeBehavior:
    /// Cordon`). Cordoned, it counts against --max-unavailable: with a budget of 1, one node
    /// set aside holds the pool. Trying it again (removing `reboot-drain-failures`) keeps it
    /// cordoned until its next turn; withdrawing its request or `kubectl uncordon` ends it.
    /// Off: a node set aside is uncordoned.
    #[arg(long, env = "KEEP_SET_ASIDE_CORDONED", default_value_t = false, action = clap::ArgAction::Set,
          num_args = 0..=1, default_missing_value = "true")]
    pub keep_set_aside_cordoned: bool,

    /// The first this many nodes of each rollout (a rollout begins when requests come to a
    /// pool with no node in the protocol) go alone, within the budgets: the rest wait until
    /// they have completed and soaked for --canary-soak. A canary that fails (its drain times
    /// out, it is overdue, its reboot is unproven, it is NotReady after it) stalls the pool
    /// until `kubectl reboot resume`. 0: no canary.
    #[arg(long, env = "CANARY", default_value_t = 0, allow_negative_numbers = true,
          value_parser = parse_canary)]
    pub canary: u32,

    /// How long a canary is Ready after its reboot before the rest of the rollout starts (its
    /// slot is held meanwhile, as --min-ready-seconds holds it; the longer of the two applies).
    #[arg(long, env = "CANARY_SOAK", default_value = "0s", allow_hyphen_values = true,
          value_parser = parse_duration_or_zero)]
    pub canary_soak: Duration,

    /// Waves that grow: the nodes of a rollout in the protocol start at 1 (twice --canary
    /// after a canary) and double each time a wave has completed, up to the budgets; a
    /// failure drops them back to 1.
    #[arg(long, env = "WAVES", default_value_t = false, action = clap::ArgAction::Set,
          num_args = 0..=1, default_missing_value = "true")]
    pub waves: bool,

    /// With --reboot-window: how long a reboot takes, from its grant to its completion, before
    /// the pool has a history (then the larger of this and the 90th percentile of its last 20
    /// reboots, as this controller measured them). A node whose reboot would not end before
    /// the window closes (or a blackout starts) is not started: it waits for the next window,
    /// so that a strict window (--finish-after-window=false) never leaves a node drained and
    /// parked. Unset: a reboot starts whenever the window is open.
    #[arg(long, env = "REBOOT_ESTIMATE", allow_hyphen_values = true, value_parser = parse_duration)]
    pub reboot_estimate: Option<Duration>,

    /// The failure budget of a rollout: with more of its nodes failed than this (a drain that
    /// timed out, a reboot overdue or unproven, a node NotReady after its reboot), the pool is
    /// stalled: nothing new starts, reboots under way finish, and a `Stalled` Warning says why
    /// until `kubectl reboot resume`. A count (`0`: stop at the first failure) or a percentage
    /// of the rollout's nodes (`10%`, rounded down). Unset: no limit.
    #[arg(long, env = "MAX_FAILURES", allow_hyphen_values = true, value_parser = parse_max_failures)]
    pub max_failures: Option<MaxFailures>,

    /// A RebootPool's `spec.resumedAt` (Unix milliseconds); no flag: the flags' pool is
    /// resumed on its Lease by `kubectl reboot resume`.
    #[arg(skip)]
    pub resumed_at: Option<u64>,

    /// Label selector: evict only matching pods (default: every pod but DaemonSet and mirror pods).
    #[arg(long, env = "DRAIN_POD_SELECTOR", value_parser = parse_drain_pod_selector)]
    pub drain_pod_selector: Option<String>,

    /// Before granting a node, look for a pod the drain would evict that the Eviction API
    /// would refuse to evict now, by its own rules (a PodDisruptionBudget that allows no
    /// disruption; a pod that is Pending, or not Ready while its budget has the healthy pods it
    /// needs, is evicted anyway): such a node is not cordoned (its drain could not finish);
    /// another requested node goes instead, and it goes once the pod can be evicted. Its Event
    /// (`DisruptionBudget`) names the pod and the budget. With --force-reboot it holds no node:
    /// the Event says the drain will be forced. Only with --drain.
    #[arg(long, env = "CHECK_DISRUPTION_BUDGETS", default_value_t = true, action = clap::ArgAction::Set)]
    pub check_disruption_budgets: bool,

    /// Label selector of the reboot-agent's pods: a node without one that is Running and Ready
    /// is not granted (nothing would take `reboot-now`); it waits with an Event (`NoAgent`),
    /// and another requested node goes instead. On a node that is not Ready a Running agent pod
    /// is enough. Empty: no such check.
    #[arg(long, env = "AGENT_SELECTOR", default_value = "app.kubernetes.io/name=reboot-agent", value_parser = parse_agent_selector)]
    pub agent_selector: String,

    /// How long a pre-flight check (--agent-selector, --check-disruption-budgets) that has no
    /// answer because its watch fails (it met an error and has not listed since: a role
    /// without the right, a list that keeps failing) holds the requested nodes. Then it holds
    /// none: each node granted goes without it, with a Warning (`PreflightUnanswered`) naming
    /// the watch, its error and the fix, and `node_reboot_preflight_unanswered` is 1. The drain
    /// still honours every budget. A list that is only slow holds the nodes until it lists.
    #[arg(long, env = "PREFLIGHT_TIMEOUT", default_value = "2m", allow_hyphen_values = true, value_parser = parse_duration)]
    pub preflight_timeout: Duration,

    /// After a node's reboot is completed, its slot stays taken until the node has been Ready
    /// this many seconds (as a Deployment's minReadySeconds). A node that goes NotReady
    /// meanwhile keeps its slot, gets a Warning Event (`NotReadyAfterReboot`), and no new
    /// reboot starts in the pool until it is Ready again: a bad kernel stops the rollout.
    /// 0: no soak.
    #[arg(long, env = "MIN_READY_SECONDS", default_value_t = 0)]
    pub min_ready_seconds: u64,

    /// How long a node told to reboot (from `reboot-now` on) may take until its reboot is
    /// completed: the kubelet reports the new boot and the node is Ready. Past it, the node
    /// keeps its slot and cordon, gets a Warning Event (`RebootOverdue`), and no new reboot
    /// starts in the pool until it completes or an administrator acts: a bad kernel (a node
    /// back NotReady, or not back at all) stops the rollout. Reboots under way go on. The
    /// default, 30m, is well above a slow bare-metal reboot with its firmware POST (minutes),
    /// and short enough that a broken fleet is noticed within a maintenance window.
    #[arg(long, env = "REBOOT_TIMEOUT", default_value = "30m", allow_hyphen_values = true, value_parser = parse_duration)]
    pub reboot_timeout: Duration,

    /// Off by default: a node told to reboot that has not completed within this long (such as
    /// `2h`) and is NotReady is given up as `kubectl reboot abandon` does (kured's
    /// `--lock-ttl`); a Ready one keeps its slot, since it may still go down: its protocol
    /// is cleared, the operator's cordon removed and its slot released, with a `GaveUp`
    /// Warning, a notification and `node_reboot_reboots_given_up_total`; the rollout goes on.
    /// A given-up node that is NotReady still counts against --max-unavailable. At least
    /// --reboot-timeout. Unset: only an administrator gives a node up.
    #[arg(long, env = "GIVE_UP_AFTER", allow_hyphen_values = true, value_parser = parse_duration)]
    pub give_up_after: Option<Duration>,

    /// When new reboots may start, in the window's time zone: `DAYS HH:MM-HH:MM [ZONE]`,
    /// such as `Mon-Fri 22:00-06:00 Europe/Berlin` (DAYS as `Mon`, `mo` or `Monday`, ranges
    /// and lists; an end before the start ends the next day; ZONE is an IANA zone, default
    /// UTC), or `CRON DURATION [ZONE]`, such as `0 22 * * 1-5 8h Europe/Berlin`. Repeat the
    /// flag, or separate windows with `;` in REBOOT_WINDOW, for several: their union.
    /// Default: always. A closed window stops new grants; see --finish-after-window for a node
    /// granted before it closed.
    #[arg(long = "reboot-window", env = "REBOOT_WINDOW", value_name = "WINDOW",
          value_delimiter = ';', value_parser = parse_window)]
    pub reboot_windows: Vec<Window>,

    /// When no new reboot may start, whatever --reboot-window says: `FROM..UNTIL [ZONE]`, such
    /// as `2026-12-20..2027-01-03 Europe/Berlin` (whole days, both included) or
    /// `2026-12-24T18:00..2026-12-27T06:00` (the end excluded), or anything --reboot-window
    /// takes, such as `Fri 16:00-24:00` or `0 0 24 12 * 72h`. Repeat the flag, or separate them
    /// with `;` in REBOOT_BLACKOUT. A reboot under way when one starts goes on as when a window
    /// closes (--finish-after-window).
    #[arg(long = "reboot-blackout", env = "REBOOT_BLACKOUT", value_name = "PERIOD",
          value_delimiter = ';', value_parser = parse_period)]
    pub reboot_blackouts: Vec<Period>,

    /// A budget that applies while its period is under way: `BUDGET WHEN`, such as
    /// `1 Mon-Fri 06:00-22:00 Europe/Berlin` (one node by day) or `0 2026-12-20..2027-01-03`
    /// (nothing during a freeze); BUDGET as --max-unavailable takes it, or 0; WHEN as
    /// --reboot-blackout takes it. Of --max-unavailable and the scheduled budgets under way,
    /// the lowest applies; a lower budget revokes nothing under way, it only holds new reboots
    /// until the pool is under it. Repeat the flag, or separate them with `;` in
    /// SCHEDULED_BUDGET.
    #[arg(long = "scheduled-budget", env = "SCHEDULED_BUDGET", value_name = "BUDGET WHEN", allow_hyphen_values = true,
          value_delimiter = ';', value_parser = parse_scheduled_budget)]
    pub scheduled_budgets: Vec<ScheduledBudget>,

    /// When a window closes, a node that was granted a slot but not yet told to reboot
    /// (cordoned, maybe draining) goes on to its reboot (`true`), or is uncordoned and waits
    /// for the next window with its request kept (`false`). Nodes already told to reboot
    /// always finish: a node is never left cordoned and drained at a window's end. With
    /// `true`, a node that a pause, a closed gate or a blocking pod holds once the window has
    /// closed is uncordoned and waits for the next window too.
    #[arg(long, env = "FINISH_AFTER_WINDOW", default_value_t = true, action = clap::ArgAction::Set)]
    pub finish_after_window: bool,

    #[command(flatten)]
    pub gates: GateArgs,

    /// Whether the flags above define a pool of their own beside the `RebootPool` objects: the
    /// nodes `--node-selector` selects that no `RebootPool` selects, rebooted under
    /// `--max-unavailable` with the slot ledger `--ledger-name`. `false` when every node
    /// belongs to a `RebootPool`: the nodes none selects are then never rebooted.
    #[arg(long, env = "DEFAULT_POOL", default_value_t = true, action = clap::ArgAction::Set)]
    pub default_pool: bool,

    /// Log format: `text`, or `json` (one object per line). The level comes from RUST_LOG
    /// (default `info`).
    #[arg(long, env = "LOG_FORMAT", value_enum, default_value = "text")]
    pub log_format: LogFormat,

    /// Where to serve /metrics, /healthz and /readyz: IP:PORT, `:PORT` for every interface,
    /// or `0` for no server.
    #[arg(long, env = "METRICS_BIND_ADDRESS", default_value = "0.0.0.0:8080", value_parser = parse_bind_address)]
    pub metrics_bind_address: BindAddress,

    /// Decide, and log and report in Events (reason `DryRun`) what would be granted,
    /// cordoned, evicted and promoted, but write nothing to nodes or the slot ledger, and take
    /// no leader Lease: for a first look at a production cluster, beside or instead of a
    /// running controller.
    #[arg(long, env = "DRY_RUN")]
    pub dry_run: bool,

    /// Check the flags as a start does, print `valid` (exit code 0) or what is wrong (exit
    /// code 2), and exit without connecting to anything: for a chart's values, a pod spec, or
    /// a change of flags before it rolls out.
    #[arg(long, env = "VALIDATE")]
    pub validate: bool,

    /// Elect one leader among the replicas with a Lease; the others keep their cache warm and
    /// change nothing. `--leader-elect=false` makes every replica act (the slot ledger still
    /// keeps the budget).
    #[arg(long, env = "LEADER_ELECT", default_value_t = true, action = clap::ArgAction::Set)]
    pub leader_elect: bool,

    /// Name of the leader Lease, in --namespace.
    #[arg(
        long,
        env = "LEADER_ELECTION_LEASE_NAME",
        default_value = "reboot-controller",
        value_parser = parse_lease_name
    )]
    pub leader_election_lease_name: String,

    /// How long the other replicas wait for a leader that stopped renewing before one of them
    /// takes over. Such as `15s`.
    #[arg(long, env = "LEADER_ELECTION_LEASE_DURATION", default_value = "15s", allow_hyphen_values = true, value_parser = parse_duration)]
    pub leader_election_lease_duration: Duration,

    /// The leader stops acting when it could not renew the Lease for this long; shorter than
    /// the lease duration.
    #[arg(long, env = "LEADER_ELECTION_RENEW_DEADLINE", default_value = "10s", allow_hyphen_values = true, value_parser = parse_duration)]
    pub leader_election_renew_deadline: Duration,

    /// How often the leader renews the Lease and the others check it; shorter than the renew
    /// deadline.
    #[arg(long, env = "LEADER_ELECTION_RETRY_PERIOD", default_value = "2s", allow_hyphen_values = true, value_parser = parse_duration)]
    pub leader_election_retry_period: Duration,

    /// This replica's name in the leader Lease and in its Events (default: `<hostname>_<pid>`).
    /// In a pod, the pod's name from the downward API.
    #[arg(long, env = "POD_NAME")]
    pub leader_election_identity: Option<String>,

    #[command(flatten)]
    pub marks: MarkArgs,

    // Last: clap's help heading of a flattened group holds for the flags after it.
    #[command(flatten)]
    pub notify: NotifyArgs,
}

/// Labels and a taint around a reboot, for load balancers, monitoring and the scheduler.
#[derive(Debug, Clone, clap::Args)]
#[command(next_help_heading = "Node labels and taint")]
pub struct MarkArgs {
    /// Labels (`key=value`) set on a node when its reboot slot is granted (just before it is
    /// cordoned), and removed when it is back or given back: for load balancers and monitoring
    /// that must leave it out. A label of the key that the node already has is left as it is
    /// (a Warning says so), unless it is the post-reboot label of that key. Not a key of
    /// --node-selector, the --zone-label or the opt-out label. Repeat the flag or separate
    /// labels with `,`. Default: none.
    #[arg(long = "pre-reboot-node-labels", env = "PRE_REBOOT_NODE_LABELS", value_name = "KEY=VALUE",
          value_delimiter = ',', value_parser = parse_label)]
    pub pre_reboot_node_labels: Vec<(String, String)>,

    /// Labels (`key=value`) set on a node when its reboot is completed, and left there; one
    /// with the key of a pre-reboot label replaces it. A label of the key that somebody else
    /// set stays as it is. Repeat the flag or separate labels with `,`. Default: none.
    #[arg(long = "post-reboot-node-labels", env = "POST_REBOOT_NODE_LABELS", value_name = "KEY=VALUE",
          value_delimiter = ',', value_parser = parse_label)]
    pub post_reboot_node_labels: Vec<(String, String)>,

    /// The key of a `PreferNoSchedule` taint put on every node of the pool that waits for its
    /// reboot (requested, not yet done), so that new pods prefer other nodes; removed when the
    /// reboot is completed or the request withdrawn. Such as
    /// `node.example.com/reboot-pending`. Default: no taint.
    #[arg(long, env = "PREFER_NO_SCHEDULE_TAINT", value_name = "KEY", value_parser = parse_taint_key)]
    pub prefer_no_schedule_taint: Option<String>,
}

impl MarkArgs {
    pub fn marks(&self) -> common::RebootMarks {
        common::RebootMarks {
            pre_reboot_labels: self.pre_reboot_node_labels.iter().cloned().collect(),
            post_reboot_labels: self.post_reboot_node_labels.iter().cloned().collect(),
            prefer_no_schedule_taint: self.prefer_no_schedule_taint.clone(),
            // The shell's: the ledger it writes.
            ledger: String::new(),
        }
    }
}

/// What holds new reboots while the cluster is unhealthy. Reboots under way always finish.
#[derive(Debug, Clone, clap::Args)]
#[command(next_help_heading = "Health gates")]
pub struct GateArgs {
    /// Label selector of pods that block reboots: no new reboot of a node while a matching pod
    /// that has not finished (Pending or Running) is on it. Repeat the flag, or separate
    /// selectors with `;` in BLOCKING_POD_SELECTOR, for several (any of them blocks).
    #[arg(long = "blocking-pod-selector", env = "BLOCKING_POD_SELECTOR", value_name = "SELECTOR",
          value_delimiter = ';', value_parser = parse_pod_selector)]
    pub blocking_pod_selectors: Vec<String>,

    /// `node`: a blocking pod holds the node it runs on. `cluster`: it holds every node of
    /// the pool, wherever it runs (a backup job, a migration).
    #[arg(
        long,
        env = "BLOCKING_POD_SELECTOR_SCOPE",
        value_enum,
        default_value = "node"
    )]
    pub blocking_pod_selector_scope: Scope,

    /// Prometheus (or any server of its HTTP API: Thanos, Mimir) to ask for active alerts:
    /// no new reboot while an alert that counts is active, nor while it cannot be asked.
    #[arg(long, env = "PROMETHEUS_URL", value_parser = parse_http_url)]
    pub prometheus_url: Option<String>,

    /// Regex on alert names (`alertname`), applied as --alert-filter-mode says.
    #[arg(long, env = "ALERT_FILTER", requires = "prometheus_url", value_parser = parse_regex)]
    pub alert_filter: Option<regex::Regex>,

    /// `exclude`: alerts whose names match --alert-filter do not hold reboots (as kured's
    /// --alert-filter-regexp). `include`: only they do (as kured's --alert-filter-match-only).
    #[arg(
        long,
        env = "ALERT_FILTER_MODE",
        value_enum,
        default_value = "exclude",
        requires = "alert_filter"
    )]
    pub alert_filter_mode: FilterMode,

    /// Only firing alerts hold reboots; without it pending ones (their `for` not yet over) do too.
    #[arg(long, env = "ALERT_FIRING_ONLY", default_value_t = false, action = clap::ArgAction::Set,
          requires = "prometheus_url")]
    pub alert_firing_only: bool,

    /// How long to wait for Prometheus (and Alertmanager); no answer holds the gate closed.
    #[arg(long, env = "PROMETHEUS_TIMEOUT", default_value = "10s", allow_hyphen_values = true, value_parser = parse_duration)]
    pub prometheus_timeout: Duration,

    /// How often alerts are checked while requests wait (never while none do).
    #[arg(long, env = "ALERT_CHECK_PERIOD", default_value = "30s", allow_hyphen_values = true, value_parser = parse_duration)]
    pub alert_check_period: Duration,

    /// Alertmanager whose active silences mute alerts: a silenced alert does not hold reboots.
    /// If it cannot be read, every alert counts.
    #[arg(long, env = "ALERTMANAGER_URL", requires = "prometheus_url", value_parser = parse_http_url)]
    pub alertmanager_url: Option<String>,
}

/// Messages about a rollout's steps to chat or webhooks, as kured's `--notify-url` sends them.
#[derive(Debug, Clone, clap::Args)]
#[command(next_help_heading = "Notifications")]
pub struct NotifyArgs {
    /// Where the leader sends a message when a rollout starts, a node is drained, is told to
    /// reboot and is back, and when a rollout stops (and why) or finishes: a URL of kured's
    /// (shoutrrr's) for Slack, Teams, Discord, Telegram, Mattermost, Rocket.Chat, Google Chat,
    /// ntfy, Gotify, Pushover, Zulip, Matrix, OpsGenie, e-mail (`smtp://`) or a generic
    /// webhook, with its options, or an http(s):// URL that gets a JSON POST (the kured page
    /// of the docs lists the forms); through the proxy of `HTTPS_PROXY`, `HTTP_PROXY` and
    /// `NO_PROXY`. Repeat the flag, or separate URLs with commas or spaces, for several.
    /// A webhook URL is a secret: it is never logged in full.
    #[arg(
        long = "notify-url",
        env = "NOTIFY_URL",
        value_name = "URL",
        hide_env_values = true
    )]
    pub notify_urls: Vec<String>,

    /// How long one attempt to send a notification may take; a failed one is retried 3 times
    /// with backoff, then dropped (counted). A slow webhook never slows a reboot.
    #[arg(long, env = "NOTIFY_TIMEOUT", default_value = "10s", allow_hyphen_values = true, value_parser = parse_duration)]
    pub notify_timeout: Duration,

    /// The message when a node is drained; `{node}` (or kured's `%s`, `{{.}}`) is its name.
    #[arg(
        long,
        env = "MESSAGE_TEMPLATE_DRAIN",
        default_value = "Node {node} drained"
    )]
    pub message_template_drain: String,

    /// The message when a node is told to reboot; `{node}` (or `%s`, `{{.}}`) is its name.
    #[arg(
        long,
        env = "MESSAGE_TEMPLATE_REBOOT",
        default_value = "Rebooting node {node}"
    )]
    pub message_template_reboot: String,

    /// The message when a node is back (new boot, Ready, uncordoned); `{node}` (or `%s`,
    /// `{{.}}`) is its name.
    #[arg(
        long,
        env = "MESSAGE_TEMPLATE_UNCORDON",
        default_value = "Node {node} rebooted and uncordoned"
    )]
    pub message_template_uncordon: String,

    /// The webhooks of `--notify-url`, read by [`Args::checked`].
    #[arg(skip)]
    pub targets: Vec<crate::notify::Target>,
}

impl NotifyArgs {
    pub fn templates(&self) -> crate::notify::Templates {
        crate::notify::Templates {
            drain: self.message_template_drain.clone(),
            reboot: self.message_template_reboot.clone(),
            uncordon: self.message_template_uncordon.clone(),
        }
    }
}

impl GateArgs {
    pub fn alert_filter(&self) -> AlertFilter {
        AlertFilter {
            names: self.alert_filter.clone(),
            mode: self.alert_filter_mode,
            firing_only: self.alert_firing_only,
        }
    }
}

impl Args {
    pub fn leader_timing(&self) -> Timing {
        Timing {
            lease_duration: self.leader_election_lease_duration,
            renew_deadline: self.leader_election_renew_deadline,
            retry_period: self.leader_election_retry_period,
        }
    }

    /// [`Args::check`], or exits with code 2 and clap's usage message.
    pub fn checked(mut self) -> Self {
        if let Err(error) = self.check().and_then(|()| self.check_flags_ledger()) {
            error.exit();
        }
        self
    }

    /// The flags' ledger is not a RebootPool's (`node-reboot-pool-<pool>`): two pools
    /// granting from one Lease would each count only their own nodes against it.
    fn check_flags_ledger(&self) -> Result<(), clap::Error> {
        let Some(pool) = self.ledger_name.strip_prefix(common::pool::LEDGER_PREFIX) else {
            return Ok(());
        };
        let message = format!(
            "--ledger-name {} is the ledger of the RebootPool {pool:?} ({}<pool>): give the \
             flags' pool a name of its own, such as the default node-reboot-operator-slots",
            self.ledger_name,
            common::pool::LEDGER_PREFIX
        );
        Err(Self::command().error(clap::error::ErrorKind::ArgumentConflict, message))
    }

    /// Checks what no single flag's parser can: flags that contradict each other, and the
    /// webhook URLs (read here into `notify.targets`). A start and `--validate` both call it.
    pub fn check(&mut self) -> Result<(), clap::Error> {
        use clap::error::ErrorKind::{ArgumentConflict, ValueValidation};
        let error = |kind, message: String| Self::command().error(kind, message);
        self.leader_timing()
            .check()
            .map_err(|message| error(ArgumentConflict, message))?;
        self.check_pre_reboot_label_keys()
            .map_err(|message| error(ArgumentConflict, message))?;
        if let Some(after) = self
            .give_up_after
            .filter(|after| *after < self.reboot_timeout)
        {
            let message = format!(
                "--give-up-after {} is shorter than --reboot-timeout {}: a node would be given \
                 up before it is even overdue; give --give-up-after at least --reboot-timeout",
                common::duration::duration_text(after),
                common::duration::duration_text(self.reboot_timeout)
            );
            return Err(error(ArgumentConflict, message));
        }
        if self.keep_set_aside_cordoned && self.drain_attempts.is_none() {
            let message = "--keep-set-aside-cordoned needs --drain-attempts: without it no node \
                           is ever set aside; give --drain-attempts (such as 3) or leave \
                           --keep-set-aside-cordoned off"
                .to_owned();
            return Err(error(ArgumentConflict, message));
        }
        // Read here rather than by a value parser: clap's own error would show the value, and
        // a webhook URL is a secret.
        self.notify.targets = crate::notify::target::parse_all(&self.notify.notify_urls)
            .map_err(|message| error(ValueValidation, message))?;
        Ok(())
    }

    /// Refuses a pre-reboot label of a key that places the node: in the pool (a key of
    /// `--node-selector`), in its zone (`--zone-label`) or out of the protocol (the opt-out
    /// label). Set at the grant, it would move the node while it holds its slot; a label of
    /// that key already there stays the administrator's, so the flag would do nothing there.
    fn check_pre_reboot_label_keys(&self) -> Result<(), String> {
        for (key, _) in &self.marks.pre_reboot_node_labels {
            let what = if self.node_selector.keys().contains(key) {
                "a key of --node-selector: set on a node at its grant, it would move the node \
                 out of its pool (or into another) during its reboot"
            } else if *key == self.zone_label {
                "the --zone-label: set on a node at its grant, it would move the node into \
                 another zone during its reboot"
            } else if *key == self.annotation_prefix.disabled {
                "the label that opts a node out of reboots"
            } else {
                continue;
            };
            return Err(format!(
                "--pre-reboot-node-labels: `{key}` is {what}; choose another key, such as \
                 `node.example.com/rebooting`"
            ));
        }
        Ok(())
    }

    /// How nodes are placed in the pool and indexed (`--node-selector`, `--zone-label`, the
    /// annotation prefix).
    pub fn indexing(&self) -> crate::cache::nodes::Indexing {
        crate::cache::nodes::Indexing::new(
            self.node_selector.clone(),
            &self.zone_label,
            self.annotation_prefix.clone(),
        )
        .keeping_labels(self.marks.marks().label_keys())
    }

    /// The windows and the blackouts.
    pub fn windows(&self) -> Windows {
        Windows::new(self.reboot_windows.clone()).with_blackouts(self.reboot_blackouts.clone())
    }

    /// `--max-unavailable` and the scheduled budgets.
    pub fn budgets(&self) -> Budgets {
        Budgets {
            base: self.max_unavailable,
            scheduled: self.scheduled_budgets.clone(),
        }
    }

    /// `--drain-attempts` and `--max-blocked-nodes`.
    pub fn set_aside(&self) -> SetAside {
        SetAside {
            attempts: self.drain_attempts,
            most: self
                .max_blocked_nodes
                .map(|most| usize::try_from(most).unwrap_or(usize::MAX)),
            keep_cordoned: self.keep_set_aside_cordoned,
            retiring: false,
        }
    }

    /// `--canary`, `--canary-soak`, `--waves` and `--max-failures`.
    pub fn rollout_rules(&self) -> RolloutRules {
        RolloutRules {
            canary: self.canary,
            canary_soak: u64::try_from(self.canary_soak.as_millis()).unwrap_or(u64::MAX),
            waves: self.waves,
            max_failures: self.max_failures,
            resumed_at: self.resumed_at,
        }
    }

    /// This replica's name: `--leader-election-identity` (POD_NAME), else `<hostname>_<pid>`.
    pub fn identity(&self) -> String {
        self.leader_election_identity
            .clone()
            .filter(|i| !i.trim().is_empty())
            .unwrap_or_else(crate::cluster::leader::default_identity)
    }
}

fn parse_bind_address(value: &str) -> Result<BindAddress, String> {
    value.parse()
}

pub(crate) fn parse_max_unavailable(value: &str) -> Result<MaxUnavailable, String> {
    value
        .parse()
        .map_err(|e: common::MaxUnavailableError| e.to_string())
}

pub(crate) fn parse_drain_attempts(value: &str) -> Result<u32, String> {
    match value.trim().parse::<u32>() {
        Ok(attempts) if attempts >= 1 => Ok(attempts),
        _ => Err(format!(
            "{value:?} is not a number of drain attempts: give how many failed drains set a \
             node aside, 1 or more (such as 3), or leave the flag out to retry for ever"
        )),
    }
}

pub(crate) fn parse_canary(value: &str) -> Result<u32, String> {
    value.trim().parse::<u32>().map_err(|_| {
        format!(
            "{value:?} is not a number of nodes: give how many nodes of each rollout go first \
             and alone (such as 1), or 0 for no canary"
        )
    })
}

pub(crate) fn parse_max_failures(value: &str) -> Result<MaxFailures, String> {
    value
        .parse()
        .map_err(|e: common::rollout::MaxFailuresError| e.to_string())
}

pub(crate) fn parse_max_blocked_nodes(value: &str) -> Result<u32, String> {
    value.trim().parse::<u32>().map_err(|_| {
        format!(
            "{value:?} is not a number of nodes: give how many nodes may be set aside before \
             the pool stalls, 0 or more (such as 2), or leave the flag out for no limit"
        )
    })
}

pub(crate) fn parse_duration(value: &str) -> Result<Duration, String> {
    common::duration::parse_duration(value).map_err(|e| e.to_string())
}

/// A duration, or zero (`0s`, `0`) where zero turns the thing off.
pub(crate) fn parse_duration_or_zero(value: &str) -> Result<Duration, String> {
    let zero = value.trim().trim_end_matches(['s', 'm', 'h']);
    if !zero.is_empty() && zero.chars().all(|c| c == '0') {
        return Ok(Duration::ZERO);
    }
    parse_duration(value)
}

pub(crate) fn parse_pool(value: &str) -> Result<PoolSelector, String> {
    PoolSelector::parse(value)
        .map_err(|why| format!("{why}; use a label selector such as `pool=a` or `zone in (z1,z2)`"))
}

pub(crate) fn parse_window(value: &str) -> Result<Window, String> {
    value.parse()
}

pub(crate) fn parse_period(value: &str) -> Result<Period, String> {
    value.parse()
}

pub(crate) fn parse_scheduled_budget(value: &str) -> Result<ScheduledBudget, String> {
    value.parse()
}

pub(crate) fn parse_pod_selector(value: &str) -> Result<String, String> {
    match PoolSelector::parse(value) {
        Ok(_) if value.trim().is_empty() => {
            Err("empty selector; give a label selector such as `app=backup`".to_owned())
        }
        Ok(_) => Ok(value.trim().to_owned()),
        Err(why) => Err(format!("{why}; use a label selector such as `app=backup`")),
    }
}

fn parse_agent_selector(value: &str) -> Result<String, String> {
    match PoolSelector::parse(value) {
        Ok(_) => Ok(value.trim().to_owned()),
        Err(why) => Err(format!(
            "{why}; use a label selector such as `app.kubernetes.io/name=reboot-agent`, or an \
             empty value for no agent check"
        )),
    }
}

pub(crate) fn parse_drain_pod_selector(value: &str) -> Result<String, String> {
    match PoolSelector::parse(value) {
        Ok(_) => Ok(value.trim().to_owned()),
        Err(why) => Err(format!(
            "{why}; use a label selector such as `app=web`, or an empty value for every pod"
        )),
    }
}

pub(crate) fn parse_label_key(value: &str) -> Result<String, String> {
    common::marks::check_label_key(value)
        .map(|()| value.to_owned())
        .map_err(|why| format!("{why}; use a label key such as `topology.kubernetes.io/zone`"))
}

fn parse_namespace(value: &str) -> Result<String, String> {
    match common::marks::is_dns_label(value) {
        true => Ok(value.to_owned()),
        false => Err(format!(
            "{value:?} is not a namespace name: up to 63 lowercase letters, digits and '-', \
             starting and ending with a letter or digit, such as `node-reboot-operator`"
        )),
    }
}

pub(crate) fn parse_lease_name(value: &str) -> Result<String, String> {
    match common::marks::is_dns_subdomain(value) {
        true => Ok(value.to_owned()),
        false => Err(format!(
            "{value:?} is not a Lease name: a lowercase DNS subdomain (letters, digits, '-' \
             and '.'), such as `node-reboot-operator-slots`"
        )),
    }
}

fn parse_http_url(value: &str) -> Result<String, String> {
    let hint = "give an http:// or https:// URL such as http://prometheus.monitoring:9090";
    let uri: http::Uri = value.parse().map_err(|e| format!("{e}; {hint}"))?;
    match uri.scheme_str() {
        Some("http" | "https") if uri.host().is_some() => {
            Ok(value.trim_end_matches('/').to_owned())
        }
        _ => Err(format!("not an http(s) URL; {hint}")),
    }
}

pub(crate) fn parse_regex(value: &str) -> Result<regex::Regex, String> {
    regex::Regex::new(value).map_err(|e| format!("not a regular expression: {e}"))
}

pub(crate) fn parse_label(value: &str) -> Result<(String, String), String> {
    common::marks::parse_label(value).map_err(|e| e.to_string())
}

pub(crate) fn parse_taint_key(value: &str) -> Result<String, String> {
    common::marks::parse_taint_key(value).map_err(|e| e.to_string())
}

fn parse_prefix(value: &str) -> Result<AnnotationKeys, String> {
    AnnotationKeys::new(value).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pre_reboot_label_may_not_have_a_key_that_places_the_node() {
        let check = |args: &[&str]| {
            let args = std::iter::once("reboot-controller").chain(args.iter().copied());
            Args::try_parse_from(args)
                .expect("flags that parse")
                .check_pre_reboot_label_keys()
        };
        for (args, says) in [
            (
                &[
                    "--node-selector=pool in (a,b)",
                    "--pre-reboot-node-labels=pool=c",
                ][..],
                "`pool` is a key of --node-selector",
            ),
            (
                &["--pre-reboot-node-labels=topology.kubernetes.io/zone=x"],
                "`topology.kubernetes.io/zone` is the --zone-label",
            ),
            (
                &[
                    "--annotation-prefix=r.example.com",
                    "--pre-reboot-node-labels=r.example.com/reboot-disabled=true",
                ],
                "`r.example.com/reboot-disabled` is the label that opts a node out",
            ),
        ] {
            let error = check(args).expect_err("refused");
            assert!(error.contains(says), "{args:?}: {error}");
        }
        for fine in [
            &["--node-selector=pool=lb", "--pre-reboot-node-labels=lb=out"][..],
            &[
                "--zone-label=rack",
                "--pre-reboot-node-labels=topology.kubernetes.io/zone=x",
            ],
            &[
                "--annotation-prefix=r.example.com",
                "--pre-reboot-node-labels=reboot-disabled=x",
            ],
            &["--post-reboot-node-labels=reboot-disabled=true"],
        ] {
            assert_eq!(check(fine), Ok(()), "{fine:?}");
        }
    }

    #[test]
    fn a_margin_of_zero_turns_the_skip_off_and_other_values_are_durations() {
        for zero in ["0s", "0", " 0ms ", "00m"] {
            assert_eq!(parse_duration_or_zero(zero), Ok(Duration::ZERO), "{zero}");
        }
        assert_eq!(parse_duration_or_zero("5m"), Ok(Duration::from_secs(300)));
        for bad in ["", "s", "abc", "-1s", "0x"] {
            assert!(parse_duration_or_zero(bad).is_err(), "{bad}");
        }
    }
}
