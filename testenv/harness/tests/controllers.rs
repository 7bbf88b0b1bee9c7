//! Acceptance: kube-controller-manager and kube-scheduler do their work.

mod common;

use std::time::Duration;

use common::{create, eventually};
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod, ServiceAccount};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams};
use serde_json::json;
use testenv::Options;

const NS: &str = "web";
const NODE: &str = "worker-1";
const WAIT: Duration = Duration::from_secs(60);

/// What a kubelet does when it registers: a Ready node with room for pods, and a first heartbeat.
async fn register_ready_node(client: &kube::Client) {
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    let resources = json!({"cpu": "4", "memory": "8Gi", "pods": "110"});
    create(
        &Api::<Node>::all(client.clone()),
        json!({
            "metadata": {"name": NODE, "labels": {"kubernetes.io/hostname": NODE}},
            "status": {
                "capacity": resources, "allocatable": resources,
                "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                "lastHeartbeatTime": now, "lastTransitionTime": now}]
            }
        }),
    )
    .await;
    create(
        &Api::<Lease>::namespaced(client.clone(), "kube-node-lease"),
        json!({"metadata": {"name": NODE}, "spec": {"holderIdentity": NODE, "leaseDurationSeconds": 40, "renewTime": now}}),
    )
    .await;
}

/// Plays the kubelet: the pods run and are ready.
async fn mark_pods_ready(pods: &Api<Pod>) {
    let ready = json!({"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}});
    for pod in pods.list(&ListParams::default()).await.expect("list pods") {
        let name = pod.metadata.name.expect("pod name");
        pods.patch_status(&name, &PatchParams::default(), &Patch::Strategic(&ready))
            .await
            .expect("pod status");
    }
}

#[tokio::test]
async fn controllers_and_scheduler_run_a_deployment_with_a_budget() {
    let cp = common::start(Options::default()).await;
    let client = cp.client().await.expect("admin client");
    create(
        &Api::<Namespace>::all(client.clone()),
        json!({"metadata": {"name": NS}}),
    )
    .await;
    register_ready_node(&client).await;
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), NS);
    eventually(
        "the default ServiceAccount of the namespace",
        WAIT,
        async || match accounts.get_opt("default").await {
            Ok(Some(_)) => Ok(()),
            other => Err(format!("{other:?}")),
        },
    )
    .await;

    let labels = json!({"app": "web"});
    let deployment: Deployment = create(
        &Api::namespaced(client.clone(), NS),
        json!({
            "metadata": {"name": "web"},
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": labels},
                "template": {"metadata": {"labels": labels},
                             "spec": {"containers": [{"name": "web", "image": "registry.k8s.io/pause:3.10"}]}}
            }
        }),
    )
    .await;
    let budgets: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), NS);
    create(&budgets, json!({"metadata": {"name": "web"}, "spec": {"minAvailable": 1, "selector": {"matchLabels": labels}}})).await;

    let sets: Api<ReplicaSet> = Api::namespaced(client.clone(), NS);
    eventually("a ReplicaSet owned by the Deployment", WAIT, async || {
        let sets = sets
            .list(&ListParams::default())
            .await
            .map_err(|e| e.to_string())?;
        let owned = |rs: &ReplicaSet| {
            rs.metadata
                .owner_references
                .iter()
                .flatten()
                .any(|o| Some(&o.uid) == deployment.metadata.uid.as_ref())
        };
        sets.items
            .iter()
            .any(owned)
            .then_some(())
            .ok_or_else(|| format!("{} ReplicaSets, none owned", sets.items.len()))
    })
    .await;

    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    eventually("2 pods bound to the Ready node", WAIT, async || {
        let pods = pods
            .list(&ListParams::default())
            .await
            .map_err(|e| e.to_string())?;
        let nodes: Vec<_> = pods
            .items
            .iter()
            .map(|p| p.spec.as_ref().and_then(|s| s.node_name.clone()))
            .collect();
        (nodes.len() == 2 && nodes.iter().all(|n| n.as_deref() == Some(NODE)))
            .then_some(())
            .ok_or_else(|| format!("pods on nodes {nodes:?}"))
    })
    .await;

    mark_pods_ready(&pods).await;
    eventually(
        "the budget to allow 1 disruption of 2 healthy pods",
        WAIT,
        async || {
            let status = budgets
                .get("web")
                .await
                .map_err(|e| e.to_string())?
                .status
                .unwrap_or_default();
            (status.current_healthy == Some(2)
                && status.expected_pods == Some(2)
                && status.disruptions_allowed == Some(1))
            .then_some(())
            .ok_or_else(|| format!("{status:?}"))
        },
    )
    .await;
}
