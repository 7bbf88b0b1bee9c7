//! Draining a node before its reboot, with `kubectl drain` semantics: every pod on the node is
//! evicted through the Eviction API (policy/v1), so PodDisruptionBudgets hold; DaemonSet pods
//! and mirror pods stay; the drain waits until the evicted pods are gone, and gives up after
//! `--drain-timeout`, naming the pods that blocked it.

use crate::{
    api_error::ApiErrorKind,
    events::{Events, Reason},
    leader::Leadership,
    metrics::Metrics,
};
use backon::{BackoffBuilder, ExponentialBackoff, ExponentialBuilder};
use common::AnnotationKeys;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::{
    Api, Client, Resource, ResourceExt,
    api::{DeleteParams, EvictParams, ListParams},
};
use std::{
    collections::{BTreeMap, HashSet},
    time::{Duration, Instant},
};

/// The drain flags.
#[derive(Debug, Clone)]
pub struct DrainSettings {
    pub timeout: Duration,
    /// Overrides each pod's own termination grace period.
    pub grace_period: Option<Duration>,
    /// Only pods matching this label selector are evicted.
    pub pod_selector: Option<String>,
}

/// How a drain ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DrainOutcome {
    /// No pod to evict is left, for the node at this version: it held the grant then, and
    /// every pod bound to it up to that version is gone. The drain stands only while the node
    /// stays at it (an uncordon lets pods back).
    Drained {
        evicted: usize,
        node_version: Option<String>,
    },
    /// Timed out; each blocking pod (`namespace/name`) with the reason it is still there.
    TimedOut { blocking: BTreeMap<String, String> },
    /// The node no longer holds the grant this drain was for (cancelled, or released by
    /// another controller): nothing more is evicted for it.
    Superseded,
}

pub use common::eviction::{Disposition, disposition};

fn pod_key(pod: &Pod) -> String {
    format!("{}/{}", pod.namespace().unwrap_or_default(), pod.name_any())
}

/// Drains one node per call; many calls run at once, one per slot.
#[derive(Clone)]
pub struct Drainer {
    client: Client,
    keys: AnnotationKeys,
    settings: DrainSettings,
    events: Events,
    metrics: Metrics,
    /// No eviction once this replica no longer leads (the task is aborted soon after).
    leadership: Leadership,
}

/// Between two passes over the node's pods.
const PASS_INTERVAL: Duration = Duration::from_millis(200);
/// A `Draining` Event names the pods to evict up to about this many bytes.
const NAMES_IN_EVENT: usize = 600;
/// Between two evictions of a pod that a PodDisruptionBudget protects (429): short at first,
/// since the budget frees up as soon as a replacement is Ready, then doubling up to 5 s (as
/// `kubectl drain` waits) so that a stuck budget is not hammered.
fn refused_eviction_backoff() -> ExponentialBackoff {
    ExponentialBuilder::new()
        .with_min_delay(Duration::from_millis(200))
        .with_max_delay(Duration::from_secs(5))
        .without_max_times()
        .build()
}

