//! The I/O of `status`: reads what the operator already writes (the nodes, the ledger Lease,
//! the Events about nodes, the pods on draining nodes, the controller's metrics) into the
//! plain data that [`crate::status`] classifies. Only get and list: a read-only user can.

use crate::{
    cli::{Global, StatusArgs},
    error::Error,
    input::{BudgetInput, LedgerInput, NodeEvent, NodeInput, PoolInput},
    metrics,
};
use common::{AnnotationKeys, NodeFacts, Phase, Request, events::CONTROLLER};
use k8s_openapi::{
    api::{
        coordination::v1::Lease,
        core::v1::{Event, Node, Pod},
    },
    jiff::Timestamp,
};
use kube::{Api, Client, ResourceExt, api::ListParams};
use std::{collections::BTreeMap, time::Duration};

/// The namespace where the Events about Nodes (cluster-scoped) are written.
const NODE_EVENTS_NAMESPACE: &str = "default";
const NEEDS: &str = "get, list on nodes, pods and events, and get on the ledger Lease";

/// Reads the pool as `status` shows it.
pub async fn pool(client: &Client, global: &Global, args: &StatusArgs) -> Result<PoolInput, Error> {
    let keys = &global.annotation_prefix;
    let nodes_api: Api<Node> = Api::all(client.clone());
    let mut params = ListParams::default();
    if !args.node_selector.trim().is_empty() {
        params = params.labels(args.node_selector.trim());
    }
    let metrics_url = args.metrics_url.as_deref().map(metrics::metrics_url);
    let metrics_read = async {
        match &metrics_url {
            Some(url) => Some(metrics::fetch(url, Duration::from_secs(5)).await),
            None => None,
        }
    };
    let (listed, events, metrics_read) = tokio::join!(
        nodes_and_ledger(client, global, &params),
        node_events(client),
        metrics_read,
    );
    let (listed, ledger) = listed?;
    let mut warnings = Vec::new();
    let mut events = events.unwrap_or_else(|why| {
        warnings.push(why);
        BTreeMap::new()
    });
    let mut nodes: Vec<(Node, bool)> = listed.into_iter().map(|n| (n, true)).collect();
    // A node that left the pool while it holds a slot still counts: show it.
    for holder in ledger.slots.keys() {
        if nodes.iter().any(|(n, _)| n.name_any() == *holder) {
            continue;
        }
        match nodes_api.get_opt(holder).await {
            Ok(Some(node)) => nodes.push((node, false)),
            Ok(None) => {}
            Err(e) => warnings.push(format!(
                "cannot read node {holder}, which holds a slot: {e}"
            )),
        }
    }
    let mut inputs = Vec::with_capacity(nodes.len());
    for (node, in_pool) in nodes {
        let facts = NodeFacts::from_node(&node);
        let pods_left = if draining(&facts, keys) {
            match pods_left(client, &facts.name, args.drain_pod_selector.as_deref()).await {
                Ok(pods) => Some(pods),
                Err(why) => {
                    warnings.push(why);
                    None
                }
            }
        } else {
            None
        };
        inputs.push(NodeInput {
            events: events.remove(&facts.name).unwrap_or_default(),
            labels: node.metadata.labels.clone().unwrap_or_default(),
            in_pool,
            pods_left,
            facts,
        });
    }
    let (reading, metrics_error) = match metrics_read {
        None => (None, None),
        Some(Ok(reading)) => (Some(reading), None),
        Some(Err(error)) => (None, Some(error.to_string())),
    };
    Ok(PoolInput {
        selector: args.node_selector.trim().to_owned(),
        nodes: inputs,
        ledger,
        budget: BudgetInput {
            metrics: reading,
            metrics_url,
            metrics_error,
            flag: args.max_unavailable,
        },
        warnings,
        windows: controller_core::window::Windows(args.reboot_windows.clone()),
    })
}

fn draining(facts: &NodeFacts, keys: &AnnotationKeys) -> bool {
    let state = facts.protocol(keys);
    state.phase == Phase::Idle && state.grant.is_some() && state.request == Request::Needed
}

