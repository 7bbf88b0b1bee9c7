//! Acceptance: RBAC is enforced, and TokenRequest issues node-bound tokens.

mod common;

use std::process::Command;

use common::{create, run};
use k8s_openapi::api::authentication::v1::{SelfSubjectReview, TokenRequest};
use k8s_openapi::api::core::v1::{Namespace, Node, Pod, ServiceAccount};
use kube::Api;
use kube::api::{ListParams, PostParams};
use serde_json::json;
use testenv::ControlPlane;

async fn token_for(cp: &ControlPlane, ns: &str, sa: &str, bound: serde_json::Value) -> String {
    let accounts: Api<ServiceAccount> = Api::namespaced(cp.client().await.expect("client"), ns);
    let request: TokenRequest = common::object(json!({
        "spec": {"audiences": [], "expirationSeconds": 600, "boundObjectRef": bound}
    }));
    let response = accounts
        .create_token_request(sa, &PostParams::default(), &request)
        .await
        .expect("TokenRequest");
    response.status.and_then(|s| s.token).expect("a token")
}

#[tokio::test]
async fn a_service_account_without_bindings_may_not_list_nodes() {
    let cp = common::start(common::apiserver_only()).await;
    let client = cp.client().await.expect("admin client");
    create(
        &Api::<Namespace>::all(client.clone()),
        json!({"metadata": {"name": "rbac"}}),
    )
    .await;
    create(
        &Api::<ServiceAccount>::namespaced(client, "rbac"),
        json!({"metadata": {"name": "nobody"}}),
    )
    .await;

    let nobody = run(cp.kubectl().args([
        "auth",
        "can-i",
        "list",
        "nodes",
        "--as=system:serviceaccount:rbac:nobody",
    ]));
    assert_eq!(String::from_utf8_lossy(&nobody.stdout).trim(), "no");
    assert!(
        !nobody.status.success(),
        "`kubectl auth can-i` exits non-zero for no"
    );
    let admin = run(cp.kubectl().args(["auth", "can-i", "list", "nodes"]));
    assert_eq!(
        String::from_utf8_lossy(&admin.stdout).trim(),
        "yes",
        "the admin may list nodes"
    );

    let token = token_for(&cp, "rbac", "nobody", serde_json::Value::Null).await;
    let kubeconfig = cp.dir().join("nobody.kubeconfig");
    cp.write_kubeconfig_for_token(&token, &kubeconfig)
        .expect("kubeconfig");
    let kubectl = testenv::ControlPlane::bin("kubectl").expect("kubectl");
    let denied = run(Command::new(kubectl)
        .arg(format!("--kubeconfig={}", kubeconfig.display()))
        .args(["get", "nodes"]));
    let stderr = String::from_utf8_lossy(&denied.stderr);
    assert!(
        !denied.status.success() && stderr.contains("forbidden"),
        "kubectl get nodes as nobody: {stderr}"
    );

    let as_nobody = cp
        .client_for_token(&token)
        .await
        .expect("client for the token");
    match Api::<Node>::all(as_nobody)
        .list(&ListParams::default())
        .await
    {
        Err(kube::Error::Api(status)) => assert_eq!(status.code, 403, "{status:?}"),
        other => panic!("expected 403 Forbidden, got {other:?}"),
    }
}

#[tokio::test]
async fn a_token_bound_to_a_pod_on_a_node_names_the_node() {
    let cp = common::start(common::apiserver_only()).await;
    let client = cp.client().await.expect("admin client");
    create(
        &Api::<Node>::all(client.clone()),
        json!({"metadata": {"name": "node-a"}}),
    )
    .await;
    create(
        &Api::<ServiceAccount>::default_namespaced(client.clone()),
        json!({"metadata": {"name": "agent"}}),
    )
    .await;
    let pod: Pod = create(
        &Api::default_namespaced(client),
        json!({
            "metadata": {"name": "agent-node-a"},
            "spec": {
                "serviceAccountName": "agent",
                "nodeName": "node-a",
                "containers": [{"name": "agent", "image": "registry.k8s.io/pause:3.10"}]
            }
        }),
    )
    .await;

    let bound =
        json!({"kind": "Pod", "apiVersion": "v1", "name": "agent-node-a", "uid": pod.metadata.uid});
    let token = token_for(&cp, "default", "agent", bound).await;
    let as_agent = cp
        .client_for_token(&token)
        .await
        .expect("client for the token");
    let review = Api::<SelfSubjectReview>::all(as_agent)
        .create(&PostParams::default(), &SelfSubjectReview::default())
        .await
        .expect("SelfSubjectReview with the bound token");

    let user = review.status.and_then(|s| s.user_info).expect("user info");
    assert_eq!(
        user.username.as_deref(),
        Some("system:serviceaccount:default:agent")
    );
    let extra = user.extra.unwrap_or_default();
    assert_eq!(
        extra.get("authentication.kubernetes.io/node-name"),
        Some(&vec!["node-a".to_owned()]),
        "{extra:?}"
    );
    assert_eq!(
        extra.get("authentication.kubernetes.io/pod-name"),
        Some(&vec!["agent-node-a".to_owned()]),
        "{extra:?}"
    );
}
