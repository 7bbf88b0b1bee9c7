//! Which pods a drain evicts, with `kubectl drain` semantics. One rule for the controller's
//! drain and for what `kubectl reboot status` counts as left to evict. Also when a drain stops
//! waiting for a pod whose deletion nobody confirms (a node whose kubelet hangs).

use k8s_openapi::api::core::v1::{Node, Pod};
use std::time::Duration;

/// What a drain does with one pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Disposition {
    /// Owned by a DaemonSet: it would be recreated on the node at once, and it tolerates the
    /// cordon anyway.
    SkipDaemonSet,
    /// A static pod mirrored from the kubelet: the API cannot remove it.
    SkipMirror,
    /// Already finished: it holds nothing.
    SkipFinished,
    /// Evict; `unmanaged` pods have no controller and will not come back.
    Evict { unmanaged: bool },
}

pub fn disposition(pod: &Pod) -> Disposition {
    let owners = pod.metadata.owner_references.as_deref().unwrap_or_default();
    if owners
        .iter()
        .any(|o| o.kind == "DaemonSet" && o.controller == Some(true))
    {
        return Disposition::SkipDaemonSet;
    }
    let annotations = pod.metadata.annotations.as_ref();
    if annotations.is_some_and(|a| a.contains_key("kubernetes.io/config.mirror")) {
        return Disposition::SkipMirror;
    }
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    if matches!(phase, Some("Succeeded" | "Failed")) {
        return Disposition::SkipFinished;
    }
    Disposition::Evict {
        unmanaged: !owners.iter().any(|o| o.controller == Some(true)),
    }
}

/// Whether the node's kubelet reports it Ready (the Ready condition is `True`).
pub fn node_is_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// How long after a drain first saw `pod` terminating it stops waiting for it, if the node is
/// not Ready (`kubectl drain --skip-wait-for-delete-timeout`, bound to NotReady nodes): the
/// pod's grace period plus `margin`. Only the kubelet confirms a deletion; a node whose kubelet
/// hangs never does, and the reboot is what cures it. `None`: the pod is not terminating, or
/// the skip is off (`margin` `None`).
///
/// Counted from when the drain saw the deletion, on its own clock, never from the API
/// server's `deletionTimestamp`: a controller's clock that runs ahead cannot cut a grace
/// period short. A deletion requested earlier waits a little longer, never less.
pub fn unconfirmed_deletion_wait(pod: &Pod, margin: Option<Duration>) -> Option<Duration> {
    let margin = margin?;
    pod.metadata.deletion_timestamp.as_ref()?;
    let grace = pod
        .metadata
        .deletion_grace_period_seconds
        .or_else(|| {
            pod.spec
                .as_ref()
                .and_then(|s| s.termination_grace_period_seconds)
        })
        .unwrap_or(30);
    Some(Duration::from_secs(u64::try_from(grace).unwrap_or(0)) + margin)
}

/// Whether a drain counts `pod` as gone though its deletion is not confirmed: the node is not
/// Ready and the drain has seen the pod terminating for its grace period plus `margin` (see
/// [`unconfirmed_deletion_wait`]). On a Ready node a terminating pod is always waited for.
pub fn counts_as_gone(
    pod: &Pod,
    node_ready: bool,
    seen_terminating_for: Duration,
    margin: Option<Duration>,
) -> bool {
    !node_ready
        && unconfirmed_deletion_wait(pod, margin).is_some_and(|wait| seen_terminating_for >= wait)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_stuck_deletion_counts_as_gone_only_on_a_not_ready_node_after_grace_and_margin() {
        let terminating = pod(json!({"metadata": {"name": "t",
            "deletionTimestamp": "2026-01-01T00:00:00Z", "deletionGracePeriodSeconds": 2}}));
        let running = pod(json!({"metadata": {"name": "r"},
            "spec": {"containers": [], "terminationGracePeriodSeconds": 2}}));
        let margin = Some(Duration::from_secs(1));
        let secs = Duration::from_secs;
        assert_eq!(
            unconfirmed_deletion_wait(&terminating, margin),
            Some(secs(3))
        );
        assert_eq!(unconfirmed_deletion_wait(&running, margin), None);
        assert_eq!(unconfirmed_deletion_wait(&terminating, None), None);
        // (node Ready, seen terminating for, margin) -> counts as gone
        let table = [
            (false, secs(3), margin, true),
            (false, secs(10), margin, true),
            (false, Duration::from_millis(2999), margin, false),
            (true, secs(3600), margin, false),
            (false, secs(3600), None, false),
        ];
        for (ready, seen, margin, gone) in table {
            assert_eq!(
                counts_as_gone(&terminating, ready, seen, margin),
                gone,
                "ready {ready}, seen {seen:?}, margin {margin:?}"
            );
        }
        assert!(!counts_as_gone(&running, false, secs(3600), margin));
        // Without a grace period of its own deletion, the pod's, else Kubernetes' 30 s.
        let spec_grace = pod(
            json!({"metadata": {"name": "s", "deletionTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"containers": [], "terminationGracePeriodSeconds": 5}}),
        );
        assert_eq!(
            unconfirmed_deletion_wait(&spec_grace, margin),
            Some(secs(6))
        );
        let no_grace =
            pod(json!({"metadata": {"name": "n", "deletionTimestamp": "2026-01-01T00:00:00Z"}}));
        assert_eq!(unconfirmed_deletion_wait(&no_grace, margin), Some(secs(31)));
    }

    #[test]
    fn ready_means_the_ready_condition_is_true() {
        let node = |conditions: serde_json::Value| -> Node {
            serde_json::from_value(
                json!({"metadata": {"name": "n"}, "status": {"conditions": conditions}}),
            )
            .unwrap()
        };
        assert!(node_is_ready(&node(
            json!([{"type": "Ready", "status": "True"}])
        )));
        assert!(!node_is_ready(&node(
            json!([{"type": "Ready", "status": "False"}])
        )));
        assert!(!node_is_ready(&node(
            json!([{"type": "Ready", "status": "Unknown"}])
        )));
        assert!(!node_is_ready(&node(json!([]))));
    }

    fn pod(value: serde_json::Value) -> Pod {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn daemonset_mirror_and_finished_pods_stay() {
        let ds = pod(
            json!({"metadata": {"name": "a", "ownerReferences": [{"apiVersion": "apps/v1",
            "kind": "DaemonSet", "name": "d", "uid": "u", "controller": true}]}}),
        );
        assert_eq!(disposition(&ds), Disposition::SkipDaemonSet);
        let mirror = pod(
            json!({"metadata": {"name": "m", "annotations": {"kubernetes.io/config.mirror": "x"}}}),
        );
        assert_eq!(disposition(&mirror), Disposition::SkipMirror);
        let done = pod(json!({"metadata": {"name": "j"}, "status": {"phase": "Succeeded"}}));
        assert_eq!(disposition(&done), Disposition::SkipFinished);
    }

    #[test]
    fn managed_and_bare_pods_are_evicted() {
        let rs = pod(
            json!({"metadata": {"name": "a", "ownerReferences": [{"apiVersion": "apps/v1",
            "kind": "ReplicaSet", "name": "r", "uid": "u", "controller": true}]}}),
        );
        assert_eq!(disposition(&rs), Disposition::Evict { unmanaged: false });
        let bare = pod(json!({"metadata": {"name": "b"}}));
        assert_eq!(disposition(&bare), Disposition::Evict { unmanaged: true });
    }
}
