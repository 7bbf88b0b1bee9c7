//! Undrainable nodes set aside (docs/src/scheduling.md, "Undrainable nodes"), end to end on a
//! control plane with the controller-manager (so PodDisruptionBudgets are real) and real
//! agents: a node whose drain a budget at 0 keeps failing is set aside after
//! `--drain-attempts` and the rest of the pool finishes; past `--max-blocked-nodes` the pool
//! stalls until the administrator tries the node again; with `--keep-set-aside-cordoned` it
//! stays cordoned, holds the budget, and is uncordoned by its reboot once tried again.

use common::ControllerReason;
use e2e::rollout::{all_back_in, back};
use e2e::{
    BudgetWatch, apply, kubectl, node, pod_that_blocks_the_drain_of, protocol_annotations,
    request_reboot, wait_for_event, wait_until, wait_until_the_budget_allows_no_disruption,
};
use nodesim::sandbox::Sandbox;
use std::time::Duration;

const ROLLOUT: Duration = Duration::from_secs(240);
/// Grants the node though a PodDisruptionBudget at 0 covers one of its pods: the drain starts,
/// and fails.
const NO_PDB_CHECK: &str = "--check-disruption-budgets=false";
const KEY: &str = "reboot-drain-failures";

fn failures(n: &k8s_openapi::api::core::v1::Node) -> Option<String> {
    n.metadata.annotations.as_ref()?.get(KEY).cloned()
}

fn cordoned(n: &k8s_openapi::api::core::v1::Node) -> bool {
    n.spec.as_ref().and_then(|s| s.unschedulable) == Some(true)
}

/// `nodes` nodes with a budget of one and `set_aside` (the set-aside flags), drains that time
/// out after 4 s, and a PodDisruptionBudget at 0 on a pod of sim-1, whose reboot is requested.
async fn sim_1_undrainable(nodes: usize, set_aside: &[&str]) -> (Sandbox, BudgetWatch) {
    let args = [&["--drain-timeout", "4s", NO_PDB_CHECK][..], set_aside].concat();
    let sb = e2e::sandbox_with_pods(nodes, "1", &args).await;
    let watch = request_undrainable_sim_1(&sb).await;
    (sb, watch)
}

/// A PodDisruptionBudget at 0 on a pod of sim-1, whose reboot is then requested; the budget's
/// watch, started before the request.
async fn request_undrainable_sim_1(sb: &Sandbox) -> BudgetWatch {
    apply(&sb.control_plane, &pod_that_blocks_the_drain_of("sim-1"));
    wait_until_the_budget_allows_no_disruption(&sb.control_plane).await;
    let watch = BudgetWatch::start(sb.client.clone(), 1).await;
    request_reboot(&sb.control_plane, "sim-1");
    watch
}

