//! Liveness holes, end to end on the real control plane with the real controller and agents
//! on simulated nodes: a ledger Lease deleted by hand is recreated with the soaks under way and
//! said in a Warning (deleted while no controller ran, it is recreated paused); a deleted slot
//! holder frees its slot; an agent whose reboot keeps the boot id stops after a few unproven
//! attempts and says why.

use common::{AgentReason, ControllerReason};
use common::{
    AnnotationKeys, NodeFacts,
    ledger::{LEDGER_NAME, OPERATOR_NAMESPACE},
};
use e2e::{
    BudgetWatch, eventually, kubectl, node, node_events, request_reboot,
    rollout::{ledger_events, ledger_slots, touched},
    wait_until,
};
use k8s_openapi::api::coordination::v1::Lease;
use kube::{Api, Client, api::DeleteParams};
use nodesim::sandbox::{Sandbox, SandboxConfig};
use std::{collections::BTreeMap, time::Duration};

const PATIENCE: Duration = Duration::from_secs(120);

async fn sandbox(nodes: usize, controller_args: &[&str], agent_args: &[&str]) -> Sandbox {
    let config = SandboxConfig::with_nodes(nodes)
        .reboot_duration(Duration::from_secs(1))
        .controller_args(controller_args)
        .agent_args(agent_args);
    e2e::sandbox_without_pods(config).await
}

fn leases(client: &Client) -> Api<Lease> {
    Api::namespaced(client.clone(), OPERATOR_NAMESPACE)
}

/// The ledger's slots, by node, as grant ids; `None` while there is no readable ledger.
async fn slots(client: &Client) -> Option<BTreeMap<String, String>> {
    let slots = ledger_slots(client, LEDGER_NAME).await?;
    Some(slots.into_iter().map(|(n, s)| (n, s.grant)).collect())
}

/// Whether the node is in its soak: completed (`reboot-last-grant`), grant gone from it.
async fn soaking(client: &Client, name: &str) -> bool {
    let keys = AnnotationKeys::default();
    let facts = NodeFacts::from_node(&node(client, name).await);
    facts.annotations.contains_key(&keys.last_grant) && !facts.annotations.contains_key(&keys.grant)
}

/// Anything a grant starts on `name`: a grant carried, a cordon, a reboot.
async fn granted(sb: &Sandbox, name: &str) -> bool {
    touched(sb, name).await.is_some()
}

/// Requests `name`'s reboot and waits until it is rebooted and soaking in its slot.
async fn reboot_into_its_soak(sb: &Sandbox, watch: &BudgetWatch, name: &str) {
    let client = &sb.client;
    request_reboot(&sb.control_plane, name);
    wait_until(
        &format!("{name} is rebooted and soaking in its slot"),
        PATIENCE,
        Some(watch),
        || async {
            sb.fleet.reboots(name) == 1
                && soaking(client, name).await
                && slots(client).await.is_some_and(|s| s.contains_key(name))
        },
    )
    .await;
}

/// A lone leader whose ledger Lease is deleted by hand (during an incident, or by a cleanup
/// script) recreates it within a round, keeps the soak it knew of from its last good copy, and
/// says so in a Warning on the Lease; it then goes on granting and releasing.
#[tokio::test(flavor = "multi_thread")]
async fn a_ledger_deleted_by_hand_is_recreated_with_its_soaks_and_a_warning() {
    // A soak long enough to delete the ledger in the middle of it.
    let sb = sandbox(2, &["--min-ready-seconds=600"], &[]).await;
    let client = sb.client.clone();
    let watch = BudgetWatch::start(client.clone(), 1).await;
    reboot_into_its_soak(&sb, &watch, "sim-1").await;
    let before = slots(&client).await.expect("a ledger");
    request_reboot(&sb.control_plane, "sim-2");

    leases(&client)
        .delete(LEDGER_NAME, &DeleteParams::default())
        .await
        .expect("delete the ledger Lease");
    let after = eventually(
        "the controller recreates the ledger Lease",
        PATIENCE,
        Some(&watch),
        || async { slots(&client).await },
    )
    .await;
    assert_eq!(
        after.get("sim-1"),
        before.get("sim-1"),
        "the recreated ledger forgot sim-1's soak: {after:?} (before: {before:?})"
    );
    assert!(
        !granted(&sb, "sim-2").await,
        "sim-2 granted during sim-1's soak"
    );
    wait_until(
        "a Warning on the ledger Lease says it was recreated with the slots it held",
        PATIENCE,
        Some(&watch),
        || async {
            ledger_events(&client)
                .await
                .iter()
                .any(|(kind, reason, message)| {
                    kind == "Warning"
                        && reason == ControllerReason::LedgerRecreated.as_str()
                        && message.contains("sim-1")
                })
        },
    )
    .await;
    let warning = ledger_events(&client)
        .await
        .into_iter()
        .find(|(_, reason, _)| reason == ControllerReason::LedgerRecreated.as_str())
        .map(|(_, _, message)| message);
    println!("the Warning: {}", warning.unwrap_or_default());

    // The leader still grants and releases on the recreated ledger: clear the soak by hand
    // (the way out the docs name), and sim-2 goes next.
    let keys = AnnotationKeys::default();
    kubectl(
        &sb.control_plane,
        &[
            "annotate",
            "node",
            "sim-1",
            &format!("{}-", keys.last_grant),
        ],
    );
    wait_until("sim-2 is rebooted", PATIENCE, Some(&watch), || async {
        sb.fleet.reboots("sim-2") == 1
    })
    .await;
    watch.check().unwrap();
    sb.stop().await;
}

