//! The steps of the model: what replicas, watches, agents, kubelets, the scheduler and the
//! administrator do, drawn at random; and the settling that checks no request is lost.

use super::{
    Model, NODES, POOL, STEP_MS, Setup, ZONE, checks,
    server::{Disturbance, Kubelet, Workload, annotation, facts, keys},
};
use common::{MaxUnavailable, Phase, Request, Transition};
use controller_core::{decide::SetAside, rollout::RolloutRules};
use proptest::prelude::*;
use serde_json::json;

#[derive(Debug, Clone)]
pub enum Step {
    Round(usize),
    /// A round during which the window closes, a gate shuts or a blocking pod starts, between
    /// its decision and its write.
    DisturbedRound(usize, Disturbance),
    SyncNode {
        replica: usize,
        node: usize,
    },
    SyncAll(usize),
    SyncLedger(usize),
    DrainEnds {
        replica: usize,
        node: usize,
        ok: bool,
    },
    Agent(usize),
    /// The node's agent stops proving its boots (`true`: its pod never starts again after a
    /// reboot), or proves them again.
    AgentSilent(usize, bool),
    Kubelet(usize),
    Request(usize),
    /// The administrator types a value of `reboot-needed` that is not a request.
    TypeRequest(usize, &'static str),
    Cancel(usize),
    /// The administrator gives the node up (`kubectl reboot abandon`), or types a value that
    /// reads as no.
    Abandon(usize, &'static str),
    AdminCordon(usize),
    AdminTakesCordon(usize),
    Flap(usize),
    /// The node's kubelet starts misbehaving (or behaves again).
    KubeletTurns(usize, Kubelet),
    /// The administrator types a pause value (`None`: removes the annotation).
    Pause(Option<&'static str>),
    Window(bool),
    Gate(bool),
    Block {
        node: usize,
        running: bool,
    },
    /// The node is relabelled: into or out of the pool, into another zone or none.
    Relabel {
        node: usize,
        in_pool: bool,
        zone: Option<u8>,
    },
    /// The administrator types an opt-out value (`None`: removes the label).
    OptOut(usize, Option<&'static str>),
    /// The administrator labels the node with a key the operator sets around a reboot
    /// (`mark`: a pre-reboot label's or the post-reboot label's): at the operator's value, at
    /// another (`None`: removes it).
    AdminLabel {
        node: usize,
        mark: usize,
        value: Option<&'static str>,
    },
    DeleteNode(usize),
    RecreateNode(usize),
    DeleteLedger,
    DamageLedger,
    /// With `RebootPool`s: replica `k`'s watch of them delivers their changes.
    SyncPools(usize),
    /// The administrator sets a pool's `maxUnavailable`.
    PoolBudget {
        pool: usize,
        budget: u32,
    },
    /// The node's `pool` label set to a pool's (`pool` 2: `c`, which no pool selects by it).
    MovePool {
        node: usize,
        pool: usize,
    },
    /// The node labelled `tier=gpu` (pool c's selector) or `tier=web`.
    Tier {
        node: usize,
        gpu: bool,
    },
    DeletePool(usize),
    /// A pool's window given a mistyped time zone (`broken`), or put right.
    BreakPool {
        pool: usize,
        broken: bool,
    },
    /// A pool's `spec.paused` set or cleared on the API server: the replicas see it at once
    /// in their reads just before a write, in their plans only once they sync their pools.
    PausePool {
        pool: usize,
        paused: bool,
    },
}

fn kubelet() -> impl Strategy<Value = Kubelet> {
    prop_oneof![
        4 => Just(Kubelet::Healthy),
        1 => Just(Kubelet::BackNotReady),
        1 => Just(Kubelet::NeverBack),
        1 => Just(Kubelet::Wedged),
    ]
}

fn disturbance() -> impl Strategy<Value = Disturbance> {
    prop_oneof![
        Just(Disturbance::CloseWindow),
        Just(Disturbance::FireGate),
        (0..NODES).prop_map(Disturbance::Block),
    ]
}

const PAUSES: [Option<&str>; 6] = [
    Some("true"),
    Some("True"),
    Some("yes"),
    Some("1"),
    Some("false"),
    None,
];

/// The label keys the operator sets around a reboot (`super::marks`).
const MARKS: [&str; 2] = ["rebooting", "rebooted"];

/// What an administrator labels them with: the operator's own value, another, or nothing.
const ADMIN_VALUES: [Option<&str>; 4] = [Some("true"), Some(""), Some("admin"), None];

/// `reboot-needed` typed by hand, and not a request.
const NOT_REQUESTS: [&str; 2] = ["yes", "True"];

/// `reboot-disabled` as typed by hand: only `false` (any case) and no label let a node reboot.
const OPT_OUTS: [Option<&str>; 8] = [
    Some("true"),
    Some(""),
    Some("True"),
    Some("yes"),
    Some("1"),
    Some("false"),
    Some("FALSE"),
    None,
];

/// `kubectl reboot abandon`'s value, or one typed by hand that reads as no.
const ABANDONS: [&str; 2] = [ABANDON, "no"];

pub fn step() -> impl Strategy<Value = Step> {
    let r = 0..3usize;
    let n = 0..NODES;
    prop_oneof![
        10 => r.clone().prop_map(Step::Round),
        1 => (r.clone(), disturbance()).prop_map(|(k, d)| Step::DisturbedRound(k, d)),
        5 => (r.clone(), n.clone()).prop_map(|(replica, node)| Step::SyncNode { replica, node }),
        2 => r.clone().prop_map(Step::SyncAll),
        2 => r.clone().prop_map(Step::SyncLedger),
        3 => (r, n.clone(), proptest::bool::weighted(0.85))
            .prop_map(|(replica, node, ok)| Step::DrainEnds { replica, node, ok }),
        4 => n.clone().prop_map(Step::Agent),
        1 => (n.clone(), proptest::bool::weighted(0.5))
            .prop_map(|(i, silent)| Step::AgentSilent(i, silent)),
        3 => n.clone().prop_map(Step::Kubelet),
        4 => n.clone().prop_map(Step::Request),
        1 => (n.clone(), 0..NOT_REQUESTS.len())
            .prop_map(|(i, r)| Step::TypeRequest(i, NOT_REQUESTS[r])),
        1 => n.clone().prop_map(Step::Cancel),
        1 => (n.clone(), 0..ABANDONS.len()).prop_map(|(i, a)| Step::Abandon(i, ABANDONS[a])),
        1 => n.clone().prop_map(Step::AdminCordon),
        1 => n.clone().prop_map(Step::AdminTakesCordon),
        1 => n.clone().prop_map(Step::Flap),
        1 => (n.clone(), kubelet()).prop_map(|(i, k)| Step::KubeletTurns(i, k)),
        1 => (0..PAUSES.len()).prop_map(|p| Step::Pause(PAUSES[p])),
        1 => proptest::bool::weighted(0.6).prop_map(Step::Window),
        1 => proptest::bool::weighted(0.3).prop_map(Step::Gate),
        1 => (n.clone(), proptest::bool::weighted(0.5))
            .prop_map(|(node, running)| Step::Block { node, running }),
        1 => (n.clone(), proptest::bool::weighted(0.7), proptest::option::of(0..4u8))
            .prop_map(|(node, in_pool, zone)| Step::Relabel { node, in_pool, zone }),
        1 => (n.clone(), 0..OPT_OUTS.len()).prop_map(|(i, o)| Step::OptOut(i, OPT_OUTS[o])),
        1 => (n.clone(), 0..MARKS.len(), 0..ADMIN_VALUES.len())
            .prop_map(|(node, mark, v)| Step::AdminLabel { node, mark, value: ADMIN_VALUES[v] }),
        1 => n.clone().prop_map(Step::DeleteNode),
        1 => n.prop_map(Step::RecreateNode),
        1 => Just(Step::DeleteLedger),
        1 => Just(Step::DamageLedger),
    ]
}

/// The steps of a model with `RebootPool`s: the world's, and the administrator's edits of
/// the pools and of the labels that select their nodes.
pub fn pool_step() -> impl Strategy<Value = Step> {
    let r = 0..3usize;
    let n = 0..NODES;
    prop_oneof![
        20 => step(),
        2 => r.prop_map(Step::SyncPools),
        1 => (0..3usize, 1..3u32).prop_map(|(pool, budget)| Step::PoolBudget { pool, budget }),
        2 => (n.clone(), 0..3usize).prop_map(|(node, pool)| Step::MovePool { node, pool }),
        1 => (n, proptest::bool::weighted(0.5)).prop_map(|(node, gpu)| Step::Tier { node, gpu }),
        1 => (0..3usize).prop_map(Step::DeletePool),
        1 => (0..3usize, proptest::bool::ANY)
            .prop_map(|(pool, broken)| Step::BreakPool { pool, broken }),
        1 => (0..3usize, proptest::bool::ANY)
            .prop_map(|(pool, paused)| Step::PausePool { pool, paused }),
    ]
}

/// `--drain-delay` or `--reboot-delay`: mostly a few steps (a step is a second), sometimes
/// none (the default) or longer than most cases run.
fn delay() -> impl Strategy<Value = u64> {
    prop_oneof![
        1 => Just(0u64),
        3 => Just(4_000u64),
        1 => Just(30_000u64),
    ]
}

pub fn setup() -> impl Strategy<Value = Setup> {
    let budget = prop_oneof![
        3 => (1..3u32).prop_map(MaxUnavailable::Count),
        1 => Just(MaxUnavailable::Percent(34)),
        1 => Just(MaxUnavailable::Percent(50)),
    ];
    let zone_budget = proptest::option::of(prop_oneof![
        Just(MaxUnavailable::Count(1)),
        Just(MaxUnavailable::Percent(50)),
        Just(MaxUnavailable::Percent(100)),
    ]);
    // Below the budget sometimes, so that it is what holds grants back.
    let concurrency = proptest::option::weighted(
        0.3,
        prop_oneof![
            Just(MaxUnavailable::Count(1)),
            Just(MaxUnavailable::Count(2))
        ],
    );
    // A give-up past the reboot timeout (30 s here), in the reach of a case's steps.
    let give_up_after =
        proptest::option::weighted(0.3, prop_oneof![Just(30_000u64), Just(60_000u64)]);
    // A node is set aside after one or two failed drains, and the pool stalls sometimes.
    // Half of them keep the operator's cordon.
    let set_aside = (
        proptest::option::weighted(0.3, 1..=2u32),
        proptest::option::weighted(0.5, 0..=1usize),
        proptest::bool::ANY,
    )
        .prop_map(|(attempts, most, keep_cordoned)| SetAside {
            attempts,
            most: most.filter(|_| attempts.is_some()),
            keep_cordoned: keep_cordoned && attempts.is_some(),
            retiring: false,
        });
    // A canary of one or two (soaked 20 s or not), waves, a failure budget of 0 or 1: on in
    // 30 % of the cases.
    let rollout = proptest::option::weighted(
        0.3,
        (
            0..=2u32,
            prop_oneof![Just(0u64), Just(20_000u64)],
            proptest::bool::ANY,
            proptest::option::of(0..=1u32),
        ),
    )
    .prop_map(|rules| {
        rules.map_or_else(
            RolloutRules::default,
            |(canary, canary_soak, waves, most)| RolloutRules {
                canary,
                canary_soak,
                waves,
                max_failures: most.map(common::rollout::MaxFailures::Count),
                resumed_at: None,
            },
        )
    });
    (
        1..=3usize,
        budget,
        proptest::bool::weighted(0.7),
        proptest::bool::weighted(0.5),
        (zone_budget, concurrency, give_up_after),
        prop_oneof![Just(0u64), Just(25_000u64)],
        (delay(), delay(), proptest::bool::weighted(0.3), set_aside),
        (
            rollout,
            proptest::option::weighted(0.3, prop_oneof![Just(3_600_000u64), Just(10_800_000u64)]),
        ),
        proptest::collection::vec(0..NODES, 0..3),
        proptest::collection::vec(proptest::bool::weighted(0.15), NODES),
        proptest::collection::vec(kubelet(), NODES),
    )
        .prop_map(
            |(
                replicas,
                max_unavailable,
                drain_enabled,
                finish_after_window,
                (zone_budget, concurrency, give_up_after_ms),
                min_ready_ms,
                (drain_delay_ms, reboot_delay_ms, schedules, set_aside),
                (rollout, reboot_estimate_ms),
                soaking,
                not_ready,
                kubelets,
            )| Setup {
                replicas,
                max_unavailable,
                drain_enabled,
                finish_after_window,
                zone_budget,
                concurrency,
                give_up_after_ms,
                min_ready_ms,
                drain_delay_ms,
                reboot_delay_ms,
                schedules,
                set_aside,
                rollout,
                reboot_estimate_ms,
                soaking,
                not_ready,
                kubelets,
            },
        )
}

/// The value `kubectl reboot abandon` writes.
const ABANDON: &str = r#"{"by":"model","reason":"never coming back"}"#;

impl Model {
    pub(super) fn apply(&mut self, step: &Step) {
        self.tick(STEP_MS);
        let replicas = self.replicas.len();
        let r = |k: usize| k % replicas;
        match *step {
            Step::Round(k) => self.round(r(k), None),
            Step::DisturbedRound(k, d) => self.round(r(k), Some(d)),
            Step::SyncNode { replica, node } => self.sync_node(r(replica), node),
            Step::SyncAll(k) => {
                for i in 0..NODES {
                    self.sync_node(r(k), i);
                }
                self.sync_ledger(r(k));
            }
            Step::SyncLedger(k) => self.sync_ledger(r(k)),
            Step::DrainEnds { replica, node, ok } => {
                self.replicas[r(replica)].drains.end(node, ok);
                self.run_tasks();
            }
            Step::Agent(i) => self.agent(i),
            Step::AgentSilent(i, silent) => {
                let mut s = self.s();
                if silent {
                    s.agents_silent.insert(i)
                } else {
                    s.agents_silent.remove(&i)
                };
            }
            Step::Kubelet(i) => self.kubelet(i),
            Step::Request(i) => self.annotate(i, "reboot-needed", Some("true")),
            Step::TypeRequest(i, value) => self.annotate(i, "reboot-needed", Some(value)),
            Step::Cancel(i) => self.annotate(i, "reboot-needed", None),
            Step::Abandon(i, value) => self.annotate(i, "reboot-abandon", Some(value)),
            Step::AdminCordon(i) => self.admin_cordon(i),
            Step::AdminTakesCordon(i) => {
                // The documented way to keep the operator's cordon after the reboot.
                let has = self
                    .s()
                    .node(i)
                    .and_then(|n| annotation(n, "reboot-cordoned"));
                if has.is_some() {
                    self.annotate(i, "reboot-cordoned", None);
                    self.s().admin_cordoned.insert(i);
                }
            }
            Step::Flap(i) => {
                let mut s = self.s();
                let under_way = s
                    .node(i)
                    .is_some_and(|n| facts(n).protocol(&keys()).reboot_under_way());
                if !under_way && s.kubelets[i] == Kubelet::Healthy {
                    let ready = s.ready(i);
                    s.set_ready(i, !ready);
                }
            }
            Step::KubeletTurns(i, kubelet) => self.break_kubelet(i, kubelet),
            Step::Pause(value) => self.s().type_pause(value),
            Step::Window(open) => self.s().set_window(open),
            Step::Gate(closed) => self.s().set_unhealthy(closed),
            Step::Block { node, running } => self.s().set_blocked(node, running),
            Step::Relabel {
                node,
                in_pool,
                zone,
            } => self.relabel(node, in_pool, zone),
            Step::OptOut(i, value) => {
                let mut s = self.s();
                if let Some(labels) = s
                    .node_mut(i)
                    .and_then(|n| n["metadata"]["labels"].as_object_mut())
                {
                    match value {
                        Some(value) => labels.insert("reboot-disabled".into(), value.into()),
                        None => labels.remove("reboot-disabled"),
                    };
                }
                s.bump(i);
            }
            Step::AdminLabel { node, mark, value } => self.admin_label(node, MARKS[mark], value),
            Step::DeleteNode(i) => self.s().delete_node(i),
            Step::RecreateNode(i) => {
                let mut s = self.s();
                if s.node(i).is_none() {
                    s.create_node(i);
                    s.pods[i] = Workload::None;
                }
            }
            Step::DeleteLedger => self.s().delete_lease(),
            Step::DamageLedger => self.s().damage_lease(),
            Step::SyncPools(k) => self.sync_pools(r(k)),
            Step::PoolBudget { pool, budget } => self.set_pool_budget(pool, budget),
            Step::MovePool { node, pool } => self.label(node, POOL, Some(["a", "b", "c"][pool])),
            Step::Tier { node, gpu } => {
                self.label(node, "tier", Some(if gpu { "gpu" } else { "web" }));
            }
            Step::DeletePool(p) => self.delete_pool(p),
            Step::BreakPool { pool, broken } => self.break_pool(pool, broken),
            Step::PausePool { pool, paused } => self.pause_pool(pool, paused),
        }
        self.after_step();
    }

    fn annotate(&self, i: usize, key: &str, value: Option<&str>) {
        let mut s = self.s();
        let Some(annotations) = s
            .node_mut(i)
            .and_then(|n| n["metadata"]["annotations"].as_object_mut())
        else {
            return;
        };
        match value {
            Some(value) => annotations.insert(key.to_owned(), value.into()),
            None => annotations.remove(key),
        };
        s.bump(i);
    }

    fn admin_cordon(&self, i: usize) {
        let mut s = self.s();
        let Some(node) = s.node_mut(i) else { return };
        if node["spec"]["unschedulable"] != json!(true) {
            node["spec"]["unschedulable"] = true.into();
            s.admin_cordoned.insert(i);
            s.bump(i);
        }
    }

    /// The administrator sets `key` to `value` on node `i`, or removes it. The label is theirs
    /// from then on, unless it is what the operator's record says it set there (by value, the
    /// same label as the operator's).
    fn admin_label(&self, i: usize, key: &str, value: Option<&str>) {
        let mut s = self.s();
        let Some(node) = s.node_mut(i) else { return };
        let ours = annotation(node, "reboot-labelled").is_some_and(|record| {
            common::marks::recorded(&record)
                .get(key)
                .map(String::as_str)
                == value
        });
        let labels = &mut node["metadata"]["labels"];
        if labels[key].as_str() == value {
            return;
        }
        match value {
            Some(value) => labels[key] = value.into(),
            None => {
                labels.as_object_mut().map(|l| l.remove(key));
            }
        }
        match value.filter(|_| !ours) {
            Some(value) => s.admin_labels.insert((i, key.to_owned()), value.to_owned()),
            None => s.admin_labels.remove(&(i, key.to_owned())),
        };
        s.bump(i);
    }

    fn relabel(&self, i: usize, in_pool: bool, zone: Option<u8>) {
        let mut s = self.s();
        let Some(labels) = s
            .node_mut(i)
            .and_then(|n| n["metadata"]["labels"].as_object_mut())
        else {
            return;
        };
        labels.insert(POOL.into(), (if in_pool { "a" } else { "b" }).into());
        match zone {
            Some(z) if z < 3 => labels.insert(ZONE.into(), format!("z{z}").into()),
            _ => labels.remove(ZONE),
        };
        s.bump(i);
    }

    fn break_kubelet(&self, i: usize, kubelet: Kubelet) {
        let mut s = self.s();
        s.kubelets[i] = kubelet;
        match kubelet {
            Kubelet::Wedged => s.set_ready(i, false),
            Kubelet::Healthy if !s.down.contains(&i) => s.set_ready(i, true),
            _ => {}
        }
    }

    /// The agent of node `i`: on `reboot-now` it records the boot and the machine reboots;
    /// after boot it proves the reboot by the new boot id, possibly before the kubelet has
    /// reported that boot, possibly after the controller completed it from the kubelet's
    /// report (then it finds nothing to do), or never (a silent agent). A machine that does not
    /// come back runs no agent.
    fn agent(&self, i: usize) {
        let keys = keys();
        let t = Transition::new(&keys);
        let mut s = self.s();
        let Some(node) = s.node(i).cloned() else {
            return;
        };
        let f = facts(&node);
        let running = format!("n{i}-boot-{}", s.boots[i]);
        let agent_patch = |s: &mut super::server::Server, patch: &json_patch::Patch| {
            let mut next = node.clone();
            if common::test_util::apply_patch(&mut next, patch).is_ok() {
                s.nodes[i] = Some(next);
                s.bump(i);
                true
            } else {
                false
            }
        };
        let state = f.protocol(&keys);
        match state.phase {
            // A node being given up is not rebooted (`agent::decision`).
            Phase::RebootNow if state.abandon.is_some() => {}
            Phase::RebootNow if agent_patch(&mut s, &t.begin_reboot(&f, &running)) => {
                s.boots[i] += 1;
                s.down.insert(i);
                if s.kubelets[i] == Kubelet::Wedged {
                    // A new boot cures a hung kubelet, and its pods with it.
                    s.kubelets[i] = Kubelet::Healthy;
                }
                if s.pods[i] == Workload::Terminating {
                    s.pods[i] = Workload::None;
                }
            }
            Phase::InProgress { boot_id: recorded }
                if recorded.as_deref() != Some(&running)
                    && !s.down.contains(&i)
                    && !s.agents_silent.contains(&i) =>
            {
                assert!(agent_patch(
                    &mut s,
                    &t.finish_reboot(&f, recorded.as_deref(), &running)
                ));
            }
            _ => {}
        }
    }

    /// The kubelet of node `i` reports the boot it runs, Ready (NotReady with a bad kernel);
    /// a machine that does not come back reports nothing, and the node monitor marks it
    /// NotReady.
    fn kubelet(&self, i: usize) {
        let mut s = self.s();
        if s.node(i).is_none() {
            return;
        }
        match s.kubelets[i] {
            Kubelet::NeverBack if s.down.contains(&i) => {
                if s.ready(i) {
                    s.set_ready(i, false);
                }
                return;
            }
            Kubelet::Wedged => return,
            _ => {}
        }
        s.down.remove(&i);
        let running = format!("n{i}-boot-{}", s.boots[i]);
        let ready = s.kubelets[i] != Kubelet::BackNotReady;
        let node = s.node_mut(i).expect("checked above");
        if node["status"]["nodeInfo"]["bootID"] != json!(running)
            || (facts(node).readiness == common::Readiness::Ready) != ready
        {
            node["status"]["nodeInfo"]["bootID"] = running.into();
            node["status"]["conditions"][0]["status"] =
                (if ready { "True" } else { "False" }).into();
            s.bump(i);
        }
    }

    /// What the world outside the operator leaves after each step: the scheduler puts a
    /// workload pod on every schedulable Ready node; the invariants of every step hold.
    fn after_step(&self) {
        let mut s = self.s();
        for i in 0..NODES {
            let schedulable = s.node(i).is_some_and(|n| !facts(n).unschedulable);
            if schedulable && s.ready(i) && s.pods[i] == Workload::None {
                s.pods[i] = Workload::Running;
            }
        }
        checks::every_step(&s);
    }

    /// No request, no slot, nothing in the protocol, no waiting taint on a node that waits
    /// for nothing: nothing more can happen.
    fn quiet(&self) -> bool {
        let ledgers_empty = if self.objects.is_empty() {
            let s = self.s();
            s.slots().is_empty() && s.lease.is_some()
        } else {
            self.pool_ledgers_empty()
        };
        let s = self.s();
        ledgers_empty
            && (0..NODES).all(|i| {
                s.node(i).is_none_or(|n| {
                    let state = facts(n).protocol(&keys());
                    (state.request != Request::Needed || self.waits_for_good(&s, i))
                        && state.phase == Phase::Idle
                        && state.grant.is_none()
                        && state.abandon.is_none()
                        && !state.cordoned_by_operator
                        && (state.tainted.is_none() || waits_here(&s, i))
                })
            })
    }

    /// A request that is never granted, rightly: out of the pool, opted out, or without a
    /// zone label while zone budgets are on.
    fn waits_for_good(&self, s: &super::server::Server, i: usize) -> bool {
        let set_aside = |n: &serde_json::Value| {
            let count = annotation(n, common::keys::REBOOT_DRAIN_FAILURES);
            common::drain_failures::DrainFailures::sets_aside(
                count.as_deref(),
                s.set_aside.attempts,
            )
        };
        // More set aside than --max-blocked-nodes: the pool grants nothing until an
        // administrator acts.
        let aside = (0..NODES)
            .filter(|&j| s.in_pool(j) && s.node(j).is_some_and(set_aside))
            .count();
        !s.in_pool(i)
            || s.node(i).is_some_and(checks::opted_out)
            || s.node(i).is_some_and(set_aside)
            || s.set_aside.stalls(aside)
            || (s.zone_budget.is_some() && s.zone(i).is_none())
    }

    /// Disturbances stop (pause lifted, window open, gates open, kubelets fixed, cordons
    /// lifted, watches caught up, drains finish): every standing request must end in exactly
    /// one proven reboot, and nothing may be left in the protocol.
    pub(super) fn settle(&mut self) {
        self.fix_pools();
        for k in 0..self.replicas.len() {
            self.sync_pools(k);
        }
        self.apply(&Step::Pause(None));
        // A blackout may follow the window's opening: step until open.
        for _ in 0..3 {
            self.apply(&Step::Window(true));
        }
        self.apply(&Step::Gate(false));
        {
            let mut s = self.s();
            s.blocked.clear();
            s.show_blocked();
            // Opt-outs stay as typed: a node they opt out must never be granted.
            for i in 0..NODES {
                s.kubelets[i] = Kubelet::Healthy;
                s.bump(i);
            }
            for i in std::mem::take(&mut s.admin_cordoned) {
                let ours = s
                    .node(i)
                    .and_then(|n| annotation(n, "reboot-cordoned"))
                    .is_some();
                if let Some(node) = s.node_mut(i).filter(|_| !ours) {
                    node["spec"]["unschedulable"] = false.into();
                    s.bump(i);
                }
            }
        }
        let (requested, opted_out, boots_before): (Vec<usize>, Vec<usize>, Vec<u32>) = {
            let s = self.s();
            let requested = (0..NODES)
                .filter(|&i| {
                    s.node(i).is_some_and(|n| {
                        let state = facts(n).protocol(&keys());
                        // A node being given up has its request cleared with it.
                        state.request == Request::Needed && state.abandon.is_none()
                    }) && !self.waits_for_good(&s, i)
                })
                .collect();
            // Opted out and nowhere in the protocol: nothing may start.
            let opted_out = (0..NODES)
                .filter(|&i| {
                    s.node(i).is_some_and(|n| {
                        let state = facts(n).protocol(&keys());
                        checks::opted_out(n)
                            && state.phase == Phase::Idle
                            && state.grant.is_none()
                            && !s.slots().contains_key(&format!("n{i}"))
                    })
                })
                .collect();
            (requested, opted_out, s.boots.clone())
        };
        self.s().given_up.clear();
        for _ in 0..60 * NODES {
            self.tick(10 * STEP_MS);
            // A ledger recreated from a paused copy keeps the pause: resumed again. A stalled
            // rollout is resumed as `kubectl reboot resume` does: its failures forgiven.
            if self.s().paused() {
                self.s().type_pause(None);
            }
            self.s().resume_rollout();
            self.s().uncordon_set_aside();
            for k in 0..self.replicas.len() {
                self.apply(&Step::SyncAll(k));
                self.apply(&Step::Round(k));
                for i in 0..NODES {
                    self.apply(&Step::DrainEnds {
                        replica: k,
                        node: i,
                        ok: true,
                    });
                }
            }
            for i in 0..NODES {
                self.agent(i);
                self.kubelet(i);
            }
            if self.quiet() {
                break;
            }
        }
        let s = self.s();
        // A node the controller gave up meanwhile (told to reboot, NotReady past
        // --give-up-after) has its request dropped with it, as `kubectl reboot abandon` does.
        for i in requested.into_iter().filter(|i| !s.given_up.contains(i)) {
            assert!(
                s.boots[i] > boots_before[i],
                "request of n{i} never completed: {:#?}\nledger {:#?}",
                s.nodes[i],
                s.lease
            );
        }
        for i in opted_out {
            assert_eq!(
                s.boots[i], boots_before[i],
                "n{i} was rebooted while opted out: {:#?}",
                s.nodes[i]
            );
        }
        assert!(s.slots().is_empty(), "slots left: {:?}", s.slots());
        for pool in &s.pools {
            let left = s.slots_of_ledger(&pool.ledger());
            assert!(
                left.is_empty(),
                "slots left in pool {}: {left:?}",
                pool.name
            );
        }
        for (i, node) in s.nodes.iter().enumerate() {
            let Some(node) = node else { continue };
            let state = facts(node).protocol(&keys());
            assert_eq!(state.phase, Phase::Idle, "n{i} stuck");
            assert!(
                state.grant.is_none() && !state.cordoned_by_operator,
                "n{i} left in the protocol"
            );
            assert!(
                state.abandon.is_none() || !s.in_pool(i),
                "n{i} given up, but its reboot-abandon was never removed"
            );
            let tainted = facts(node)
                .taints
                .unwrap_or_default()
                .contains(&("reboot-pending".to_owned(), "PreferNoSchedule".to_owned()));
            assert!(
                waits_here(&s, i) || (state.tainted.is_none() && !tainted),
                "n{i} waits for nothing here but keeps the waiting taint: {node:#}"
            );
        }
    }
}

/// Node `i` waits for a slot of the pool: requested, in the pool, not opted out.
fn waits_here(s: &super::server::Server, i: usize) -> bool {
    s.in_pool(i)
        && s.node(i).is_some_and(|n| {
            facts(n).protocol(&keys()).request == Request::Needed && !checks::opted_out(n)
        })
}
