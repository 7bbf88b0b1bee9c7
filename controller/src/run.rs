//! Wires the controller together and runs it until SIGTERM or Ctrl-C.
//!
//! Every replica serves `/healthz`, `/readyz` and `/metrics` from the start, and keeps its
//! node cache and its copy of the slot ledger warm. Only the leader acts: when this replica
//! starts leading it reads the ledger and decides in rounds; when it stops leading (deposed,
//! or its renewals failed) the rounds stop at once, wherever they are, and its drains are
//! aborted. Every step of the protocol is one atomic write and resumes from the state in the
//! API server, so nothing is left half done. On SIGTERM it stops acting, releases the leader
//! Lease so that another replica takes over at once, and exits within seconds.

use crate::{
    args::Args,
    cache::{
        nodes::{self, Overlay, SharedIndex},
        sightings::{self, Sightings},
    },
    clock::SystemClock,
    cluster::{
        events::Events,
        leader::{Election, Elector, Leadership},
        ledger_store::{LedgerError, LedgerStore, ReadLedger},
    },
    drain::{
        DrainSettings, Drainer,
        budgets::DisruptionBudgetWatch,
        tracker::{Drain, DrainTracker},
    },
    gates::{
        AlertChecks, Gates,
        alert_watch::{self, AlertSettings},
        blocking_pods::BlockingPods,
        preflight::{AgentPods, DisruptionBudgets, Heard, PreflightChecks},
    },
    metrics::Metrics,
    notify::{self, Notifier},
    shell::{Shell, ShellParts},
};
use anyhow::Context as _;
use common::{ControllerReason, NodeFacts};
use controller_core::{ledger::Ledger, schedule::Schedule, window::Windows};
use k8s_openapi::api::core::v1::Node;
use kube::{
    Api, Client,
    api::ListParams,
    runtime::reflector::{ObjectRef, Store},
};
use observability::ApiErrorKind;
use observability::{Health, api_client};
use std::{
    future::Future,
    pin::Pin,
    sync::Arc,
    time::{Duration, Instant},
};
use tokio::sync::{Notify, watch};

/// How often the controller decides even without a change: a bound for missed events. What
/// changes with time alone (a soak ends, a drain retry is due, a reboot becomes overdue, a
/// window opens or closes) is woken for when it is due (`Shell::next_look`).
const RESYNC: Duration = Duration::from_secs(5);
/// The shortest wait for a look: a moment already past (a clock step, a slow round) cannot
/// make the loop spin.
const MIN_LOOK: Duration = Duration::from_millis(50);
/// After a round whose writes failed, wait this long before the next one.
const RETRY: Duration = Duration::from_secs(1);
/// How often a replica that does not lead refreshes the pool gauges.
const FOLLOWER_REFRESH: Duration = Duration::from_secs(1);
/// At shutdown: the most the Lease release and the last Events may take (5 s in all).
const RELEASE_GRACE: Duration = Duration::from_secs(2);
const FLUSH_GRACE: Duration = Duration::from_secs(1);
/// How long the control plane takes to mark a dead node NotReady: kube-controller-manager's
/// default --node-monitor-grace-period (40 s to 50 s, depending on the version). Until then
/// a node that crashed is still Ready in the API.
const NODE_MONITOR_GRACE: Duration = Duration::from_secs(50);

