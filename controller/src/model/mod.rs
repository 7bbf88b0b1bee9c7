//! The model test of the controller: one to three replicas of the real round ([`Shell`]) act
//! at once (leader election off, or a deposed leader that has not noticed), each with its own
//! node cache and ledger watch that lag as the steps say, in random interleavings against one
//! model API server behind the round's own traits ([`NodeApi`], [`LeaseApi`], [`Drain`],
//! [`Clock`]). Around them, what real nodes and people do: agents; kubelets that report a new
//! boot late, come back NotReady (a bad kernel), never come back, or hang and confirm no pod
//! deletion; a scheduler that puts a workload pod back on every schedulable node; an
//! administrator who requests, cancels, cordons, relabels pools and zones, deletes and
//! re-creates nodes, deletes or damages the ledger, and types pause values; windows and gates
//! that change, also between a round's decision and its write. The invariants are checked
//! in [`checks`] at every write and after every step; once disturbances stop, every request
//! ends in exactly one proven reboot.

mod checks;
mod pools;
mod server;

use crate::{
    args::Args,
    cache::{
        nodes::{Indexing, NodeFeed, Overlay},
        pool::PoolSelector,
    },
    clock::Clock,
    cluster::{
        api::{LeaseApi, NodeApi},
        events::{CapturedEvents, Events},
        leader::Leadership,
        ledger_store::{LedgerStore, ReadLedger, on_watch_event},
    },
    drain::{
        DrainOutcome,
        tracker::{Drain, DrainTracker},
    },
    gates::{
        AlertChecks, Gates,
        blocking_pods::{BlockingPods, Scope},
    },
    metrics::Metrics,
    shell::{Shell, ShellParts},
};
use common::MaxUnavailable;
use controller_core::{
    decide::SetAside,
    rollout::RolloutRules,
    schedule::Schedule,
    scheduled_budget::Budgets,
    window::{Window, Windows},
};
use futures::{FutureExt, future::BoxFuture};
use k8s_openapi::{
    api::{coordination::v1::Lease, core::v1::Node},
    jiff::Timestamp,
};
use kube::runtime::{reflector, reflector::Store, watcher};
use proptest::prelude::*;
use serde_json::Value;
use server::{Disturbance, Fences, Kubelet, Server, Workload, annotation, facts, keys};
use std::{
    collections::BTreeMap,
    sync::{Arc, Mutex, MutexGuard},
    time::Duration,
};
use tokio::sync::{Notify, oneshot, watch};

const NODES: usize = 6;
/// The identity of the model's ledger (`ns/slots`), which its grant ids name.
const LEDGER: &str = "ns/slots";
const POOL: &str = "pool";
const ZONE: &str = "zone";
/// A step of the model takes a second on both clocks.
const STEP_MS: u64 = 1_000;

type Shared = Arc<Mutex<Server>>;

/// Every replica sets labels and a waiting taint around a reboot, so that their writes go
/// through every interleaving with the protocol's.
fn marks() -> common::RebootMarks {
    let label = |k: &str, v: &str| [(k.to_owned(), v.to_owned())].into_iter().collect();
    common::RebootMarks {
        pre_reboot_labels: label("rebooting", "true"),
        post_reboot_labels: label("rebooted", "true"),
        prefer_no_schedule_taint: Some("reboot-pending".into()),
        ..common::RebootMarks::default()
    }
}

fn lock(server: &Shared) -> MutexGuard<'_, Server> {
    server
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The model server as one replica's API client sees it.
#[derive(Clone)]
struct Api {
    server: Shared,
    replica: usize,
}

impl NodeApi for Api {
    fn patch(&self, name: &str, patch: json_patch::Patch) -> BoxFuture<'_, kube::Result<Node>> {
        let written = lock(&self.server).patch_node(self.replica, name, &patch);
        async move { written }.boxed()
    }

    fn get(&self, name: &str) -> BoxFuture<'_, kube::Result<Option<Node>>> {
        let node = lock(&self.server).get_node(self.replica, name);
        async move { Ok(node) }.boxed()
    }
}

/// The flags' pool's ledger; any other name is a `RebootPool`'s.
const FLAGS_LEDGER: &str = "slots";

impl LeaseApi for Api {
    fn get(&self, name: &str) -> BoxFuture<'_, kube::Result<Option<Lease>>> {
        let mut s = lock(&self.server);
        let lease = match name {
            FLAGS_LEDGER => s.get_lease(self.replica),
            _ => s.get_pool_lease(name),
        };
        async move { Ok(lease) }.boxed()
    }

    fn create(&self, lease: Lease) -> BoxFuture<'_, kube::Result<Lease>> {
        let mut s = lock(&self.server);
        let created = match lease.metadata.name.as_deref() {
            Some(FLAGS_LEDGER) => s.create_lease_by(self.replica, &lease),
            _ => s.create_pool_lease(&lease),
        };
        async move { created }.boxed()
    }

    fn merge(&self, name: &str, patch: Value) -> BoxFuture<'_, kube::Result<Lease>> {
        let mut s = lock(&self.server);
        let written = match name {
            FLAGS_LEDGER => s.merge_lease(self.replica, &patch),
            _ => s.merge_pool_lease(self.replica, name, &patch),
        };
        async move { written }.boxed()
    }
}

/// The model server's clocks, which only its steps move.
struct ModelClock(Shared);

impl std::fmt::Debug for ModelClock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ModelClock")
    }
}

impl Clock for ModelClock {
    fn now(&self) -> Timestamp {
        lock(&self.0).wall
    }

    fn elapsed_ms(&self) -> u64 {
        lock(&self.0).mono_ms
    }
}

/// A drain that runs until the model says how it ends.
struct Pending {
    grant: String,
    node: Node,
    end: oneshot::Sender<DrainOutcome>,
}

