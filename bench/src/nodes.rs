//! Realistic Node objects, created directly through the API as a kubelet registers its node,
//! and kubelet-like status heartbeats on them.
//!
//! A node carries what a cloud node carries: a dozen labels, addresses, capacity, four
//! conditions with messages, 40 container images in `status.images`, full `nodeInfo`, and
//! the managedFields that the writes leave: the object is server-side applied with field
//! manager `kubelet`, and its status is patched (strategic merge, as the kubelet does) by the
//! same manager, so `metadata.managedFields` holds a real Apply entry and a real status
//! Update entry. About 14 KB of JSON each.

use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::{api::core::v1::Node, jiff::Timestamp};
use kube::{
    Api,
    api::{Patch, PatchParams},
};
use serde_json::{Value, json};
use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};
use tokio::{sync::Semaphore, task::JoinHandle};

/// The label that puts a node in one scenario's pool (and the controller's `--node-selector`).
pub const POOL_LABEL: &str = "bench.node-reboot-operator.io/pool";

/// Field manager of every node write, as on a real node.
const KUBELET: &str = "kubelet";

/// A deterministic stream of pseudo-random numbers (splitmix64), for ids and digests.
struct Mix(u64);

impl Mix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn hex(&mut self, chars: usize) -> String {
        let mut s = String::with_capacity(chars + 16);
        while s.len() < chars {
            s.push_str(&format!("{:016x}", self.next()));
        }
        s.truncate(chars);
        s
    }

    fn uuid(&mut self) -> String {
        let h = self.hex(32);
        format!(
            "{}-{}-{}-{}-{}",
            &h[..8],
            &h[8..12],
            &h[12..16],
            &h[16..20],
            &h[20..]
        )
    }
}

const IMAGES: [&str; 20] = [
    "registry.k8s.io/kube-proxy",
    "registry.k8s.io/pause",
    "registry.k8s.io/coredns/coredns",
    "registry.k8s.io/metrics-server/metrics-server",
    "docker.io/calico/node",
    "docker.io/calico/cni",
    "quay.io/prometheus/node-exporter",
    "quay.io/prometheus/prometheus",
    "docker.io/grafana/grafana",
    "docker.io/library/nginx",
    "docker.io/library/redis",
    "docker.io/library/postgres",
    "ghcr.io/fluxcd/source-controller",
    "ghcr.io/fluxcd/kustomize-controller",
    "quay.io/jetstack/cert-manager-controller",
    "docker.io/bitnami/kafka",
    "public.ecr.aws/aws-ec2/aws-node-termination-handler",
    "public.ecr.aws/ebs-csi-driver/aws-ebs-csi-driver",
    "registry.example.com/payments/api",
    "registry.example.com/search/indexer",
];

/// The four conditions of a healthy node; `transition` is left out when `None` (a heartbeat
/// does not change it, and a strategic merge by `type` keeps the old one).
fn conditions(heartbeat: &str, transition: Option<&str>) -> Value {
    let condition = |kind: &str, status: &str, reason: &str, message: &str| {
        let mut c = json!({"type": kind, "status": status, "reason": reason, "message": message,
                           "lastHeartbeatTime": heartbeat});
        if let Some(t) = transition {
            c["lastTransitionTime"] = t.into();
        }
        c
    };
    json!([
        condition(
            "MemoryPressure",
            "False",
            "KubeletHasSufficientMemory",
            "kubelet has sufficient memory available"
        ),
        condition(
            "DiskPressure",
            "False",
            "KubeletHasNoDiskPressure",
            "kubelet has no disk pressure"
        ),
        condition(
            "PIDPressure",
            "False",
            "KubeletHasSufficientPID",
            "kubelet has sufficient PID available"
        ),
        condition(
            "Ready",
            "True",
            "KubeletReady",
            "kubelet is posting ready status"
        ),
    ])
}