pub async fn run(args: Args) -> anyhow::Result<()> {
    let min_ready = Duration::from_secs(args.min_ready_seconds);
    if min_ready > Duration::ZERO && min_ready < NODE_MONITOR_GRACE {
        tracing::warn!(
            min_ready_seconds = args.min_ready_seconds,
            "--min-ready-seconds is shorter than the time the control plane takes to notice \
             a dead node ({}s, kube-controller-manager's default node-monitor-grace-period): a \
             node that crashes after its reboot may still look Ready when its soak ends",
            NODE_MONITOR_GRACE.as_secs()
        );
    }
    let (metrics, registry) = Metrics::new();
    let health = Health::new("the node cache has not synced yet");
    if let Some(address) = args.metrics_bind_address.0 {
        let bound = observability::serve(address, Arc::new(registry), health.clone())
            .await
            .with_context(|| {
                format!(
                    "cannot serve /metrics, /healthz and /readyz on {address}; choose another \
                     --metrics-bind-address (env METRICS_BIND_ADDRESS), or 0 for none"
                )
            })?;
        tracing::info!(address = %bound, "serving /metrics, /healthz and /readyz");
    }
    let shutdown = observability::shutdown::signal();
    tokio::pin!(shutdown);
    let context = tokio::select! {
        () = &mut shutdown => {
            tracing::info!("shutting down before the start was complete");
            return Ok(());
        }
        context = Context::start(args, metrics, health) => context?,
    };
    context.run(shutdown).await
}

/// What every replica keeps, leading or not.
struct Context {
    args: Args,
    client: Client,
    /// Without kube's retries of 429s, which are a PodDisruptionBudget's answer to an eviction.
    eviction_client: Client,
    store: Store<Node>,
    index: SharedIndex,
    changed: Arc<Notify>,
    ledger_store: LedgerStore,
    ledger_watch: watch::Receiver<ReadLedger>,
    events: Events,
    metrics: Metrics,
    /// The watches of `--blocking-pod-selector`, kept warm like the node cache.
    blocking_pods: Option<BlockingPods>,
    /// The watches of the pre-flight checks (agent pods, PodDisruptionBudgets), kept warm too.
    preflight: PreflightChecks,
    /// The senders of `--notify-url`; only a leader's rounds give them anything to send.
    notifier: Notifier,
    /// When this process first saw each grant, kept while following too.
    sightings: Sightings,
}

/// Why a replica stopped leading.
enum Stopped {
    Shutdown,
    Lost,
}

impl Context {
    /// Connects and fills the node cache; `/readyz` turns ready at the end. Waits (and says
    /// why) while the API server cannot be reached.
    async fn start(args: Args, metrics: Metrics, health: Health) -> anyhow::Result<Context> {
        let mut config = kube::Config::infer()
            .await
            .context("no Kubernetes API server configured (in-cluster config or KUBECONFIG)")?;
        let client = api_client::client(config.clone()).context("cannot build the API client")?;
        // kube retries a 429 up to 15 times over many minutes by default; for an eviction a
        // 429 is the PodDisruptionBudget's answer, which the drain must see and report.
        config.default_retry = false;
        let eviction_client = api_client::client(config).context("cannot build the API client")?;
        check_selector(&client, args.node_selector.text()).await?;
        let changed = Arc::new(Notify::new());
        let (store, index) = nodes::spawn_reflector(
            client.clone(),
            args.indexing(),
            changed.clone(),
            metrics.clone(),
        );
        let ledger_store = LedgerStore::new(client.clone(), &args.namespace, &args.ledger_name);
        let ledger_watch = ledger_store.spawn_watch(client.clone(), metrics.clone(), {
            let changed = changed.clone();
            move || changed.notify_one()
        });
        let events = Events::new(
            client.clone(),
            Some(args.identity()),
            metrics.clone(),
            args.dry_run,
        );
        let selectors = &args.gates.blocking_pod_selectors;
        let blocking_pods = (!selectors.is_empty()).then(|| {
            let scope = args.gates.blocking_pod_selector_scope;
            BlockingPods::spawn(&client, selectors, scope, &changed, &metrics)
        });
        let preflight = start_preflight(&args, &client, &changed, &metrics);
        let notifier = start_notifier(&args, &metrics);
        let began = Instant::now();
        store
            .wait_until_ready()
            .await
            .context("node cache stopped before it synced")?;
        health.set_ready(true);
        tracing::info!(
            max_unavailable = %args.max_unavailable,
            nodes = store.len(),
            took = ?began.elapsed(),
            "node cache synced; ready"
        );
        Ok(Context {
            args,
            client,
            eviction_client,
            store,
            index,
            changed,
            ledger_store,
            ledger_watch,
            events,
            metrics,
            blocking_pods,
            preflight,
            notifier,
            sightings: Sightings::default(),
        })
    }

