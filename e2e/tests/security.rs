//! Least privilege, proven on the real API server (SECURITY.md, docs/src/install.md): `manifests/`
//! applies with kubectl, the controller's pod meets Pod Security "restricted", the 20-node rollout
//! runs with each program under its own ServiceAccount token from the manifests' RBAC, and what the
//! programs must not do is tried and refused.

use common::pool::RebootPool;
use e2e::install::{
    Identities, NS, apply_manifests,
    check_an_agent_may_change_only_the_protocol_annotations_of_its_own_node,
    check_the_controller_pod_meets_restricted_pod_security,
    check_what_the_programs_must_not_do_is_refused, control_plane, fleet_under_service_accounts,
    object, wait_until_the_policy_is_type_checked,
};
use e2e::{BudgetWatch, kubectl, node_events, wait_until};
use k8s_openapi::api::core::v1::Pod;
use kube::{
    Api, Client,
    api::{ListParams, PostParams},
};
use nodesim::{ControllerProcess, Fleet, workspace_binary};
use serde_json::json;
use std::{
    path::{Path, PathBuf},
    time::Duration,
};
use testenv::ControlPlane;

const ROLLOUT: Duration = Duration::from_secs(240);

#[tokio::test(flavor = "multi_thread")]
async fn manifests_apply_and_the_controller_pod_meets_restricted_pod_security() {
    // The controller-manager type-checks admission policies.
    let cp = control_plane(true).await;
    let client = cp.client().await.expect("admin client");
    let applied = apply_manifests(&cp);
    for kind in [
        "namespace/node-reboot-operator",
        "daemonset.apps/reboot-agent",
        "deployment.apps/reboot-controller",
        "validatingadmissionpolicy.admissionregistration.k8s.io/node-reboot-operator-agent",
        "validatingadmissionpolicybinding.admissionregistration.k8s.io/node-reboot-operator-agent",
    ] {
        assert!(applied.contains(kind), "{kind} applied: {applied}");
    }
    // Applying again changes nothing and conflicts with nothing.
    apply_manifests(&cp);

    wait_until_the_policy_is_type_checked(&client).await;
    check_the_controller_pod_meets_restricted_pod_security(&cp, &client).await;
}

/// The API server's refusal of a streaming list where its `WatchList` feature is off (Kubernetes
/// 1.30, 1.31, 1.33): a 422 whose field error is of type "Forbidden". It refuses no permission:
/// the agent's watch and the controller's drain fall back to a list and a watch on it
/// (`e2e/tests/agent_watch.rs` and `e2e/tests/drain.rs` turn the feature off to check).
const NO_WATCH_LIST: &str =
    "sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled";

/// A fleet whose programs run under the manifests' ServiceAccounts.
struct Rollout<'a> {
    cp: &'a ControlPlane,
    admin: &'a Client,
    fleet: &'a Fleet,
    names: &'a [String],
}

impl Rollout<'_> {
    /// Starts the controller under its own token (`kubeconfig`) with `args`, asks every node
    /// for a reboot and waits until each has rebooted once and is back, no more than `budget`
    /// unavailable at any time.
    async fn every_node_once(
        &self,
        kubeconfig: PathBuf,
        args: Vec<String>,
        log: &Path,
        budget: usize,
    ) -> (ControllerProcess, BudgetWatch) {
        let controller = ControllerProcess::start(
            workspace_binary("reboot-controller").expect("controller built"),
            kubeconfig,
            args,
            log.to_owned(),
        )
        .expect("controller starts");
        let watch = BudgetWatch::start(self.admin.clone(), budget).await;
        e2e::every_node::request(self.cp);
        wait_until(
            "every node rebooted once and back",
            ROLLOUT,
            Some(&watch),
            || async { e2e::rollout::all_back_in(self.fleet, self.admin, self.names, 1).await },
        )
        .await;
        (controller, watch)
    }
}

