//! The watch of the agent's own Node: `fieldSelector=metadata.name=<name>`, so that the
//! agent's load on the API server does not grow with the cluster, opened with a streaming list
//! where the API server has one (one request per start of the agent instead of a list and a
//! watch), else with a list and a watch (`observability::streaming_watch`).

use futures::stream::BoxStream;
use k8s_openapi::api::core::v1::Node;
use kube::{Api, runtime::watcher};
use observability::streaming_watch::{Watched, streaming_watch};

/// One item of the node's watch, as kube-runtime's watcher gives it.
pub type WatchItem = observability::streaming_watch::WatchItem<Node>;

/// The watch of the node `name`.
pub fn node_watch(nodes: Api<Node>, name: &str) -> BoxStream<'static, WatchItem> {
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let watched = Watched {
        what: "the node",
        costs: "one request more at each start of the agent",
    };
    streaming_watch(nodes, config, watched)
}
