//! `abandon`: asks the controller to give a node up. The plugin writes only the request
//! (`reboot-abandon`, who and why); the controller clears the protocol under the node's
//! grant, releases the slot through the ledger and removes its own cordon, so that no slot is
//! freed behind the back of a controller that is still driving the node.

use crate::{
    actions::{read_node, write_node},
    error::Error,
};
use common::{AnnotationKeys, NodeFacts, Phase, Readiness, abandon::Abandon};
use json_patch::Patch;
use k8s_openapi::api::core::v1::Node;
use kube::{Api, Client};

/// What `abandon` does to one node.
#[derive(Debug, Clone, PartialEq)]
pub enum AbandonPlan {
    /// Nothing of the protocol on it: nothing to give up.
    NotInProtocol,
    /// A request to give it up is there already (`who`).
    Already(String),
    /// Write this; say `note` (something the administrator should know), if any.
    Write { patch: Patch, note: Option<String> },
}

/// Decided on `node` as read: the request is added only while the node is that version, so
/// a node that finished its reboot meanwhile is decided again.
pub fn abandon(keys: &AnnotationKeys, node: &NodeFacts, request: &Abandon) -> AbandonPlan {
    let state = node.protocol(keys);
    if let Some(value) = &state.abandon {
        return AbandonPlan::Already(Abandon::read(value).describe());
    }
    if !state.anything_to_abandon() {
        return AbandonPlan::NotInProtocol;
    }
    let patch = common::Transition::new(keys).request_abandon(node, request);
    AbandonPlan::Write {
        patch,
        note: may_still_go_down(&state.phase, node.readiness),
    }
}

/// The agent does not start a reboot of a node being given up, but one it has started may
/// still take the node down, and so may one whose go-ahead it takes before this request lands
/// (its write of `reboot-in-progress` holds only on the node it read, without the request).
fn may_still_go_down(phase: &Phase, readiness: Readiness) -> Option<String> {
    if readiness != Readiness::Ready {
        return None;
    }
    let what = match phase {
        Phase::RebootNow => {
            "it is told to reboot (reboot-now): its agent may take the go-ahead before this \
             request lands"
        }
        Phase::InProgress { .. } => "its agent has started a reboot",
        Phase::Idle | Phase::Done { .. } => return None,
    };
    Some(format!(
        "note: the node is Ready and {what}: the machine may still go down after it is given \
         up, outside the budget"
    ))
}

/// Gives one node up; what was done, for the administrator.
pub async fn abandon_node(
    client: &Client,
    keys: &AnnotationKeys,
    name: &str,
    by: &str,
    reason: &str,
) -> Result<String, Error> {
    let api: Api<Node> = Api::all(client.clone());
    let request = Abandon {
        by: by.to_owned(),
        reason: reason.to_owned(),
    };
    for _ in 0..crate::actions::ATTEMPTS {
        let node = NodeFacts::from_node(&read_node(&api, name, "abandon").await?);
        let (patch, note) = match abandon(keys, &node, &request) {
            AbandonPlan::NotInProtocol => return Err(Error::NotInProtocol(name.to_owned())),
            AbandonPlan::Already(who) => {
                return Ok(format!(
                    "node/{name} is already being given up ({who}); `kubectl reboot status` \
                     shows when it is done"
                ));
            }
            AbandonPlan::Write { patch, note } => (patch, note),
        };
        if write_node(&api, name, patch, "abandon").await? {
            let note = note.map(|n| format!("\n{n}")).unwrap_or_default();
            return Ok(format!(
                "node/{name} given up {} ({} written): the controller releases its slot, \
                 uncordons it if it cordoned it and clears the protocol's annotations; a \
                 RebootAbandoned Event records it (kubectl get events --field-selector \
                 involvedObject.name={name},reason=RebootAbandoned){note}",
                request.describe(),
                keys.abandon
            ));
        }
    }
    Err(crate::actions::changing(name))
}

#[cfg(test)]
mod tests {
    use super::*;
    use common::test_util::NodeBuilder;
    use serde_json::json;

    /// A node `n1` at version 42 with these annotations.
    fn node(annotations: &[(&str, &str)], readiness: Readiness) -> NodeFacts {
        NodeBuilder::new("n1")
            .resource_version("42")
            .readiness(readiness)
            .annotations(annotations)
            .facts()
    }

    fn alice() -> Abandon {
        Abandon {
            by: "alice".into(),
            reason: "disk dead".into(),
        }
    }

    #[test]
    fn a_node_in_the_protocol_gets_the_request_only_while_unchanged() {
        let keys = AnnotationKeys::default();
        let lost = node(
            &[("reboot-in-progress", "true"), ("reboot-grant", "g")],
            Readiness::NotReady,
        );
        let AbandonPlan::Write { patch, note } = abandon(&keys, &lost, &alice()) else {
            panic!("a write")
        };
        assert_eq!(note, None);
        let mut obj = json!({"metadata": {"resourceVersion": "42",
            "annotations": {"reboot-in-progress": "true", "reboot-grant": "g"}}});
        json_patch::patch(&mut obj, &patch).unwrap();
        let written = obj["metadata"]["annotations"]["reboot-abandon"]
            .as_str()
            .unwrap();
        assert_eq!(Abandon::read(written), alice());
        // It completed meanwhile: decided again.
        let mut changed = json!({"metadata": {"resourceVersion": "43", "annotations": {}}});
        assert!(json_patch::patch(&mut changed, &patch).is_err());
    }

    #[test]
    fn nothing_to_give_up_twice_given_up_and_a_reboot_that_may_still_happen() {
        let keys = AnnotationKeys::default();
        let idle = node(&[("reboot-last-completed", "t")], Readiness::Ready);
        assert_eq!(abandon(&keys, &idle, &alice()), AbandonPlan::NotInProtocol);
        let pending = node(
            &[("reboot-needed", "true"), ("reboot-abandon", "replaced")],
            Readiness::Ready,
        );
        assert!(matches!(
            abandon(&keys, &pending, &alice()),
            AbandonPlan::Already(who) if who.contains("replaced")
        ));
        let rebooting = node(&[("reboot-in-progress", "true")], Readiness::Ready);
        let AbandonPlan::Write { note, .. } = abandon(&keys, &rebooting, &alice()) else {
            panic!("a write")
        };
        assert!(note.unwrap().contains("may still go down"));
    }

    /// Told to reboot: its agent may have taken the go-ahead before the request to give it up
    /// lands, and then reboots it. A NotReady node is down already: nothing more to say.
    #[test]
    fn a_node_told_to_reboot_may_still_go_down() {
        let keys = AnnotationKeys::default();
        let told = [("reboot-now", "true"), ("reboot-grant", "g")];
        let AbandonPlan::Write { note, .. } =
            abandon(&keys, &node(&told, Readiness::Ready), &alice())
        else {
            panic!("a write")
        };
        let note = note.expect("a note");
        assert!(
            note.contains("told to reboot") && note.contains("may still go down"),
            "{note}"
        );
        let AbandonPlan::Write { note, .. } =
            abandon(&keys, &node(&told, Readiness::NotReady), &alice())
        else {
            panic!("a write")
        };
        assert_eq!(note, None);
    }
}
