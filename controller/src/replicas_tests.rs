//! The property test of the decision core with one to three controller replicas acting at
//! once (leader election off, or a deposed leader that has not noticed), each with its own
//! memory, its own possibly stale node cache and ledger copy, in random interleavings against
//! one model API server: Node objects as JSON changed by the protocol's own patches (with
//! resourceVersions from one revision counter, so `test` operations and the ledger's
//! compare-and-swap behave as on a real API server), agents, kubelets that report a new boot
//! late, a scheduler that puts a workload pod back on every schedulable node, and an
//! administrator. Properties, checked at every write:
//! - the operator never holds more nodes (grant carried, or a reboot under way) than the budget;
//! - no `reboot-now` while a workload pod is on the node (drain on);
//! - no request lost: `reboot-needed` leaves only with `reboot-now`;
//! - the administrator's cordon is kept;
//! - a node is completed only once the kubelet reports the boot the agent proved;
//! - no new grant while, as the replica sees it, a node that completed its reboot is NotReady
//!   within its soak (`--min-ready-seconds`);
//! - with a per-zone budget, the operator never holds more nodes of a zone than it;
//! - no new grant while the pool is paused (on the ledger Lease) or outside the maintenance
//!   windows, and no claim outside them with `--finish-after-window=false`;
//! - no new grant while a health gate is closed, nor to a node a blocking pod runs on.
//!
//! Once disturbances stop, every request ends in exactly one proven reboot.

use super::tests::{annotate, facts, node_json};
use super::*;
use crate::{
    drain_tracker::drain_state_at,
    ledger::Ledger,
    pool_index::{Entry, Placement, PoolIndex, in_protocol},
};
use common::{AnnotationKeys, Transition};
use proptest::prelude::*;
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};

const NODES: usize = 6;
/// The identity of the model's ledger, which its grant ids name.
const LEDGER: &str = "ns/slots";
/// `--reboot-timeout` in steps of the simulation: short enough that crashed and slow nodes
/// pass it.
const REBOOT_TIMEOUT: u64 = 30;

#[derive(Debug, Clone)]
enum Step {
    Round(usize),
    SyncNode {
        replica: usize,
        node: usize,
    },
    SyncAll(usize),
    SyncLedger(usize),
    DrainEnds {
        replica: usize,
        node: usize,
        ok: bool,
    },
    Agent(usize),
    Kubelet(usize),
    Request(usize),
    Cancel(usize),
    AdminCordon(usize),
    AdminTakesCordon(usize),
    Flap(usize),
    /// The administrator pauses or resumes the pool (an annotation on the ledger Lease).
    Pause(bool),
    /// The maintenance window opens or closes (the clock every replica reads).
    Window(bool),
    /// A health gate closes or opens (an alert fires or resolves).
    Gate(bool),
    /// A blocking pod starts or ends on a node.
    Block {
        node: usize,
        running: bool,
    },
}

fn step() -> impl Strategy<Value = Step> {
    let r = 0..3usize;
    let n = 0..NODES;
    prop_oneof![
        8 => r.clone().prop_map(Step::Round),
        4 => (r.clone(), n.clone()).prop_map(|(replica, node)| Step::SyncNode { replica, node }),
        2 => r.clone().prop_map(Step::SyncAll),
        2 => r.clone().prop_map(Step::SyncLedger),
        3 => (r, n.clone(), proptest::bool::weighted(0.85))
            .prop_map(|(replica, node, ok)| Step::DrainEnds { replica, node, ok }),
        4 => n.clone().prop_map(Step::Agent),
        3 => n.clone().prop_map(Step::Kubelet),
        4 => n.clone().prop_map(Step::Request),
        1 => n.clone().prop_map(Step::Cancel),
        1 => n.clone().prop_map(Step::AdminCordon),
        1 => n.clone().prop_map(Step::AdminTakesCordon),
        1 => n.clone().prop_map(Step::Flap),
        1 => proptest::bool::weighted(0.3).prop_map(Step::Pause),
        1 => proptest::bool::weighted(0.6).prop_map(Step::Window),
        1 => proptest::bool::weighted(0.3).prop_map(Step::Gate),
        1 => (n.clone(), proptest::bool::weighted(0.5))
            .prop_map(|(node, running)| Step::Block { node, running }),
    ]
}

