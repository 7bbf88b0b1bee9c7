//! Helpers shared by the integration tests; each test binary uses a different subset.
#![allow(dead_code)]

use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use kube::Api;
use kube::api::PostParams;
use serde::de::DeserializeOwned;
use testenv::{ControlPlane, Options};

/// Starts a control plane; a failure (e.g. missing binaries) fails the test with the reason.
pub async fn start(opts: Options) -> ControlPlane {
    match ControlPlane::start(opts).await {
        Ok(cp) => {
            eprintln!(
                "control plane ready in {:.2?} in {}",
                cp.startup_time(),
                cp.dir().display()
            );
            cp
        }
        Err(e) => panic!("cannot start the control plane: {e}"),
    }
}

/// Only etcd and kube-apiserver: enough for tests of authentication and authorization.
pub fn apiserver_only() -> Options {
    Options {
        controller_manager: false,
        scheduler: false,
        ..Options::default()
    }
}

/// Polls `check` until it returns Ok; `Err` describes the state seen, for the failure message.
pub async fn eventually<T>(
    what: &str,
    timeout: Duration,
    mut check: impl AsyncFnMut() -> Result<T, String>,
) -> T {
    let began = Instant::now();
    loop {
        match check().await {
            Ok(value) => return value,
            Err(state) if began.elapsed() > timeout => {
                panic!("timed out after {timeout:?} waiting for {what}; last seen: {state}")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

/// Builds a typed object from JSON; keeps test fixtures short.
pub fn object<K: DeserializeOwned>(value: serde_json::Value) -> K {
    serde_json::from_value(value).expect("a valid object")
}

pub async fn create<K>(api: &Api<K>, value: serde_json::Value) -> K
where
    K: kube::Resource + Clone + DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    api.create(&PostParams::default(), &object(value))
        .await
        .expect("create")
}

/// Runs a command to completion; panics only when it cannot be started at all.
pub fn run(command: &mut Command) -> Output {
    command
        .output()
        .unwrap_or_else(|e| panic!("cannot run {command:?}: {e}"))
}

/// Live processes whose command line mentions `needle` (zombies have an empty command line).
pub fn processes_mentioning(needle: &Path) -> Vec<String> {
    let needle = needle.display().to_string();
    let me = std::process::id().to_string();
    std::fs::read_dir("/proc")
        .expect("read /proc")
        .filter_map(Result::ok)
        .filter(|entry| {
            entry
                .file_name()
                .to_string_lossy()
                .chars()
                .all(|c| c.is_ascii_digit())
        })
        .filter(|entry| entry.file_name().to_string_lossy() != me)
        .filter_map(|entry| std::fs::read(entry.path().join("cmdline")).ok())
        .map(|raw| String::from_utf8_lossy(&raw).replace('\0', " "))
        .filter(|cmdline| cmdline.contains(&needle))
        .collect()
}