/// One replica's drains, which end on the model's `DrainEnds` steps.
#[derive(Clone)]
struct Drains {
    api: Api,
    pending: Arc<Mutex<BTreeMap<String, Pending>>>,
}

impl Drain for Drains {
    fn start(&self, node: Node, grant: String) -> BoxFuture<'static, DrainOutcome> {
        let (end, ended) = oneshot::channel();
        let name = node.metadata.name.clone().unwrap_or_default();
        {
            // Starting a drain moves a granted node further: the fences must let it.
            let mut s = lock(&self.api.server);
            let finish =
                s.finish_after_window || checks::runs_invalid_for(&s, self.api.replica, &grant);
            assert!(
                s.window_open() || finish,
                "drain of {name} started outside the windows"
            );
            assert!(
                !checks::pool_paused_for(&s, &grant),
                "drain of {name} started while its pool's spec.paused is set"
            );
            assert!(
                !s.unhealthy,
                "drain of {name} started while a health gate was closed"
            );
            assert!(
                !s.blocked.contains(&name),
                "drain of {name} started under a blocking pod"
            );
            assert!(
                !(s.paused() && s.pause_known_to(self.api.replica)),
                "drain of {name} started while paused"
            );
            let claimed_for = s.claimed_for(&grant);
            assert!(
                claimed_for.is_some_and(|ms| ms >= s.drain_delay_ms),
                "drain of {name} started {claimed_for:?} ms after its claim, within the drain \
                 delay of {} ms (replica {})",
                s.drain_delay_ms,
                self.api.replica
            );
            s.delay_checks[self.api.replica] += 1;
        }
        let pending = Pending { grant, node, end };
        if let Ok(mut drains) = self.pending.lock() {
            drains.insert(name, pending);
        }
        async move { ended.await.unwrap_or(DrainOutcome::Superseded) }.boxed()
    }

    fn would_evict(&self, _: &str) -> BoxFuture<'_, Result<Vec<String>, String>> {
        async { Ok(Vec::new()) }.boxed()
    }
}

impl Drains {
    /// The drain of node `i` ends, as `Drainer::drain` ends: a drain whose list of the node's
    /// pods has nothing to evict stands for the copy it was started with; one with pods evicts
    /// only while the node, read now, carries the grant the drain is for, and stands for the
    /// version read. A pod whose deletion its hung kubelet never confirms counts as gone once
    /// the node is NotReady; on a Ready node it holds the drain until it times out.
    fn end(&self, i: usize, ok: bool) {
        let Some(pending) = self
            .pending
            .lock()
            .ok()
            .and_then(|mut p| p.remove(&format!("n{i}")))
        else {
            return;
        };
        let mut s = lock(&self.api.server);
        let holds = s
            .node(i)
            .and_then(|n| annotation(n, "reboot-grant"))
            .is_some_and(|g| g == pending.grant);
        let version = s
            .node(i)
            .and_then(|n| n["metadata"]["resourceVersion"].as_str().map(str::to_owned));
        let timed_out = DrainOutcome::TimedOut {
            blocking: BTreeMap::from([(format!("default/pod-{i}"), "model".to_owned())]),
            // Only a version at which the node held the grant (the model does not force).
            node_version: version.clone().filter(|_| holds),
        };
        let outcome = if !ok {
            timed_out
        } else if s.pods[i] == Workload::None {
            DrainOutcome::Drained {
                evicted: 0,
                unconfirmed: Vec::new(),
                node_version: pending.node.metadata.resource_version.clone(),
            }
        } else if !holds {
            DrainOutcome::Superseded
        } else if s.kubelets[i] != Kubelet::Wedged {
            s.pods[i] = Workload::None;
            DrainOutcome::Drained {
                evicted: 1,
                unconfirmed: Vec::new(),
                node_version: version,
            }
        } else if s.ready(i) {
            s.pods[i] = Workload::Terminating;
            timed_out
        } else {
            s.pods[i] = Workload::Terminating;
            DrainOutcome::Drained {
                evicted: 1,
                unconfirmed: vec![format!("default/pod-{i}")],
                node_version: version,
            }
        };
        let _ = pending.end.send(outcome);
    }
}

/// One controller replica: a real round per pool, and the lagging views the model feeds it.
struct Replica {
    pools: Vec<PoolShell>,
    feed: NodeFeed,
    store: Store<Node>,
    drains: Drains,
    /// The gate of blocking pods every pool of the replica reads.
    pods_gate: BlockingPods,
    /// With `RebootPool`s: the objects as this replica last listed them.
    print: Vec<crate::pools::Fingerprint>,
}

/// One pool as a replica runs it: its round, and its ledger's watch.
struct PoolShell {
    shell: Shell,
    /// The ledger's Lease name, and its identity (`ns/<name>`) that its grant ids name.
    ledger: String,
    ledger_id: String,
    ledger_tx: watch::Sender<ReadLedger>,
    listed: bool,
    events: CapturedEvents,
}

/// What one pool's round is built with: the model's settings, or a `RebootPool`'s plan.
struct PoolParts {
    ledger: String,
    index: crate::cache::nodes::SharedIndex,
    indexing: Indexing,
    budgets: Budgets,
    paused: bool,
    /// A deleted pool's: it takes its kept cordons off (`SetAside::retiring`).
    retiring: bool,
}

