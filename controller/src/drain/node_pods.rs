//! The pods bound to one node, kept by one watch for the drain of that node: a consistent list
//! to start with (a streaming list where the API server has them), then the changes, so that
//! the requests a drain makes do not grow with the time its pods take to terminate.

use common::{
    eviction::{Disposition, disposition},
    ledger::version_is_newer,
};
use futures::{StreamExt as _, TryStreamExt as _, stream::BoxStream};
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt as _;
use kube::{
    Api, Client,
    api::{ListParams, WatchEvent, WatchParams},
    core::Status,
};
use observability::ApiErrorKind;
use std::{
    collections::BTreeMap,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Instant,
};

/// The API server ends each watch after this long (kube's default), and the drain opens it
/// again from where it was: a connection that died silently is not waited on for ever.
const WATCH_SECONDS: u64 = 290;
/// The bookmark that ends the initial events of a streaming list.
const INITIAL_EVENTS_END: &str = "k8s.io/initial-events-end";

/// Why the view of the node's pods could not be kept up.
#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    #[error(transparent)]
    Api(#[from] kube::Error),
    #[error("the API server ended the watch of the node's pods: {}", .0.message)]
    Ended(Box<Status>),
    #[error("the watch of the node's pods closed before its initial list was complete")]
    Cut,
}

impl WatchError {
    pub(crate) fn kind(&self) -> ApiErrorKind {
        match self {
            Self::Api(error) => ApiErrorKind::of(error),
            Self::Ended(status) => ApiErrorKind::of_status(status),
            Self::Cut => ApiErrorKind::Other,
        }
    }
}

/// The pods bound to one node (and matching `--drain-pod-selector`), kept by one watch: it
/// starts with a consistent list, a streaming list where the API server has them (the list and
/// the watch are then one request), then follows the changes; nothing polls.
///
/// Every way this lists is a consistent read (never `resourceVersion=0`, which an API server
/// may answer from a stale cache): the first list shows every pod bound to the node before the
/// drain started. That is why a drain that finds nothing to evict needs no other read.
pub(crate) struct NodePods {
    api: Api<Pod>,
    fields: String,
    labels: Option<String>,
    /// By uid. While `version` is `None`, the last pods known (for messages only).
    pods: BTreeMap<String, Pod>,
    /// The resourceVersion the pods are current to: every change of the node's pods up to it
    /// is in `pods`. `None` before the first list, or when the watch's version is gone (410):
    /// then it lists again.
    version: Option<String>,
    stream: Option<BoxStream<'static, kube::Result<WatchEvent<Pod>>>>,
    /// Cleared once the API server refused a streaming list (the WatchList feature off): then
    /// every drain lists, then watches.
    streaming: Arc<AtomicBool>,
}

impl NodePods {
    pub(crate) fn new(
        client: Client,
        node: &str,
        labels: Option<String>,
        streaming: Arc<AtomicBool>,
    ) -> Self {
        Self {
            api: Api::all(client),
            fields: format!("spec.nodeName={node}"),
            labels,
            pods: BTreeMap::new(),
            version: None,
            stream: None,
            streaming,
        }
    }

    pub(crate) fn listed(&self) -> bool {
        self.version.is_some()
    }

    pub(crate) fn watching(&self) -> bool {
        self.stream.is_some()
    }

    /// Whether every change of the node's pods up to `version` (of any object: etcd has one
    /// revision counter) is in the view.
    pub(crate) fn covers(&self, version: &str) -> bool {
        self.listed() && !version_is_newer(Some(version), self.version.as_deref())
    }

    /// The pods to evict, in name order, each with whether it is unmanaged.
    pub(crate) fn to_evict(&self) -> Vec<(&Pod, bool)> {
        let mut pods: Vec<(&Pod, bool)> = self
            .pods
            .values()
            .filter_map(|p| match disposition(p) {
                Disposition::Evict { unmanaged } => Some((p, unmanaged)),
                _ => None,
            })
            .collect();
        pods.sort_by_key(|(p, _)| pod_key(p));
        pods
    }

    pub(crate) fn params(&self, deadline: Instant) -> WatchParams {
        let left = deadline.saturating_duration_since(Instant::now()).as_secs() + 1;
        WatchParams {
            field_selector: Some(self.fields.clone()),
            label_selector: self.labels.clone(),
            timeout: u32::try_from(left.min(WATCH_SECONDS)).ok(),
            ..WatchParams::default()
        }
    }

