//! `kubectl reboot` (docs/src/operations.md), end to end: the real kubectl finds the plugin on
//! PATH, an administrator's ServiceAccount (the docs' `node-reboot-admin` roles) pauses the pool
//! and requests reboots with it, a read-only ServiceAccount (`node-reboot-viewer`) sees why
//! the nodes wait, as text and as JSON that agree, and is refused a request with a clear
//! error; after the resume the rollout completes and the status shows every node idle, with
//! the reboots' durations for the estimate. A node that never comes back is given up with
//! `kubectl reboot abandon`, through the controller, and the rollout goes on.

use common::ControllerReason;
use common::ledger::{LEDGER_NAME, OPERATOR_NAMESPACE};
use e2e::{BudgetWatch, eventually, kubectl, rollout::rollout_completes, wait_until};
use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use nodesim::sandbox::SandboxConfig;
use serde_json::Value;
use std::{
    collections::BTreeMap,
    path::PathBuf,
    process::{Command, Output, Stdio},
    time::Duration,
};
use testenv::ControlPlane;

const PATIENCE: Duration = Duration::from_secs(120);

/// The real kubectl, with only the plugin's directory on PATH, as one identity.
pub(crate) struct Kubectl {
    kubectl: PathBuf,
    path: PathBuf,
    kubeconfig: PathBuf,
}

impl Kubectl {
    pub(crate) fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(&self.kubectl);
        // kubectl hands a plugin every argument after its name, and finds the plugin only
        // when no flag comes first: the kubeconfig goes in the environment.
        command
            .args(args)
            .env("PATH", &self.path)
            .env("KUBECONFIG", &self.kubeconfig)
            .env_remove("KUBECTL_REBOOT_METRICS_URL")
            .env_remove("MAX_UNAVAILABLE");
        command
    }

    pub(crate) fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().expect("kubectl runs")
    }

    /// Runs and expects success; stdout.
    pub(crate) fn ok(&self, args: &[&str]) -> String {
        let output = self.run(args);
        assert!(
            output.status.success(),
            "kubectl {} failed: {}{}",
            args.join(" "),
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    /// Runs and expects a failure that says `words` on stderr.
    pub(crate) fn fails(&self, args: &[&str], words: &str) {
        let output = self.run(args);
        let said = stderr(&output);
        assert!(
            !output.status.success(),
            "kubectl {} succeeded",
            args.join(" ")
        );
        assert!(said.contains(words), "{words:?} missing: {said}");
    }

    pub(crate) fn json(&self, extra: &[&str]) -> Value {
        let mut args = vec!["reboot", "status", "-o", "json"];
        args.extend_from_slice(extra);
        let text = self.ok(&args);
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
    }
}

/// The plugin alone in a directory (target/debug also holds `kubectl-reboot.d`, which
/// `kubectl plugin list` would warn about).
fn plugin_dir(cp: &ControlPlane) -> PathBuf {
    let built = nodesim::workspace_binary("kubectl-reboot").unwrap_or_else(|e| panic!("{e}"));
    let dir = cp.dir().join("plugins");
    std::fs::create_dir_all(&dir).expect("plugin dir");
    std::os::unix::fs::symlink(&built, dir.join("kubectl-reboot")).expect("symlink the plugin");
    dir
}

fn rbac_manifest() -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../kubectl-reboot/rbac.yaml");
    std::fs::read_to_string(path).expect("kubectl-reboot/rbac.yaml")
}

/// A ServiceAccount `default/<name>` bound to the docs' roles `<role>` (the ClusterRole
/// and the Role in the operator's namespace), and a kubeconfig with a token of it minted by
/// `kubectl create token`.
fn service_account(cp: &ControlPlane, name: &str, roles: &[&str]) -> PathBuf {
    kubectl(cp, &["create", "serviceaccount", "-n", "default", name]);
    let subject = format!("--serviceaccount=default:{name}");
    for role in roles {
        let binding = format!("{name}-{role}");
        let cluster_role = format!("--clusterrole={role}");
        kubectl(
            cp,
            &[
                "create",
                "clusterrolebinding",
                &binding,
                &cluster_role,
                &subject,
            ],
        );
        let role = format!("--role={role}");
        let ns = OPERATOR_NAMESPACE;
        kubectl(
            cp,
            &["create", "rolebinding", "-n", ns, &binding, &role, &subject],
        );
    }
    let token = kubectl(cp, &["create", "token", "-n", "default", name]);
    let path = cp.dir().join(format!("sa-{name}.kubeconfig"));
    cp.write_kubeconfig_for_token(token.trim(), &path)
        .expect("kubeconfig");
    path
}