/// What a case is made of, drawn by proptest.
#[derive(Debug, Clone)]
struct Setup {
    replicas: usize,
    max_unavailable: MaxUnavailable,
    drain_enabled: bool,
    finish_after_window: bool,
    zone_budget: Option<MaxUnavailable>,
    concurrency: Option<MaxUnavailable>,
    /// `--give-up-after`.
    give_up_after_ms: Option<u64>,
    min_ready_ms: u64,
    /// `--drain-delay` and `--reboot-delay`.
    drain_delay_ms: u64,
    reboot_delay_ms: u64,
    /// A blackout over the first 20 minutes of each opening of the window, and a scheduled
    /// budget of 1 over the next 20 (the wall clock starts outside both).
    schedules: bool,
    /// `--drain-attempts` and `--max-blocked-nodes`.
    set_aside: SetAside,
    /// `--canary`, `--canary-soak`, `--waves` and `--max-failures`.
    rollout: RolloutRules,
    /// `--reboot-estimate`.
    reboot_estimate_ms: Option<u64>,
    soaking: Vec<usize>,
    not_ready: Vec<bool>,
    kubelets: Vec<Kubelet>,
}

struct Model {
    server: Shared,
    replicas: Vec<Replica>,
    runtime: tokio::runtime::Runtime,
    setup: Setup,
    /// The `RebootPool` objects as the API server has them (none: the flags' pool alone).
    objects: Vec<common::pool::RebootPool>,
}

fn windows(setup: &Setup) -> Windows {
    // Open twelve hours a day: a step is a second, so only the model's window steps move
    // the clock across an opening or a closing.
    let window: Window = "Mon-Sun 00:00-12:00 UTC".parse().expect("a window");
    let blackouts = setup
        .schedules
        .then(|| "Mon-Sun 00:00-00:20 UTC".parse().expect("a period"));
    Windows::new(vec![window]).with_blackouts(blackouts.into_iter().collect())
}

/// `--max-unavailable`, and with `schedules` a budget of 1 from the end of the blackout for 20
/// minutes: each opening after the first starts under it.
fn budgets(setup: &Setup) -> Budgets {
    let scheduled = setup.schedules.then(|| {
        "1 Mon-Sun 00:20-00:40 UTC"
            .parse()
            .expect("a scheduled budget")
    });
    Budgets {
        base: setup.max_unavailable,
        scheduled: scheduled.into_iter().collect(),
    }
}

impl Model {
    fn new(setup: &Setup) -> Self {
        let mut server = Server::new(budgets(setup), windows(setup), &setup.not_ready);
        server.drain_enabled = setup.drain_enabled;
        server.finish_after_window = setup.finish_after_window;
        server.zone_budget = setup.zone_budget;
        server.concurrency = setup.concurrency;
        server.set_aside = setup.set_aside;
        server.rollout = setup.rollout;
        server.reboot_estimate_ms = setup.reboot_estimate_ms;
        server.min_ready_ms = setup.min_ready_ms;
        server.drain_delay_ms = setup.drain_delay_ms;
        server.reboot_delay_ms = setup.reboot_delay_ms;
        server.kubelets.clone_from(&setup.kubelets);
        let budget = setup.max_unavailable.resolve(NODES);
        server.start_soaks(&setup.soaking, budget);
        server.budget_at_grant = budget;
        let server = Arc::new(Mutex::new(server));
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        let mut model = Self {
            server,
            replicas: Vec::new(),
            runtime,
            setup: setup.clone(),
            objects: Vec::new(),
        };
        for k in 0..setup.replicas {
            let replica = model.replica(k, setup);
            model.replicas.push(replica);
        }
        model
    }

    fn replica(&self, k: usize, setup: &Setup) -> Replica {
        let indexing = Indexing::new(
            PoolSelector::parse(&format!("{POOL}=a")).expect("a selector"),
            ZONE,
            keys(),
        )
        .keeping_labels(marks().label_keys());
        let (store, mut indexes, feed) = self.node_feed(k, vec![indexing.clone()]);
        let mut replica = self.bare_replica(k, store, feed);
        let parts = PoolParts {
            ledger: FLAGS_LEDGER.to_owned(),
            index: indexes.remove(0),
            indexing,
            budgets: budgets(setup),
            paused: false,
            retiring: false,
        };
        let pool = self.pool_shell(&replica, setup, parts, None);
        replica.pools.push(pool);
        replica
    }

    /// Replica `k`'s node cache, listed afresh from the truth, with one index per pool.
    fn node_feed(
        &self,
        k: usize,
        indexings: Vec<Indexing>,
    ) -> (Store<Node>, Vec<crate::cache::nodes::SharedIndex>, NodeFeed) {
        let (store, indexes, mut feed) = NodeFeed::of_pools(indexings);
        feed.apply(watcher::Event::Init);
        for node in lock(&self.server).nodes.iter().flatten() {
            feed.apply(watcher::Event::InitApply(server::node_of(node)));
        }
        feed.apply(watcher::Event::InitDone);
        let mut s = lock(&self.server);
        match s.views.get_mut(k) {
            Some(view) => *view = store.clone(),
            None => s.views.push(store.clone()),
        }
        (store, indexes, feed)
    }

    fn bare_replica(&self, k: usize, store: Store<Node>, feed: NodeFeed) -> Replica {
        let api = Api {
            server: self.server.clone(),
            replica: k,
        };
        let (pods_gate, pods) = BlockingPods::fed("app=backup", Scope::Node);
        let mut s = lock(&self.server);
        s.pod_watches.push(pods);
        if !s.blocked.is_empty() {
            s.show_blocked();
        }
        Replica {
            pools: Vec::new(),
            feed,
            store,
            drains: Drains {
                api,
                pending: Arc::default(),
            },
            pods_gate,
            print: Vec::new(),
        }
    }