impl std::fmt::Debug for Drainer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Drainer")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl Drainer {
    pub fn new(
        client: Client,
        keys: AnnotationKeys,
        settings: DrainSettings,
        events: Events,
        metrics: Metrics,
        leadership: Leadership,
    ) -> Self {
        Self {
            client,
            keys,
            settings,
            events,
            metrics,
            leadership,
        }
    }

    async fn pods_on(&self, node: &str) -> Result<Vec<Pod>, kube::Error> {
        let mut params = ListParams::default().fields(&format!("spec.nodeName={node}"));
        if let Some(selector) = &self.settings.pod_selector {
            params = params.labels(selector);
        }
        Ok(Api::<Pod>::all(self.client.clone())
            .list(&params)
            .await?
            .items)
    }

    /// The pods a drain of `node` would evict now (`--dry-run`), as `namespace/name`.
    pub async fn would_evict(&self, node: &str) -> Result<Vec<String>, kube::Error> {
        let pods = self.pods_on(node).await?;
        Ok(pods
            .iter()
            .filter(|pod| matches!(disposition(pod), Disposition::Evict { .. }))
            .map(pod_key)
            .collect())
    }

    fn evict_params(&self) -> EvictParams {
        // Whole seconds, rounded up: a grace period never shrinks below what was asked.
        let grace = self.settings.grace_period.map(|g| {
            u32::try_from(g.as_secs() + u64::from(g.subsec_nanos() > 0)).unwrap_or(u32::MAX)
        });
        EvictParams {
            delete_options: grace.map(|g| DeleteParams {
                grace_period_seconds: Some(g),
                ..DeleteParams::default()
            }),
            ..EvictParams::default()
        }
    }

    /// The node's version, read now, if it still carries `grant`: evictions are for that
    /// grant only.
    async fn still_holds(&self, node: &str, grant: &str) -> Result<Option<String>, kube::Error> {
        let current = Api::<Node>::all(self.client.clone()).get(node).await?;
        let holds = current
            .annotations()
            .get(&self.keys.grant)
            .map(String::as_str)
            == Some(grant);
        Ok(holds.then(|| current.metadata.resource_version.unwrap_or_default()))
    }

    /// Evicts until no pod to evict is left on the node, or the timeout passes, or the node no
    /// longer holds `grant`.
    ///
    /// `node` is the copy the round that started the drain decided on: it carried `grant` and
    /// was cordoned. A drain whose first list of the pods has nothing to evict is Drained at
    /// that copy's version, without reading the node again, because:
    /// - the list is a consistent read made after that version was written, so every pod
    ///   bound to the node up to that version, still there, is in it: none is;
    /// - the drain stands only while the node stays at that version (`drain_state_at`): the
    ///   node then still carries `grant` and is cordoned, and `reboot-now` is set by a patch
    ///   that `test`s exactly that version, that grant and the cordon. A node that changed
    ///   meanwhile (uncordoned, so pods may be back; its grant released, or another one
    ///   claimed) is newer: NotStarted, drained again under the grant it holds then, or not
    ///   promoted at all. A pod bound after that version, to the cordoned node, is the race
    ///   `kubectl drain` has too (a scheduler deciding before it saw the cordon): a read of
    ///   the node after the list would not see it either.
    ///
    /// With pods to evict, the node is read before each batch of evictions (an eviction
    /// cannot `test` the node): none is made unless it still carries `grant`. Grant ids are
    /// never reused, so a grant released and another one claimed in between fails that read.
    /// The version read then stands for the drain in place of a read at its end: evictions do
    /// not change the Node, and every later list is a consistent read made after that read,
    /// so an empty one means no pod bound up to that version is left.
    pub async fn drain(&self, node: &Node, grant: &str) -> DrainOutcome {
        let name = node.name_any();
        let mut vouched = node.metadata.resource_version.clone();
        let deadline = Instant::now() + self.settings.timeout;
        let mut blocking: BTreeMap<String, String> = BTreeMap::new();
        let mut evicted: HashSet<String> = HashSet::new();
        let mut warned_unmanaged: HashSet<String> = HashSet::new();
        let mut next_try: BTreeMap<String, Instant> = BTreeMap::new();
        let mut refused: BTreeMap<String, ExponentialBackoff> = BTreeMap::new();
        let mut announced = false;
        loop {
            if !self.leadership.is_leading() {
                tokio::time::sleep(PASS_INTERVAL).await;
                continue;
            }
            let pods = match self.pods_on(&name).await {
                Ok(pods) => pods,
                Err(error) => {
                    self.metrics.api_error("pod", ApiErrorKind::of(&error));
                    tracing::warn!(node = %name, %error, "cannot list the node's pods; retrying");
                    blocking.insert("(pod list)".into(), error.to_string());
                    Vec::new()
                }
            };
            let to_evict: Vec<(&Pod, bool)> = pods
                .iter()
                .filter_map(|p| match disposition(p) {
                    Disposition::Evict { unmanaged } => Some((p, unmanaged)),
                    _ => None,
                })
                .collect();
            if to_evict.is_empty() && !blocking.contains_key("(pod list)") {
                return DrainOutcome::Drained {
                    evicted: evicted.len(),
                    node_version: vouched,
                };
            }
            blocking.retain(|k, _| to_evict.iter().any(|(p, _)| &pod_key(p) == k));
            let due = to_evict.iter().any(|(p, _)| {
                p.metadata.deletion_timestamp.is_none()
                    && next_try
                        .get(&pod_key(p))
                        .is_none_or(|t| Instant::now() >= *t)
            });
            // Evictions cannot test the node: read it first, so that a drain whose grant was
            // released (by us or by another controller) evicts nothing more.
            if due {
                match self.still_holds(&name, grant).await {
                    Ok(Some(version)) => vouched = Some(version),
                    Ok(None) => return DrainOutcome::Superseded,
                    Err(error) => {
                        self.metrics.api_error("node", ApiErrorKind::of(&error));
                        tokio::time::sleep(PASS_INTERVAL).await;
                        continue;
                    }
                }
            }
            if !announced && self.leadership.is_leading() {
                announced = true;
                let names: Vec<String> = to_evict.iter().map(|(p, _)| pod_key(p)).collect();
                self.announce(node, &names);
            }
            for (pod, unmanaged) in to_evict {
                if !self.leadership.is_leading() {
                    break;
                }
                let key = pod_key(pod);
                if pod.metadata.deletion_timestamp.is_some() {
                    blocking.insert(key, "evicted; still terminating".into());
                    continue;
                }
                if next_try.get(&key).is_some_and(|t| Instant::now() < *t) {
                    continue;
                }
                if unmanaged && warned_unmanaged.insert(key.clone()) {
                    let note = format!(
                        "evicting pod {key}: it has no controller, so it will not come back"
                    );
                    self.events
                        .publish_related(node, Reason::Draining, note, pod.object_ref(&()));
                }
                match self.evict(pod).await {
                    Ok(()) => {
                        tracing::info!(node = %name, pod = %key, "evicted");
                        evicted.insert(key.clone());
                        blocking.insert(key, "evicted; still terminating".into());
                    }
                    Err(why) => {
                        tracing::info!(node = %name, pod = %key, %why, "eviction refused; will retry");
                        let wait = refused
                            .entry(key.clone())
                            .or_insert_with(refused_eviction_backoff)
                            .next()
                            .unwrap_or(Duration::from_secs(5));
                        next_try.insert(key.clone(), Instant::now() + wait);
                        blocking.insert(key, why);
                    }
                }
            }
            if Instant::now() >= deadline {
                return DrainOutcome::TimedOut { blocking };
            }
            let pause = PASS_INTERVAL.min(deadline.saturating_duration_since(Instant::now()));
            tokio::time::sleep(pause).await;
        }
    }

    /// The `Draining` Event, once the drain knows it has pods to evict, naming them.
    fn announce(&self, node: &Node, names: &[String]) {
        let plural = if names.len() == 1 { "" } else { "s" };
        let note = format!(
            "cordoned; evicting {} pod{plural}: {}",
            names.len(),
            name_list(names, NAMES_IN_EVENT)
        );
        tracing::info!(node = %node.name_any(), pods = names.len(), "{note}");
        self.events.publish(node, Reason::Draining, note);
    }

    /// One eviction; `Err` says why the pod stays for now.
    async fn evict(&self, pod: &Pod) -> Result<(), String> {
        let api: Api<Pod> =
            Api::namespaced(self.client.clone(), &pod.namespace().unwrap_or_default());
        let error = match api.evict(&pod.name_any(), &self.evict_params()).await {
            Ok(_) => return Ok(()),
            Err(error) => error,
        };
        let kind = ApiErrorKind::of(&error);
        if kind == ApiErrorKind::NotFound {
            return Ok(());
        }
        self.metrics.api_error("eviction", kind);
        match (kind, &error) {
            (ApiErrorKind::TooManyRequests, kube::Error::Api(status)) => {
                Err(budget_message(status))
            }
            (_, kube::Error::Api(status)) if status.code == 500 => Err(format!(
                "more than one PodDisruptionBudget selects it, so it cannot be evicted: {}",
                status.message
            )),
            (_, _) => Err(error.to_string()),
        }
    }
}

