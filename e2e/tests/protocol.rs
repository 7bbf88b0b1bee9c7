//! The reboot protocol end to end (docs/src/concepts.md): a real API server, real `reboot-agent`
//! processes on simulated nodes, the real `reboot-controller`, and the real kubectl. Every scenario
//! is watched by an independent budget watcher that fails the test the moment more nodes are
//! unavailable than the budget allows.

use common::{
    AgentReason, ControllerReason,
    events::{AGENT, CONTROLLER},
};
use e2e::{
    BudgetWatch, event_reasons, eventually, kubectl, node, node_events, protocol_annotations,
    request_reboot,
    rollout::{ROLLOUT, all_back, back, ledger_is_empty, rollout_completes},
    step_reporters, wait_for_event, wait_until,
};
use nodesim::sandbox::{Sandbox, SandboxConfig};
use std::{
    collections::{BTreeMap, BTreeSet},
    time::Duration,
};
use testenv::toxiproxy::{Stream, Toxic};

async fn sandbox(nodes: usize, max_unavailable: &str) -> Sandbox {
    sandbox_with(nodes, max_unavailable, true).await
}

async fn sandbox_with(nodes: usize, max_unavailable: &str, start_controller: bool) -> Sandbox {
    let config = SandboxConfig::with_nodes(nodes)
        .max_unavailable(max_unavailable)
        .reboot_duration(Duration::from_secs(1))
        .start_controller(start_controller)
        // The protocol needs no pods: skip the scheduler and controller-manager.
        .without_pods();
    Sandbox::start(config).await.expect("sandbox starts")
}

