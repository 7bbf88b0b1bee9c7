//! What an administrator types by hand, end to end on the real control plane with the real
//! controller and agents on simulated nodes: an opt-out label (`reboot-disabled`) with any
//! value but `false` keeps the node from every reboot, automatic or requested, and an
//! unexpected value is said in a Warning; a give-up (`reboot-abandon`) that reads as no gives
//! nothing up; and a node that stops waiting for its reboot loses the waiting taint the
//! operator put on it, never the administrator's own.

use common::{AgentReason, ControllerReason};
use e2e::{
    BudgetWatch, NodeHistory, PENDING_TAINT, has_pending_taint, in_run, kubectl, label_node, node,
    request_reboot,
    rollout::{annotate_ledger, ledger_is_empty},
    times_reported, wait_for_event, wait_until,
};
use k8s_openapi::api::core::v1::Node;
use nodesim::sandbox::SandboxConfig;
use std::time::Duration;

const PHASE: Duration = Duration::from_secs(120);

fn annotation(n: &Node, key: &str) -> Option<String> {
    n.metadata.annotations.as_ref()?.get(key).cloned()
}

/// Its reboot completed: nothing of the protocol left but what the administrator typed.
fn completed(n: &Node) -> bool {
    let state = e2e::NodeState::of(n);
    state.last_completed.is_some()
        && state.annotations.iter().all(|a| a == "reboot-abandon")
        && !state.unschedulable
}

#[tokio::test(flavor = "multi_thread")]
async fn any_opt_out_value_but_false_keeps_a_node_from_its_reboot_and_a_no_gives_nothing_up() {
    let config = SandboxConfig::with_nodes(4)
        .max_unavailable("2")
        .reboot_duration(Duration::from_secs(1))
        .agent_args([
            "--reboot-sentinel-file={node_dir}/run/reboot-required",
            "--check-period=1s",
        ]);
    let sb = e2e::sandbox_without_pods(config).await;
    let (client, cp) = (sb.client.clone(), &sb.control_plane);
    let watch = BudgetWatch::start(client.clone(), 2).await;
    let (yes, empty, no, abandon_no) = ("sim-1", "sim-2", "sim-3", "sim-4");
    let histories = [
        NodeHistory::start(client.clone(), yes).await,
        NodeHistory::start(client.clone(), empty).await,
    ];
    label_node(cp, yes, "reboot-disabled=yes");
    label_node(cp, empty, "reboot-disabled=");
    label_node(cp, no, "reboot-disabled=false");

    // The operating system asks on three nodes: only the one whose label says `false` is
    // requested by its agent, and rebooted.
    for name in [yes, empty, no] {
        std::fs::write(in_run(&sb, name, "reboot-required"), "").unwrap();
    }
    wait_until(
        "the node labelled reboot-disabled=false is requested by its agent and rebooted",
        PHASE,
        Some(&watch),
        || async { sb.fleet.reboots(no) == 1 && completed(&node(&client, no).await) },
    )
    .await;
    for (name, history) in [yes, empty].into_iter().zip(&histories) {
        // The agent has read the sentinel and the label: only now can it be seen not asking.
        let typed = if name == yes { "\"yes\"" } else { "\"\"" };
        wait_for_event(
            &client,
            name,
            AgentReason::UnexpectedOptOutValue,
            &[&format!("reboot-disabled={typed}"), "read as opted out"],
            Some(&watch),
        )
        .await;
        assert_eq!(sb.fleet.reboots(name), 0, "{name} was rebooted");
        let n = node(&client, name).await;
        assert_eq!(
            annotation(&n, "reboot-requested-by"),
            None,
            "{name}'s agent asked"
        );
        assert_eq!(annotation(&n, "reboot-needed"), None);
        history.catch_up(&client).await;
        history.check().unwrap_or_else(|e| panic!("{e}"));
        let states = history.states();
        assert!(
            states
                .iter()
                .all(|s| s.requested_by.is_none()
                    && !s.annotations.iter().any(|a| a == "reboot-needed")),
            "{name}'s agent asked at some point: {states:#?}"
        );
    }

    // An administrator's requests: never granted, each told how its label was read.
    kubectl(cp, &["annotate", "node", yes, empty, "reboot-needed=true"]);
    // A give-up typed `no` on a requested node: not one; the node is rebooted.
    kubectl(
        cp,
        &[
            "annotate",
            "node",
            abandon_no,
            "reboot-abandon=no",
            "reboot-needed=true",
        ],
    );
    wait_until(
        "the node whose reboot-abandon says no is rebooted",
        PHASE,
        Some(&watch),
        || async {
            sb.fleet.reboots(abandon_no) == 1 && completed(&node(&client, abandon_no).await)
        },
    )
    .await;
    wait_for_event(
        &client,
        abandon_no,
        ControllerReason::UnexpectedAbandonValue,
        &["reboot-abandon=\"no\"", "not a give-up"],
        Some(&watch),
    )
    .await;
    assert_eq!(
        annotation(&node(&client, abandon_no).await, "reboot-abandon").as_deref(),
        Some("no"),
        "the administrator's value was removed"
    );
    // The controller has read each request and how the label reads (both Events come from
    // the round that decides not to grant), while sim-4's reboot took many rounds meanwhile.
    for name in [yes, empty] {
        let typed = if name == yes { "\"yes\"" } else { "\"\"" };
        wait_for_event(
            &client,
            name,
            ControllerReason::UnexpectedOptOutValue,
            &[&format!("reboot-disabled={typed}"), "read as opted out"],
            Some(&watch),
        )
        .await;
        wait_for_event(
            &client,
            name,
            ControllerReason::RebootDisabled,
            &[&format!("reboot-disabled={typed}"), "never rebooted"],
            Some(&watch),
        )
        .await;
    }
    watch.check().unwrap_or_else(|v| panic!("{v}"));
    for (name, history) in [yes, empty].into_iter().zip(&histories) {
        history.catch_up(&client).await;
        history.check().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(sb.fleet.reboots(name), 0, "{name} was rebooted");
        let states = history.states();
        assert!(
            states
                .iter()
                .all(|s| !s.unschedulable && !s.annotations.iter().any(|a| a != "reboot-needed")),
            "{name} was cordoned or granted: {states:#?}"
        );
        assert!(
            states.iter().all(|s| s.requested_by.is_none()),
            "{name}'s agent asked at some point: {states:#?}"
        );
    }
    sb.stop().await;
}

