//! The pause, the windows and the gates fence granted nodes, not only new grants (invariant 9
//! of docs/src/design.md), end to end on the real control plane with the real controller, real
//! agents on simulated nodes and a REAL Prometheus: a grant that landed before a pause, or that
//! a replica wrote after an alert fired (it had decided before), does not move its node
//! further (cordon, drain, `reboot-now`) until the fence lifts; then the node goes on.

use common::ControllerReason;
use common::ledger::LEDGER_NAME;
use e2e::rollout::annotate_ledger;
use e2e::{
    BudgetWatch, NodeState, apply, has_event, kubectl, node, pod_that_blocks_the_drain_of,
    protocol_annotations, request_reboot,
    rollout::{back, ledger_is_empty_on, ledger_slots, touched},
    scrape::controller_metric,
    wait_until,
};
use kube::Client;
use nodesim::sandbox::{Sandbox, SandboxConfig};
use std::{process::Command, time::Duration};
use testenv::{Prometheus, rules};

const ALERT: &str = "E2EMaintenanceBlocker";
const PHASE: Duration = Duration::from_secs(120);
/// The words of the Event a granted node gets when a fence holds it.
const HELD: &str = common::events::NOTE_HELD;

/// Whether the ledger holds a slot for `name`.
async fn holds_slot(client: &Client, name: &str) -> bool {
    ledger_slots(client, LEDGER_NAME)
        .await
        .is_some_and(|slots| slots.contains_key(name))
}

