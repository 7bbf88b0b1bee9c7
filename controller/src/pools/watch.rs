//! The watch of the `RebootPool` objects. Until they are listed no pool runs: the flags'
//! pool takes only the nodes no `RebootPool` selects, which is not known before. Without the
//! CRD there are none, and the watch keeps asking, less and less often down to once a minute,
//! so that pools created after it is installed are run within a minute.

use crate::metrics::Metrics;
use common::pool::RebootPool;
use futures::StreamExt;
use kube::{
    Api, Client,
    runtime::{WatchStreamExt, reflector, watcher},
};
use observability::{ApiErrorKind, watch_retry::retry_with_backoff};
use std::{sync::Arc, time::Duration};
use tokio::sync::watch;

/// The pools as last listed.
#[derive(Debug, Clone, Default)]
pub struct Listed {
    pub objects: Vec<Arc<RebootPool>>,
    /// The CRD is not installed: there are no pool objects.
    pub no_crd: bool,
}

/// Starts the watch; `None` until the first list (or the CRD's absence) is known. The watch
/// ends when every receiver is dropped.
pub fn spawn(client: Client, metrics: Metrics) -> watch::Receiver<Option<Listed>> {
    let (tx, rx) = watch::channel(None);
    let (store, writer) = reflector::store();
    // Retries wait longer and longer while the CRD is missing: each one starts with an
    // `Init`, which reset kube-runtime's backoff, so the CRD was asked for about once a second.
    let stream = retry_with_backoff(
        watcher(Api::<RebootPool>::all(client), watcher::Config::default()).boxed(),
        RETRY_MAX_DELAY,
    )
    .reflect(writer);
    tokio::spawn(async move {
        futures::pin_mut!(stream);
        let mut said_no_crd = false;
        while let Some(event) = tokio::select! {
            () = tx.closed() => None,
            event = stream.next() => event,
        } {
            match event {
                Ok(watcher::Event::Init | watcher::Event::InitApply(_)) => {}
                Ok(_) => {
                    said_no_crd = false;
                    let _ = tx.send(Some(Listed {
                        objects: store.state(),
                        no_crd: false,
                    }));
                }
                Err(error) if crd_missing(&error) => {
                    if !said_no_crd {
                        tracing::info!(
                            "the RebootPool CRD is not installed: only the flags' pool runs \
                             (install the chart's crds/rebootpools.yaml to define pools)"
                        );
                        said_no_crd = true;
                    }
                    let _ = tx.send(Some(Listed {
                        objects: Vec::new(),
                        no_crd: true,
                    }));
                }
                Err(error) => {
                    metrics.api_error("rebootpool", ApiErrorKind::of_watcher(&error));
                    tracing::warn!(
                        %error,
                        "cannot watch the RebootPools; no pool runs until it can (the \
                         controller's ClusterRole needs get, list and watch on rebootpools of \
                         node-reboot-operator.io); retrying"
                    );
                }
            }
        }
    });
    rx
}

/// The longest wait between two lists of the pools while they cannot be listed (the CRD is
/// not installed, or the RBAC refuses them).
const RETRY_MAX_DELAY: Duration = Duration::from_secs(60);

fn crd_missing(error: &watcher::Error) -> bool {
    match error {
        watcher::Error::InitialListFailed(kube::Error::Api(status))
        | watcher::Error::WatchStartFailed(kube::Error::Api(status)) => status.code == 404,
        _ => false,
    }
}
