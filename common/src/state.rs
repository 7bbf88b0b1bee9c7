//! The protocol state of a node, read from its annotations, and the few facts about a Node
//! that every decision needs, as plain data.

use crate::keys::AnnotationKeys;
use k8s_openapi::api::core::v1::Node;
use std::collections::BTreeMap;

/// What the administrator asked for with `reboot-needed`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    Absent,
    /// `reboot-needed=true`.
    Needed,
    /// Any other value: not a request; the controller says so in a Warning Event.
    Invalid(String),
}

/// Where a node is in the reboot protocol, as its annotations say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Phase {
    /// No reboot under way (a request may be pending: see [`Request`]).
    Idle,
    /// `reboot-now=true`: the controller has told the agent to reboot.
    RebootNow,
    /// `reboot-in-progress=true`: the agent has started the reboot from `boot_id`; the
    /// controller completes it once the kubelet reports another boot, Ready.
    InProgress { boot_id: Option<String> },
    /// `reboot-done=true`: the agent has proven the reboot from `boot_id`, the boot it
    /// came back in; the controller finishes it once the kubelet reports that same boot.
    Done { boot_id: Option<String> },
}

/// The protocol state of one node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProtocolState {
    pub request: Request,
    pub phase: Phase,
    /// The operator cordoned the node, so it uncordons it when the reboot is over.
    pub cordoned_by_operator: bool,
    /// RFC 3339 time the last reboot of this node was completed.
    pub last_completed: Option<String>,
    /// The slot grant the node holds (`reboot-grant`), written by the controller.
    pub grant: Option<String>,
    /// The grant whose reboot was completed last (`reboot-last-grant`).
    pub last_grant: Option<String>,
    /// RFC 3339 time the controller set `reboot-now` (`reboot-approved-at`).
    pub approved_at: Option<String>,
    /// The labels the controller set at the grant (`reboot-labelled`), as recorded.
    pub labelled: Option<String>,
    /// The key of the waiting taint the controller put on the node (`reboot-tainted`).
    pub tainted: Option<String>,
    /// An administrator gives the node up (`reboot-abandon`, any value but one that reads as
    /// no): who and why.
    pub abandon: Option<String>,
    /// A `reboot-abandon` whose value reads as no (`false`, `no`, `0`): it gives nothing up,
    /// and the controller says so in a Warning. The administrator's to remove.
    pub abandon_declined: Option<String>,
    /// The autoscalers' annotations the controller set at the claim (`reboot-protected`), as
    /// recorded.
    pub protected: Option<String>,
    /// The failed drains of the standing request (`reboot-drain-failures`), as written
    /// (see [`crate::drain_failures`]).
    pub drain_failures: Option<String>,
    /// The format version of these annotations (`reboot-protocol-version`) as found; none
    /// reads as version 1 (see [`crate::format`]).
    pub format: Option<String>,
}

impl ProtocolState {
    /// Reads the state from a node's annotations. When the annotations contradict each other
    /// (only a hand edit can do that), the most advanced phase wins, so no step is repeated.
    pub fn from_annotations(keys: &AnnotationKeys, annotations: &BTreeMap<String, String>) -> Self {
        let is_true = |key: &str| annotations.get(key).is_some_and(|v| v == "true");
        let request = match annotations.get(&keys.needed).map(String::as_str) {
            None => Request::Absent,
            Some("true") => Request::Needed,
            Some(other) => Request::Invalid(other.to_owned()),
        };
        let phase = if is_true(&keys.done) {
            Phase::Done {
                boot_id: annotations.get(&keys.boot_id).cloned(),
            }
        } else if is_true(&keys.in_progress) {
            Phase::InProgress {
                boot_id: annotations.get(&keys.boot_id).cloned(),
            }
        } else if is_true(&keys.now) {
            Phase::RebootNow
        } else {
            Phase::Idle
        };
        let abandon = annotations.get(&keys.abandon).cloned();
        let declined = abandon.as_deref().is_some_and(crate::abandon::reads_as_no);
        Self {
            request,
            phase,
            cordoned_by_operator: is_true(&keys.cordoned),
            last_completed: annotations.get(&keys.last_completed).cloned(),
            grant: annotations.get(&keys.grant).cloned(),
            last_grant: annotations.get(&keys.last_grant).cloned(),
            approved_at: annotations.get(&keys.approved_at).cloned(),
            labelled: annotations.get(&keys.labelled).cloned(),
            tainted: annotations.get(&keys.tainted).cloned(),
            abandon: abandon.clone().filter(|_| !declined),
            abandon_declined: abandon.filter(|_| declined),
            drain_failures: annotations.get(&keys.drain_failures).cloned(),
            protected: annotations.get(&keys.protected).cloned(),
            format: annotations.get(&keys.protocol_version).cloned(),
        }
    }