    /// One pool's round for `replica`: the model's settings, with the pool's own parts; a
    /// `RebootPool`'s settings (`args`) where it has them.
    fn pool_shell(
        &self,
        replica: &Replica,
        setup: &Setup,
        parts: PoolParts,
        args: Option<&crate::args::Args>,
    ) -> PoolShell {
        let api = replica.drains.api.clone();
        let ledger_store = LedgerStore::with_api(Arc::new(api.clone()), "ns", &parts.ledger);
        let ledger_id = ledger_store.id();
        let _guard = self.runtime.enter();
        let ledger = self
            .runtime
            .block_on(ledger_store.load(Vec::new))
            .expect("the model ledger loads")
            .read;
        let (ledger_tx, ledger_watch) = watch::channel(ledger.clone());
        let (wanted, _) = watch::channel(false);
        let alert_checks = AlertChecks {
            readings: lock(&self.server).alerts.subscribe(),
            period: Duration::from_secs(3600),
            prometheus: "model".into(),
            wanted,
        };
        let (events, captured) = Events::captured();
        let (metrics, _) = Metrics::new();
        let drainer = setup
            .drain_enabled
            .then(|| Arc::new(replica.drains.clone()) as Arc<dyn Drain>);
        let reboot_timeout = Duration::from_millis(lock(&self.server).reboot_timeout_ms);
        let schedule = match args {
            Some(args) => Schedule {
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
            None => Schedule {
                windows: windows(setup),
                finish_after_window: setup.finish_after_window,
                min_ready: Duration::from_millis(setup.min_ready_ms),
                reboot_timeout,
                give_up_after: setup.give_up_after_ms.map(Duration::from_millis),
                drain_delay: Duration::from_millis(setup.drain_delay_ms),
                reboot_delay: Duration::from_millis(setup.reboot_delay_ms),
                reboot_estimate: setup.reboot_estimate_ms.map(Duration::from_millis),
                // The model's drains end by its steps; the flag's default bounds their length.
                drain_timeout: setup.drain_enabled.then_some(Duration::from_secs(15 * 60)),
            },
        };
        let shell = Shell::new(ShellParts {
            node_api: Arc::new(api),
            clock: Arc::new(ModelClock(self.server.clone())),
            keys: args.map_or_else(keys, |a| a.annotation_prefix.clone()),
            marks: args.map_or_else(marks, |a| a.marks.marks()),
            budgets: parts.budgets,
            zone_budget: args.map_or(setup.zone_budget, |a| a.max_unavailable_per_zone),
            concurrency: args.map_or(setup.concurrency, |a| a.concurrency),
            set_aside: SetAside {
                retiring: parts.retiring,
                ..args.map_or(setup.set_aside, Args::set_aside)
            },
            rollout_rules: args.map_or(setup.rollout, Args::rollout_rules),
            drains: DrainTracker::new(drainer, Arc::new(Notify::new())),
            nodes: replica.store.clone(),
            index: parts.index,
            overlay: Overlay::new(parts.indexing),
            ledger,
            ledger_store,
            ledger_watch,
            events,
            schedule,
            gates: Gates::new(Some(replica.pods_gate.clone()), Some(alert_checks)),
            preflight: crate::gates::preflight::PreflightChecks::default(),
            metrics,
            leadership: Leadership::always(),
            dry_run: false,
            notifier: crate::notify::Notifier::off(),
            sightings: crate::cache::sightings::Sightings::default(),
            pool_paused: crate::shell::PoolPause::fixed(parts.paused)
                .read_fresh(self.fresh_pause(&parts.ledger)),
            reports_gauges: args.is_none(),
        });
        PoolShell {
            shell,
            ledger: parts.ledger,
            ledger_id,
            ledger_tx,
            listed: true,
            events: captured,
        }
    }

    /// A pool's `spec.paused` as the model's API server has it (the flags' pool has none).
    fn fresh_pause(&self, ledger: &str) -> crate::shell::FreshPause {
        let (server, ledger) = (self.server.clone(), ledger.to_owned());
        Arc::new(move || {
            let s = lock(&server);
            let paused = s.pools.iter().any(|p| p.ledger() == ledger && p.paused);
            Box::pin(std::future::ready(paused))
        })
    }

    fn s(&self) -> MutexGuard<'_, Server> {
        lock(&self.server)
    }

    /// Both clocks move on by `ms`, for the server and every replica.
    fn tick(&self, ms: u64) {
        self.s().tick(ms);
    }

    /// One round of replica `k`, with `disturbance` landing between its decision and its
    /// first ledger write.
    fn round(&mut self, k: usize, disturbance: Option<Disturbance>) {
        {
            let mut s = self.s();
            let fences = Fences {
                wall: s.wall,
                window_open: s.window_open(),
                unhealthy: s.unhealthy,
                blocked: s.blocked.clone(),
            };
            s.round = Some((k, fences));
            s.disturbance = disturbance;
        }
        for pool in &mut self.replicas[k].pools {
            lock(&self.server).shell = Some(pool.ledger.clone());
            self.runtime.block_on(pool.shell.round());
            pool.events.take();
        }
        let mut s = self.s();
        s.shell = None;
        s.round = None;
        s.disturbance = None;
    }

    /// Node `i` as replica `k`'s watch delivers it.
    fn sync_node(&mut self, k: usize, i: usize) {
        let (now, last) = {
            let s = self.s();
            (s.node(i).map(server::node_of), server::node_of(&s.last[i]))
        };
        let replica = &mut self.replicas[k];
        match now {
            Some(node) => replica.feed.apply(watcher::Event::Apply(node)),
            None if replica
                .store
                .get(&reflector::ObjectRef::new(&format!("n{i}")))
                .is_some() =>
            {
                replica.feed.apply(watcher::Event::Delete(last));
                // Known deleted now: a read from before is no longer what it knows (a node
                // created again under the name later is one it has not seen).
                let mut s = self.s();
                let revision = s.revision;
                s.reads[k].insert(i, (revision, None));
            }
            None => {}
        }
    }