    /// Follows or leads until `shutdown`, then steps down.
    async fn run(self, mut shutdown: Pin<&mut impl Future<Output = ()>>) -> anyhow::Result<()> {
        let (mut leadership, mut election) = self.elect();
        let result = loop {
            tokio::select! {
                () = &mut shutdown => break Ok(()),
                error = failed(&mut election) => break Err(error),
                () = self.follow(&mut leadership) => {}
            }
            self.metrics.leader.set(1);
            tracing::info!("leading: acting on the pool");
            let acting = leadership.clone();
            let stopped = tokio::select! {
                () = &mut shutdown => Ok(Stopped::Shutdown),
                error = failed(&mut election) => Err(error),
                () = leadership.lost() => Ok(Stopped::Lost),
                result = self.lead(acting) => result.map(|()| Stopped::Lost),
            };
            self.metrics.stepped_down();
            match stopped {
                Ok(Stopped::Shutdown) => break Ok(()),
                Ok(Stopped::Lost) => {
                    tracing::warn!("no longer leading: stopped acting; standing by");
                }
                Err(error) => break Err(error),
            }
        };
        tracing::info!("shutting down");
        if let Some(election) = election {
            election.stop(RELEASE_GRACE).await;
        }
        self.events.flush(FLUSH_GRACE).await;
        result
    }

    fn elect(&self) -> (Leadership, Option<Election>) {
        if self.args.dry_run {
            tracing::info!(
                "dry run (--dry-run): no leader election, nothing written to nodes or the \
                 ledger; what would be done is logged and reported in DryRun Events"
            );
            return (Leadership::always(), None);
        }
        if !self.args.leader_elect {
            tracing::info!("leader election off (--leader-elect=false): this replica acts");
            return (Leadership::always(), None);
        }
        let elector = Elector::new(
            self.client.clone(),
            &self.args.namespace,
            &self.args.leader_election_lease_name,
            &self.args.identity(),
            self.args.leader_timing(),
            self.metrics.clone(),
        );
        let (leadership, election) = elector.spawn();
        (leadership, Some(election))
    }

    /// Stands by until this replica leads: the cache stays warm, the pool gauges current.
    async fn follow(&self, leadership: &mut Leadership) {
        // Empty: a follower writes nothing, so it has no copies of its own.
        let mut overlay = Overlay::new(self.args.indexing());
        loop {
            if leadership.is_leading() {
                return;
            }
            let ledger = self.ledger_watch.borrow().ledger.clone();
            let summary = nodes::pool_summary(
                &self.store,
                &self.index,
                &mut overlay,
                &ledger,
                &self.args.annotation_prefix,
            );
            let budget = self.args.max_unavailable.resolve(summary.nodes);
            self.metrics.pool(&summary, budget);
            self.look_at_grants(&ledger);
            tokio::select! {
                () = leadership.acquired() => return,
                () = tokio::time::sleep(FOLLOWER_REFRESH) => {}
            }
        }
    }

    /// Notes when this replica first sees each grant claimed (its node carrying it), so that
    /// once it leads it counts the delays by its own clock (once the ledger was read).
    fn look_at_grants(&self, ledger: &Ledger) {
        if ledger.resource_version.is_some() {
            let now = k8s_openapi::jiff::Timestamp::now().as_millisecond();
            let keys = &self.args.annotation_prefix;
            let carries = |name: &str, grant: &str| {
                self.store
                    .get(&ObjectRef::new(name))
                    .is_some_and(|node| sightings::carries(&node, keys, grant))
            };
            self.sightings
                .look(ledger, carries, u64::try_from(now).unwrap_or_default());
        }
    }

