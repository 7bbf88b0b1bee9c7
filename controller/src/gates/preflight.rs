//! Pre-flight checks before a node is granted (and so cordoned): would its reboot stall once
//! it is? A node without a running and Ready agent pod (`--agent-selector`) would never take
//! `reboot-now`; a node with a pod that a PodDisruptionBudget allowing no disruption covers
//! (`--check-disruption-budgets`) could not be drained. Such a node waits, uncordoned, with an
//! Event that says why, and the slot goes to the next eligible node.
//!
//! Advice, not a safety invariant: the facts come from watches, and a node granted on an older
//! reading goes on (its drain waits, as any drain does).

use crate::metrics::Metrics;
use common::eviction::{Disposition, disposition};
use controller_core::decide::{NodeView, Preflight};
use futures::StreamExt as _;
use k8s_openapi::api::{core::v1::Pod, policy::v1::PodDisruptionBudget};
use kube::{
    Api, Client, ResourceExt as _,
    api::ListParams,
    core::Selector,
    runtime::{WatchStreamExt as _, reflector, reflector::Store, watcher},
};
use observability::ApiErrorKind;
use std::{
    collections::{BTreeMap, BTreeSet},
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};
use tokio::sync::Notify;

/// The pods of a budget that allows no disruption are read again at least this often: a pod
/// may move to another node without the budget's status changing.
const COVERED_REFRESH: Duration = Duration::from_secs(30);

/// The agent pods, by a label selector, kept by one watch (one pod per node: small).
#[derive(Debug, Clone)]
pub struct AgentPods {
    store: Store<Pod>,
    listed: Arc<AtomicBool>,
}

impl AgentPods {
    pub fn spawn(
        client: &Client,
        selector: &str,
        changed: &Arc<Notify>,
        metrics: &Metrics,
    ) -> Self {
        let (store, writer) = reflector::store();
        let listed = Arc::new(AtomicBool::new(false));
        let config = watcher::Config::default().labels(selector);
        let stream = watcher(Api::<Pod>::all(client.clone()), config)
            .default_backoff()
            .modify(trim_pod)
            .reflect(writer);
        let what = format!("agent pod watch (--agent-selector {selector})");
        follow(
            stream,
            what,
            "pod",
            listed.clone(),
            metrics,
            changed.clone(),
        );
        Self { store, listed }
    }

    /// The nodes with a running agent (and whether it is Ready), or `None` before the first
    /// list.
    fn nodes(&self) -> Option<BTreeMap<String, bool>> {
        if !self.listed.load(Ordering::Acquire) {
            return None;
        }
        let pods = self.store.state();
        Some(agent_nodes(pods.iter().map(AsRef::as_ref)))
    }
}

/// Drives a reflector's stream: `listed` once its first list is in, errors counted and logged
/// (the watch retries), and `changed` woken at every event.
pub fn follow<K, S>(
    stream: S,
    what: String,
    resource: &'static str,
    listed: Arc<AtomicBool>,
    metrics: &Metrics,
    changed: Arc<Notify>,
) where
    K: Send + 'static,
    S: futures::Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static,
{
    let metrics = metrics.clone();
    tokio::spawn(async move {
        futures::pin_mut!(stream);
        while let Some(event) = stream.next().await {
            match event {
                Ok(watcher::Event::InitDone) => listed.store(true, Ordering::Release),
                Ok(_) => {}
                Err(error) => {
                    metrics.api_error(resource, ApiErrorKind::of_watcher(&error));
                    tracing::warn!(%error, "{what} failed; retrying");
                }
            }
            changed.notify_one();
        }
    });
}

/// Only what the check reads: a DaemonSet pod's spec is large, and there is one per node.
fn trim_pod(pod: &mut Pod) {
    pod.metadata.managed_fields = None;
    pod.metadata.annotations = None;
    if let Some(spec) = pod.spec.as_mut() {
        spec.containers.clear();
        spec.init_containers = None;
        spec.volumes = None;
        spec.affinity = None;
        spec.tolerations = None;
    }
    if let Some(status) = pod.status.as_mut() {
        status.container_statuses = None;
        status.init_container_statuses = None;
    }
}

