//! The model with several `RebootPool`s at once, as one controller runs them: per replica one
//! node cache with an index per pool, and one round per pool built from `pools::plan` (its
//! budget, its ledger `node-reboot-pool-<name>`, its selector without the nodes the other
//! pools select). An administrator edits a pool's budget, moves nodes between pools, labels a
//! node into two pools at once, and deletes a pool mid-rollout; each replica starts its pools
//! again from the new plan when its watch of the objects shows the change. The checks judge
//! by the model's own reading of the pools (which selects what, with which budget), not by
//! the plan's.

use super::{Model, PoolParts, Replica, Setup, server::PoolTruth, server::RunningPool};
use crate::{args::Args, pools};
use clap::Parser;
use common::pool::RebootPool;
use controller_core::decide::SetAside;
use k8s_openapi::apimachinery::pkg::{apis::meta::v1::Time, util::intstr::IntOrString};
use serde_json::{Value, json};

/// The pools a case may run: `a` selects `pool=a`, `b` `pool in (b)`, `c` `tier=gpu`.
const NAMES: [&str; 3] = ["a", "b", "c"];

/// The controller's flags: no flags' pool, the model's namespace.
fn base_args() -> Args {
    Args::parse_from([
        "reboot-controller",
        "--default-pool=false",
        "--namespace=ns",
    ])
}

/// What pool `p` selects, as the model reads it.
fn truth(p: usize, budget: u32) -> PoolTruth {
    let (key, value) = match p {
        0 => ("pool", "a"),
        1 => ("pool", "b"),
        _ => ("tier", "gpu"),
    };
    PoolTruth {
        name: NAMES[p].to_owned(),
        key,
        value,
        budget,
        deleted: false,
        invalid: false,
        paused: false,
    }
}

/// Pool `p`'s spec: the model's settings, with its own selector and budget.
fn spec(p: usize, budget: u32, setup: &Setup) -> Value {
    let selector = match p {
        0 => json!({"matchLabels": {"pool": "a"}}),
        1 => json!({"matchExpressions": [{"key": "pool", "operator": "In", "values": ["b"]}]}),
        _ => json!({"matchLabels": {"tier": "gpu"}}),
    };
    json!({
        "nodeSelector": selector,
        "maxUnavailable": budget,
        "windows": ["Mon-Sun 00:00-12:00 UTC"],
        "finishAfterWindow": setup.finish_after_window,
        "minReadySeconds": setup.min_ready_ms / 1000,
        "rebootTimeout": "30s",
        "drain": {"enabled": setup.drain_enabled},
        "drainAttempts": setup.set_aside.attempts,
        "keepSetAsideCordoned": setup.set_aside.keep_cordoned,
        "marks": {
            "preRebootNodeLabels": {"rebooting": "true"},
            "postRebootNodeLabels": {"rebooted": "true"},
            "preferNoScheduleTaint": "reboot-pending",
        },
    })
}

fn object(p: usize, budget: u32, setup: &Setup) -> RebootPool {
    let spec = serde_json::from_value(spec(p, budget, setup)).expect("a RebootPool spec");
    let mut pool = RebootPool::new(NAMES[p], spec);
    pool.metadata.generation = Some(1);
    pool.metadata.finalizers = Some(vec![common::pool::FINALIZER.to_owned()]);
    pool
}

