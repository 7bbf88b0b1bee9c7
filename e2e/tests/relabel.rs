//! Relabels (docs/src/concepts.md, "The pool"), end to end on the real control plane with real
//! controllers and simulated nodes: a slot counts against the zone it was granted in until it is
//! released, a node without a zone label is not granted while zone budgets are on, and a node
//! relabelled into another pool mid-reboot is finished by the controller that granted it and
//! never driven by the other.
//!
//! The zone scenario is watched by [`StickyZones`], an independent observer that holds each
//! unavailable node against every zone it was labelled with since it became unavailable: the
//! budget a relabel must not escape.

use common::ControllerReason;
use common::{AnnotationKeys, NodeFacts, ledger::OPERATOR_NAMESPACE};
use e2e::{
    BudgetWatch, NodeState, has_event, kubectl, label_node, node, rollout::ledger_slots,
    unavailable, wait_until,
};
use k8s_openapi::api::core::v1::Node;
use kube::{Api, Client, runtime::watcher};
use nodesim::{
    observe::{Observe, ResumingWatch},
    sandbox::{Sandbox, SandboxConfig},
};
use std::{
    collections::{BTreeMap, BTreeSet},
    time::Duration,
};

const ZONE: &str = "topology.kubernetes.io/zone";
const PHASE: Duration = Duration::from_secs(120);

/// Each unavailable node counts against every zone it was labelled with since it became
/// unavailable; the first moment a zone counts more than `budget` is the violation.
#[derive(Debug, Default)]
struct Sticky {
    keys: AnnotationKeys,
    budget: usize,
    zones: BTreeMap<String, BTreeSet<Option<String>>>,
    violation: Option<String>,
}

impl Sticky {
    fn record(&mut self, node: &Node) {
        let name = node.metadata.name.clone().unwrap_or_default();
        if !unavailable(node, &self.keys) {
            self.zones.remove(&name);
            return;
        }
        let zone = node.metadata.labels.as_ref().and_then(|l| l.get(ZONE));
        self.zones.entry(name).or_default().insert(zone.cloned());
    }

    fn count(&mut self) {
        let mut by_zone: BTreeMap<&Option<String>, Vec<&String>> = BTreeMap::new();
        for (name, zones) in &self.zones {
            for zone in zones {
                by_zone.entry(zone).or_default().push(name);
            }
        }
        for (zone, nodes) in by_zone {
            if nodes.len() > self.budget && self.violation.is_none() {
                self.violation = Some(format!(
                    "zone {zone:?} counts {nodes:?} unavailable (each labelled {zone:?} at some \
                     time since it became unavailable) with a zone budget of {}",
                    self.budget
                ));
            }
        }
    }
}

impl Observe<Node> for Sticky {
    fn listed(&mut self, nodes: &[Node]) {
        self.zones.clear();
        nodes.iter().for_each(|n| self.record(n));
        self.count();
    }

    fn applied(&mut self, node: &Node) {
        self.record(node);
        self.count();
    }

    fn deleted(&mut self, node: &Node) {
        self.zones
            .remove(node.metadata.name.as_deref().unwrap_or_default());
        self.count();
    }
}

struct StickyZones(ResumingWatch<Sticky>);

