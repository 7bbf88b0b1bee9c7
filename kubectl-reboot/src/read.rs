//! The I/O of `status`: reads what the operator already writes (the nodes, the ledger Lease,
//! the Events about nodes, the pods on draining nodes, the controller's metrics) into the
//! plain data that [`crate::status`] classifies. Only get and list: a read-only user can.

use crate::{
    cli::{Global, StatusArgs},
    error::Error,
    input::{BudgetInput, LedgerInput, NodeEvent, NodeInput, PoolInput, Pools},
    metrics,
};
use common::{AnnotationKeys, NodeFacts, Phase, Request, events::CONTROLLER, pool::RebootPool};
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
const NEEDS: &str =
    "get, list on nodes, pods, events and rebootpools, and get on the ledger Leases";

/// Reads every pool as `status` shows it: the flags' pool (`--node-selector`, less the nodes a
/// RebootPool selects) and each RebootPool; or, with `--pool`, that RebootPool only. Without
/// the RebootPool CRD there is only the flags' pool.
pub async fn pools(client: &Client, global: &Global, args: &StatusArgs) -> Result<Pools, Error> {
    let (found, mut warnings) = match (reboot_pools(client).await, &args.pool) {
        (Ok(found), _) => (found, Vec::new()),
        (Err(e), Some(_)) => {
            return Err(Error::api("cannot list the RebootPools", "status", NEEDS)(
                e,
            ));
        }
        (Err(e), None) => (
            Vec::new(),
            vec![format!(
                "cannot list the RebootPools, so the flags' pool may show nodes that a \
                 RebootPool selects (the node-reboot-viewer role lists them): {e}"
            )],
        ),
    };
    let metrics_url = args.metrics_url.as_deref().map(metrics::metrics_url);
    let metrics_read = async {
        match (&metrics_url, &args.pool) {
            (Some(url), None) => Some(metrics::fetch(url, Duration::from_secs(5)).await),
            _ => None,
        }
    };
    let (events, metrics_read) = tokio::join!(node_events(client), metrics_read);
    let events = events.unwrap_or_else(|why| {
        warnings.push(why);
        BTreeMap::new()
    });
    if let Some(name) = &args.pool {
        let unknown = || Error::UnknownPool {
            name: name.clone(),
            known: found
                .iter()
                .filter_map(|p| p.metadata.name.clone())
                .collect(),
        };
        let mut one = reboot_pool_inputs(client, global, args, &found, &events)
            .await?
            .pop()
            .ok_or_else(unknown)?;
        one.warnings.extend(warnings);
        return Ok(Pools::One(one));
    }
    let (reading, metrics_error) = match metrics_read {
        None => (None, None),
        Some(Ok(reading)) => (Some(reading), None),
        Some(Err(error)) => (None, Some(error.to_string())),
    };
    let budget = BudgetInput {
        metrics: reading,
        metrics_url,
        metrics_error,
        flag: args.max_unavailable,
    };
    let (flags, pools) = tokio::join!(
        flags_pool(client, global, args, (&found, &events), budget),
        reboot_pool_inputs(client, global, args, &found, &events),
    );
    let mut flags = flags?;
    flags.warnings.splice(0..0, warnings);
    Ok(Pools::All {
        flags,
        pools: pools?,
    })
}

/// Every RebootPool, by name; none when its CRD is not installed.
async fn reboot_pools(client: &Client) -> Result<Vec<RebootPool>, kube::Error> {
    match Api::<RebootPool>::all(client.clone())
        .list(&ListParams::default())
        .await
    {
        Ok(list) => {
            let mut pools = list.items;
            pools.sort_by_key(|p| p.metadata.name.clone());
            Ok(pools)
        }
        Err(e) if crate::error::is_not_found(&e) => Ok(Vec::new()),
        Err(e) => Err(e),
    }
}

