//! Real reboots of real Linux machines (docs/src/development.md, "Real reboots in virtual machines"): Debian
//! guests under QEMU, each running the static `reboot-agent` under systemd with a different
//! reboot method, the real controller on the host, and proof of every reboot from inside the
//! guest (its kernel's banner and boot id on its serial console) as well as from an
//! independent watch of the Nodes.
//!
//! One test, in phases, because the guests are expensive: booting them once serves all.
//! A signal to the test process (Ctrl-C, `kill`) stops every QEMU, the controller and the
//! control plane before it ends ([`vmtest::unless_interrupted`]).

use common::AnnotationKeys;
use e2e::{BudgetWatch, eventually, kubectl, node_events};
use k8s_openapi::api::core::v1::Node;
use kube::{Api, Client};
use nodesim::{ControllerProcess, identities, workspace_binary};
use std::{
    collections::BTreeMap,
    path::PathBuf,
    time::{Duration, Instant},
};
use testenv::{ControlPlane, Options};
use vmtest::{
    fleet::{Guest, VmFleet, reported_boot_id},
    image::BaseImage,
    secs,
};

/// Generous: under software emulation on a loaded 2-core machine a boot takes 15-60 s.
const BOOT_TIMEOUT: Duration = Duration::from_secs(600);
const ROUND_TIMEOUT: Duration = Duration::from_secs(900);
/// The guest whose reboot command does nothing.
const NO_OP: &str = "vm-noop";
/// How long the guests are watched after the last round, in which none may boot again.
const SETTLE: Duration = Duration::from_secs(20);
const CONTROLLER: &str = "reboot-controller";
const AGENT: &str = "reboot-agent";
/// The operator's Events of one good reboot, by reason and reporting component, in order. The
/// agent proves the new boot id without an Event of its own: the controller's `Rebooted`, once
/// it has completed the node (the kubelet reports that boot, Ready), tells of it. No pod runs in
/// the guests: no `Draining` (it comes only with pods to evict).
const ONE_REBOOT: [(&str, &str); 3] = [
    ("RebootApproved", CONTROLLER),
    ("Rebooting", AGENT),
    ("Rebooted", CONTROLLER),
];

fn guests() -> Vec<Guest> {
    vec![
        Guest::new("vm-command", &[("REBOOT_METHOD", "command")]),
        Guest::new("vm-signal", &[("REBOOT_METHOD", "signal")]),
        Guest::new("vm-syscall", &[("REBOOT_METHOD", "syscall")]),
        // A reboot that does not happen: reported after the timeout, retried, never completed.
        Guest::new(
            NO_OP,
            &[
                ("REBOOT_METHOD", "command"),
                ("REBOOT_COMMAND", "/bin/true"),
                ("REBOOT_TIMEOUT", "20s"),
            ],
        ),
    ]
}

/// `target/vm-e2e/run`: the serial consoles, QEMU's and the controller's logs of the last run.
fn run_dir() -> PathBuf {
    let dir = vmtest::repo_root().join("target/vm-e2e/run");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create the run directory");
    dir
}

#[tokio::test(flavor = "multi_thread")]
async fn real_vms_reboot_once_each_within_the_budget_and_a_reboot_that_does_not_happen_is_retried()
{
    vmtest::unless_interrupted(tier()).await;
}

