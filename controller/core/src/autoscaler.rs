//! Cluster autoscalers remove nodes: cluster-autoscaler taints a node it is deleting with
//! `ToBeDeletedByClusterAutoscaler`, Karpenter one it is disrupting with `karpenter.sh/disrupted`
//! (`karpenter.sh/disruption` before v1). A reboot started on such a node would race its
//! removal: it is not granted while the taint is there.

use common::NodeFacts;

/// The taints that say an autoscaler is removing the node.
pub const REMOVAL_TAINTS: [&str; 3] = [
    "ToBeDeletedByClusterAutoscaler",
    "karpenter.sh/disrupted",
    "karpenter.sh/disruption",
];

/// The taint by which an autoscaler says it is removing the node, if it has one.
pub fn removal_taint(facts: &NodeFacts) -> Option<&str> {
    let taints = facts.taints.as_deref().unwrap_or_default();
    taints
        .iter()
        .map(|(key, _)| key.as_str())
        .find(|key| REMOVAL_TAINTS.contains(key))
}

#[cfg(test)]
mod tests {
    use super::*;
    use common::test_util::NodeBuilder;

    #[test]
    fn the_taints_of_both_autoscalers_are_read_and_no_other() {
        for key in REMOVAL_TAINTS {
            let facts = NodeBuilder::new("n").taint(key, "NoSchedule").facts();
            assert_eq!(removal_taint(&facts), Some(key));
        }
        let other = NodeBuilder::new("n")
            .taint("example.com/gpu", "NoSchedule")
            .facts();
        assert_eq!(removal_taint(&other), None);
        assert_eq!(removal_taint(&NodeBuilder::new("n").facts()), None);
    }
}
