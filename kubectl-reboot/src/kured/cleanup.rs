//! `migrate-from-kured --cleanup`: once kured is gone, what its configuration says it put on
//! the nodes comes off: its PreferNoSchedule taint, its pre- and post-reboot labels (with the
//! values it set), and with `--annotate-nodes` its two node annotations. Anything else on a
//! node, an administrator's label of the same key with another value included, stays. Each
//! node's write is a JSON Patch that tests every value it removes, so a concurrent change makes
//! it fail and be decided again.

use super::flags::{IN_PROGRESS_ANNOTATION, MOST_RECENT_ANNOTATION};
use super::is_kured_image;
use crate::actions::ATTEMPTS;
use crate::error::{Error, is_stale};
use json_patch::{
    Patch, PatchOperation, RemoveOperation, TestOperation,
    jsonptr::{PointerBuf, Token},
};
use k8s_openapi::api::{
    apps::v1::DaemonSet,
    core::v1::{Node, Pod},
};
use kube::{
    Api, Client,
    api::{ListParams, Patch as KubePatch, PatchParams},
};
use std::collections::BTreeMap;

/// What kured's configuration says it set on nodes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KuredMarks {
    /// `--prefer-no-schedule-taint`.
    pub taint: Option<String>,
    /// `--pre-reboot-node-labels` and `--post-reboot-node-labels`, as key and value.
    pub labels: Vec<(String, String)>,
    /// `--annotate-nodes`.
    pub annotations: bool,
}

/// One node's write: the patch and what it removes, for people.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeCleanup {
    pub patch: Patch,
    pub removed: Vec<String>,
}

fn pointer(tokens: &[&str]) -> PointerBuf {
    PointerBuf::from_tokens(tokens.iter().map(|t| Token::new(*t)))
}

fn test_and_remove(ops: &mut Vec<PatchOperation>, path: PointerBuf, value: serde_json::Value) {
    ops.push(PatchOperation::Test(TestOperation {
        path: path.clone(),
        value,
    }));
    ops.push(PatchOperation::Remove(RemoveOperation { path }));
}

/// What comes off `node`, or `None` when nothing of kured's is on it.
pub fn plan(marks: &KuredMarks, node: &Node) -> Option<NodeCleanup> {
    let mut ops = Vec::new();
    let mut removed = Vec::new();
    let empty = BTreeMap::new();
    let labels = node.metadata.labels.as_ref().unwrap_or(&empty);
    let mut seen = std::collections::BTreeSet::new();
    for (key, value) in &marks.labels {
        if labels.get(key) == Some(value) && seen.insert(key.clone()) {
            test_and_remove(
                &mut ops,
                pointer(&["metadata", "labels", key]),
                value.clone().into(),
            );
            removed.push(format!("label {key}={value}"));
        }
    }
    if marks.annotations {
        let annotations = node.metadata.annotations.as_ref().unwrap_or(&empty);
        for key in [IN_PROGRESS_ANNOTATION, MOST_RECENT_ANNOTATION] {
            if let Some(value) = annotations.get(key) {
                test_and_remove(
                    &mut ops,
                    pointer(&["metadata", "annotations", key]),
                    value.clone().into(),
                );
                removed.push(format!("annotation {key}"));
            }
        }
    }
    if let Some(name) = &marks.taint {
        let taints = node
            .spec
            .as_ref()
            .and_then(|s| s.taints.as_ref())
            .map(Vec::as_slice)
            .unwrap_or_default();
        // From the last, so that each index still points where it did.
        for (index, taint) in taints.iter().enumerate().rev() {
            if taint.key == *name && taint.effect == "PreferNoSchedule" {
                let Ok(value) = serde_json::to_value(taint) else {
                    continue;
                };
                let index = index.to_string();
                test_and_remove(&mut ops, pointer(&["spec", "taints", &index]), value);
                removed.push(format!("taint {name}:PreferNoSchedule"));
            }
        }
    }
    (!ops.is_empty()).then_some(NodeCleanup {
        patch: Patch(ops),
        removed,
    })
}

/// Whether kured still runs: the DaemonSets and Pods of kured's image, by name.
pub fn still_running(daemonsets: &[DaemonSet], pods: &[Pod]) -> Vec<String> {
    let image_of = |spec: Option<&k8s_openapi::api::core::v1::PodSpec>| {
        spec.into_iter()
            .flat_map(|s| s.containers.iter())
            .any(|c| c.image.as_deref().is_some_and(is_kured_image))
    };
    let id = |kind: &str, m: &kube::api::ObjectMeta| {
        format!(
            "{kind} {}/{}",
            m.namespace.as_deref().unwrap_or_default(),
            m.name.as_deref().unwrap_or_default()
        )
    };
    daemonsets
        .iter()
        .filter(|ds| image_of(ds.spec.as_ref().and_then(|s| s.template.spec.as_ref())))
        .map(|ds| id("DaemonSet", &ds.metadata))
        .chain(
            pods.iter()
                .filter(|p| image_of(p.spec.as_ref()))
                .map(|p| id("Pod", &p.metadata)),
        )
        .collect()
}

const NEEDS: &str = "list on daemonsets and pods, and get, list and patch on nodes (the \
                     cluster-admin role)";

