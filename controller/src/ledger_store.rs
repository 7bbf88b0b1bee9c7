//! The ledger's home: an annotation on one Lease, read, and written with its resourceVersion
//! as precondition (compare-and-swap), and watched so that slots released by another
//! controller are seen. A write changes only the slots annotation: labels and annotations
//! that others put on the Lease stay.

use crate::{api_error::ApiErrorKind, ledger::Ledger, metrics::Metrics};
use common::ledger::{PAUSED_ANNOTATION, Pause, SLOTS_ANNOTATION, Slot, slots_json, slots_of};
use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use kube::{
    Api, Client, Resource,
    api::{ObjectMeta, Patch, PatchParams, PostParams},
    runtime::{WatchStreamExt, watcher},
};
use serde_json::json;
use std::collections::BTreeMap;
use thiserror::Error;
use tokio::sync::watch;

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

/// A ledger as read, with what was wrong with its annotation, if anything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReadLedger {
    pub ledger: Ledger,
    /// The slots annotation was there but unreadable: the ledger is empty and must be
    /// rebuilt from the nodes' protocol state before any new grant.
    pub damage: Option<String>,
    /// `reboot-paused` has a value other than `true` or `false` (typed during an incident,
    /// say): read as paused, and said in a Warning.
    pub unexpected_pause: Option<String>,
}

/// The ledger in `lease`, whose identity in grant ids is `id` ([`common::ledger::ledger_id`]).
fn read(id: &str, lease: &Lease) -> ReadLedger {
    let (slots, damage) = match slots_of(lease.metadata.annotations.as_ref()) {
        Ok(slots) => (slots, None),
        Err(error) => (BTreeMap::new(), Some(error.to_string())),
    };
    let pause = Pause::of(lease.metadata.annotations.as_ref());
    ReadLedger {
        ledger: Ledger {
            id: id.to_owned(),
            resource_version: lease.metadata.resource_version.clone(),
            slots,
            paused: pause.pauses(),
        },
        damage,
        unexpected_pause: pause.unexpected().map(str::to_owned),
    }
}

#[derive(Debug, Clone)]
pub struct LedgerStore {
    api: Api<Lease>,
    name: String,
    namespace: String,
}

impl LedgerStore {
    pub fn new(client: Client, namespace: &str, name: &str) -> Self {
        Self {
            api: Api::namespaced(client, namespace),
            name: name.to_owned(),
            namespace: namespace.to_owned(),
        }
    }

    /// This ledger's identity in grant ids: `<namespace>/<name>`.
    pub fn id(&self) -> String {
        common::ledger::ledger_id(&self.namespace, &self.name)
    }

    /// The Lease, for Events about the ledger.
    pub fn reference(&self) -> k8s_openapi::api::core::v1::ObjectReference {
        let mut lease = Lease::default();
        lease.metadata.name = Some(self.name.clone());
        lease.metadata.namespace = Some(self.namespace.clone());
        lease.object_ref(&())
    }

    /// The Warning about a `reboot-paused` value that is neither `true` nor `false`: how it was
    /// read, and how to resume or to keep the pause.
    pub fn unexpected_pause_note(&self, value: &str) -> String {
        let (ns, name) = (&self.namespace, &self.name);
        format!(
            "{PAUSED_ANNOTATION}={value:?} on the ledger Lease {ns}/{name} is neither `true` nor \
             `false`: read as paused (fail-safe), no new reboot starts; reboots under way \
             finish. To resume: kubectl annotate lease -n {ns} {name} {PAUSED_ANNOTATION}- \
             (or {PAUSED_ANNOTATION}=false --overwrite); to keep the pause: \
             {PAUSED_ANNOTATION}=true --overwrite"
        )
    }

    /// Reads the ledger without creating it (`--dry-run`): none yet is an empty one.
    pub async fn peek(&self) -> Result<ReadLedger, LedgerError> {
        let err = |e| LedgerError::Api(self.name.clone(), e);
        Ok(match self.api.get_opt(&self.name).await.map_err(err)? {
            Some(lease) => read(&self.id(), &lease),
            None => ReadLedger {
                ledger: Ledger {
                    id: self.id(),
                    ..Ledger::default()
                },
                ..ReadLedger::default()
            },
        })
    }

    /// Reads the ledger, creating an empty one the first time.
    pub async fn load(&self) -> Result<ReadLedger, LedgerError> {
        let err = |e| LedgerError::Api(self.name.clone(), e);
        if let Some(lease) = self.api.get_opt(&self.name).await.map_err(err)? {
            return Ok(read(&self.id(), &lease));
        }
        let empty = Lease {
            metadata: ObjectMeta {
                name: Some(self.name.clone()),
                annotations: Some(BTreeMap::from([(
                    SLOTS_ANNOTATION.to_owned(),
                    slots_json(&BTreeMap::new()),
                )])),
                ..ObjectMeta::default()
            },
            spec: None,
        };
        match self.api.create(&PostParams::default(), &empty).await {
            Ok(lease) => Ok(read(&self.id(), &lease)),
            Err(e) if ApiErrorKind::of(&e) == ApiErrorKind::AlreadyExists => Ok(read(
                &self.id(),
                &self.api.get(&self.name).await.map_err(err)?,
            )),
            Err(e) => Err(err(e)),
        }
    }

    /// Replaces the slots if nobody changed the Lease since `current` was read. A merge patch
    /// that carries the resourceVersion is refused with a conflict otherwise.
    pub async fn swap(
        &self,
        current: &Ledger,
        slots: &BTreeMap<String, Slot>,
    ) -> Result<Ledger, LedgerError> {
        let patch = json!({"metadata": {
            "resourceVersion": current.resource_version,
            "annotations": {SLOTS_ANNOTATION: slots_json(slots)},
        }});
        match self
            .api
            .patch(&self.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(written) => Ok(read(&self.id(), &written).ledger),
            Err(e) if ApiErrorKind::of(&e) == ApiErrorKind::Conflict => Err(LedgerError::Conflict),
            Err(e) => Err(LedgerError::Api(self.name.clone(), e)),
        }
    }

    /// Publishes every version of the ledger the watch sees.
    pub fn spawn_watch(
        &self,
        metrics: Metrics,
        on_change: impl Fn() + Send + 'static,
    ) -> watch::Receiver<ReadLedger> {
        let (tx, rx) = watch::channel(ReadLedger::default());
        let config = watcher::Config::default().fields(&format!("metadata.name={}", self.name));
        let stream = watcher(self.api.clone(), config)
            .default_backoff()
            .applied_objects();
        let id = self.id();
        tokio::spawn(async move {
            futures::pin_mut!(stream);
            while let Some(event) = stream.next().await {
                match event {
                    Ok(lease) => {
                        let _ = tx.send(read(&id, &lease));
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