/// A ledger Lease deleted while no controller runs cannot be recreated from a copy: the
/// controller that starts finds nodes carrying its grants, and recreates it paused (its pause
/// and the soaks under way are unknown), with a Warning that says so and how to go on. An
/// empty ledger would forget sim-1's soak and reboot sim-2 at once.
#[tokio::test(flavor = "multi_thread")]
async fn a_ledger_deleted_while_no_controller_runs_is_recreated_paused_not_empty() {
    let mut sb = sandbox(2, &["--min-ready-seconds=600"], &[]).await;
    let client = sb.client.clone();
    let watch = BudgetWatch::start(client.clone(), 1).await;
    reboot_into_its_soak(&sb, &watch, "sim-1").await;
    for controller in &mut sb.controllers {
        controller.kill().await;
    }
    leases(&client)
        .delete(LEDGER_NAME, &DeleteParams::default())
        .await
        .expect("delete the ledger Lease");
    request_reboot(&sb.control_plane, "sim-2");
    sb.start_controller(&[]).expect("start a controller again");

    let warning = eventually(
        "a Warning on the ledger Lease says it was recreated paused",
        PATIENCE,
        Some(&watch),
        || async {
            ledger_events(&client)
                .await
                .into_iter()
                .find(|(kind, reason, _)| {
                    kind == "Warning" && reason == ControllerReason::LedgerRecreated.as_str()
                })
                .map(|(_, _, message)| message)
        },
    )
    .await;
    println!("the Warning: {warning}");
    for words in ["PAUSED", "sim-1", "kubectl reboot resume"] {
        assert!(warning.contains(words), "{words} missing: {warning}");
    }
    let lease = leases(&client)
        .get(LEDGER_NAME)
        .await
        .expect("the recreated ledger Lease");
    let paused = lease
        .metadata
        .annotations
        .unwrap_or_default()
        .get(common::ledger::PAUSED_ANNOTATION)
        .cloned();
    assert_eq!(paused.as_deref(), Some("true"), "the ledger is not paused");
    // The controller is alive and holds sim-2 because of the pause, and says so.
    e2e::every_node::wait_for_event(
        &client,
        &["sim-2".to_owned()],
        ControllerReason::Paused,
        &[],
        PATIENCE,
        Some(&watch),
    )
    .await;
    assert!(
        !granted(&sb, "sim-2").await,
        "sim-2 granted during sim-1's soak"
    );
    watch.check().unwrap();
    sb.stop().await;
}

