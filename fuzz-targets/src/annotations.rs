use common::{
    AnnotationKeys, Phase, ProtocolState, Request,
    abandon::Abandon,
    ledger::{Pause, grant_id, ledger_id, ledger_of_grant},
    marks::{parse_label, parse_taint_key, record, recorded, recorded_replaced},
};
use std::collections::BTreeMap;

/// The values of a node's annotations (typed by hand as often as written by a program): each
/// line is one, its first byte choosing which of the protocol's keys it goes to. The state
/// read from them keeps the protocol's rules (only `true` is a request or a step), and each
/// value's own reader is total and round-trips what it writes.
pub fn annotations(data: &[u8]) {
    let Some(text) = crate::text(data) else {
        return;
    };
    let keys = AnnotationKeys::default();
    let all = keys.all();
    let mut annotations = BTreeMap::new();
    for line in text.split('\n') {
        let Some(first) = line.chars().next() else {
            continue;
        };
        let key = all[first as usize % all.len()];
        let value = &line[first.len_utf8()..];
        annotations.insert(key.to_owned(), value.to_owned());
        value_readers(value);
    }
    let state = ProtocolState::from_annotations(&keys, &annotations);
    let is_true = |key: &str| annotations.get(key).is_some_and(|v| v == "true");
    let needed = annotations.get(&keys.needed).map(String::as_str);
    match &state.request {
        Request::Absent => assert_eq!(needed, None),
        Request::Needed => assert_eq!(needed, Some("true")),
        Request::Invalid(v) => assert!(needed == Some(v) && v != "true", "{v:?}"),
    }
    let phase_holds = match state.phase {
        Phase::Done { .. } => is_true(&keys.done),
        Phase::InProgress { .. } => is_true(&keys.in_progress) && !is_true(&keys.done),
        Phase::RebootNow => is_true(&keys.now) && !is_true(&keys.in_progress),
        Phase::Idle => !is_true(&keys.now) && !is_true(&keys.in_progress),
    };
    assert!(phase_holds, "{:?} from {annotations:?}", state.phase);
    state.anything_to_abandon();
}

/// Every reader of a single annotation value.
fn value_readers(value: &str) {
    // reboot-abandon: what the plugin writes reads back as it was.
    let abandon = Abandon::read(value);
    assert_eq!(Abandon::read(&abandon.to_value()), abandon, "{value:?}");
    abandon.describe();
    // reboot-labelled: a record of labels gives back the labels.
    if let Ok((key, label)) = parse_label(value) {
        let replaced = BTreeMap::from([(key.clone(), label.clone())]);
        let labels = BTreeMap::from([(key, label)]);
        assert_eq!(
            recorded(&record(&labels, &BTreeMap::new())),
            labels,
            "{value:?}"
        );
        let both = record(&labels, &replaced);
        assert_eq!(recorded(&both), labels, "{value:?}");
        assert_eq!(recorded_replaced(&both), replaced, "{value:?}");
    }
    let _ = recorded(value);
    let _ = recorded_replaced(value);
    let _ = parse_taint_key(value);
    // reboot-grant: a grant names the ledger that made it.
    if !value.contains('/') {
        let ledger = ledger_id("ns", "slots");
        assert_eq!(
            ledger_of_grant(&grant_id(&ledger, value)),
            Some(ledger.as_str())
        );
    }
    let _ = ledger_of_grant(value);
    // reboot-paused on the ledger: only absent or `false` lets reboots start.
    let paused = BTreeMap::from([(
        common::ledger::PAUSED_ANNOTATION.to_owned(),
        value.to_owned(),
    )]);
    let pause = Pause::of(Some(&paused));
    assert_eq!(
        !pause.pauses(),
        value.trim().eq_ignore_ascii_case("false"),
        "{value:?}"
    );
    // --annotation-prefix.
    if let Ok(keys) = AnnotationKeys::new(value) {
        keys.all();
    }
}
