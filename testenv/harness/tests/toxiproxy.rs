//! The fault proxy in front of the API server: a client through it works with the API server's
//! own certificate, a cut stops its requests, removing the cut heals, and a disabled proxy
//! refuses connections.

mod common;

use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use kube::{Api, Config, config::KubeConfigOptions, config::Kubeconfig};
use testenv::toxiproxy::{Stream, Toxic, Toxiproxy};

async fn client_of(kubeconfig: &std::path::Path) -> kube::Client {
    let kubeconfig = Kubeconfig::read_from(kubeconfig).expect("read the proxied kubeconfig");
    let mut config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .expect("a config");
    // A cut shows as a request that does not finish: give up soon.
    config.connect_timeout = Some(Duration::from_secs(2));
    config.read_timeout = Some(Duration::from_secs(2));
    kube::Client::try_from(config).expect("a client")
}

#[tokio::test]
async fn a_client_through_the_proxy_is_cut_and_healed() {
    let cp = common::start(common::apiserver_only()).await;
    let toxiproxy = Toxiproxy::start(cp.dir()).await.expect("toxiproxy starts");
    let proxy = toxiproxy
        .proxy_to_apiserver(&cp, "program")
        .await
        .expect("a proxy to the API server");
    let kubeconfig = proxy.kubeconfig().expect("a kubeconfig").to_path_buf();
    assert!(
        std::fs::read_to_string(&kubeconfig)
            .unwrap()
            .contains(&proxy.listen().to_string()),
        "the kubeconfig names the proxy"
    );
    let namespaces: Api<Namespace> = Api::all(client_of(&kubeconfig).await);
    namespaces
        .get("default")
        .await
        .expect("through the proxy, with the API server's certificate");

    // Fresh clients each time: a pooled connection would keep what it learnt.
    proxy
        .add(&Toxic::timeout("cut", Stream::Upstream, 0))
        .await
        .expect("add a cut");
    let cut: Api<Namespace> = Api::all(client_of(&kubeconfig).await);
    cut.get("default")
        .await
        .expect_err("nothing gets through the cut");

    proxy.remove("cut").await.expect("remove the cut");
    let healed: Api<Namespace> = Api::all(client_of(&kubeconfig).await);
    healed.get("default").await.expect("healed");

    proxy.set_enabled(false).await.expect("disable");
    let refused: Api<Namespace> = Api::all(client_of(&kubeconfig).await);
    refused
        .get("default")
        .await
        .expect_err("a disabled proxy refuses");
    proxy.set_enabled(true).await.expect("enable");
    let again: Api<Namespace> = Api::all(client_of(&kubeconfig).await);
    again.get("default").await.expect("enabled again");

    let unknown = proxy
        .remove("no-such-toxic")
        .await
        .expect_err("unknown toxic");
    assert!(unknown.to_string().contains("404"), "{unknown}");
}
