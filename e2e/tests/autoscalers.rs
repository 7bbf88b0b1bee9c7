//! Coexisting with autoscalers (docs/src/scheduling.md), end to end on the real control plane
//! with real agents: a node that cluster-autoscaler is deleting is not rebooted, and the rest
//! of the pool goes on without it; a node in its reboot carries the autoscalers' annotations
//! against scale-down, and the administrator's own stays as typed.

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

const CLUSTER_AUTOSCALER: &str = "cluster-autoscaler.kubernetes.io/scale-down-disabled";
const KARPENTER: &str = "karpenter.sh/do-not-disrupt";

fn annotation(node: &k8s_openapi::api::core::v1::Node, key: &str) -> Option<String> {
    node.metadata.annotations.as_ref()?.get(key).cloned()
}

/// From its claim until it is back, a node carries the annotations that keep cluster-autoscaler
/// and Karpenter from removing it; one the administrator set is left as it is, through and
/// after the reboot.
#[tokio::test(flavor = "multi_thread")]
async fn a_node_in_its_reboot_is_protected_from_scale_down_and_an_administrators_mark_stays() {
    // The reboot delay keeps each claimed node cordoned a while before it reboots.
    let config = SandboxConfig::with_nodes(2)
        .max_unavailable("1")
        .reboot_duration(Duration::from_secs(4))
        .controller_args(["--reboot-delay", "5s"]);
    let sb = e2e::sandbox_without_pods(config).await;
    let watch = BudgetWatch::start(sb.client.clone(), 1).await;
    let names = sb.fleet.names();
    let admins = names[0].clone();
    let typed = format!("{KARPENTER}=false");
    kubectl(&sb.control_plane, &["annotate", "node", &admins, &typed]);
    every_node::request(&sb.control_plane);
    for name in &names {
        wait_until(
            &format!("{name} claimed"),
            ROLLOUT,
            Some(&watch),
            || async { annotation(&node(&sb.client, name).await, "reboot-grant").is_some() },
        )
        .await;
        let claimed = node(&sb.client, name).await;
        assert_eq!(
            annotation(&claimed, CLUSTER_AUTOSCALER).as_deref(),
            Some("true"),
            "{name} in its reboot"
        );
        let karpenter = if *name == admins { "false" } else { "true" };
        assert_eq!(
            annotation(&claimed, KARPENTER).as_deref(),
            Some(karpenter),
            "{name} in its reboot"
        );
    }
    wait_until("both rebooted", ROLLOUT, Some(&watch), || {
        all_back_in(&sb.fleet, &sb.client, &names, 1)
    })
    .await;
    for name in &names {
        let back = node(&sb.client, name).await;
        assert_eq!(annotation(&back, CLUSTER_AUTOSCALER), None, "{name} back");
        assert_eq!(annotation(&back, "reboot-protected"), None, "{name} back");
        let karpenter = (*name == admins).then(|| "false".to_owned());
        assert_eq!(annotation(&back, KARPENTER), karpenter, "{name} back");
    }
    watch.check().unwrap();
    sb.stop().await;
}