    /// The ledgers as replica `k`'s watches deliver them: each Lease, or its deletion.
    fn sync_ledger(&mut self, k: usize) {
        for p in 0..self.replicas[k].pools.len() {
            let (lease, last) = {
                let s = self.s();
                match self.replicas[k].pools[p].ledger.as_str() {
                    FLAGS_LEDGER => (s.lease.clone(), s.lease_last.clone()),
                    name => (s.ledgers.get(name).cloned(), Value::Null),
                }
            };
            let pool = &mut self.replicas[k].pools[p];
            let event = match lease {
                Some(lease) => watcher::Event::Apply(server::lease_of(&lease)),
                None if last.is_null() => continue,
                None => watcher::Event::Delete(server::lease_of(&last)),
            };
            if let Some(read) = on_watch_event(&pool.ledger_id, event, &mut pool.listed) {
                let _ = pool.ledger_tx.send(read);
            }
        }
        let mut s = self.s();
        if let Some(version) = lease_version(&s) {
            s.lease_seen[k] = s.lease_seen[k].max(version);
        }
    }

    /// Lets the replicas' drain tasks hand their outcomes over.
    fn run_tasks(&self) {
        self.runtime.block_on(async {
            for _ in 0..4 {
                tokio::task::yield_now().await;
            }
        });
    }
}

fn lease_version(s: &Server) -> Option<u64> {
    s.lease.as_ref()?["metadata"]["resourceVersion"]
        .as_str()?
        .parse()
        .ok()
}

mod world;

proptest! {
    // 300 cases by default (about 20 s); `PROPTEST_CASES=5000` for a longer hunt.
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|c| c.parse().ok()).unwrap_or(300),
        ..ProptestConfig::default()
    })]

    #[test]
    fn replicas_of_the_real_round_keep_the_invariants_on_misbehaving_nodes(
        setup in world::setup(),
        steps in proptest::collection::vec(world::step(), 0..200),
    ) {
        let mut model = Model::new(&setup);
        for step in &steps {
            model.apply(step);
        }
        model.settle();
    }
}

/// A scripted case's setup: healthy nodes, no zone budget, no soak; with `drain`, the drain
/// is on and a granted node finishes after a window closes.
fn scripted(replicas: usize, max_unavailable: u32, drain: bool) -> Setup {
    Setup {
        replicas,
        max_unavailable: MaxUnavailable::Count(max_unavailable),
        drain_enabled: drain,
        finish_after_window: drain,
        zone_budget: None,
        concurrency: None,
        give_up_after_ms: None,
        min_ready_ms: 0,
        drain_delay_ms: 0,
        reboot_delay_ms: 0,
        schedules: false,
        set_aside: SetAside::default(),
        rollout: RolloutRules::default(),
        reboot_estimate_ms: None,
        soaking: Vec::new(),
        not_ready: vec![false; NODES],
        kubelets: vec![server::Kubelet::Healthy; NODES],
    }
}

/// A slot re-keyed from a cached copy: replica 1 last saw n0 carrying its first grant; the
/// drain of that grant failed, its slot was released and n0 granted again. Re-keyed to the
/// grant its stale copy shows, the slot would flip back (and stop the new grant's drain);
/// it is re-keyed only on a fresh read, which shows the new grant.
#[test]
fn a_slot_is_not_re_keyed_from_a_stale_copy_after_a_failed_drain() {
    use world::Step::*;
    let setup = scripted(2, 1, true);
    let mut model = Model::new(&setup);
    let mut steps = vec![
        Request(0),
        SyncAll(0),
        SyncAll(1),
        Round(0),
        Round(0),
        Round(0),
    ];
    steps.extend([SyncNode {
        replica: 1,
        node: 0,
    }]);
    steps.extend([
        DrainEnds {
            replica: 0,
            node: 0,
            ok: false,
        },
        Round(0),
        Round(0),
    ]);
    // The failed drain's node waits before its next grant.
    steps.extend(std::iter::repeat_n(SyncLedger(0), 40));
    steps.extend([Round(0), Round(0), SyncLedger(1), Round(1), Round(1)]);
    for step in &steps {
        model.apply(step);
    }
    let carried = annotation(model.s().node(0).expect("n0"), "reboot-grant");
    assert!(
        carried.is_some(),
        "n0 was not granted again: {:?}",
        model.s().node(0)
    );
    model.settle();
}

/// A ledger damaged and then deleted: the deletion brings no readable contents, and a replica
/// whose copy predates another's grants must not recreate the Lease from that copy and grant
/// their slots again. Recreated, the ledger is rebuilt from a fresh read of every node first.
#[test]
fn a_ledger_deleted_while_damaged_is_rebuilt_from_the_nodes_not_from_a_stale_copy() {
    use world::Step::*;
    let setup = scripted(3, 2, false);
    let mut model = Model::new(&setup);
    // Replica 0 reads n0 to n2 requested; replica 2 then grants n0 and n1 on a rebuilt ledger
    // and tells them to reboot; the ledger is damaged, then deleted.
    let steps = [
        Request(1),
        SyncNode {
            replica: 2,
            node: 1,
        },
        Request(0),
        DamageLedger,
        Request(2),
        Round(2),
        Round(2),
        SyncAll(0),
        Round(2),
        Round(2),
        Block {
            node: 0,
            running: true,
        },
        DamageLedger,
        DeleteLedger,
        SyncLedger(0),
        Round(0),
    ];
    for step in &steps {
        model.apply(step);
    }
    let told = |i| annotation(model.s().node(i).expect("a node"), "reboot-now");
    assert!(
        told(0).is_some() && told(1).is_some(),
        "{:?}",
        model.s().slots()
    );
    let granted = annotation(model.s().node(2).expect("n2"), "reboot-grant");
    assert!(granted.is_none(), "n2 granted beyond the budget");
    model.settle();
}

