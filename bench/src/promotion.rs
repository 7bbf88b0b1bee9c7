//! One promotion trial: write `reboot-needed=true` on an idle node and time until an
//! independent watcher sees `reboot-now=true` on it; then cancel (remove `reboot-now` before
//! any agent takes it, which the controller answers by uncordoning the node and releasing its
//! slot) and wait until the node and the ledger are clean again, so that the next trial starts
//! on an idle fleet. No agent runs on these nodes: nothing reboots.

use crate::{
    nodes::POOL_LABEL,
    stats::{Latencies, Spread},
};
use anyhow::{Context, bail};
use common::AnnotationKeys;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::{
    Api, Client,
    api::{Patch, PatchParams},
    core::PartialObjectMeta,
    runtime::watcher,
};
use serde::Serialize;
use serde_json::json;
use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::Duration,
};
use tokio::{
    sync::{Notify, oneshot},
    task::JoinHandle,
    time::{Instant, sleep, timeout, timeout_at},
};

/// Every sighting of `reboot-now=true` per node since the node's last trial began, as
/// (resourceVersion, arrival): a trial takes the first sighting newer than its own write, so
/// that a late event of an earlier trial can never end a later one.
type Sightings = Arc<Mutex<HashMap<String, Vec<(u64, Instant)>>>>;

fn rv(meta: &kube::api::ObjectMeta) -> u64 {
    meta.resource_version
        .as_deref()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// Runs promotion trials on the nodes of one pool.
pub struct Promotions {
    nodes: Api<Node>,
    client: Client,
    pool: String,
    /// The ledger Lease whose slots must be empty again after each trial.
    ledger: String,
    keys: AnnotationKeys,
    sightings: Sightings,
    seen: Arc<Notify>,
    task: JoinHandle<()>,
}

impl Promotions {
    /// Starts the watcher (on `watch_client`, its own connection) and returns once it has
    /// listed the pool. Writes go through `write_client`.
    pub async fn start(
        watch_client: Client,
        write_client: Client,
        pool: &str,
        ledger: &str,
    ) -> anyhow::Result<Self> {
        let keys = AnnotationKeys::default();
        let sightings: Sightings = Arc::default();
        let seen = Arc::new(Notify::new());
        let config = watcher::Config::default().labels(&format!("{POOL_LABEL}={pool}"));
        let stream = watcher(Api::<PartialObjectMeta<Node>>::all(watch_client), config);
        let (ready_tx, ready_rx) = oneshot::channel();
        let (recorded, notify, now_key) = (sightings.clone(), seen.clone(), keys.now.clone());
        let task = tokio::spawn(async move {
            futures::pin_mut!(stream);
            let mut ready = Some(ready_tx);
            while let Some(event) = stream.next().await {
                let arrived = Instant::now();
                let meta = match event {
                    Ok(watcher::Event::Apply(m) | watcher::Event::InitApply(m)) => m,
                    Ok(watcher::Event::InitDone) => {
                        if let Some(tx) = ready.take() {
                            let _ = tx.send(());
                        }
                        continue;
                    }
                    Ok(_) => continue,
                    Err(error) => {
                        tracing::warn!(%error, "promotion watch failed; retrying");
                        sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                };
                let now = meta
                    .metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(&now_key))
                    .is_some_and(|v| v == "true");
                if now {
                    let version = rv(&meta.metadata);
                    let name = meta.metadata.name.unwrap_or_default();
                    recorded
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .entry(name)
                        .or_default()
                        .push((version, arrived));
                    notify.notify_waiters();
                }
            }
        });
        timeout(Duration::from_secs(120), ready_rx)
            .await
            .context("the promotion watcher did not list the pool within 120 s")??;
        Ok(Self {
            nodes: Api::all(write_client.clone()),
            client: write_client,
            pool: pool.to_owned(),
            ledger: ledger.to_owned(),
            keys,
            sightings,
            seen,
            task,
        })
    }

    /// One trial on `node`: the time from the write of `reboot-needed` (just before the
    /// request is sent) to the watcher's sight of `reboot-now`; then the node is cleaned up.
    pub async fn trial(&self, node: &str, within: Duration) -> anyhow::Result<Duration> {
        Ok(self.timed_trial(node, within).await?.0)
    }

    /// A trial, with how long the write of the request itself took (until its answer).
    pub async fn timed_trial(
        &self,
        node: &str,
        within: Duration,
    ) -> anyhow::Result<(Duration, Duration)> {
        self.sightings
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(node);
        let request = json!({"metadata": {"annotations": {self.keys.needed.as_str(): "true"}}});
        let began = Instant::now();
        let written = self
            .nodes
            .patch(node, &PatchParams::default(), &Patch::Merge(request))
            .await
            .with_context(|| format!("request a reboot of {node}"))?;
        let write = began.elapsed();
        let after = rv(&written.metadata);
        let deadline = began + within;
        let seen = loop {
            let notified = self.seen.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let first = self
                .sightings
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get(node)
                .and_then(|s| s.iter().find(|(v, _)| *v > after).map(|(_, at)| *at));
            if let Some(at) = first {
                break at;
            }
            if timeout_at(deadline, notified).await.is_err() {
                bail!("{node}: no reboot-now within {within:?} of the request");
            }
        };
        let latency = seen.saturating_duration_since(began);
        self.cancel(node).await?;
        Ok((latency, write))
    }

    /// Removes `reboot-now` (the controller then uncordons the node and releases its slot) and
    /// waits until the node is as before the trial and the ledger holds no slot.
    async fn cancel(&self, node: &str) -> anyhow::Result<()> {
        let pointer = format!("/metadata/annotations/{}", self.keys.now.replace('/', "~1"));
        let patch: json_patch::Patch = serde_json::from_value(json!([
            {"op": "test", "path": pointer, "value": "true"},
            {"op": "remove", "path": pointer},
        ]))?;
        self.nodes
            .patch(node, &PatchParams::default(), &Patch::Json::<()>(patch))
            .await
            .with_context(|| format!("cancel the reboot of {node}"))?;
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if self.is_clean(node).await? {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("{node} was not uncordoned and released within 60 s of the cancel");
            }
            sleep(Duration::from_millis(10)).await;
        }
    }

    async fn is_clean(&self, node: &str) -> anyhow::Result<bool> {
        let n = self.nodes.get(node).await?;
        Ok(crate::scenarios::is_clean(&n)
            && crate::scenarios::slots_of(&self.client, &self.ledger)
                .await?
                .is_empty())
    }
}

