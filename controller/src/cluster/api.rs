//! The two parts of the API server a controller round writes through, as small traits: the
//! Nodes (patch, read) and the slot ledger's Lease (read, create, compare-and-swap). In
//! production they are kube's `Api`; the model test of the controller puts its model API
//! server behind them and runs the real rounds against it.

use futures::{FutureExt, future::BoxFuture};
use k8s_openapi::api::{coordination::v1::Lease, core::v1::Node};
use kube::{
    Api,
    api::{Patch, PatchParams, PostParams},
};

/// Node writes and reads.
pub trait NodeApi: Send + Sync {
    /// A JSON Patch (its `test` operations make it a compare-and-swap on what it reads).
    fn patch(&self, name: &str, patch: json_patch::Patch) -> BoxFuture<'_, kube::Result<Node>>;
    /// The node as it is now; `None` when it does not exist.
    fn get(&self, name: &str) -> BoxFuture<'_, kube::Result<Option<Node>>>;
}

/// The ledger Lease, by name, in its namespace.
pub trait LeaseApi: Send + Sync {
    fn get(&self, name: &str) -> BoxFuture<'_, kube::Result<Option<Lease>>>;
    /// Refused with AlreadyExists when the Lease exists.
    fn create(&self, lease: Lease) -> BoxFuture<'_, kube::Result<Lease>>;
    /// A merge patch; one that carries `metadata.resourceVersion` is refused with a conflict
    /// when the Lease changed since (the compare-and-swap of the ledger).
    fn merge(&self, name: &str, patch: serde_json::Value) -> BoxFuture<'_, kube::Result<Lease>>;
}

impl NodeApi for Api<Node> {
    fn patch(&self, name: &str, patch: json_patch::Patch) -> BoxFuture<'_, kube::Result<Node>> {
        let name = name.to_owned();
        async move {
            Api::patch(
                self,
                &name,
                &PatchParams::default(),
                &Patch::Json::<()>(patch),
            )
            .await
        }
        .boxed()
    }

    fn get(&self, name: &str) -> BoxFuture<'_, kube::Result<Option<Node>>> {
        let name = name.to_owned();
        async move { self.get_opt(&name).await }.boxed()
    }
}

impl LeaseApi for Api<Lease> {
    fn get(&self, name: &str) -> BoxFuture<'_, kube::Result<Option<Lease>>> {
        let name = name.to_owned();
        async move { self.get_opt(&name).await }.boxed()
    }

    fn create(&self, lease: Lease) -> BoxFuture<'_, kube::Result<Lease>> {
        async move { Api::create(self, &PostParams::default(), &lease).await }.boxed()
    }

    fn merge(&self, name: &str, patch: serde_json::Value) -> BoxFuture<'_, kube::Result<Lease>> {
        let name = name.to_owned();
        async move { Api::patch(self, &name, &PatchParams::default(), &Patch::Merge(&patch)).await }
            .boxed()
    }
}