/// The Node as its kubelet registers it (metadata and spec), for server-side apply.
pub fn object(name: &str, index: usize, pool: &str) -> Value {
    let zone = ["a", "b", "c"][index % 3];
    let (b, c) = ((index / 250) % 250, index % 250 + 1);
    let mut mix = Mix(index as u64 + 1);
    let instance = format!("i-0{}", mix.hex(16));
    json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "beta.kubernetes.io/arch": "amd64",
                "beta.kubernetes.io/instance-type": "m6i.xlarge",
                "beta.kubernetes.io/os": "linux",
                "failure-domain.beta.kubernetes.io/region": "eu-west-1",
                "failure-domain.beta.kubernetes.io/zone": format!("eu-west-1{zone}"),
                "kubernetes.io/arch": "amd64",
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "node.kubernetes.io/instance-type": "m6i.xlarge",
                "topology.kubernetes.io/region": "eu-west-1",
                "topology.kubernetes.io/zone": format!("eu-west-1{zone}"),
                "topology.ebs.csi.aws.com/zone": format!("eu-west-1{zone}"),
                "node-role.kubernetes.io/worker": "",
                POOL_LABEL: pool,
            },
            "annotations": {
                "node.alpha.kubernetes.io/ttl": "0",
                "volumes.kubernetes.io/controller-managed-attach-detach": "true",
                "csi.volume.kubernetes.io/nodeid": format!("{{\"ebs.csi.aws.com\":\"{instance}\"}}"),
            },
        },
        "spec": {
            "podCIDR": format!("10.{}.{}.0/24", 64 + b / 64, c),
            "podCIDRs": [format!("10.{}.{}.0/24", 64 + b / 64, c)],
            "providerID": format!("aws:///eu-west-1{zone}/{instance}"),
        },
    })
}

/// The full status a kubelet reports (strategic merge patch of `status`).
pub fn status(name: &str, index: usize) -> Value {
    let now = Timestamp::now().to_string();
    let (b, c) = ((index / 250) % 250, index % 250 + 1);
    let mut mix = Mix(0x5eed_0000 + index as u64);
    let images: Vec<Value> = (0..40)
        .map(|i| {
            let repo = IMAGES[i % IMAGES.len()];
            let tag = format!("v1.{}.{}", i % 7 + 20, i / 7);
            json!({
                "names": [format!("{repo}@sha256:{}", mix.hex(64)), format!("{repo}:{tag}")],
                "sizeBytes": 5_000_000 + (mix.next() % 700_000_000),
            })
        })
        .collect();
    json!({"status": {
        "addresses": [
            {"type": "InternalIP", "address": format!("10.0.{b}.{c}")},
            {"type": "InternalDNS", "address": format!("ip-10-0-{b}-{c}.eu-west-1.compute.internal")},
            {"type": "Hostname", "address": name},
        ],
        "allocatable": {"cpu": "3920m", "ephemeral-storage": "95551679124", "hugepages-1Gi": "0",
                        "hugepages-2Mi": "0", "memory": "15136204Ki", "pods": "58"},
        "capacity": {"cpu": "4", "ephemeral-storage": "104845292Ki", "hugepages-1Gi": "0",
                     "hugepages-2Mi": "0", "memory": "16233932Ki", "pods": "58"},
        "conditions": conditions(&now, Some(&now)),
        "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
        "images": images,
        "nodeInfo": {
            "architecture": "amd64",
            "bootID": mix.uuid(),
            "containerRuntimeVersion": "containerd://1.7.27",
            "kernelVersion": "6.1.0-31-cloud-amd64",
            "kubeProxyVersion": "",
            "kubeletVersion": "v1.33.1",
            "machineID": mix.hex(32),
            "operatingSystem": "linux",
            "osImage": "Debian GNU/Linux 12 (bookworm)",
            "systemUUID": mix.uuid(),
        },
    }})
}

/// A kubelet's periodic status report: the conditions with a new heartbeat time.
fn heartbeat() -> Value {
    let now = Timestamp::now().to_string();
    json!({"status": {"conditions": conditions(&now, None)}})
}

/// `<pool>-<i>` for i in `range`.
pub fn names(pool: &str, range: std::ops::Range<usize>) -> Vec<(usize, String)> {
    range.map(|i| (i, format!("{pool}-{i}"))).collect()
}

/// Registers the nodes as a kubelet would (apply, then the first status report), `concurrency`
/// at a time.
pub async fn create(
    api: &Api<Node>,
    nodes: &[(usize, String)],
    pool: &str,
    concurrency: usize,
) -> anyhow::Result<()> {
    let tasks: Vec<_> = nodes
        .iter()
        .cloned()
        .map(|(i, name)| register(api.clone(), i, name, pool.to_owned()))
        .collect();
    stream::iter(tasks)
        .buffer_unordered(concurrency)
        .try_collect::<()>()
        .await
}

