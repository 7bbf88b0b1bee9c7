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
        nodes::{self, NodeCache, Overlay, SharedIndex},
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
    pools::{self, PoolConfig, status::Seen, watch::Listed},
    shell::{FreshPause, PoolPause, Shell, ShellParts},
};
use anyhow::Context as _;
use common::{ControllerReason, NodeFacts, pool::RebootPool};
use controller_core::{ledger::Ledger, schedule::Schedule};
use futures::FutureExt as _;
use k8s_openapi::api::core::v1::Node;
use kube::{
    Api, Client,
    api::ListParams,
    runtime::reflector::{ObjectRef, Store},
};
use observability::ApiErrorKind;
use observability::{Health, api_client};
use std::{collections::HashMap, sync::Mutex};
use std::{
    future::Future,
    pin::Pin,
    sync::Arc,
    time::{Duration, Instant},
};
use tokio::sync::{Notify, watch};

/// The User-Agent's name of this program's requests.
const PROGRAM: &str = "reboot-controller";

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
    changed: Arc<Notify>,
    events: Events,
    metrics: Metrics,
    health: Health,
    /// The `RebootPool` objects as last listed.
    pool_objects: watch::Receiver<Option<Listed>>,
    /// The watches of the blocking pod selectors, one set per list of selectors, kept warm
    /// across restarts of the pools.
    blocking_pods: Mutex<HashMap<Vec<String>, BlockingPods>>,
    /// The watches of the pre-flight checks (agent pods, PodDisruptionBudgets), kept warm too.
    preflight: PreflightChecks,
    /// The senders of `--notify-url`; only a leader's rounds give them anything to send.
    notifier: Notifier,
}

/// The pools running now, from one listing of the `RebootPool` objects: one node cache serves
/// them all. A change of a pool's spec, a pool created or deleted, starts them again.
struct Running {
    fingerprint: Vec<pools::Fingerprint>,
    plan: pools::Plan,
    cache: NodeCache,
    pools: Vec<PoolRun>,
}

/// One running pool: its settings, its index in the node cache, its ledger.
struct PoolRun {
    config: PoolConfig,
    index: SharedIndex,
    ledger_store: LedgerStore,
    ledger_watch: watch::Receiver<ReadLedger>,
    blocking_pods: Option<BlockingPods>,
    /// When this process first saw each grant, kept while following too.
    sightings: Sightings,
    /// What its rounds last saw, for its status.
    seen: Arc<Mutex<Seen>>,
}

impl Context {
    /// Connects and fills the node cache; `/readyz` turns ready at the end. Waits (and says
    /// why) while the API server cannot be reached.
    async fn start(args: Args, metrics: Metrics, health: Health) -> anyhow::Result<Context> {
        let mut config = kube::Config::infer()
            .await
            .context("no Kubernetes API server configured (in-cluster config or KUBECONFIG)")?;
        let client =
            api_client::client(config.clone(), PROGRAM).context("cannot build the API client")?;
        // kube retries a 429 up to 15 times over many minutes by default; for an eviction a
        // 429 is the PodDisruptionBudget's answer, which the drain must see and report.
        config.default_retry = false;
        let eviction_client =
            api_client::client(config, PROGRAM).context("cannot build the API client")?;
        check_selector(&client, args.node_selector.text()).await?;
        let changed = Arc::new(Notify::new());
        let pool_objects = pools::watch::spawn(client.clone(), metrics.clone());
        let events = Events::new(
            client.clone(),
            Some(args.identity()),
            metrics.clone(),
            args.dry_run,
        );
        let preflight = start_preflight(&args, &client, &changed, &metrics);
        let notifier = start_notifier(&args, &metrics);
        Ok(Context {
            args,
            client,
            eviction_client,
            changed,
            events,
            metrics,
            health,
            pool_objects,
            blocking_pods: Mutex::default(),
            preflight,
            notifier,
        })
    }

