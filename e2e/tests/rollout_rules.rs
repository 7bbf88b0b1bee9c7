//! Rollouts that protect themselves (docs/src/scheduling.md, "Canary, waves and a failure
//! budget"), end to end on the real control plane with real agents: a canary that comes back
//! NotReady stalls the pool, which stays stalled once the canary is mended until `kubectl
//! reboot resume`; a RebootPool's stall is lifted by `kubectl reboot resume --pool` with the
//! docs' admin roles alone; waves that grow keep the first wave to one node; and a reboot that
//! would not end before its window closes (`--reboot-estimate`) is not started.

use common::ControllerReason;
use e2e::rollout::touched;
use e2e::{BudgetWatch, has_event, node, request_reboot, scrape::controller_metric, wait_until};
use k8s_openapi::jiff::Timestamp;
use nodesim::sandbox::{Sandbox, SandboxConfig};
use std::time::Duration;

const PATIENCE: Duration = Duration::from_secs(180);

/// `kubectl reboot ARGS` with the plugin as built; its standard output.
fn plugin(sb: &Sandbox, args: &[&str]) -> String {
    let plugin = nodesim::workspace_binary("kubectl-reboot").unwrap_or_else(|e| panic!("{e}"));
    let output = std::process::Command::new(plugin)
        .args(args)
        .env("KUBECONFIG", sb.control_plane.kubeconfig_path())
        .output()
        .expect("kubectl-reboot runs");
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "kubectl reboot {args:?}: {text}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    text
}

async fn granted_nodes(sb: &Sandbox, names: &[&str]) -> Vec<String> {
    let mut granted = Vec::new();
    for name in names {
        if touched(sb, name).await.is_some() {
            granted.push((*name).to_owned());
        }
    }
    granted
}

/// sim-1, whose kernel will not come back Ready, is requested and granted as the canary; the
/// budget watch of `budget` nodes runs from before its request.
async fn canary_sim_1_granted_with_a_bad_kernel(sb: &Sandbox, budget: usize) -> BudgetWatch {
    sb.fleet.bad_kernel("sim-1", true);
    let watch = BudgetWatch::start(sb.client.clone(), budget).await;
    request_reboot(&sb.control_plane, "sim-1");
    wait_until(
        "sim-1, the canary, is granted",
        PATIENCE,
        Some(&watch),
        || async { touched(sb, "sim-1").await.is_some() },
    )
    .await;
    watch
}

#[tokio::test(flavor = "multi_thread")]
async fn a_canary_that_comes_back_not_ready_stalls_the_pool_until_resumed() {
    let config = SandboxConfig::with_nodes(3)
        .max_unavailable("3")
        .reboot_duration(Duration::from_secs(1))
        .controller_args(["--canary", "1", "--reboot-timeout", "10s"]);
    let sb = e2e::sandbox_without_pods(config).await;
    let client = sb.client.clone();
    let watch = canary_sim_1_granted_with_a_bad_kernel(&sb, 3).await;
    request_reboot(&sb.control_plane, "sim-2");
    request_reboot(&sb.control_plane, "sim-3");
    wait_until(
        "sim-2 and sim-3 are told they wait for the canary",
        PATIENCE,
        Some(&watch),
        || async {
            has_event(&client, "sim-2", ControllerReason::Requested, &["canary"]).await
                && has_event(&client, "sim-3", ControllerReason::Requested, &["canary"]).await
        },
    )
    .await;
    assert_eq!(
        granted_nodes(&sb, &["sim-2", "sim-3"]).await,
        Vec::<String>::new()
    );

    // The canary comes back NotReady: past --reboot-timeout, its failure stalls the pool.
    wait_until(
        "sim-1's failure is counted and the waiting nodes are told the pool is stalled",
        PATIENCE,
        Some(&watch),
        || async {
            has_event(
                &client,
                "sim-1",
                ControllerReason::RolloutFailure,
                &["canary"],
            )
            .await
                && has_event(
                    &client,
                    "sim-2",
                    ControllerReason::Stalled,
                    &["the canary sim-1 failed", "kubectl reboot resume"],
                )
                .await
        },
    )
    .await;
    assert_eq!(
        controller_metric(&sb, "node_reboot_rollout_stalled").await,
        Some(1.0)
    );

    // Mended, the canary completes; the pool stays stalled until an administrator resumes it.
    sb.fleet.bad_kernel("sim-1", false);
    sb.fleet.set_ready("sim-1", true).await;
    wait_until("sim-1 completes", PATIENCE, Some(&watch), || async {
        e2e::protocol_annotations(&node(&client, "sim-1").await).is_empty()
    })
    .await;
    // The controller looked again since: a grant it decided would show by now.
    e2e::scrape::after_rounds(&sb, 2, Some(&watch)).await;
    assert_eq!(
        granted_nodes(&sb, &["sim-2", "sim-3"]).await,
        Vec::<String>::new(),
        "granted while stalled"
    );
    let said = plugin(&sb, &["resume"]);
    assert!(said.contains("forgave 1 failure"), "{said}");
    wait_until(
        "sim-2 and sim-3 are rebooted once resumed",
        PATIENCE,
        Some(&watch),
        || async { sb.fleet.reboots("sim-2") == 1 && sb.fleet.reboots("sim-3") == 1 },
    )
    .await;
    assert_eq!(
        controller_metric(&sb, "node_reboot_rollout_stalled").await,
        Some(0.0)
    );
    watch.check().unwrap();
    sb.stop().await;
}