    /// Whether the controller has anything to undo or release when the node is given up: a
    /// request, a grant, a reboot under way, its cordon, its labels or its taint.
    pub fn anything_to_abandon(&self) -> bool {
        self.request != Request::Absent
            || self.grant.is_some()
            || self.reboot_under_way()
            || self.cordoned_by_operator
            || self.approved_at.is_some()
            || self.labelled.is_some()
            || self.tainted.is_some()
            || self.protected.is_some()
    }

    /// The annotations are in a format this build does not know (a newer operator wrote them):
    /// the node is left alone, and counted as unavailable, whatever they seem to say.
    pub fn unknown_format(&self) -> Option<crate::format::UnknownFormat> {
        crate::format::check(self.format.as_deref()).err()
    }

    /// The node is somewhere between `reboot-now` and the controller's completion.
    pub fn reboot_under_way(&self) -> bool {
        self.phase != Phase::Idle
    }

    /// The reboot of `grant` is the one this node completed last (`reboot-last-grant`).
    pub fn completed(&self, grant: &str) -> bool {
        self.last_grant.as_deref() == Some(grant)
    }

    /// The soak (`--min-ready-seconds`): the node is done with its reboot (no phase, no grant)
    /// while the ledger still holds `slot_grant`, the slot of the very grant it completed. The
    /// controller gives that slot back once the node has been Ready long enough, or at once
    /// when an administrator removes `reboot-last-grant`.
    pub fn soaking(&self, slot_grant: Option<&str>) -> bool {
        !self.reboot_under_way()
            && self.grant.is_none()
            && slot_grant.is_some_and(|g| self.completed(g))
    }
}

/// The Node's Ready condition, as the kubelet last reported it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Readiness {
    Ready,
    NotReady,
    Unknown,
    /// No Ready condition at all (a node that never reported).
    Missing,
}

/// The facts about a Node that the protocol needs, copied out of the API object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeFacts {
    pub name: String,
    pub resource_version: Option<String>,
    pub readiness: Readiness,
    pub unschedulable: bool,
    /// Whether `metadata.annotations` exists at all: a JSON Patch `add` of one key needs it.
    pub has_annotations: bool,
    pub annotations: BTreeMap<String, String>,
    /// `status.nodeInfo.bootID`, as the kubelet reports it.
    pub boot_id: Option<String>,
    /// Whether `metadata.labels` exists at all, and the labels (the controller's cache keeps
    /// only those it reads).
    pub has_labels: bool,
    pub labels: BTreeMap<String, String>,
    /// `spec.taints` as `(key, effect)`, in the API's order: a taint is removed by its index.
    /// `None` when the node has no taint list.
    pub taints: Option<Vec<(String, String)>>,
}

impl NodeFacts {
    pub fn from_node(node: &Node) -> Self {
        let readiness = node
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
            .map_or(Readiness::Missing, |c| match c.status.as_str() {
                "True" => Readiness::Ready,
                "False" => Readiness::NotReady,
                _ => Readiness::Unknown,
            });
        Self {
            name: node.metadata.name.clone().unwrap_or_default(),
            resource_version: node.metadata.resource_version.clone(),
            readiness,
            unschedulable: node
                .spec
                .as_ref()
                .and_then(|s| s.unschedulable)
                .unwrap_or(false),
            has_annotations: node.metadata.annotations.is_some(),
            annotations: node.metadata.annotations.clone().unwrap_or_default(),
            boot_id: node
                .status
                .as_ref()
                .and_then(|s| s.node_info.as_ref())
                .map(|i| i.boot_id.clone())
                .filter(|id| !id.is_empty()),
            has_labels: node.metadata.labels.is_some(),
            labels: node.metadata.labels.clone().unwrap_or_default(),
            taints: node
                .spec
                .as_ref()
                .and_then(|s| s.taints.as_ref())
                .map(|ts| {
                    ts.iter()
                        .map(|t| (t.key.clone(), t.effect.clone()))
                        .collect()
                }),
        }
    }

    pub fn protocol(&self, keys: &AnnotationKeys) -> ProtocolState {
        ProtocolState::from_annotations(keys, &self.annotations)
    }

    /// Unavailable for reasons of its own: not Ready, or cordoned.
    pub fn unavailable_by_itself(&self) -> bool {
        self.readiness != Readiness::Ready || self.unschedulable
    }