/// A node deleted while it holds a slot frees the slot once a fresh read confirms the
/// deletion, and the next request goes ahead: the slot is not held for the leader's term.
#[tokio::test(flavor = "multi_thread")]
async fn a_slot_holder_deleted_from_the_cluster_frees_its_slot() {
    let sb = sandbox(2, &[], &[]).await;
    let client = sb.client.clone();
    let watch = BudgetWatch::start(client.clone(), 1).await;
    // sim-1's agent is away: granted and told to reboot, it keeps its slot.
    sb.fleet.pause_agent("sim-1").await;
    request_reboot(&sb.control_plane, "sim-1");
    let keys = AnnotationKeys::default();
    wait_until(
        "sim-1 holds a slot and is told to reboot",
        PATIENCE,
        Some(&watch),
        || async {
            let facts = NodeFacts::from_node(&node(&client, "sim-1").await);
            facts.annotations.contains_key(&keys.now)
                && slots(&client)
                    .await
                    .is_some_and(|s| s.contains_key("sim-1"))
        },
    )
    .await;
    request_reboot(&sb.control_plane, "sim-2");
    // The budget is spent: sim-2 waits for the slot.
    wait_until(
        "sim-2 is told it waits for a slot",
        PATIENCE,
        Some(&watch),
        || async {
            node_events(&client, "sim-2")
                .await
                .iter()
                .any(|(reason, _, _)| reason == ControllerReason::Requested.as_str())
        },
    )
    .await;
    assert!(!granted(&sb, "sim-2").await);

    kubectl(
        &sb.control_plane,
        &["delete", "node", "sim-1", "--wait=false"],
    );
    let outcome = eventually(
        "sim-1's slot is released and sim-2 rebooted",
        PATIENCE,
        Some(&watch),
        || async {
            let slots = slots(&client).await?;
            (!slots.contains_key("sim-1") && sb.fleet.reboots("sim-2") == 1).then_some(slots)
        },
    )
    .await;
    println!("the ledger after: {outcome:?}");
    watch.check().unwrap();
    sb.stop().await;
}

/// The number of unproven attempts the agent makes before it stops (its default).
const MAX_UNPROVEN: u32 = 3;

/// An agent whose reboot method does not change the boot id (`systemctl soft-reboot` as the
/// reboot command, or a command that does nothing) would reboot again for ever: after
/// `--max-unproven-reboots` attempts it stops, and says why in a Warning on the node.
#[tokio::test(flavor = "multi_thread")]
async fn an_agent_whose_reboot_keeps_the_boot_id_stops_after_a_few_attempts_and_says_why() {
    // sim-1's reboots are soft: its agent is restarted and finds the same boot id.
    let sb = sandbox(2, &[], &[]).await;
    let client = sb.client.clone();
    sb.fleet.soft_reboots("sim-1", true);
    request_reboot(&sb.control_plane, "sim-1");
    let first_starts = sb.fleet.agent_starts("sim-1");
    let stopped = eventually(
        "the agent of sim-1 stops rebooting and says why (or goes on past the bound)",
        PATIENCE,
        None,
        || async {
            let events = node_events(&client, "sim-1").await;
            if let Some((_, _, note)) = events
                .iter()
                .find(|(reason, _, _)| reason == AgentReason::RebootUnproven.as_str())
            {
                return Some(Some(note.clone()));
            }
            let starts = sb.fleet.agent_starts("sim-1") - first_starts;
            (starts > MAX_UNPROVEN + 2).then_some(None)
        },
    )
    .await;
    let Some(note) = stopped else {
        panic!(
            "the agent of sim-1 was started {} times and rebooted again each time: it never \
             stops",
            sb.fleet.agent_starts("sim-1")
        );
    };
    println!("the Warning: {note}");
    assert!(note.contains("boot id"), "{note}");
    assert!(note.contains(&MAX_UNPROVEN.to_string()), "{note}");
    // The way out it names is the plugin's give-up, which releases the slot and the cordon; the
    // annotations removed by hand would read as a cancel.
    assert!(note.contains("kubectl reboot abandon sim-1"), "{note}");
    assert!(!note.contains("kubectl annotate"), "{note}");
    // Stopped, it stays stopped while the node is as it is.
    let starts = sb.fleet.agent_starts("sim-1");
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(
        sb.fleet.agent_starts("sim-1"),
        starts,
        "the agent went on after it said it stopped"
    );
    assert_eq!(sb.fleet.reboots("sim-1"), 0);
    assert!(
        sb.fleet.agent_starts("sim-1") - first_starts <= MAX_UNPROVEN,
        "more attempts than --max-unproven-reboots"
    );

    // The way out it names: give the node up; the agent then has nothing to do, the controller
    // uncordons it and releases its slot.
    let keys = AnnotationKeys::default();
    kubectl(
        &sb.control_plane,
        &[
            "annotate",
            "node",
            "sim-1",
            &format!("{}-", keys.in_progress),
            &format!("{}-", keys.boot_id),
        ],
    );
    wait_until(
        "sim-1 is given back: uncordoned, slot released",
        PATIENCE,
        None,
        || async {
            let facts = NodeFacts::from_node(&node(&client, "sim-1").await);
            !facts.unschedulable && slots(&client).await.is_some_and(|s| s.is_empty())
        },
    )
    .await;
    sb.stop().await;
}