/// A RebootPool stalled by its failed canary: `kubectl reboot resume --pool` as the docs'
/// `node-reboot-admin` (which may patch RebootPools but not read the pool's Lease) writes
/// `spec.resumedAt`, and the controller forgives the failure in its own write of the Lease.
#[tokio::test(flavor = "multi_thread")]
async fn a_pool_stalled_by_its_canary_is_resumed_with_the_admin_role_alone() {
    let spec = serde_json::json!({
        "nodeSelector": {"matchLabels": {"pool": "gpu"}},
        "maxUnavailable": 2,
        "canary": 1,
        "rebootTimeout": "10s",
    });
    let sb = crate::reboot_pools::sandbox(&[("gpu", 2)], 0, &["--default-pool=false"]).await;
    let client = sb.client.clone();
    crate::reboot_pools::create_pool(&client, "gpu", spec).await;
    let users = crate::kubectl_plugin::users(&sb.control_plane);
    let watch = canary_sim_1_granted_with_a_bad_kernel(&sb, 2).await;
    request_reboot(&sb.control_plane, "sim-2");
    wait_until(
        "the canary's failure stalls the pool",
        PATIENCE,
        Some(&watch),
        || async {
            has_event(
                &client,
                "sim-2",
                ControllerReason::Stalled,
                &["the canary sim-1 failed"],
            )
            .await
        },
    )
    .await;
    sb.fleet.bad_kernel("sim-1", false);
    sb.fleet.set_ready("sim-1", true).await;
    wait_until("sim-1 completes", PATIENCE, Some(&watch), || async {
        e2e::protocol_annotations(&node(&client, "sim-1").await).is_empty()
    })
    .await;
    assert_eq!(sb.fleet.reboots("sim-2"), 0, "rebooted while stalled");

    // The admin's machine's clock is an hour ahead: the plugin writes the API server's time,
    // or the controller would forgive nothing for an hour.
    let resume = users
        .admin
        .command(&["reboot", "resume", "--pool", "gpu"])
        .envs(e2e::faketime::skewed("+1h"))
        .output()
        .expect("kubectl runs");
    let said = String::from_utf8_lossy(&resume.stdout);
    assert!(
        resume.status.success() && said.contains("spec.resumedAt"),
        "{said}{}",
        String::from_utf8_lossy(&resume.stderr)
    );
    let resumed = crate::reboot_pools::pool(&client, "gpu")
        .await
        .expect("gpu");
    let at: Timestamp = (resumed.spec.resumed_at.as_deref())
        .and_then(|at| at.parse().ok())
        .unwrap_or_else(|| panic!("no spec.resumedAt: {:?}", resumed.spec));
    let ahead = at.duration_since(Timestamp::now());
    assert!(
        ahead < k8s_openapi::jiff::SignedDuration::from_mins(5),
        "spec.resumedAt {at} is the admin's clock, {ahead:?} ahead of the API server's"
    );
    sim_2_rebooted_once_resumed(sb, &watch).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn waves_that_grow_start_with_one_node() {
    let config = SandboxConfig::with_nodes(4)
        .max_unavailable("4")
        .reboot_duration(Duration::from_secs(2))
        .controller_args(["--waves"]);
    let sb = e2e::sandbox_without_pods(config).await;
    let client = sb.client.clone();
    let watch = BudgetWatch::start(client.clone(), 4).await;
    let names = ["sim-1", "sim-2", "sim-3", "sim-4"];
    for name in names {
        request_reboot(&sb.control_plane, name);
    }
    // The budget has room for all four; the first wave holds one, and the others are told so
    // (the wave's size at every write is the model test's to check).
    wait_until(
        "three nodes are told they wait for the next wave, this one holding one node",
        PATIENCE,
        Some(&watch),
        || async {
            let mut told = 0;
            for name in names {
                let words = ["next wave", "this one holds 1 node(s)"];
                if has_event(&client, name, ControllerReason::Requested, &words).await {
                    told += 1;
                }
            }
            told == 3
        },
    )
    .await;
    wait_until("every node rebooted", PATIENCE, Some(&watch), || async {
        names.iter().all(|n| sb.fleet.reboots(n) == 1)
    })
    .await;
    watch.check().unwrap();
    sb.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_reboot_that_would_not_fit_before_the_window_closes_waits_for_the_next_one() {
    // A window open from a minute ago until five minutes from now, every day (UTC), and
    // reboots estimated at ten minutes: none fits, so none starts.
    let now = Timestamp::now().as_second();
    let open = Timestamp::from_second(now - 60).expect("a time");
    let close = Timestamp::from_second(now + 300).expect("a time");
    let window = e2e::daily_window(open, close);
    let config = SandboxConfig::with_nodes(2)
        .max_unavailable("2")
        .reboot_duration(Duration::from_secs(1))
        .controller_args(["--reboot-window", &window, "--reboot-estimate", "10m"]);
    let sb = e2e::sandbox_without_pods(config).await;
    let client = sb.client.clone();
    let watch = BudgetWatch::start(client.clone(), 2).await;
    request_reboot(&sb.control_plane, "sim-1");
    wait_until(
        "sim-1 is told a reboot would not fit before the window closes",
        PATIENCE,
        Some(&watch),
        || async {
            let words = [
                "waiting for the next window",
                "about 10 min (--reboot-estimate)",
            ];
            has_event(&client, "sim-1", ControllerReason::Requested, &words).await
        },
    )
    .await;
    // The controller looked again since: a grant it decided would show by now.
    e2e::scrape::after_rounds(&sb, 2, Some(&watch)).await;
    assert_eq!(
        touched(&sb, "sim-1").await,
        None,
        "started though it does not fit"
    );
    watch.check().unwrap();
    sb.stop().await;
}

/// A RebootPool's ledger Lease deleted while no controller runs: the controller that starts
/// recreates it paused (sim-1's soak cannot be known), and its Warning names
/// `kubectl reboot resume --pool gpu`, which the docs' `node-reboot-admin` (no right on the
/// Lease) runs: the controller lifts the pause in its own write of the Lease, and sim-2 goes.
/// Before, the Warning named the flags' pool's resume, and no command the admin may run lifted
/// the pool's Lease's pause.
#[tokio::test(flavor = "multi_thread")]
async fn a_pool_ledger_recreated_paused_is_resumed_with_the_admin_role_alone() {
    let spec = serde_json::json!({
        "nodeSelector": {"matchLabels": {"pool": "gpu"}},
        "maxUnavailable": 1,
        "minReadySeconds": 600,
    });
    let mut sb = crate::reboot_pools::sandbox(&[("gpu", 2)], 0, &["--default-pool=false"]).await;
    let client = sb.client.clone();
    crate::reboot_pools::create_pool(&client, "gpu", spec).await;
    let users = crate::kubectl_plugin::users(&sb.control_plane);
    let watch = BudgetWatch::start(client.clone(), 1).await;
    let ledger = common::pool::ledger_name("gpu");
    request_reboot(&sb.control_plane, "sim-1");
    wait_until(
        "sim-1 rebooted, in its soak",
        PATIENCE,
        Some(&watch),
        || async {
            let left = e2e::protocol_annotations(&node(&client, "sim-1").await);
            sb.fleet.reboots("sim-1") == 1 && !left.iter().any(|k| k.ends_with("reboot-grant"))
        },
    )
    .await;
    for controller in &mut sb.controllers {
        controller.kill().await;
    }
    let leases: kube::Api<k8s_openapi::api::coordination::v1::Lease> =
        kube::Api::namespaced(client.clone(), common::ledger::OPERATOR_NAMESPACE);
    leases
        .delete(&ledger, &Default::default())
        .await
        .expect("delete the pool's ledger Lease");
    request_reboot(&sb.control_plane, "sim-2");
    sb.start_controller(&["--default-pool=false"])
        .expect("start a controller again");
    let warning = e2e::eventually(
        "a Warning on the pool's Lease says it was recreated paused",
        PATIENCE,
        Some(&watch),
        || async {
            let events = e2e::rollout::ledger_events_of(&client, &ledger).await;
            events
                .into_iter()
                .find(|(kind, reason, _)| {
                    kind == "Warning" && reason == ControllerReason::LedgerRecreated.as_str()
                })
                .map(|(_, _, message)| message)
        },
    )
    .await;
    assert!(
        warning.contains("PAUSED") && warning.contains("kubectl reboot resume --pool gpu"),
        "{warning}"
    );
    assert_eq!(
        sb.fleet.reboots("sim-2"),
        0,
        "sim-2 rebooted under the pause"
    );

    let said = users.admin.ok(&["reboot", "resume", "--pool", "gpu"]);
    assert!(said.contains("spec.resumedAt"), "{said}");
    wait_until(
        "the pool's Lease is no longer paused",
        PATIENCE,
        Some(&watch),
        || async {
            let lease = leases.get(&ledger).await.expect("the pool's Lease");
            !common::ledger::is_paused(lease.metadata.annotations.as_ref())
        },
    )
    .await;
    sim_2_rebooted_once_resumed(sb, &watch).await;
}

/// Resumed, the pool reboots sim-2, within the budget; the sandbox is stopped.
async fn sim_2_rebooted_once_resumed(sb: Sandbox, watch: &BudgetWatch) {
    wait_until(
        "sim-2 is rebooted once resumed",
        PATIENCE,
        Some(watch),
        || async { sb.fleet.reboots("sim-2") == 1 },
    )
    .await;
    watch.check().unwrap();
    sb.stop().await;
}