impl std::fmt::Debug for Promotions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Promotions")
            .field("pool", &self.pool)
            .finish_non_exhaustive()
    }
}

impl Drop for Promotions {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// One batch of trials: its own percentiles.
#[derive(Debug, Clone, Serialize)]
pub struct Batch {
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub samples_ms: Vec<f64>,
    /// How long the write of `reboot-needed` itself took (included in each sample).
    pub write_samples_ms: Vec<f64>,
}

/// Trials run in batches: the median of the batches' p50 and p99 with their range, so that a
/// figure that one noisy moment moved shows as such.
#[derive(Debug, Clone, Serialize)]
pub struct Batched {
    pub trials_per_batch: usize,
    pub p50_ms: Spread,
    pub p99_ms: Spread,
    /// p50 of the writes of the request over all batches.
    pub write_p50_ms: f64,
    pub batches: Vec<Batch>,
}

impl Promotions {
    /// `batches` batches of `per_batch` trials on nodes spread over `names`, a `pause` between
    /// two batches; `alive` fails the run as soon as the controller is gone.
    pub async fn batches(
        &self,
        names: &[String],
        (batches, per_batch): (usize, usize),
        pause: Duration,
        mut alive: impl FnMut() -> anyhow::Result<()>,
    ) -> anyhow::Result<Batched> {
        anyhow::ensure!(!names.is_empty(), "no node to run promotion trials on");
        let mut done = Vec::new();
        let mut writes = Latencies::default();
        for b in 0..batches {
            let (mut latencies, mut batch_writes) = (Latencies::default(), Latencies::default());
            for i in 0..per_batch {
                let trial = b * per_batch + i;
                // Spread over the pool (7919 is prime), not the same few nodes.
                let node = &names[(trial * 7919 + 13) % names.len()];
                let result = self.timed_trial(node, Duration::from_secs(30)).await;
                alive()?;
                let (latency, write) = result?;
                latencies.push(latency);
                batch_writes.push(write);
                // A short, varying pause: the controller finishes the cancel (Events), and
                // trials do not fall in step with anything periodic.
                sleep(Duration::from_millis(20 + (trial as u64 * 7) % 30)).await;
            }
            writes.samples_ms.extend(&batch_writes.samples_ms);
            done.push(Batch {
                p50_ms: latencies.percentile(50.0).unwrap_or(f64::NAN),
                p99_ms: latencies.percentile(99.0).unwrap_or(f64::NAN),
                samples_ms: latencies.samples_ms,
                write_samples_ms: batch_writes.samples_ms,
            });
            if b + 1 < batches {
                sleep(pause).await;
            }
        }
        let spread = |pick: fn(&Batch) -> f64| {
            let values: Vec<f64> = done.iter().map(pick).collect();
            Spread::of(&values).context("no batch of promotion trials")
        };
        Ok(Batched {
            trials_per_batch: per_batch,
            p50_ms: spread(|b| b.p50_ms)?,
            p99_ms: spread(|b| b.p99_ms)?,
            write_p50_ms: writes.percentile(50.0).unwrap_or(f64::NAN),
            batches: done,
        })
    }
}