/// The plugin on PATH, the docs' roles, and one identity of each kind: the cluster admin,
/// a read-only user (`node-reboot-viewer`) and an administrator (`node-reboot-admin` too).
pub(crate) struct Users {
    pub(crate) dir: PathBuf,
    pub(crate) root: Kubectl,
    pub(crate) viewer: Kubectl,
    pub(crate) admin: Kubectl,
}

/// The plugin on PATH and the docs' roles in `cp`, whose operator namespace exists.
pub(crate) fn users(cp: &ControlPlane) -> Users {
    let dir = plugin_dir(cp);
    let kubectl_bin = testenv::ControlPlane::bin("kubectl").expect("kubectl");
    let as_identity = |kubeconfig: PathBuf| Kubectl {
        kubectl: kubectl_bin.clone(),
        path: dir.clone(),
        kubeconfig,
    };
    cp.apply(&rbac_manifest()).expect("apply rbac.yaml");
    Users {
        root: as_identity(cp.kubeconfig_path().to_path_buf()),
        viewer: as_identity(service_account(cp, "viewer", &["node-reboot-viewer"])),
        admin: as_identity(service_account(
            cp,
            "admin",
            &["node-reboot-viewer", "node-reboot-admin"],
        )),
        dir,
    }
}

/// The rows of the text table: node name to its STATE and DETAIL.
fn rows(text: &str) -> BTreeMap<String, (String, String)> {
    let mut lines = text.lines().skip_while(|l| !l.starts_with("NODE "));
    let header = lines.next().expect("a table header");
    let detail_at = header.find("DETAIL").expect("a DETAIL column");
    lines
        .take_while(|l| l.starts_with("sim-"))
        .map(|line| {
            let mut words = line.split_whitespace();
            let name = words.next().unwrap_or_default().to_owned();
            let state = words.next().unwrap_or_default().to_owned();
            let detail = line.get(detail_at..).unwrap_or_default().trim().to_owned();
            (name, (state, detail))
        })
        .collect()
}

fn node_json<'v>(status: &'v Value, name: &str) -> &'v Value {
    status["nodes"]
        .as_array()
        .expect("nodes")
        .iter()
        .find(|n| n["name"] == name)
        .unwrap_or_else(|| panic!("{name} not in {status}"))
}