/// Registers one node as a kubelet would: apply, then the first status report.
pub async fn register(
    api: Api<Node>,
    index: usize,
    name: String,
    pool: String,
) -> anyhow::Result<()> {
    let apply = PatchParams::apply(KUBELET).force();
    api.patch(&name, &apply, &Patch::Apply(object(&name, index, &pool)))
        .await?;
    let update = PatchParams {
        field_manager: Some(KUBELET.into()),
        ..PatchParams::default()
    };
    api.patch_status(&name, &update, &Patch::Strategic(status(&name, index)))
        .await?;
    Ok(())
}

/// Status reports in flight at most. Kubelets report independently of one another; the cap
/// only keeps a stalled API server from piling up requests. 32 was reached at 65,000 nodes
/// (217 reports/s, the API server answering in more than 150 ms), where 8 % were skipped.
const IN_FLIGHT: usize = 64;

/// Status reports going on in the background, round-robin over the nodes at a fixed rate.
#[derive(Debug)]
pub struct Heartbeats {
    task: JoinHandle<()>,
    started: std::time::Instant,
    pub sent: Arc<AtomicU64>,
    pub failed: Arc<AtomicU64>,
    pub skipped: Arc<AtomicU64>,
    pub rate: f64,
}

impl Heartbeats {
    /// `rate` reports per second in total; at most [`IN_FLIGHT`] in flight (a tick finding none
    /// free is skipped and counted: the API server cannot keep up).
    pub fn start(api: Api<Node>, names: Vec<String>, rate: f64) -> Self {
        let sent = Arc::new(AtomicU64::new(0));
        let failed = Arc::new(AtomicU64::new(0));
        let skipped = Arc::new(AtomicU64::new(0));
        let (s, f, k) = (sent.clone(), failed.clone(), skipped.clone());
        let task = tokio::spawn(async move {
            let slots = Arc::new(Semaphore::new(IN_FLIGHT));
            let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / rate));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let params = PatchParams {
                field_manager: Some(KUBELET.into()),
                ..PatchParams::default()
            };
            for name in names.iter().cycle() {
                tick.tick().await;
                let Ok(permit) = slots.clone().try_acquire_owned() else {
                    k.fetch_add(1, Ordering::Relaxed);
                    continue;
                };
                let (api, params, name) = (api.clone(), params.clone(), name.clone());
                let (s, f) = (s.clone(), f.clone());
                tokio::spawn(async move {
                    match api
                        .patch_status(&name, &params, &Patch::Strategic(heartbeat()))
                        .await
                    {
                        Ok(_) => s.fetch_add(1, Ordering::Relaxed),
                        Err(_) => f.fetch_add(1, Ordering::Relaxed),
                    };
                    drop(permit);
                });
            }
        });
        Self {
            task,
            started: std::time::Instant::now(),
            sent,
            failed,
            skipped,
            rate,
        }
    }

    pub fn stop(self) {
        self.task.abort();
    }

    /// Stops the reports; what was sent.
    pub fn finish(self) -> HeartbeatCounts {
        self.task.abort();
        let sent = self.sent.load(Ordering::Relaxed);
        HeartbeatCounts {
            rate: self.rate,
            sent_per_second: sent as f64 / self.started.elapsed().as_secs_f64().max(1e-3),
            sent,
            failed: self.failed.load(Ordering::Relaxed),
            skipped: self.skipped.load(Ordering::Relaxed),
        }
    }
}

/// The status reports of a run: the rate asked for, the rate sent, and how many were sent,
/// failed, or skipped because too many were in flight already.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct HeartbeatCounts {
    pub rate: f64,
    pub sent_per_second: f64,
    pub sent: u64,
    pub failed: u64,
    pub skipped: u64,
}

impl Drop for Heartbeats {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_is_realistic() {
        let mut node = object("n-1", 1, "p");
        let status = status("n-1", 1);
        node["status"] = status["status"].clone();
        let typed: Node = serde_json::from_value(node.clone()).expect("a valid Node");
        let s = typed.status.expect("status");
        assert_eq!(s.images.map(|i| i.len()), Some(40));
        assert_eq!(s.conditions.map(|c| c.len()), Some(4));
        let size = serde_json::to_string(&node).unwrap().len();
        assert!((8_000..20_000).contains(&size), "{size} bytes");
        // Deterministic per index, different between nodes.
        assert_eq!(object("n-1", 1, "p"), object("n-1", 1, "p"));
        assert_ne!(object("n-2", 2, "p")["spec"], object("n-1", 1, "p")["spec"]);
    }
}