/// The model API server: the truth.
#[derive(Debug)]
struct Server {
    nodes: Vec<Value>,
    ledger: Ledger,
    revision: u64,
    /// A workload pod is bound to the node.
    pods: Vec<bool>,
    /// The boot each node really runs (the kubelet reports it when it gets to it).
    boots: Vec<u32>,
    admin_cordoned: BTreeSet<usize>,
    budget: usize,
    drain_enabled: bool,
    next_grant: u64,
    window_open: bool,
    finish_after_window: bool,
    zone_budget: Option<common::MaxUnavailable>,
    min_ready: u64,
    /// A pool-wide health gate is closed (alerts firing, Prometheus unreachable).
    unhealthy: bool,
    /// Nodes a blocking pod runs on.
    blocked: BTreeSet<String>,
}

/// One controller replica's own state: what it has seen, and what it remembers.
#[derive(Debug, Clone, Default)]
struct Replica {
    cache: Vec<Value>,
    ledger: Ledger,
    deleted: BTreeSet<String>,
    requested_at: BTreeMap<String, u64>,
    /// By grant: the drain's state and a node version: while it runs, the version of the copy
    /// it was started with; once drained, the version it stands for.
    drains: BTreeMap<String, (DrainState, Option<String>)>,
    not_before: BTreeMap<String, u64>,
    soak: crate::memory::SoakClock,
    /// The pool index, kept up to date with `cache` one change at a time, as the node watch
    /// keeps the shell's.
    index: PoolIndex,
    /// Nodes read again on the last round's request, with the version read (the shell's
    /// `Overlay::record_read`): fresh for the next round only.
    fresh: BTreeMap<String, Option<String>>,
}

fn keys() -> AnnotationKeys {
    AnnotationKeys::default()
}

fn annotation(obj: &Value, key: &str) -> Option<String> {
    obj["metadata"]["annotations"][key]
        .as_str()
        .map(str::to_owned)
}

fn index(name: &str) -> usize {
    name[1..].parse().unwrap()
}

/// Three zones of two, two and one nodes, and one node without a zone label.
/// Labelled `reboot-disabled=true` (the node opt-out) in this copy of the node.
fn opted_out(obj: &Value) -> bool {
    obj["metadata"]["labels"]["reboot-disabled"] == json!("true")
}

fn zone_of(i: usize) -> Option<String> {
    (i + 1 < NODES).then(|| format!("z{}", i % 3))
}

impl Server {
    fn new(budget: usize, drain_enabled: bool, not_ready: &[bool]) -> Self {
        Self {
            nodes: (0..NODES)
                .map(|i| node_json(&format!("n{i}"), !not_ready[i]))
                .collect(),
            ledger: Ledger {
                id: LEDGER.into(),
                resource_version: Some("1".into()),
                slots: BTreeMap::new(),
                paused: false,
            },
            revision: 1,
            pods: vec![true; NODES],
            boots: vec![0; NODES],
            admin_cordoned: BTreeSet::new(),
            budget,
            drain_enabled,
            next_grant: 0,
            window_open: true,
            finish_after_window: true,
            zone_budget: None,
            min_ready: 0,
            unhealthy: false,
            blocked: BTreeSet::new(),
        }
    }

    fn bump(&mut self, i: usize) {
        self.revision += 1;
        self.nodes[i]["metadata"]["resourceVersion"] = self.revision.to_string().into();
    }

    /// All of the patch or nothing, as the API server applies a JSON Patch.
    fn patch(&mut self, i: usize, patch: &json_patch::Patch) -> bool {
        let mut next = self.nodes[i].clone();
        if json_patch::patch(&mut next, patch).is_err() {
            return false;
        }
        self.nodes[i] = next;
        self.bump(i);
        true
    }

    fn set_ready(&mut self, i: usize, ready: bool) {
        self.nodes[i]["status"]["conditions"][0]["status"] =
            (if ready { "True" } else { "False" }).into();
    }

    /// The operator's share of unavailability: nodes carrying a grant or rebooting.
    fn held_by_operator(&self) -> Vec<String> {
        self.nodes
            .iter()
            .map(facts)
            .filter(|f| {
                let state = f.protocol(&keys());
                state.grant.is_some() || state.reboot_under_way()
            })
            .map(|f| f.name)
            .collect()
    }

