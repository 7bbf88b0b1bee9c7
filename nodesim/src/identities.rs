//! Least-privilege identities for the simulated programs: ServiceAccount tokens from the
//! TokenRequest API, written into kubeconfigs. An agent's token is bound to a Pod of the agent
//! DaemonSet on its node, as the kubelet's projected token is in a cluster, so that it carries
//! the `authentication.kubernetes.io/node-name` claim that the admission policy checks.

use crate::{Error, fleet::AgentKubeconfig};
use k8s_openapi::api::{
    apps::v1::DaemonSet,
    authentication::v1::TokenRequest,
    core::v1::{Node, Pod, ServiceAccount},
};
use kube::{Api, Client, Resource, ResourceExt, api::PostParams};
use serde_json::json;
use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    sync::Arc,
};
use testenv::ControlPlane;

/// Long enough for any test or demo; the API server may shorten it, never below 10 minutes.
const TOKEN_SECONDS: i64 = 3600;

fn from_json<T: k8s_openapi::serde::de::DeserializeOwned>(
    value: serde_json::Value,
) -> Result<T, Error> {
    serde_json::from_value(value).map_err(|e| Error::Setup(e.to_string()))
}

/// A token of ServiceAccount `namespace/name`, bound to `pod` when given (then it lives only
/// as long as the pod, and names the pod's node if that Node exists now).
pub async fn request_token(
    client: &Client,
    namespace: &str,
    name: &str,
    pod: Option<&Pod>,
) -> Result<String, Error> {
    let bound = pod
        .map(|p| json!({"apiVersion": "v1", "kind": "Pod", "name": p.name_any(), "uid": p.uid()}));
    let request: TokenRequest = from_json(json!({
        "spec": {"audiences": [], "expirationSeconds": TOKEN_SECONDS, "boundObjectRef": bound}
    }))?;
    Api::<ServiceAccount>::namespaced(client.clone(), namespace)
        .create_token_request(name, &PostParams::default(), &request)
        .await?
        .status
        .and_then(|s| s.token)
        .ok_or_else(|| {
            Error::Setup(format!(
                "TokenRequest for {namespace}/{name} returned no token"
            ))
        })
}

/// Creates the Node unless it exists, with the labels the simulator gives it: a token bound
/// to a pod names the pod's node only if the Node exists when the token is issued, so tests
/// create the Nodes before the tokens and the fleet after them.
pub async fn ensure_node(client: &Client, name: &str) -> Result<(), Error> {
    let node: Node = from_json(json!({"metadata": {"name": name, "labels": {
        "kubernetes.io/hostname": name, "kubernetes.io/os": "linux"}}}))?;
    match Api::<Node>::all(client.clone())
        .create(&PostParams::default(), &node)
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.is_already_exists() => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// The pod that the DaemonSet controller would run on `node`: the template, bound to the node
/// and owned by the DaemonSet (so that a drain skips it, as it skips every DaemonSet pod).
pub fn daemonset_pod(daemonset: &DaemonSet, node: &str) -> Result<Pod, Error> {
    let template = daemonset
        .spec
        .as_ref()
        .map(|s| s.template.clone())
        .ok_or_else(|| Error::Setup(format!("DaemonSet {} has no spec", daemonset.name_any())))?;
    let mut pod: Pod = from_json(json!({
        "metadata": template.metadata.unwrap_or_default(),
        "spec": template.spec.unwrap_or_default(),
    }))?;
    pod.metadata.name = Some(format!("{}-{node}", daemonset.name_any()));
    pod.metadata.namespace = daemonset.namespace();
    pod.metadata.owner_references = daemonset.controller_owner_ref(&()).map(|r| vec![r]);
    if let Some(spec) = pod.spec.as_mut() {
        spec.node_name = Some(node.to_owned());
    }
    Ok(pod)
}

/// For each node: the DaemonSet's pod on it, a token bound to that pod, and a kubeconfig
/// `<dir>/<node>.kubeconfig` with it. The Nodes must exist ([`ensure_node`]). Returns what
/// [`crate::FleetConfig::agent_kubeconfig`] takes.
pub async fn agent_kubeconfigs(
    control_plane: &ControlPlane,
    client: &Client,
    daemonset: &DaemonSet,
    nodes: &[String],
    dir: &Path,
) -> Result<AgentKubeconfig, Error> {
    std::fs::create_dir_all(dir).map_err(Error::io(format!("create {}", dir.display())))?;
    let namespace = daemonset.namespace().unwrap_or_default();
    let service_account = daemonset
        .spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .and_then(|s| s.service_account_name.clone())
        .unwrap_or_else(|| "default".to_owned());
    let pods: Api<Pod> = Api::namespaced(client.clone(), &namespace);
    let mut paths = BTreeMap::new();
    for node in nodes {
        let pod = pods
            .create(&PostParams::default(), &daemonset_pod(daemonset, node)?)
            .await?;
        let token = request_token(client, &namespace, &service_account, Some(&pod)).await?;
        let path = dir.join(format!("{node}.kubeconfig"));
        control_plane.write_kubeconfig_for_token(&token, &path)?;
        paths.insert(node.clone(), path);
    }
    let fallback = dir.join("missing.kubeconfig");
    Ok(Arc::new(move |node: &str| {
        paths.get(node).cloned().unwrap_or_else(|| fallback.clone())
    }))
}

/// A kubeconfig at `path` with a token of ServiceAccount `namespace/name`, bound to nothing.
pub async fn service_account_kubeconfig(
    control_plane: &ControlPlane,
    client: &Client,
    namespace: &str,
    name: &str,
    path: &Path,
) -> Result<PathBuf, Error> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(Error::io(format!("create {}", dir.display())))?;
    }
    let token = request_token(client, namespace, name, None).await?;
    control_plane.write_kubeconfig_for_token(&token, path)?;
    Ok(path.to_path_buf())
}
