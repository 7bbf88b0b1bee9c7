//! A ServiceAccount per measured program, so that the API server's audit log tells the
//! controller's requests from the agent's (and from the benchmark's own, made as the admin).

use anyhow::Context;
use k8s_openapi::api::{
    authentication::v1::TokenRequest, core::v1::ServiceAccount, rbac::v1::ClusterRoleBinding,
};
use kube::{Api, Client, api::PostParams};
use serde_json::json;
use std::path::{Path, PathBuf};
use testenv::ControlPlane;

/// Namespace of the benchmark's ServiceAccounts; the audit policy logs exactly this group.
pub const NAMESPACE: &str = "bench";

/// One program's identity.
#[derive(Debug, Clone)]
pub struct Identity {
    /// `system:serviceaccount:bench:<name>`, as the audit log names it.
    pub user: String,
    /// A kubeconfig straight to the API server with this identity's token.
    pub kubeconfig: PathBuf,
}

/// Creates `object` unless it exists already.
pub async fn create_or_keep<K>(api: &Api<K>, object: serde_json::Value) -> anyhow::Result<()>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let object: K = serde_json::from_value(object)?;
    match api.create(&PostParams::default(), &object).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.is_already_exists() => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Creates ServiceAccount `bench/<name>` with cluster-admin rights (what the program may do is
/// not what is measured here), and a kubeconfig with a token of it.
pub async fn service_account(
    control_plane: &ControlPlane,
    admin: &Client,
    name: &str,
    dir: &Path,
) -> anyhow::Result<Identity> {
    nodesim::sandbox::create_namespace(admin, NAMESPACE).await?;
    let accounts: Api<ServiceAccount> = Api::namespaced(admin.clone(), NAMESPACE);
    create_or_keep(&accounts, json!({"metadata": {"name": name}})).await?;
    create_or_keep(
        &Api::<ClusterRoleBinding>::all(admin.clone()),
        json!({
            "metadata": {"name": format!("bench:{name}")},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": NAMESPACE}],
        }),
    )
    .await?;
    let request: TokenRequest = serde_json::from_value(json!({
        "spec": {"audiences": [], "expirationSeconds": 4 * 3600}
    }))?;
    let token = accounts
        .create_token_request(name, &PostParams::default(), &request)
        .await?
        .status
        .and_then(|s| s.token)
        .context("the TokenRequest returned no token")?;
    std::fs::create_dir_all(dir)?;
    let kubeconfig = dir.join(format!("{name}.kubeconfig"));
    control_plane.write_kubeconfig_for_token(&token, &kubeconfig)?;
    Ok(Identity {
        user: format!("system:serviceaccount:{NAMESPACE}:{name}"),
        kubeconfig,
    })
}