/// The flags' pool: `--node-selector`'s nodes that no RebootPool selects, and the nodes that
/// hold one of its slots.
async fn flags_pool(
    client: &Client,
    global: &Global,
    args: &StatusArgs,
    (found, events): (&[RebootPool], &BTreeMap<String, Vec<NodeEvent>>),
    budget: BudgetInput,
) -> Result<PoolInput, Error> {
    let nodes_api: Api<Node> = Api::all(client.clone());
    let mut params = ListParams::default();
    if !args.node_selector.trim().is_empty() {
        params = params.labels(args.node_selector.trim());
    }
    let name = format!("{}/{}", global.namespace, global.ledger_name);
    let (listed, mut ledgers) = nodes_and_ledgers(client, global, &params, &[name]).await?;
    let ledger = ledgers.pop().unwrap_or_default();
    let mut warnings = Vec::new();
    let mut nodes: Vec<(Node, bool)> = listed
        .into_iter()
        .map(|n| {
            let ours = pools_of(n.metadata.labels.as_ref(), found).is_empty();
            (n, ours)
        })
        .filter(|(n, ours)| *ours || ledger.slots.contains_key(&n.name_any()))
        .collect();
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
    let nodes = nodes
        .into_iter()
        .map(|(n, in_pool)| (n, in_pool, Vec::new()));
    let inputs = node_inputs(client, global, args, nodes, events, &mut warnings).await;
    Ok(PoolInput {
        name: None,
        selector: args.node_selector.trim().to_owned(),
        spec: None,
        nodes: inputs,
        ledger,
        budget,
        warnings,
        windows: controller_core::window::Windows::new(args.reboot_windows.clone())
            .with_blackouts(args.reboot_blackouts.clone()),
    })
}

/// The names of the RebootPools that select a node with these labels.
fn pools_of<'p>(
    labels: Option<&BTreeMap<String, String>>,
    pools: &'p [RebootPool],
) -> Vec<&'p str> {
    let none = BTreeMap::new();
    common::pool::pools_of(labels.unwrap_or(&none), pools)
}

/// Each RebootPool (only `--pool`'s, if given) from one list of every node: the nodes its
/// `nodeSelector` selects (those that another pool selects too marked so), those holding one
/// of its slots, its ledger, and its spec, which gives its budget and pause.
async fn reboot_pool_inputs(
    client: &Client,
    global: &Global,
    args: &StatusArgs,
    found: &[RebootPool],
    events: &BTreeMap<String, Vec<NodeEvent>>,
) -> Result<Vec<PoolInput>, Error> {
    let wanted: Vec<&RebootPool> = found
        .iter()
        .filter(|p| args.pool.is_none() || p.metadata.name == args.pool)
        .collect();
    if wanted.is_empty() {
        return Ok(Vec::new());
    }
    let names: Vec<String> = wanted
        .iter()
        .map(|p| {
            let pool = p.metadata.name.as_deref().unwrap_or_default();
            format!("{}/{}", global.namespace, common::pool::ledger_name(pool))
        })
        .collect();
    let (all, ledgers) = nodes_and_ledgers(client, global, &ListParams::default(), &names).await?;
    let mut inputs = Vec::with_capacity(wanted.len());
    for (pool, mut ledger) in wanted.into_iter().zip(ledgers) {
        let name = pool.metadata.name.clone().unwrap_or_default();
        ledger.paused = pool.spec.paused;
        let mut warnings = Vec::new();
        let nodes = all.iter().filter_map(|node| {
            let theirs = pools_of(node.metadata.labels.as_ref(), found);
            let ours = theirs.contains(&name.as_str());
            let holds = ledger.slots.contains_key(&node.name_any());
            let overlap = if theirs.len() > 1 {
                theirs.iter().map(|p| (*p).to_owned()).collect()
            } else {
                Vec::new()
            };
            (ours || holds).then(|| (node.clone(), ours, overlap))
        });
        let nodes: Vec<_> = nodes.collect();
        let nodes = node_inputs(client, global, args, nodes, events, &mut warnings).await;
        inputs.push(PoolInput {
            selector: crate::pool_spec::selector(pool),
            name: Some(name),
            spec: Some(pool.spec.clone()),
            nodes,
            ledger,
            budget: BudgetInput::default(),
            warnings,
            windows: controller_core::window::Windows::default(),
        });
    }
    Ok(inputs)
}

/// The nodes as `status` reads them: their facts, Events and, draining, the pods left.
async fn node_inputs(
    client: &Client,
    global: &Global,
    args: &StatusArgs,
    nodes: impl IntoIterator<Item = (Node, bool, Vec<String>)>,
    events: &BTreeMap<String, Vec<NodeEvent>>,
    warnings: &mut Vec<String>,
) -> Vec<NodeInput> {
    let keys = &global.annotation_prefix;
    let mut inputs = Vec::new();
    for (node, in_pool, overlap) in nodes {
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
            events: events.get(&facts.name).cloned().unwrap_or_default(),
            labels: node.metadata.labels.clone().unwrap_or_default(),
            in_pool,
            pods_left,
            overlap,
            facts,
        });
    }
    inputs
}

