use common::duration::parse_duration;
use std::time::Duration;

/// `--reboot-timeout` and the other duration flags: a parsed duration is longer than zero,
/// and its canonical text (`1h2m3s4ms`) parses back to it.
pub fn duration(data: &[u8]) {
    let Some(text) = crate::text(data) else {
        return;
    };
    let Ok(parsed) = parse_duration(text) else {
        return;
    };
    assert!(!parsed.is_zero(), "{text:?} parsed as zero");
    if let Some(canonical) = canonical(parsed) {
        assert_eq!(
            parse_duration(&canonical),
            Ok(parsed),
            "{text:?} parsed as {parsed:?}, written {canonical:?}"
        );
    }
}

/// Hours, minutes, seconds and milliseconds, zero parts left out; `None` when the hours do not
/// fit a part (a sum of parts may be longer than one part can be) or a part is finer than a
/// millisecond (no text gives one).
fn canonical(d: Duration) -> Option<String> {
    let millis = d.as_millis();
    let hours = u32::try_from(millis / 3_600_000).ok()?;
    let parts = [
        (u128::from(hours), "h"),
        (millis / 60_000 % 60, "m"),
        (millis / 1000 % 60, "s"),
        (millis % 1000, "ms"),
    ];
    d.subsec_nanos().is_multiple_of(1_000_000).then(|| {
        parts
            .iter()
            .filter(|(n, _)| *n > 0)
            .map(|(n, unit)| format!("{n}{unit}"))
            .collect()
    })
}