    /// Acts on the pool until dropped (leadership lost, or shutdown); returns only on an
    /// error that stops the program.
    async fn lead(&self, leadership: Leadership) -> anyhow::Result<()> {
        let ledger = self.load_ledger().await?;
        let args = &self.args;
        let drainer = args.drain.then(|| {
            let settings = DrainSettings {
                timeout: args.drain_timeout,
                grace_period: args.drain_grace_period,
                pod_selector: args.drain_pod_selector.clone(),
                skip_wait_for_delete_margin: Some(args.drain_skip_wait_for_delete_margin)
                    .filter(|margin| !margin.is_zero()),
                eviction_retry_max_delay: args.eviction_retry_max_delay,
            };
            Drainer::new(
                self.eviction_client.clone(),
                args.annotation_prefix.clone(),
                settings,
                self.events.clone(),
                self.metrics.clone(),
                leadership.clone(),
            )
            .watching_budgets(
                self.preflight
                    .budgets
                    .clone()
                    .map(|b| Arc::new(b) as Arc<dyn DisruptionBudgetWatch>),
            )
        });
        let mut shell = Shell::new(ShellParts {
            node_api: Arc::new(Api::<Node>::all(self.client.clone())),
            clock: Arc::new(SystemClock::default()),
            keys: args.annotation_prefix.clone(),
            marks: args.marks.marks(),
            max_unavailable: args.max_unavailable,
            drains: DrainTracker::new(
                drainer.map(|d| Arc::new(d) as Arc<dyn Drain>),
                self.changed.clone(),
            )
            .forcing(args.force_reboot),
            nodes: self.store.clone(),
            index: self.index.clone(),
            overlay: Overlay::new(args.indexing()),
            zone_budget: args.max_unavailable_per_zone,
            concurrency: args.concurrency,
            ledger,
            ledger_store: self.ledger_store.clone(),
            ledger_watch: self.ledger_watch.clone(),
            events: self.events.clone(),
            schedule: Schedule {
                windows: Windows(args.reboot_windows.clone()),
                finish_after_window: args.finish_after_window,
                min_ready: Duration::from_secs(args.min_ready_seconds),
                reboot_timeout: args.reboot_timeout,
                give_up_after: args.give_up_after,
                drain_delay: args.drain_delay,
                reboot_delay: args.reboot_delay,
            },
            gates: Gates::new(self.blocking_pods.clone(), self.alert_checks()),
            preflight: self.preflight.clone(),
            metrics: self.metrics.clone(),
            leadership,
            dry_run: args.dry_run,
            notifier: self.notifier.clone(),
            sightings: self.sightings.clone(),
        });
        let mut wait = Duration::ZERO;
        loop {
            tokio::select! {
                () = self.changed.notified() => {}
                () = tokio::time::sleep(wait.max(Duration::from_millis(1))) => {}
            }
            wait = RESYNC;
            // Each write usually enables the next step (grant -> cordon -> promote): keep
            // going while rounds make progress, then wait for the next change.
            for _ in 0..100 {
                if !shell.round().await {
                    break;
                }
            }
            shell.publish_pool();
            if shell.last_round_failed() {
                wait = RETRY;
            }
            wait = next_wait(wait, shell.next_look());
        }
    }

    /// The alert checks of this term as leader; they stop when the term's shell is dropped.
    fn alert_checks(&self) -> Option<AlertChecks> {
        let gates = &self.args.gates;
        let prometheus = gates.prometheus_url.clone()?;
        let settings = AlertSettings {
            prometheus: prometheus.clone(),
            alertmanager: gates.alertmanager_url.clone(),
            filter: gates.alert_filter(),
            timeout: gates.prometheus_timeout,
            period: gates.alert_check_period,
        };
        let (wanted, wanted_rx) = watch::channel(false);
        let readings = alert_watch::spawn(settings, wanted_rx, self.changed.clone());
        Some(AlertChecks {
            readings,
            period: gates.alert_check_period,
            prometheus,
            wanted,
        })
    }