pub(crate) fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_plugin_on_path_shows_why_nodes_wait_and_drives_a_rollout_with_plain_rbac() {
    let config = SandboxConfig::with_nodes(4).reboot_duration(Duration::from_secs(3));
    let sb = e2e::sandbox_without_pods(config).await;
    let client = sb.client.clone();
    let names = sb.fleet.names();
    let watch = BudgetWatch::start(client.clone(), 1).await;
    let Users {
        dir,
        root,
        viewer,
        admin,
    } = users(&sb.control_plane);

    // The real kubectl finds the plugin on PATH.
    let list = root.ok(&["plugin", "list"]);
    let found = dir.join("kubectl-reboot");
    assert!(list.contains(&found.display().to_string()), "{list}");
    let help = root.ok(&["reboot", "--help"]);
    for command in ["status", "request", "cancel", "abandon", "pause", "resume"] {
        assert!(help.contains(command), "{help}");
    }

    // Pausing a ledger that does not exist creates nothing and says why (as the cluster
    // admin: the roles name only the default ledger).
    let missing = root.run(&["reboot", "pause", "--ledger-name", "no-such-ledger"]);
    assert!(!missing.status.success());
    assert!(
        stderr(&missing).contains("no-such-ledger does not exist yet"),
        "{}",
        stderr(&missing)
    );
    let leases: Api<Lease> = Api::namespaced(client.clone(), OPERATOR_NAMESPACE);
    assert!(leases.get_opt("no-such-ledger").await.unwrap().is_none());
    wait_until(
        "the controller created its ledger",
        Duration::from_secs(30),
        Some(&watch),
        || async { leases.get_opt(LEDGER_NAME).await.ok().flatten().is_some() },
    )
    .await;

    // Paused, then every node requested with the plugin; one request cancelled and made again.
    let paused = admin.ok(&["reboot", "pause"]);
    assert!(paused.starts_with("paused"), "{paused}");
    assert!(paused.contains("every RebootPool"), "{paused}");
    // The read-only user may not request, and is told why.
    let refused = viewer.run(&["reboot", "request", &names[0]]);
    assert!(!refused.status.success(), "a viewer requested a reboot");
    let why = stderr(&refused);
    println!("kubectl reboot request, as the viewer:\n{why}");
    for words in [
        "forbidden",
        "cannot patch",
        "node-reboot-admin",
        "kubectl reboot request",
    ] {
        assert!(why.contains(words), "{words:?} missing: {why}");
    }
    let n0 = e2e::node(&client, &names[0]).await;
    assert!(e2e::protocol_annotations(&n0).is_empty(), "{n0:?}");
    let mut request = vec!["reboot", "request"];
    request.extend(names.iter().map(String::as_str));
    admin.ok(&request);
    let cancelled = admin.ok(&["reboot", "cancel", &names[3]]);
    assert!(cancelled.contains("reboot cancelled"), "{cancelled}");
    let n3 = e2e::node(&client, &names[3]).await;
    assert!(e2e::protocol_annotations(&n3).is_empty(), "{n3:?}");
    assert_eq!(
        node_json(&viewer.json(&[]), &names[3])["state"],
        "idle",
        "cancelled"
    );
    admin.ok(&["reboot", "request", &names[3]]);

    // The read-only user sees every node waiting because the pool is paused, once the
    // controller has said so in each node's Events.
    let metrics_url = sb.controllers[0].metrics_url().expect("metrics");
    let status = eventually(
        "every node waits, paused, with the controller's Event",
        Duration::from_secs(30),
        Some(&watch),
        || async {
            let status = viewer.json(&["--metrics-url", &metrics_url]);
            let all = names.iter().all(|n| {
                let node = node_json(&status, n);
                node["state"] == "waiting"
                    && node["reason"] == "paused"
                    && node["event"]["reason"] == ControllerReason::Paused.as_str()
            });
            all.then_some(status)
        },
    )
    .await;
    assert_eq!(status["kind"], "RebootStatus");
    assert_eq!(status["pool"]["paused"], true);
    assert_eq!(status["pool"]["nodes"], 4);
    assert_eq!(status["budget"]["source"], "metrics");
    assert_eq!(status["budget"]["maxUnavailable"], 1);
    assert_eq!(status["budget"]["slotsInUse"], 0);
    assert_eq!(status["estimate"]["remaining"], 4);
    assert_eq!(status["estimate"]["heldBy"], "paused");
    assert_eq!(status["warnings"], Value::Array(vec![]), "{status}");

    // The text says the same as the JSON.
    let text = viewer.ok(&["reboot", "status", "--metrics-url", &metrics_url]);
    println!("kubectl reboot status (paused):\n{text}");
    assert!(text.contains(", PAUSED"), "{text}");
    assert!(
        text.contains("max-unavailable from the controller's metrics"),
        "{text}"
    );
    let json = viewer.json(&["--metrics-url", &metrics_url]);
    let table = rows(&text);
    assert_eq!(table.len(), names.len(), "{text}");
    for (name, (state, detail)) in &table {
        let node = node_json(&json, name);
        assert_eq!(node["state"], state.as_str(), "{name}: {text}");
        assert_eq!(node["detail"], detail.as_str(), "{name}: {text}");
        assert!(detail.starts_with("paused: "), "{name}: {detail}");
    }

    // The read-only user may look but not cancel or resume.
    let refused = viewer.run(&["reboot", "cancel", &names[0]]);
    assert!(!refused.status.success(), "a viewer cancelled a request");
    assert!(
        stderr(&refused).contains("forbidden"),
        "{}",
        stderr(&refused)
    );
    let refused = viewer.run(&["reboot", "resume"]);
    assert!(!refused.status.success(), "a viewer resumed the pool");
    assert!(
        stderr(&refused).contains("forbidden"),
        "{}",
        stderr(&refused)
    );

    // Resumed: the rollout completes within the budget; on the way the plugin shows nodes
    // rebooting and never more unavailable than the budget.
    let resumed = admin.ok(&["reboot", "resume"]);
    assert!(resumed.starts_with("resumed"), "{resumed}");
    let mut seen = BTreeMap::<String, usize>::new();
    let mut sample = None;
    let mut sample_estimated = false;
    wait_until(
        "every node rebooted, as the plugin sees it",
        e2e::rollout::ROLLOUT,
        Some(&watch),
        || {
            let status = viewer.json(&["--max-unavailable", "1"]);
            assert!(
                status["budget"]["unavailable"].as_u64() <= Some(1),
                "{status}"
            );
            for node in status["nodes"].as_array().into_iter().flatten() {
                let state = node["state"].as_str().unwrap_or_default().to_owned();
                *seen.entry(state).or_default() += 1;
            }
            // For people: a moment with a reboot under way, and an estimate once one is known.
            let rebooting = status["nodes"]
                .as_array()
                .is_some_and(|n| n.iter().any(|n| n["state"] == "rebooting"));
            let estimated = !status["estimate"]["doneInSeconds"].is_null();
            if rebooting && (sample.is_none() || (estimated && !sample_estimated)) {
                sample = Some(viewer.ok(&["reboot", "status", "--max-unavailable", "1"]));
                sample_estimated = estimated;
            }
            let done = status["estimate"]["remaining"] == 0;
            async move { done }
        },
    )
    .await;
    if let Some(sample) = &sample {
        println!("kubectl reboot status (rollout):\n{sample}");
    }
    assert!(seen.contains_key("rebooting"), "{seen:?}");
    rollout_completes(&sb, &watch).await;

    let text = viewer.ok(&["reboot", "status", "--max-unavailable", "1"]);
    println!("kubectl reboot status (done):\n{text}");
    for (name, (state, detail)) in rows(&text) {
        assert_eq!(state, "idle", "{name}: {text}");
        assert!(detail.starts_with("last reboot "), "{name}: {detail}");
    }
    let json = viewer.json(&["--max-unavailable", "1"]);
    assert_eq!(json["pool"]["paused"], false);
    assert_eq!(json["budget"]["slotsInUse"], 0);
    assert_eq!(json["estimate"]["summary"], "nothing to reboot");
    assert_eq!(json["estimate"]["basis"], "events", "{json}");
    assert_eq!(json["estimate"]["samples"], 4, "{json}");
    let typical = json["estimate"]["rebootSeconds"]
        .as_f64()
        .expect("a median");
    assert!((1.0..60.0).contains(&typical), "{typical}");

    // --watch refreshes (plain repeated blocks without a terminal) until Ctrl-C, exit 0.
    let mut watching = viewer
        .command(&["reboot", "status", "--watch", "--interval", "500ms"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start --watch");
    tokio::time::sleep(Duration::from_secs(3)).await;
    let interrupt = Command::new("kill")
        .args(["-INT", &watching.id().to_string()])
        .status()
        .expect("kill -INT");
    assert!(interrupt.success());
    let finished = tokio::task::spawn_blocking(move || {
        let start = std::time::Instant::now();
        loop {
            if let Some(status) = watching.try_wait().expect("wait") {
                return Some((status, watching));
            }
            if start.elapsed() > Duration::from_secs(10) {
                let _ = watching.kill();
                return None;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    })
    .await
    .expect("join");
    let (exit, watching) = finished.expect("--watch stops on Ctrl-C");
    let output = watching.wait_with_output().expect("output");
    assert!(
        exit.success(),
        "--watch exit: {exit:?}, {}",
        stderr(&output)
    );
    let frames = String::from_utf8_lossy(&output.stdout)
        .matches("Pool:")
        .count();
    assert!(frames >= 2, "{frames} frames in 3 s at 500ms");
    assert!(
        !String::from_utf8_lossy(&output.stdout).contains('\x1b'),
        "no ANSI on a pipe"
    );

    watch.check().unwrap();
    sb.stop().await;
}

/// The runbook of a node that will not come back: sim-1 was granted a slot, told to reboot,
/// and never came back (its reboot swallowed, its agent gone, NotReady); past
/// `--reboot-timeout` it holds the pool. `kubectl reboot abandon` gives it up through the
/// controller: its slot leaves the ledger, the operator's cordon and the protocol's
/// annotations go, an Event names who and why, and the others' reboots go on, with the
/// NotReady sim-1 still counted against the budget. A node not in the protocol, an unknown
/// node and a read-only user are refused.
#[tokio::test(flavor = "multi_thread")]
async fn a_node_that_never_comes_back_is_abandoned_with_the_plugin_and_the_rollout_goes_on() {
    let config = SandboxConfig::with_nodes(3)
        .max_unavailable("2")
        .reboot_duration(Duration::from_secs(1))
        .controller_args(["--reboot-timeout", "10s"]);
    let sb = e2e::sandbox_without_pods(config).await;
    let client = sb.client.clone();
    let watch = BudgetWatch::start(client.clone(), 2).await;
    let Users { viewer, admin, .. } = users(&sb.control_plane);
    let leases: Api<Lease> = Api::namespaced(client.clone(), OPERATOR_NAMESPACE);
    let slots = async || {
        let lease = leases.get_opt(LEDGER_NAME).await.ok().flatten();
        let annotations = lease.and_then(|l| l.metadata.annotations);
        common::ledger::slots_of(annotations.as_ref()).unwrap_or_default()
    };

    // sim-1 is told to reboot and never comes back.
    sb.fleet.swallow_next_reboot("sim-1");
    admin.ok(&["reboot", "request", "sim-1"]);
    e2e::rollout::never_comes_back(&sb, "sim-1", &watch).await;
    admin.ok(&["reboot", "request", "sim-2", "sim-3"]);
    wait_until(
        "sim-1 is overdue and holds the pool",
        PATIENCE,
        Some(&watch),
        || async {
            e2e::has_event(
                &client,
                "sim-1",
                ControllerReason::RebootOverdue,
                &["kubectl reboot abandon sim-1"],
            )
            .await
        },
    )
    .await;
    assert!(slots().await.contains_key("sim-1"), "sim-1 holds its slot");
    let n1 = e2e::node(&client, "sim-1").await;
    assert!(common::NodeFacts::from_node(&n1).unschedulable, "cordoned");

    // Bad input first: a read-only user, an unknown node, a node not in the protocol.
    viewer.fails(&["reboot", "abandon", "sim-1"], "forbidden");
    admin.fails(
        &["reboot", "abandon", "no-such-node"],
        "no-such-node not found",
    );

    // The administrator gives sim-1 up.
    let said = admin.ok(&[
        "reboot",
        "abandon",
        "sim-1",
        "--reason",
        "disk failed, replaced",
    ]);
    println!("kubectl reboot abandon:\n{said}");
    assert!(said.contains("node/sim-1 given up"), "{said}");
    let note: String = eventually(
        "sim-1 is given up: slot released, uncordoned, annotations cleared, an Event",
        PATIENCE,
        Some(&watch),
        || async {
            let n = e2e::node(&client, "sim-1").await;
            let cleared = e2e::protocol_annotations(&n).is_empty()
                && !common::NodeFacts::from_node(&n).unschedulable
                && !slots().await.contains_key("sim-1");
            let event = e2e::node_events(&client, "sim-1")
                .await
                .into_iter()
                .find(|(reason, _, _)| reason == ControllerReason::RebootAbandoned.as_str());
            event.filter(|_| cleared).map(|(_, _, message)| message)
        },
    )
    .await;
    println!("the Event: {note}");
    for words in [
        "system:serviceaccount:default:admin",
        "disk failed, replaced",
    ] {
        assert!(note.contains(words), "{words:?} missing: {note}");
    }
    assert!(
        !e2e::has_event(&client, "sim-1", ControllerReason::Cancelled, &[]).await,
        "given up, not cancelled"
    );
    let status = viewer.json(&["--max-unavailable", "2"]);
    assert_eq!(node_json(&status, "sim-1")["state"], "idle", "{status}");
    assert_eq!(node_json(&status, "sim-1")["abandon"], Value::Null);

    // Given up already: nothing to give up, said and refused.
    admin.fails(
        &["reboot", "abandon", "sim-1"],
        "not in the reboot protocol",
    );

    // The rollout goes on: sim-2 and sim-3 one at a time, sim-1 NotReady counting (the
    // budget watch checks it at every change).
    wait_until(
        "sim-2 and sim-3 rebooted",
        PATIENCE,
        Some(&watch),
        || async {
            let mut done = sb.fleet.reboots("sim-2") == 1 && sb.fleet.reboots("sim-3") == 1;
            for name in ["sim-2", "sim-3"] {
                done &= e2e::protocol_annotations(&e2e::node(&client, name).await).is_empty();
            }
            done
        },
    )
    .await;
    assert_eq!(sb.fleet.reboots("sim-1"), 0, "the swallowed reboot");
    watch.check().unwrap();
    sb.stop().await;
}