    /// A controller's write of node `i`, with the invariants every such write must keep.
    fn controller_patch(&mut self, i: usize, patch: &json_patch::Patch) -> bool {
        let before = self.nodes[i].clone();
        if !self.patch(i, patch) {
            return false;
        }
        let after = &self.nodes[i];
        let needed = |o: &Value| annotation(o, "reboot-needed").as_deref() == Some("true");
        let now = |o: &Value| annotation(o, "reboot-now").as_deref() == Some("true");
        if needed(&before) && !needed(after) {
            assert!(now(after), "lost request on n{i}");
        }
        if now(after) && !now(&before) && self.drain_enabled {
            assert!(
                !self.pods[i],
                "reboot-now on n{i} while a workload pod is bound to it"
            );
        }
        let was_done = annotation(&before, "reboot-done").is_some();
        if was_done && annotation(after, "reboot-done").is_none() {
            let f = facts(&before);
            assert!(
                f.kubelet_reports_boot(annotation(&before, "reboot-boot-id").as_deref())
                    && facts(after).boot_id == Some(format!("n{i}-boot-{}", self.boots[i])),
                "n{i} completed before the kubelet reported the proven boot"
            );
        }
        let held = self.held_by_operator();
        assert!(
            held.len() <= self.budget,
            "the operator holds {held:?} with a budget of {}",
            self.budget
        );
        let before_grant = annotation(&before, "reboot-grant");
        if before_grant.is_none() && annotation(after, "reboot-grant").is_some() {
            assert!(!opted_out(&before), "n{i} claimed a grant while opted out");
            assert!(
                !self.waits_for_a_zone(i),
                "n{i} claimed a grant without a zone label while zone budgets are on"
            );
        }
        if let Some(zone_budget) = self.zone_budget {
            for zone in (0..NODES).map(zone_of) {
                let zone_size = (0..NODES).filter(|&k| zone_of(k) == zone).count();
                let per_zone = zone_budget.resolve(zone_size);
                let in_zone: Vec<&String> =
                    held.iter().filter(|n| zone_of(index(n)) == zone).collect();
                assert!(
                    in_zone.len() <= per_zone,
                    "the operator holds {in_zone:?} in zone {zone:?} with a zone budget of {per_zone}"
                );
            }
        }
        true
    }

    /// With zone budgets on, a node without a zone label is never granted: its request waits
    /// until it is labelled.
    fn waits_for_a_zone(&self, i: usize) -> bool {
        self.zone_budget.is_some() && zone_of(i).is_none()
    }

    /// What the disturbances outside the operator leave: the scheduler puts a workload pod
    /// on every schedulable Ready node; an administrator's cordon stays.
    fn after_step(&mut self) {
        for i in 0..NODES {
            let f = facts(&self.nodes[i]);
            if !f.unschedulable && f.readiness == common::Readiness::Ready {
                self.pods[i] = true;
            }
        }
        for &i in &self.admin_cordoned {
            assert_eq!(
                self.nodes[i]["spec"]["unschedulable"],
                json!(true),
                "stolen cordon on n{i}"
            );
        }
    }
}

impl Replica {
    fn new(server: &Server) -> Self {
        let mut replica = Self {
            cache: vec![Value::Null; server.nodes.len()],
            ledger: server.ledger.clone(),
            ..Self::default()
        };
        for (i, node) in server.nodes.iter().enumerate() {
            replica.see(i, node.clone());
        }
        replica
    }

    /// Node `i` as this replica's watch delivers it: into the cache and the index.
    fn see(&mut self, i: usize, node: Value) {
        let facts = facts(&node);
        let state = facts.protocol(&keys());
        let print = {
            use std::hash::{Hash as _, Hasher as _};
            let mut hasher = std::collections::hash_map::DefaultHasher::new();
            node.to_string().hash(&mut hasher);
            hasher.finish()
        };
        let placement = Placement {
            in_pool: true,
            zone: zone_of(i),
        };
        self.index.upsert(&facts.name, print, || {
            Entry::new(print, &facts, &state, placement)
        });
        self.cache[i] = node;
    }

