//! Which pods a drain evicts, with `kubectl drain` semantics. One rule for the controller's
//! drain and for what `kubectl reboot status` counts as left to evict.

use k8s_openapi::api::core::v1::Pod;

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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
