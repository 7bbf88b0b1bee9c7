//! The pod duties of a kubelet, for pods bound to simulated nodes: start them (Running and
//! Ready at once), leave the ones that have finished (Succeeded or Failed) alone, and finish
//! their deletion (the containers "stop" at once). On a node whose kubelet hangs
//! ([`crate::Fleet::wedge`]) nothing happens to its pods until the kubelet is back: deletions
//! wait for it, as on a node whose kubelet is stuck.

use crate::node::NodeState;
use backon::{ExponentialBuilder, Retryable};
use futures::StreamExt;
use k8s_openapi::{api::core::v1::Pod, jiff::Timestamp};
use kube::{
    Api, Client, ResourceExt,
    api::{DeleteParams, Patch, PatchParams, Preconditions},
    runtime::{WatchStreamExt, watcher},
};
use serde_json::json;
use std::{collections::BTreeMap, sync::Arc, time::Duration};

/// Runs until the task is aborted; `nodes` are the simulated nodes, by name.
pub async fn run(client: Client, nodes: Arc<BTreeMap<String, Arc<NodeState>>>) {
    let stream = watcher(Api::<Pod>::all(client.clone()), watcher::Config::default())
        .default_backoff()
        .applied_objects();
    futures::pin_mut!(stream);
    while let Some(event) = stream.next().await {
        let pod = match event {
            Ok(pod) => pod,
            Err(error) => {
                tracing::debug!(%error, "pod watch failed; retrying");
                continue;
            }
        };
        let Some(node) = pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.as_ref())
            .and_then(|n| nodes.get(n))
            .cloned()
        else {
            continue;
        };
        let deleting = pod.metadata.deletion_timestamp.is_some();
        // A pod that has finished stays finished: a kubelet never starts it again.
        if !deleting && (is_running(&pod) || has_finished(&pod)) {
            continue;
        }
        let api: Api<Pod> = Api::namespaced(client.clone(), &pod.namespace().unwrap_or_default());
        // A real kubelet retries until it is done; the watch brings no new event for a pod
        // whose update failed (an API server restart), so without retries a terminating pod
        // would stay forever and every drain of its node would time out.
        tokio::spawn(async move {
            // A hung kubelet does nothing; once back, it catches up on what it missed.
            node.until_kubelet_is_back().await;
            let act = || async {
                if deleting {
                    finish_deletion(&api, &pod).await
                } else {
                    start(&api, &pod).await
                }
            };
            let backoff = ExponentialBuilder::new()
                .with_min_delay(Duration::from_millis(200))
                .with_max_delay(Duration::from_secs(5))
                .with_max_times(20);
            if let Err(error) = act
                .retry(backoff)
                .when(|e| !matches!(e, kube::Error::Api(s) if s.is_not_found()))
                .await
            {
                tracing::debug!(pod = %pod.name_any(), %error, "simulated kubelet gave up on a pod");
            }
        });
    }
}

fn phase(pod: &Pod) -> Option<&str> {
    pod.status.as_ref().and_then(|s| s.phase.as_deref())
}

fn is_running(pod: &Pod) -> bool {
    phase(pod) == Some("Running")
}

fn has_finished(pod: &Pod) -> bool {
    matches!(phase(pod), Some("Succeeded" | "Failed"))
}

async fn start(api: &Api<Pod>, pod: &Pod) -> Result<(), kube::Error> {
    let now = Timestamp::now().to_string();
    let containers: Vec<_> = pod
        .spec
        .as_ref()
        .map(|s| s.containers.iter().collect())
        .unwrap_or_default();
    let statuses: Vec<_> = containers
        .iter()
        .map(|c| {
            json!({"name": c.name, "image": c.image.clone().unwrap_or_default(), "imageID": "",
            "ready": true, "started": true, "restartCount": 0,
            "state": {"running": {"startedAt": now}}})
        })
        .collect();
    let condition = |t: &str| json!({"type": t, "status": "True", "lastTransitionTime": now});
    let patch = json!({"status": {
        "phase": "Running", "startTime": now,
        "conditions": [condition("PodScheduled"), condition("Initialized"),
                       condition("ContainersReady"), condition("Ready")],
        "containerStatuses": statuses,
    }});
    api.patch_status(
        &pod.name_any(),
        &PatchParams::default(),
        &Patch::Merge(patch),
    )
    .await
    .map(|_| ())
}

async fn finish_deletion(api: &Api<Pod>, pod: &Pod) -> Result<(), kube::Error> {
    let params = DeleteParams {
        grace_period_seconds: Some(0),
        preconditions: Some(Preconditions {
            uid: pod.uid(),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    match api.delete(&pod.name_any(), &params).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.is_not_found() => Ok(()),
        Err(e) => Err(e),
    }
}