    fn views(&mut self, now: u64) -> Vec<NodeView> {
        let keys = keys();
        self.cache
            .iter()
            .map(|obj| {
                let facts = facts(obj);
                let state = facts.protocol(&keys);
                let name = facts.name.clone();
                let requested_at = (state.request == Request::Needed)
                    .then(|| *self.requested_at.entry(name.clone()).or_insert(now));
                NodeView {
                    requested_at,
                    not_before: self.not_before.get(&name).copied(),
                    drain: self
                        .ledger
                        .grant_of(&name)
                        .and_then(|g| self.drains.get(g))
                        .map(|(state, at)| {
                            drain_state_at(*state, at.as_deref(), facts.resource_version.as_deref())
                        })
                        .unwrap_or_default(),
                    in_pool: true,
                    zone: zone_of(index(&name)),
                    opted_out: opted_out(obj),
                    ready_since: self.soak.ready_since(
                        &name,
                        facts.readiness == common::Readiness::Ready,
                        state.last_grant.as_deref(),
                        now,
                    ),
                    approved_at: state.approved_at.as_deref().and_then(|t| t.parse().ok()),
                    // As the shell: a node read again on the last round's request is fresh.
                    fresh: self.fresh.get(&name) == Some(&facts.resource_version),
                    facts,
                    state,
                }
            })
            .collect()
    }

    /// The shell decides on the nodes in the protocol and the slot holders, with the rest
    /// of the pool counted by the index: that must decide exactly as a round over every node
    /// (`full`), and the index must equal a recount of the cache.
    fn check_index(
        &self,
        views: &[NodeView],
        full: &Decision,
        decide: impl Fn(&[NodeView], &PoolCounts) -> Decision,
    ) {
        let viewed: Vec<NodeView> = views
            .iter()
            .filter(|v| in_protocol(&v.state) || self.ledger.holds(v.name()))
            .cloned()
            .collect();
        let others = self.index.counts_without(viewed.iter().map(NodeView::name));
        assert_eq!(
            &decide(&viewed, &others),
            full,
            "the incremental round decided otherwise than the full one"
        );
        let mut recount = Replica {
            cache: vec![Value::Null; self.cache.len()],
            ..Replica::default()
        };
        for (i, node) in self.cache.iter().enumerate() {
            recount.see(i, node.clone());
        }
        assert_eq!(recount.index.totals(), self.index.totals());
        assert_eq!(recount.index.in_protocol(), self.index.in_protocol());
    }

