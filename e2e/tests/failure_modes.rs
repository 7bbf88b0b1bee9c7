//! When a node does not behave (docs/src/reliability.md), end to end on the real control plane with
//! real agents: a pause value typed during an incident pauses, and a node whose kubelet hangs is
//! still drained and rebooted, while a pod stuck terminating on a Ready node is waited for;
//! a node that comes back from its reboot NotReady (a bad kernel) stops the rollout once past
//! `--reboot-timeout`, says so, and the rollout goes on once the node is fixed.

use common::ControllerReason;
use common::ledger::{LEDGER_NAME, OPERATOR_NAMESPACE, slots_of};
use e2e::rollout::{annotate_ledger, ledger_lease, touched};
use e2e::{
    BudgetWatch, apply, eventually, has_event, kubectl, node, request_reboot,
    rollout::ledger_events, scrape::controller_metric, wait_until,
};
use k8s_openapi::api::{coordination::v1::Lease, core::v1::Pod};
use kube::{Api, Client};
use nodesim::sandbox::{Sandbox, SandboxConfig};
use std::time::Duration;

const PATIENCE: Duration = Duration::from_secs(120);

async fn sandbox(nodes: usize, controller_args: &[&str]) -> Sandbox {
    let config = SandboxConfig::with_nodes(nodes)
        .reboot_duration(Duration::from_secs(1))
        .controller_args(controller_args);
    e2e::sandbox_without_pods(config).await
}

