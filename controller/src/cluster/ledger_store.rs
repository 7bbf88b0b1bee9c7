//! The ledger's home: an annotation on one Lease, read, and written with its resourceVersion
//! as precondition (compare-and-swap), and watched so that slots released by another
//! controller are seen. A write changes only the slots annotation: labels and annotations
//! that others put on the Lease stay.

use crate::{cluster::api::LeaseApi, metrics::Metrics};
use common::ledger::{
    FORMAT_ANNOTATION, PAUSED_ANNOTATION, Pause, RECREATED_PAUSED_ANNOTATION, SLOTS_ANNOTATION,
    Slot, format_of, slots_json, slots_of,
};
use common::rollout::{ROLLOUT_ANNOTATION, rollout_json, rollout_of};
use controller_core::ledger::{Ledger, RolloutChange};
use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use kube::{Api, Client, Resource, api::ObjectMeta, runtime::watcher};
use observability::ApiErrorKind;
use observability::watch_retry::{MAX_DELAY, retry_with_backoff};
use serde_json::json;
use std::{collections::BTreeMap, fmt, sync::Arc};
use thiserror::Error;
use tokio::sync::watch;

#[derive(Debug, Error)]
pub enum LedgerError {
    /// Someone else changed the ledger since we read it: re-read and decide again.
    #[error("the slot ledger changed since it was read")]
    Conflict,
    /// The Lease is gone (deleted by hand, say): recreate it from the last good copy.
    #[error("the slot ledger Lease does not exist")]
    Gone,
    #[error("slot ledger {0}: {1}")]
    Api(String, #[source] kube::Error),
}

impl LedgerError {
    pub fn kind(&self) -> ApiErrorKind {
        match self {
            Self::Conflict => ApiErrorKind::Conflict,
            Self::Gone => ApiErrorKind::NotFound,
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
    /// The watch saw the Lease deleted, or found none when it listed again: the ledger must be
    /// read again, and recreated if it is gone.
    pub deleted: bool,
}

/// The ledger in `lease`, whose identity in grant ids is `id` ([`common::ledger::ledger_id`]).
///
/// A ledger of a format this build does not know is not read at all (its slots might mean
/// something else): it is neither damaged (a damaged ledger is rebuilt and written back, which
/// would put this build's format over a newer one) nor empty, and says so in `unknown_format`.
fn read(id: &str, lease: &Lease) -> ReadLedger {
    let annotations = lease.metadata.annotations.as_ref();
    let unknown_format = format_of(annotations).err().map(|unknown| unknown.found);
    let (slots, damage) = match slots_of(annotations) {
        _ if unknown_format.is_some() => (BTreeMap::new(), None),
        Ok(slots) => (slots, None),
        Err(error) => (BTreeMap::new(), Some(error.to_string())),
    };
    let pause = Pause::of(lease.metadata.annotations.as_ref());
    let (rollout, rollout_unreadable) = match rollout_of(annotations) {
        Ok(rollout) => (rollout, None),
        Err(error) => (None, Some(error.to_string())),
    };
    ReadLedger {
        ledger: Ledger {
            id: id.to_owned(),
            resource_version: lease.metadata.resource_version.clone(),
            slots,
            paused: pause.pauses(),
            rollout,
            rollout_unreadable,
            unknown_format,
            // Only for the pause a controller created the Lease with.
            created_at: (lease.metadata.creation_timestamp.as_ref())
                .filter(|_| {
                    annotations.is_some_and(|a| a.contains_key(RECREATED_PAUSED_ANNOTATION))
                })
                .and_then(|t| u64::try_from(t.0.as_millisecond()).ok()),
        },
        damage,
        unexpected_pause: pause.unexpected().map(str::to_owned),
        deleted: false,
    }
}

/// The annotations of a ledger recreated from `last`, the last good copy: its slots (soaks
/// under way among them, which no node shows as a grant) and its pause (fail-safe: a pause
/// typed before the Lease was deleted still holds).
pub fn recreated_annotations(last: &Ledger) -> BTreeMap<String, String> {
    let mut annotations = BTreeMap::from([
        (SLOTS_ANNOTATION.to_owned(), slots_json(&last.slots)),
        (FORMAT_ANNOTATION.to_owned(), common::format::current()),
    ]);
    if last.paused {
        annotations.insert(PAUSED_ANNOTATION.to_owned(), "true".to_owned());
    }
    if let Some(rollout) = &last.rollout {
        annotations.insert(ROLLOUT_ANNOTATION.to_owned(), rollout_json(rollout));
    }
    annotations
}

/// The first few names and how many more: a list that stays short at any fleet size.
fn a_few_of(names: &[String]) -> String {
    const NAMED: usize = 5;
    let named = names[..names.len().min(NAMED)].join(", ");
    match names.len() {
        n if n > NAMED => format!("{named} and {} more nodes", n - NAMED),
        _ => named,
    }
}

/// The ledger as [`LedgerStore::load`] found or created it at start.
#[derive(Debug)]
pub struct Loaded {
    pub read: ReadLedger,
    /// It was missing while nodes carried its grants: created paused.
    pub recreated_paused: bool,
    /// Those nodes, when it was missing.
    pub carried_by: Vec<String>,
}

/// What the ledger watch publishes for one of its events, if anything. `seen` says whether
/// the list under way has brought the Lease: a list that ends without it means it was deleted
/// while the watch was not looking.
pub fn on_watch_event(
    id: &str,
    event: watcher::Event<Lease>,
    seen: &mut bool,
) -> Option<ReadLedger> {
    let gone = || ReadLedger {
        ledger: Ledger {
            id: id.to_owned(),
            ..Ledger::default()
        },
        deleted: true,
        ..ReadLedger::default()
    };
    match event {
        watcher::Event::Apply(lease) | watcher::Event::InitApply(lease) => {
            *seen = true;
            Some(read(id, &lease))
        }
        // The deleted Lease's last contents: the newest copy to recreate it from, which may
        // hold another replica's writes that this one has not taken in yet.
        watcher::Event::Delete(lease) => Some(ReadLedger {
            deleted: true,
            ..read(id, &lease)
        }),
        watcher::Event::Init => {
            *seen = false;
            None
        }
        watcher::Event::InitDone => (!*seen).then(gone),
    }
}

#[derive(Clone)]
pub struct LedgerStore {
    api: Arc<dyn LeaseApi>,
    name: String,
    namespace: String,
}

impl fmt::Debug for LedgerStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LedgerStore")
            .field("namespace", &self.namespace)
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl LedgerStore {
    pub fn new(client: Client, namespace: &str, name: &str) -> Self {
        let api: Api<Lease> = Api::namespaced(client, namespace);
        Self::with_api(Arc::new(api), namespace, name)
    }

    /// The ledger `namespace/name` through `api` (the model API server of the model test).
    pub fn with_api(api: Arc<dyn LeaseApi>, namespace: &str, name: &str) -> Self {
        Self {
            api,
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
        Ok(match self.api.get(&self.name).await.map_err(err)? {
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

    /// Reads the ledger as it is now; `None` when the Lease does not exist.
    pub async fn get(&self) -> Result<Option<ReadLedger>, LedgerError> {
        let err = |e| LedgerError::Api(self.name.clone(), e);
        Ok(self
            .api
            .get(&self.name)
            .await
            .map_err(err)?
            .map(|l| read(&self.id(), &l)))
    }

    /// Creates the Lease again from `last`, the last good copy (see [`recreated_annotations`]).
    /// Another controller that recreated it first wins: its ledger is returned as read.
    pub async fn recreate(&self, last: &Ledger) -> Result<ReadLedger, LedgerError> {
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(self.name.clone()),
                annotations: Some(recreated_annotations(last)),
                ..ObjectMeta::default()
            },
            spec: None,
        };
        self.create(lease).await
    }

    /// Creates the Lease; another controller that created it first wins: its ledger is
    /// returned as read.
    async fn create(&self, lease: Lease) -> Result<ReadLedger, LedgerError> {
        let err = |e| LedgerError::Api(self.name.clone(), e);
        match self.api.create(lease).await {
            Ok(lease) => Ok(read(&self.id(), &lease)),
            Err(e) if ApiErrorKind::of(&e) == ApiErrorKind::AlreadyExists => {
                match self.api.get(&self.name).await.map_err(err)? {
                    Some(lease) => Ok(read(&self.id(), &lease)),
                    None => Err(LedgerError::Gone),
                }
            }
            Err(e) => Err(err(e)),
        }
    }

    /// Reads the ledger at start, creating it when it is missing. `carried_by`, asked only then,
    /// names the nodes that carry one of its grants or may still soak after its last one: none
    /// on a first start, which creates an empty ledger. Some, and the Lease was deleted while no
    /// controller ran: its pause and the soaks under way (which no node shows as a grant)
    /// cannot be known, so it is created paused (fail-safe, as an unreadable pause value is),
    /// and said so in [`Loaded`].
    pub async fn load(
        &self,
        carried_by: impl FnOnce() -> Vec<String>,
    ) -> Result<Loaded, LedgerError> {
        let err = |e| LedgerError::Api(self.name.clone(), e);
        if let Some(lease) = self.api.get(&self.name).await.map_err(err)? {
            return Ok(Loaded {
                read: read(&self.id(), &lease),
                recreated_paused: false,
                carried_by: Vec::new(),
            });
        }
        let carried_by = carried_by();
        let missing = Ledger {
            paused: !carried_by.is_empty(),
            ..Ledger::default()
        };
        let mut annotations = recreated_annotations(&missing);
        if missing.paused {
            annotations.insert(RECREATED_PAUSED_ANNOTATION.to_owned(), "true".to_owned());
        }
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(self.name.clone()),
                annotations: Some(annotations),
                ..ObjectMeta::default()
            },
            spec: None,
        };
        let read = self.create(lease).await?;
        Ok(Loaded {
            // Another controller that created it first decided how.
            recreated_paused: missing.paused && read.ledger.paused,
            read,
            carried_by,
        })
    }

    /// The Warning of a ledger [`load`](Self::load) recreated paused at start: a few of the
    /// nodes by name and how many in all, so that the note stays within an Event's size.
    /// `pool` names the RebootPool whose ledger it is (`None`: the flags' pool), whose resume
    /// is `kubectl reboot resume --pool`, with the admin role alone.
    pub fn recreated_at_start_note(&self, carried_by: &[String], pool: Option<&str>) -> String {
        let carried_by = a_few_of(carried_by);
        let (resume, soak, pause) = match pool {
            Some(pool) => (
                format!("kubectl reboot resume --pool {pool}"),
                "minReadySeconds",
                format!("kubectl reboot pause --pool {pool}"),
            ),
            None => (
                "kubectl reboot resume".to_owned(),
                "--min-ready-seconds",
                "kubectl reboot pause".to_owned(),
            ),
        };
        format!(
            "the slot ledger Lease {} was missing at start although {} carry its grants: it \
             was deleted while no controller ran. Recreated PAUSED, since its pause and the \
             soaks under way cannot be known: reboots already told to go finish, nothing else \
             moves. Check `kubectl reboot status` and resume with `{resume}` once the nodes \
             that rebooted last have soaked ({soak}). Do not delete it; to stop new reboots, \
             pause instead ({pause})",
            self.id(),
            carried_by
        )
    }

    /// Replaces the slots, the rollout's record when it changed, and removes the pause with
    /// `unpause`, if nobody changed the
    /// Lease since `current` was read. A merge patch that carries the resourceVersion is
    /// refused with a conflict otherwise.
    pub async fn swap(
        &self,
        current: &Ledger,
        slots: &BTreeMap<String, Slot>,
        rollout: Option<&RolloutChange>,
        unpause: bool,
    ) -> Result<Ledger, LedgerError> {
        let mut annotations = json!({
            SLOTS_ANNOTATION: slots_json(slots),
            FORMAT_ANNOTATION: common::format::current(),
        });
        if unpause {
            annotations[PAUSED_ANNOTATION] = serde_json::Value::Null;
            annotations[RECREATED_PAUSED_ANNOTATION] = serde_json::Value::Null;
        }
        match rollout {
            Some(RolloutChange::Write(record)) => {
                annotations[ROLLOUT_ANNOTATION] = rollout_json(record).into();
            }
            // A merge patch removes a key set to null.
            Some(RolloutChange::End) => annotations[ROLLOUT_ANNOTATION] = serde_json::Value::Null,
            None => {}
        }
        let patch = json!({"metadata": {
            "resourceVersion": current.resource_version,
            "annotations": annotations,
        }});
        match self.api.merge(&self.name, patch).await {
            Ok(written) => Ok(read(&self.id(), &written).ledger),
            Err(e) if ApiErrorKind::of(&e) == ApiErrorKind::Conflict => Err(LedgerError::Conflict),
            Err(e) if ApiErrorKind::of(&e) == ApiErrorKind::NotFound => Err(LedgerError::Gone),
            Err(e) => Err(LedgerError::Api(self.name.clone(), e)),
        }
    }

    /// Publishes every version of the ledger the watch sees, and its deletion.
    pub fn spawn_watch(
        &self,
        client: Client,
        metrics: Metrics,
        on_change: impl Fn() + Send + 'static,
    ) -> watch::Receiver<ReadLedger> {
        let (tx, rx) = watch::channel(ReadLedger::default());
        let config = watcher::Config::default().fields(&format!("metadata.name={}", self.name));
        let api: Api<Lease> = Api::namespaced(client, &self.namespace);
        let stream = retry_with_backoff(watcher(api, config).boxed(), MAX_DELAY);
        let id = self.id();
        tokio::spawn(async move {
            futures::pin_mut!(stream);
            let mut seen = false;
            // Ends when nobody reads the ledger any more (its pool stopped).
            while let Some(event) = tokio::select! {
                () = tx.closed() => None,
                event = stream.next() => event,
            } {
                match event {
                    Ok(event) => {
                        if let Some(ledger) = on_watch_event(&id, event, &mut seen) {
                            let _ = tx.send(ledger);
                            on_change();
                        }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(version: &str, slots: &str) -> Lease {
        let mut lease = Lease::default();
        lease.metadata.resource_version = Some(version.into());
        lease.metadata.annotations = Some(BTreeMap::from([(
            SLOTS_ANNOTATION.to_owned(),
            slots.to_owned(),
        )]));
        lease
    }

    /// The watch reports a deleted ledger, and a list without it, as gone: a leader with
    /// nothing to write must not go on with a ledger that no longer exists.
    #[test]
    fn the_watch_says_when_the_ledger_is_deleted_or_missing_from_a_list() {
        let mut seen = false;
        let applied = on_watch_event(
            "ns/ledger",
            watcher::Event::Apply(lease("5", "{}")),
            &mut seen,
        )
        .unwrap();
        assert!(!applied.deleted);
        let last = r#"{"n1":{"grant":"ns/ledger/abc","grantedAt":"t","nodeVersion":"7"}}"#;
        let deleted = on_watch_event(
            "ns/ledger",
            watcher::Event::Delete(lease("6", last)),
            &mut seen,
        )
        .unwrap();
        assert!(deleted.deleted);
        assert_eq!(deleted.ledger.resource_version.as_deref(), Some("6"));
        // Its last contents come with it: another replica's grant in them is not lost when
        // the Lease is recreated.
        assert!(deleted.ledger.slots.contains_key("n1"), "{deleted:?}");
        // Deleted while the watch was down: the list that follows does not bring it.
        assert!(on_watch_event("ns/ledger", watcher::Event::Init, &mut seen).is_none());
        let missing = on_watch_event("ns/ledger", watcher::Event::InitDone, &mut seen).unwrap();
        assert!(missing.deleted);
        // A list that brings it says nothing more than the Lease it brought.
        on_watch_event("ns/ledger", watcher::Event::Init, &mut seen);
        on_watch_event(
            "ns/ledger",
            watcher::Event::InitApply(lease("7", "{}")),
            &mut seen,
        );
        assert!(on_watch_event("ns/ledger", watcher::Event::InitDone, &mut seen).is_none());
    }

    /// A ledger a newer operator wrote is neither read (its slots might mean something else)
    /// nor damaged (a damaged one is rebuilt and written back over it); today's ledgers, with
    /// no format annotation, read as always.
    #[test]
    fn a_ledger_in_an_unknown_format_is_not_read_nor_rebuilt() {
        let slots = r#"{"n1":{"grant":"ns/ledger/abc","grantedAt":"t","nodeVersion":"7"}}"#;
        let today = read("ns/ledger", &lease("5", slots));
        assert_eq!(today.ledger.unknown_format, None);
        assert!(today.ledger.slots.contains_key("n1"));
        for (found, slots) in [("2", slots), ("2", "{not json"), ("x", slots)] {
            let mut newer = lease("6", slots);
            newer
                .metadata
                .annotations
                .as_mut()
                .unwrap()
                .insert(FORMAT_ANNOTATION.to_owned(), found.to_owned());
            let read = read("ns/ledger", &newer);
            assert_eq!(read.ledger.unknown_format.as_deref(), Some(found));
            assert!(read.ledger.slots.is_empty(), "{read:?}");
            assert_eq!(read.damage, None, "{read:?}");
        }
        // What this build writes says its format.
        let written = recreated_annotations(&today.ledger);
        assert_eq!(written[FORMAT_ANNOTATION], common::format::current());
    }

    /// Only the pause a controller created the Lease with can be lifted by a pool's resume: a
    /// pause typed by hand carries no creation time to compare with.
    #[test]
    fn only_a_pause_of_the_recreation_carries_its_creation_time() {
        let mut lease = lease("1", "{}");
        lease.metadata.creation_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                "2026-12-07T10:00:00Z".parse().unwrap(),
            ));
        let annotations = lease.metadata.annotations.as_mut().unwrap();
        annotations.insert(PAUSED_ANNOTATION.to_owned(), "true".to_owned());
        assert_eq!(
            read("ns/l", &lease).ledger.created_at,
            None,
            "typed by hand"
        );
        let annotations = lease.metadata.annotations.as_mut().unwrap();
        annotations.insert(RECREATED_PAUSED_ANNOTATION.to_owned(), "true".to_owned());
        let ledger = read("ns/l", &lease).ledger;
        assert!(
            ledger.paused && ledger.created_at == Some(1_796_637_600_000),
            "{ledger:?}"
        );
    }

    #[test]
    fn the_nodes_of_a_ledger_recreated_at_start_are_named_a_few_at_a_time() {
        let names = |n: usize| (1..=n).map(|i| format!("node-{i}")).collect::<Vec<_>>();
        assert_eq!(a_few_of(&names(2)), "node-1, node-2");
        let many = a_few_of(&names(5000));
        assert_eq!(
            many,
            "node-1, node-2, node-3, node-4, node-5 and 4995 more nodes"
        );
    }

    #[test]
    fn a_recreated_ledger_keeps_the_slots_and_the_pause_of_the_last_good_copy() {
        let slot = Slot {
            grant: "g1".into(),
            granted_at: "2026-11-25T00:00:00Z".into(),
            node_version: Some("42".into()),
            zone: None,
        };
        let last = Ledger {
            id: "test/slots".into(),
            resource_version: Some("9".into()),
            slots: BTreeMap::from([("soaking".to_owned(), slot)]),
            paused: true,
            rollout: Some(common::rollout::RolloutRecord {
                completed: 2,
                ..Default::default()
            }),
            ..Ledger::default()
        };
        let annotations = recreated_annotations(&last);
        assert_eq!(slots_of(Some(&annotations)).unwrap(), last.slots);
        assert_eq!(rollout_of(Some(&annotations)), Ok(last.rollout.clone()));
        assert!(Pause::of(Some(&annotations)).pauses());
        let resumed = Ledger {
            paused: false,
            unknown_format: None,
            ..last
        };
        assert!(!Pause::of(Some(&recreated_annotations(&resumed))).pauses());
    }
}