    /// One round of this replica, executed against the server as the shell would.
    fn round(&mut self, server: &mut Server, now: u64) {
        let views = self.views(now);
        self.fresh.clear();
        let fence = Fence {
            paused: self.ledger.paused,
            window_open: server.window_open,
            gates_closed: server.unhealthy,
        };
        let decide = |nodes: &[NodeView], others: &PoolCounts| {
            Round {
                nodes,
                others,
                ledger: &self.ledger,
                deleted: &self.deleted,
                budget: server.budget,
                zone_budget: server.zone_budget,
                drain_enabled: server.drain_enabled,
                now,
                fence,
                finish_after_window: server.finish_after_window,
                min_ready: server.min_ready,
                clock: now,
                reboot_timeout: REBOOT_TIMEOUT,
                blocked: &server.blocked,
            }
            .decide()
        };
        let decision = decide(&views, &PoolCounts::default());
        self.check_index(&views, &decision, decide);
        let sick_in_soak: Vec<&str> = views
            .iter()
            .filter(|v| {
                let slot = self.ledger.grant_of(v.name());
                server.min_ready > 0
                    && slot.is_some()
                    && v.state.last_grant.as_deref() == slot
                    && v.facts.readiness != common::Readiness::Ready
            })
            .map(NodeView::name)
            .collect();
        let fresh = decision.ledger.grant.iter().filter(|g| g.adopted.is_none());
        assert!(
            sick_in_soak.is_empty() || fresh.count() == 0,
            "granted while {sick_in_soak:?} is NotReady after its reboot"
        );
        // Invariant 7: a node told to reboot and not completed within the timeout holds the pool.
        let late: Vec<&str> = views
            .iter()
            .filter(|v| {
                let completing = match &v.state.phase {
                    common::Phase::Done { boot_id } => {
                        v.facts.kubelet_reports_boot(boot_id.as_deref())
                    }
                    _ => false,
                };
                v.state.reboot_under_way()
                    && !completing
                    && v.approved_at.is_some_and(|at| now >= at + REBOOT_TIMEOUT)
            })
            .map(NodeView::name)
            .collect();
        let fresh = decision.ledger.grant.iter().filter(|g| g.adopted.is_none());
        assert!(
            late.is_empty() || fresh.count() == 0,
            "granted while {late:?} is past its reboot timeout"
        );
        if !decision.ledger.is_empty() {
            if self.ledger.resource_version != server.ledger.resource_version {
                // Compare-and-swap refused: re-read and decide again next time.
                self.ledger = server.ledger.clone();
                return;
            }
            let new_grants = decision.ledger.grant.iter().filter(|g| g.adopted.is_none());
            let new_grants: Vec<&str> = new_grants.map(|g| g.node.as_str()).collect();
            assert!(
                !server.ledger.paused || new_grants.is_empty(),
                "granted {new_grants:?} while paused"
            );
            assert!(
                server.window_open || new_grants.is_empty(),
                "granted {new_grants:?} outside the window"
            );
            assert!(
                !server.unhealthy || new_grants.is_empty(),
                "granted {new_grants:?} while a health gate was closed"
            );
            let blocked: Vec<&&str> = new_grants
                .iter()
                .filter(|n| server.blocked.contains(**n))
                .collect();
            assert!(
                blocked.is_empty(),
                "granted {blocked:?}, which a blocking pod runs on"
            );
            // A slot is re-keyed only on a fresh read of its node: re-keyed from stale copies,
            // two replicas flip it back and forth and stop its drain at every flip.
            for grant in &decision.ledger.grant {
                if grant.adopted.is_none() || !decision.ledger.release.contains(&grant.node) {
                    continue;
                }
                let view = &views[index(&grant.node)];
                assert!(
                    view.fresh,
                    "{} re-keyed to {:?} from a cached copy (the server's carries {:?})",
                    grant.node,
                    grant.adopted,
                    annotation(&server.nodes[index(&grant.node)], "reboot-grant"),
                );
            }
            let next_grant = &mut server.next_grant;
            let slots = decision.ledger.apply(&self.ledger.slots, "t", || {
                *next_grant += 1;
                common::ledger::grant_id(LEDGER, &format!("g{next_grant}"))
            });
            server.revision += 1;
            server.ledger = Ledger {
                id: LEDGER.into(),
                resource_version: Some(server.revision.to_string()),
                slots,
                paused: server.ledger.paused,
            };
            self.ledger = server.ledger.clone();
            let live: BTreeSet<&str> = self
                .ledger
                .slots
                .values()
                .map(|s| s.grant.as_str())
                .collect();
            self.drains.retain(|g, _| live.contains(g.as_str()));
            for (name, reason) in &decision.release_reasons {
                if *reason == ReleaseReason::DrainFailed {
                    self.not_before.insert(name.clone(), now + 5);
                }
            }
        }
        for action in decision.node_actions {
            self.execute(server, &views, action, now);
        }
    }