impl StickyZones {
    async fn start(client: Client, budget: usize) -> Self {
        let sticky = Sticky {
            budget,
            ..Sticky::default()
        };
        let watch = ResumingWatch::start(
            Api::<Node>::all(client),
            watcher::Config::default(),
            "every Node (sticky zones)",
            sticky,
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
        Self(watch)
    }

    fn check(&self) {
        if let Some(violation) = self.0.with(|s| s.violation.clone()) {
            panic!("zone budget escaped by a relabel: {violation}");
        }
        self.0.check().unwrap_or_else(|e| panic!("{e}"));
    }
}

async fn sandbox(
    nodes: usize,
    max_unavailable: &str,
    start_controller: bool,
    args: &[&str],
) -> Sandbox {
    let config = SandboxConfig::with_nodes(nodes)
        .max_unavailable(max_unavailable)
        // Long enough to relabel a node while it reboots and to watch what follows.
        .reboot_duration(Duration::from_secs(8))
        .controller_args(args)
        .start_controller(start_controller);
    e2e::sandbox_without_pods(config).await
}

fn annotations(n: &Node) -> BTreeMap<String, String> {
    NodeFacts::from_node(n).annotations
}

fn completed(n: &Node) -> bool {
    let state = NodeState::of(n);
    state.last_completed.is_some() && state.annotations.is_empty() && !state.unschedulable
}

async fn slots(client: &Client, ledger: &str) -> BTreeMap<String, common::ledger::Slot> {
    ledger_slots(client, ledger).await.unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_relabelled_slot_keeps_its_zone_and_a_node_without_a_zone_waits_for_its_label() {
    let sb = sandbox(4, "3", true, &["--max-unavailable-per-zone", "1"]).await;
    let client = sb.client.clone();
    let cp = &sb.control_plane;
    // sim-1 and sim-2 in zone a, sim-3 in zone b, sim-4 without a zone label.
    for (name, zone) in [("sim-1", "a"), ("sim-2", "a"), ("sim-3", "b")] {
        label_node(cp, name, &format!("{ZONE}={zone}"));
    }
    let sticky = StickyZones::start(client.clone(), 1).await;
    let watch = BudgetWatch::start(client.clone(), 3).await;
    kubectl(cp, &["annotate", "node", "sim-1", "reboot-needed=true"]);
    wait_until("sim-1 is rebooting", PHASE, Some(&watch), || async {
        annotations(&node(&client, "sim-1").await).contains_key("reboot-in-progress")
    })
    .await;
    // An administrator moves the rebooting node into zone b; then zone a asks for a reboot,
    // and so does the node without a zone.
    label_node(cp, "sim-1", &format!("{ZONE}=b"));
    kubectl(
        cp,
        &["annotate", "node", "sim-2", "sim-4", "reboot-needed=true"],
    );
    wait_until("sim-1 is completed", PHASE, Some(&watch), || async {
        sticky.check();
        let sim2 = annotations(&node(&client, "sim-2").await);
        completed(&node(&client, "sim-1").await) && !sim2.contains_key("reboot-grant")
            || sim2.contains_key("reboot-grant")
    })
    .await;
    sticky.check();
    assert!(
        completed(&node(&client, "sim-1").await),
        "sim-2 (zone a) was granted while sim-1, granted in zone a, still held its slot"
    );
    assert!(
        has_event(
            &client,
            "sim-4",
            ControllerReason::ZoneLabelMissing,
            &[ZONE]
        )
        .await,
        "the node without a zone label is told why it waits"
    );
    wait_until(
        "sim-2 is rebooted and completed",
        PHASE,
        Some(&watch),
        || async {
            sticky.check();
            sb.fleet.reboots("sim-2") == 1 && completed(&node(&client, "sim-2").await)
        },
    )
    .await;
    let sim4 = annotations(&node(&client, "sim-4").await);
    assert!(
        sb.fleet.reboots("sim-4") == 0 && !sim4.contains_key("reboot-grant"),
        "sim-4 was granted without a zone label: {sim4:?}"
    );
    // Labelled, it is granted in its zone.
    label_node(cp, "sim-4", &format!("{ZONE}=b"));
    wait_until(
        "sim-4 is rebooted and completed",
        PHASE,
        Some(&watch),
        || async {
            sticky.check();
            sb.fleet.reboots("sim-4") == 1 && completed(&node(&client, "sim-4").await)
        },
    )
    .await;
    sticky.check();
    watch.check().unwrap_or_else(|v| panic!("{v}"));
    sb.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_node_relabelled_into_another_pool_mid_reboot_is_finished_by_its_own_pool_only() {
    let mut sb = sandbox(4, "1", false, &[]).await;
    let client = sb.client.clone();
    for (name, pool) in [
        ("sim-1", "a"),
        ("sim-2", "a"),
        ("sim-3", "b"),
        ("sim-4", "b"),
    ] {
        label_node(&sb.control_plane, name, &format!("pool={pool}"));
    }
    for pool in ["a", "b"] {
        sb.start_controller(&[
            "--node-selector",
            &format!("pool={pool}"),
            "--ledger-name",
            &format!("pool-{pool}-slots"),
            "--leader-election-lease-name",
            &format!("pool-{pool}-leader"),
        ])
        .expect("controller starts");
    }
    // One slot per pool: two at most across both.
    let watch = BudgetWatch::start(client.clone(), 2).await;
    kubectl(
        &sb.control_plane,
        &["annotate", "node", "sim-1", "reboot-needed=true"],
    );
    wait_until("sim-1 is rebooting", PHASE, Some(&watch), || async {
        annotations(&node(&client, "sim-1").await).contains_key("reboot-in-progress")
    })
    .await;
    let grant = annotations(&node(&client, "sim-1").await)
        .get("reboot-grant")
        .cloned()
        .expect("sim-1 carries its grant");
    label_node(&sb.control_plane, "sim-1", "pool=b");
    kubectl(
        &sb.control_plane,
        &["annotate", "node", "sim-3", "reboot-needed=true"],
    );
    wait_until("sim-1 is completed", PHASE, Some(&watch), || async {
        let adopted = slots(&client, "pool-b-slots").await;
        assert!(
            !adopted.contains_key("sim-1"),
            "pool b's controller took sim-1 into its ledger while it carried pool a's grant \
             {grant}: {adopted:?}"
        );
        completed(&node(&client, "sim-1").await)
    })
    .await;
    let last = annotations(&node(&client, "sim-1").await)
        .get("reboot-last-grant")
        .cloned();
    assert_eq!(
        last.as_deref(),
        Some(grant.as_str()),
        "completed under pool a's grant"
    );
    assert_eq!(sb.fleet.reboots("sim-1"), 1);
    assert!(
        grant.starts_with(&format!("{OPERATOR_NAMESPACE}/pool-a-slots/")),
        "the grant names the ledger that made it: {grant}"
    );
    assert!(
        has_event(
            &client,
            "sim-1",
            ControllerReason::ForeignGrant,
            &["pool-a-slots"]
        )
        .await,
        "pool b's controller says whose grant the node carries"
    );
    // Pool b goes on with its own node once sim-1 is back.
    wait_until(
        "sim-3 is rebooted and completed",
        PHASE,
        Some(&watch),
        || async { sb.fleet.reboots("sim-3") == 1 && completed(&node(&client, "sim-3").await) },
    )
    .await;
    watch.check().unwrap_or_else(|v| panic!("{v}"));
    sb.stop().await;
}
