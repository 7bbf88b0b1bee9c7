//! Whether to reboot (docs/src/scheduling.md), end to end: the agent requests its node's reboot
//! when the operating system says so (a sentinel file or command), exactly once; a sentinel that
//! survives the reboot is reported and not acted on; once it is gone, the next need (even
//! the same) is a new one; a node can opt out.

use common::{AgentReason, ControllerReason};
use e2e::{BudgetWatch, eventually, in_run, kubectl, node_events, wait_until};
use nodesim::sandbox::{Sandbox, SandboxConfig};
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(60);

async fn sandbox(nodes: usize, sentinel_flag: &str) -> Sandbox {
    let config = SandboxConfig::with_nodes(nodes)
        .max_unavailable("2")
        .reboot_duration(Duration::from_secs(1))
        .agent_args([sentinel_flag, "--check-period=1s"]);
    e2e::sandbox_without_pods(config).await
}

async fn reasons(sb: &Sandbox, node: &str) -> Vec<String> {
    node_events(&sb.client, node)
        .await
        .into_iter()
        .map(|(reason, _, _)| reason)
        .collect()
}

async fn annotation(sb: &Sandbox, node: &str, key: &str) -> Option<String> {
    let node = e2e::node(&sb.client, node).await;
    node.metadata.annotations?.get(key).cloned()
}