    fn execute(&mut self, server: &mut Server, views: &[NodeView], action: NodeAction, now: u64) {
        let keys = keys();
        let t = Transition::new(&keys);
        let i = index(action.node());
        let f = &views[i].facts;
        if matches!(action, NodeAction::Claim { .. }) {
            assert!(server.window_open, "n{i} claimed outside the window");
        }
        // Invariant 9: a shut gate or a blocking pod stops a granted node where it stands.
        let moves = matches!(
            action,
            NodeAction::Claim { .. }
                | NodeAction::Recordon { .. }
                | NodeAction::StartDrain { .. }
                | NodeAction::Promote { .. }
        );
        assert!(
            !moves || !server.unhealthy,
            "{action:?} while a health gate was closed"
        );
        assert!(
            !moves || !server.blocked.contains(action.node()),
            "{action:?} while a blocking pod runs on it"
        );
        let patch = match &action {
            NodeAction::Claim {
                grant,
                node_version,
                promote,
                ..
            } => Some(t.claim(f, grant, node_version, *promote, &now.to_string())),
            NodeAction::Recordon { grant, .. } => {
                // Pods may have landed while it was uncordoned: drain again.
                self.drains.remove(grant);
                Some(t.recordon(f, grant))
            }
            NodeAction::Promote { grant, .. } => Some(t.promote(f, grant, &now.to_string())),
            NodeAction::Complete { grant, .. } => Some(t.complete(f, Some(grant), "t")),
            NodeAction::Release { .. } => t.release(f),
            NodeAction::StartDrain { grant, .. } => {
                let started_with = f.resource_version.clone();
                self.drains
                    .insert(grant.clone(), (DrainState::Running, started_with));
                None
            }
            NodeAction::Refetch(_) | NodeAction::WarnInvalidRequest { .. } => None,
        };
        // A write's answer (or a refused write's re-read) is what this replica sees next.
        let read = match patch {
            Some(patch) => {
                server.controller_patch(i, &patch);
                true
            }
            None => matches!(action, NodeAction::Refetch(_)),
        };
        if read {
            if matches!(action, NodeAction::Refetch(_)) {
                let version = server.nodes[i]["metadata"]["resourceVersion"]
                    .as_str()
                    .map(str::to_owned);
                self.fresh.insert(action.node().to_owned(), version);
            }
            self.see(i, server.nodes[i].clone());
        }
    }

    /// This replica's drain of node `i` ends, as `Drainer::drain` does: a drain whose list
    /// of the node's pods (made now) has nothing to evict stands for the version of the copy
    /// it was started with, with no read of the node; one with pods to evict evicts only
    /// while the node, read now, carries the grant the drain is for, and stands for the
    /// version read.
    fn drain_ends(&mut self, server: &mut Server, i: usize, ok: bool) {
        let name = format!("n{i}");
        let Some(grant) = self.ledger.grant_of(&name).map(str::to_owned) else {
            return;
        };
        let Some((DrainState::Running, started_with)) = self.drains.get(&grant).cloned() else {
            return;
        };
        let holds = annotation(&server.nodes[i], "reboot-grant").as_deref() == Some(grant.as_str());
        let drained = if ok && !server.pods[i] {
            (DrainState::Drained, started_with)
        } else if ok && holds {
            server.pods[i] = false;
            let version = server.nodes[i]["metadata"]["resourceVersion"]
                .as_str()
                .map(str::to_owned);
            (DrainState::Drained, version)
        } else {
            (DrainState::Failed, None)
        };
        self.drains.insert(grant, drained);
    }
}

struct Model {
    server: Server,
    replicas: Vec<Replica>,
    now: u64,
}

impl Model {
    /// A model whose nodes `soaking` have just completed a reboot and still hold its slot
    /// (at most `budget` of them), so that soaks and the failures during them come early.
    fn soaking(
        replicas: usize,
        budget: usize,
        drain_enabled: bool,
        not_ready: &[bool],
        soaking: &[usize],
    ) -> Self {
        let mut server = Server::new(budget, drain_enabled, not_ready);
        for &i in soaking.iter().take(budget) {
            let grant = common::ledger::grant_id(LEDGER, &format!("g-soak-{i}"));
            annotate(&mut server.nodes[i], "reboot-last-grant", &grant);
            server.bump(i);
            let slot = Slot {
                grant,
                granted_at: "t".into(),
                node_version: Some("1".into()),
                zone: zone_of(i),
            };
            server.ledger.slots.insert(format!("n{i}"), slot);
        }
        let replicas = (0..replicas).map(|_| Replica::new(&server)).collect();
        Self {
            server,
            replicas,
            now: 0,
        }
    }

    /// The agent of node `i`: on `reboot-now` it records the boot and the machine reboots
    /// (the kubelet stays Ready: a short reboot never shows NotReady); after boot it proves
    /// the reboot by the new boot id, possibly before the kubelet has reported that boot.
    fn agent(&mut self, i: usize) {
        let keys = keys();
        let t = Transition::new(&keys);
        let s = &mut self.server;
        let f = facts(&s.nodes[i]);
        let running = format!("n{i}-boot-{}", s.boots[i]);
        match f.protocol(&keys).phase {
            Phase::RebootNow if s.patch(i, &t.begin_reboot(&f, &running)) => s.boots[i] += 1,
            Phase::InProgress { boot_id: recorded } if recorded.as_deref() != Some(&running) => {
                assert!(s.patch(i, &t.finish_reboot(&f, recorded.as_deref(), &running)));
            }
            _ => {}
        }
    }

