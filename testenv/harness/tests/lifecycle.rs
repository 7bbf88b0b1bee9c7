//! Restarting the API server, and cleaning up on drop, also when a test panics.

mod common;

use std::path::PathBuf;
use std::sync::mpsc;

use common::{create, processes_mentioning};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use serde_json::json;
use testenv::{ControlPlane, Options};

#[tokio::test]
async fn the_api_server_restarts_on_the_same_port_and_data() {
    let mut cp = common::start(common::apiserver_only()).await;
    let url = cp.server_url().to_owned();
    let client = cp.client().await.expect("admin client");
    let maps: Api<ConfigMap> = Api::default_namespaced(client);
    create(
        &maps,
        json!({"metadata": {"name": "survivor"}, "data": {"k": "v"}}),
    )
    .await;

    cp.restart_apiserver()
        .await
        .expect("restart kube-apiserver");

    assert_eq!(cp.server_url(), url);
    let map = maps
        .get("survivor")
        .await
        .expect("the old client reconnects; etcd kept the data");
    assert_eq!(
        map.data.unwrap_or_default().get("k").map(String::as_str),
        Some("v")
    );
    cp.ensure_running().expect("every component still runs");

    let dir = cp.dir().to_path_buf();
    assert_eq!(
        processes_mentioning(&dir).len(),
        2,
        "etcd and kube-apiserver run"
    );
    drop(cp);
    assert!(
        processes_mentioning(&dir).is_empty(),
        "drop stopped every process"
    );
    assert!(!dir.exists(), "drop removed {}", dir.display());
}

#[test]
fn a_panicking_test_stops_the_processes_and_keeps_the_logs() {
    let (dir_tx, dir_rx) = mpsc::channel::<PathBuf>();
    let panicked = std::thread::spawn(move || {
        let runtime = tokio::runtime::Runtime::new().expect("tokio runtime");
        runtime.block_on(async {
            let cp = common::start(common::apiserver_only()).await;
            dir_tx.send(cp.dir().to_path_buf()).expect("send the dir");
            panic!("a test fails while it holds a control plane");
        })
    })
    .join();
    assert!(panicked.is_err(), "the thread panicked");

    let dir = dir_rx.recv().expect("the control plane had started");
    assert!(
        processes_mentioning(&dir).is_empty(),
        "unwinding stopped every process"
    );
    assert!(
        dir.join("kube-apiserver.log").is_file(),
        "the logs are kept for reading"
    );
    std::fs::remove_dir_all(&dir).expect("clean up the kept dir");
}

#[tokio::test]
async fn a_failed_start_shows_the_log_and_leaves_nothing_behind() {
    let data = tempfile::tempdir().expect("temp dir");
    let opts = Options {
        data_dir: Some(data.path().to_path_buf()),
        extra_apiserver_args: vec!["--no-such-flag".to_owned()],
        ..common::apiserver_only()
    };
    let message = ControlPlane::start(opts)
        .await
        .expect_err("a bad flag")
        .to_string();
    assert!(message.contains("kube-apiserver exited"), "{message}");
    assert!(
        message.contains("unknown flag: --no-such-flag"),
        "the log's tail: {message}"
    );
    assert!(
        processes_mentioning(data.path()).is_empty(),
        "etcd was stopped"
    );
    assert_eq!(
        data.path().read_dir().expect("data dir").count(),
        0,
        "files removed"
    );
}
