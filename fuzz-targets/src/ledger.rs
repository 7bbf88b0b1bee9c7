use common::ledger::{PAUSED_ANNOTATION, SLOTS_ANNOTATION, slots_json, slots_of};
use controller::cluster::ledger_store::{ReadLedger, on_watch_event, recreated_annotations};
use k8s_openapi::api::coordination::v1::Lease;
use kube::{api::ObjectMeta, runtime::watcher::Event};
use std::collections::BTreeMap;

const ID: &str = "node-reboot-operator/node-reboot-operator-slots";

/// The ledger Lease as the watch delivers it: the slots annotation is the input (up to a NUL
/// byte; what follows is `reboot-paused`). A ledger that decodes re-encodes to one that
/// decodes equal; a ledger recreated from it holds the same slots and the same pause; one
/// that does not decode is read as damaged and empty, never half read.
pub fn ledger(data: &[u8]) {
    let Some(text) = crate::text(data) else {
        return;
    };
    let (slots, pause) = match text.split_once('\0') {
        Some((slots, pause)) => (slots, Some(pause)),
        None => (text, None),
    };
    let mut annotations = BTreeMap::from([(SLOTS_ANNOTATION.to_owned(), slots.to_owned())]);
    if let Some(pause) = pause {
        annotations.insert(PAUSED_ANNOTATION.to_owned(), pause.to_owned());
    }
    let read = read_lease(annotations);
    if let Some(damage) = &read.damage {
        assert!(
            read.ledger.slots.is_empty(),
            "a damaged ledger kept slots: {slots:?}"
        );
        assert!(damage.contains(SLOTS_ANNOTATION), "{damage}");
        return;
    }
    let ledger = &read.ledger;
    let encoded = slots_json(&ledger.slots);
    let decoded = slots_of(Some(&BTreeMap::from([(
        SLOTS_ANNOTATION.to_owned(),
        encoded,
    )])));
    assert_eq!(decoded.ok().as_ref(), Some(&ledger.slots), "{slots:?}");
    let again = read_lease(recreated_annotations(ledger));
    assert_eq!(again.damage, None, "{slots:?}");
    assert_eq!(again.ledger.slots, ledger.slots, "{slots:?}");
    assert_eq!(
        again.ledger.paused, ledger.paused,
        "{slots:?} paused {pause:?}"
    );
    for slot in ledger.slots.values() {
        ledger.owner_of(&slot.grant);
    }
}

fn read_lease(annotations: BTreeMap<String, String>) -> ReadLedger {
    let lease = Lease {
        metadata: ObjectMeta {
            name: Some("node-reboot-operator-slots".to_owned()),
            namespace: Some("node-reboot-operator".to_owned()),
            resource_version: Some("1".to_owned()),
            annotations: Some(annotations),
            ..ObjectMeta::default()
        },
        spec: None,
    };
    on_watch_event(ID, Event::Apply(lease), &mut false).expect("an applied Lease is published")
}
