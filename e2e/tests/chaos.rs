//! Safety under concurrency and faults (issue 11), end to end. First, the observers
//! themselves: an observer that goes blind passes every check.

use e2e::{BudgetWatch, NodeHistory, node};
use nodesim::sandbox::{Sandbox, SandboxConfig};
use std::time::Duration;
use testenv::Options;

// The observers themselves: they resume after an API server restart and still catch what
// happens afterwards.
#[tokio::test(flavor = "multi_thread")]
async fn the_observers_resume_after_an_api_server_restart() {
    let config = SandboxConfig {
        nodes: 4,
        start_controller: false,
        control_plane: Options {
            controller_manager: false,
            scheduler: false,
            ..Options::default()
        },
        ..SandboxConfig::default()
    };
    let mut sb = Sandbox::start(config).await.expect("sandbox starts");
    let budget = 1;
    let watch = BudgetWatch::start(sb.client.clone(), budget).await;
    let history = NodeHistory::start(sb.client.clone(), "sim-1").await;
    sb.control_plane
        .restart_apiserver()
        .await
        .expect("API server restarts");
    // No controller runs: budget + 1 nodes go NotReady on their own, a change the watch can
    // only see if it resumed.
    for name in ["sim-1", "sim-2"] {
        sb.fleet.set_ready(name, false).await;
    }
    let broken = e2e::eventually(
        "the budget watch sees 2 nodes NotReady",
        Duration::from_secs(120),
        None,
        || async { watch.check().err() },
    )
    .await;
    assert!(
        broken.contains("2 nodes unavailable at once with a budget of 1"),
        "{broken}"
    );
    let coverage = watch.coverage();
    eprintln!("budget watch after the restart: {coverage}");
    assert!(coverage.errors >= 1, "the restart was noticed: {coverage}");
    assert!(
        coverage.relists >= 1,
        "the watch started over with a re-list: {coverage}"
    );
    let now = node(&sb.client, "sim-1").await;
    e2e::wait_until(
        "the history of sim-1 shows its state after the restart",
        Duration::from_secs(120),
        None,
        || async {
            history.states().last().map(|s| s.revision) == Some(nodesim::observe::revision(&now))
        },
    )
    .await;
    history.check().unwrap();
    eprintln!("history of sim-1 after the restart: {}", history.coverage());
    sb.stop().await;
}
