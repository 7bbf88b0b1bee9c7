//! Wires the controller together and runs it until SIGTERM or Ctrl-C.

use crate::{
    args::Args,
    drain::{DrainSettings, Drainer, RunningDrains},
    events::Events,
    ledger_store::LedgerStore,
    memory::Memory,
    nodes,
    nodes::Overlay,
    shell::Shell,
};
use anyhow::Context;
use kube::{Api, Client, api::ListParams};
use std::{
    sync::Arc,
    time::{Duration, Instant},
};
use tokio::sync::Notify;

/// How often the controller decides even without a change (drain retry times, missed events).
const RESYNC: Duration = Duration::from_secs(5);
/// After a round whose writes failed, wait this long before the next one.
const RETRY: Duration = Duration::from_secs(1);

pub async fn run(args: Args) -> anyhow::Result<()> {
    let mut config = kube::Config::infer()
        .await
        .context("no Kubernetes API server configured (in-cluster config or KUBECONFIG)")?;
    let client = Client::try_from(config.clone()).context("cannot build the API client")?;
    // kube retries a 429 up to 15 times over many minutes by default; for an eviction a 429
    // is the PodDisruptionBudget's answer, which the drain must see and report.
    config.default_retry = false;
    let eviction_client = Client::try_from(config).context("cannot build the API client")?;
    check_selector(&client, args.node_selector.as_deref()).await?;
    let changed = Arc::new(Notify::new());
    let store = nodes::spawn_reflector(
        client.clone(),
        args.node_selector.as_deref(),
        changed.clone(),
    );
    let ledger_store = LedgerStore::new(client.clone(), &args.namespace, &args.ledger_name);
    let ledger = ledger_store.load().await.with_context(|| {
        format!(
            "cannot use the slot ledger Lease {}/{}; does namespace {:?} exist (--namespace)?",
            args.namespace, args.ledger_name, args.namespace
        )
    })?;
    let ledger_watch = ledger_store.spawn_watch({
        let changed = changed.clone();
        move || changed.notify_one()
    });
    store
        .wait_until_ready()
        .await
        .context("node cache stopped before it synced")?;
    tracing::info!(max_unavailable = %args.max_unavailable, nodes = store.len(), "node cache synced; controller running");
    let events = Events::new(client.clone(), std::env::var("POD_NAME").ok());
    let mut shell = Shell {
        api: Api::all(client.clone()),
        keys: args.annotation_prefix.clone(),
        max_unavailable: args.max_unavailable,
        drainer: args.drain.then(|| {
            let settings = DrainSettings {
                timeout: args.drain_timeout,
                grace_period: args.drain_grace_period,
                pod_selector: args.drain_pod_selector.clone(),
            };
            Drainer::new(eviction_client.clone(), settings, events.clone())
        }),
        drains: RunningDrains::new(changed.clone()),
        nodes: store,
        overlay: Overlay::default(),
        ledger,
        ledger_store,
        ledger_watch,
        events,
        memory: Memory::default(),
        started: Instant::now(),
        failed: false,
    };
    let shutdown = crate::shutdown::signal();
    tokio::pin!(shutdown);
    let mut wait = Duration::ZERO;
    loop {
        tokio::select! {
            () = &mut shutdown => break,
            () = changed.notified() => {}
            () = tokio::time::sleep(wait.max(Duration::from_millis(1))) => {}
        }
        wait = RESYNC;
        // Each write usually enables the next step (grant -> cordon -> promote): keep going
        // while rounds make progress, then wait for the next change.
        for _ in 0..100 {
            if !shell.round().await {
                break;
            }
        }
        if shell.last_round_failed() {
            wait = RETRY;
        }
    }
    tracing::info!("shutting down");
    Ok(())
}

/// A selector the API server refuses would make the watch fail forever: refuse it at start.
async fn check_selector(client: &Client, selector: Option<&str>) -> anyhow::Result<()> {
    let Some(selector) = selector else {
        return Ok(());
    };
    Api::<k8s_openapi::api::core::v1::Node>::all(client.clone())
        .list_metadata(&ListParams::default().labels(selector).limit(1))
        .await
        .map(|_| ())
        .with_context(|| format!("invalid --node-selector {selector:?}: the API server refused it"))
}
