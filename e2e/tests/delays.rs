//! Delays and forcing (kured's `--drain-delay`, `--reboot-delay`, `--force-reboot`), on a
//! control plane with the scheduler and the controller-manager, so that Deployments and
//! PodDisruptionBudgets are real. The delays are checked on the times the system wrote (the
//! slot's grant time, the Events' times), never on how long the test waited.

use common::{ControllerReason, events::CONTROLLER};
use e2e::{
    BudgetWatch, apply, has_event, node, pod_that_blocks_the_drain_of, protocol_annotations,
    request_reboot,
    scrape::{metric, scrape},
    wait_for_event, wait_until, wait_until_the_budget_allows_no_disruption,
};
use k8s_openapi::jiff::Timestamp;
use kube::{Api, Client, api::ListParams};
use nodesim::sandbox::Sandbox;
use std::time::Duration;

const ROLLOUT: Duration = Duration::from_secs(240);

/// One Event about a node as the reporter wrote it.
#[derive(Debug)]
struct Step {
    type_: String,
    reason: String,
    action: String,
    note: String,
    at: Timestamp,
}

/// The controller's Events about `node`, in the order the API server stored them.
async fn steps(client: &Client, node: &str) -> Vec<Step> {
    e2e::events_about(client, node)
        .await
        .into_iter()
        .filter(|e| e.reporting_component.as_deref() == Some(CONTROLLER))
        .map(|e| Step {
            type_: e.type_.unwrap_or_default(),
            reason: e.reason.unwrap_or_default(),
            action: e.action.unwrap_or_default(),
            note: e.message.unwrap_or_default(),
            at: e
                .event_time
                .map(|t| t.0)
                .expect("the controller's Events have an eventTime"),
        })
        .collect()
}

/// Waits until `sim-1` has rebooted once and is out of the protocol (completed).
async fn wait_until_sim_1_is_rebooted_and_back(sb: &Sandbox, watch: &BudgetWatch) {
    let what = "sim-1 rebooted once and back";
    wait_until(what, ROLLOUT, Some(watch), || async {
        sb.fleet.reboots("sim-1") == 1
            && protocol_annotations(&node(&sb.client, "sim-1").await).is_empty()
    })
    .await;
}

/// The first step with this reason and action, with its place.
fn find<'a>(steps: &'a [Step], reason: ControllerReason, action: &str) -> (usize, &'a Step) {
    steps
        .iter()
        .enumerate()
        .find(|(_, s)| s.reason == reason.as_str() && s.action == action)
        .unwrap_or_else(|| panic!("no {reason}/{action} Event in {steps:#?}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn the_drain_and_reboot_now_wait_for_their_delays() {
    let sb = e2e::sandbox_with_pods(2, "1", &["--drain-delay", "6s", "--reboot-delay", "6s"]).await;
    apply(&sb.control_plane, e2e::ONE_POD_ON_SIM_1);
    wait_until("the pod of `one` runs on sim-1", ROLLOUT, None, || async {
        let pods = Api::<k8s_openapi::api::core::v1::Pod>::namespaced(sb.client.clone(), "default")
            .list(&ListParams::default().labels("app=one"))
            .await
            .expect("list pods");
        pods.items.iter().any(e2e::pod_is_ready)
    })
    .await;
    let watch = BudgetWatch::start(sb.client.clone(), 1).await;
    request_reboot(&sb.control_plane, "sim-1");
    wait_until_sim_1_is_rebooted_and_back(&sb, &watch).await;
    wait_for_event(
        &sb.client,
        "sim-1",
        ControllerReason::Rebooted,
        &["slot held since"],
        Some(&watch),
    )
    .await;
    let steps = steps(&sb.client, "sim-1").await;
    let (cordoned, _) = find(&steps, ControllerReason::Draining, "DrainDelayed");
    let (evicting, drain_start) = find(&steps, ControllerReason::Draining, "Draining");
    let (drained, _) = find(&steps, ControllerReason::Draining, "RebootDelayed");
    let (approved, approval) = find(&steps, ControllerReason::RebootApproved, "RebootApproved");
    assert!(
        cordoned < evicting && evicting < drained && drained < approved,
        "cordon, drain, reboot-now, in this order: {steps:#?}"
    );
    let (_, rebooted) = find(&steps, ControllerReason::Rebooted, "Rebooted");
    let granted: Timestamp = rebooted
        .note
        .split("slot held since ")
        .nth(1)
        .and_then(|rest| rest.strip_suffix(')'))
        .and_then(|at| at.parse().ok())
        .unwrap_or_else(|| panic!("the grant's time in {:?}", rebooted.note));
    // The node is cordoned right after its grant is recorded: the drain starts at least the
    // drain delay after it, and reboot-now is set at least the reboot delay after the drain.
    let six = k8s_openapi::jiff::SignedDuration::from_secs(6);
    assert!(
        drain_start.at >= granted + six,
        "the drain started at {} though the slot was granted at {granted} with --drain-delay 6s",
        drain_start.at
    );
    assert!(
        approval.at >= granted + six + six,
        "reboot-now was set at {} though the slot was granted at {granted} with --drain-delay 6s \
         and --reboot-delay 6s",
        approval.at
    );
    sb.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn with_force_reboot_a_drain_that_times_out_reboots_the_node_anyway() {
    // With the defaults otherwise: the pre-flight check of budgets is on, and the budget is
    // at 0 before the request. With --force-reboot it holds no node; it says the drain will
    // be forced.
    let args = ["--drain-timeout", "5s", "--force-reboot"];
    let sb = e2e::sandbox_with_pods(2, "1", &args).await;
    apply(&sb.control_plane, &pod_that_blocks_the_drain_of("sim-1"));
    wait_until_the_budget_allows_no_disruption(&sb.control_plane).await;
    let watch = BudgetWatch::start(sb.client.clone(), 1).await;
    request_reboot(&sb.control_plane, "sim-1");
    wait_for_event(
        &sb.client,
        "sim-1",
        ControllerReason::DisruptionBudget,
        &[
            "granted although",
            "the pod default/precious",
            "the PodDisruptionBudget default/never-disrupt allows no disruption",
            "--force-reboot",
            "--drain-timeout (5s)",
        ],
        Some(&watch),
    )
    .await;
    wait_for_event(
        &sb.client,
        "sim-1",
        ControllerReason::RebootForced,
        &["default/precious", "never-disrupt", "--force-reboot"],
        Some(&watch),
    )
    .await;
    wait_until_sim_1_is_rebooted_and_back(&sb, &watch).await;
    assert!(
        !has_event(&sb.client, "sim-1", ControllerReason::DrainBlocked, &[]).await,
        "the drain was not abandoned"
    );
    let forced = steps(&sb.client, "sim-1").await;
    let (_, warning) = find(&forced, ControllerReason::RebootForced, "RebootForced");
    assert_eq!(warning.type_, "Warning", "{warning:?}");
    assert!(warning.note.contains("still on the node"), "{warning:?}");
    let address = sb.controllers[0]
        .metrics_address()
        .expect("metrics address");
    assert_eq!(
        metric(&scrape(address).await, "node_reboot_reboots_forced_total"),
        Some(1.0)
    );
    sb.stop().await;
}
