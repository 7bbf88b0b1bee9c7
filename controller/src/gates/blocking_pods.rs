//! `--blocking-pod-selector`: no new reboot of a node while a pod matching a selector runs on
//! it (kured's semantics), or, with `--blocking-pod-selector-scope=cluster`, anywhere. One
//! watch per selector, filtered by the API server, keeps the matching pods; nothing polls.

use crate::{
    gates::preflight::{Listing, follow},
    metrics::Metrics,
};
use futures::StreamExt as _;
use k8s_openapi::api::core::v1::Pod;
use kube::{
    Api, Client, ResourceExt as _,
    runtime::{WatchStreamExt as _, reflector, reflector::Store, watcher},
};
use observability::watch_retry::{MAX_DELAY, retry_with_backoff};
use std::{
    collections::{BTreeMap, BTreeSet},
    sync::Arc,
};
use tokio::sync::Notify;

/// Where a matching pod holds reboots.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Scope {
    /// The node the pod runs on waits; the others go on.
    #[default]
    Node,
    /// Every node of the pool waits while the pod runs anywhere in the cluster.
    Cluster,
}

/// The pods that hold reboots now.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Blocking {
    /// By node: the blocking pods on it (`namespace/name`).
    pub nodes: BTreeMap<String, Vec<String>>,
    /// With the cluster scope: every blocking pod, wherever it runs.
    pub anywhere: Vec<String>,
}

impl Blocking {
    /// Pods that have not finished block: Pending and Running (and Unknown, to be safe), as
    /// kured counts them; Succeeded and Failed pods do not.
    pub fn of<'a>(pods: impl IntoIterator<Item = &'a Pod>, scope: Scope) -> Self {
        let mut blocking = Self::default();
        for pod in pods.into_iter().filter(|p| !finished(p)) {
            let key = format!("{}/{}", pod.namespace().unwrap_or_default(), pod.name_any());
            match scope {
                Scope::Cluster => blocking.anywhere.push(key),
                Scope::Node => {
                    let node = pod.spec.as_ref().and_then(|s| s.node_name.clone());
                    if let Some(node) = node {
                        blocking.nodes.entry(node).or_default().push(key);
                    }
                }
            }
        }
        blocking.anywhere.sort();
        blocking.anywhere.dedup();
        for pods in blocking.nodes.values_mut() {
            pods.sort();
            pods.dedup();
        }
        blocking
    }

    pub fn node_names(&self) -> BTreeSet<String> {
        self.nodes.keys().cloned().collect()
    }
}

fn finished(pod: &Pod) -> bool {
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    matches!(phase, Some("Succeeded" | "Failed"))
}

/// The watches of the selectors.
#[derive(Debug, Clone)]
pub struct BlockingPods {
    scope: Scope,
    stores: Vec<(String, Store<Pod>, Listing)>,
}

impl BlockingPods {
    /// One watch per selector; each wakes the rounds (`changed`) when its pods change.
    pub fn spawn(
        client: &Client,
        selectors: &[String],
        scope: Scope,
        changed: &Arc<Notify>,
        metrics: &Metrics,
    ) -> Self {
        let stores = selectors
            .iter()
            .map(|selector| {
                let (store, writer) = reflector::store();
                let listing = Listing::default();
                let config = watcher::Config::default().labels(selector);
                let stream = retry_with_backoff(
                    watcher(Api::<Pod>::all(client.clone()), config).boxed(),
                    MAX_DELAY,
                )
                .reflect(writer);
                let what = format!("blocking pod watch (--blocking-pod-selector {selector})");
                follow(
                    stream,
                    what,
                    "pod",
                    listing.clone(),
                    metrics,
                    changed.clone(),
                );
                (selector.clone(), store, listing)
            })
            .collect();
        Self { scope, stores }
    }

    /// A watch of `selector` fed by hand (the model test): its pods are what the writer gets.
    pub fn fed(selector: &str, scope: Scope) -> (Self, reflector::store::Writer<Pod>) {
        let writer = reflector::store::Writer::default();
        let stores = vec![(
            selector.to_owned(),
            writer.as_reader(),
            Listing::listed_already(),
        )];
        (Self { scope, stores }, writer)
    }

    /// The blocking pods, or the selectors whose pods are not listed yet (then nothing is
    /// known, and the pool holds).
    pub fn now(&self) -> Result<Blocking, Vec<String>> {
        let unlisted: Vec<String> = self
            .stores
            .iter()
            .filter(|(_, _, listing)| !listing.is_listed())
            .map(|(selector, _, _)| selector.clone())
            .collect();
        if !unlisted.is_empty() {
            return Err(unlisted);
        }
        let pods: Vec<Arc<Pod>> = self.stores.iter().flat_map(|(_, s, _)| s.state()).collect();
        Ok(Blocking::of(pods.iter().map(AsRef::as_ref), self.scope))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(name: &str, node: Option<&str>, phase: &str) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "backup"},
            "spec": {"nodeName": node, "containers": []},
            "status": {"phase": phase},
        }))
        .unwrap()
    }

    #[test]
    fn unfinished_pods_block_their_node_or_with_the_cluster_scope_every_node() {
        let pods = [
            pod("job-a", Some("n1"), "Running"),
            pod("job-b", Some("n1"), "Pending"),
            pod("done", Some("n2"), "Succeeded"),
            pod("crashed", Some("n3"), "Failed"),
            pod("unscheduled", None, "Pending"),
        ];
        let node = Blocking::of(&pods, Scope::Node);
        assert_eq!(node.node_names(), BTreeSet::from(["n1".to_owned()]));
        assert_eq!(node.nodes["n1"], ["backup/job-a", "backup/job-b"]);
        assert!(node.anywhere.is_empty());
        let cluster = Blocking::of(&pods, Scope::Cluster);
        assert!(cluster.nodes.is_empty());
        assert_eq!(
            cluster.anywhere,
            ["backup/job-a", "backup/job-b", "backup/unscheduled"]
        );
    }
}
