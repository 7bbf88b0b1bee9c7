//! `--dry-run` (docs/src/reference.md), on the real control plane: the controller decides and says
//! what it would do, in its log and in `DryRun` Events, and writes nothing to any Node or Lease.

use common::{ControllerReason, events::CONTROLLER};
use e2e::{BudgetWatch, wait_until};
use k8s_openapi::api::{coordination::v1::Lease, core::v1::Node};
use kube::{Api, api::ListParams};
use nodesim::sandbox::{OPERATOR_NAMESPACE, SandboxConfig};
use std::{collections::BTreeMap, time::Duration};

/// What an administrator would diff: each node's annotations, labels and spec.
async fn nodes_as_written(nodes: &Api<Node>) -> BTreeMap<String, String> {
    nodes
        .list(&ListParams::default())
        .await
        .expect("list nodes")
        .items
        .into_iter()
        .map(|n| {
            let written = serde_json::json!({
                "annotations": n.metadata.annotations,
                "labels": n.metadata.labels,
                "spec": n.spec,
            });
            (n.metadata.name.unwrap_or_default(), written.to_string())
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_dry_run_rollout_changes_no_node_and_no_lease_and_names_the_nodes_it_would_reboot() {
    let config = SandboxConfig::with_nodes(4)
        .max_unavailable("2")
        .controller_args(["--dry-run"]);
    let sb = e2e::sandbox_without_pods(config).await;
    let client = sb.client.clone();
    let nodes: Api<Node> = Api::all(client.clone());
    let leases: Api<Lease> = Api::namespaced(client.clone(), OPERATOR_NAMESPACE);
    let watch = BudgetWatch::start(client.clone(), 0).await;
    e2e::every_node::request(&sb.control_plane);
    let requested = nodes_as_written(&nodes).await;
    let log = sb.controllers[0].log_path().clone();
    let said = || std::fs::read_to_string(&log).unwrap_or_default();
    wait_until(
        "the log names the two nodes it would reboot first",
        Duration::from_secs(60),
        Some(&watch),
        || async {
            let log = said();
            ["sim-1", "sim-2"].iter().all(|n| {
                log.lines()
                    .any(|l| l.contains("dry run: would grant a slot") && l.contains(n))
            })
        },
    )
    .await;
    let log = said();
    assert!(
        !log.lines()
            .any(|l| l.contains("would grant") && (l.contains("sim-3") || l.contains("sim-4"))),
        "a budget of 2 grants two: {log}"
    );
    assert!(log.contains("no pod to evict now"), "{log}");
    // The Events go out after the log line, through the controller's Event queue: wait for
    // them (CI once looked 3 s in, between the two).
    e2e::every_node::wait_for_event(
        &client,
        &["sim-1".to_owned(), "sim-2".to_owned()],
        ControllerReason::DryRun,
        &["nothing was written", "would grant"],
        Duration::from_secs(60),
        Some(&watch),
    )
    .await;
    // Every Event the dry run published says so, the waiting nodes' included.
    let mut published = 0;
    for name in ["sim-1", "sim-2", "sim-3", "sim-4"] {
        for (reason, component, message) in e2e::node_events(&client, name).await {
            if component == CONTROLLER {
                published += 1;
                assert!(
                    message.starts_with("dry run, nothing was written: "),
                    "{name}: a {reason} Event of the dry run reads like a real one: {message}"
                );
            }
        }
    }
    assert!(published >= 2, "the dry run published no Event");
    // Give a controller that did write the rounds to do so, then compare.
    e2e::scrape::after_rounds(&sb, 3, None).await;
    assert_eq!(
        nodes_as_written(&nodes).await,
        requested,
        "a dry run changed a node"
    );
    let leases = leases
        .list(&ListParams::default())
        .await
        .expect("list leases");
    let names: Vec<_> = leases
        .items
        .iter()
        .map(|l| l.metadata.name.clone())
        .collect();
    assert!(names.is_empty(), "a dry run wrote Leases: {names:?}");
    watch
        .check()
        .unwrap_or_else(|violation| panic!("a dry run made a node unavailable: {violation}"));
    assert_eq!(sb.fleet.reboots("sim-1"), 0);
    sb.stop().await;
}
