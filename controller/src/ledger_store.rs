//! The ledger's home: an annotation on one Lease, read and written with its resourceVersion
//! as precondition (compare-and-swap), and watched so that slots released by another
//! controller are seen.

use crate::{
    api_error::ApiErrorKind,
    ledger::{Ledger, Slot},
    metrics::Metrics,
};
use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use kube::{
    Api, Client,
    api::{ObjectMeta, PostParams},
    runtime::{WatchStreamExt, watcher},
};
use std::collections::BTreeMap;
use thiserror::Error;
use tokio::sync::watch;

/// The Lease annotation that holds the slots, as a JSON object `{node: {grantedAt}}`.
pub const SLOTS_ANNOTATION: &str = "node-reboot-operator/slots";

#[derive(Debug, Error)]
pub enum LedgerError {
    /// Someone else changed the ledger since we read it: re-read and decide again.
    #[error("the slot ledger changed since it was read")]
    Conflict,
    #[error("slot ledger {0}: {1}")]
    Api(String, #[source] kube::Error),
}

impl LedgerError {
    pub fn kind(&self) -> ApiErrorKind {
        match self {
            Self::Conflict => ApiErrorKind::Conflict,
            Self::Api(_, error) => ApiErrorKind::of(error),
        }
    }
}

#[derive(Debug, Clone)]
pub struct LedgerStore {
    api: Api<Lease>,
    name: String,
}

fn ledger_of(lease: &Lease) -> Ledger {
    let slots = lease
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(SLOTS_ANNOTATION))
        .and_then(|json| serde_json::from_str::<BTreeMap<String, Slot>>(json).ok())
        .unwrap_or_default();
    Ledger {
        resource_version: lease.metadata.resource_version.clone(),
        slots,
    }
}

impl LedgerStore {
    pub fn new(client: Client, namespace: &str, name: &str) -> Self {
        Self {
            api: Api::namespaced(client, namespace),
            name: name.to_owned(),
        }
    }

    fn lease(&self, resource_version: Option<String>, slots: &BTreeMap<String, Slot>) -> Lease {
        let json = serde_json::to_string(slots).unwrap_or_else(|_| "{}".to_owned());
        Lease {
            metadata: ObjectMeta {
                name: Some(self.name.clone()),
                resource_version,
                annotations: Some(BTreeMap::from([(SLOTS_ANNOTATION.to_owned(), json)])),
                ..ObjectMeta::default()
            },
            spec: None,
        }
    }

    /// Reads the ledger, creating an empty one the first time.
    pub async fn load(&self) -> Result<Ledger, LedgerError> {
        let err = |e| LedgerError::Api(self.name.clone(), e);
        if let Some(lease) = self.api.get_opt(&self.name).await.map_err(err)? {
            return Ok(ledger_of(&lease));
        }
        let empty = self.lease(None, &BTreeMap::new());
        match self.api.create(&PostParams::default(), &empty).await {
            Ok(lease) => Ok(ledger_of(&lease)),
            Err(e) if ApiErrorKind::of(&e) == ApiErrorKind::AlreadyExists => {
                Ok(ledger_of(&self.api.get(&self.name).await.map_err(err)?))
            }
            Err(e) => Err(err(e)),
        }
    }

    /// Replaces the slots if nobody changed the ledger since `current` was read.
    pub async fn swap(
        &self,
        current: &Ledger,
        slots: &BTreeMap<String, Slot>,
    ) -> Result<Ledger, LedgerError> {
        let lease = self.lease(current.resource_version.clone(), slots);
        match self
            .api
            .replace(&self.name, &PostParams::default(), &lease)
            .await
        {
            Ok(written) => Ok(ledger_of(&written)),
            Err(e) if ApiErrorKind::of(&e) == ApiErrorKind::Conflict => Err(LedgerError::Conflict),
            Err(e) => Err(LedgerError::Api(self.name.clone(), e)),
        }
    }

    /// Publishes every version of the ledger the watch sees.
    pub fn spawn_watch(
        &self,
        metrics: Metrics,
        on_change: impl Fn() + Send + 'static,
    ) -> watch::Receiver<Ledger> {
        let (tx, rx) = watch::channel(Ledger::default());
        let config = watcher::Config::default().fields(&format!("metadata.name={}", self.name));
        let stream = watcher(self.api.clone(), config)
            .default_backoff()
            .applied_objects();
        tokio::spawn(async move {
            futures::pin_mut!(stream);
            while let Some(event) = stream.next().await {
                match event {
                    Ok(lease) => {
                        let _ = tx.send(ledger_of(&lease));
                        on_change();
                    }
                    Err(error) => {
                        metrics.api_error("ledger", ApiErrorKind::of_watcher(&error));
                        tracing::warn!(%error, "slot ledger watch failed; retrying");
                    }
                }
            }
        });
        rx
    }
}