    /// Reads the slot ledger (creating it the first time), waiting while the API server
    /// cannot be reached; a missing namespace stops the program. Missing while nodes carry its
    /// grants, it is created paused and said so in a Warning.
    async fn load_ledger(&self) -> anyhow::Result<ReadLedger> {
        let mut delays = reconnect_backoff();
        loop {
            let read = if self.args.dry_run {
                self.ledger_store.peek().await
            } else {
                let carried_by = || self.ledger_carried_by();
                self.ledger_store.load(carried_by).await.map(|loaded| {
                    if loaded.recreated_paused {
                        self.say_ledger_recreated_at_start(&loaded.carried_by);
                    }
                    loaded.read
                })
            };
            match read {
                Ok(ledger) => return Ok(ledger),
                Err(error @ LedgerError::Api(..)) if error.kind() == ApiErrorKind::NotFound => {
                    let args = &self.args;
                    return Err(error).with_context(|| {
                        format!(
                            "cannot use the slot ledger Lease {}/{}; does namespace {:?} exist \
                             (--namespace)?",
                            args.namespace, args.ledger_name, args.namespace
                        )
                    });
                }
                Err(error) => {
                    self.metrics.api_error("ledger", error.kind());
                    let delay = delays.next().unwrap_or(RECONNECT_MAX);
                    tracing::warn!(%error, "cannot read the slot ledger; retrying in {delay:?}");
                    tokio::time::sleep(delay).await;
                }
            }
        }
    }
}

impl Context {
    /// The nodes of the cache that carry a grant of this controller's ledger, or whose last
    /// grant of it may still be soaking (completed less than `--min-ready-seconds` ago, or at a
    /// time that cannot be read): the ledger existed before, and may have held their slots.
    fn ledger_carried_by(&self) -> Vec<String> {
        let keys = &self.args.annotation_prefix;
        let ledger = self.ledger_store.id();
        let ours = |grant: Option<&str>| {
            grant.and_then(common::ledger::ledger_of_grant) == Some(ledger.as_str())
        };
        let soak = jiff::SignedDuration::from_secs(
            i64::try_from(self.args.min_ready_seconds).unwrap_or(i64::MAX),
        );
        let now = jiff::Timestamp::now();
        let may_soak = |completed: Option<&str>| {
            completed
                .and_then(|at| at.parse::<jiff::Timestamp>().ok())
                .is_none_or(|at| now.duration_since(at) < soak)
        };
        self.store
            .state()
            .iter()
            .filter(|node| {
                let state = NodeFacts::from_node(node).protocol(keys);
                ours(state.grant.as_deref())
                    || (ours(state.last_grant.as_deref())
                        && may_soak(state.last_completed.as_deref()))
            })
            .filter_map(|node| node.metadata.name.clone())
            .collect()
    }

    fn say_ledger_recreated_at_start(&self, carried_by: &[String]) {
        self.metrics.ledger_recreated.inc();
        let note = self.ledger_store.recreated_at_start_note(carried_by);
        tracing::warn!("{note}");
        self.events.publish_about(
            self.ledger_store.reference(),
            ControllerReason::LedgerRecreated,
            note,
        );
    }
}

/// The watches of the pre-flight checks that are on: `--agent-selector` (unless empty) and
/// `--check-disruption-budgets` (with --drain only: without a drain no budget is asked).
fn start_preflight(
    args: &Args,
    client: &Client,
    changed: &Arc<Notify>,
    metrics: &Metrics,
) -> PreflightChecks {
    let selector = args.agent_selector.clone();
    let agents =
        (!selector.is_empty()).then(|| AgentPods::spawn(client, &selector, changed, metrics));
    let budgets = (args.drain && args.check_disruption_budgets).then(|| {
        let drain_selector = args.drain_pod_selector.as_deref();
        DisruptionBudgets::spawn(client, drain_selector, changed, metrics)
    });
    PreflightChecks {
        agents,
        budgets,
        agent_selector: selector,
        force: args.force_reboot,
        drain_timeout: args.drain_timeout,
        timeout: args.preflight_timeout,
        heard: Heard::default(),
    }
}

