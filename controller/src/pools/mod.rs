//! The pools one controller runs: every `RebootPool`, and the flags' pool (`--default-pool`)
//! with the nodes no `RebootPool` selects. Pure: which pools run with which settings, from the
//! objects as listed; `run` starts them and `status` writes what they show.

pub mod ledgers;
pub mod settings;
pub mod status;
pub mod watch;
pub mod writer;

use crate::{args::Args, cache::pool::PoolSelector};
use common::pool::RebootPool;
use kube::ResourceExt;
use std::{collections::BTreeMap, sync::Arc};

/// One pool to run.
#[derive(Debug, Clone)]
pub struct PoolConfig {
    /// The `RebootPool`'s name; `None` for the flags' pool.
    pub name: Option<String>,
    /// Its settings: the flags with the pool's policy, its selector without the nodes the
    /// other pools select.
    pub args: Args,
    /// Grants nothing new and holds its granted nodes where they stand: `spec.paused`. (A pool
    /// being deleted grants nothing new either: it selects no node, and the nodes it granted
    /// go on to the end.)
    pub paused: bool,
    /// Grants nothing while its object lacks the finalizer, read at each round (see
    /// [`fenced`]): a `RebootPool`'s, outside a dry run (which writes neither).
    pub needs_finalizer: bool,
    pub deleting: bool,
}

impl PoolConfig {
    /// How logs and Events name the pool.
    pub fn label(&self) -> &str {
        self.name.as_deref().unwrap_or("default")
    }

    /// Its set-aside nodes' settings; a deleted pool takes the cordons it kept off.
    pub fn set_aside(&self) -> controller_core::decide::SetAside {
        controller_core::decide::SetAside {
            retiring: self.deleting,
            ..self.args.set_aside()
        }
    }
}

/// A `RebootPool` whose spec the controller refuses, with every problem found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidPool {
    pub name: String,
    pub problems: Vec<String>,
}

/// The pools to run, and the ones that cannot.
#[derive(Debug, Clone, Default)]
pub struct Plan {
    pub pools: Vec<PoolConfig>,
    pub invalid: Vec<InvalidPool>,
}

/// Pure: the pools to run from the `RebootPool` objects as listed, over the flags.
///
/// A node two `RebootPool`s select is granted by neither and counted by both; the flags' pool
/// has the nodes that `--node-selector` selects and no `RebootPool` does.
///
/// A pool whose spec is invalid (a value the API server accepts and the controller cannot use)
/// still runs, as a deleted one does: it grants nothing new and carries every node that holds
/// its slot to the end, with each unreadable field at its default; its selector still keeps
/// its nodes out of the others (a selector that cannot be read, every node). A value the
/// controller cannot use makes it do less, never more.
pub fn plan(base: &Args, objects: &[RebootPool]) -> Plan {
    let mut read: BTreeMap<String, (settings::PoolReading, &RebootPool)> = BTreeMap::new();
    for pool in objects {
        let name = pool.name_any();
        read.insert(
            name.clone(),
            (settings::read_pool(base, &name, &pool.spec), pool),
        );
    }
    // A selector that cannot be read selects every node (as `common::pool::selects` reads
    // it): its pool grants nothing, and keeps every node from the others until it is fixed.
    let selectors: BTreeMap<&str, PoolSelector> = read
        .iter()
        .map(|(name, (_, pool))| {
            let selector = settings::selector_of(&pool.spec.node_selector).unwrap_or_default();
            (name.as_str(), selector)
        })
        .collect();
    let mut plan = Plan::default();
    for (name, (settings, pool)) in &read {
        let (args, problems) = match settings {
            Ok((args, problems)) => (Some(args), problems),
            Err(problems) => (None, problems),
        };
        if !problems.is_empty() {
            plan.invalid.push(InvalidPool {
                name: name.clone(),
                problems: problems.clone(),
            });
        }
        let Some(args) = args else { continue };
        let peers = selectors
            .iter()
            .filter(|(other, _)| *other != name)
            .map(|(_, s)| s);
        let mut args = args.clone();
        args.node_selector = args.node_selector.clone().sharing(peers);
        let deleting = pool.metadata.deletion_timestamp.is_some();
        let invalid = !problems.is_empty();
        if deleting || invalid {
            // No node left to grant: it takes the nodes it granted to the end (as any pool
            // does a node that left it), and its waiting taint off the nodes that waited in
            // it. Its nodes still count here, as shared ones do, so that a deleted pool finds
            // the cordons it kept; its selector still keeps them out of the other pools.
            args.node_selector = args.node_selector.sharing([&PoolSelector::default()]);
        }
        plan.pools.push(PoolConfig {
            name: Some(name.clone()),
            args,
            paused: pool.spec.paused,
            needs_finalizer: !base.dry_run,
            deleting,
        });
    }
    if base.default_pool {
        let mut args = base.clone();
        args.node_selector = args.node_selector.clone().excluding(selectors.values());
        plan.pools.push(PoolConfig {
            name: None,
            args,
            paused: false,
            needs_finalizer: false,
            deleting: false,
        });
    }
    plan
}