fn draining(facts: &NodeFacts, keys: &AnnotationKeys) -> bool {
    let state = facts.protocol(keys);
    state.phase == Phase::Idle && state.grant.is_some() && state.request == Request::Needed
}

/// The nodes and the ledgers (`namespace/name` each) as they were at one moment: the ledgers
/// read before and after the list of nodes must be the same versions (else a grant or a
/// release between the two reads would show a node twice or not at all). A busy pool gets a
/// few tries, then the last read.
async fn nodes_and_ledgers(
    client: &Client,
    global: &Global,
    params: &ListParams,
    ledgers: &[String],
) -> Result<(Vec<Node>, Vec<LedgerInput>), Error> {
    const TRIES: usize = 5;
    let nodes: Api<Node> = Api::all(client.clone());
    let read_all = async || {
        let mut read = Vec::with_capacity(ledgers.len());
        for name in ledgers {
            read.push(ledger(client, global, name).await?);
        }
        Ok::<_, Error>(read)
    };
    let versions = |read: &[LedgerInput]| -> Vec<Option<String>> {
        read.iter().map(|l| l.version.clone()).collect()
    };
    let mut before = read_all().await?;
    let mut tries = 1;
    loop {
        let listed =
            nodes
                .list(params)
                .await
                .map_err(Error::api("cannot list nodes", "status", NEEDS))?;
        let after = read_all().await?;
        if versions(&after) == versions(&before) || tries == TRIES {
            return Ok((listed.items, after));
        }
        before = after;
        tries += 1;
    }
}

/// A ledger Lease (`namespace/name`): its slots and the pause. Absent is not an error here
/// (status says so).
async fn ledger(client: &Client, global: &Global, name: &str) -> Result<LedgerInput, Error> {
    let lease_name = name.rsplit('/').next().unwrap_or(name);
    let lease = Api::<Lease>::namespaced(client.clone(), &global.namespace)
        .get_opt(lease_name)
        .await
        .map_err(Error::api(
            format!("cannot read the ledger Lease {name}"),
            "status",
            NEEDS,
        ))?;
    let Some(lease) = lease else {
        return Ok(LedgerInput {
            name: name.to_owned(),
            ..LedgerInput::default()
        });
    };
    Ok(ledger_of(name.to_owned(), &lease))
}

/// What the ledger Lease says: its slots (none, with the reason, when they cannot be read),
/// the pause and the rollout's record.
fn ledger_of(name: String, lease: &Lease) -> LedgerInput {
    let annotations = lease.metadata.annotations.as_ref();
    let format = annotations.and_then(|a| a.get(common::ledger::FORMAT_ANNOTATION));
    let checked = common::format::check(format.map(String::as_str));
    let format_known = checked.is_ok();
    let (slots, damage) = match checked {
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
    // Nor its rollout record.
    let (rollout, rollout_unreadable) = match common::rollout::rollout_of(annotations) {
        _ if !format_known => (None, None),
        Ok(rollout) => (rollout, None),
        Err(error) => (None, Some(error.to_string())),
    };
    LedgerInput {
        name,
        version: lease.metadata.resource_version.clone(),
        found: true,
        slots,
        paused: common::ledger::is_paused(annotations),
        damage,
        rollout,
        rollout_unreadable,
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
    fn the_rollout_record_is_read_with_the_slots_and_one_that_does_not_read_is_said() {
        use common::rollout::ROLLOUT_ANNOTATION;
        let lease = |format: &str, rollout: &str| -> Lease {
            serde_json::from_value(json!({"metadata": {"name": "slots", "annotations": {
                common::ledger::FORMAT_ANNOTATION: format,
                common::ledger::SLOTS_ANNOTATION: "{}",
                ROLLOUT_ANNOTATION: rollout,
            }}}))
            .unwrap()
        };
        let read = ledger_of(
            "ns/slots".into(),
            &lease("1", r#"{"completed":3,"wave":4}"#),
        );
        let record = read.rollout.expect("a record");
        assert_eq!((record.completed, record.wave), (3, Some(4)));
        assert_eq!(read.rollout_unreadable, None);
        let typed = ledger_of("ns/slots".into(), &lease("1", "{"));
        assert_eq!(typed.rollout, None);
        assert!(
            typed
                .rollout_unreadable
                .is_some_and(|why| why.contains("kubectl reboot resume")),
        );
        // A newer operator's record may mean something else: not read.
        let newer = ledger_of("ns/slots".into(), &lease("2", r#"{"completed":3}"#));
        assert_eq!((newer.rollout, newer.rollout_unreadable), (None, None));
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