fn signal(pid: u32, which: &str) {
    let status = Command::new("kill")
        .args([which, &pid.to_string()])
        .status()
        .expect("kill runs");
    assert!(status.success(), "kill {which} {pid}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pause_after_the_grant_keeps_the_drained_node_from_rebooting_until_resumed() {
    let config = SandboxConfig::with_nodes(2)
        .reboot_duration(Duration::from_secs(1))
        // The drain must start though the budget allows no disruption.
        .controller_args(["--check-disruption-budgets=false"]);
    let sb = Sandbox::start(config).await.expect("sandbox starts");
    let client = sb.client.clone();
    let name = sb.fleet.names()[0].clone();
    let watch = BudgetWatch::start(client.clone(), 1).await;
    apply(&sb.control_plane, &pod_that_blocks_the_drain_of(&name));
    wait_until(
        "the PDB allows no disruption",
        PHASE,
        Some(&watch),
        || async {
            let status = "jsonpath={.status.currentHealthy}/{.status.disruptionsAllowed}";
            kubectl(
                &sb.control_plane,
                &["get", "pdb", "never-disrupt", "-o", status],
            ) == "1/0"
        },
    )
    .await;
    request_reboot(&sb.control_plane, &name);
    wait_until("the node is draining", PHASE, Some(&watch), || {
        has_event(&client, &name, ControllerReason::Draining, &[])
    })
    .await;

    annotate_ledger(&sb.control_plane, "reboot-paused=true");
    wait_until(
        "the controller sees the pause",
        PHASE,
        Some(&watch),
        || async { controller_metric(&sb, "node_reboot_paused").await == Some(1.0) },
    )
    .await;
    // The drain can now end: the node is drained while paused.
    kubectl(
        &sb.control_plane,
        &["delete", "pod", "precious", "--wait=false"],
    );
    kubectl(&sb.control_plane, &["delete", "pdb", "never-disrupt"]);
    wait_until(
        "the drained node is held (or told to reboot)",
        PHASE,
        Some(&watch),
        || async {
            has_event(
                &client,
                &name,
                ControllerReason::Paused,
                &[HELD, "until an administrator resumes"],
            )
            .await
                || sb.fleet.reboots(&name) > 0
                || protocol_annotations(&node(&client, &name).await)
                    .iter()
                    .any(|k| k == "reboot-now" || k == "reboot-in-progress")
        },
    )
    .await;
    let annotations = protocol_annotations(&node(&client, &name).await);
    assert!(
        sb.fleet.reboots(&name) == 0
            && !annotations
                .iter()
                .any(|k| k == "reboot-now" || k == "reboot-in-progress"),
        "{name} was told to reboot while the pool was paused: {annotations:?}"
    );
    let state = NodeState::of(&node(&client, &name).await);
    assert!(state.unschedulable, "{name} stays cordoned: {state}");
    assert!(holds_slot(&client, &name).await, "{name} keeps its slot");
    assert_eq!(
        controller_metric(&sb, "node_reboot_held_grants").await,
        Some(1.0)
    );

    annotate_ledger(&sb.control_plane, "reboot-paused-");
    wait_until(
        "the node reboots once resumed",
        PHASE,
        Some(&watch),
        || async { back(&sb, &name, 1).await && ledger_is_empty_on(&client).await },
    )
    .await;
    watch
        .check()
        .unwrap_or_else(|violation| panic!("{violation}"));
    sb.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_grant_written_after_an_alert_fired_is_not_claimed_until_the_gate_opens_nor_while_paused()
{
    let prometheus = Prometheus::start(&rules(ALERT, true))
        .await
        .expect("Prometheus starts (make testenv builds it)");
    let url = prometheus.url();
    let config = SandboxConfig::with_nodes(2)
        .reboot_duration(Duration::from_secs(1))
        .controller_args([
            // A frozen API server must not depose it: it is the replica whose write is late.
            "--leader-elect=false",
            "--prometheus-url",
            &url,
            "--alert-check-period",
            "1s",
            "--prometheus-timeout",
            "2s",
        ]);
    let sb = e2e::sandbox_without_pods(config).await;
    let client = sb.client.clone();
    let name = sb.fleet.names()[0].clone();
    let watch = BudgetWatch::start(client.clone(), 1).await;
    request_reboot(&sb.control_plane, &name);
    wait_until("the alert holds the request", PHASE, Some(&watch), || {
        has_event(&client, &name, ControllerReason::AlertsFiring, &[ALERT])
    })
    .await;

    // The API server stops answering (SIGSTOP): the controller's next write of the ledger is
    // sent, and lands only later, as a replica frozen between deciding and its write would.
    let apiserver = sb
        .control_plane
        .pid("kube-apiserver")
        .expect("the API server runs");
    signal(apiserver, "-STOP");
    prometheus
        .set_rules(&rules(ALERT, false))
        .expect("rules written");
    wait_until(
        "the controller reads the alert resolved (and grants on it)",
        PHASE,
        None,
        || async {
            controller_metric(&sb, "node_reboot_gate_open{gate=\"alerts\"}").await == Some(1.0)
        },
    )
    .await;
    // Its round decides at once on that answer; its grant is now in flight.
    tokio::time::sleep(Duration::from_secs(1)).await;
    prometheus
        .set_rules(&rules(ALERT, true))
        .expect("rules written");
    wait_until("the alert fires again", PHASE, None, || async {
        prometheus
            .active_alerts()
            .await
            .is_ok_and(|a| a.contains(ALERT) && a.contains("firing"))
    })
    .await;
    // Long enough that the controller's last answer (resolved) is too old to act on.
    tokio::time::sleep(Duration::from_secs(3)).await;
    signal(apiserver, "-CONT");

    wait_until(
        "the late grant lands and is held (or claimed)",
        PHASE,
        Some(&watch),
        || async {
            holds_slot(&client, &name).await
                && (has_event(&client, &name, ControllerReason::AlertsFiring, &[HELD]).await
                    || touched(&sb, &name).await.is_some())
        },
    )
    .await;
    let now = node(&client, &name).await;
    assert!(
        touched(&sb, &name).await.is_none(),
        "{name} was claimed while the alert fired: {} {:?}",
        NodeState::of(&now),
        protocol_annotations(&now)
    );

    // Paused: the pause holds the grant, and still does once the alert resolves.
    annotate_ledger(&sb.control_plane, "reboot-paused=true");
    wait_until(
        "the paused grant is held (or claimed)",
        PHASE,
        Some(&watch),
        || async {
            has_event(&client, &name, ControllerReason::Paused, &[HELD]).await
                || touched(&sb, &name).await.is_some()
        },
    )
    .await;
    prometheus
        .set_rules(&rules(ALERT, false))
        .expect("rules written");
    wait_until("the alert resolves", PHASE, Some(&watch), || async {
        prometheus
            .active_alerts()
            .await
            .is_ok_and(|a| !a.contains(ALERT))
    })
    .await;
    // A few alert check periods: the gate alone would let it go on by now.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        touched(&sb, &name).await.is_none(),
        "{name} was claimed while the pool was paused"
    );
    assert!(holds_slot(&client, &name).await, "{name} keeps its grant");

    annotate_ledger(&sb.control_plane, "reboot-paused-");
    wait_until(
        "the node reboots once resumed",
        PHASE,
        Some(&watch),
        || async { back(&sb, &name, 1).await && ledger_is_empty_on(&client).await },
    )
    .await;
    watch
        .check()
        .unwrap_or_else(|violation| panic!("{violation}"));
    sb.stop().await;
}
