//! An administrator asks every node for a reboot at once, and the scenario waits until the
//! controller has told each node something (an Event, as `kubectl describe node` shows it):
//! that a gate holds it, that the pool is paused, that it waits for the window.

use crate::{BudgetWatch, has_event, kubectl, wait_until};
use common::Reason;
use kube::Client;
use nodesim::sandbox::Sandbox;
use std::time::Duration;

/// `kubectl annotate nodes --all reboot-needed=true`.
pub fn request(cp: &testenv::ControlPlane) {
    kubectl(cp, &["annotate", "nodes", "--all", "reboot-needed=true"]);
}

/// Waits (up to `timeout`) until each of `names` has an Event with this reason whose message
/// contains every one of `words` (none: any message); fails at once on a budget violation.
pub async fn wait_for_event(
    client: &Client,
    names: &[String],
    reason: impl Reason,
    words: &[&str],
    timeout: Duration,
    budget: Option<&BudgetWatch>,
) {
    // No node would make the wait pass at once, having looked at nothing.
    assert!(!names.is_empty(), "wait_for_event needs at least one node");
    let what = format!("every node of {names:?} has a {reason} Event mentioning {words:?}");
    wait_until(&what, timeout, budget, || async {
        for name in names {
            if !has_event(client, name, reason, words).await {
                return false;
            }
        }
        true
    })
    .await;
}

/// [`request`], then [`wait_for_event`] on every node of the sandbox.
pub async fn request_and_wait_for_event(
    sb: &Sandbox,
    reason: impl Reason,
    words: &[&str],
    timeout: Duration,
    budget: Option<&BudgetWatch>,
) {
    request(&sb.control_plane);
    let names = sb.fleet.names();
    wait_for_event(&sb.client, &names, reason, words, timeout, budget).await;
}
