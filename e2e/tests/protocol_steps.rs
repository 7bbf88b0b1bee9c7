//! An upgrade in the middle of a rollout: the state a rollout leaves at each step of the
//! protocol, recorded from a real run of this version (e2e/fixtures/protocol-steps/), is put on
//! a fresh control plane with simulated nodes and their agents, and the controller of this
//! build finishes it: every node in the rollout rebooted exactly as often as it still had to
//! (once, or not again when its reboot had happened), back, uncordoned, the ledger empty, and
//! the budget held all along.
//!
//! Record the fixtures again (after a change of what is stored):
//! `cargo test -p e2e --test scenarios -- --ignored protocol_steps::record_the_state_of_each_protocol_step`

use common::ledger::{LEDGER_NAME, OPERATOR_NAMESPACE};
use e2e::{
    BudgetWatch, node, protocol_annotations,
    protocol_steps::{
        STEPS, fixtures_dir, in_rollout, load_all, put, reboots_due, snapshot, step_of,
    },
    request_reboot,
    rollout::ledger_is_empty,
    wait_until,
};
use futures::StreamExt;
use k8s_openapi::api::{coordination::v1::Lease, core::v1::Node};
use kube::{
    Api,
    api::ListParams,
    runtime::{WatchStreamExt, watcher},
};
use nodesim::sandbox::{Sandbox, SandboxConfig};
use std::{collections::BTreeSet, time::Duration};

const ROLLOUT: Duration = Duration::from_secs(180);

fn config(nodes: usize) -> SandboxConfig {
    SandboxConfig::with_nodes(nodes).no_controller()
}

#[tokio::test(flavor = "multi_thread")]
async fn this_build_finishes_the_rollout_from_every_recorded_step() {
    let fixtures = load_all();
    let recorded: BTreeSet<&str> = fixtures
        .iter()
        .filter_map(|(_, f)| f["step"].as_str())
        .collect();
    for step in STEPS {
        assert!(recorded.contains(step), "no fixture of the step {step}");
    }
    for (file, fixture) in &fixtures {
        finish_from(file, fixture).await;
    }
}

async fn finish_from(file: &str, fixture: &serde_json::Value) {
    let nodes = fixture["nodes"].as_object().expect("nodes");
    let mut sb = Sandbox::start(config(nodes.len()))
        .await
        .expect("sandbox starts");
    let watch = BudgetWatch::start(sb.client.clone(), 1).await;
    put(&sb.client, fixture).await;
    sb.start_controller(&[]).expect("controller starts");
    let what = format!("{file}: every node of the rollout completed");
    wait_until(&what, ROLLOUT, Some(&watch), || async {
        for (name, recorded) in nodes {
            let n = node(&sb.client, name).await;
            let facts = common::NodeFacts::from_node(&n);
            let back = facts.readiness == common::Readiness::Ready
                && !facts.unschedulable
                && protocol_annotations(&n).is_empty();
            let completed =
                !in_rollout(recorded) || facts.annotations.contains_key("reboot-last-completed");
            if !back || !completed || sb.fleet.reboots(name) < reboots_due(recorded) {
                return false;
            }
        }
        ledger_is_empty(&sb).await
    })
    .await;
    for (name, recorded) in nodes {
        assert_eq!(
            sb.fleet.reboots(name),
            reboots_due(recorded),
            "{file}: {name} rebooted a wrong number of times"
        );
    }
    watch.check().unwrap_or_else(|e| panic!("{file}: {e}"));
    sb.stop().await;
}

/// Records the fixtures: three requested nodes, a budget of 1, this build's controller and
/// agents; the first time any node reaches a step, the nodes and the ledger are written down.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "records the fixtures; run by hand after a change of what is stored"]
async fn record_the_state_of_each_protocol_step() {
    let mut sb = Sandbox::start(config(3)).await.expect("sandbox starts");
    let client = sb.client.clone();
    for name in sb.fleet.names() {
        request_reboot(&sb.control_plane, &name);
    }
    let all_nodes: Api<Node> = Api::all(client.clone());
    let events = watcher(all_nodes.clone(), watcher::Config::default())
        .applied_objects()
        .boxed();
    let leases: Api<Lease> = Api::namespaced(client.clone(), OPERATOR_NAMESPACE);
    sb.start_controller(&[]).expect("controller starts");
    let dir = fixtures_dir();
    std::fs::create_dir_all(&dir).expect("fixtures dir");
    let mut seen = BTreeSet::new();
    let recording = async {
        futures::pin_mut!(events);
        while seen.len() < STEPS.len() {
            let Some(Ok(changed)) = events.next().await else {
                continue;
            };
            let Some(step) = step_of(&changed) else {
                continue;
            };
            if seen.contains(step) {
                continue;
            }
            // Read together, after the change: a node that moved on meanwhile is not this step
            // any more, and the step is recorded from a later change instead.
            let ledger = leases.get_opt(LEDGER_NAME).await.expect("read the ledger");
            let nodes = all_nodes
                .list(&ListParams::default())
                .await
                .expect("list")
                .items;
            let name = changed.metadata.name.clone().unwrap_or_default();
            let now = nodes
                .iter()
                .find(|n| n.metadata.name.as_deref() == Some(&name));
            if now.and_then(step_of) != Some(step) {
                continue;
            }
            seen.insert(step);
            let fixture = snapshot(step, &name, &nodes, ledger.as_ref());
            let index = STEPS.iter().position(|s| *s == step).unwrap_or_default();
            let path = dir.join(format!("{index}-{step}.json"));
            let text = serde_json::to_string_pretty(&fixture).expect("json");
            std::fs::write(&path, text + "\n").expect("write the fixture");
        }
    };
    tokio::time::timeout(ROLLOUT, recording)
        .await
        .unwrap_or_else(|_| panic!("not every step was seen; recorded {seen:?}"));
    sb.stop().await;
}