/// The webhooks of `--notify-url`; none in a dry run, which must not read like a rollout.
fn start_notifier(args: &Args, metrics: &Metrics) -> Notifier {
    let targets = &args.notify.targets;
    if targets.is_empty() {
        return Notifier::off();
    }
    if args.dry_run {
        tracing::info!("dry run: no notifications are sent (--notify-url)");
        return Notifier::off();
    }
    let shown: Vec<String> = targets.iter().map(ToString::to_string).collect();
    tracing::info!(webhooks = ?shown, "notifying the rollout's steps");
    Notifier::start(
        targets,
        args.notify.templates(),
        args.notify.notify_timeout,
        notify::QUEUE,
        metrics.clone(),
    )
}

/// How long the loop sleeps unless an event comes first: until the next look the decision asks
/// for, but at least [`MIN_LOOK`] and at most `bound` (the resync, or the retry after a failed
/// write).
fn next_wait(bound: Duration, look: Option<Duration>) -> Duration {
    look.map_or(bound, |look| look.max(MIN_LOOK).min(bound))
}

const RECONNECT_MAX: Duration = Duration::from_secs(10);

/// While the API server cannot be reached at start: 0.5 s doubling up to 10 s.
fn reconnect_backoff() -> backon::ExponentialBackoff {
    use backon::BackoffBuilder;
    backon::ExponentialBuilder::new()
        .with_min_delay(Duration::from_millis(500))
        .with_max_delay(RECONNECT_MAX)
        .without_max_times()
        .build()
}

/// Resolves when the leader election failed for good (never without one).
async fn failed(election: &mut Option<Election>) -> anyhow::Error {
    match election {
        Some(election) => election.failed().await.into(),
        None => std::future::pending().await,
    }
}

/// A selector the API server refuses would make the watch fail forever: refuse it at start.
/// An API server that cannot be reached yet is waited for.
async fn check_selector(client: &Client, selector: Option<&str>) -> anyhow::Result<()> {
    let Some(selector) = selector else {
        return Ok(());
    };
    let nodes = Api::<Node>::all(client.clone());
    let mut delays = reconnect_backoff();
    loop {
        match nodes
            .list_metadata(&ListParams::default().labels(selector).limit(1))
            .await
        {
            Ok(_) => return Ok(()),
            Err(error @ kube::Error::Api(_)) => {
                return Err(error).with_context(|| {
                    format!("invalid --node-selector {selector:?}: the API server refused it")
                });
            }
            Err(error) => {
                let delay = delays.next().unwrap_or(RECONNECT_MAX);
                tracing::warn!(%error, "cannot reach the API server to check --node-selector; retrying in {delay:?}");
                tokio::time::sleep(delay).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_loop_sleeps_until_the_next_look_within_its_bounds() {
        let soak_ends = Duration::from_millis(800);
        assert_eq!(next_wait(RESYNC, Some(soak_ends)), soak_ends);
        assert_eq!(next_wait(RESYNC, None), RESYNC, "nothing due: the resync");
        assert_eq!(
            next_wait(RESYNC, Some(Duration::from_secs(3600))),
            RESYNC,
            "a window an hour away: missed events are still caught up"
        );
        assert_eq!(
            next_wait(RETRY, Some(soak_ends)),
            soak_ends,
            "a failed write is retried, or sooner if a look is due"
        );
        assert_eq!(
            next_wait(RESYNC, Some(Duration::ZERO)),
            MIN_LOOK,
            "a moment already past does not spin"
        );
    }
}