/// Removes kured's marks from every node, one line a node on `say`; refuses while kured runs.
pub async fn run(
    client: &Client,
    marks: &KuredMarks,
    dry_run: bool,
    say: impl Fn(&str),
) -> Result<(), Error> {
    let fail = |what: &str| Error::api(what.to_owned(), "migrate-from-kured --cleanup", NEEDS);
    let daemonsets = Api::<DaemonSet>::all(client.clone())
        .list(&ListParams::default())
        .await
        .map_err(fail("list the DaemonSets"))?
        .items;
    let pods = Api::<Pod>::all(client.clone())
        .list(&ListParams::default())
        .await
        .map_err(fail("list the Pods"))?
        .items;
    let running = still_running(&daemonsets, &pods);
    if !running.is_empty() {
        return Err(Error::Kured(format!(
            "kured still runs ({}): it would put back what --cleanup removes. Remove it first \
             (`helm uninstall kured -n <namespace>`, or `kubectl delete daemonset -n \
             <namespace> <name>`), wait for its pods to go, then run --cleanup again",
            running.join(", ")
        )));
    }
    let nodes: Api<Node> = Api::all(client.clone());
    let list = nodes
        .list(&ListParams::default())
        .await
        .map_err(fail("list the nodes"))?;
    let verb = if dry_run { "would remove" } else { "removed" };
    let mut changed = 0;
    for node in list.items {
        let name = node.metadata.name.clone().unwrap_or_default();
        let mut current = node;
        let mut attempt = 0;
        while let Some(cleanup) = plan(marks, &current) {
            if dry_run {
                say(&format!(
                    "node/{name}: {verb} {}",
                    cleanup.removed.join(", ")
                ));
                changed += 1;
                break;
            }
            let written = nodes
                .patch(
                    &name,
                    &PatchParams::default(),
                    &KubePatch::Json::<()>(cleanup.patch),
                )
                .await;
            match written {
                Ok(_) => {
                    say(&format!(
                        "node/{name}: {verb} {}",
                        cleanup.removed.join(", ")
                    ));
                    changed += 1;
                    break;
                }
                Err(e) if is_stale(&e) && attempt + 1 < ATTEMPTS => {
                    attempt += 1;
                    current = nodes
                        .get(&name)
                        .await
                        .map_err(fail(&format!("read node/{name}")))?;
                }
                Err(e) => return Err(fail(&format!("patch node/{name}"))(e)),
            }
        }
    }
    if changed == 0 {
        say("nothing of kured's configuration is left on any node");
    }
    say("kured's lock annotation lived on its DaemonSet and went with it");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(value: serde_json::Value) -> Node {
        serde_json::from_value(value).expect("a Node")
    }

    fn marks() -> KuredMarks {
        KuredMarks {
            taint: Some("weave.works/kured-node-reboot".into()),
            labels: vec![("lb".into(), "out".into()), ("lb".into(), "in".into())],
            annotations: true,
        }
    }

    #[test]
    fn only_what_kureds_configuration_set_comes_off() {
        let n = node(json!({
            "metadata": {"name": "n1",
                "labels": {"lb": "in", "team": "a"},
                "annotations": {IN_PROGRESS_ANNOTATION: "2026-01-01T00:00:00Z", "mine": "x"}},
            "spec": {"taints": [
                {"key": "weave.works/kured-node-reboot", "effect": "PreferNoSchedule"},
                {"key": "dedicated", "value": "db", "effect": "NoSchedule"},
                {"key": "weave.works/kured-node-reboot", "effect": "NoSchedule"}]}
        }));
        let cleanup = plan(&marks(), &n).expect("something of kured's");
        assert_eq!(
            cleanup.removed,
            [
                "label lb=in",
                "annotation weave.works/kured-reboot-in-progress",
                "taint weave.works/kured-node-reboot:PreferNoSchedule"
            ]
        );
        let mut after = serde_json::to_value(&n).expect("json");
        json_patch::patch(&mut after, &cleanup.patch).expect("the patch applies");
        assert_eq!(after["metadata"]["labels"], json!({"team": "a"}));
        assert_eq!(after["metadata"]["annotations"], json!({"mine": "x"}));
        assert_eq!(after["spec"]["taints"].as_array().map(Vec::len), Some(2));
    }

    #[test]
    fn an_administrators_label_of_the_same_key_stays_and_a_changed_node_fails_the_test() {
        let n = node(json!({"metadata": {"name": "n1", "labels": {"lb": "maintenance"}}}));
        assert_eq!(plan(&marks(), &n), None);
        let n = node(json!({"metadata": {"name": "n1", "labels": {"lb": "in"}}}));
        let cleanup = plan(&marks(), &n).expect("the label");
        let mut changed = json!({"metadata": {"name": "n1", "labels": {"lb": "maintenance"}}});
        assert!(json_patch::patch(&mut changed, &cleanup.patch).is_err());
    }

    #[test]
    fn kured_is_still_running_while_a_daemonset_or_pod_of_its_image_exists() {
        let ds: DaemonSet = serde_json::from_value(json!({"metadata": {"namespace": "kube-system", "name": "kured"},
            "spec": {"selector": {}, "template": {"spec": {"containers": [{"name": "k", "image": "ghcr.io/kubereboot/kured:1.23.0"}]}}}}))
            .expect("ds");
        let pod: Pod =
            serde_json::from_value(json!({"metadata": {"namespace": "x", "name": "kured-abc"},
            "spec": {"containers": [{"name": "k", "image": "weaveworks/kured"}]}}))
            .expect("pod");
        assert_eq!(
            still_running(&[ds], &[pod]),
            ["DaemonSet kube-system/kured", "Pod x/kured-abc"]
        );
        assert!(still_running(&[], &[]).is_empty());
    }
}