/// A rollout of every node finishes within budget, each node rebooted exactly once.
async fn rollout(sb: &Sandbox, watch: &BudgetWatch) {
    e2e::every_node::request(&sb.control_plane);
    rollout_completes(sb, watch).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn one_node_is_rebooted_and_proven_by_a_new_boot_id() {
    let sb = sandbox(2, "1").await;
    let watch = BudgetWatch::start(sb.client.clone(), 1).await;
    let before = node(&sb.client, "sim-1")
        .await
        .status
        .unwrap()
        .node_info
        .unwrap()
        .boot_id;
    request_reboot(&sb.control_plane, "sim-1");
    wait_until("sim-1 is rebooted and back", ROLLOUT, Some(&watch), || {
        back(&sb, "sim-1", 1)
    })
    .await;
    let after = node(&sb.client, "sim-1").await;
    assert_ne!(
        after.status.unwrap().node_info.unwrap().boot_id,
        before,
        "boot id changed"
    );
    assert!(
        after
            .metadata
            .annotations
            .unwrap()
            .contains_key("reboot-last-completed")
    );
    assert_eq!(
        sb.fleet.reboots("sim-2"),
        0,
        "the other node was left alone"
    );
    // Each step told once, by the component that took it. The agent's proof after the boot
    // has no Event of its own: the controller's `Rebooted` at completion tells of it, and is
    // written after the completion itself, so it may still be on its way.
    let steps = [
        (ControllerReason::RebootApproved.as_str(), CONTROLLER),
        (AgentReason::Rebooting.as_str(), AGENT),
        (ControllerReason::Rebooted.as_str(), CONTROLLER),
    ];
    let events = eventually(
        "sim-1's Events tell each step",
        Duration::from_secs(30),
        Some(&watch),
        || async {
            let events = node_events(&sb.client, "sim-1").await;
            let told = steps
                .iter()
                .all(|(reason, by)| events.iter().any(|(r, c, _)| r == reason && c == by));
            told.then_some(events)
        },
    )
    .await;
    let rebooted: Vec<&String> = events
        .iter()
        .filter(|(reason, _, _)| reason == ControllerReason::Rebooted.as_str())
        .map(|(_, by, _)| by)
        .collect();
    assert_eq!(rebooted, ["reboot-controller"], "{events:?}");
    sb.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn twenty_nodes_reboot_once_each_never_more_than_three_down() {
    let sb = sandbox(20, "3").await;
    let watch = BudgetWatch::start(sb.client.clone(), 3).await;
    rollout(&sb, &watch).await;
    assert_eq!(
        watch.max_seen(),
        3,
        "the budget was used, not just respected"
    );
    sb.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_percentage_budget_is_a_share_of_the_pool() {
    let sb = sandbox(12, "25%").await;
    let watch = BudgetWatch::start(sb.client.clone(), 3).await;
    rollout(&sb, &watch).await;
    assert_eq!(watch.max_seen(), 3);
    sb.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_not_ready_node_does_not_block_its_own_reboot() {
    let sb = sandbox(3, "1").await;
    sb.fleet.set_ready("sim-2", false).await;
    let watch = BudgetWatch::start(sb.client.clone(), 1).await;
    wait_until(
        "sim-2 is NotReady",
        Duration::from_secs(10),
        None,
        || async {
            common::NodeFacts::from_node(&node(&sb.client, "sim-2").await).readiness
                != common::Readiness::Ready
        },
    )
    .await;
    request_reboot(&sb.control_plane, "sim-2");
    wait_until("sim-2 is rebooted and Ready", ROLLOUT, Some(&watch), || {
        back(&sb, "sim-2", 1)
    })
    .await;
    sb.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_administrators_cordon_survives_the_reboot() {
    let sb = sandbox(2, "1").await;
    let watch = BudgetWatch::start(sb.client.clone(), 1).await;
    kubectl(&sb.control_plane, &["cordon", "sim-1"]);
    request_reboot(&sb.control_plane, "sim-1");
    wait_until("sim-1 is rebooted", ROLLOUT, Some(&watch), || async {
        sb.fleet.reboots("sim-1") == 1
            && protocol_annotations(&node(&sb.client, "sim-1").await).is_empty()
    })
    .await;
    let n = node(&sb.client, "sim-1").await;
    assert_eq!(n.spec.unwrap().unschedulable, Some(true), "still cordoned");
    sb.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn withdrawing_the_go_ahead_before_the_agent_takes_it_cancels() {
    let sb = sandbox(2, "1").await;
    let watch = BudgetWatch::start(sb.client.clone(), 1).await;
    sb.fleet.pause_agent("sim-1").await;
    request_reboot(&sb.control_plane, "sim-1");
    wait_until("sim-1 gets reboot-now", ROLLOUT, Some(&watch), || async {
        let n = node(&sb.client, "sim-1").await;
        protocol_annotations(&n).contains(&"reboot-now".to_owned())
    })
    .await;
    kubectl(
        &sb.control_plane,
        &["annotate", "node", "sim-1", "reboot-now-"],
    );
    wait_until(
        "sim-1 is uncordoned and its slot released",
        ROLLOUT,
        Some(&watch),
        || async { back(&sb, "sim-1", 0).await && ledger_is_empty(&sb).await },
    )
    .await;
    // Events are sent from a queue after the write they describe: wait for it.
    wait_for_event(
        &sb.client,
        "sim-1",
        ControllerReason::Cancelled,
        &[],
        Some(&watch),
    )
    .await;
    // The other node can use the slot now.
    request_reboot(&sb.control_plane, "sim-2");
    wait_until("sim-2 is rebooted", ROLLOUT, Some(&watch), || {
        back(&sb, "sim-2", 1)
    })
    .await;
    sb.stop().await;
}

/// The agent decides on the copy of its node it read. Here it reads `reboot-now`, and its
/// write of `reboot-in-progress` is held on the way (a fault proxy) while an administrator gives
/// the node up: the write reaches the API server after the give-up and is refused, so the node
/// is never rebooted. The controller (frozen meanwhile) then clears the node and grants the
/// next one: with the budget of 1, one node down at a time.
#[tokio::test(flavor = "multi_thread")]
async fn a_give_up_that_lands_between_the_agents_read_and_its_write_stops_the_reboot() {
    let config = SandboxConfig::with_nodes(2)
        .max_unavailable("1")
        .reboot_duration(Duration::from_secs(1))
        .fault_proxies()
        .without_pods();
    let sb = Sandbox::start(config).await.expect("sandbox starts");
    let watch = BudgetWatch::start(sb.client.clone(), 1).await;
    wait_until("sim-1's agent watches its node", ROLLOUT, None, || async {
        sb.fleet
            .agent_log("sim-1")
            .contains("the watch of the node started")
    })
    .await;
    // From now on what sim-1's agent sends waits in its proxy; what it receives does not.
    let proxy = sb.proxy("sim-1").expect("sim-1's fault proxy").clone();
    let held = Toxic::latency("held", Stream::Upstream, 600_000, 0);
    proxy.add(&held).await.expect("hold sim-1's requests");
    request_reboot(&sb.control_plane, "sim-1");
    // The agent counts a reboot attempt when it decides to take the go-ahead, before it
    // writes: it has read reboot-now.
    let attempts = sb.fleet.node_dir("sim-1").join("reboot-attempts");
    wait_until(
        "sim-1's agent decides to take reboot-now",
        ROLLOUT,
        Some(&watch),
        || async { attempts.exists() },
    )
    .await;
    sb.controllers[0].freeze();
    let by = common::abandon::Abandon {
        by: "alice".into(),
        reason: "replaced".into(),
    };
    kubectl(
        &sb.control_plane,
        &[
            "annotate",
            "node",
            "sim-1",
            &format!("reboot-abandon={}", by.to_value()),
        ],
    );
    // The agent logs each refused write: only one refused from now on is the held one.
    let refusals = || {
        sb.fleet
            .agent_log("sim-1")
            .matches("the node changed under the write")
            .count()
    };
    let refused_before = refusals();
    proxy.remove("held").await.expect("let sim-1's write go on");
    wait_until(
        "sim-1's write reaches the API server",
        ROLLOUT,
        Some(&watch),
        || async {
            refusals() > refused_before
                || sb.fleet.reboots("sim-1") > 0
                || protocol_annotations(&node(&sb.client, "sim-1").await)
                    .contains(&"reboot-in-progress".to_owned())
        },
    )
    .await;
    let annotations = protocol_annotations(&node(&sb.client, "sim-1").await);
    assert!(
        sb.fleet.reboots("sim-1") == 0
            && !annotations
                .iter()
                .any(|k| k == "reboot-in-progress" || k == "reboot-done"),
        "the agent took reboot-now from a node given up since it read it: {annotations:?}, \
         {} reboots",
        sb.fleet.reboots("sim-1")
    );
    // The controller gives sim-1 up and the rollout goes on with sim-2.
    request_reboot(&sb.control_plane, "sim-2");
    sb.controllers[0].thaw();
    wait_until(
        "sim-1 is given up without a reboot and sim-2 rebooted",
        ROLLOUT,
        Some(&watch),
        || async {
            back(&sb, "sim-1", 0).await && back(&sb, "sim-2", 1).await && ledger_is_empty(&sb).await
        },
    )
    .await;
    assert_eq!(sb.fleet.reboots("sim-1"), 0, "sim-1 was rebooted");
    watch.check().unwrap();
    sb.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_agent_killed_before_the_reboot_reboots_on_restart() {
    let sb = sandbox(2, "1").await;
    let watch = BudgetWatch::start(sb.client.clone(), 1).await;
    let first_boot = node(&sb.client, "sim-1")
        .await
        .status
        .unwrap()
        .node_info
        .unwrap()
        .boot_id;
    let history = e2e::NodeHistory::start(sb.client.clone(), "sim-1").await;
    sb.fleet.swallow_next_reboot("sim-1");
    request_reboot(&sb.control_plane, "sim-1");
    wait_until("sim-1 is in progress", ROLLOUT, Some(&watch), || async {
        protocol_annotations(&node(&sb.client, "sim-1").await)
            .contains(&"reboot-in-progress".to_owned())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        sb.fleet.reboots("sim-1"),
        0,
        "the first reboot was swallowed"
    );
    sb.fleet.kill_agent("sim-1").await;
    wait_until("sim-1 is rebooted and back", ROLLOUT, Some(&watch), || {
        back(&sb, "sim-1", 1)
    })
    .await;
    // Never reported done while the boot id was still the one the reboot started from.
    history.check().unwrap();
    for state in history.states() {
        if state.annotations.contains(&"reboot-done".to_owned()) {
            assert_ne!(
                state.boot_id, first_boot,
                "reported rebooted without a new boot id"
            );
        }
    }
    let reasons: Vec<String> = event_reasons(&sb.client, "sim-1").await;
    assert!(
        reasons.contains(&AgentReason::RebootRetried.to_string()),
        "{reasons:?}"
    );
    sb.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_request_that_is_not_true_is_ignored_with_a_warning() {
    let sb = sandbox(2, "1").await;
    kubectl(
        &sb.control_plane,
        &["annotate", "node", "sim-1", "reboot-needed=banana"],
    );
    wait_until(
        "a Warning Event about banana",
        Duration::from_secs(30),
        None,
        || async {
            node_events(&sb.client, "sim-1")
                .await
                .iter()
                .any(|(reason, _, message)| {
                    reason == ControllerReason::InvalidRequest.as_str()
                        && message.contains("banana")
                })
        },
    )
    .await;
    let events = kubectl(
        &sb.control_plane,
        &[
            "get",
            "events",
            "--field-selector",
            "involvedObject.name=sim-1,type=Warning",
        ],
    );
    assert!(events.contains("InvalidRequest"), "{events}");
    assert_eq!(sb.fleet.reboots("sim-1"), 0);
    assert!(ledger_is_empty(&sb).await);
    sb.stop().await;
}

/// Who reported which of `steps`, once every one of `identities` did or after 30 s: Events
/// are sent from a queue after the write they describe.
async fn steps_reported_by(
    sb: &Sandbox,
    steps: &[&str],
    identities: &[String],
) -> BTreeMap<String, BTreeSet<String>> {
    let mut reporters = step_reporters(&sb.client, CONTROLLER, steps).await;
    for _ in 0..100 {
        if identities.iter().all(|i| reporters.contains_key(i)) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        reporters = step_reporters(&sb.client, CONTROLLER, steps).await;
    }
    reporters
}

#[tokio::test(flavor = "multi_thread")]
async fn two_controllers_at_once_keep_the_budget() {
    let mut sb = sandbox_with(12, "2", false).await;
    // Both act at once: leader election off, only the slot ledger's compare-and-swap keeps
    // the budget (invariant 2 of docs/src/design.md).
    sb.start_controller(&["--leader-elect=false"]).unwrap();
    sb.start_controller(&["--leader-elect=false"]).unwrap();
    let watch = BudgetWatch::start(sb.client.clone(), 2).await;
    rollout(&sb, &watch).await;
    // Both really acted: each took some node a step further (its identity reports the Event
    // of that step), so the budget held against a real race, not against a bystander.
    let identities: Vec<String> = sb.controllers.iter().map(|c| c.identity()).collect();
    let steps = [
        ControllerReason::Draining,
        ControllerReason::RebootApproved,
        ControllerReason::Rebooted,
    ]
    .map(ControllerReason::as_str);
    let reporters = steps_reported_by(&sb, &steps, &identities).await;
    eprintln!("steps of the rollout by controller: {reporters:?}");
    assert!(
        identities.iter().all(|i| reporters.contains_key(i)),
        "both controllers must have acted: steps {steps:?} by {reporters:?}, controllers \
         {identities:?}"
    );
    sb.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn controller_crashes_and_an_api_server_restart_lose_nothing() {
    let mut sb = sandbox(20, "3").await;
    let watch = BudgetWatch::start(sb.client.clone(), 3).await;
    e2e::every_node::request(&sb.control_plane);
    for round in 0..6 {
        tokio::time::sleep(Duration::from_millis(700 + 300 * round)).await;
        sb.controllers[0].kill().await;
        if round == 2 {
            sb.control_plane
                .restart_apiserver()
                .await
                .expect("API server restarts");
        }
        sb.controllers[0]
            .restart()
            .await
            .expect("controller restarts");
        watch.check().unwrap();
    }
    wait_until(
        "every node rebooted once and back",
        ROLLOUT,
        Some(&watch),
        || all_back(&sb, 1),
    )
    .await;
    wait_until(
        "the ledger is empty",
        Duration::from_secs(10),
        Some(&watch),
        || ledger_is_empty(&sb),
    )
    .await;
    assert_eq!(sb.fleet.total_reboots(), 20, "every node exactly once");
    sb.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_damaged_ledger_is_reported_and_rebuilt_and_what_others_put_on_it_stays() {
    let sb = sandbox(6, "2").await;
    let watch = BudgetWatch::start(sb.client.clone(), 2).await;
    let lease = format!("lease/{}", common::ledger::LEDGER_NAME);
    let ns = common::ledger::OPERATOR_NAMESPACE;
    wait_until("the controller created its ledger", ROLLOUT, None, || {
        ledger_is_empty(&sb)
    })
    .await;
    kubectl(
        &sb.control_plane,
        &["label", "-n", ns, &lease, "team=infra"],
    );
    kubectl(
        &sb.control_plane,
        &["annotate", "-n", ns, &lease, "example.com/owner=ops"],
    );
    e2e::every_node::request(&sb.control_plane);
    wait_until("a node holds a grant", ROLLOUT, Some(&watch), || async {
        let nodes = kube::Api::<k8s_openapi::api::core::v1::Node>::all(sb.client.clone());
        let list = nodes.list(&Default::default()).await.expect("list nodes");
        list.items.iter().any(|n| {
            n.metadata
                .annotations
                .iter()
                .flatten()
                .any(|(k, _)| k == "reboot-grant")
        })
    })
    .await;
    let slots = format!("{}={{oops", common::ledger::SLOTS_ANNOTATION);
    kubectl(
        &sb.control_plane,
        &["annotate", "--overwrite", "-n", ns, &lease, &slots],
    );
    wait_until(
        "a LedgerDamaged Warning on the Lease",
        ROLLOUT,
        Some(&watch),
        || async {
            e2e::rollout::ledger_events(&sb.client)
                .await
                .iter()
                .any(|(kind, reason, message)| {
                    kind == "Warning"
                        && reason == ControllerReason::LedgerDamaged.as_str()
                        && message.contains("rebuilt")
                })
        },
    )
    .await;
    rollout_completes(&sb, &watch).await;
    let kept = kubectl(
        &sb.control_plane,
        &[
            "get",
            "-n",
            ns,
            &lease,
            "-o",
            "jsonpath={.metadata.labels.team} {.metadata.annotations.example\\.com/owner}",
        ],
    );
    assert_eq!(
        kept, "infra ops",
        "what others put on the ledger Lease stays"
    );
    sb.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn taking_over_the_operators_cordon_keeps_the_node_cordoned_after_its_reboot() {
    let config = SandboxConfig::with_nodes(2)
        .reboot_duration(Duration::from_secs(3))
        .without_pods();
    let sb = Sandbox::start(config).await.expect("sandbox starts");
    let watch = BudgetWatch::start(sb.client.clone(), 1).await;
    request_reboot(&sb.control_plane, "sim-1");
    wait_until(
        "sim-1 is rebooting, cordoned by the operator",
        ROLLOUT,
        Some(&watch),
        || async {
            let n = node(&sb.client, "sim-1").await;
            let annotations = n.metadata.annotations.unwrap_or_default();
            annotations.contains_key("reboot-in-progress")
                && annotations.contains_key("reboot-cordoned")
        },
    )
    .await;
    // The administrator wants the node to stay cordoned after its reboot.
    kubectl(
        &sb.control_plane,
        &["annotate", "node", "sim-1", "reboot-cordoned-"],
    );
    wait_until(
        "sim-1 is rebooted and out of the protocol",
        ROLLOUT,
        Some(&watch),
        || async {
            sb.fleet.reboots("sim-1") == 1
                && protocol_annotations(&node(&sb.client, "sim-1").await).is_empty()
        },
    )
    .await;
    let n = node(&sb.client, "sim-1").await;
    assert_eq!(
        n.spec.unwrap().unschedulable,
        Some(true),
        "still cordoned, as taken over"
    );
    sb.stop().await;
}

/// The agent and controller these tests run are the architecture asked for (hack/test-arm64.sh
/// runs them against the arm64 binaries): found as the sandbox finds them.
#[test]
fn the_programs_under_test_are_the_architecture_asked_for() {
    for program in ["reboot-agent", "reboot-controller"] {
        let path = nodesim::workspace_binary(program).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            e2e::elf::architecture(&path),
            e2e::elf::expected_architecture(),
            "{}",
            path.display()
        );
    }
}