/// Waits for a round of the controller that began after the rounds so far had ended, so that
/// whatever they wrote is on the nodes: a new value typed on `invalid` (whose `reboot-needed`
/// is no request already) is warned about only by a round that reads it.
async fn a_later_round(
    cp: &testenv::ControlPlane,
    client: &kube::Client,
    invalid: &str,
    watch: &BudgetWatch,
) {
    let warned = || times_reported(client, invalid, ControllerReason::InvalidRequest);
    let before = warned().await;
    let value = "reboot-needed=later";
    kubectl(cp, &["annotate", "node", invalid, value, "--overwrite"]);
    let what = format!("the controller warns of {value} on {invalid}");
    wait_until(&what, PHASE, Some(watch), || async {
        warned().await > before
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_node_that_stops_waiting_loses_the_waiting_taint_but_not_the_administrators() {
    let config = SandboxConfig::with_nodes(4).controller_args([
        format!("--prefer-no-schedule-taint={PENDING_TAINT}"),
        "--node-selector=!out".to_owned(),
    ]);
    let sb = e2e::sandbox_without_pods(config).await;
    let (client, cp) = (sb.client.clone(), &sb.control_plane);
    let watch = BudgetWatch::start(client.clone(), 1).await;
    // Paused: every request waits, tainted. The controller makes its ledger once it leads.
    wait_until(
        "the controller made its ledger",
        PHASE,
        Some(&watch),
        || ledger_is_empty(&sb),
    )
    .await;
    annotate_ledger(cp, "reboot-paused=true");
    // The administrator's own taint of that key, before any request: theirs.
    let (invalid, opted_out, left, admins) = ("sim-1", "sim-2", "sim-3", "sim-4");
    kubectl(
        cp,
        &[
            "taint",
            "node",
            admins,
            &format!("{PENDING_TAINT}=mine:PreferNoSchedule"),
        ],
    );
    for name in [invalid, opted_out, left, admins] {
        request_reboot(cp, name);
    }
    wait_until(
        "the waiting nodes are tainted",
        PHASE,
        Some(&watch),
        || async {
            let mut all = true;
            for name in [invalid, opted_out, left] {
                let n = node(&client, name).await;
                all &= has_pending_taint(&n) && annotation(&n, "reboot-tainted").is_some();
            }
            all
        },
    )
    .await;
    assert_eq!(
        annotation(&node(&client, admins).await, "reboot-tainted"),
        None,
        "the administrator's taint was taken for the operator's"
    );

    // Each stops waiting: a request that is no longer one, an opt-out, a relabel out of the
    // pool; the administrator's node is opted out too.
    kubectl(
        cp,
        &[
            "annotate",
            "node",
            invalid,
            "reboot-needed=yes",
            "--overwrite",
        ],
    );
    label_node(cp, opted_out, "reboot-disabled=yes");
    label_node(cp, left, "out=true");
    label_node(cp, admins, "reboot-disabled=true");
    wait_until(
        "the nodes that stopped waiting lose the waiting taint",
        PHASE,
        Some(&watch),
        || async {
            let mut none = true;
            for name in [invalid, opted_out, left] {
                let n = node(&client, name).await;
                none &= !has_pending_taint(&n) && annotation(&n, "reboot-tainted").is_none();
            }
            none
        },
    )
    .await;
    // The controller has read each change: it says how it read the value typed by hand and
    // that the opted-out node is never rebooted (the relabelled one lost its taint above).
    wait_for_event(
        &client,
        invalid,
        ControllerReason::InvalidRequest,
        &["reboot-needed=\"yes\""],
        Some(&watch),
    )
    .await;
    wait_for_event(
        &client,
        opted_out,
        ControllerReason::UnexpectedOptOutValue,
        &["reboot-disabled=\"yes\"", "read as opted out"],
        Some(&watch),
    )
    .await;
    wait_for_event(
        &client,
        admins,
        ControllerReason::RebootDisabled,
        &["reboot-disabled=true", "never rebooted"],
        Some(&watch),
    )
    .await;
    a_later_round(cp, &client, invalid, &watch).await;
    let admins_node = node(&client, admins).await;
    assert!(
        has_pending_taint(&admins_node),
        "the administrator's taint was removed"
    );
    for name in [invalid, opted_out, left] {
        let n = node(&client, name).await;
        assert!(!has_pending_taint(&n), "{name} was tainted again");
        assert_eq!(sb.fleet.reboots(name), 0);
    }
    sb.stop().await;
}