async fn tier() {
    let started = Instant::now();
    vmtest::require_tools().unwrap_or_else(|e| panic!("{e}"));
    let image = BaseImage::ensure().unwrap_or_else(|e| panic!("{e}"));
    let run_dir = run_dir();
    eprintln!("vm-e2e: logs in {}", run_dir.display());
    // No controller-manager: its DaemonSet controller would replace the agent pods that stand
    // for the DaemonSet's pods on these nodes (their tokens are bound to them).
    let cp = ControlPlane::start(Options {
        controller_manager: false,
        scheduler: false,
        data_dir: Some(run_dir.clone()),
        ..Options::default()
    })
    .await
    .expect("control plane starts");
    let admin = cp.client().await.expect("admin client");
    let mut fleet = VmFleet::start(&cp, &image, &guests(), &run_dir)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    fleet
        .wait_until_booted(&admin, BOOT_TIMEOUT)
        .await
        .unwrap_or_else(|e| panic!("{e}"));

    let controller_kubeconfig = identities::service_account_kubeconfig(
        &cp,
        &admin,
        "node-reboot-operator",
        "reboot-controller",
        &run_dir.join("identities/controller.kubeconfig"),
    )
    .await
    .expect("controller identity");
    let start_controller = |n: u32, budget: &str| {
        ControllerProcess::start(
            workspace_binary("reboot-controller").expect("controller built"),
            controller_kubeconfig.clone(),
            // The agents run under systemd; their pods only stand for the DaemonSet's.
            vec![
                "--max-unavailable".into(),
                budget.into(),
                nodesim::sandbox::NO_AGENT_PODS.into(),
            ],
            run_dir.join(format!("controller-{n}.log")),
        )
        .expect("controller starts")
    };
    let rebooted = ["vm-command", "vm-signal", "vm-syscall"];

    // One round with a budget of 2 (the real-node tier reboots one node at a time). vm-noop is
    // requested during the round, as soon as every node of the round holds or held a slot, so
    // that it takes the slot the first of them frees and fails beside the last one's reboot
    // (requested before, it would hold a slot for good and leave the round one).
    let mut controller = start_controller(1, "2");
    let (round_trips, noop_requested) =
        round(&cp, &admin, &fleet, &rebooted, 2, 1, Some(NO_OP)).await;
    let last_round_done = Instant::now();
    let noop_requested = noop_requested.expect("vm-noop requested during the round");
    reboot_that_does_not_happen_is_retried_never_completed(&admin, &fleet, noop_requested).await;
    no_guest_boots_again(&admin, &fleet, &rebooted, 1, last_round_done).await;
    controller.terminate(Duration::from_secs(5)).await;

    eprintln!(
        "vm-e2e: reboot round trips (reboot-now seen -> new boot on the console -> completed):"
    );
    for (node, trip) in round_trips {
        eprintln!("vm-e2e:   {node}: {trip}");
    }
    eprintln!("vm-e2e: the whole tier took {}", secs(started.elapsed()));
}

