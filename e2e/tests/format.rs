//! State in a format this build does not know (a newer operator wrote it, and this one is the
//! old replica of an upgrade, or was rolled back), on the real control plane with the real
//! controller and agents: written by hand with kubectl, it is refused with a Warning Event
//! naming the version found, the one known and the fix, and the `unknown_format` metric; the
//! budget holds (a node that cannot be read counts as unavailable, a ledger that cannot be read
//! is not taken for an empty one); once the state is readable again the rollout finishes.

use common::ledger::{FORMAT_ANNOTATION, LEDGER_NAME, OPERATOR_NAMESPACE};
use common::{AgentReason, ControllerReason};
use e2e::{
    BudgetWatch, has_event, kubectl, node, protocol_annotations, request_reboot,
    rollout::{annotate_ledger, ledger_events, rollout_completes},
    scrape::controller_metric,
    wait_for_event, wait_until,
};
use k8s_openapi::api::coordination::v1::Lease;
use kube::{Api, Client};
use nodesim::sandbox::{Sandbox, SandboxConfig};
use std::time::Duration;

const PHASE: Duration = Duration::from_secs(120);

async fn sandbox() -> Sandbox {
    let config = SandboxConfig::with_nodes(3).reboot_duration(Duration::from_secs(1));
    Sandbox::start(config).await.expect("sandbox starts")
}

/// Whether a node carries anything the controller writes for a grant.
async fn granted(client: &Client, name: &str) -> bool {
    let n = node(client, name).await;
    let annotations = protocol_annotations(&n);
    annotations
        .iter()
        .any(|k| k == "reboot-grant" || k == "reboot-cordoned")
        || common::NodeFacts::from_node(&n).unschedulable
}

/// The messages of the UnknownFormat Events about the ledger Lease.
async fn ledger_refusals(client: &Client) -> Vec<String> {
    ledger_events(client)
        .await
        .into_iter()
        .filter(|(_, reason, _)| reason == ControllerReason::UnknownFormat.as_str())
        .map(|(_, _, message)| message)
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_node_a_newer_operator_wrote_is_left_alone_and_counts_against_the_budget() {
    let sb = sandbox().await;
    let client = sb.client.clone();
    let names = sb.fleet.names();
    let (newer, other, third) = (&names[0], &names[1], &names[2]);
    let watch = BudgetWatch::start(client.clone(), 1).await;

    // A newer operator's go-ahead, which this version cannot read (its meaning may differ).
    kubectl(
        &sb.control_plane,
        &[
            "annotate",
            "node",
            newer,
            "reboot-now=true",
            "reboot-protocol-version=2",
        ],
    );
    let words = ["\"2\"", "up to 1", "upgrade the operator"];
    wait_for_event(
        &client,
        newer,
        ControllerReason::UnknownFormat,
        &words,
        Some(&watch),
    )
    .await;
    wait_until("the controller counts it", PHASE, Some(&watch), || async {
        controller_metric(&sb, "node_reboot_unknown_format{object=\"node\"}").await == Some(1.0)
    })
    .await;
    wait_until("the agent says it refuses", PHASE, Some(&watch), || {
        has_event(&client, newer, AgentReason::UnknownFormat, &[])
    })
    .await;
    assert_eq!(
        sb.fleet.reboots(newer),
        0,
        "a go-ahead it cannot read rebooted"
    );

    // Counted as unavailable, it uses the budget of 1: a request of this version waits.
    request_reboot(&sb.control_plane, other);
    wait_until("the request is seen", PHASE, Some(&watch), || {
        has_event(&client, other, ControllerReason::Requested, &[])
    })
    .await;
    assert!(!granted(&client, other).await, "granted beyond the budget");
    assert_eq!(
        sb.fleet.reboots(newer),
        0,
        "a go-ahead it cannot read rebooted"
    );
    // Nor is the node it cannot read taken into its ledger (it is not this version's reboot).
    assert!(
        e2e::rollout::ledger_is_empty_on(&client).await,
        "a node it cannot read was adopted"
    );

    // An operator that knows the format would finish it; here the state is made this
    // version's again, and the rollout finishes within budget.
    kubectl(
        &sb.control_plane,
        &["annotate", "node", newer, "reboot-protocol-version-"],
    );
    request_reboot(&sb.control_plane, third);
    rollout_completes(&sb, &watch).await;
    wait_until("the metric is back to 0", PHASE, Some(&watch), || async {
        controller_metric(&sb, "node_reboot_unknown_format{object=\"node\"}").await == Some(0.0)
    })
    .await;
    watch.check().expect("budget held");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_ledger_a_newer_operator_wrote_holds_every_grant() {
    let sb = sandbox().await;
    let client = sb.client.clone();
    let names = sb.fleet.names();
    let watch = BudgetWatch::start(client.clone(), 1).await;
    wait_until("the ledger exists", PHASE, Some(&watch), || async {
        e2e::rollout::ledger_is_empty_on(&client).await
    })
    .await;
    annotate_ledger(&sb.control_plane, &format!("{FORMAT_ANNOTATION}=2"));
    wait_until("the refusal is said", PHASE, Some(&watch), || async {
        ledger_refusals(&client).await.iter().any(|m| {
            m.contains("\"2\"") && m.contains("up to 1") && m.contains("upgrade the operator")
        })
    })
    .await;
    wait_until("the metric says so", PHASE, Some(&watch), || async {
        controller_metric(&sb, "node_reboot_unknown_format{object=\"ledger\"}").await == Some(1.0)
    })
    .await;
    // Read as empty, the ledger would let these be granted: none is.
    for name in &names {
        request_reboot(&sb.control_plane, name);
    }
    // The controller's cache has them (its gauges count them); it grants none.
    wait_until(
        "the controller saw the requests",
        PHASE,
        Some(&watch),
        || async {
            controller_metric(&sb, "node_reboot_nodes{state=\"requested\"}").await
                == Some(names.len() as f64)
        },
    )
    .await;
    for name in &names {
        assert!(
            !granted(&client, name).await,
            "{name} granted from a ledger it cannot read"
        );
    }
    assert_eq!(sb.fleet.total_reboots(), 0);
    // The ledger is left as the newer operator wrote it: not rebuilt, not written over.
    let leases: Api<Lease> = Api::namespaced(client.clone(), OPERATOR_NAMESPACE);
    let stored = leases.get(LEDGER_NAME).await.expect("the ledger");
    let annotations = stored.metadata.annotations.unwrap_or_default();
    assert_eq!(
        annotations.get(FORMAT_ANNOTATION).map(String::as_str),
        Some("2")
    );
    // Readable again: the rollout finishes within budget.
    annotate_ledger(&sb.control_plane, &format!("{FORMAT_ANNOTATION}-"));
    rollout_completes(&sb, &watch).await;
    watch.check().expect("budget held");
}