    /// Whether the kubelet reports the boot the agent proved (a Ready condition alone can
    /// predate the reboot).
    pub fn kubelet_reports_boot(&self, proven_boot_id: Option<&str>) -> bool {
        self.readiness == Readiness::Ready
            && proven_boot_id.is_some_and(|id| self.boot_id.as_deref() == Some(id.trim()))
    }

    /// Whether the reboot in `phase` is proven and the node back: the one condition under which
    /// a reboot is complete. Either the agent proved it (`reboot-done`) and the kubelet reports
    /// that boot, or the kubelet itself reports a boot other than the one the agent recorded
    /// before rebooting (the kubelet's `bootID` is written by that node's own kubelet only), and
    /// Ready. Without a recorded boot id nothing proves a reboot.
    pub fn reboot_proven(&self, phase: &Phase) -> bool {
        match phase {
            Phase::Done { boot_id } => self.kubelet_reports_boot(boot_id.as_deref()),
            Phase::InProgress { boot_id } => {
                self.kubelet_reports_boot_other_than(boot_id.as_deref())
            }
            Phase::Idle | Phase::RebootNow => false,
        }
    }

    /// Whether the kubelet reports, Ready, a boot other than `recorded` (which must be known).
    fn kubelet_reports_boot_other_than(&self, recorded: Option<&str>) -> bool {
        let recorded = recorded.map(str::trim).filter(|id| !id.is_empty());
        self.readiness == Readiness::Ready
            && recorded.is_some_and(|old| self.boot_id.as_deref().is_some_and(|now| now != old))
    }
}

/// Invariant 1 (docs/src/design.md), the one rule every count of the budget uses: a node is
/// unavailable when it is not Ready, cordoned, in the reboot protocol, or holding a slot.
/// A node whose annotations are in a format this build does not know counts as unavailable:
/// what they say cannot be read, so it may be anywhere in a reboot. So does one that carries
/// the operator's cordon marker though an administrator uncordoned it (a node set aside and
/// kept cordoned): until the operator has taken its marker off, the node may be read
/// cordoned elsewhere, and counting it does less.
pub fn unavailable(facts: &NodeFacts, state: &ProtocolState, holds_slot: bool) -> bool {
    facts.unavailable_by_itself()
        || state.reboot_under_way()
        || state.grant.is_some()
        || state.cordoned_by_operator
        || holds_slot
        || state.unknown_format().is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(pairs: &[(&str, &str)]) -> ProtocolState {
        let annotations = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        ProtocolState::from_annotations(&AnnotationKeys::default(), &annotations)
    }

    #[test]
    fn only_true_is_a_request() {
        assert_eq!(state(&[]).request, Request::Absent);
        assert_eq!(state(&[("reboot-needed", "true")]).request, Request::Needed);
        assert_eq!(
            state(&[("reboot-needed", "banana")]).request,
            Request::Invalid("banana".into())
        );
    }

    #[test]
    fn an_abandon_that_reads_as_no_is_no_give_up() {
        let given_up = state(&[("reboot-abandon", "disk dead")]);
        assert_eq!(given_up.abandon.as_deref(), Some("disk dead"));
        assert_eq!(given_up.abandon_declined, None);
        for no in ["false", "no", "0", "No"] {
            let declined = state(&[("reboot-abandon", no)]);
            assert_eq!(declined.abandon, None, "{no:?}");
            assert_eq!(declined.abandon_declined.as_deref(), Some(no));
        }
    }

    #[test]
    fn a_node_soaks_while_the_slot_of_its_completed_grant_is_held() {
        let done = state(&[("reboot-last-grant", "g1")]);
        assert!(done.soaking(Some("g1")));
        // Another grant's slot, no slot, or the next reboot under way: not soaking.
        assert!(!done.soaking(Some("g2")));
        assert!(!done.soaking(None));
        assert!(!state(&[("reboot-last-grant", "g1"), ("reboot-now", "true")]).soaking(Some("g1")));
        assert!(!state(&[("reboot-last-grant", "g1"), ("reboot-grant", "g1")]).soaking(Some("g1")));
    }

    #[test]
    fn phases_follow_the_protocol() {
        assert_eq!(state(&[("reboot-now", "true")]).phase, Phase::RebootNow);
        assert_eq!(
            state(&[("reboot-in-progress", "true"), ("reboot-boot-id", "b1")]).phase,
            Phase::InProgress {
                boot_id: Some("b1".into())
            }
        );
        assert_eq!(
            state(&[("reboot-done", "true"), ("reboot-now", "true")]).phase,
            Phase::Done { boot_id: None }
        );
        assert!(state(&[("reboot-cordoned", "true")]).cordoned_by_operator);
    }
}
