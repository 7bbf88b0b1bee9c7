//! Pools as objects, end to end: the real `RebootPool` CRD on the real API server, one real
//! controller running every pool, real agents on simulated nodes. An independent watch holds
//! each pool to its own budget (its label is the pool's, as zones are held to theirs).

use common::{
    ControllerReason,
    pool::{FINALIZER, RebootPool},
};
use e2e::{
    BudgetWatch, kubectl, kubectl_stdin, label_node, node, node_events, protocol_annotations,
    request_reboot,
    rollout::{ROLLOUT, back},
    wait_until,
};
use kube::{
    Api, Client, ResourceExt,
    api::{DeleteParams, PostParams},
};
use nodesim::{
    budget_watch::ZoneBudget,
    sandbox::{Sandbox, SandboxConfig},
};
use std::time::Duration;

/// A sandbox (which installs the chart's RebootPool CRD) whose nodes carry `pool=<name>` as
/// given, its controller started with `controller_args`.
pub(crate) async fn sandbox(
    pools: &[(&str, usize)],
    unlabelled: usize,
    controller_args: &[&str],
) -> Sandbox {
    let nodes = pools.iter().map(|(_, n)| n).sum::<usize>() + unlabelled;
    let config = SandboxConfig::with_nodes(nodes)
        .reboot_duration(Duration::from_secs(1))
        .start_controller(false)
        .without_pods();
    let mut sb = Sandbox::start(config).await.expect("sandbox starts");
    let mut i = 1;
    for (pool, n) in pools {
        for _ in 0..*n {
            label_node(
                &sb.control_plane,
                &format!("sim-{i}"),
                &format!("pool={pool}"),
            );
            i += 1;
        }
    }
    sb.start_controller(controller_args)
        .expect("controller starts");
    sb
}

/// The node is neither cordoned nor granted nor rebooting.
async fn assert_nothing_of_ours_left(client: &Client, name: &str) {
    let n = node(client, name).await;
    assert_ne!(
        n.spec.as_ref().and_then(|s| s.unschedulable),
        Some(true),
        "{name} is not left cordoned"
    );
    let left: Vec<String> = protocol_annotations(&n)
        .into_iter()
        .filter(|k| k == "reboot-grant" || k == "reboot-now" || k == "reboot-in-progress")
        .collect();
    assert!(left.is_empty(), "{name} keeps {left:?}");
}

pub(crate) async fn create_pool(client: &Client, name: &str, spec: serde_json::Value) {
    let pool = RebootPool::new(name, serde_json::from_value(spec).expect("a pool spec"));
    Api::<RebootPool>::all(client.clone())
        .create(&PostParams::default(), &pool)
        .await
        .expect("the pool is created");
}

pub(crate) async fn pool(client: &Client, name: &str) -> Option<RebootPool> {
    Api::<RebootPool>::all(client.clone())
        .get_opt(name)
        .await
        .expect("pools can be read")
}

/// A pool `a` of `nodes` nodes, a budget of 1 and a soak of `soak` seconds, each node asked
/// to reboot: the sandbox, its budget's watch, and the first node granted.
async fn soaking_pool_rebooting(nodes: usize, soak: u64) -> (Sandbox, BudgetWatch, String) {
    let sb = sandbox(&[("a", nodes)], 0, &["--default-pool=false"]).await;
    create_pool(
        &sb.client,
        "a",
        serde_json::json!({"nodeSelector": {"matchLabels": {"pool": "a"}}, "minReadySeconds": soak}),
    )
    .await;
    let watch = BudgetWatch::start(sb.client.clone(), 1).await;
    e2e::every_node::request(&sb.control_plane);
    let granted = first_granted(&sb, &watch, nodes).await;
    (sb, watch, granted)
}