    /// The kubelet of node `i` reports the boot it runs, Ready.
    fn kubelet(&mut self, i: usize) {
        let s = &mut self.server;
        let running = format!("n{i}-boot-{}", s.boots[i]);
        if s.nodes[i]["status"]["nodeInfo"]["bootID"] != json!(running) {
            s.nodes[i]["status"]["nodeInfo"]["bootID"] = running.into();
            s.set_ready(i, true);
            s.bump(i);
        }
    }

    fn apply(&mut self, step: &Step) {
        self.now += 1;
        let r = |k: usize| k % self.replicas.len();
        let s = &mut self.server;
        match *step {
            Step::Round(k) => {
                let k = r(k);
                self.replicas[k].round(&mut self.server, self.now);
            }
            Step::SyncNode { replica, node } => {
                let k = r(replica);
                self.replicas[k].see(node, s.nodes[node].clone());
            }
            Step::SyncAll(k) => {
                let k = r(k);
                for (i, node) in s.nodes.iter().enumerate() {
                    self.replicas[k].see(i, node.clone());
                }
                self.replicas[k].ledger = s.ledger.clone();
            }
            Step::SyncLedger(k) => {
                let k = r(k);
                self.replicas[k].ledger = s.ledger.clone();
            }
            Step::DrainEnds { replica, node, ok } => {
                let k = r(replica);
                self.replicas[k].drain_ends(&mut self.server, node, ok);
            }
            Step::Agent(i) => self.agent(i),
            Step::Kubelet(i) => self.kubelet(i),
            Step::Request(i) => {
                annotate(&mut s.nodes[i], "reboot-needed", "true");
                s.bump(i);
            }
            Step::Cancel(i) => {
                if let Some(map) = s.nodes[i]["metadata"]["annotations"].as_object_mut() {
                    map.remove("reboot-needed");
                }
                s.bump(i);
            }
            Step::AdminCordon(i) => {
                if s.nodes[i]["spec"]["unschedulable"] != json!(true) {
                    s.nodes[i]["spec"]["unschedulable"] = true.into();
                    s.admin_cordoned.insert(i);
                    s.bump(i);
                }
            }
            Step::AdminTakesCordon(i) => {
                // The documented way to keep the operator's cordon after the reboot.
                if let Some(map) = s.nodes[i]["metadata"]["annotations"].as_object_mut()
                    && map.remove("reboot-cordoned").is_some()
                {
                    s.admin_cordoned.insert(i);
                    s.bump(i);
                }
            }
            Step::Pause(paused) => {
                s.revision += 1;
                s.ledger.paused = paused;
                s.ledger.resource_version = Some(s.revision.to_string());
            }
            Step::Window(open) => s.window_open = open,
            Step::Gate(closed) => s.unhealthy = closed,
            Step::Block { node, running } => {
                let name = format!("n{node}");
                if running {
                    s.blocked.insert(name);
                } else {
                    s.blocked.remove(&name);
                }
            }
            Step::Flap(i) => {
                let f = facts(&s.nodes[i]);
                if !f.protocol(&keys()).reboot_under_way() {
                    s.set_ready(i, f.readiness != common::Readiness::Ready);
                    s.bump(i);
                }
            }
        }
        self.server.after_step();
    }

    /// The administrator labels node `i` `reboot-disabled=true`, or removes the label.
    fn toggle_opt_out(&mut self, i: usize) {
        let s = &mut self.server;
        if opted_out(&s.nodes[i]) {
            if let Some(labels) = s.nodes[i]["metadata"]["labels"].as_object_mut() {
                labels.remove("reboot-disabled");
            }
        } else {
            s.nodes[i]["metadata"]["labels"]["reboot-disabled"] = "true".into();
        }
        s.bump(i);
    }

    /// No request, no slot, nothing in the protocol: nothing more can happen.
    fn quiet(&self) -> bool {
        self.server.ledger.slots.is_empty()
            && self.server.nodes.iter().enumerate().all(|(i, n)| {
                let state = facts(n).protocol(&keys());
                (state.request == Request::Absent || self.server.waits_for_a_zone(i))
                    && state.phase == Phase::Idle
                    && state.grant.is_none()
                    && !state.cordoned_by_operator
            })
    }