/// The API server names the PodDisruptionBudget in the causes of a 429.
fn budget_message(status: &kube::core::Status) -> String {
    let causes: Vec<&str> = status
        .details
        .iter()
        .flat_map(|d| d.causes.iter())
        .map(|c| c.message.as_str())
        .filter(|m| !m.is_empty())
        .collect();
    if causes.is_empty() {
        status.message.clone()
    } else {
        format!("{} ({})", status.message, causes.join("; "))
    }
}

/// `a, b, c`, or `a, b and 5 more` once the names pass `limit` bytes.
fn name_list(names: &[String], limit: usize) -> String {
    let mut text = String::new();
    for (i, name) in names.iter().enumerate() {
        if i > 0 && text.len() + name.len() > limit {
            return format!("{text} and {} more", names.len() - i);
        }
        if i > 0 {
            text.push_str(", ");
        }
        text.push_str(name);
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_list_of_pods_is_cut_and_says_how_many_more() {
        let names: Vec<String> = (0..100).map(|i| format!("shop/web-{i:03}")).collect();
        let text = name_list(&names, 60);
        assert!(text.starts_with("shop/web-000, shop/web-001"), "{text}");
        assert!(text.ends_with(" more"), "{text}");
        let shown = text.matches("shop/web-").count();
        assert!(
            text.ends_with(&format!(" and {} more", 100 - shown)),
            "{text}"
        );
        assert!(text.len() <= 60 + " and 100 more".len(), "{text}");
        assert_eq!(name_list(&names[..2], 60), "shop/web-000, shop/web-001");
        // One name is always shown, however long.
        assert_eq!(name_list(&names[..1], 3), "shop/web-000");
    }
}