/// What a change of which restarts the pools: each object's name, generation (a change of
/// its spec) and deletion. A status write changes none, nor does the finalizer: a pool reads
/// it at each round ([`fenced`]).
pub fn fingerprint(objects: &[RebootPool]) -> Vec<Fingerprint> {
    let mut print: Vec<_> = objects
        .iter()
        .map(|p| Fingerprint {
            name: p.name_any(),
            generation: p.metadata.generation,
            deleting: p.metadata.deletion_timestamp.is_some(),
        })
        .collect();
    print.sort();
    print
}

/// One pool object as far as the running pools depend on it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Fingerprint {
    name: String,
    generation: Option<i64>,
    deleting: bool,
}

/// Whether the pool `name` among `objects` (as last listed) carries the finalizer: until it
/// does, the pool grants nothing. A pool no longer listed is not fenced.
pub fn fenced(objects: &[Arc<RebootPool>], name: &str) -> bool {
    objects
        .iter()
        .any(|p| p.metadata.name.as_deref() == Some(name) && has_finalizer(p))
}

/// Whether the pool `name` among `objects` (as last listed) has `spec.paused`.
pub fn spec_paused(objects: &[Arc<RebootPool>], name: &str) -> bool {
    objects
        .iter()
        .any(|p| p.metadata.name.as_deref() == Some(name) && p.spec.paused)
}

