//! A `helm upgrade` in the middle of a rollout, on the local control plane: the chart is
//! installed with helm, its programs run as processes under the ServiceAccounts and with the
//! arguments the chart gives them (there is no kubelet to run its pods), and while one node is
//! rebooting and another is granted and cordoned, the release is upgraded with a changed flag.
//! The hand-over is what the Deployment's and the DaemonSet's rolling updates do: a controller
//! with the new arguments starts, the old one is stopped, and every agent restarts. The
//! budget observer watches across it, and every node finishes its reboot exactly once.

use e2e::install::{
    NS, chart_dir, control_plane, controller_args, fleet_under_service_accounts, helm_on,
};
use e2e::{BudgetWatch, node, protocol_annotations, request_reboot, rollout::back_in, wait_until};
use kube::Client;
use nodesim::{ControllerProcess, workspace_binary};
use std::{path::PathBuf, process::Command, time::Duration};
use testenv::ControlPlane;

const RELEASE: &str = "node-reboot-operator";
const ROLLOUT: Duration = Duration::from_secs(240);
const NODES: usize = 5;

fn helm(cp: &ControlPlane, args: &[&str]) -> String {
    let mut helm: Command = helm_on(cp);
    helm.args(args);
    let output = helm.output().expect("helm runs");
    assert!(
        output.status.success(),
        "helm {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The step a node is at, by its annotations: (rebooting, granted and not yet told to reboot).
async fn where_is(client: &Client, name: &str) -> (bool, bool) {
    let n = node(client, name).await;
    let keys = protocol_annotations(&n);
    let has = |k: &str| keys.iter().any(|key| key == k);
    (
        has("reboot-in-progress") || has("reboot-now"),
        has("reboot-grant") && !has("reboot-now") && !has("reboot-in-progress"),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn a_helm_upgrade_in_the_middle_of_a_rollout_finishes_it_within_budget() {
    let cp = control_plane(false).await;
    let admin = cp.client().await.expect("admin client");
    let chart = chart_dir();
    let chart = chart.to_str().expect("a UTF-8 path");
    helm(
        &cp,
        &[
            "install",
            RELEASE,
            chart,
            "--namespace",
            NS,
            "--create-namespace",
            "--set",
            "controller.flags.maxUnavailable=2",
            // A granted node waits, cordoned, before its drain: the upgrade finds one there.
            "--set",
            "controller.flags.drainDelay=4s",
        ],
    );
    let names: Vec<String> = (1..=NODES).map(|i| format!("sim-{i}")).collect();
    let (fleet, controller_kubeconfig) =
        fleet_under_service_accounts(&cp, &admin, &names, Duration::from_secs(4)).await;
    let start = |args: Vec<String>, log: PathBuf| {
        ControllerProcess::start(
            workspace_binary("reboot-controller").expect("controller built"),
            controller_kubeconfig.clone(),
            args,
            log,
        )
        .expect("controller starts")
    };
    let old_args = controller_args(&cp);
    assert!(
        old_args.contains(&"--drain-delay=4s".to_owned()),
        "{old_args:?}"
    );
    let mut old = start(old_args, cp.dir().join("controller-1.log"));

    let watch = BudgetWatch::start(admin.clone(), 2).await;
    // One node first, the rest once it reboots: the next one is then granted while it does.
    request_reboot(&cp, &names[0]);
    wait_until("the first node reboots", ROLLOUT, Some(&watch), || async {
        where_is(&admin, &names[0]).await.0
    })
    .await;
    for name in &names[1..] {
        request_reboot(&cp, name);
    }
    wait_until(
        "one node rebooting and another granted",
        ROLLOUT,
        Some(&watch),
        || async {
            let mut rebooting = false;
            let mut granted = false;
            for name in &names {
                let (r, g) = where_is(&admin, name).await;
                rebooting |= r;
                granted |= g;
            }
            rebooting && granted
        },
    )
    .await;

    let said = helm(
        &cp,
        &[
            "upgrade",
            RELEASE,
            chart,
            "--namespace",
            NS,
            "--reuse-values",
            "--set",
            "controller.flags.drainDelay=1s",
        ],
    );
    assert!(said.contains("REVISION: 2"), "{said}");
    let new_args = controller_args(&cp);
    assert!(
        new_args.contains(&"--drain-delay=1s".to_owned()),
        "{new_args:?}"
    );
    // The Deployment's rolling update: the new pod starts, then the old one is stopped.
    let mut new = start(new_args, cp.dir().join("controller-2.log"));
    old.terminate(Duration::from_secs(10)).await;
    // The DaemonSet's: every agent restarts, one after the other.
    for name in &names {
        fleet.kill_agent(name).await;
    }

    wait_until(
        "every node rebooted once and back",
        ROLLOUT,
        Some(&watch),
        || async {
            for name in &names {
                if !back_in(&fleet, &admin, name, 1).await {
                    return false;
                }
            }
            e2e::rollout::ledger_is_empty_on(&admin).await
        },
    )
    .await;
    watch.check().expect("the budget held across the upgrade");
    assert_eq!(
        watch.max_seen(),
        2,
        "the budget was used, not just respected"
    );
    assert_eq!(
        fleet.total_reboots() as usize,
        names.len(),
        "a node rebooted twice"
    );
    new.terminate(Duration::from_secs(5)).await;
    fleet.stop().await;
}
