//! Pods for a drain to evict: created directly on a simulated node (`spec.nodeName` set, as
//! the scheduler would bind them; the benchmark's control plane runs no scheduler), started by
//! the node simulator's kubelet stand-in, and deleted by it once evicted.
//!
//! Each pod names a ReplicaSet as its controller, as most pods a drain meets do: a bare pod
//! would also make the controller publish a warning Event ("it will not come back"), which is
//! not the cost of an ordinary drain. No controller-manager runs, so nothing recreates the
//! evicted pods and nothing collects them for their missing owner.

use crate::identity::{NAMESPACE, create_or_keep};
use anyhow::Context as _;
use k8s_openapi::api::core::v1::{Pod, ServiceAccount};
use kube::{
    Api, Client,
    api::{ListParams, PostParams},
};
use serde_json::json;
use std::time::Duration;
use tokio::time::Instant;

/// The label of the benchmark's pods.
const LABEL: &str = "bench.node-reboot-operator.io/evictable";

/// `count` running pods on `node`, named after `round`; their names.
pub async fn start_on(
    admin: &Client,
    node: &str,
    round: usize,
    count: usize,
) -> anyhow::Result<Vec<String>> {
    if count == 0 {
        return Ok(Vec::new());
    }
    // The ServiceAccount admission plugin wants the pods' ServiceAccount to exist; the
    // controller-manager that would make it does not run here.
    let accounts: Api<ServiceAccount> = Api::namespaced(admin.clone(), NAMESPACE);
    create_or_keep(&accounts, json!({"metadata": {"name": "default"}})).await?;
    let pods: Api<Pod> = Api::namespaced(admin.clone(), NAMESPACE);
    let mut names = Vec::new();
    for i in 1..=count {
        let name = format!("evictable-{round}-{i}");
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {
                "name": name,
                "labels": {LABEL: "true"},
                "ownerReferences": [{
                    "apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "evictable",
                    "uid": "00000000-0000-4000-8000-00000000be4c", "controller": true,
                }],
            },
            "spec": {
                "nodeName": node,
                "automountServiceAccountToken": false,
                "containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10"}],
            },
        }))?;
        pods.create(&PostParams::default(), &pod)
            .await
            .with_context(|| format!("create pod {name} on {node}"))?;
        names.push(name);
    }
    wait_running(&pods, &names).await?;
    Ok(names)
}

async fn wait_running(pods: &Api<Pod>, names: &[String]) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let running = remaining(pods)
            .await?
            .iter()
            .filter(|p| names.contains(&p.metadata.name.clone().unwrap_or_default()))
            .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
            .count();
        if running == names.len() {
            return Ok(());
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "only {running} of {} pods were started within 60 s",
            names.len()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn remaining(pods: &Api<Pod>) -> anyhow::Result<Vec<Pod>> {
    Ok(pods
        .list(&ListParams::default().labels(&format!("{LABEL}=true")))
        .await?
        .items)
}

/// How many of `names` are gone.
pub async fn gone(admin: &Client, names: &[String]) -> anyhow::Result<usize> {
    let pods: Api<Pod> = Api::namespaced(admin.clone(), NAMESPACE);
    let left = remaining(&pods).await?;
    Ok(names
        .iter()
        .filter(|n| !left.iter().any(|p| p.metadata.name.as_ref() == Some(*n)))
        .count())
}