    /// Lists (if the view is not current) and opens the watch, unless it is open.
    pub(crate) async fn connect(&mut self, deadline: Instant) -> Result<(), WatchError> {
        if self.watching() {
            return Ok(());
        }
        if let Some(version) = self.version.clone() {
            match self.api.watch(&self.params(deadline), &version).await {
                Ok(stream) => {
                    self.stream = Some(stream.boxed());
                    return Ok(());
                }
                // The version is too old to watch from: list again.
                Err(kube::Error::Api(status)) if status.code == 410 => self.version = None,
                Err(error) => return Err(error.into()),
            }
        }
        self.list(deadline).await
    }

    pub(crate) async fn list(&mut self, deadline: Instant) -> Result<(), WatchError> {
        if self.streaming.load(Ordering::Relaxed) {
            let params = WatchParams {
                send_initial_events: true,
                ..self.params(deadline)
            };
            // No resourceVersion: the initial events are a consistent read.
            match self.api.watch(&params, "").await {
                Ok(stream) => return self.take_initial_events(stream.boxed()).await,
                Err(kube::Error::Api(status)) if status.is_invalid() || status.code == 400 => {
                    tracing::info!(reason = %status.message,
                        "the API server has no streaming lists; listing, then watching");
                    self.streaming.store(false, Ordering::Relaxed);
                }
                Err(error) => return Err(error.into()),
            }
        }
        let mut params = ListParams::default().fields(&self.fields);
        if let Some(labels) = &self.labels {
            params = params.labels(labels);
        }
        let list = self.api.list(&params).await?;
        self.pods = list.items.into_iter().map(|p| (uid(&p), p)).collect();
        self.version = Some(list.metadata.resource_version.unwrap_or_default());
        Ok(())
    }

    pub(crate) async fn take_initial_events(
        &mut self,
        mut stream: BoxStream<'static, kube::Result<WatchEvent<Pod>>>,
    ) -> Result<(), WatchError> {
        let mut pods = BTreeMap::new();
        while let Some(event) = stream.try_next().await? {
            match event {
                WatchEvent::Added(pod) | WatchEvent::Modified(pod) => {
                    pods.insert(uid(&pod), pod);
                }
                WatchEvent::Deleted(pod) => {
                    pods.remove(&uid(&pod));
                }
                WatchEvent::Bookmark(mark)
                    if mark.metadata.annotations.contains_key(INITIAL_EVENTS_END) =>
                {
                    self.pods = pods;
                    self.version = Some(mark.metadata.resource_version);
                    self.stream = Some(stream);
                    return Ok(());
                }
                WatchEvent::Bookmark(_) => {}
                WatchEvent::Error(status) => return Err(WatchError::Ended(status)),
            }
        }
        Err(WatchError::Cut)
    }

    /// Waits for the next event of the open watch and takes it in. Cancel-safe. A watch that
    /// ended is closed (`connect` opens it again from where it was).
    pub(crate) async fn next_event(&mut self) -> Result<(), WatchError> {
        let Some(stream) = self.stream.as_mut() else {
            return Ok(());
        };
        let event = match stream.try_next().await {
            Ok(Some(event)) => event,
            Ok(None) => {
                self.stream = None;
                return Ok(());
            }
            Err(error) => {
                self.stream = None;
                return Err(error.into());
            }
        };
        match event {
            WatchEvent::Added(pod) | WatchEvent::Modified(pod) => {
                self.version.clone_from(&pod.metadata.resource_version);
                self.pods.insert(uid(&pod), pod);
            }
            WatchEvent::Deleted(pod) => {
                self.version.clone_from(&pod.metadata.resource_version);
                self.pods.remove(&uid(&pod));
            }
            WatchEvent::Bookmark(mark) => self.version = Some(mark.metadata.resource_version),
            WatchEvent::Error(status) => {
                self.stream = None;
                if status.code == 410 {
                    self.version = None;
                }
                return Err(WatchError::Ended(status));
            }
        }
        Ok(())
    }
}

pub(crate) fn pod_key(pod: &Pod) -> String {
    format!("{}/{}", pod.namespace().unwrap_or_default(), pod.name_any())
}

pub(crate) fn uid(pod: &Pod) -> String {
    pod.metadata.uid.clone().unwrap_or_else(|| pod_key(pod))
}