/// The first of sim-1 to sim-`nodes` to be granted, once one is.
async fn first_granted(sb: &Sandbox, watch: &BudgetWatch, nodes: usize) -> String {
    e2e::eventually("a node is granted", ROLLOUT, Some(watch), || async {
        for i in 1..=nodes {
            let name = format!("sim-{i}");
            if protocol_annotations(&node(&sb.client, &name).await)
                .iter()
                .any(|k| k == "reboot-grant")
            {
                return Some(name);
            }
        }
        None
    })
    .await
}

fn condition(pool: &RebootPool, kind: &str) -> Option<String> {
    pool.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == kind)
        .map(|c| c.status.clone())
}

#[tokio::test(flavor = "multi_thread")]
async fn two_pools_reboot_at_once_each_under_its_own_budget() {
    let sb = sandbox(&[("a", 4), ("b", 4)], 1, &[]).await;
    create_pool(
        &sb.client,
        "a",
        serde_json::json!({"nodeSelector": {"matchLabels": {"pool": "a"}}, "maxUnavailable": 2}),
    )
    .await;
    create_pool(&sb.client, "b", serde_json::json!({"nodeSelector": {"matchLabels": {"pool": "b"}}, "maxUnavailable": "50%"})).await;
    let zones = ZoneBudget {
        label: "pool".into(),
        budget: 2,
    };
    // Each pool 2, the flags' pool (sim-9) 1.
    let watch = BudgetWatch::start_with_zones(sb.client.clone(), 5, Some(zones)).await;
    e2e::every_node::request(&sb.control_plane);
    wait_until(
        "every node rebooted once and back",
        ROLLOUT,
        Some(&watch),
        || async {
            for i in 1..=9 {
                if !back(&sb, &format!("sim-{i}"), 1).await {
                    return false;
                }
            }
            true
        },
    )
    .await;
    assert_eq!(watch.zone_max_seen(), 2, "each pool used its budget");
    assert!(
        watch.max_seen() > 2,
        "the pools rebooted at the same time, each under its own budget (at most {} at once)",
        watch.max_seen()
    );
    // What a user reads: the status, and kubectl's columns.
    wait_until(
        "both pools show Ready and idle",
        Duration::from_secs(30),
        Some(&watch),
        || async {
            let a = pool(&sb.client, "a").await.unwrap();
            let status = a.status.clone().unwrap_or_default();
            status.nodes == 4
                && status.budget.as_deref() == Some("2")
                && status.observed_generation == Some(1)
                && condition(&a, "Ready").as_deref() == Some("True")
                && condition(&a, "Reconciling").as_deref() == Some("False")
                && a.finalizers().iter().any(|f| f == FINALIZER)
        },
    )
    .await;
    let table = kubectl(&sb.control_plane, &["get", "rebootpools"]);
    for column in ["NODES", "BUDGET", "UNAVAILABLE", "REBOOTING", "WAITING"] {
        assert!(table.contains(column), "{table}");
    }
    assert!(
        table
            .lines()
            .any(|l| l.starts_with("b ") && l.contains(" 4 ")),
        "{table}"
    );
    watch.check().expect("budgets held");
    sb.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_node_two_pools_select_is_rebooted_by_neither_until_they_part() {
    let sb = sandbox(&[("a", 2)], 0, &["--default-pool=false"]).await;
    create_pool(
        &sb.client,
        "a",
        serde_json::json!({"nodeSelector": {"matchLabels": {"pool": "a"}}}),
    )
    .await;
    create_pool(&sb.client, "spot", serde_json::json!({"nodeSelector": {"matchExpressions": [{"key": "spot", "operator": "Exists"}]}})).await;
    label_node(&sb.control_plane, "sim-1", "spot=true");
    let watch = BudgetWatch::start(sb.client.clone(), 2).await;
    request_reboot(&sb.control_plane, "sim-1");
    request_reboot(&sb.control_plane, "sim-2");
    wait_until("sim-2 is rebooted", ROLLOUT, Some(&watch), || {
        back(&sb, "sim-2", 1)
    })
    .await;
    wait_until(
        "both pools show the overlap, and sim-1 has a Warning naming both",
        Duration::from_secs(30),
        Some(&watch),
        || async {
            let shows = |p: Option<RebootPool>| {
                p.and_then(|p| p.status)
                    .is_some_and(|s| s.overlapping.iter().any(|o| o.node == "sim-1"))
            };
            let events = node_events(&sb.client, "sim-1").await;
            shows(pool(&sb.client, "a").await)
                && shows(pool(&sb.client, "spot").await)
                && events.iter().any(|(reason, _, note)| {
                    reason == ControllerReason::PoolOverlap.as_str()
                        && note.contains('a')
                        && note.contains("spot")
                })
        },
    )
    .await;
    assert_eq!(sb.fleet.reboots("sim-1"), 0, "neither pool rebooted it");
    assert!(
        protocol_annotations(&node(&sb.client, "sim-1").await)
            .iter()
            .all(|k| k == "reboot-needed"),
        "sim-1 was not granted"
    );
    kubectl(&sb.control_plane, &["label", "node", "sim-1", "spot-"]);
    wait_until("sim-1 is rebooted by pool a", ROLLOUT, Some(&watch), || {
        back(&sb, "sim-1", 1)
    })
    .await;
    watch.check().expect("budget held");
    sb.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pool_deleted_mid_rollout_finishes_its_reboots_and_leaves_nothing() {
    // A soak keeps the first node in the protocol long enough to delete the pool under it.
    let (sb, watch, granted) = soaking_pool_rebooting(3, 5).await;
    // The nodes not started yet when the pool is deleted must stay so.
    let untouched: Vec<String> = (1..=3)
        .map(|i| format!("sim-{i}"))
        .filter(|n| *n != granted && sb.fleet.reboots(n) == 0)
        .collect();
    assert!(
        !untouched.is_empty(),
        "a node is still to be started when the pool is deleted (budget 1, a soak)"
    );
    Api::<RebootPool>::all(sb.client.clone())
        .delete("a", &DeleteParams::default())
        .await
        .expect("the pool is deleted");
    assert!(
        pool(&sb.client, "a").await.is_some(),
        "its finalizer keeps it while {granted} is in the protocol"
    );
    wait_until("the pool is gone", ROLLOUT, Some(&watch), || async {
        pool(&sb.client, "a").await.is_none()
    })
    .await;
    assert_eq!(
        sb.fleet.reboots(&granted),
        1,
        "the reboot under way finished"
    );
    for i in 1..=3 {
        let name = format!("sim-{i}");
        assert_nothing_of_ours_left(&sb.client, &name).await;
        if untouched.contains(&name) {
            assert_eq!(
                sb.fleet.reboots(&name),
                0,
                "{name}: nothing new was started"
            );
        }
    }
    wait_until(
        "its ledger Lease is deleted",
        Duration::from_secs(30),
        Some(&watch),
        || async {
            let leases = kubectl(&sb.control_plane, &["get", "lease", "-A", "-o", "name"]);
            !leases.contains("node-reboot-pool-a")
        },
    )
    .await;
    watch.check().expect("budget held");
    sb.stop().await;
}

/// A pool paused, then deleted, while its granted node waits out its drain delay: the pause
/// holds that node where it stands (cordoned, not drained, not rebooted), so the finalizer
/// stays, and the status says why and what lets it go. Unpaused, the pool reboots that node,
/// starts nothing new and goes, leaving nothing behind.
#[tokio::test(flavor = "multi_thread")]
async fn a_pool_deleted_while_paused_stays_until_it_is_resumed() {
    const DRAIN_DELAY: Duration = Duration::from_secs(20);
    let sb = sandbox(&[("a", 2)], 0, &["--default-pool=false"]).await;
    create_pool(
        &sb.client,
        "a",
        serde_json::json!({
            "nodeSelector": {"matchLabels": {"pool": "a"}},
            "drain": {"delay": format!("{}s", DRAIN_DELAY.as_secs())},
        }),
    )
    .await;
    let watch = BudgetWatch::start(sb.client.clone(), 1).await;
    e2e::every_node::request(&sb.control_plane);
    let granted = e2e::eventually("a node is granted", ROLLOUT, Some(&watch), || async {
        for name in ["sim-1", "sim-2"] {
            if protocol_annotations(&node(&sb.client, name).await)
                .iter()
                .any(|k| k == "reboot-grant")
            {
                return Some(name.to_owned());
            }
        }
        None
    })
    .await;
    let other = if granted == "sim-1" { "sim-2" } else { "sim-1" };
    let paused = |on: bool| {
        let patch = format!(r#"{{"spec":{{"paused":{on}}}}}"#);
        kubectl(
            &sb.control_plane,
            &["patch", "rebootpool", "a", "--type=merge", "-p", &patch],
        );
    };
    paused(true);
    Api::<RebootPool>::all(sb.client.clone())
        .delete("a", &DeleteParams::default())
        .await
        .expect("the pool is deleted");
    wait_until(
        "the pool's status says it is deleted while paused",
        ROLLOUT,
        Some(&watch),
        || async {
            pool(&sb.client, "a").await.is_some_and(|p| {
                p.status
                    .and_then(|s| s.held)
                    .is_some_and(|h| h.contains("until spec.paused is false"))
            })
        },
    )
    .await;
    // Past the drain delay: unpaused, the node would have been drained and rebooted by now.
    tokio::time::sleep(DRAIN_DELAY + Duration::from_secs(5)).await;
    let held = pool(&sb.client, "a").await.expect("the paused pool stays");
    assert!(
        held.finalizers().iter().any(|f| f == FINALIZER),
        "its finalizer stays"
    );
    assert_eq!(
        sb.fleet.reboots(&granted),
        0,
        "{granted} is held, not rebooted"
    );
    assert_eq!(
        node(&sb.client, &granted)
            .await
            .spec
            .and_then(|s| s.unschedulable),
        Some(true),
        "{granted} is held where it stands: cordoned"
    );

    paused(false);
    wait_until("the pool is gone", ROLLOUT, Some(&watch), || async {
        pool(&sb.client, "a").await.is_none()
    })
    .await;
    assert_eq!(
        sb.fleet.reboots(&granted),
        1,
        "{granted} rebooted once resumed"
    );
    for name in [granted.as_str(), other] {
        assert_nothing_of_ours_left(&sb.client, name).await;
    }
    assert_eq!(sb.fleet.reboots(other), 0, "{other}: nothing new started");
    watch.check().expect("budget held");
    sb.stop().await;
}

/// A pool deleted while no controller ran (its finalizer removed by hand, as the docs say for
/// a pool left `Terminating` after an uninstall) leaves its ledger Lease behind; the next
/// leader, which never ran that pool, deletes it, and keeps the ledger of a pool that exists.
#[tokio::test(flavor = "multi_thread")]
async fn a_ledger_left_by_a_pool_deleted_while_no_controller_ran_is_deleted_by_the_next_leader() {
    let mut sb = sandbox(&[("a", 1), ("b", 1)], 0, &["--default-pool=false"]).await;
    for name in ["a", "b"] {
        let selector = serde_json::json!({"nodeSelector": {"matchLabels": {"pool": name}}});
        create_pool(&sb.client, name, selector).await;
    }
    let leases = |sb: &Sandbox| kubectl(&sb.control_plane, &["get", "lease", "-A", "-o", "name"]);
    wait_until(
        "both pools run: their finalizers and ledgers are there",
        ROLLOUT,
        None,
        || async {
            let leases = leases(&sb);
            let mut fenced = true;
            for name in ["a", "b"] {
                fenced &= pool(&sb.client, name)
                    .await
                    .is_some_and(|p| p.finalizers().iter().any(|f| f == FINALIZER));
            }
            fenced && leases.contains("node-reboot-pool-a") && leases.contains("node-reboot-pool-b")
        },
    )
    .await;
    sb.controllers[0].kill().await;
    kubectl(
        &sb.control_plane,
        &["delete", "rebootpool", "a", "--wait=false"],
    );
    let unfence = r#"[{"op": "remove", "path": "/metadata/finalizers"}]"#;
    kubectl(
        &sb.control_plane,
        &["patch", "rebootpool", "a", "--type=json", "-p", unfence],
    );
    assert!(pool(&sb.client, "a").await.is_none(), "the pool is gone");
    assert!(
        leases(&sb).contains("node-reboot-pool-a"),
        "its ledger is left with no controller running"
    );

    sb.start_controller(&["--default-pool=false"])
        .expect("a new controller starts");
    wait_until(
        "the new leader deletes the gone pool's ledger",
        ROLLOUT,
        None,
        || async { !leases(&sb).contains("node-reboot-pool-a") },
    )
    .await;
    assert!(
        leases(&sb).contains("node-reboot-pool-b"),
        "the ledger of the pool that exists is kept: {}",
        leases(&sb)
    );
    sb.stop().await;
}

/// A controller started before the CRD runs the flags' pool alone, says so once, and runs the
/// pools of a CRD installed later without a restart.
#[tokio::test(flavor = "multi_thread")]
async fn pools_of_a_crd_installed_after_the_controller_run_without_a_restart() {
    let config = SandboxConfig::with_nodes(2)
        .reboot_duration(Duration::from_secs(1))
        .start_controller(false)
        .without_pods();
    let mut sb = Sandbox::start(config).await.expect("sandbox starts");
    label_node(&sb.control_plane, "sim-1", "pool=late");
    kubectl(
        &sb.control_plane,
        &["delete", "crd", "rebootpools.node-reboot-operator.io"],
    );
    sb.start_controller(&[]).expect("controller starts");
    let log_path = sb.controllers[0].log_path().clone();
    let log = || std::fs::read_to_string(&log_path).unwrap_or_default();
    const NO_CRD: &str = "the RebootPool CRD is not installed";
    request_reboot(&sb.control_plane, "sim-2");
    wait_until(
        "the flags' pool reboots sim-2 without the CRD",
        ROLLOUT,
        None,
        || async { back(&sb, "sim-2", 1).await },
    )
    .await;
    assert!(log().contains(NO_CRD), "{}", log());

    nodesim::sandbox::install_crds(&sb.control_plane).expect("the CRD is installed");
    create_pool(
        &sb.client,
        "late",
        serde_json::json!({"nodeSelector": {"matchLabels": {"pool": "late"}}}),
    )
    .await;
    // The controller asks less and less often while the CRD is missing, down to once a
    // minute: the patience is twice that and more.
    wait_until(
        "the running controller takes the new pool in",
        Duration::from_secs(180),
        None,
        || async {
            pool(&sb.client, "late").await.is_some_and(|p| {
                p.status.and_then(|s| s.observed_generation) == Some(1)
                    && p.metadata
                        .finalizers
                        .unwrap_or_default()
                        .iter()
                        .any(|f| f == FINALIZER)
            })
        },
    )
    .await;
    request_reboot(&sb.control_plane, "sim-1");
    wait_until("the pool reboots sim-1", ROLLOUT, None, || async {
        back(&sb, "sim-1", 1).await
    })
    .await;
    assert!(
        sb.controllers[0].is_running(),
        "the same controller, not restarted"
    );
    assert_eq!(log().matches(NO_CRD).count(), 1, "said once: {}", log());
    // The pool's creation starts the pools again (a list of every node); the finalizer the
    // controller adds to it does not.
    let restarts = log()
        .matches("the RebootPools changed: starting the pools again")
        .count();
    assert_eq!(restarts, 1, "{}", log());
    sb.stop().await;
}

/// kstatus's rules for a resource with conditions (sigs.k8s.io/cli-utils, as Argo CD and
/// Flux apply them): not yet observed is InProgress; `Stalled` True is Failed; `Reconciling`
/// True is InProgress; otherwise Current.
fn kstatus(pool: &RebootPool) -> &'static str {
    let observed = pool.status.as_ref().and_then(|s| s.observed_generation);
    if observed != pool.metadata.generation {
        return "InProgress";
    }
    match (condition(pool, "Stalled"), condition(pool, "Reconciling")) {
        (Some(s), _) if s == "True" => "Failed",
        (_, Some(r)) if r == "True" => "InProgress",
        _ => "Current",
    }
}

const POOLS_YAML: &str = r#"
apiVersion: node-reboot-operator.io/v1alpha1
kind: RebootPool
metadata: {name: control-plane}
spec:
  nodeSelector: {matchLabels: {pool: control-plane}}
  maxUnavailable: 1
  minReadySeconds: 1
---
apiVersion: node-reboot-operator.io/v1alpha1
kind: RebootPool
metadata: {name: general}
spec:
  nodeSelector: {matchLabels: {pool: general}}
  maxUnavailable: "50%"
---
apiVersion: node-reboot-operator.io/v1alpha1
kind: RebootPool
metadata: {name: gpu}
spec:
  nodeSelector: {matchLabels: {pool: gpu}}
  windows: ["someday at noon"]
"#;

#[tokio::test(flavor = "multi_thread")]
async fn pools_applied_server_side_show_their_health_as_kstatus_reads_it() {
    let sb = sandbox(
        &[("control-plane", 1), ("general", 2), ("gpu", 1)],
        0,
        &["--default-pool=false"],
    )
    .await;
    kubectl_stdin(
        &sb.control_plane,
        &["apply", "--server-side", "-f", "-"],
        POOLS_YAML,
    );
    let watch = BudgetWatch::start(sb.client.clone(), 2).await;
    let health = || async {
        let mut all = Vec::new();
        for name in ["control-plane", "general", "gpu"] {
            all.push(kstatus(&pool(&sb.client, name).await.expect("applied")));
        }
        all
    };
    wait_until(
        "the two valid pools are Current, the invalid one Failed",
        Duration::from_secs(60),
        Some(&watch),
        || async { health().await == ["Current", "Current", "Failed"] },
    )
    .await;
    let gpu = pool(&sb.client, "gpu").await.unwrap();
    let held = gpu.status.unwrap().held.unwrap_or_default();
    assert!(
        held.contains("spec.windows[0]"),
        "the field is named: {held}"
    );
    kubectl(
        &sb.control_plane,
        &[
            "wait",
            "--for=condition=Ready",
            "rebootpool/general",
            "--timeout=30s",
        ],
    );
    let broken = "apiVersion: node-reboot-operator.io/v1alpha1\nkind: RebootPool\n\
                  metadata: {name: broken}\n\
                  spec: {nodeSelector: {matchExpressions: [{key: pool, operator: In}]}}\n";
    let refused = sb
        .control_plane
        .kubectl_with_input(&["apply", "--server-side", "-f", "-"], broken)
        .expect_err("a broken selector is refused")
        .to_string();
    assert!(
        refused.contains("In and NotIn need values"),
        "a selector with an In and no value is refused: {refused}"
    );
    // A rollout in progress, then done; a spec edit is observed.
    e2e::every_node::request(&sb.control_plane);
    wait_until(
        "the control-plane and general nodes are rebooted",
        ROLLOUT,
        Some(&watch),
        || async {
            back(&sb, "sim-1", 1).await
                && back(&sb, "sim-2", 1).await
                && back(&sb, "sim-3", 1).await
        },
    )
    .await;
    assert_eq!(
        sb.fleet.reboots("sim-4"),
        0,
        "the invalid pool granted nothing"
    );
    let fixed = POOLS_YAML.replace("someday at noon", "mon-sun 00:00-24:00 UTC");
    kubectl_stdin(
        &sb.control_plane,
        &["apply", "--server-side", "-f", "-"],
        &fixed,
    );
    wait_until(
        "the fixed pool reboots its node",
        ROLLOUT,
        Some(&watch),
        || back(&sb, "sim-4", 1),
    )
    .await;
    wait_until(
        "every pool is Current at its new generation",
        Duration::from_secs(60),
        Some(&watch),
        || async { health().await == ["Current", "Current", "Current"] },
    )
    .await;
    watch.check().expect("budget held");
    sb.stop().await;
}

/// The sandbox's report: three control-plane nodes under a pool `cp` with a budget of 1, the
/// first also labelled into a zone's pool `za`, and cordoned by hand. A reboot asked for a
/// second `cp` node waits: the cordoned node counts against `cp`'s budget though `cp` does not
/// grant it. (Before, it counted against neither pool, and sim-2 was granted at once: two of
/// three control-plane nodes down under a budget of 1.) The controller has looked: `cp`'s
/// status counts the cordoned node and the waiting one.
#[tokio::test(flavor = "multi_thread")]
async fn a_cordoned_node_two_pools_select_counts_against_both_budgets() {
    let sb = sandbox(&[("cp", 3)], 0, &["--default-pool=false"]).await;
    create_pool(
        &sb.client,
        "cp",
        serde_json::json!({"nodeSelector": {"matchLabels": {"pool": "cp"}}, "maxUnavailable": 1}),
    )
    .await;
    create_pool(
        &sb.client,
        "za",
        serde_json::json!({"nodeSelector": {"matchLabels": {"zone": "a"}}, "maxUnavailable": 1}),
    )
    .await;
    label_node(&sb.control_plane, "sim-1", "zone=a");
    kubectl(&sb.control_plane, &["cordon", "sim-1"]);
    let watch = BudgetWatch::start(sb.client.clone(), 1).await;
    request_reboot(&sb.control_plane, "sim-2");
    wait_until(
        "cp's status counts sim-1 unavailable and sim-2 waiting",
        Duration::from_secs(60),
        Some(&watch),
        || async {
            pool(&sb.client, "cp")
                .await
                .and_then(|p| p.status)
                .is_some_and(|s| s.unavailable == 1 && s.waiting == 1)
        },
    )
    .await;
    assert!(
        !protocol_annotations(&node(&sb.client, "sim-2").await)
            .iter()
            .any(|k| k == "reboot-grant"),
        "sim-2 granted while sim-1, in cp and za, is cordoned"
    );
    kubectl(&sb.control_plane, &["uncordon", "sim-1"]);
    wait_until(
        "sim-2 is rebooted once sim-1 is uncordoned",
        ROLLOUT,
        Some(&watch),
        || back(&sb, "sim-2", 1),
    )
    .await;
    watch.check().expect("budget held");
    sb.stop().await;
}

/// A pool's window given a mistyped time zone while it reboots a node (a soak keeps that node
/// in the protocol): the pool says why (Stalled, InvalidSpec, the field named), finishes that
/// node (rebooted once, uncordoned, its grant gone) and starts no other; put right, it goes on.
/// (Before, the invalid pool ran nothing: its node kept its grant and cordon for ever.)
#[tokio::test(flavor = "multi_thread")]
async fn a_pool_made_invalid_mid_rollout_finishes_its_node_and_starts_no_other() {
    let (sb, watch, granted) = soaking_pool_rebooting(2, 10).await;
    let other = if granted == "sim-1" { "sim-2" } else { "sim-1" };
    let (granted, other) = (granted.as_str(), other);
    kubectl(
        &sb.control_plane,
        &[
            "patch",
            "rebootpool",
            "a",
            "--type=merge",
            "-p",
            r#"{"spec": {"windows": ["Mon-Sun 00:00-24:00 Mars/Olympus"]}}"#,
        ],
    );
    wait_until(
        "the pool is Stalled with InvalidSpec naming spec.windows",
        Duration::from_secs(60),
        Some(&watch),
        || async {
            pool(&sb.client, "a").await.is_some_and(|p| {
                condition(&p, "Stalled").as_deref() == Some("True")
                    && p.status.as_ref().is_some_and(|s| {
                        s.conditions.iter().any(|c| {
                            c.reason == "InvalidSpec" && c.message.contains("spec.windows[0]")
                        })
                    })
            })
        },
    )
    .await;
    wait_until(
        "the granted node is finished",
        ROLLOUT,
        Some(&watch),
        || async {
            let n = node(&sb.client, granted).await;
            sb.fleet.reboots(granted) == 1
                && !protocol_annotations(&n).iter().any(|k| k == "reboot-grant")
                && n.spec.as_ref().and_then(|s| s.unschedulable) != Some(true)
        },
    )
    .await;
    assert_nothing_of_ours_left(&sb.client, granted).await;
    assert_eq!(
        sb.fleet.reboots(other),
        0,
        "the invalid pool started {other}"
    );
    assert!(
        !protocol_annotations(&node(&sb.client, other).await)
            .iter()
            .any(|k| k == "reboot-grant"),
        "the invalid pool granted {other}"
    );
    kubectl(
        &sb.control_plane,
        &[
            "patch",
            "rebootpool",
            "a",
            "--type=merge",
            "-p",
            r#"{"spec": {"windows": null}}"#,
        ],
    );
    wait_until(
        "put right, the pool reboots the other node",
        ROLLOUT,
        Some(&watch),
        || back(&sb, other, 1),
    )
    .await;
    watch.check().expect("budget held");
    sb.stop().await;
}

/// `kubectl reboot pause` without `--pool`, the stop button of the docs, holds every pool: a
/// RebootPool's node asked to reboot waits (the pool's status counts it waiting, so the
/// controller has looked), and `kubectl reboot resume` lets it go.
#[tokio::test(flavor = "multi_thread")]
async fn the_flags_pause_holds_every_rebootpool() {
    let sb = sandbox(&[("a", 1)], 0, &[]).await;
    create_pool(
        &sb.client,
        "a",
        serde_json::json!({"nodeSelector": {"matchLabels": {"pool": "a"}}}),
    )
    .await;
    wait_until(
        "the flags' pool's ledger is there",
        Duration::from_secs(60),
        None,
        || async {
            let leases = kubectl(&sb.control_plane, &["get", "lease", "-A", "-o", "name"]);
            leases.contains(common::ledger::LEDGER_NAME)
        },
    )
    .await;
    let plugin = |args: &[&str]| {
        let binary = nodesim::workspace_binary("kubectl-reboot").unwrap_or_else(|e| panic!("{e}"));
        let out = std::process::Command::new(binary)
            .args(args)
            .env("KUBECONFIG", sb.control_plane.kubeconfig_path())
            .output()
            .expect("kubectl-reboot runs");
        let said = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "kubectl reboot {args:?}: {said}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        said
    };
    let said = plugin(&["pause"]);
    assert!(said.contains("every RebootPool"), "{said}");
    let watch = BudgetWatch::start(sb.client.clone(), 1).await;
    request_reboot(&sb.control_plane, "sim-1");
    wait_until(
        "pool a counts sim-1 waiting",
        Duration::from_secs(60),
        Some(&watch),
        || async {
            pool(&sb.client, "a")
                .await
                .and_then(|p| p.status)
                .is_some_and(|s| s.waiting == 1)
        },
    )
    .await;
    assert!(
        !protocol_annotations(&node(&sb.client, "sim-1").await)
            .iter()
            .any(|k| k == "reboot-grant"),
        "pool a granted sim-1 while the flags' pool is paused"
    );
    plugin(&["resume"]);
    wait_until("resumed, sim-1 is rebooted", ROLLOUT, Some(&watch), || {
        back(&sb, "sim-1", 1)
    })
    .await;
    watch.check().expect("budget held");
    sb.stop().await;
}
