//! Coexisting with autoscalers (docs/src/scheduling.md), end to end on the real control plane
//! with real agents: a node that cluster-autoscaler is deleting is not rebooted, and the rest
//! of the pool goes on without it.

use common::ControllerReason;
use e2e::rollout::{ROLLOUT, all_back_in, back};
use e2e::{BudgetWatch, every_node, kubectl, node, protocol_annotations, wait_until};
use nodesim::sandbox::SandboxConfig;
use std::time::Duration;

const TAINT: &str = "ToBeDeletedByClusterAutoscaler";

#[tokio::test(flavor = "multi_thread")]
async fn a_node_an_autoscaler_is_removing_is_not_rebooted_and_the_rest_finish() {
    let config = SandboxConfig::with_nodes(3)
        .max_unavailable("1")
        .reboot_duration(Duration::from_secs(4));
    let sb = e2e::sandbox_without_pods(config).await;
    let watch = BudgetWatch::start(sb.client.clone(), 1).await;
    let names = sb.fleet.names();
    let (removed, rest) = (names[0].clone(), &names[1..]);
    // As cluster-autoscaler writes it: its value is the time it started.
    let taint = format!("{TAINT}=1764680000:NoSchedule");
    kubectl(&sb.control_plane, &["taint", "node", &removed, &taint]);
    every_node::request(&sb.control_plane);
    let words = [TAINT, "not cordoned"];
    let removing = ControllerReason::NodeBeingRemoved;
    every_node::wait_for_event(
        &sb.client,
        std::slice::from_ref(&removed),
        removing,
        &words,
        ROLLOUT,
        Some(&watch),
    )
    .await;
    wait_until("the other nodes rebooted", ROLLOUT, Some(&watch), || {
        all_back_in(&sb.fleet, &sb.client, rest, 1)
    })
    .await;

    let held = node(&sb.client, &removed).await;
    assert_eq!(
        sb.fleet.reboots(&removed),
        0,
        "{removed} was rebooted while being removed"
    );
    assert_ne!(
        held.spec.as_ref().and_then(|s| s.unschedulable),
        Some(true),
        "{removed} was cordoned"
    );
    assert_eq!(
        protocol_annotations(&held),
        ["reboot-needed"],
        "{removed}: only its request"
    );
    let taints = held.spec.and_then(|s| s.taints).unwrap_or_default();
    assert!(
        taints.iter().any(|t| t.key == TAINT),
        "the autoscaler's taint was removed"
    );

    // The autoscaler gives up on the node (it is needed after all): the taint goes, and the
    // node is rebooted as any other.
    kubectl(
        &sb.control_plane,
        &["taint", "node", &removed, &format!("{TAINT}-")],
    );
    wait_until(
        "the node rebooted once the taint went",
        ROLLOUT,
        Some(&watch),
        || back(&sb, &removed, 1),
    )
    .await;
    watch.check().unwrap();
    sb.stop().await;
}
