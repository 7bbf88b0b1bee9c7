//! `kubectl reboot` and RebootPools, end to end on the real API server (no controller: the
//! plugin reads the pools' specs, the nodes and the ledgers as they are). Before the CRD is
//! installed, `status` shows the flags' pool alone, without an error. Then two RebootPools
//! take some nodes: `status` shows each pool with its budget from its spec (a percentage of
//! its nodes), the node both select waiting and naming both, the flags' pool the nodes neither
//! selects; `--pool` shows one pool or fails with exit 2 naming those that exist; `plan --pool`
//! plans with the pool's budget and window; `pause --pool` and `resume --pool` set
//! `spec.paused`, with the docs' roles (rbac.yaml).

use crate::kubectl_plugin::{Users, stderr, users};
use common::pool::RebootPool;
use e2e::{install::control_plane, kubectl};
use k8s_openapi::{
    api::core::v1::Node,
    apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
};
use kube::{
    Api, CustomResourceExt,
    api::{Patch, PatchParams, PostParams},
};
use serde_json::{Value, json};
use std::time::Duration;

/// A Ready node with these labels, requested or not.
async fn node(nodes: &Api<Node>, name: &str, labels: Value, requested: bool) {
    let annotations = if requested {
        json!({"reboot-needed": "true"})
    } else {
        json!({})
    };
    let object = json!({"apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": labels, "annotations": annotations}});
    nodes
        .create(
            &PostParams::default(),
            &serde_json::from_value(object).expect("a Node"),
        )
        .await
        .unwrap_or_else(|e| panic!("create node {name}: {e}"));
    let ready = json!({"status": {"conditions": [{"type": "Ready", "status": "True",
        "reason": "KubeletReady", "message": "ready"}], "nodeInfo": {"bootID": "b1"}}});
    nodes
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&ready))
        .await
        .unwrap_or_else(|e| panic!("node {name} Ready: {e}"));
}

fn pool_json<'v>(status: &'v Value, name: &str) -> &'v Value {
    status["pools"]
        .as_array()
        .and_then(|pools| pools.iter().find(|p| p["pool"]["name"] == name))
        .unwrap_or_else(|| panic!("pool {name} in {status:#}"))
}

fn node_json<'v>(pool: &'v Value, name: &str) -> &'v Value {
    pool["nodes"]
        .as_array()
        .and_then(|nodes| nodes.iter().find(|n| n["name"] == name))
        .unwrap_or_else(|| panic!("node {name} in {pool:#}"))
}