fn has_finalizer(pool: &RebootPool) -> bool {
    pool.finalizers()
        .iter()
        .any(|f| f == common::pool::FINALIZER)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use std::collections::BTreeMap as Map;

    pub(crate) fn pool(name: &str, spec: serde_json::Value) -> RebootPool {
        let mut pool = RebootPool::new(name, serde_json::from_value(spec).unwrap());
        pool.metadata.generation = Some(1);
        pool.metadata.finalizers = Some(vec![common::pool::FINALIZER.to_owned()]);
        pool
    }

    fn labels(pairs: &[(&str, &str)]) -> Map<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn member<'a>(plan: &'a Plan, node: &Map<String, String>) -> Vec<&'a str> {
        plan.pools
            .iter()
            .filter(|p| p.args.node_selector.matches(node))
            .map(PoolConfig::label)
            .collect()
    }

    #[test]
    fn every_node_is_in_one_pool_at_most() {
        let base = Args::parse_from(["reboot-controller"]);
        let objects = [
            pool(
                "gpu",
                serde_json::json!({"nodeSelector": {"matchLabels": {"pool": "gpu"}}}),
            ),
            pool(
                "spot",
                serde_json::json!({"nodeSelector": {"matchExpressions": [{"key": "spot", "operator": "Exists"}]}}),
            ),
        ];
        let plan = plan(&base, &objects);
        assert_eq!(member(&plan, &labels(&[("pool", "gpu")])), ["gpu"]);
        assert_eq!(member(&plan, &labels(&[("spot", "")])), ["spot"]);
        let both = labels(&[("pool", "gpu"), ("spot", "")]);
        assert!(
            member(&plan, &both).is_empty(),
            "a node two pools select is in neither"
        );
        let counting: Vec<&str> = plan
            .pools
            .iter()
            .filter(|p| p.args.node_selector.counts(&both))
            .map(PoolConfig::label)
            .collect();
        assert_eq!(
            counting,
            ["gpu", "spot"],
            "and counts in both, not in the flags' pool"
        );
        assert_eq!(member(&plan, &labels(&[("pool", "web")])), ["default"]);
    }

    /// An invalid pool runs to finish what it holds: it grants nothing new (no node is its
    /// member), keeps its nodes from the others, and keeps the fields it could read.
    #[test]
    fn an_invalid_pool_grants_nothing_but_runs_and_keeps_its_nodes() {
        let base = Args::parse_from(["reboot-controller"]);
        let objects = [pool(
            "gpu",
            serde_json::json!({"nodeSelector": {"matchLabels": {"pool": "gpu"}},
                "windows": ["never"], "drain": {"timeout": "1h"}}),
        )];
        let plan = plan(&base, &objects);
        assert_eq!(plan.invalid.len(), 1);
        assert!(plan.invalid[0].problems[0].starts_with("spec.windows[0]"));
        assert!(member(&plan, &labels(&[("pool", "gpu")])).is_empty());
        let gpu = plan
            .pools
            .iter()
            .find(|p| p.label() == "gpu")
            .expect("it runs");
        assert_eq!(gpu.args.ledger_name, "node-reboot-pool-gpu");
        assert_eq!(gpu.args.drain_timeout, std::time::Duration::from_secs(3600));
        assert!(
            gpu.args.reboot_windows.is_empty(),
            "the unreadable window is left out"
        );
    }

    /// Fields that do not fit together: the whole policy is the defaults', so that the pool
    /// still runs to finish its nodes.
    #[test]
    fn an_invalid_combination_runs_the_pool_on_the_defaults() {
        let base = Args::parse_from(["reboot-controller"]);
        let objects = [pool(
            "a",
            serde_json::json!({"rebootTimeout": "2h", "giveUpAfter": "1h", "drain": {"timeout": "1h"}}),
        )];
        let plan = plan(&base, &objects);
        assert_eq!(plan.invalid.len(), 1, "{:?}", plan.invalid);
        let a = plan
            .pools
            .iter()
            .find(|p| p.label() == "a")
            .expect("it runs");
        assert!(plan.invalid[0].problems[0].contains("shorter than"));
        assert_eq!(a.args.give_up_after, base.give_up_after);
        assert_ne!(a.args.drain_timeout, std::time::Duration::from_secs(3600));
        assert_closed_for_good(&a.args);
    }

    /// Windows that are not the spec's are never open (no claim on a guess of them), and the
    /// nodes already claimed finish as after a window.
    fn assert_closed_for_good(args: &Args) {
        let windows = args.windows();
        let now = jiff::Timestamp::now();
        assert!(!windows.is_open(now), "{windows}");
        assert_eq!(windows.next_opening(now), None);
        assert!(args.finish_after_window);
    }

    /// A window that cannot be read closes the pool's schedule; a readable one is kept as
    /// written, with its `finishAfterWindow`.
    #[test]
    fn an_unreadable_window_closes_the_pool_for_good() {
        let base = Args::parse_from(["reboot-controller"]);
        let broken = pool(
            "a",
            serde_json::json!({
                "windows": ["Mon-Sun 00:00-24:00 Mars/Olympus"],
                "finishAfterWindow": false,
            }),
        );
        let plan_of = |object| plan(&base, &[object]).pools.remove(0);
        assert_closed_for_good(&plan_of(broken).args);
        let readable = pool(
            "a",
            serde_json::json!({
                "windows": ["Mon-Sun 00:00-24:00 UTC"],
                "finishAfterWindow": false,
                "drain": {"podSelector": "=="},
            }),
        );
        let plan = plan(&base, std::slice::from_ref(&readable));
        assert_eq!(plan.invalid.len(), 1, "the pod selector is refused");
        let args = &plan.pools[0].args;
        assert!(args.windows().is_open(jiff::Timestamp::now()));
        assert!(!args.finish_after_window);
    }

    /// A name too long for its ledger Lease cannot run: it never held a slot.
    #[test]
    fn a_pool_without_a_ledger_name_does_not_run() {
        let base = Args::parse_from(["reboot-controller", "--default-pool=false"]);
        let plan = plan(&base, &[pool(&"a".repeat(300), serde_json::json!({}))]);
        assert_eq!(plan.invalid.len(), 1);
        assert!(plan.pools.is_empty());
    }

    #[test]
    fn a_pool_grants_nothing_before_its_finalizer_is_there() {
        let base = Args::parse_from(["reboot-controller"]);
        let mut bare = pool("a", serde_json::json!({}));
        bare.metadata.finalizers = None;
        let plan = plan(&base, std::slice::from_ref(&bare));
        assert!(plan.pools[0].needs_finalizer);
        assert!(
            !plan.pools[1].needs_finalizer,
            "the flags' pool has no object"
        );
        assert!(!fenced(&[Arc::new(bare.clone())], "a"));
        let with = pool("a", serde_json::json!({}));
        assert!(fenced(&[Arc::new(with.clone())], "a"));
        assert!(
            !fenced(&[Arc::new(with.clone())], "b"),
            "another pool's finalizer"
        );
        assert_eq!(
            fingerprint(&[bare]),
            fingerprint(std::slice::from_ref(&with)),
            "adding it starts no pool again: each reads it at its rounds"
        );
        let dry = Args::parse_from(["reboot-controller", "--dry-run"]);
        assert!(
            !super::plan(&dry, &[with]).pools[0].needs_finalizer,
            "a dry run writes none"
        );
    }

    #[test]
    fn the_flags_pool_can_be_turned_off() {
        let base = Args::parse_from(["reboot-controller", "--default-pool=false"]);
        let plan = plan(&base, &[]);
        assert!(plan.pools.is_empty());
    }

    #[test]
    fn a_deleted_or_paused_pool_grants_nothing_new() {
        let base = Args::parse_from(["reboot-controller"]);
        let mut deleted = pool("a", serde_json::json!({}));
        deleted.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
            ));
        let paused = pool("b", serde_json::json!({"paused": true}));
        let plan = plan(&base, &[deleted, paused]);
        let (deleted, paused) = (&plan.pools[0], &plan.pools[1]);
        assert!(paused.paused);
        assert!(
            !deleted.paused,
            "a deleted pool's granted nodes go on to the end"
        );
        assert!(
            !deleted.args.node_selector.matches(&Map::new()),
            "a deleted pool selects no node"
        );
    }
}