impl Model {
    /// A model running one `RebootPool` per budget (two or three): pool `a` has n0 to n2, `b`
    /// n3 and n4, `c` n5. Settings other than the budgets are the setup's (the set-aside rules
    /// in every pool's spec, so that a pool deleted may hold cordons it kept); no soak at the
    /// start, no zone budget, no delays.
    pub(super) fn with_pools(setup: &Setup, budgets: &[u32]) -> Self {
        let setup = Setup {
            soaking: Vec::new(),
            zone_budget: None,
            concurrency: None,
            give_up_after_ms: None,
            drain_delay_ms: 0,
            reboot_delay_ms: 0,
            // The pools' windows are their specs'.
            schedules: false,
            // Each pool sets aside as the setup says (a stall counts each pool's own nodes,
            // which the model's single count does not follow: none).
            set_aside: SetAside {
                most: None,
                ..setup.set_aside
            },
            rollout: controller_core::rollout::RolloutRules::default(),
            reboot_estimate_ms: None,
            ..setup.clone()
        };
        let replicas = setup.replicas;
        let mut model = Self::new(&Setup {
            replicas: 0,
            ..setup.clone()
        });
        model.setup = setup.clone();
        {
            let mut s = model.s();
            // No flags' pool: its ledger is not there.
            s.lease = None;
            s.set_pools((0..budgets.len()).map(|p| truth(p, budgets[p])).collect());
        }
        model.objects = (0..budgets.len())
            .map(|p| object(p, budgets[p], &setup))
            .collect();
        for k in 0..replicas {
            let replica = model.pool_replica(k);
            model.replicas.push(replica);
        }
        model
    }

    /// Replica `k` with its pools started from the objects as they are now: a new node cache
    /// (listed afresh) and one round per pool of the plan, with the ledgers read again.
    fn pool_replica(&self, k: usize) -> Replica {
        let plan = pools::plan(&base_args(), &self.objects);
        let invalid: Vec<String> = plan.invalid.iter().map(|i| i.name.clone()).collect();
        let broken: Vec<String> = (self.s().pools.iter())
            .filter(|p| p.invalid)
            .map(|p| p.name.clone())
            .collect();
        assert_eq!(invalid, broken, "the pools the plan finds invalid");
        let indexings = plan.pools.iter().map(|p| p.args.indexing()).collect();
        let (store, indexes, feed) = self.node_feed(k, indexings);
        let mut replica = self.bare_replica(k, store, feed);
        for (config, index) in plan.pools.iter().zip(indexes) {
            let parts = PoolParts {
                ledger: config.args.ledger_name.clone(),
                index,
                indexing: config.args.indexing(),
                budgets: config.args.budgets(),
                paused: config.paused,
                retiring: config.deleting,
            };
            let pool = self.pool_shell(&replica, &self.setup, parts, Some(&config.args));
            replica.pools.push(pool);
        }
        replica.print = pools::fingerprint(&self.objects);
        // What the checks hold the replica to: the pools as the model reads them.
        let mut s = self.s();
        let running = s
            .pools
            .iter()
            .map(|p| RunningPool {
                ledger: p.ledger(),
                budget: common::MaxUnavailable::Count(p.budget),
                paused: p.paused,
                deleted: p.deleted,
                invalid: p.invalid,
            })
            .collect();
        s.running[k] = running;
        replica
    }

    /// Replica `k`'s watch of the `RebootPool`s delivers them: a change of a spec, or a
    /// deletion, starts its pools again from the new plan.
    pub(super) fn sync_pools(&mut self, k: usize) {
        if self.objects.is_empty() || self.replicas[k].print == pools::fingerprint(&self.objects) {
            return;
        }
        let replica = self.pool_replica(k);
        self.replicas[k] = replica;
    }

    /// The administrator sets pool `p`'s `maxUnavailable`.
    pub(super) fn set_pool_budget(&mut self, p: usize, budget: u32) {
        let Some(object) = self.objects.get_mut(p) else {
            return;
        };
        object.spec.max_unavailable = Some(IntOrString::Int(i32::try_from(budget).unwrap_or(1)));
        object.metadata.generation = object.metadata.generation.map(|g| g + 1);
        self.s().pools[p].budget = budget;
    }

    /// The administrator mistypes the time zone of pool `p`'s window (`broken`), a value the
    /// API server accepts, or puts it right again.
    pub(super) fn break_pool(&mut self, p: usize, broken: bool) {
        let Some(object) = self.objects.get_mut(p) else {
            return;
        };
        let zone = if broken { "UTC/Typo" } else { "UTC" };
        object.spec.windows = vec![format!("Mon-Sun 00:00-12:00 {zone}")];
        object.metadata.generation = object.metadata.generation.map(|g| g + 1);
        self.s().pools[p].invalid = broken;
    }