fn names(pool: &Value) -> Vec<&str> {
    pool["nodes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|n| n["name"].as_str())
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn status_plan_and_pause_know_each_reboot_pool() {
    let cp = control_plane(false).await;
    let client = cp.client().await.expect("admin client");
    kubectl(
        &cp,
        &["create", "namespace", common::ledger::OPERATOR_NAMESPACE],
    );
    let Users { viewer, admin, .. } = users(&cp);
    let nodes: Api<Node> = Api::all(client.clone());
    node(&nodes, "web-1", json!({}), true).await;

    // No CRD: the flags' pool alone, and nothing said about RebootPools.
    let before = viewer.json(&[]);
    assert_eq!(names(&before), ["web-1"], "{before:#}");
    assert_eq!(before["pools"], json!([]), "{before:#}");
    let warnings = before["warnings"].to_string();
    assert!(!warnings.contains("RebootPool"), "{warnings}");

    // The CRD as the code defines it, and two pools.
    Api::<CustomResourceDefinition>::all(client.clone())
        .create(&PostParams::default(), &RebootPool::crd())
        .await
        .expect("create the RebootPool CRD");
    let pools: Api<RebootPool> = Api::all(client.clone());
    e2e::wait_until(
        "the RebootPool CRD is served",
        Duration::from_secs(60),
        None,
        || async { pools.list(&Default::default()).await.is_ok() },
    )
    .await;
    for (name, spec) in [
        (
            "gpu",
            json!({"nodeSelector": {"matchLabels": {"pool": "gpu"}}, "maxUnavailable": "50%",
                   "windows": ["Sat 01:00-05:00 UTC"]}),
        ),
        (
            "big",
            json!({"nodeSelector": {"matchExpressions": [
                {"key": "size", "operator": "In", "values": ["xl"]}]}}),
        ),
    ] {
        let pool = RebootPool::new(name, serde_json::from_value(spec).expect("a spec"));
        pools
            .create(&PostParams::default(), &pool)
            .await
            .unwrap_or_else(|e| panic!("create RebootPool {name}: {e}"));
    }
    for (name, requested) in [("gpu-1", true), ("gpu-2", false), ("gpu-3", false)] {
        node(&nodes, name, json!({"pool": "gpu"}), requested).await;
    }
    node(&nodes, "gpu-xl", json!({"pool": "gpu", "size": "xl"}), true).await;
    node(&nodes, "big-1", json!({"size": "xl"}), false).await;

    // Every pool: the flags' pool keeps only the node no RebootPool selects.
    let all = viewer.json(&[]);
    assert_eq!(all["pool"]["name"], Value::Null, "{all:#}");
    assert_eq!(names(&all), ["web-1"], "{all:#}");
    let gpu = pool_json(&all, "gpu");
    assert_eq!(names(gpu), ["gpu-1", "gpu-2", "gpu-3", "gpu-xl"], "{gpu:#}");
    assert_eq!(gpu["budget"]["source"], "spec", "{gpu:#}");
    assert_eq!(gpu["budget"]["maxUnavailable"], 2, "50% of 4: {gpu:#}");
    assert_eq!(gpu["pool"]["selector"], "pool=gpu");
    assert_eq!(
        gpu["pool"]["ledger"],
        "node-reboot-operator/node-reboot-pool-gpu"
    );
    let big = pool_json(&all, "big");
    assert_eq!(names(big), ["big-1", "gpu-xl"], "{big:#}");
    assert_eq!(big["budget"]["maxUnavailable"], 1, "the default: {big:#}");
    // The node both select waits in each, naming both.
    for pool in [gpu, big] {
        let held = node_json(pool, "gpu-xl");
        assert_eq!(
            (&held["state"], &held["reason"]),
            (&json!("waiting"), &json!("overlap")),
            "{held:#}"
        );
        let detail = held["detail"].as_str().unwrap_or_default();
        assert!(detail.contains("big and gpu"), "{detail}");
    }
    let text = viewer.ok(&["reboot", "status"]);
    for line in [
        "Pool:    the flags' pool: 1 node (all nodes that no RebootPool selects)",
        "Pool:    RebootPool gpu: 4 nodes (nodeSelector pool=gpu)",
        "Pool:    RebootPool big: 2 nodes (nodeSelector size in (xl))",
        "in two pools: selected by the RebootPools big and gpu",
    ] {
        assert!(text.contains(line), "{line:?} in {text}");
    }

    // One pool, or a clear refusal naming those there are.
    let one = viewer.json(&["--pool", "gpu"]);
    assert_eq!(one["pool"]["name"], "gpu", "{one:#}");
    assert_eq!(names(&one), ["gpu-1", "gpu-2", "gpu-3", "gpu-xl"]);
    assert_eq!(one["pools"], json!([]));
    for args in [
        &["reboot", "status", "--pool", "gpus"][..],
        &["reboot", "plan", "--pool", "gpus"],
        &["reboot", "pause", "--pool", "gpus"],
    ] {
        let refused = admin.run(args);
        assert_eq!(refused.status.code(), Some(2), "{args:?}: {refused:?}");
        let said = stderr(&refused);
        assert!(
            said.contains("no RebootPool gpus") && said.contains("big, gpu"),
            "{said}"
        );
    }

    // The plan of one pool: its budget and window, the overlapping node left out.
    let planned = viewer.ok(&[
        "reboot",
        "plan",
        "--pool",
        "gpu",
        "-o",
        "json",
        "--reboot-duration",
        "10m",
    ]);
    let plan: Value = serde_json::from_str(&planned).unwrap_or_else(|e| panic!("{e}: {planned}"));
    assert_eq!(plan["settings"]["maxUnavailable"], 2, "{plan:#}");
    assert_eq!(
        plan["settings"]["windows"],
        json!(["Sat 01:00-05:00 UTC"]),
        "{plan:#}"
    );
    let waved: Vec<&Value> = plan["waves"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|w| w["nodes"].as_array().into_iter().flatten())
        .map(|n| &n["name"])
        .collect();
    assert_eq!(waved, [&json!("gpu-1")], "{plan:#}");
    assert_eq!(plan["left"][0]["name"], "gpu-xl", "{plan:#}");
    assert_eq!(plan["left"][0]["reason"], "in two pools", "{plan:#}");

    // Pause and resume one pool: its spec.paused, said; the viewer may not.
    viewer.fails(&["reboot", "pause", "--pool", "gpu"], "forbidden");
    let said = admin.ok(&["reboot", "pause", "--pool", "gpu"]);
    assert!(said.contains("paused") && said.contains("gpu"), "{said}");
    let paused = |pool: RebootPool| pool.spec.paused;
    assert!(paused(pools.get("gpu").await.expect("gpu")));
    assert!(!paused(pools.get("big").await.expect("big")), "only gpu");
    let one = viewer.json(&["--pool", "gpu"]);
    assert_eq!(one["pool"]["paused"], true, "{one:#}");
    let gpu_1 = node_json(&one, "gpu-1");
    assert_eq!(gpu_1["reason"], "paused", "{gpu_1:#}");
    assert!(
        gpu_1["detail"]
            .as_str()
            .is_some_and(|d| d.contains("spec.paused on the RebootPool gpu")),
        "{gpu_1:#}"
    );
    let said = admin.ok(&["reboot", "pause", "--pool", "gpu"]);
    assert!(said.contains("already paused"), "{said}");
    let said = admin.ok(&["reboot", "resume", "--pool", "gpu"]);
    assert!(said.contains("resumed"), "{said}");
    assert!(!paused(pools.get("gpu").await.expect("gpu")));
}