    /// Follows or leads until `shutdown`, then steps down. The pools start again whenever
    /// the `RebootPool` objects change; every step of the protocol resumes from the state in
    /// the API server, so nothing is left half done.
    async fn run(self, mut shutdown: Pin<&mut impl Future<Output = ()>>) -> anyhow::Result<()> {
        let (mut leadership, mut election) = self.elect();
        let result = loop {
            let running = tokio::select! {
                () = &mut shutdown => break Ok(()),
                error = failed(&mut election) => break Err(error),
                running = self.start_pools() => running,
            };
            let running = match running {
                Ok(running) => running,
                Err(error) => break Err(error),
            };
            let served = tokio::select! {
                () = &mut shutdown => break Ok(()),
                error = failed(&mut election) => break Err(error),
                () = self.pools_changed(&running.fingerprint) => Ok(()),
                result = self.serve(&running, &mut leadership) => result,
            };
            if let Err(error) = served {
                break Err(error);
            }
            tracing::info!("the RebootPools changed: starting the pools again");
        };
        self.metrics.stepped_down();
        tracing::info!("shutting down");
        if let Some(election) = election {
            election.stop(RELEASE_GRACE).await;
        }
        self.events.flush(FLUSH_GRACE).await;
        result
    }

    /// Follows until leading, leads until the leadership is lost, and so on; returns only
    /// on an error that stops the program.
    async fn serve(&self, running: &Running, leadership: &mut Leadership) -> anyhow::Result<()> {
        loop {
            self.follow(running, leadership).await;
            self.metrics.leader.set(1);
            tracing::info!(pools = running.pools.len(), "leading: acting on the pools");
            let acting = leadership.clone();
            tokio::select! {
                () = leadership.lost() => {}
                result = self.lead(running, acting) => result?,
            }
            self.metrics.stepped_down();
            tracing::warn!("no longer leading: stopped acting; standing by");
        }
    }

    /// Waits for the `RebootPool` objects to be listed, then starts the node cache of every
    /// pool and their ledgers; `/readyz` turns ready once the cache has synced.
    async fn start_pools(&self) -> anyhow::Result<Running> {
        let mut objects = self.pool_objects.clone();
        let listed = objects
            .wait_for(Option::is_some)
            .await
            .context("the RebootPool watch stopped")?
            .clone()
            .unwrap_or_default();
        let owned: Vec<_> = listed.objects.iter().map(|p| (**p).clone()).collect();
        let plan = pools::plan(&self.args, &owned);
        for invalid in &plan.invalid {
            tracing::warn!(pool = %invalid.name, problems = ?invalid.problems, "RebootPool spec invalid: it grants no new reboot and finishes the nodes it holds");
        }
        let indexings = plan.pools.iter().map(|p| p.args.indexing()).collect();
        let began = Instant::now();
        let cache = nodes::spawn_reflector(
            self.client.clone(),
            indexings,
            self.changed.clone(),
            self.metrics.clone(),
        );
        cache
            .store
            .wait_until_ready()
            .await
            .context("node cache stopped before it synced")?;
        let pools = plan
            .pools
            .iter()
            .zip(&cache.indexes)
            .map(|(config, index)| self.pool_run(config.clone(), index.clone()))
            .collect();
        self.health.set_ready(true);
        tracing::info!(
            pools = ?plan.pools.iter().map(PoolConfig::label).collect::<Vec<_>>(),
            nodes = cache.store.len(),
            took = ?began.elapsed(),
            "node cache synced; ready"
        );
        Ok(Running {
            fingerprint: pools::fingerprint(&owned),
            plan,
            cache,
            pools,
        })
    }

    fn pool_run(&self, config: PoolConfig, index: SharedIndex) -> PoolRun {
        let args = &config.args;
        let ledger_store =
            LedgerStore::new(self.client.clone(), &args.namespace, &args.ledger_name);
        let ledger_watch = ledger_store.spawn_watch(self.client.clone(), self.metrics.clone(), {
            let changed = self.changed.clone();
            move || changed.notify_one()
        });
        let selectors = &args.gates.blocking_pod_selectors;
        let blocking_pods = (!selectors.is_empty()).then(|| {
            let mut watches = self
                .blocking_pods
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            watches
                .entry(selectors.clone())
                .or_insert_with(|| {
                    let scope = args.gates.blocking_pod_selector_scope;
                    BlockingPods::spawn(
                        &self.client,
                        selectors,
                        scope,
                        &self.changed,
                        &self.metrics,
                    )
                })
                .clone()
        });
        PoolRun {
            config,
            index,
            ledger_store,
            ledger_watch,
            blocking_pods,
            sightings: Sightings::default(),
            seen: Arc::default(),
        }
    }

