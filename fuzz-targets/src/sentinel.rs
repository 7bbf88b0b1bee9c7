use agent::{
    RebootCommand,
    sentinel::{SentinelAction, SentinelRecord, decide_sentinel},
};
use common::{AnnotationKeys, OptOut, ProtocolState};
use std::collections::BTreeMap;

const BOOT: &str = "7d3c9f0e-1b2a-4c5d-8e6f-0a1b2c3d4e5f";

/// `reboot-sentinel` (the record of the sentinel a request was made for, read back from the
/// node) and `--reboot-sentinel-command` (the command whose output is the fingerprint). A
/// record reads back as it was written; a fingerprint the record already names never makes a
/// new request (no reboot loop); a command line is written back as it parses.
pub fn sentinel(data: &[u8]) {
    let Some(value) = crate::text(data) else {
        return;
    };
    let record = SentinelRecord::parse(value);
    assert!(value.ends_with(record.fingerprint), "{value:?}: {record:?}");
    if let Some(boot_id) = record.boot_id {
        assert_eq!(SentinelRecord::format(boot_id, record.fingerprint), value);
    }
    let written = SentinelRecord::format(BOOT, value);
    let again = SentinelRecord::parse(&written);
    if !value.is_empty() {
        assert_eq!(
            (again.boot_id, again.fingerprint),
            (Some(BOOT), value),
            "{written:?}"
        );
    }
    let idle = ProtocolState::from_annotations(&AnnotationKeys::default(), &BTreeMap::new());
    for boot in [BOOT, "another-boot", value] {
        // The value typed as the opt-out label too: it opts out unless it says `false`.
        for opt_out in [OptOut::No, OptOut::Yes, OptOut::of(Some(value))] {
            let action =
                decide_sentinel(&idle, &opt_out, Some(record.fingerprint), Some(value), boot);
            assert_ne!(
                action,
                SentinelAction::Request,
                "{value:?} in boot {boot:?}"
            );
            let action = decide_sentinel(&idle, &opt_out, None, Some(value), boot);
            assert_eq!(action, SentinelAction::Forget, "{value:?} in boot {boot:?}");
        }
    }
    if let Ok(command) = value.parse::<RebootCommand>() {
        let written = command.to_string();
        assert_eq!(
            written.parse::<RebootCommand>().as_ref(),
            Ok(&command),
            "{value:?}"
        );
    }
}