/// The nodes and the ledger as they were at one moment: the ledger read before and after the
/// list of nodes must be the same version (else a grant or a release between the two reads
/// would show a node twice or not at all). A busy pool gets a few tries, then the last read.
async fn nodes_and_ledger(
    client: &Client,
    global: &Global,
    params: &ListParams,
) -> Result<(Vec<Node>, LedgerInput), Error> {
    const TRIES: usize = 5;
    let nodes: Api<Node> = Api::all(client.clone());
    let mut before = ledger(client, global).await?;
    let mut tries = 1;
    loop {
        let listed =
            nodes
                .list(params)
                .await
                .map_err(Error::api("cannot list nodes", "status", NEEDS))?;
        let after = ledger(client, global).await?;
        if after.version == before.version || tries == TRIES {
            return Ok((listed.items, after));
        }
        before = after;
        tries += 1;
    }
}

/// The ledger Lease: its slots and the pause. Absent is not an error here (status says so).
async fn ledger(client: &Client, global: &Global) -> Result<LedgerInput, Error> {
    let name = format!("{}/{}", global.namespace, global.ledger_name);
    let lease = Api::<Lease>::namespaced(client.clone(), &global.namespace)
        .get_opt(&global.ledger_name)
        .await
        .map_err(Error::api(
            format!("cannot read the ledger Lease {name}"),
            "status",
            NEEDS,
        ))?;
    let Some(lease) = lease else {
        return Ok(LedgerInput {
            name,
            ..LedgerInput::default()
        });
    };
    Ok(ledger_of(name, &lease))
}

/// What the ledger Lease says: its slots (none, with the reason, when they cannot be read)
/// and the pause.
fn ledger_of(name: String, lease: &Lease) -> LedgerInput {
    let annotations = lease.metadata.annotations.as_ref();
    let format = annotations.and_then(|a| a.get(common::ledger::FORMAT_ANNOTATION));
    let (slots, damage) = match common::format::check(format.map(String::as_str)) {
        // A newer operator's ledger is not read as this version's: its slots may mean
        // something else.
        Err(unknown) => (
            BTreeMap::new(),
            Some(format!("{unknown}; upgrade kubectl-reboot to read it")),
        ),
        Ok(_) => match common::ledger::slots_of(annotations) {
            Ok(slots) => (slots, None),
            Err(error) => (BTreeMap::new(), Some(error.to_string())),
        },
    };
    LedgerInput {
        name,
        version: lease.metadata.resource_version.clone(),
        found: true,
        slots,
        paused: common::ledger::is_paused(annotations),
        damage,
    }
}

/// The controller's Events about nodes, by node.
async fn node_events(client: &Client) -> Result<BTreeMap<String, Vec<NodeEvent>>, String> {
    let params = ListParams::default().fields("involvedObject.kind=Node");
    let events = Api::<Event>::namespaced(client.clone(), NODE_EVENTS_NAMESPACE)
        .list(&params)
        .await
        .map_err(|e| {
            format!(
                "cannot list the Events about nodes (namespace {NODE_EVENTS_NAMESPACE}), so the \
                 reasons for waiting are missing: {e}"
            )
        })?;
    let mut by_node: BTreeMap<String, Vec<NodeEvent>> = BTreeMap::new();
    for event in events.items {
        if let Some((node, event)) = node_event(event) {
            by_node.entry(node).or_default().push(event);
        }
    }
    Ok(by_node)
}

/// One of the controller's Events about a node: the node's name and the Event. Only the
/// controller's are read: the agents may create and patch Events in the same namespace (RBAC
/// cannot tell their Events from the controller's), so what an agent says never becomes
/// what the status shows.
pub fn node_event(event: Event) -> Option<(String, NodeEvent)> {
    let component = event.reporting_component.clone().unwrap_or_default();
    if component != CONTROLLER {
        return None;
    }
    let time = event_time(&event)?;
    Some((
        event.involved_object.name.clone()?,
        NodeEvent {
            reason: event.reason.unwrap_or_default(),
            component,
            message: event.message.unwrap_or_default(),
            time,
        },
    ))
}

/// When an Event was last observed: a repeated Event is one object whose series says when
/// it was seen last.
fn event_time(event: &Event) -> Option<Timestamp> {
    event
        .series
        .as_ref()
        .and_then(|s| s.last_observed_time.as_ref())
        .map(|t| t.0)
        .or_else(|| event.event_time.as_ref().map(|t| t.0))
        .or_else(|| event.last_timestamp.as_ref().map(|t| t.0))
        .or_else(|| event.first_timestamp.as_ref().map(|t| t.0))
        .or_else(|| event.metadata.creation_timestamp.as_ref().map(|t| t.0))
}