/// The administrator makes sim-1's pod movable and tries it again: sim-1 and sim-2 are both
/// back after one reboot each, within the budget throughout.
async fn try_sim_1_again_and_finish(sb: Sandbox, watch: BudgetWatch) {
    kubectl(&sb.control_plane, &["delete", "pdb", "never-disrupt"]);
    kubectl(
        &sb.control_plane,
        &["annotate", "node", "sim-1", &format!("{KEY}-")],
    );
    wait_until("both rebooted", ROLLOUT, Some(&watch), || {
        all_back_in(&sb.fleet, &sb.client, &["sim-1", "sim-2"], 1)
    })
    .await;
    watch.check().unwrap();
    sb.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_node_whose_drain_keeps_failing_is_set_aside_and_the_rest_finish() {
    let (sb, watch) = sim_1_undrainable(3, &["--drain-attempts", "2"]).await;
    wait_for_event(
        &sb.client,
        "sim-1",
        ControllerReason::DrainBlocked,
        &["default/precious", "failed drain 1 of --drain-attempts 2"],
        Some(&watch),
    )
    .await;
    request_reboot(&sb.control_plane, "sim-2");
    request_reboot(&sb.control_plane, "sim-3");
    wait_for_event(
        &sb.client,
        "sim-1",
        ControllerReason::SetAside,
        &[
            "default/precious",
            "kubectl annotate node sim-1 reboot-drain-failures-",
        ],
        Some(&watch),
    )
    .await;
    wait_until(
        "sim-2 and sim-3 rebooted",
        ROLLOUT,
        Some(&watch),
        || async { sb.fleet.reboots("sim-2") == 1 && sb.fleet.reboots("sim-3") == 1 },
    )
    .await;
    let sim1 = node(&sb.client, "sim-1").await;
    assert!(!cordoned(&sim1), "a set-aside node is uncordoned");
    let recorded = failures(&sim1).unwrap_or_default();
    assert!(
        recorded.starts_with("2; blocked by default/precious"),
        "{KEY}={recorded:?}"
    );
    assert_eq!(
        protocol_annotations(&sim1),
        [KEY, "reboot-needed"],
        "the request and the count are kept, nothing else"
    );
    assert_eq!(sb.fleet.reboots("sim-1"), 0, "sim-1 was rebooted");
    let gauge = e2e::scrape::controller_metric(&sb, "node_reboot_set_aside_nodes").await;
    assert_eq!(gauge, Some(1.0), "the gauge counts sim-1");

    // The administrator makes the pod movable and tries the node again: it is rebooted, and
    // its completion leaves no count behind.
    kubectl(&sb.control_plane, &["delete", "pdb", "never-disrupt"]);
    kubectl(
        &sb.control_plane,
        &["annotate", "node", "sim-1", &format!("{KEY}-")],
    );
    wait_until(
        "sim-1 rebooted once tried again",
        ROLLOUT,
        Some(&watch),
        || back(&sb, "sim-1", 1),
    )
    .await;
    watch.check().unwrap();
    sb.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn more_nodes_set_aside_than_allowed_stall_the_pool_until_one_is_tried_again() {
    let set_aside = ["--drain-attempts", "1", "--max-blocked-nodes", "0"];
    let (sb, watch) = sim_1_undrainable(2, &set_aside).await;
    wait_for_event(
        &sb.client,
        "sim-1",
        ControllerReason::SetAside,
        &["default/precious"],
        Some(&watch),
    )
    .await;
    request_reboot(&sb.control_plane, "sim-2");
    wait_for_event(
        &sb.client,
        "sim-2",
        ControllerReason::Stalled,
        &["sim-1", "--max-blocked-nodes 0"],
        Some(&watch),
    )
    .await;
    let sim2 = node(&sb.client, "sim-2").await;
    assert!(!cordoned(&sim2), "a stalled pool grants nothing");
    assert_eq!(sb.fleet.reboots("sim-2"), 0);

    // Tried again with the pod movable: the pool is no longer stalled, and both finish.
    try_sim_1_again_and_finish(sb, watch).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_node_set_aside_kept_cordoned_holds_the_budget_until_tried_again() {
    let set_aside = ["--drain-attempts", "1", "--keep-set-aside-cordoned"];
    let (sb, watch) = sim_1_undrainable(2, &set_aside).await;
    wait_for_event(
        &sb.client,
        "sim-1",
        ControllerReason::SetAside,
        &[
            "default/precious",
            "stays cordoned",
            "counting against the budget",
        ],
        Some(&watch),
    )
    .await;
    let sim1 = node(&sb.client, "sim-1").await;
    assert!(cordoned(&sim1), "kept cordoned once set aside");
    assert_eq!(
        protocol_annotations(&sim1),
        ["reboot-cordoned", KEY, "reboot-needed"],
        "the operator's cordon, the request and the count, nothing else"
    );

    // With a budget of 1, the cordon kept is the one unavailable node: sim-2 waits (the
    // budget watch fails the test if it is cordoned meanwhile).
    request_reboot(&sb.control_plane, "sim-2");
    wait_for_event(
        &sb.client,
        "sim-2",
        ControllerReason::Requested,
        &["waiting for a slot (max-unavailable 1 of 2 nodes)"],
        Some(&watch),
    )
    .await;
    assert!(cordoned(&node(&sb.client, "sim-1").await), "still cordoned");
    assert_eq!(sb.fleet.reboots("sim-2"), 0);

    // Tried again with the pod movable: sim-1 goes on from its cordon, and its completion
    // removes the cordon it kept (back: Ready, uncordoned, nothing of the protocol left);
    // then sim-2 goes.
    try_sim_1_again_and_finish(sb, watch).await;
}

/// A RebootPool with `drainAttempts: 1` and `keepSetAsideCordoned` sets sim-1 aside cordoned
/// (a budget at 0 blocks its drain), then is deleted: its last rounds take its cordon off
/// sim-1 before the finalizer goes, and sim-1's request and record of failed drains stay for
/// the pool that selects it next. Before, the finalizer counted a cordon only with a grant and
/// sim-1 stayed cordoned for good.
#[tokio::test(flavor = "multi_thread")]
async fn a_pool_deleted_with_a_node_it_kept_cordoned_uncordons_it() {
    let sb = e2e::sandbox_with_pods(2, "1", &[NO_PDB_CHECK, "--default-pool=false"]).await;
    for name in ["sim-1", "sim-2"] {
        e2e::label_node(&sb.control_plane, name, "pool=gpu");
    }
    let spec = serde_json::json!({
        "nodeSelector": {"matchLabels": {"pool": "gpu"}},
        "maxUnavailable": 1,
        "drainAttempts": 1,
        "keepSetAsideCordoned": true,
        "drain": {"timeout": "4s"},
    });
    crate::reboot_pools::create_pool(&sb.client, "gpu", spec).await;
    let watch = request_undrainable_sim_1(&sb).await;
    wait_for_event(
        &sb.client,
        "sim-1",
        ControllerReason::SetAside,
        &["default/precious"],
        Some(&watch),
    )
    .await;
    assert!(
        cordoned(&node(&sb.client, "sim-1").await),
        "kept cordoned while set aside"
    );

    kubectl(
        &sb.control_plane,
        &["delete", "rebootpool", "gpu", "--wait=false"],
    );
    wait_until(
        "the pool's deletion completes",
        ROLLOUT,
        Some(&watch),
        || async { crate::reboot_pools::pool(&sb.client, "gpu").await.is_none() },
    )
    .await;
    // Its finalizer went only once its cordon was off.
    let sim1 = node(&sb.client, "sim-1").await;
    assert!(!cordoned(&sim1), "sim-1 left cordoned by a deleted pool");
    assert_eq!(
        protocol_annotations(&sim1),
        [KEY, "reboot-needed"],
        "the request and the count stay, nothing else"
    );
    assert_eq!(sb.fleet.reboots("sim-1"), 0, "sim-1 was rebooted");
    watch.check().unwrap();
    sb.stop().await;
}