    /// Resolves when the `RebootPool` objects differ from `fingerprint` in a way that changes
    /// the pools (a spec, a pool created or deleted).
    async fn pools_changed(&self, fingerprint: &[pools::Fingerprint]) {
        let mut objects = self.pool_objects.clone();
        loop {
            if objects.changed().await.is_err() {
                return std::future::pending().await;
            }
            let now = objects.borrow_and_update().clone();
            if let Some(listed) = now {
                let owned: Vec<_> = listed.objects.iter().map(|p| (**p).clone()).collect();
                if pools::fingerprint(&owned) != fingerprint {
                    return;
                }
                // What the pools read at each round may have changed (a finalizer came).
                self.changed.notify_one();
            }
        }
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
    async fn follow(&self, running: &Running, leadership: &mut Leadership) {
        // Empty: a follower writes nothing, so it has no copies of its own.
        let mut overlays: Vec<Overlay> = running
            .pools
            .iter()
            .map(|p| Overlay::new(p.config.args.indexing()))
            .collect();
        loop {
            if leadership.is_leading() {
                return;
            }
            for (pool, overlay) in running.pools.iter().zip(&mut overlays) {
                let ledger = pool.ledger_watch.borrow().ledger.clone();
                if pool.config.name.is_none() {
                    let summary = nodes::pool_summary(
                        &running.cache.store,
                        &pool.index,
                        overlay,
                        &ledger,
                        &self.args.annotation_prefix,
                    );
                    let budget = pool
                        .config
                        .args
                        .budgets()
                        .at(summary.nodes, jiff::Timestamp::now())
                        .budget;
                    self.metrics.pool(&summary, budget);
                }
                self.look_at_grants(&running.cache.store, pool, &ledger);
            }
            tokio::select! {
                () = leadership.acquired() => return,
                () = tokio::time::sleep(FOLLOWER_REFRESH) => {}
            }
        }
    }

    /// Notes when this replica first sees each grant claimed (its node carrying it), so that
    /// once it leads it counts the delays by its own clock (once the ledger was read).
    fn look_at_grants(&self, store: &Store<Node>, pool: &PoolRun, ledger: &Ledger) {
        if ledger.resource_version.is_some() {
            let now = k8s_openapi::jiff::Timestamp::now().as_millisecond();
            let keys = &self.args.annotation_prefix;
            let carries = |name: &str, grant: &str| {
                store
                    .get(&ObjectRef::new(name))
                    .is_some_and(|node| sightings::carries(&node, keys, grant))
            };
            pool.sightings
                .look(ledger, carries, u64::try_from(now).unwrap_or_default());
        }
    }

    /// Acts on every pool, and writes their statuses, until dropped (leadership lost, the
    /// pools changed, or shutdown); returns only on an error that stops the program.
    async fn lead(&self, running: &Running, leadership: Leadership) -> anyhow::Result<()> {
        // Every change wakes every pool: `changed` keeps one wake-up for its one waiter (a
        // change during a round is not lost), and hands it on to each pool's own.
        let wakes: Vec<Arc<Notify>> = running.pools.iter().map(|_| Arc::default()).collect();
        let fan_out = async {
            loop {
                self.changed.notified().await;
                for wake in &wakes {
                    wake.notify_one();
                }
            }
        };
        let rounds =
            async {
                futures::future::try_join_all(
                    running.pools.iter().zip(&wakes).map(|(pool, wake)| {
                        self.lead_pool(running, pool, wake, leadership.clone())
                    }),
                )
                .await?;
                // No pool runs (none is defined yet, and --default-pool=false): lead idle until
                // the pools change.
                std::future::pending::<anyhow::Result<()>>().await
            };
        let statuses = pools::writer::write_statuses(
            &self.client,
            &self.pool_objects,
            running_view(running, &self.args),
            &self.events,
            &leadership,
        );
        // Once per start of leading, which follows every change of the pools.
        let sweep = async {
            pools::ledgers::delete_ledgers_of_gone_pools(
                &self.client,
                &self.args.namespace,
                &self.args.ledger_name,
            )
            .await;
            std::future::pending::<()>().await;
        };
        tokio::select! {
            result = rounds => result,
            () = fan_out => Ok(()),
            // A dry run writes no status and deletes nothing.
            () = statuses, if !self.args.dry_run => Ok(()),
            () = sweep, if !self.args.dry_run => Ok(()),
        }
    }

    /// Acts on one pool until dropped.
    async fn lead_pool(
        &self,
        running: &Running,
        pool: &PoolRun,
        wake: &Notify,
        leadership: Leadership,
    ) -> anyhow::Result<()> {
        let ledger = self.load_ledger(&running.cache.store, pool).await?;
        let args = &pool.config.args;
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
            budgets: args.budgets(),
            drains: DrainTracker::new(
                drainer.map(|d| Arc::new(d) as Arc<dyn Drain>),
                self.changed.clone(),
            )
            .forcing(args.force_reboot),
            nodes: running.cache.store.clone(),
            index: pool.index.clone(),
            overlay: Overlay::new(args.indexing()),
            zone_budget: args.max_unavailable_per_zone,
            concurrency: args.concurrency,
            set_aside: pool.config.set_aside(),
            rollout_rules: args.rollout_rules(),
            ledger,
            ledger_store: pool.ledger_store.clone(),
            ledger_watch: pool.ledger_watch.clone(),
            events: self.events.clone(),
            schedule: Schedule {
                windows: args.windows(),
                finish_after_window: args.finish_after_window,
                min_ready: Duration::from_secs(args.min_ready_seconds),
                reboot_timeout: args.reboot_timeout,
                give_up_after: args.give_up_after,
                drain_delay: args.drain_delay,
                reboot_delay: args.reboot_delay,
                reboot_estimate: args.reboot_estimate,
                drain_timeout: args.drain.then_some(args.drain_timeout),
            },
            gates: Gates::new(pool.blocking_pods.clone(), self.alert_checks(args)),
            preflight: self.preflight.clone(),
            metrics: self.metrics.clone(),
            leadership,
            dry_run: args.dry_run,
            notifier: self.notifier.clone(),
            sightings: pool.sightings.clone(),
            pool_paused: self.pool_pause(running, &pool.config),
            reports_gauges: pool.config.name.is_none(),
        });
        let mut wait = Duration::ZERO;
        loop {
            tokio::select! {
                () = wake.notified() => {}
                () = tokio::time::sleep(wait.max(Duration::from_millis(1))) => {}
            }
            wait = RESYNC;
            // Each write usually enables the next step (grant -> cordon -> promote): keep
            // going while rounds make progress, then wait for the next change.
            for _ in 0..100 {
                let again = shell.round().await;
                if shell.is_leading() {
                    self.metrics.rounds.inc();
                }
                if !again {
                    break;
                }
            }
            let (summary, budget, facts) = shell.publish_pool();
            // What a status shows: the flags' pool has none.
            if pool.config.name.is_some() {
                pools::writer::record_seen(
                    &pool.seen,
                    &running.cache.store,
                    &pool.index,
                    &pool.config,
                    summary,
                    budget,
                    facts,
                );
            }
            if shell.last_round_failed() {
                wait = RETRY;
            }
            wait = next_wait(wait, shell.next_look());
        }
    }

    /// The pool's own pause: its spec's, and, read at each round, while its object lacks the
    /// finalizer (from the RebootPool watch) or while the flags' pool is paused
    /// (`kubectl reboot pause` without `--pool`: the stop button holds every pool).
    fn pool_pause(&self, running: &Running, config: &PoolConfig) -> PoolPause {
        let Some(name) = config.name.clone() else {
            return PoolPause::fixed(config.paused);
        };
        let stop_button = running
            .pools
            .iter()
            .find(|p| p.config.name.is_none())
            .map(|flags| flags.ledger_watch.clone());
        let objects = self.pool_objects.clone();
        let needs_finalizer = config.needs_finalizer;
        let fresh = fresh_pause(Api::all(self.client.clone()), name.clone());
        PoolPause::until_fenced(config.paused, move || {
            let listed = objects.borrow();
            let listed = listed.as_ref().map(|l| l.objects.as_slice());
            let fenced = !needs_finalizer || listed.is_some_and(|l| pools::fenced(l, &name));
            fenced
                && !listed.is_some_and(|l| pools::spec_paused(l, &name))
                && !stop_button
                    .as_ref()
                    .is_some_and(|flags| flags.borrow().ledger.paused)
        })
        .read_fresh(fresh)
    }

    /// The alert checks of this term as leader for a pool; they stop when the term's shell is
    /// dropped.
    fn alert_checks(&self, args: &Args) -> Option<AlertChecks> {
        let gates = &args.gates;
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

    /// Reads a pool's slot ledger (creating it the first time), waiting while the API server
    /// cannot be reached; a missing namespace stops the program. Missing while nodes carry its
    /// grants, it is created paused and said so in a Warning.
    async fn load_ledger(&self, store: &Store<Node>, pool: &PoolRun) -> anyhow::Result<ReadLedger> {
        let mut delays = reconnect_backoff();
        let args = &pool.config.args;
        loop {
            let read = if args.dry_run {
                pool.ledger_store.peek().await
            } else {
                let carried_by = || ledger_carried_by(store, pool);
                pool.ledger_store.load(carried_by).await.map(|loaded| {
                    if loaded.recreated_paused {
                        self.say_ledger_recreated_at_start(pool, &loaded.carried_by);
                    }
                    loaded.read
                })
            };
            match read {
                Ok(ledger) => return Ok(ledger),
                Err(error @ LedgerError::Api(..)) if error.kind() == ApiErrorKind::NotFound => {
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

    fn say_ledger_recreated_at_start(&self, pool: &PoolRun, carried_by: &[String]) {
        self.metrics.ledger_recreated.inc();
        let name = pool.config.name.as_deref();
        let note = pool.ledger_store.recreated_at_start_note(carried_by, name);
        tracing::warn!("{note}");
        self.events.publish_about(
            pool.ledger_store.reference(),
            ControllerReason::LedgerRecreated,
            note,
        );
    }
}

/// What the status writer reads of the running pools.
fn running_view<'a>(running: &'a Running, args: &'a Args) -> pools::writer::RunningView<'a> {
    pools::writer::RunningView {
        store: &running.cache.store,
        namespace: &args.namespace,
        keys: &args.annotation_prefix,
        plan: &running.plan,
        pools: running
            .pools
            .iter()
            .map(|p| pools::writer::PoolView {
                config: &p.config,
                seen: &p.seen,
                ledger: &p.ledger_watch,
                ledger_store: &p.ledger_store,
            })
            .collect(),
    }
}

/// The nodes of the cache that carry a grant of the pool's ledger, or whose last grant of it
/// may still be soaking (completed less than `--min-ready-seconds` ago, or at a time that
/// cannot be read): the ledger existed before, and may have held their slots.
fn ledger_carried_by(store: &Store<Node>, pool: &PoolRun) -> Vec<String> {
    let args = &pool.config.args;
    let keys = &args.annotation_prefix;
    let ledger = pool.ledger_store.id();
    let ours = |grant: Option<&str>| common::ledger::is_grant_of(grant, &ledger);
    let soak =
        jiff::SignedDuration::from_secs(i64::try_from(args.min_ready_seconds).unwrap_or(i64::MAX));
    let now = jiff::Timestamp::now();
    let may_soak = |completed: Option<&str>| {
        completed
            .and_then(|at| at.parse::<jiff::Timestamp>().ok())
            .is_none_or(|at| now.duration_since(at) < soak)
    };
    store
        .state()
        .iter()
        .filter(|node| {
            let state = NodeFacts::from_node(node).protocol(keys);
            ours(state.grant.as_deref())
                || (ours(state.last_grant.as_deref()) && may_soak(state.last_completed.as_deref()))
        })
        .filter_map(|node| node.metadata.name.clone())
        .collect()
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

/// `spec.paused` of the pool `name` read from the API server (a quorum read): a pool that is
/// gone is not paused; one that cannot be read holds its granted nodes this round.
fn fresh_pause(api: Api<RebootPool>, name: String) -> FreshPause {
    Arc::new(move || {
        let (api, name) = (api.clone(), name.clone());
        async move {
            match api.get_opt(&name).await {
                Ok(found) => found.is_some_and(|pool| pool.spec.paused),
                Err(error) => {
                    tracing::warn!(
                        pool = %name, %error,
                        "cannot read the pool's spec.paused: its granted nodes wait where they \
                         stand this round"
                    );
                    true
                }
            }
        }
        .boxed()
    })
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