/// The lines of a log that say the API server refused something.
fn refusals(log: &Path) -> Vec<String> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter(|l| {
            // Not "403": boot ids are hex and may contain it.
            l.to_lowercase().contains("forbidden") && !l.contains(NO_WATCH_LIST)
        })
        .map(str::to_owned)
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn twenty_nodes_reboot_once_each_with_each_program_under_its_own_service_account() {
    let cp = control_plane(false).await;
    let admin = cp.client().await.expect("admin client");
    apply_manifests(&cp);
    let names: Vec<String> = (1..=20).map(|i| format!("sim-{i}")).collect();
    let (fleet, controller_kubeconfig) =
        fleet_under_service_accounts(&cp, &admin, &names, Duration::from_secs(1)).await;
    // Workload pods, so that the controller drains (lists and evicts) with its own token.
    let workload: Api<Pod> = Api::default_namespaced(admin.clone());
    for name in &names[..4] {
        let pod: Pod = object(json!({
            "metadata": {"name": format!("work-{name}")},
            "spec": {"nodeName": name, "containers": [{"name": "work", "image": "registry.example/work:1"}]},
        }));
        workload
            .create(&PostParams::default(), &pod)
            .await
            .expect("workload pod");
    }

    let controller_log = cp.dir().join("controller.log");
    let rollout = Rollout {
        cp: &cp,
        admin: &admin,
        fleet: &fleet,
        names: &names,
    };
    let (mut controller, watch) = rollout
        .every_node_once(
            controller_kubeconfig,
            vec!["--max-unavailable".into(), "3".into()],
            &controller_log,
            3,
        )
        .await;
    wait_until(
        "the ledger is empty",
        Duration::from_secs(10),
        Some(&watch),
        || e2e::rollout::ledger_is_empty_on(&admin),
    )
    .await;
    // Nothing reboots twice: give a second reboot the time to show.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        fleet.total_reboots() as usize,
        names.len(),
        "some node rebooted twice"
    );
    watch.check().unwrap();
    assert_eq!(
        watch.max_seen(),
        3,
        "the budget was used, not just respected"
    );

    let left = workload
        .list(&ListParams::default())
        .await
        .expect("list")
        .items;
    assert!(
        left.is_empty(),
        "the drains evicted every workload pod: {left:?}"
    );
    let components: Vec<String> = node_events(&admin, "sim-1")
        .await
        .into_iter()
        .map(|(_, component, _)| component)
        .collect();
    for component in ["reboot-agent", "reboot-controller"] {
        assert!(
            components.iter().any(|c| c == component),
            "Events of {component}: {components:?}"
        );
    }
    let mut refused = refusals(&controller_log);
    for name in &names {
        refused.extend(refusals(
            &cp.dir().join("nodes").join(name).join("agent.log"),
        ));
    }
    assert!(
        refused.is_empty(),
        "requests refused to the programs: {refused:#?}"
    );

    controller.terminate(Duration::from_secs(5)).await;
    fleet.stop().await;
}

/// [`Identities`] with `manifests/` applied.
async fn manifests_identities() -> Identities {
    Identities::start(|cp| {
        apply_manifests(cp);
    })
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn an_agent_may_change_only_the_protocol_annotations_of_its_own_node() {
    let ids = manifests_identities().await;
    check_an_agent_may_change_only_the_protocol_annotations_of_its_own_node(&ids).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn what_the_programs_must_not_do_is_refused() {
    let ids = manifests_identities().await;
    check_what_the_programs_must_not_do_is_refused(&ids).await;
}

/// RebootPools run and are deleted with the controller under its own ServiceAccount token:
/// the finalizer, the status and each pool's ledger Lease, made when the pool first runs and
/// deleted once its object is gone, all within the manifests' RBAC. The pools are deleted
/// together, so some are gone before the leader starts the pools again.
#[tokio::test(flavor = "multi_thread")]
async fn pools_run_and_are_deleted_with_the_controller_under_its_own_service_account() {
    let cp = control_plane(false).await;
    let admin = cp.client().await.expect("admin client");
    apply_manifests(&cp);
    let names: Vec<String> = (1..=4).map(|i| format!("sim-{i}")).collect();
    let (fleet, controller_kubeconfig) =
        fleet_under_service_accounts(&cp, &admin, &names, Duration::from_secs(1)).await;
    let pools = Api::<RebootPool>::all(admin.clone());
    for (pool, nodes) in [("a", &names[..2]), ("b", &names[2..]), ("c", &[][..])] {
        for node in nodes {
            e2e::label_node(&cp, node, &format!("pool={pool}"));
        }
        let spec = json!({"nodeSelector": {"matchLabels": {"pool": pool}}});
        let object = RebootPool::new(pool, serde_json::from_value(spec).expect("a spec"));
        pools
            .create(&PostParams::default(), &object)
            .await
            .expect("the pool is created");
    }
    let controller_log = cp.dir().join("controller.log");
    let rollout = Rollout {
        cp: &cp,
        admin: &admin,
        fleet: &fleet,
        names: &names,
    };
    // A budget of one in each of the two pools with nodes.
    let (mut controller, watch) = rollout
        .every_node_once(
            controller_kubeconfig,
            vec!["--default-pool=false".into()],
            &controller_log,
            2,
        )
        .await;
    let ledgers = || kubectl(&cp, &["get", "lease", "-n", NS, "-o", "name"]);
    for pool in ["a", "b", "c"] {
        let ledger = common::pool::ledger_name(pool);
        assert!(
            ledgers().contains(&ledger),
            "{ledger} was made when the pool first ran: {}",
            ledgers()
        );
    }

    kubectl(&cp, &["delete", "rebootpools", "--all", "--timeout=240s"]);
    wait_until(
        "the deleted pools' ledger Leases are deleted",
        ROLLOUT,
        Some(&watch),
        || async { !ledgers().contains(common::pool::LEDGER_PREFIX) },
    )
    .await;
    watch.check().unwrap();
    let refused = refusals(&controller_log);
    assert!(
        refused.is_empty(),
        "requests refused to the controller: {refused:#?}"
    );
    controller.terminate(Duration::from_secs(5)).await;
    fleet.stop().await;
}