/// By node, whether its agent pod that is Running and not being deleted is also Ready. The
/// Ready condition is what the kubelet last reported: on a node that is not Ready the node
/// lifecycle controller marks every pod not Ready, so there a Running pod is enough (a NotReady
/// node may still be rebooted by its agent; see [`held`]).
pub fn agent_nodes<'a>(pods: impl IntoIterator<Item = &'a Pod>) -> BTreeMap<String, bool> {
    let mut nodes = BTreeMap::new();
    for pod in pods
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
    {
        if let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.clone())
            && running(pod)
        {
            *nodes.entry(node).or_insert(false) |= ready(pod);
        }
    }
    nodes
}

fn running(pod: &Pod) -> bool {
    pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
}

fn ready(pod: &Pod) -> bool {
    let conditions = pod.status.as_ref().and_then(|s| s.conditions.as_ref());
    conditions.is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// What one PodDisruptionBudget that allows no disruption covers: the nodes of the pods the
/// drain would evict, as read at the budget's version.
#[derive(Debug, Clone)]
struct Covered {
    version: Option<String>,
    nodes: BTreeSet<String>,
    read_at: tokio::time::Instant,
}

/// The PodDisruptionBudgets (one watch: they are few), and for each that allows no disruption
/// the nodes of its pods, read by a task of their own so that rounds make no request.
#[derive(Debug, Clone)]
pub struct DisruptionBudgets {
    store: Store<PodDisruptionBudget>,
    listed: Arc<AtomicBool>,
    covered: Arc<Mutex<BTreeMap<String, Covered>>>,
}

impl DisruptionBudgets {
    /// `drain_selector`: `--drain-pod-selector`, the pods a drain evicts.
    pub fn spawn(
        client: &Client,
        drain_selector: Option<&str>,
        changed: &Arc<Notify>,
        metrics: &Metrics,
    ) -> Self {
        let (store, writer) = reflector::store();
        let listed = Arc::new(AtomicBool::new(false));
        let covered = Arc::new(Mutex::new(BTreeMap::new()));
        let budgets = Self {
            store,
            listed,
            covered,
        };
        let stream = watcher(
            Api::<PodDisruptionBudget>::all(client.clone()),
            watcher::Config::default(),
        )
        .default_backoff()
        .modify(|pdb: &mut PodDisruptionBudget| pdb.metadata.managed_fields = None)
        .reflect(writer);
        let wake = Arc::new(Notify::new());
        let what = "PodDisruptionBudget watch".to_owned();
        let resource = "poddisruptionbudget";
        follow(
            stream,
            what,
            resource,
            budgets.listed.clone(),
            metrics,
            wake.clone(),
        );
        let reader = budgets.clone();
        let (client, changed, metrics) = (client.clone(), changed.clone(), metrics.clone());
        let drain_selector = drain_selector.map(str::to_owned);
        tokio::spawn(async move {
            loop {
                reader
                    .read_covered(&client, drain_selector.as_deref(), &metrics)
                    .await;
                changed.notify_one();
                let _ = tokio::time::timeout(COVERED_REFRESH, wake.notified()).await;
            }
        });
        budgets
    }

    /// Reads the pods of each budget that allows no disruption and was not read at its
    /// current version (or not lately); forgets the others.
    async fn read_covered(&self, client: &Client, drain_selector: Option<&str>, metrics: &Metrics) {
        let zero: Vec<Arc<PodDisruptionBudget>> = self
            .store
            .state()
            .into_iter()
            .filter(|pdb| allows_none(pdb))
            .collect();
        let keys: BTreeSet<String> = zero.iter().map(|p| key(p)).collect();
        self.lock().retain(|k, _| keys.contains(k));
        for pdb in zero {
            let (k, version) = (key(&pdb), pdb.resource_version());
            let current = self
                .lock()
                .get(&k)
                .is_some_and(|c| c.version == version && c.read_at.elapsed() < COVERED_REFRESH);
            if current {
                continue;
            }
            match pods_of(client, &pdb, drain_selector).await {
                Ok(nodes) => {
                    let read_at = tokio::time::Instant::now();
                    self.lock().insert(
                        k,
                        Covered {
                            version,
                            nodes,
                            read_at,
                        },
                    );
                }
                Err(error) => {
                    metrics.api_error("pod", ApiErrorKind::of(&error));
                    tracing::warn!(budget = %k, %error,
                        "cannot list the pods of a PodDisruptionBudget; retrying");
                }
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Covered>> {
        self.covered
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// By node, the budgets that allow no disruption and cover one of its pods; `None` while
    /// the budgets, or the pods of one of them, are not read yet.
    fn blocking(&self) -> Option<BTreeMap<String, Vec<String>>> {
        if !self.listed.load(Ordering::Acquire) {
            return None;
        }
        let covered = self.lock();
        let mut by_node: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for pdb in self.store.state().iter().filter(|p| allows_none(p)) {
            let k = key(pdb);
            for node in &covered.get(&k)?.nodes {
                by_node.entry(node.clone()).or_default().push(k.clone());
            }
        }
        Some(by_node)
    }
}

fn key(pdb: &PodDisruptionBudget) -> String {
    format!("{}/{}", pdb.namespace().unwrap_or_default(), pdb.name_any())
}

/// The budget's status says no pod it covers may be evicted now.
pub fn allows_none(pdb: &PodDisruptionBudget) -> bool {
    pdb.status
        .as_ref()
        .is_some_and(|s| s.disruptions_allowed == Some(0))
}

/// The nodes of the budget's pods that the drain would evict (not DaemonSet or mirror pods,
/// not finished, not already being deleted). A budget without a selector covers no pod.
async fn pods_of(
    client: &Client,
    pdb: &PodDisruptionBudget,
    drain_selector: Option<&str>,
) -> Result<BTreeSet<String>, kube::Error> {
    let Some(selector) = pdb.spec.as_ref().and_then(|s| s.selector.clone()) else {
        return Ok(BTreeSet::new());
    };
    let selector = match Selector::try_from(selector) {
        Ok(selector) => selector.to_string(),
        // The API server validated it; a selector kube cannot read covers nothing we know of.
        Err(_) => return Ok(BTreeSet::new()),
    };
    let labels = [Some(selector.as_str()), drain_selector]
        .into_iter()
        .flatten()
        .filter(|s| !s.is_empty())
        .collect::<Vec<_>>()
        .join(",");
    let api: Api<Pod> = Api::namespaced(client.clone(), &pdb.namespace().unwrap_or_default());
    let pods = api.list(&ListParams::default().labels(&labels)).await?;
    Ok(evicted_nodes(&pods.items))
}

/// The nodes of the pods a drain would evict.
pub fn evicted_nodes(pods: &[Pod]) -> BTreeSet<String> {
    pods.iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter(|p| matches!(disposition(p), Disposition::Evict { .. }))
        .filter_map(|p| p.spec.as_ref()?.node_name.clone())
        .collect()
}

/// The checks this controller makes (none of them with their flags off).
#[derive(Debug, Clone, Default)]
pub struct PreflightChecks {
    pub agents: Option<AgentPods>,
    pub budgets: Option<DisruptionBudgets>,
    /// `--agent-selector`, for the Events.
    pub agent_selector: String,
}

/// What the checks say in one round.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PreflightReading {
    /// The requested nodes held, with the check that holds each.
    pub held: BTreeMap<String, Preflight>,
    /// By node, the budgets that allow no disruption and cover one of its pods.
    pub budgets: BTreeMap<String, Vec<String>>,
    agent_selector: String,
}

impl PreflightChecks {
    /// The checks of the requested nodes of `views` without a grant.
    pub fn read(&self, views: &[NodeView], metrics: &Metrics) -> PreflightReading {
        let agents = self.agents.as_ref().map(AgentPods::nodes);
        let budgets = self.budgets.as_ref().map(DisruptionBudgets::blocking);
        let held = held(
            views,
            agents.as_ref().map(Option::as_ref),
            budgets.as_ref().map(Option::as_ref),
        );
        for (check, name) in [
            (Preflight::NoAgent, "no_agent"),
            (Preflight::DisruptionBudget, "disruption_budget"),
        ] {
            let count = held.values().filter(|c| **c == check).count();
            metrics.preflight_held(name, count);
        }
        PreflightReading {
            held,
            budgets: budgets.flatten().unwrap_or_default(),
            agent_selector: self.agent_selector.clone(),
        }
    }
}

/// Which requested nodes without a grant a check holds. `agents`: the check is on
/// (`Some`), and the nodes with an agent are known (`Some(Some)`); the same for `budgets`.
pub fn held(
    views: &[NodeView],
    agents: Option<Option<&BTreeMap<String, bool>>>,
    budgets: Option<Option<&BTreeMap<String, Vec<String>>>>,
) -> BTreeMap<String, Preflight> {
    views
        .iter()
        .filter(|v| v.state.request == common::Request::Needed && v.state.grant.is_none())
        .filter_map(|v| {
            let name = v.name();
            let agent = match agents {
                None => None,
                Some(None) => Some(Preflight::Checking),
                // A NotReady node's pods are all marked not Ready: a Running one will do.
                Some(Some(nodes)) => match nodes.get(name) {
                    Some(true) => None,
                    Some(false) if v.facts.readiness != common::Readiness::Ready => None,
                    _ => Some(Preflight::NoAgent),
                },
            };
            let budget = match budgets {
                None => None,
                Some(None) => Some(Preflight::Checking),
                Some(Some(by_node)) => by_node
                    .contains_key(name)
                    .then_some(Preflight::DisruptionBudget),
            };
            Some((name.to_owned(), agent.or(budget)?))
        })
        .collect()
}

impl PreflightReading {
    /// The Event of a node a check holds; none while a check cannot tell yet.
    pub fn event(&self, node: &str) -> Option<(crate::cluster::events::Reason, String)> {
        use crate::cluster::events::Reason;
        match self.held.get(node)? {
            Preflight::Checking => None,
            Preflight::NoAgent => Some((
                Reason::NoAgent,
                format!(
                    "reboot requested; not cordoned: no agent pod ({}) is running and Ready on \
                     the node, so nothing would take reboot-now; another node may go first (is \
                     the reboot-agent DaemonSet scheduled here?)",
                    self.agent_selector
                ),
            )),
            Preflight::DisruptionBudget => {
                let names = self.budgets.get(node).map(|b| b.join(", "));
                Some((
                    Reason::DisruptionBudget,
                    format!(
                        "reboot requested; not cordoned: the PodDisruptionBudget {} allows no \
                         disruption and covers a pod of the node, so its drain could not \
                         finish; another node may go first, and this one goes once the budget \
                         allows a disruption",
                        names.unwrap_or_default()
                    ),
                ))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(name: &str, node: &str, phase: &str, ready: bool) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "ops"},
            "spec": {"nodeName": node, "containers": []},
            "status": {"phase": phase, "conditions": [
                {"type": "Ready", "status": if ready { "True" } else { "False" }}]},
        }))
        .unwrap()
    }

    #[test]
    fn only_a_running_ready_agent_counts_and_a_running_one_on_a_not_ready_node() {
        let pods = [
            pod("a", "n1", "Running", true),
            pod("b", "n2", "Running", false),
            pod("c", "n3", "Pending", false),
        ];
        let nodes = agent_nodes(&pods);
        assert_eq!(
            nodes,
            BTreeMap::from([("n1".to_owned(), true), ("n2".to_owned(), false)])
        );
    }

    #[test]
    fn daemonset_mirror_finished_and_terminating_pods_do_not_count_for_a_budget() {
        let mut ds = pod("ds", "n1", "Running", true);
        ds.metadata.owner_references = Some(vec![
            serde_json::from_value(json!({
            "apiVersion": "apps/v1", "kind": "DaemonSet", "name": "x", "uid": "u",
            "controller": true}))
            .unwrap(),
        ]);
        let done = pod("done", "n2", "Succeeded", false);
        let mut going = pod("going", "n3", "Running", true);
        going.metadata.deletion_timestamp =
            serde_json::from_value(json!("2026-01-01T00:00:00Z")).unwrap();
        let db = pod("db", "n4", "Running", true);
        assert_eq!(
            evicted_nodes(&[ds, done, going, db]),
            BTreeSet::from(["n4".to_owned()])
        );
    }
}