/// Requests `nodes` at once with `--max-unavailable budget` and checks, from a watch of the
/// Nodes and from each guest's console, that each rebooted exactly once (its `round`-th
/// reboot), within the budget, and was completed. Requests `then` too once no node of the
/// round waits for a slot any more. Returns each node's round trip, and when `then` was
/// requested.
async fn round(
    cp: &ControlPlane,
    client: &Client,
    fleet: &VmFleet,
    nodes: &[&str],
    budget: usize,
    round: usize,
    then: Option<&str>,
) -> (BTreeMap<String, String>, Option<Instant>) {
    let started = Instant::now();
    eprintln!(
        "vm-e2e: round {round}: requesting {} with --max-unavailable {budget}",
        nodes.join(", ")
    );
    let watch = BudgetWatch::start(client.clone(), budget).await;
    let mut annotate = vec!["annotate", "node"];
    annotate.extend(nodes);
    annotate.push("reboot-needed=true");
    kubectl(cp, &annotate);

    let progress = std::sync::Mutex::new(Progress::default());
    let then_requested = std::sync::Mutex::new(None);
    eventually(
        &format!("round {round}: {} rebooted and completed", nodes.join(", ")),
        ROUND_TIMEOUT,
        Some(&watch),
        || async {
            let mut done = true;
            let mut waiting = false;
            for node in nodes {
                let vm = fleet.vm(node);
                let state = phase(client, node, vm.boot_ids().len(), round).await;
                progress
                    .lock()
                    .expect("progress")
                    .note(node, &state, started.elapsed());
                done &= state == "completed";
                waiting |= state == "requested";
            }
            let mut requested = then_requested.lock().expect("requested");
            if let Some(then) = then
                && !waiting
                && requested.is_none()
            {
                eprintln!(
                    "vm-e2e:   {:>7} no node of round {round} waits for a slot: requesting {then}",
                    secs(started.elapsed())
                );
                kubectl(cp, &["annotate", "node", then, "reboot-needed=true"]);
                *requested = Some(Instant::now());
            }
            done.then_some(())
        },
    )
    .await;
    watch
        .check()
        .unwrap_or_else(|violation| panic!("{violation}"));
    assert!(
        watch.max_seen() <= budget,
        "{} unavailable at once",
        watch.max_seen()
    );
    assert!(
        watch.max_seen() >= 1,
        "the watch never saw a node unavailable: it was blind"
    );

    let nodes_api: Api<Node> = Api::all(client.clone());
    for node in nodes {
        let vm = fleet.vm(node);
        let boot_ids = vm.boot_ids();
        assert_eq!(
            boot_ids.len(),
            round + 1,
            "{node} must have booted once and rebooted exactly {round} time(s): boot ids on its \
             console {boot_ids:?} ({})",
            vm.serial_log_path().display()
        );
        assert_eq!(
            vm.kernel_starts(),
            round + 1,
            "{node}: kernel banners on its console"
        );
        assert_eq!(
            reported_boot_id(&nodes_api, node).await.as_ref(),
            boot_ids.last(),
            "{node}: the Node reports the boot id the guest printed"
        );
        // Events are written after the step they tell of: the last may still be on its way.
        let mut told = Err(String::new());
        for _ in 0..60 {
            let story: Vec<(String, String)> = node_events(client, node)
                .await
                .into_iter()
                .map(|(reason, component, _)| (reason, component))
                .filter(|(reason, _)| ONE_REBOOT.iter().any(|(r, _)| r == reason))
                .collect();
            told = reboots_told_in_order(&story, round);
            if told.is_ok() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        if let Err(wrong) = told {
            panic!("{node}: the Events of {round} reboot(s) in order: {wrong}");
        }
    }
    eprintln!(
        "vm-e2e: round {round} done in {}, at most {} unavailable",
        secs(started.elapsed()),
        watch.max_seen()
    );
    (
        progress.into_inner().expect("progress").round_trips(),
        then_requested.into_inner().expect("requested"),
    )
}

/// Whether `story`, a node's Events of [`ONE_REBOOT`]'s reasons as (reason, reporting
/// component) in the order the API server stored them, tells of exactly `reboots` reboots, each
/// in [`ONE_REBOOT`]'s order.
fn reboots_told_in_order(story: &[(String, String)], reboots: usize) -> Result<(), String> {
    let one: Vec<(String, String)> = ONE_REBOOT
        .iter()
        .map(|(reason, component)| ((*reason).to_owned(), (*component).to_owned()))
        .collect();
    if story.len() != one.len() * reboots {
        return Err(format!(
            "{} Events, expected {} ({reboots} x {one:?}): {story:?}",
            story.len(),
            one.len() * reboots
        ));
    }
    for (index, told) in story.chunks(one.len()).enumerate() {
        if told != one {
            return Err(format!(
                "reboot {} was told as {told:?}, expected {one:?}: all {story:?}",
                index + 1
            ));
        }
    }
    Ok(())
}

/// After the last round, every guest that rebooted keeps its boot for [`SETTLE`] from when the
/// round was done: a late extra reboot (an agent that reboots again after completion) would
/// show as one more kernel banner and boot id on its console, or a Node in the protocol again.
async fn no_guest_boots_again(
    client: &Client,
    fleet: &VmFleet,
    nodes: &[&str],
    rounds: usize,
    last_round_done: Instant,
) {
    let waited = last_round_done.elapsed();
    if waited < SETTLE {
        tokio::time::sleep(SETTLE - waited).await;
    }
    let nodes_api: Api<Node> = Api::all(client.clone());
    let keys = AnnotationKeys::default();
    for node in nodes {
        let vm = fleet.vm(node);
        let boot_ids = vm.boot_ids();
        assert_eq!(
            (boot_ids.len(), vm.kernel_starts(), vm.restarts()),
            (rounds + 1, rounds + 1, rounds),
            "{node} (boot ids, kernel banners, restarts) within {} after the last round: it \
             booted again (boot ids {boot_ids:?}; see {})",
            secs(last_round_done.elapsed()),
            vm.serial_log_path().display()
        );
        assert_eq!(
            reported_boot_id(&nodes_api, node).await.as_ref(),
            boot_ids.last(),
            "{node}: the Node still reports the boot id of the last round"
        );
        let annotations = e2e::node(client, node)
            .await
            .metadata
            .annotations
            .unwrap_or_default();
        let back = [&keys.needed, &keys.now, &keys.in_progress, &keys.done];
        assert!(
            !back.iter().any(|key| annotations.contains_key(*key)),
            "{node} is in the protocol again after the last round: {annotations:?}"
        );
    }
    eprintln!(
        "vm-e2e: no guest booted again within {} after the last round",
        secs(last_round_done.elapsed())
    );
}

/// Where a node is in the protocol, from its annotations, cordon and boots.
async fn phase(client: &Client, name: &str, boots_seen: usize, round: usize) -> String {
    let keys = AnnotationKeys::default();
    let node = e2e::node(client, name).await;
    let annotations = node.metadata.annotations.clone().unwrap_or_default();
    let has = |key: &str| annotations.contains_key(key);
    let cordoned = node
        .spec
        .as_ref()
        .and_then(|s| s.unschedulable)
        .unwrap_or(false);
    let in_protocol = [
        &keys.needed,
        &keys.now,
        &keys.in_progress,
        &keys.done,
        &keys.grant,
    ]
    .iter()
    .any(|key| has(key));
    let completed = !in_protocol && !cordoned && has(&keys.last_completed);
    let phase = if boots_seen > round && completed {
        "completed"
    } else if boots_seen > round {
        // Read from the guest's console, not from the annotations: the first sign of the
        // new boot.
        "up again with a new boot id"
    } else if has(&keys.done) {
        "rebooted, waiting for completion"
    } else if has(&keys.in_progress) {
        "rebooting"
    } else if has(&keys.now) {
        "reboot-now"
    } else if has(&keys.grant) {
        "granted, draining"
    } else if has(&keys.needed) {
        "requested"
    } else {
        "idle"
    };
    phase.to_owned()
}

/// Prints each node's phase changes with the time since the round began, and keeps when each
/// node was told to reboot, came back and was completed.
#[derive(Default)]
struct Progress {
    last: BTreeMap<String, String>,
    times: BTreeMap<String, BTreeMap<String, Duration>>,
}

impl Progress {
    fn note(&mut self, node: &str, phase: &str, at: Duration) {
        if self.last.get(node).is_some_and(|p| p == phase) {
            return;
        }
        eprintln!("vm-e2e:   {:>7} {node}: {phase}", secs(at));
        self.last.insert(node.to_owned(), phase.to_owned());
        self.times
            .entry(node.to_owned())
            .or_default()
            .entry(phase.to_owned())
            .or_insert(at);
    }

    fn round_trips(&self) -> BTreeMap<String, String> {
        self.times
            .iter()
            .map(|(node, times)| {
                let at = |phase: &str| times.get(phase).copied();
                let told = at("reboot-now").or(at("rebooting")).unwrap_or_default();
                let back = at("up again with a new boot id")
                    .or(at("completed"))
                    .unwrap_or_default();
                let done = at("completed").unwrap_or_default();
                (
                    node.clone(),
                    format!(
                        "{} to the new boot, {} to completed",
                        secs(back.saturating_sub(told)),
                        secs(done.saturating_sub(told))
                    ),
                )
            })
            .collect()
    }
}

/// The guest whose reboot command exits 0 and does nothing (requested at `requested`): its
/// agent must report that the reboot did not happen, exit, be restarted by systemd and try
/// again; the node is never completed.
async fn reboot_that_does_not_happen_is_retried_never_completed(
    client: &Client,
    fleet: &VmFleet,
    requested: Instant,
) {
    eprintln!("vm-e2e: waiting for {NO_OP}, whose reboot command is /bin/true");
    let started = requested;
    let timed_out = |events: &[(String, String, String)]| {
        events
            .iter()
            .filter(|(reason, component, _)| reason == "RebootTimedOut" && component == AGENT)
            .count()
    };
    eventually(
        "the agent of vm-noop reported twice that its reboot did not happen",
        ROUND_TIMEOUT,
        None,
        || async {
            let events = node_events(client, NO_OP).await;
            (timed_out(&events) >= 2).then_some(())
        },
    )
    .await;
    eprintln!(
        "vm-e2e:   {NO_OP}: two RebootTimedOut Events of its agent {} after its request",
        secs(started.elapsed())
    );
    let vm = fleet.vm(NO_OP);
    assert_eq!(vm.boot_ids().len(), 1, "{NO_OP} never rebooted");
    assert_eq!(vm.kernel_starts(), 1, "{NO_OP}: one kernel banner");
    assert_eq!(vm.restarts(), 0, "{NO_OP}: the kernel never restarted it");
    let told: Vec<(String, String)> = node_events(client, NO_OP)
        .await
        .into_iter()
        .map(|(reason, component, _)| (reason, component))
        .collect();
    assert!(
        told.iter()
            .any(|(reason, component)| reason == "RebootRetried" && component == AGENT),
        "{NO_OP}: no RebootRetried of its agent in {told:?}"
    );
    assert!(
        !told.iter().any(|(reason, _)| reason == "Rebooted"),
        "{NO_OP}: a Rebooted Event in {told:?}"
    );
    let node = e2e::node(client, NO_OP).await;
    let keys = AnnotationKeys::default();
    let annotations = node.metadata.annotations.unwrap_or_default();
    assert!(
        !annotations.contains_key(&keys.done),
        "{NO_OP} was reported rebooted"
    );
    assert!(
        !annotations.contains_key(&keys.last_completed),
        "{NO_OP} was completed"
    );
    assert_eq!(
        node.spec.and_then(|s| s.unschedulable),
        Some(true),
        "{NO_OP} stays cordoned"
    );
}

#[test]
fn the_events_of_a_reboot_are_checked_by_reason_reporter_and_order() {
    let event = |reason: &str, component: &str| (reason.to_owned(), component.to_owned());
    let good = [
        event("RebootApproved", CONTROLLER),
        event("Rebooting", AGENT),
        event("Rebooted", CONTROLLER),
    ];
    assert_eq!(reboots_told_in_order(&good, 1), Ok(()));
    assert_eq!(
        reboots_told_in_order(&[good.clone(), good.clone()].concat(), 2),
        Ok(())
    );
    assert!(
        reboots_told_in_order(&good, 2).is_err(),
        "one reboot is not two"
    );
    // One order, and each step its reporter.
    let mut swapped = good.clone();
    swapped.swap(0, 1);
    assert!(reboots_told_in_order(&swapped, 1).is_err());
    let mut completed_before_rebooting = good.clone();
    completed_before_rebooting.swap(1, 2);
    assert!(reboots_told_in_order(&completed_before_rebooting, 1).is_err());
    let mut wrong_reporter = good.clone();
    wrong_reporter[1] = event("Rebooting", CONTROLLER);
    assert!(reboots_told_in_order(&wrong_reporter, 1).is_err());
    // The agent tells of its proof in its log, not in an Event: a `Rebooted` of its own is
    // one Event too many (the story of one reboot has one `Rebooted`, the controller's).
    let mut by_agent = good.to_vec();
    by_agent.insert(2, event("Rebooted", AGENT));
    assert!(reboots_told_in_order(&by_agent, 1).is_err());
    let mut proven_by_agent = good.clone();
    proven_by_agent[2] = event("Rebooted", AGENT);
    assert!(reboots_told_in_order(&proven_by_agent, 1).is_err());
}