    /// Disturbances stop (the administrator lifts their cordons, nodes are Ready, watches
    /// catch up, drains finish): every standing request must end in exactly one reboot.
    fn settle(&mut self) {
        self.apply(&Step::Pause(false));
        self.apply(&Step::Window(true));
        self.apply(&Step::Gate(false));
        for i in 0..NODES {
            if opted_out(&self.server.nodes[i]) {
                self.toggle_opt_out(i);
            }
        }
        let s = &mut self.server;
        s.blocked.clear();
        for i in std::mem::take(&mut s.admin_cordoned) {
            if annotation(&s.nodes[i], "reboot-cordoned").is_none() {
                s.nodes[i]["spec"]["unschedulable"] = false.into();
                s.bump(i);
            }
        }
        for i in 0..NODES {
            if !facts(&s.nodes[i]).protocol(&keys()).reboot_under_way() {
                s.set_ready(i, true);
                s.bump(i);
            }
        }
        let requested: Vec<usize> = (0..NODES)
            .filter(|&i| {
                annotation(&self.server.nodes[i], "reboot-needed").as_deref() == Some("true")
                    && !self.server.waits_for_a_zone(i)
            })
            .collect();
        let boots_before = self.server.boots.clone();
        for _ in 0..60 * NODES {
            self.now += 10;
            for k in 0..self.replicas.len() {
                self.apply(&Step::SyncAll(k));
                self.apply(&Step::Round(k));
                for i in 0..NODES {
                    self.apply(&Step::DrainEnds {
                        replica: k,
                        node: i,
                        ok: true,
                    });
                }
            }
            for i in 0..NODES {
                self.agent(i);
                self.kubelet(i);
            }
            if self.quiet() {
                break;
            }
        }
        for i in requested {
            assert!(
                self.server.boots[i] > boots_before[i],
                "request of n{i} never completed"
            );
        }
        assert!(
            self.server.ledger.slots.is_empty(),
            "slots left: {:?}",
            self.server.ledger.slots
        );
        for (i, node) in self.server.nodes.iter().enumerate() {
            let state = facts(node).protocol(&keys());
            assert_eq!(state.phase, Phase::Idle, "n{i} stuck");
            assert!(
                state.grant.is_none() && !state.cordoned_by_operator,
                "n{i} left in the protocol"
            );
        }
    }
}

proptest! {
    // 300 cases by default (about 15 s); `PROPTEST_CASES=5000` for a longer hunt.
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|c| c.parse().ok()).unwrap_or(300),
        ..ProptestConfig::default()
    })]

    #[test]
    fn replicas_on_stale_caches_keep_the_budget_the_drain_and_every_request(
        replicas in 1..=3usize,
        budget in 1..3usize,
        drain_enabled in proptest::bool::weighted(0.7),
        finish_after_window in proptest::bool::weighted(0.5),
        zone_budget in proptest::option::of(1..2usize),
        min_ready in prop_oneof![Just(0u64), Just(25u64)],
        soaking in proptest::collection::vec(0..NODES, 0..3),
        not_ready in proptest::collection::vec(proptest::bool::weighted(0.15), NODES),
        steps in proptest::collection::vec(step(), 0..200),
        // Drawn after the steps, so that the seeds kept in proptest-regressions still make
        // the same steps as when they were found.
        zone_budget_form in 0..3u8,
        opt_outs in proptest::collection::vec((0..200usize, 0..NODES), 0..4),
    ) {
        let mut model = Model::soaking(replicas, budget, drain_enabled, &not_ready, &soaking);
        model.server.finish_after_window = finish_after_window;
        model.server.zone_budget = zone_budget.map(|n| match zone_budget_form {
            0 => common::MaxUnavailable::Count(n as u32),
            1 => common::MaxUnavailable::Percent(50),
            _ => common::MaxUnavailable::Percent(100),
        });
        model.server.min_ready = min_ready;
        for (k, s) in steps.iter().enumerate() {
            for &(_, node) in opt_outs.iter().filter(|(at, _)| *at == k) {
                model.toggle_opt_out(node);
            }
            model.apply(s);
        }
        model.settle();
    }
}