/// A node deleted and created again under its name after its reboot: another replica releases
/// the slot the new node does not carry. A replica whose cache still has the old node, with
/// the grant, must not adopt the grant back from that copy (the ledger would hold the new node
/// and the next grant with a budget of 1): it reads the node first.
#[test]
fn a_grant_is_not_adopted_back_from_a_cached_copy_of_a_node_created_again() {
    use world::Step::*;
    let mut model = Model::new(&scripted(3, 1, false));
    let steps = [
        Request(0),
        SyncAll(2),
        Round(2),
        SyncAll(1),
        Round(1),
        SyncNode {
            replica: 0,
            node: 0,
        },
        DeleteNode(0),
        Request(1),
        RecreateNode(0),
        SyncAll(1),
        Round(0),
        Round(0),
        Round(0),
        Round(1),
        SyncLedger(0),
        Round(0),
    ];
    for step in &steps {
        model.apply(step);
    }
    let slots: Vec<String> = model.s().slots().into_keys().collect();
    assert_eq!(slots, ["n1"], "the new n0 holds no slot");
    model.settle();
}

/// A node deleted and created again, then cordoned by an administrator, while a replica's
/// cache still has it deleted: a read of the slot it held shows the replica the new node, and
/// every round after counts it unavailable until the cache has it (re-reading it each round),
/// never only the round right after the read. Found by the randomized test: a later round
/// granted a third node with n0 and the new n5 down and a budget of 2.
#[test]
fn a_node_made_again_and_cordoned_counts_while_the_cache_lags() {
    use world::Step::*;
    let mut setup = scripted(3, 2, false);
    setup.kubelets[4] = server::Kubelet::NeverBack;
    let mut model = Model::new(&setup);
    let steps = [
        Request(5),
        Relabel {
            node: 0,
            in_pool: true,
            zone: None,
        },
        Abandon(0, r#"{"by":"model","reason":"never coming back"}"#),
        Round(0),
        SyncNode {
            replica: 0,
            node: 5,
        },
        Round(0),
        DamageLedger,
        AdminLabel {
            node: 0,
            mark: 0,
            value: Some("true"),
        },
        SyncAll(1),
        KubeletTurns(0, server::Kubelet::Wedged),
        Round(1),
        SyncAll(0),
        Round(0),
        DeleteNode(5),
        Request(1),
        SyncAll(0),
        RecreateNode(5),
        AdminCordon(5),
        Round(0),
        Round(0),
        Round(0),
    ];
    for step in &steps {
        model.apply(step);
    }
    model.settle();
}

/// A grant held by a fence before its claim (a health gate that fired between the grant and
/// its claim), seen meanwhile by another replica, and claimed much later. That replica counts
/// the delay from when it saw the claim, not from when it saw the grant: its drain (or, with
/// the drain off, its `reboot-now`) does not follow the cordon at once.
#[test]
fn a_delay_counts_from_the_claim_not_from_an_earlier_sighting_of_the_grant() {
    use world::Step::*;
    for drain in [true, false] {
        let mut setup = scripted(2, 1, drain);
        setup.drain_delay_ms = 5_000;
        setup.reboot_delay_ms = 5_000;
        let mut model = Model::new(&setup);
        let mut steps = vec![
            Request(0),
            SyncAll(0),
            SyncAll(1),
            DisturbedRound(0, Disturbance::FireGate),
            SyncLedger(1),
            Round(1),
        ];
        steps.extend(std::iter::repeat_n(SyncLedger(0), 20));
        steps.extend([Gate(false), Round(0)]);
        for step in &steps {
            model.apply(step);
        }
        let claimed = annotation(model.s().node(0).expect("n0"), "reboot-grant");
        assert!(
            claimed.is_some(),
            "n0 was not claimed: {:?}",
            model.s().node(0)
        );
        // Replica 1 alone drives n0 on, a second a step, until it starts the drain (or writes
        // reboot-now): the checks of that step are what this case is about.
        for _ in 0..20 {
            if model.s().delay_checks[1] > 0 {
                break;
            }
            model.apply(&SyncAll(1));
            model.apply(&Round(1));
        }
        assert!(
            model.s().delay_checks[1] > 0,
            "replica 1 never reached its drain or reboot-now (drain {drain})"
        );
        model.settle();
    }
}

/// The administrator's labels of the keys the operator sets around a reboot, at the operator's
/// value, at another, and empty: through the reboots they stay as they were.
#[test]
fn an_administrators_label_of_a_mark_key_is_never_changed_or_removed() {
    use world::Step::*;
    let mut model = Model::new(&scripted(2, 2, true));
    let steps = [
        AdminLabel {
            node: 0,
            mark: 0,
            value: Some("admin"),
        },
        AdminLabel {
            node: 1,
            mark: 0,
            value: Some("true"),
        },
        AdminLabel {
            node: 1,
            mark: 1,
            value: Some(""),
        },
        AdminLabel {
            node: 2,
            mark: 1,
            value: Some("admin"),
        },
        Request(0),
        Request(1),
        Request(2),
    ];
    for step in &steps {
        model.apply(step);
    }
    model.settle();
    let s = model.s();
    for ((i, key), value) in &s.admin_labels {
        let node = s.node(*i).expect("a node");
        assert_eq!(node["metadata"]["labels"][key], serde_json::json!(value));
    }
    assert_eq!(s.admin_labels.len(), 4, "{:?}", s.admin_labels);
    assert!(s.boots.iter().take(3).all(|&b| b == 1), "{:?}", s.boots);
}

/// A drain that fails `--drain-attempts` times sets its node aside: counted on the node with
/// what blocked it, never claimed again, the next request granted instead; the stall past
/// `--max-blocked-nodes` 0 holds that request until the count is removed by hand.
#[test]
fn a_node_whose_drain_keeps_failing_is_set_aside_and_stalls_the_pool_past_the_limit() {
    use world::Step::*;
    for (most, keep_cordoned) in [(None, false), (Some(0), false), (None, true)] {
        let mut setup = scripted(2, 1, true);
        setup.set_aside = SetAside {
            attempts: Some(1),
            most,
            keep_cordoned,
            retiring: false,
        };
        let mut model = Model::new(&setup);
        let fail = DrainEnds {
            replica: 0,
            node: 0,
            ok: false,
        };
        let round = [SyncAll(0), Round(0)];
        let claim_and_drain = [round.clone(), round.clone(), round.clone()].concat();
        let give_back = [round.clone(), round.clone()].concat();
        let steps = [vec![Request(0)], claim_and_drain, vec![fail], give_back].concat();
        for step in &steps {
            model.apply(step);
        }
        let count = model
            .s()
            .node(0)
            .and_then(|n| annotation(n, "reboot-drain-failures"));
        assert_eq!(count.as_deref(), Some("1; blocked by default/pod-0: model"));
        model.apply(&Request(1));
        for _ in 0..40 {
            model.tick(10 * STEP_MS);
            model.apply(&SyncAll(0));
            model.apply(&Round(0));
            for i in 0..2 {
                model.apply(&DrainEnds {
                    replica: 0,
                    node: i,
                    ok: true,
                });
                model.apply(&Agent(i));
                model.apply(&Kubelet(i));
            }
        }
        let s = model.s();
        assert_eq!(s.boots[0], 0, "n0 set aside, never rebooted");
        // Kept cordoned, n0 holds the budget of 1 as a stall would.
        assert_eq!(
            s.boots[1],
            u32::from(most.is_none() && !keep_cordoned),
            "n1 rebooted unless stalled or the budget is held"
        );
        let n0 = facts(s.node(0).expect("n0"));
        assert_eq!(n0.unschedulable, keep_cordoned, "n0's cordon: {n0:?}");
        assert_eq!(n0.protocol(&keys()).cordoned_by_operator, keep_cordoned);
        drop(s);
        model.settle();
    }
}

/// The canary goes alone, whichever of two replicas decides: with `--canary 1` and a budget
/// of 2, n1 waits while n0 reboots. n0 comes back NotReady (a bad kernel): past the reboot
/// timeout it is counted as the canary's failure and the pool is stalled, so n1 is never
/// rebooted, even once n0 is mended, until the failures are forgiven (`kubectl reboot resume`
/// writes the record resumed). Without a canary, n1 goes beside n0 at once.
#[test]
fn a_canary_that_comes_back_not_ready_stalls_the_pool_until_resumed() {
    use world::Step::*;
    for canary in [0, 1] {
        let mut setup = scripted(2, 2, false);
        setup.rollout = RolloutRules {
            canary,
            max_failures: Some(common::rollout::MaxFailures::Count(1)),
            ..RolloutRules::default()
        };
        setup.kubelets[0] = server::Kubelet::BackNotReady;
        let mut model = Model::new(&setup);
        let rounds = |model: &mut Model| {
            for k in 0..2 {
                model.apply(&SyncAll(k));
                model.apply(&Round(k));
            }
        };
        model.apply(&Request(0));
        rounds(&mut model);
        model.apply(&Request(1));
        rounds(&mut model);
        let granted = |model: &Model, i: usize| {
            model
                .s()
                .node(i)
                .and_then(|n| annotation(n, "reboot-grant"))
                .is_some()
        };
        assert!(granted(&model, 0));
        assert_eq!(granted(&model, 1), canary == 0, "canary {canary}");
        model.apply(&Agent(0));
        model.apply(&Kubelet(0));
        for _ in 0..10 {
            model.tick(10 * STEP_MS);
            rounds(&mut model);
            model.apply(&Agent(1));
            model.apply(&Kubelet(1));
        }
        let record = model.s().rollout_record().expect("a rollout under way");
        if canary == 0 {
            assert_eq!(model.s().boots[1], 1, "n1 went beside n0");
            continue;
        }
        let failure = &record.failures["n0"];
        assert!(failure.canary, "{record:?}");
        assert_eq!(model.s().boots[1], 0, "n1 never went: {record:?}");
        // Mended, n0 completes; the pool stays stalled until the failure is forgiven.
        model.apply(&KubeletTurns(0, server::Kubelet::Healthy));
        for _ in 0..10 {
            model.tick(10 * STEP_MS);
            rounds(&mut model);
            model.apply(&Kubelet(0));
        }
        assert!(!granted(&model, 1), "stalled until resumed");
        model.s().write_rollout(&record.resumed());
        for _ in 0..10 {
            model.tick(10 * STEP_MS);
            rounds(&mut model);
            model.apply(&Agent(1));
            model.apply(&Kubelet(1));
        }
        assert_eq!(model.s().boots[1], 1, "resumed, n1 went");
        model.settle();
    }
}

/// A canary soaking under `--canary-soak` alone (no `--min-ready-seconds`) that crashes as
/// its soak ends: the replica's cache still has it Ready, yet its slot is released only on a
/// fresh read, which finds it NotReady, so n1 is not granted beside it under a budget of 1.
/// Before, only `--min-ready-seconds` had the release read the node again.
#[test]
fn a_canary_that_crashes_as_its_soak_ends_keeps_its_slot() {
    use world::Step::*;
    let mut setup = scripted(1, 1, false);
    setup.rollout = RolloutRules {
        canary: 1,
        canary_soak: 20_000,
        ..RolloutRules::default()
    };
    let mut model = Model::new(&setup);
    for step in [Request(0), Request(1), SyncAll(0), Round(0), Round(0)] {
        model.apply(&step);
    }
    model.apply(&Agent(0));
    model.apply(&Kubelet(0));
    for _ in 0..3 {
        model.apply(&SyncAll(0));
        model.apply(&Round(0));
    }
    model.tick(30 * STEP_MS);
    model.apply(&Flap(0));
    model.apply(&Round(0));
    let released = !model.s().slots().contains_key("n0");
    assert!(!released, "the canary's slot released while NotReady");
    model.apply(&Flap(0));
    model.settle();
    assert_eq!(model.s().boots[1], 1, "n1 rebooted after the canary");
}

/// Found by the property test: n5 soaking from the start, the ledger deleted and recreated,
/// then n5 requested, seen so by replica 1, opted out, and replica 1's round.
#[test]
fn a_node_opted_out_after_the_replica_saw_its_request_is_not_granted() {
    use world::Step::*;
    let mut setup = scripted(3, 1, false);
    setup.finish_after_window = false;
    setup.min_ready_ms = 25_000;
    setup.soaking = vec![5];
    let mut model = Model::new(&setup);
    let no_drain = DrainEnds {
        replica: 0,
        node: 0,
        ok: false,
    };
    let steps = vec![
        Round(1),
        DeleteLedger,
        Round(0),
        Round(0),
        no_drain.clone(),
        no_drain.clone(),
        Round(0),
        SyncLedger(2),
        Gate(false),
        no_drain.clone(),
        Round(0),
        Round(0),
        no_drain.clone(),
        SyncLedger(0),
        Round(0),
        Gate(false),
        Round(0),
        no_drain.clone(),
        Round(0),
        no_drain,
        Round(0),
        Round(0),
        Round(0),
        Gate(false),
        Round(0),
        Round(1),
        Request(5),
        SyncNode {
            replica: 1,
            node: 5,
        },
        OptOut(5, Some("true")),
        Round(1),
    ];
    for step in &steps {
        model.apply(step);
    }
    model.settle();
}

/// A soak ended by one replica (its slot released, another node granted in its place) comes
/// back when a replica with an older copy recreates a deleted ledger: the controllers count the
/// slot again, which is conservative, and it takes no node down: the budget check counts the
/// two nodes rebooting, not the soak brought back.
#[test]
fn a_released_soak_brought_back_by_a_recreated_ledger_takes_no_node_down() {
    use Disturbance::CloseWindow;
    use server::Kubelet::*;
    use world::Step::*;
    let setup = Setup {
        replicas: 2,
        max_unavailable: MaxUnavailable::Percent(50),
        drain_enabled: false,
        finish_after_window: false,
        zone_budget: None,
        concurrency: None,
        give_up_after_ms: None,
        min_ready_ms: 25000,
        drain_delay_ms: 0,
        reboot_delay_ms: 0,
        schedules: false,
        set_aside: SetAside::default(),
        rollout: RolloutRules::default(),
        reboot_estimate_ms: None,
        soaking: vec![1],
        not_ready: vec![false; NODES],
        kubelets: vec![
            Healthy,
            BackNotReady,
            BackNotReady,
            Healthy,
            Healthy,
            Healthy,
        ],
    };
    let steps = vec![
        Kubelet(2),
        Request(0),
        Round(2),
        KubeletTurns(0, Healthy),
        SyncNode {
            replica: 0,
            node: 0,
        },
        AdminTakesCordon(0),
        OptOut(3, Some("true")),
        SyncNode {
            replica: 0,
            node: 0,
        },
        SyncNode {
            replica: 0,
            node: 0,
        },
        DeleteNode(3),
        Round(1),
        DisturbedRound(1, CloseWindow),
        SyncAll(1),
        SyncNode {
            replica: 0,
            node: 0,
        },
        SyncNode {
            replica: 0,
            node: 0,
        },
        Request(2),
        DeleteLedger,
        AdminCordon(2),
        SyncNode {
            replica: 0,
            node: 0,
        },
        Round(0),
        SyncAll(2),
        DisturbedRound(1, CloseWindow),
        Request(0),
        SyncLedger(1),
        Round(2),
        Window(true),
        Round(0),
        Round(0),
        DisturbedRound(2, CloseWindow),
        DeleteLedger,
        Round(0),
        Round(1),
    ];
    let mut model = Model::new(&setup);
    for step in &steps {
        model.apply(step);
    }
    model.settle();
}

/// A node whose kubelet hangs is given up by `--give-up-after` in the settling rounds, after
/// its request was typed again: the give-up drops the request, as `kubectl reboot abandon`
/// does, so the node is not expected to complete it.
#[test]
fn a_node_given_up_by_give_up_after_is_not_expected_to_complete_its_request() {
    use server::Kubelet::*;
    use world::Step::*;
    let setup = Setup {
        replicas: 2,
        max_unavailable: MaxUnavailable::Count(1),
        drain_enabled: false,
        finish_after_window: false,
        zone_budget: None,
        concurrency: None,
        give_up_after_ms: Some(30000),
        min_ready_ms: 25000,
        drain_delay_ms: 0,
        reboot_delay_ms: 0,
        schedules: false,
        set_aside: SetAside::default(),
        rollout: RolloutRules::default(),
        reboot_estimate_ms: None,
        soaking: vec![],
        not_ready: vec![false, false, false, true, false, false],
        kubelets: vec![Healthy, Healthy, Healthy, Wedged, Healthy, Healthy],
    };
    let steps = vec![
        Request(3),
        Round(0),
        SyncAll(0),
        Round(2),
        Round(0),
        Round(0),
        Round(0),
        Round(0),
        AdminCordon(0),
        OptOut(0, Some("true")),
        Request(3),
        Round(0),
    ];
    let mut model = Model::new(&setup);
    for step in &steps {
        model.apply(step);
    }
    model.settle();
}
