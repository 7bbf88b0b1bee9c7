//! What a finished rollout looks like, checked the way an administrator would: every node
//! rebooted exactly once and back (Ready, schedulable, no protocol annotation left), the slot
//! ledger empty, and the budget never exceeded.

use crate::{BudgetWatch, node, protocol_annotations, wait_until};
use common::ledger::{LEDGER_NAME, OPERATOR_NAMESPACE, Slot, slots_of};
use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use nodesim::sandbox::Sandbox;
use std::{collections::BTreeMap, time::Duration};

/// How long any rollout of the end-to-end scenarios may take before the test fails.
pub const ROLLOUT: Duration = Duration::from_secs(180);

/// The node rebooted exactly `times` times and is back: Ready, schedulable, out of the protocol.
pub async fn back(sb: &Sandbox, name: &str, times: u32) -> bool {
    back_in(&sb.fleet, &sb.client, name, times).await
}

/// [`back`], for a fleet outside a sandbox.
pub async fn back_in(
    fleet: &nodesim::Fleet,
    client: &kube::Client,
    name: &str,
    times: u32,
) -> bool {
    if fleet.reboots(name) != times {
        return false;
    }
    let n = node(client, name).await;
    let facts = common::NodeFacts::from_node(&n);
    facts.readiness == common::Readiness::Ready
        && !facts.unschedulable
        && protocol_annotations(&n).is_empty()
}

/// [`back_in`] for every node of `names`.
pub async fn all_back_in(
    fleet: &nodesim::Fleet,
    client: &kube::Client,
    names: &[impl AsRef<str>],
    times: u32,
) -> bool {
    for name in names {
        if !back_in(fleet, client, name.as_ref(), times).await {
            return false;
        }
    }
    true
}

/// Every node of the fleet is [`back`] after `times` reboots.
pub async fn all_back(sb: &Sandbox, times: u32) -> bool {
    for name in sb.fleet.names() {
        if !back(sb, &name, times).await {
            return false;
        }
    }
    true
}

/// No node holds a slot in the controller's ledger.
pub async fn ledger_is_empty(sb: &Sandbox) -> bool {
    ledger_is_empty_on(&sb.client).await
}

/// No node holds a slot in the ledger (false while there is no readable ledger, or the API
/// server does not answer: a wait goes on).
pub async fn ledger_is_empty_on(client: &kube::Client) -> bool {
    let Ok(Some(lease)) = read_ledger(client, LEDGER_NAME).await else {
        return false;
    };
    slots_of(lease.metadata.annotations.as_ref()).is_ok_and(|slots| slots.is_empty())
}

async fn read_ledger(client: &kube::Client, name: &str) -> kube::Result<Option<Lease>> {
    Api::<Lease>::namespaced(client.clone(), OPERATOR_NAMESPACE)
        .get_opt(name)
        .await
}

/// The slot ledger Lease `name` in the operator's namespace, read straight from the API
/// server; `None` while there is none. A read that fails fails the test: an answer the test
/// could not get is not "no ledger".
pub async fn ledger_lease(client: &kube::Client, name: &str) -> Option<Lease> {
    read_ledger(client, name)
        .await
        .unwrap_or_else(|e| panic!("read the ledger Lease {name}: {e}"))
}

/// The slots of the ledger `name`, by node; `None` while there is no ledger Lease, or while
/// it does not read as a ledger (a damaged one, which the controller rebuilds).
pub async fn ledger_slots(client: &kube::Client, name: &str) -> Option<BTreeMap<String, Slot>> {
    let lease = ledger_lease(client, name).await?;
    slots_of(lease.metadata.annotations.as_ref()).ok()
}

/// What the operator has done to the node, if anything: it carries a grant, is cordoned, or
/// was rebooted. `None`: the operator has not touched it.
pub async fn touched(sb: &Sandbox, name: &str) -> Option<String> {
    let facts = common::NodeFacts::from_node(&node(&sb.client, name).await);
    let keys = common::AnnotationKeys::default();
    if let Some(grant) = facts.annotations.get(&keys.grant) {
        return Some(format!("it carries {}={grant}", keys.grant));
    }
    if facts.unschedulable {
        return Some("it was cordoned".into());
    }
    (sb.fleet.reboots(name) > 0).then(|| "it was rebooted".into())
}

/// Waits until every node rebooted exactly once and the ledger is empty, within budget, then
/// gives a second reboot the time to show, and fails if one came.
pub async fn rollout_completes(sb: &Sandbox, watch: &BudgetWatch) {
    wait_until(
        "every node rebooted once and back",
        ROLLOUT,
        Some(watch),
        || all_back(sb, 1),
    )
    .await;
    wait_until(
        "the ledger is empty",
        Duration::from_secs(15),
        Some(watch),
        || ledger_is_empty(sb),
    )
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        sb.fleet.total_reboots() as usize,
        sb.fleet.names().len(),
        "some node rebooted twice"
    );
    watch.check().unwrap();
}

/// The Events about the ledger Lease, as `(type, reason, message)`.
pub async fn ledger_events(client: &kube::Client) -> Vec<(String, String, String)> {
    ledger_events_of(client, LEDGER_NAME).await
}

/// The Events about the ledger Lease `name` (a RebootPool's: `node-reboot-pool-<pool>`).
pub async fn ledger_events_of(client: &kube::Client, name: &str) -> Vec<(String, String, String)> {
    let params = kube::api::ListParams::default().fields(&format!("involvedObject.name={name}"));
    Api::<k8s_openapi::api::core::v1::Event>::namespaced(client.clone(), OPERATOR_NAMESPACE)
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

/// `kubectl annotate --overwrite` of the ledger Lease with `annotation` (`key=value`, or
/// `key-` to remove it).
pub fn annotate_ledger(cp: &testenv::ControlPlane, annotation: &str) {
    let lease = format!("lease/{LEDGER_NAME}");
    crate::kubectl(
        cp,
        &[
            "annotate",
            "-n",
            OPERATOR_NAMESPACE,
            &lease,
            annotation,
            "--overwrite",
        ],
    );
}

/// `name`, whose next reboot was swallowed (`swallow_next_reboot`, before its request), once
/// its agent has started that reboot: the agent stops and the node goes NotReady, as a machine
/// that never comes back.
pub async fn never_comes_back(sb: &Sandbox, name: &str, watch: &BudgetWatch) {
    wait_until(
        &format!("{name} is rebooting"),
        Duration::from_secs(120),
        Some(watch),
        || async {
            common::NodeFacts::from_node(&node(&sb.client, name).await)
                .annotations
                .contains_key("reboot-in-progress")
        },
    )
    .await;
    sb.fleet.pause_agent(name).await;
    sb.fleet.set_ready(name, false).await;
}