    /// The administrator sets or clears pool `p`'s `spec.paused`.
    pub(super) fn pause_pool(&mut self, p: usize, paused: bool) {
        let Some(object) = self.objects.get_mut(p) else {
            return;
        };
        object.spec.paused = paused;
        object.metadata.generation = object.metadata.generation.map(|g| g + 1);
        self.s().pools[p].paused = paused;
    }

    /// Every pool put right and resumed: what an administrator does before a rollout can end.
    pub(super) fn fix_pools(&mut self) {
        for p in 0..self.objects.len() {
            if self.s().pools[p].invalid {
                self.break_pool(p, false);
            }
            if self.s().pools[p].paused {
                self.pause_pool(p, false);
            }
        }
    }

    /// The administrator deletes pool `p`: its finalizer keeps it while its nodes finish.
    pub(super) fn delete_pool(&mut self, p: usize) {
        let wall = self.s().wall;
        let Some(object) = self.objects.get_mut(p) else {
            return;
        };
        object.metadata.deletion_timestamp.get_or_insert(Time(wall));
        self.s().pools[p].deleted = true;
    }

    /// Node `i` labelled `key=value` (`None`: the label removed).
    pub(super) fn label(&self, i: usize, key: &str, value: Option<&str>) {
        let mut s = self.s();
        let Some(labels) = s
            .node_mut(i)
            .and_then(|n| n["metadata"]["labels"].as_object_mut())
        else {
            return;
        };
        match value {
            Some(value) => labels.insert(key.to_owned(), value.into()),
            None => labels.remove(key),
        };
        s.bump(i);
    }

    /// Whether every pool's ledger is there and empty.
    pub(super) fn pool_ledgers_empty(&self) -> bool {
        let s = self.s();
        s.pools.iter().all(|p| {
            s.ledgers.contains_key(&p.ledger()) && s.slots_of_ledger(&p.ledger()).is_empty()
        })
    }

