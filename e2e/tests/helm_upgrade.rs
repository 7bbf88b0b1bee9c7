//! A `helm upgrade` in the middle of a rollout, on the local control plane: the chart is
//! installed with helm, its programs run as processes under the ServiceAccounts and with the
//! arguments the chart gives them (there is no kubelet to run its pods), and while one node is
//! rebooting and another is draining (a pod whose deletion waits), the release is upgraded with
//! a changed flag. The hand-over is what the Deployment's and the DaemonSet's rolling updates
//! do: a controller with the new arguments starts, the old one is stopped, and every agent
//! restarts. The budget observer watches across it; the new controller finishes the reboot
//! under way, does not tell the draining node to reboot while its pod is there, and every node
//! finishes its reboot exactly once.

use e2e::install::{
    NS, chart_dir, control_plane, controller_args, fleet_under_service_accounts, helm_on, object,
};
use e2e::{BudgetWatch, node, protocol_annotations, request_reboot, rollout::back_in, wait_until};
use k8s_openapi::api::core::v1::Pod;
use kube::{
    Api, Client,
    api::{Patch, PatchParams, PostParams},
};
use nodesim::{ControllerProcess, workspace_binary};
use serde_json::json;
use std::{path::PathBuf, process::Command, time::Duration};
use testenv::ControlPlane;

const RELEASE: &str = "node-reboot-operator";
const ROLLOUT: Duration = Duration::from_secs(240);
const NODES: usize = 5;
const HOLD: &str = "e2e.example.com/hold";

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
            "--set",
            "controller.flags.drainDelay=2s",
        ],
    );
    let names: Vec<String> = (1..=NODES).map(|i| format!("sim-{i}")).collect();
    let (fleet, controller_kubeconfig) =
        fleet_under_service_accounts(&cp, &admin, &names, Duration::from_secs(10)).await;
    // A pod whose deletion waits for us: the drain of its node is under way until we let go.
    let pods: Api<Pod> = Api::default_namespaced(admin.clone());
    let held: Pod = object(json!({
        "metadata": {"name": "held", "finalizers": [HOLD]},
        "spec": {"nodeName": names[1], "containers": [{"name": "work", "image": "registry.example/work:1"}]},
    }));
    pods.create(&PostParams::default(), &held)
        .await
        .expect("the held pod");
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
        old_args.contains(&"--drain-delay=2s".to_owned()),
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
        "the first node rebooting and the second draining",
        ROLLOUT,
        Some(&watch),
        || async {
            let evicted = pods
                .get_opt("held")
                .await
                .ok()
                .flatten()
                .is_some_and(|p| p.metadata.deletion_timestamp.is_some());
            evicted && where_is(&admin, &names[0]).await.0 && where_is(&admin, &names[1]).await.1
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

    // The new controller finishes the reboot the old one started, and holds the drain: the
    // second node is not told to reboot while its pod is there.
    wait_until("the first node is back", ROLLOUT, Some(&watch), || {
        back_in(&fleet, &admin, &names[0], 1)
    })
    .await;
    let (told, draining) = where_is(&admin, &names[1]).await;
    assert!(draining && !told, "told to reboot with a pod left");
    assert_eq!(fleet.reboots(&names[1]), 0, "rebooted with a pod left");
    let release = json!({"metadata": {"finalizers": null}});
    pods.patch("held", &PatchParams::default(), &Patch::Merge(&release))
        .await
        .expect("let the pod go");

    wait_until(
        "every node rebooted once and back",
        ROLLOUT,
        Some(&watch),
        || async {
            e2e::rollout::all_back_in(&fleet, &admin, &names, 1).await
                && e2e::rollout::ledger_is_empty_on(&admin).await
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