async fn ledger(client: &Client) -> Option<Lease> {
    ledger_lease(client, LEDGER_NAME).await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pause_typed_as_true_with_a_capital_pauses_and_a_warning_says_how_it_was_read() {
    let sb = sandbox(2, &[]).await;
    let client = sb.client.clone();
    wait_until(
        "the controller created its ledger",
        PATIENCE,
        None,
        || async { ledger(&client).await.is_some() },
    )
    .await;
    // As typed during an incident.
    annotate_ledger(&sb.control_plane, "reboot-paused=True");
    let watch = BudgetWatch::start(client.clone(), 1).await;
    request_reboot(&sb.control_plane, "sim-1");

    // Either the controller says the node waits for the pause, or it grants: whichever first.
    let outcome: Option<String> = eventually(
        "sim-1 is told the pool is paused, or is granted",
        PATIENCE,
        Some(&watch),
        || async {
            if let Some(what) = touched(&sb, "sim-1").await {
                return Some(Some(what));
            }
            has_event(&client, "sim-1", ControllerReason::Paused, &[])
                .await
                .then_some(None)
        },
    )
    .await;
    assert_eq!(
        outcome, None,
        "sim-1 was granted while reboot-paused=True is on the ledger"
    );
    // A grant decided from a copy of the ledger read before the pause would show by now: the
    // controller has looked again since.
    e2e::scrape::after_rounds(&sb, 2, None).await;
    assert_eq!(touched(&sb, "sim-1").await, None, "granted while paused");
    let slots = slots_of(
        ledger(&client)
            .await
            .and_then(|l| l.metadata.annotations)
            .as_ref(),
    )
    .expect("a ledger");
    assert!(slots.is_empty(), "no slot while paused: {slots:?}");

    wait_until(
        "a Warning on the ledger Lease names the value and says how it was read",
        PATIENCE,
        Some(&watch),
        || async {
            ledger_events(&client).await.iter().any(|(kind, reason, message)| {
                kind == "Warning"
                    && reason == ControllerReason::UnexpectedPauseValue.as_str()
                    && message.contains("reboot-paused=\"True\"")
                    && message.contains("read as paused")
                    && message.contains(&format!(
                        "kubectl annotate lease -n {OPERATOR_NAMESPACE} {LEDGER_NAME} reboot-paused-"
                    ))
            })
        },
    )
    .await;
    let warning = ledger_events(&client)
        .await
        .into_iter()
        .find(|(_, reason, _)| reason == ControllerReason::UnexpectedPauseValue.as_str())
        .map(|(_, _, message)| message);
    println!("the Warning: {}", warning.unwrap_or_default());

    // `false` is the way out the Warning names: the reboot goes ahead.
    annotate_ledger(&sb.control_plane, "reboot-paused=false");
    wait_until("sim-1 is rebooted", PATIENCE, Some(&watch), || async {
        sb.fleet.reboots("sim-1") == 1
    })
    .await;
    watch.check().unwrap();
    sb.stop().await;
}

/// A bare pod on `node` that takes `grace` seconds to stop.
fn pod_on(node: &str, grace: u32) -> String {
    format!(
        r#"
# No controller-manager here to create it.
apiVersion: v1
kind: ServiceAccount
metadata: {{name: default, namespace: default}}
---
apiVersion: v1
kind: Pod
metadata: {{name: stuck, namespace: default}}
spec:
  nodeName: {node}
  terminationGracePeriodSeconds: {grace}
  containers: [{{name: c, image: registry.example/stuck:1}}]
"#
    )
}

async fn pod(client: &Client, name: &str) -> Option<Pod> {
    Api::<Pod>::namespaced(client.clone(), "default")
        .get_opt(name)
        .await
        .expect("read the pod")
}

/// `default/stuck` on sim-1, started by the simulated kubelet.
async fn running_pod_on_sim_1(sb: &Sandbox) {
    apply(&sb.control_plane, &pod_on("sim-1", 2));
    wait_until("default/stuck runs", PATIENCE, None, || async {
        pod(&sb.client, "stuck")
            .await
            .is_some_and(|p| e2e::pod_is_ready(&p))
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_wedged_node_is_drained_by_counting_its_unconfirmed_pod_as_gone_and_rebooted() {
    // The margin small, the drain timeout far above grace + margin: the drain must finish by
    // counting the pod as gone, not give up.
    let sb = sandbox(
        2,
        &[
            "--drain-skip-wait-for-delete-margin",
            "1s",
            "--drain-timeout",
            "40s",
        ],
    )
    .await;
    let client = sb.client.clone();
    running_pod_on_sim_1(&sb).await;
    sb.fleet.wedge("sim-1", true).await;
    wait_until("sim-1 is NotReady", PATIENCE, None, || async {
        let n = node(&client, "sim-1").await;
        !common::eviction::node_is_ready(&n)
    })
    .await;
    let watch = BudgetWatch::start(client.clone(), 1).await;
    request_reboot(&sb.control_plane, "sim-1");

    wait_until(
        "the pod's deletion is requested and not confirmed",
        PATIENCE,
        Some(&watch),
        || async {
            pod(&client, "stuck")
                .await
                .is_some_and(|p| p.metadata.deletion_timestamp.is_some())
        },
    )
    .await;
    assert!(
        sb.fleet.kubelet_hung("sim-1"),
        "the kubelet still hangs: nobody confirms the deletion"
    );
    let blocked: Option<String> = eventually(
        "sim-1 is rebooted (or its drain gives up)",
        PATIENCE,
        Some(&watch),
        || async {
            let events = e2e::node_events(&client, "sim-1").await;
            if let Some((_, _, message)) = events
                .iter()
                .find(|(r, _, _)| r == ControllerReason::DrainBlocked.as_str())
            {
                return Some(Some(message.clone()));
            }
            (sb.fleet.reboots("sim-1") == 1).then_some(None)
        },
    )
    .await;
    assert_eq!(blocked, None, "the drain of the wedged node gave up");
    assert!(
        has_event(
            &client,
            "sim-1",
            ControllerReason::Draining,
            &[
                "node NotReady",
                "counted as gone",
                "default/stuck",
                "--drain-skip-wait-for-delete-margin=1s"
            ],
        )
        .await,
        "a Draining Event says the pod was counted as gone: {:#?}",
        e2e::node_events(&client, "sim-1").await
    );
    assert!(
        has_event(
            &client,
            "sim-1",
            ControllerReason::RebootApproved,
            &["1 pod counted as gone without its deletion confirmed"],
        )
        .await,
        "the RebootApproved Event says so too: {:#?}",
        e2e::node_events(&client, "sim-1").await
    );
    // The reboot cured the kubelet: it confirms the deletion it owed, and the node is back.
    wait_until(
        "the pod is gone and sim-1 is back",
        PATIENCE,
        Some(&watch),
        || async {
            pod(&client, "stuck").await.is_none()
                && e2e::protocol_annotations(&node(&client, "sim-1").await).is_empty()
                && !common::NodeFacts::from_node(&node(&client, "sim-1").await).unschedulable
        },
    )
    .await;
    watch.check().unwrap();
    sb.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn on_a_ready_node_a_pod_stuck_terminating_is_waited_for() {
    let sb = sandbox(
        2,
        &[
            "--drain-skip-wait-for-delete-margin",
            "1s",
            "--drain-timeout",
            "12s",
        ],
    )
    .await;
    let client = sb.client.clone();
    running_pod_on_sim_1(&sb).await;
    // The kubelet confirms no deletion, but the node stays Ready.
    sb.fleet.stop_confirming_deletions("sim-1", true).await;
    let watch = BudgetWatch::start(client.clone(), 1).await;
    request_reboot(&sb.control_plane, "sim-1");
    wait_until(
        "the drain of sim-1 gives up, naming the pod still terminating",
        PATIENCE,
        Some(&watch),
        || async {
            has_event(
                &client,
                "sim-1",
                ControllerReason::DrainBlocked,
                &["default/stuck", "still terminating"],
            )
            .await
        },
    )
    .await;
    let n = node(&client, "sim-1").await;
    assert!(common::eviction::node_is_ready(&n), "sim-1 stayed Ready");
    assert_eq!(sb.fleet.reboots("sim-1"), 0, "sim-1 was not rebooted");
    assert!(
        !has_event(&client, "sim-1", ControllerReason::RebootApproved, &[]).await,
        "no reboot approved while the pod terminates on a Ready node"
    );
    assert!(
        !has_event(
            &client,
            "sim-1",
            ControllerReason::Draining,
            &["counted as gone"]
        )
        .await,
        "nothing counted as gone on a Ready node"
    );
    assert!(
        pod(&client, "stuck").await.is_some(),
        "the pod is still terminating"
    );
    watch.check().unwrap();
    sb.stop().await;
}

/// `kubectl reboot status -o json`, with the plugin as built.
fn reboot_status(sb: &Sandbox) -> serde_json::Value {
    let plugin = nodesim::workspace_binary("kubectl-reboot").unwrap_or_else(|e| panic!("{e}"));
    let output = std::process::Command::new(plugin)
        .args(["status", "-o", "json", "--max-unavailable", "2"])
        .env("KUBECONFIG", sb.control_plane.kubeconfig_path())
        .output()
        .expect("kubectl-reboot runs");
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "kubectl reboot status: {text}");
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

fn status_of<'s>(status: &'s serde_json::Value, name: &str) -> &'s serde_json::Value {
    status["nodes"]
        .as_array()
        .and_then(|nodes| nodes.iter().find(|n| n["name"] == name))
        .unwrap_or_else(|| panic!("{name} in {status:#}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_node_back_not_ready_past_the_reboot_timeout_stops_the_rollout_until_it_is_fixed() {
    let config = SandboxConfig::with_nodes(3)
        .max_unavailable("2")
        .reboot_duration(Duration::from_secs(1))
        .controller_args(["--reboot-timeout", "10s"]);
    let sb = e2e::sandbox_without_pods(config).await;
    let client = sb.client.clone();
    sb.fleet.bad_kernel("sim-1", true);
    let watch = BudgetWatch::start(client.clone(), 2).await;
    request_reboot(&sb.control_plane, "sim-1");
    wait_until(
        "sim-1 is back in a new boot, NotReady",
        PATIENCE,
        Some(&watch),
        || async {
            let n = node(&client, "sim-1").await;
            let facts = common::NodeFacts::from_node(&n);
            sb.fleet.reboots("sim-1") == 1
                && facts.annotations.get("reboot-done").map(String::as_str) == Some("true")
                && !common::eviction::node_is_ready(&n)
        },
    )
    .await;
    wait_until(
        "a Warning says sim-1 did not complete within --reboot-timeout, and what to do",
        PATIENCE,
        Some(&watch),
        || async {
            has_event(
                &client,
                "sim-1",
                ControllerReason::RebootOverdue,
                &[
                    "--reboot-timeout (10s)",
                    "new boot but is not Ready",
                    "kubectl annotate node sim-1",
                ],
            )
            .await
        },
    )
    .await;
    assert!(
        kubectl(
            &sb.control_plane,
            &[
                "get",
                "events",
                "--field-selector",
                "involvedObject.name=sim-1,type=Warning,reason=RebootOverdue",
                "-o",
                "name",
            ],
        )
        .contains("event"),
        "RebootOverdue is a Warning"
    );

    // Two more requests, and room for one more in the budget (2, sim-1 takes one): neither
    // is granted while sim-1 is past its timeout.
    request_reboot(&sb.control_plane, "sim-2");
    request_reboot(&sb.control_plane, "sim-3");
    wait_until(
        "the controller tells sim-2 and sim-3 they wait",
        PATIENCE,
        Some(&watch),
        || async {
            has_event(&client, "sim-2", ControllerReason::Requested, &[]).await
                && has_event(&client, "sim-3", ControllerReason::Requested, &[]).await
        },
    )
    .await;
    // The controller looked again since: a grant it decided would show by now.
    e2e::scrape::after_rounds(&sb, 2, None).await;
    for name in ["sim-2", "sim-3"] {
        assert_eq!(
            touched(&sb, name).await,
            None,
            "{name} was granted while sim-1 is past its reboot timeout"
        );
    }
    assert_eq!(
        controller_metric(&sb, "node_reboot_reboots_overdue").await,
        Some(1.0)
    );
    let status = reboot_status(&sb);
    for name in ["sim-2", "sim-3"] {
        let waiting = status_of(&status, name);
        assert_eq!(waiting["reason"], "reboot-overdue", "{waiting:#}");
        assert!(
            waiting["detail"]
                .as_str()
                .is_some_and(|d| d.contains("sim-1 is not back in a new boot and Ready")),
            "{waiting:#}"
        );
    }
    let late = status_of(&status, "sim-1");
    assert!(
        late["detail"]
            .as_str()
            .is_some_and(|d| d.contains("--reboot-timeout")),
        "{late:#}"
    );
    println!(
        "kubectl reboot status: sim-1: {}; sim-2: {}",
        late["detail"],
        status_of(&status, "sim-2")["detail"]
    );

    // The administrator fixes sim-1: Ready in its new boot. The rollout goes on by itself.
    sb.fleet.bad_kernel("sim-1", false);
    sb.fleet.set_ready("sim-1", true).await;
    wait_until(
        "sim-2 and sim-3 are rebooted and every node is done",
        PATIENCE,
        Some(&watch),
        || async {
            let mut done = true;
            for name in ["sim-1", "sim-2", "sim-3"] {
                let n = node(&client, name).await;
                done &= e2e::protocol_annotations(&n).is_empty()
                    && !common::NodeFacts::from_node(&n).unschedulable;
            }
            done && sb.fleet.reboots("sim-2") == 1 && sb.fleet.reboots("sim-3") == 1
        },
    )
    .await;
    assert_eq!(
        controller_metric(&sb, "node_reboot_reboots_overdue").await,
        Some(0.0)
    );
    assert_eq!(sb.fleet.reboots("sim-1"), 1);
    watch.check().unwrap();
    sb.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_node_that_does_not_come_back_holds_the_pool_until_it_is_given_up_by_hand() {
    let config = SandboxConfig::with_nodes(2)
        .max_unavailable("2")
        .reboot_duration(Duration::from_secs(1))
        .controller_args(["--reboot-timeout", "10s"]);
    let sb = e2e::sandbox_without_pods(config).await;
    let client = sb.client.clone();
    // The reboot command has no effect: the node stays in reboot-in-progress, its old boot.
    sb.fleet.swallow_next_reboot("sim-1");
    let watch = BudgetWatch::start(client.clone(), 2).await;
    request_reboot(&sb.control_plane, "sim-1");
    let note: String = eventually(
        "a Warning says sim-1 did not come back within --reboot-timeout",
        PATIENCE,
        Some(&watch),
        || async {
            e2e::node_events(&client, "sim-1")
                .await
                .into_iter()
                .find(|(reason, _, _)| reason == ControllerReason::RebootOverdue.as_str())
                .map(|(_, _, message)| message)
        },
    )
    .await;
    println!("the Warning: {note}");
    assert!(note.contains("has not come back in a new boot"), "{note}");
    request_reboot(&sb.control_plane, "sim-2");
    wait_until("sim-2 is told it waits", PATIENCE, Some(&watch), || async {
        has_event(&client, "sim-2", ControllerReason::Requested, &["sim-1"]).await
    })
    .await;
    assert_eq!(touched(&sb, "sim-2").await, None, "sim-2 granted");

    // The administrator gives sim-1 up with the command the Warning names.
    let command = note
        .split("kubectl annotate node sim-1 ")
        .nth(1)
        .and_then(|rest| rest.split("; or delete").next())
        .unwrap_or_else(|| panic!("a command in: {note}"));
    let mut args = vec!["annotate", "node", "sim-1"];
    args.extend(command.split_whitespace());
    kubectl(&sb.control_plane, &args);
    wait_until(
        "sim-1 is given back (uncordoned, no grant) and sim-2 is rebooted",
        PATIENCE,
        Some(&watch),
        || async {
            let n = node(&client, "sim-1").await;
            e2e::protocol_annotations(&n).is_empty()
                && !common::NodeFacts::from_node(&n).unschedulable
                && sb.fleet.reboots("sim-2") == 1
                && e2e::protocol_annotations(&node(&client, "sim-2").await).is_empty()
        },
    )
    .await;
    assert!(has_event(&client, "sim-1", ControllerReason::Cancelled, &[]).await);
    assert_eq!(sb.fleet.reboots("sim-1"), 0, "the swallowed reboot");
    watch.check().unwrap();
    sb.stop().await;
}

/// `--give-up-after` (kured's `lockTtl`): a node that never comes back from its reboot is
/// given up by the controller once the time has passed, as `kubectl reboot abandon` does: a
/// `GaveUp` Warning, the counter, its slot released and the operator's cordon removed; the
/// rollout goes on to the next node, and the given-up node, NotReady, still counts against
/// the budget until the next node's grant.
#[tokio::test(flavor = "multi_thread")]
async fn a_node_that_never_comes_back_is_given_up_after_give_up_after_and_the_rollout_goes_on() {
    let config = SandboxConfig::with_nodes(2)
        .max_unavailable("2")
        .reboot_duration(Duration::from_secs(1))
        .controller_args(["--reboot-timeout", "5s", "--give-up-after", "10s"]);
    let sb = e2e::sandbox_without_pods(config).await;
    let client = sb.client.clone();
    let watch = BudgetWatch::start(client.clone(), 2).await;
    sb.fleet.swallow_next_reboot("sim-1");
    request_reboot(&sb.control_plane, "sim-1");
    e2e::rollout::never_comes_back(&sb, "sim-1", &watch).await;
    wait_until(
        "the controller gives sim-1 up",
        PATIENCE,
        Some(&watch),
        || async {
            has_event(
                &client,
                "sim-1",
                ControllerReason::GaveUp,
                &["--give-up-after"],
            )
            .await
                && has_event(
                    &client,
                    "sim-1",
                    ControllerReason::RebootAbandoned,
                    &["by reboot-controller"],
                )
                .await
        },
    )
    .await;
    assert_eq!(
        controller_metric(&sb, "node_reboot_reboots_given_up_total").await,
        Some(1.0)
    );
    wait_until(
        "sim-1's slot is released",
        PATIENCE,
        Some(&watch),
        || async {
            let lease = ledger(&client).await;
            let slots = lease.and_then(|l| slots_of(l.metadata.annotations.as_ref()).ok());
            slots.is_some_and(|slots| !slots.contains_key("sim-1"))
        },
    )
    .await;
    let facts = common::NodeFacts::from_node(&node(&client, "sim-1").await);
    assert!(!facts.unschedulable, "the operator's cordon is removed");
    // The rollout goes on: sim-2 is rebooted; sim-1, NotReady, used one unit of the budget.
    request_reboot(&sb.control_plane, "sim-2");
    wait_until("sim-2 is rebooted", PATIENCE, Some(&watch), || async {
        sb.fleet.reboots("sim-2") == 1
    })
    .await;
    sb.stop().await;
}
