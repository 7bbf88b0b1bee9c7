//! When a node does not behave (issue 24), end to end on the real control plane with real
//! agents: a pause value typed during an incident pauses.

use common::ledger::{LEDGER_NAME, OPERATOR_NAMESPACE, slots_of};
use e2e::{BudgetWatch, eventually, has_event, kubectl, node, request_reboot, wait_until};
use k8s_openapi::api::{coordination::v1::Lease, core::v1::Event};
use kube::{Api, Client, api::ListParams};
use nodesim::sandbox::{Sandbox, SandboxConfig};
use std::time::Duration;

const PATIENCE: Duration = Duration::from_secs(120);

async fn sandbox(nodes: usize, controller_args: &[&str]) -> Sandbox {
    e2e::sandbox_without_pods(SandboxConfig {
        nodes,
        max_unavailable: "1".into(),
        reboot_duration: Duration::from_secs(1),
        controller_args: controller_args.iter().map(|a| (*a).to_owned()).collect(),
        ..SandboxConfig::default()
    })
    .await
}

async fn ledger(client: &Client) -> Option<Lease> {
    Api::<Lease>::namespaced(client.clone(), OPERATOR_NAMESPACE)
        .get_opt(LEDGER_NAME)
        .await
        .expect("read the ledger Lease")
}

/// The Events about the ledger Lease, as `(type, reason, message)`.
async fn ledger_events(client: &Client) -> Vec<(String, String, String)> {
    let params = ListParams::default().fields(&format!("involvedObject.name={LEDGER_NAME}"));
    Api::<Event>::namespaced(client.clone(), OPERATOR_NAMESPACE)
        .list(&params)
        .await
        .expect("list events")
        .items
        .into_iter()
        .map(|e| {
            (
                e.type_.unwrap_or_default(),
                e.reason.unwrap_or_default(),
                e.message.unwrap_or_default(),
            )
        })
        .collect()
}

/// Whether the node carries a grant or was cordoned or rebooted: anything a grant starts.
async fn granted(sb: &Sandbox, name: &str) -> Option<String> {
    let n = node(&sb.client, name).await;
    let facts = common::NodeFacts::from_node(&n);
    let keys = common::AnnotationKeys::default();
    if let Some(grant) = facts.annotations.get(&keys.grant) {
        return Some(format!("it carries {}={grant}", keys.grant));
    }
    if facts.unschedulable {
        return Some("it was cordoned".into());
    }
    (sb.fleet.reboots(name) > 0).then(|| "it was rebooted".into())
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
    let lease = format!("lease/{LEDGER_NAME}");
    let annotate = |value: &str| {
        kubectl(
            &sb.control_plane,
            &[
                "annotate",
                "-n",
                OPERATOR_NAMESPACE,
                &lease,
                value,
                "--overwrite",
            ],
        );
    };
    // As typed during an incident.
    annotate("reboot-paused=True");
    let watch = BudgetWatch::start(client.clone(), 1).await;
    request_reboot(&sb.control_plane, "sim-1");

    // Either the controller says the node waits for the pause, or it grants: whichever first.
    let outcome: Option<String> = eventually(
        "sim-1 is told the pool is paused, or is granted",
        PATIENCE,
        Some(&watch),
        || async {
            if let Some(what) = granted(&sb, "sim-1").await {
                return Some(Some(what));
            }
            has_event(&client, "sim-1", "Paused", &[])
                .await
                .then_some(None)
        },
    )
    .await;
    assert_eq!(
        outcome, None,
        "sim-1 was granted while reboot-paused=True is on the ledger"
    );
    // A grant decided from a copy of the ledger read before the pause would show by now.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(granted(&sb, "sim-1").await, None, "granted while paused");
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
                    && reason == "UnexpectedPauseValue"
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
        .find(|(_, reason, _)| reason == "UnexpectedPauseValue")
        .map(|(_, _, message)| message);
    println!("the Warning: {}", warning.unwrap_or_default());

    // `false` is the way out the Warning names: the reboot goes ahead.
    annotate("reboot-paused=false");
    wait_until("sim-1 is rebooted", PATIENCE, Some(&watch), || async {
        sb.fleet.reboots("sim-1") == 1
    })
    .await;
    watch.check().unwrap();
    sb.stop().await;
}