    /// A deleted pool leaves nothing of the operator's on the nodes: no slot, no grant of its
    /// ledger, and on a node it rebooted no cordon, label or taint of ours; no waiting taint it
    /// put on a node anywhere.
    pub(super) fn deleted_pools_left_nothing(&self) {
        let s = self.s();
        let keys = super::server::keys();
        for pool in s.pools.iter().filter(|p| p.deleted) {
            let ledger = pool.ledger();
            let id = common::ledger::ledger_id("ns", &ledger);
            assert!(
                s.slots_of_ledger(&ledger).is_empty(),
                "deleted pool {} keeps slots: {:?}",
                pool.name,
                s.slots_of_ledger(&ledger)
            );
            for (i, node) in s.nodes.iter().enumerate() {
                let Some(node) = node else { continue };
                let state = super::server::facts(node).protocol(&keys);
                let ours =
                    |g: Option<&str>| g.and_then(common::ledger::ledger_of_grant) == Some(&*id);
                assert!(
                    !ours(state.grant.as_deref()),
                    "n{i} carries a grant of the deleted pool {}",
                    pool.name
                );
                let left = state.cordoned_by_operator
                    || state.labelled.is_some()
                    || state.tainted.is_some();
                assert!(
                    !(ours(state.last_grant.as_deref()) && left),
                    "deleted pool {} left its marks on n{i}: {node:#}",
                    pool.name
                );
                let tainted_by = state
                    .tainted
                    .as_deref()
                    .and_then(|record| common::marks::recorded_taint(record).1);
                assert!(
                    tainted_by != Some(id.as_str()),
                    "deleted pool {} left its waiting taint on n{i}: {node:#}",
                    pool.name
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{
        Model, scripted,
        server::annotation,
        world::{self, Step::*},
    };
    use proptest::prelude::*;

    fn granted(model: &Model, i: usize) -> Option<String> {
        annotation(model.s().node(i).expect("a node"), "reboot-grant")
    }

    fn ledger_of(model: &Model, i: usize) -> Option<String> {
        granted(model, i).and_then(|g| common::ledger::ledger_of_grant(&g).map(str::to_owned))
    }

    proptest! {
        // 40 cases by default; `PROPTEST_CASES=2000` for a longer hunt.
        #![proptest_config(ProptestConfig {
            cases: std::env::var("PROPTEST_CASES").ok().and_then(|c| c.parse().ok()).unwrap_or(40),
            ..ProptestConfig::default()
        })]

        #[test]
        fn several_pools_of_the_real_round_keep_each_budget_and_their_nodes_apart(
            setup in world::setup(),
            budgets in proptest::collection::vec(1..3u32, 2..=3),
            steps in proptest::collection::vec(world::pool_step(), 0..150),
        ) {
            let mut model = Model::with_pools(&setup, &budgets);
            for step in &steps {
                model.apply(step);
            }
            model.settle();
            model.deleted_pools_left_nothing();
        }
    }

    /// A pool's budget lowered from 2 to 1 while it reboots two nodes: the two finish, and the
    /// third is granted only once the pool is under the new budget.
    #[test]
    fn a_budget_lowered_mid_rollout_grants_nothing_until_the_pool_is_under_it() {
        let mut model = Model::with_pools(&scripted(2, 2, true), &[2, 1]);
        for step in [Request(0), Request(1), SyncAll(0), Round(0), Round(0)] {
            model.apply(&step);
        }
        assert!(
            granted(&model, 0).is_some() && granted(&model, 1).is_some(),
            "n0 and n1 granted under the budget of 2: {:?}",
            model.s().ledgers
        );
        model.apply(&PoolBudget { pool: 0, budget: 1 });
        model.apply(&SyncPools(0));
        model.apply(&SyncPools(1));
        model.apply(&Request(2));
        for _ in 0..4 {
            for k in 0..2 {
                model.apply(&SyncAll(k));
                model.apply(&Round(k));
            }
        }
        assert!(
            granted(&model, 2).is_none(),
            "n2 granted over the budget of 1"
        );
        model.settle();
        assert!(
            model.s().boots[..3].iter().all(|&b| b == 1),
            "{:?}",
            model.s().boots
        );
    }

    /// A node relabelled from pool a into pool b mid-reboot: a, whose ledger granted it,
    /// finishes it; b counts it (its budget of 1 is full) and never drives it.
    #[test]
    fn a_node_moved_to_another_pool_mid_reboot_is_finished_by_the_pool_that_granted_it() {
        let mut model = Model::with_pools(&scripted(2, 1, true), &[1, 1]);
        for step in [Request(0), SyncAll(0), Round(0), Round(0)] {
            model.apply(&step);
        }
        let a = ledger_of(&model, 0).expect("n0 granted");
        model.apply(&MovePool { node: 0, pool: 1 });
        model.apply(&Request(3));
        for _ in 0..3 {
            for k in 0..2 {
                model.apply(&SyncAll(k));
                model.apply(&Round(k));
            }
            assert_eq!(
                ledger_of(&model, 0).as_deref(),
                Some(&*a),
                "n0 changed hands"
            );
            assert!(granted(&model, 3).is_none(), "b granted n3 over its budget");
        }
        model.settle();
        assert_eq!(model.s().boots[0], 1);
        assert_eq!(model.s().boots[3], 1);
    }

    /// A pool deleted while it reboots a node and has another waiting: the one under way
    /// finishes, the waiting one is never granted, and the pool leaves nothing behind.
    #[test]
    fn a_pool_deleted_mid_rollout_finishes_its_reboots_and_leaves_nothing() {
        let mut model = Model::with_pools(&scripted(2, 1, true), &[1, 1]);
        for step in [Request(0), Request(1), SyncAll(0), Round(0), Round(0)] {
            model.apply(&step);
        }
        assert!(granted(&model, 0).is_some(), "n0 granted");
        model.apply(&DeletePool(0));
        model.apply(&SyncPools(0));
        model.settle();
        model.deleted_pools_left_nothing();
        assert_eq!(model.s().boots[0], 1, "the reboot under way finished");
        assert_eq!(model.s().boots[1], 0, "the deleted pool granted n1");
    }

    /// Pool a's window given a mistyped time zone while it reboots n0 with n1 waiting: n0
    /// finishes (its uncordon and completion too), n1 is not granted while the spec is
    /// invalid, and is once it is put right. Before, the invalid pool ran nothing and n0 kept
    /// its grant and cordon for ever.
    #[test]
    fn a_pool_made_invalid_mid_rollout_finishes_its_node_and_grants_nothing_new() {
        let mut model = Model::with_pools(&scripted(2, 1, true), &[1, 1]);
        for step in [Request(0), Request(1), SyncAll(0), Round(0), Round(0)] {
            model.apply(&step);
        }
        assert!(granted(&model, 0).is_some(), "n0 granted");
        model.apply(&BreakPool {
            pool: 0,
            broken: true,
        });
        for _ in 0..40 {
            model.tick(10 * super::super::STEP_MS);
            for k in 0..2 {
                model.apply(&SyncPools(k));
                model.apply(&SyncAll(k));
                model.apply(&Round(k));
            }
            for k in 0..2 {
                model.apply(&DrainEnds {
                    replica: k,
                    node: 0,
                    ok: true,
                });
            }
            model.apply(&Agent(0));
            model.apply(&Kubelet(0));
        }
        let n0 = model.s().node(0).cloned().expect("n0");
        assert_eq!(
            model.s().boots[0],
            1,
            "n0's reboot under way finished: {n0:#}"
        );
        assert!(granted(&model, 0).is_none(), "n0 keeps its grant: {n0:#}");
        assert_eq!(
            n0["spec"]["unschedulable"],
            serde_json::json!(false),
            "{n0:#}"
        );
        assert!(granted(&model, 1).is_none(), "the invalid pool granted n1");
        model.settle();
        assert_eq!(
            model.s().boots[1],
            1,
            "n1 rebooted once the pool was put right"
        );
    }

    /// Pool b grants n3 (its slot taken, n3 not yet claimed), then its window's time zone is
    /// mistyped and the window closes: the invalid pool does not claim n3 on a guess of its
    /// windows, even once the model's window opens again; once the spec is put right, n3
    /// reboots. Before, the invalid pool read its windows as "always open" and cordoned n3 and
    /// set reboot-now outside the window.
    #[test]
    fn a_grant_an_invalid_pool_holds_unclaimed_waits_until_the_spec_is_fixed() {
        let mut model = Model::with_pools(&scripted(1, 1, false), &[1, 1]);
        let steps = [
            Request(3),
            SyncNode {
                replica: 0,
                node: 3,
            },
            BreakPool {
                pool: 1,
                broken: true,
            },
            Round(0),
        ];
        for step in steps {
            model.apply(&step);
        }
        assert!(
            model.s().ledgers["node-reboot-pool-b"]
                .to_string()
                .contains("n3"),
            "pool b took n3's slot before it read its new spec"
        );
        for step in [
            Window(false),
            SyncPools(0),
            Round(0),
            Window(true),
            Round(0),
        ] {
            model.apply(&step);
        }
        assert!(granted(&model, 3).is_none(), "the invalid pool claimed n3");
        model.settle();
        assert_eq!(model.s().boots[3], 1, "n3 rebooted once the pool was fixed");
    }

    /// Pool a's `spec.paused` set while a replica still runs it unpaused (its watch has not
    /// delivered the edit): the replica's round takes n0's slot on its stale plan, yet claims
    /// nothing, since it reads the pause from the API server before it cordons. Once resumed,
    /// n0 reboots. Before, the pause was read once per run of the pools and n0 was cordoned.
    #[test]
    fn a_pause_that_races_a_grant_holds_the_claim() {
        let mut model = Model::with_pools(&scripted(1, 1, false), &[1, 1]);
        for step in [Request(0), SyncAll(0)] {
            model.apply(&step);
        }
        model.apply(&PausePool {
            pool: 0,
            paused: true,
        });
        for step in [Round(0), Round(0), SyncAll(0), Round(0)] {
            model.apply(&step);
        }
        assert!(granted(&model, 0).is_none(), "n0 claimed under a pause");
        model.settle();
        assert_eq!(model.s().boots[0], 1, "n0 rebooted once resumed");
    }

    /// Pool a keeps n0 cordoned after its drain failed (`drainAttempts: 1`,
    /// `keepSetAsideCordoned`), then is deleted: its last rounds take its cordon off n0, whose
    /// request and record of failed drains stay. Before, n0 stayed cordoned for good.
    #[test]
    fn a_pool_deleted_with_a_node_it_kept_cordoned_uncordons_it() {
        let mut model = Model::with_pools(&scripted(2, 1, true), &[1, 1]);
        model.objects[0].spec.drain_attempts = Some(1);
        model.objects[0].spec.keep_set_aside_cordoned = Some(true);
        model.objects[0].metadata.generation = Some(2);
        model.apply(&SyncPools(0));
        model.apply(&SyncPools(1));
        for step in [Request(0), SyncAll(0), Round(0), Round(0), Round(0)] {
            model.apply(&step);
        }
        model.apply(&DrainEnds {
            replica: 0,
            node: 0,
            ok: false,
        });
        for step in [SyncAll(0), Round(0), SyncAll(0), Round(0)] {
            model.apply(&step);
        }
        let kept = |model: &Model| {
            let n0 = model.s().node(0).cloned().expect("n0");
            (
                n0["spec"]["unschedulable"] == serde_json::json!(true),
                annotation(&n0, "reboot-cordoned").is_some(),
            )
        };
        assert_eq!(
            kept(&model),
            (true, true),
            "n0 set aside, kept cordoned: {:#}",
            model.s().node(0).cloned().expect("n0")
        );
        model.apply(&DeletePool(0));
        for _ in 0..3 {
            for k in 0..2 {
                model.apply(&SyncPools(k));
                model.apply(&SyncAll(k));
                model.apply(&Round(k));
            }
        }
        assert_eq!(
            kept(&model),
            (false, false),
            "the deleted pool's cordon stayed on n0"
        );
        let n0 = model.s().node(0).cloned().expect("n0");
        assert!(annotation(&n0, "reboot-needed").is_some(), "{n0:#}");
        assert!(annotation(&n0, "reboot-drain-failures").is_some(), "{n0:#}");
    }

    /// The sandbox's report: n0 is in pool a (budget 1) and also labelled into pool c, and an
    /// administrator cordons it; a reboot asked for n1, a's own node, waits until n0 is
    /// uncordoned. Before, n0 counted against neither pool and n1 was granted at once.
    #[test]
    fn a_cordoned_node_two_pools_select_holds_both_budgets() {
        let mut model = Model::with_pools(&scripted(2, 1, true), &[1, 1, 1]);
        for step in [
            Tier { node: 0, gpu: true },
            AdminCordon(0),
            Request(1),
            Request(5),
        ] {
            model.apply(&step);
        }
        for _ in 0..4 {
            for k in 0..2 {
                model.apply(&SyncAll(k));
                model.apply(&Round(k));
            }
        }
        assert!(
            granted(&model, 1).is_none(),
            "n1 granted while n0, in a and c, is cordoned"
        );
        assert!(
            granted(&model, 5).is_none(),
            "n5 granted while n0, in a and c, is cordoned"
        );
        model.settle();
        assert_eq!(model.s().boots[1], 1, "n1 rebooted once n0 was uncordoned");
        assert_eq!(model.s().boots[5], 1, "n5 rebooted once n0 was uncordoned");
        assert_eq!(model.s().boots[0], 0, "n0, in a and c, was rebooted");
    }

    /// A node two pools select (pool=a and tier=gpu) is granted by neither; c's own node is.
    #[test]
    fn a_node_two_pools_select_is_granted_by_neither() {
        let mut model = Model::with_pools(&scripted(2, 1, true), &[1, 1, 1]);
        for step in [Tier { node: 0, gpu: true }, Request(0), Request(5)] {
            model.apply(&step);
        }
        model.settle();
        assert_eq!(model.s().boots[0], 0, "n0, in a and c, was rebooted");
        assert_eq!(model.s().boots[5], 1, "n5, in c alone, was not rebooted");
    }
}