/// Long enough for several checks of the sentinel (every second) after a reboot.
async fn several_checks_later(watch: &BudgetWatch) {
    tokio::time::sleep(Duration::from_secs(6)).await;
    watch
        .check()
        .unwrap_or_else(|violation| panic!("{violation}"));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_sentinel_file_gets_its_node_rebooted_once_and_one_that_survives_is_reported() {
    let sb = sandbox(2, "--reboot-sentinel-file={node_dir}/run/reboot-required").await;
    let watch = BudgetWatch::start(sb.client.clone(), 2).await;
    let (gone, stays) = ("sim-1", "sim-2");
    let content = "*** System restart required ***\n";
    std::fs::write(in_run(&sb, gone, "reboot-required"), content).unwrap();
    let persistent = in_run(&sb, stays, "reboot-required");
    std::fs::write(&persistent, content).unwrap();
    let modified = std::fs::metadata(&persistent).unwrap().modified().unwrap();

    wait_until(
        "both nodes request and get a reboot",
        WAIT,
        Some(&watch),
        || async { sb.fleet.reboots(gone) == 1 && sb.fleet.reboots(stays) == 1 },
    )
    .await;
    // sim-2's sentinel is on a persistent disk: the same file, the same time, after the boot.
    let persistent = in_run(&sb, stays, "reboot-required");
    std::fs::write(&persistent, content).unwrap();
    let file = std::fs::File::options()
        .write(true)
        .open(&persistent)
        .unwrap();
    file.set_modified(modified).unwrap();

    let path = sb.fleet.node_dir(gone).join("run/reboot-required");
    assert_eq!(
        annotation(&sb, gone, "reboot-requested-by").await,
        Some(format!("agent: {}", path.display())),
        "who asked and why"
    );
    eventually(
        "sim-2's agent reports its sentinel survived",
        WAIT,
        Some(&watch),
        || async {
            reasons(&sb, stays)
                .await
                .iter()
                .any(|r| r == AgentReason::SentinelPersists.as_str())
                .then_some(())
        },
    )
    .await;
    wait_until("both reboots are completed", WAIT, Some(&watch), || async {
        e2e::rollout::ledger_is_empty_on(&sb.client).await
    })
    .await;
    several_checks_later(&watch).await;
    for node in [gone, stays] {
        assert_eq!(
            sb.fleet.reboots(node),
            1,
            "{node} rebooted once, never again"
        );
        assert_eq!(annotation(&sb, node, "reboot-needed").await, None, "{node}");
        let requested = reasons(&sb, node).await;
        let count = requested
            .iter()
            .filter(|r| *r == AgentReason::RebootRequired.as_str())
            .count();
        assert_eq!(count, 1, "{node}: {requested:?}");
    }
    assert!(
        !reasons(&sb, gone)
            .await
            .iter()
            .any(|r| r == AgentReason::SentinelPersists.as_str())
    );
    sb.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_sentinel_command_that_exits_0_gets_its_node_rebooted_once() {
    let sb = sandbox(
        1,
        "--reboot-sentinel-command=test -e {node_dir}/run/needs-reboot",
    )
    .await;
    let watch = BudgetWatch::start(sb.client.clone(), 2).await;
    std::fs::write(in_run(&sb, "sim-1", "needs-reboot"), "").unwrap();
    wait_until(
        "the command's answer gets the node rebooted",
        WAIT,
        Some(&watch),
        || async {
            sb.fleet.reboots("sim-1") == 1 && e2e::rollout::ledger_is_empty_on(&sb.client).await
        },
    )
    .await;
    let by = annotation(&sb, "sim-1", "reboot-requested-by").await;
    assert!(
        by.is_some_and(|b| b.starts_with("agent: `test -e ")),
        "who asked"
    );
    several_checks_later(&watch).await;
    assert_eq!(
        sb.fleet.reboots("sim-1"),
        1,
        "the command says no after the reboot"
    );
    sb.stop().await;
}

async fn count(sb: &Sandbox, node: &str, reason: AgentReason) -> usize {
    reasons(sb, node)
        .await
        .iter()
        .filter(|r| *r == reason.as_str())
        .count()
}

/// A command whose output never changes (`test -e` prints nothing): after the reboot it asked
/// for, it still says "needed" (the update did not apply); it is reported, not acted on. Once
/// it says "not needed", the agent forgets it, and its next "needed", byte for byte the same,
/// gets the node rebooted again.
#[tokio::test(flavor = "multi_thread")]
async fn a_command_that_keeps_its_answer_is_reported_then_requests_again_after_saying_no() {
    let node = "sim-1";
    // Outside `run/`: it survives the reboot, as `needs-restarting -r` may keep saying 1.
    let sb = sandbox(
        1,
        "--reboot-sentinel-command=test -e {node_dir}/needs-reboot",
    )
    .await;
    let watch = BudgetWatch::start(sb.client.clone(), 2).await;
    let needed = sb.fleet.node_dir(node).join("needs-reboot");
    std::fs::write(&needed, "").unwrap();

    wait_until(
        "the first reboot is completed",
        WAIT,
        Some(&watch),
        || async {
            sb.fleet.reboots(node) == 1 && e2e::rollout::ledger_is_empty_on(&sb.client).await
        },
    )
    .await;
    eventually(
        "the agent reports that the command still says so after the reboot",
        WAIT,
        Some(&watch),
        || async { (count(&sb, node, AgentReason::SentinelPersists).await > 0).then_some(()) },
    )
    .await;
    several_checks_later(&watch).await;
    assert_eq!(
        sb.fleet.reboots(node),
        1,
        "a sentinel that persists rebooted again"
    );
    assert_eq!(annotation(&sb, node, "reboot-needed").await, None);
    assert_eq!(count(&sb, node, AgentReason::RebootRequired).await, 1);
    assert_eq!(
        count(&sb, node, AgentReason::SentinelPersists).await,
        1,
        "reported once"
    );
    assert!(
        annotation(&sb, node, "reboot-sentinel").await.is_some(),
        "the record of the sentinel stays while it is there"
    );

    std::fs::remove_file(&needed).unwrap();
    wait_until(
        "the agent forgets the sentinel once the command says no",
        WAIT,
        Some(&watch),
        || async { annotation(&sb, node, "reboot-sentinel").await.is_none() },
    )
    .await;
    assert_eq!(sb.fleet.reboots(node), 1);

    // The same answer as the first time: a new need all the same.
    std::fs::write(&needed, "").unwrap();
    wait_until(
        "the second reboot is completed",
        WAIT,
        Some(&watch),
        || async {
            sb.fleet.reboots(node) == 2 && e2e::rollout::ledger_is_empty_on(&sb.client).await
        },
    )
    .await;
    eventually(
        "the agent reports again that the command still says so after the second reboot",
        WAIT,
        Some(&watch),
        || async { (count(&sb, node, AgentReason::SentinelPersists).await == 2).then_some(()) },
    )
    .await;
    several_checks_later(&watch).await;
    assert_eq!(
        sb.fleet.reboots(node),
        2,
        "rebooted again after the second need"
    );
    assert_eq!(count(&sb, node, AgentReason::RebootRequired).await, 2);
    assert_eq!(
        annotation(&sb, node, "reboot-needed").await,
        None,
        "no loop"
    );
    sb.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_opted_out_node_is_never_granted_and_its_agent_never_requests() {
    let sb = sandbox(2, "--reboot-sentinel-file={node_dir}/run/reboot-required").await;
    let watch = BudgetWatch::start(sb.client.clone(), 2).await;
    let (out, other) = ("sim-1", "sim-2");
    e2e::label_node(&sb.control_plane, out, "reboot-disabled=true");
    // Both nodes' sentinels say "reboot": the other node's agent asking, and its reboot,
    // show that the agents look and the controller acts, so the silence below means something.
    for node in [out, other] {
        std::fs::write(in_run(&sb, node, "reboot-required"), "").unwrap();
    }
    wait_until(
        "the other node's agent asks and it is rebooted",
        WAIT,
        Some(&watch),
        || async {
            sb.fleet.reboots(other) == 1 && e2e::rollout::ledger_is_empty_on(&sb.client).await
        },
    )
    .await;
    assert!(
        reasons(&sb, other)
            .await
            .iter()
            .any(|r| r == AgentReason::RebootRequired.as_str())
    );
    assert_eq!(
        annotation(&sb, out, "reboot-needed").await,
        None,
        "the opted-out node's agent asked"
    );

    // An administrator's request, whatever the annotations: never granted.
    kubectl(
        &sb.control_plane,
        &["annotate", "node", out, "reboot-needed=true"],
    );
    eventually(
        "the opted-out node is told why it waits",
        WAIT,
        Some(&watch),
        || async {
            reasons(&sb, out)
                .await
                .iter()
                .any(|r| r == ControllerReason::RebootDisabled.as_str())
                .then_some(())
        },
    )
    .await;
    several_checks_later(&watch).await;
    assert_eq!(sb.fleet.reboots(out), 0, "an opted-out node was rebooted");
    let state = e2e::NodeState::of(&e2e::node(&sb.client, out).await);
    assert!(!state.unschedulable, "{state}");
    assert_eq!(
        state.annotations,
        ["reboot-needed"],
        "only the request: {state}"
    );
    sb.stop().await;
}

/// The SentinelFailed Warnings on `node`, by note.
async fn failures(sb: &Sandbox, node: &str) -> Vec<String> {
    node_events(&sb.client, node)
        .await
        .into_iter()
        .filter(|(reason, _, _)| reason == AgentReason::SentinelFailed.as_str())
        .map(|(_, _, note)| note)
        .collect()
}

/// kured's form of a sentinel command (a shell's words in quotes) works as kured runs it. A
/// command that does not run to an answer (the shell's 126, as when the host's mount namespace
/// cannot be entered, or a program that is not there) is never read as "no reboot needed"
/// silently: a Warning on the node, once for its cause however often it is looked at, and no
/// request. Every other exit is an answer.
#[tokio::test(flavor = "multi_thread")]
async fn kureds_quoted_command_works_and_one_that_cannot_answer_is_a_warning_not_a_no() {
    let sb = sandbox(
        3,
        "--reboot-sentinel-command=sh -c 'exit $(cat {node_dir}/run/answer)'",
    )
    .await;
    let watch = BudgetWatch::start(sb.client.clone(), 2).await;
    std::fs::write(in_run(&sb, "sim-1", "answer"), "0").unwrap();
    std::fs::write(in_run(&sb, "sim-2", "answer"), "126").unwrap();
    std::fs::write(in_run(&sb, "sim-3", "answer"), "1").unwrap();
    wait_until(
        "sim-1 is rebooted and sim-2 has a SentinelFailed Warning",
        WAIT,
        Some(&watch),
        || async { sb.fleet.reboots("sim-1") == 1 && !failures(&sb, "sim-2").await.is_empty() },
    )
    .await;
    let by = annotation(&sb, "sim-1", "reboot-requested-by").await;
    assert!(
        by.as_deref()
            .is_some_and(|b| b.starts_with("agent: `sh -c 'exit $(cat ")),
        "who asked, quoted as given: {by:?}"
    );
    several_checks_later(&watch).await;
    let said = failures(&sb, "sim-2").await;
    assert_eq!(said.len(), 1, "once for its cause: {said:?}");
    assert!(said[0].contains("exit code 126"), "{said:?}");
    for node in ["sim-2", "sim-3"] {
        assert_eq!(sb.fleet.reboots(node), 0, "{node} was not asked to reboot");
        assert_eq!(
            annotation(&sb, node, "reboot-needed").await,
            None,
            "{node}: no request"
        );
    }
    assert!(
        failures(&sb, "sim-3").await.is_empty(),
        "an exit of 1 is an answer"
    );
    sb.stop().await;

    let sb = sandbox(
        1,
        "--reboot-sentinel-command=/nonexistent/needs-restarting -r",
    )
    .await;
    let said = eventually(
        "a Warning that the sentinel command cannot run",
        WAIT,
        None,
        || async { failures(&sb, "sim-1").await.into_iter().next() },
    )
    .await;
    assert!(
        said.contains("cannot run `/nonexistent/needs-restarting -r`"),
        "{said}"
    );
    sb.stop().await;
}