/// The pods a drain of `node` still has to evict.
async fn pods_left(
    client: &Client,
    node: &str,
    selector: Option<&str>,
) -> Result<Vec<String>, String> {
    let mut params = ListParams::default().fields(&format!("spec.nodeName={node}"));
    if let Some(selector) = selector.filter(|s| !s.trim().is_empty()) {
        params = params.labels(selector);
    }
    let pods = Api::<Pod>::all(client.clone())
        .list(&params)
        .await
        .map_err(|e| format!("cannot list the pods on {node}: {e}"))?;
    let mut left: Vec<String> = pods
        .items
        .iter()
        .filter(|p| left_to_evict(p))
        .map(|p| format!("{}/{}", p.namespace().unwrap_or_default(), p.name_any()))
        .collect();
    left.sort();
    Ok(left)
}

/// Whether a drain still has to evict this pod: the controller's rule, from `common`
/// (a pod being deleted is still there).
pub fn left_to_evict(pod: &Pod) -> bool {
    matches!(
        common::eviction::disposition(pod),
        common::eviction::Disposition::Evict { .. }
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(value: serde_json::Value) -> Pod {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn a_ledger_of_a_newer_format_is_read_as_damaged_not_misread() {
        let lease = |format: &str| -> Lease {
            serde_json::from_value(json!({"metadata": {"name": "slots", "annotations": {
                common::ledger::FORMAT_ANNOTATION: format,
                common::ledger::SLOTS_ANNOTATION: "{}",
            }}}))
            .unwrap()
        };
        let today = ledger_of("ns/slots".into(), &lease("1"));
        assert_eq!(today.damage, None);
        let newer = ledger_of("ns/slots".into(), &lease("2"));
        let damage = newer.damage.expect("a newer format is not read");
        assert!(
            damage.contains("\"2\"") && damage.contains("upgrade"),
            "{damage}"
        );
        assert!(newer.slots.is_empty());
    }

    #[test]
    fn a_drain_leaves_daemon_set_mirror_and_finished_pods() {
        let ds = json!({"metadata": {"name": "a", "ownerReferences": [{"apiVersion": "apps/v1",
            "kind": "DaemonSet", "name": "ds", "uid": "u", "controller": true}]}});
        let mirror = json!({"metadata": {"name": "b",
            "annotations": {"kubernetes.io/config.mirror": "x"}}});
        let done = json!({"metadata": {"name": "c"}, "status": {"phase": "Succeeded"}});
        let web = json!({"metadata": {"name": "d", "ownerReferences": [{"apiVersion": "apps/v1",
            "kind": "ReplicaSet", "name": "rs", "uid": "u", "controller": true}]},
            "status": {"phase": "Running"}});
        let bare = json!({"metadata": {"name": "e"}, "status": {"phase": "Pending"}});
        assert!(!left_to_evict(&pod(ds)));
        assert!(!left_to_evict(&pod(mirror)));
        assert!(!left_to_evict(&pod(done)));
        assert!(left_to_evict(&pod(web)));
        assert!(left_to_evict(&pod(bare)));
    }

    #[test]
    fn only_the_controllers_events_count_at_their_last_observation() {
        let event: Event = serde_json::from_value(json!({
            "metadata": {"name": "sim-1.1", "namespace": "default"},
            "involvedObject": {"kind": "Node", "name": "sim-1"},
            "reason": "Paused", "message": "reboot requested; the pool is paused",
            "reportingComponent": "reboot-controller",
            "eventTime": "2026-01-01T10:00:00.000000Z",
            "series": {"count": 2, "lastObservedTime": "2026-01-01T10:03:00.000000Z"},
        }))
        .unwrap();
        let (node, e) = node_event(event.clone()).unwrap();
        assert_eq!(node, "sim-1");
        assert_eq!(e.reason, "Paused");
        assert_eq!(e.time.to_string(), "2026-01-01T10:03:00Z");
        // Only the controller's: the agents may write Events in that namespace too.
        for other in ["kubelet", common::events::AGENT] {
            let mut theirs = event.clone();
            theirs.reporting_component = Some(other.into());
            assert!(node_event(theirs).is_none(), "{other}");
        }
    }
}
