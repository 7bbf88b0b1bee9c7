//! Humane durations for flags such as `--reboot-timeout`: `90s`, `10m`, `1h30m`, `500ms`.

use std::time::Duration;
use thiserror::Error;

/// A duration flag value that is not a duration.
#[derive(Debug, Error, PartialEq, Eq)]
#[error(
    "invalid duration {value:?}: {why}; use a number with a unit, such as `30s`, `10m` or `1h30m`"
)]
pub struct DurationError {
    value: String,
    why: &'static str,
}

/// Parses one or more `<number><unit>` parts (units `ms`, `s`, `m`, `h`) and adds them up.
pub fn parse_duration(value: &str) -> Result<Duration, DurationError> {
    let fail = |why| DurationError {
        value: value.to_owned(),
        why,
    };
    let mut rest = value.trim();
    if rest.is_empty() {
        return Err(fail("it is empty"));
    }
    if rest.starts_with('-') {
        return Err(fail("it is negative"));
    }
    let mut total = Duration::ZERO;
    while !rest.is_empty() {
        let digits_end = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        if digits_end == 0 {
            return Err(fail("every part must start with a whole number"));
        }
        let number: u64 = rest[..digits_end]
            .parse()
            .map_err(|_| fail("it is too large"))?;
        rest = &rest[digits_end..];
        let unit_end = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        let unit = match &rest[..unit_end] {
            "ms" => Duration::from_millis(1),
            "s" => Duration::from_secs(1),
            "m" => Duration::from_secs(60),
            "h" => Duration::from_secs(3600),
            "" => return Err(fail("a number needs a unit")),
            _ => return Err(fail("the unit must be one of ms, s, m, h")),
        };
        rest = &rest[unit_end..];
        let part = u32::try_from(number)
            .ok()
            .and_then(|n| unit.checked_mul(n))
            .ok_or_else(|| fail("it is too large"))?;
        total = total
            .checked_add(part)
            .ok_or_else(|| fail("it is too large"))?;
    }
    if total.is_zero() {
        return Err(fail("it must be longer than zero"));
    }
    Ok(total)
}

/// A duration as the flags take it, exact to the millisecond: `1h30m`, `45s`, `1s500ms`, `0s`.
/// [`parse_duration`] reads it back to the same duration (but `0s`, which it refuses).
pub fn duration_text(d: Duration) -> String {
    let ms = d.as_millis();
    if ms == 0 {
        return "0s".to_owned();
    }
    let (h, m, s, rest) = (ms / 3_600_000, ms / 60_000 % 60, ms / 1000 % 60, ms % 1000);
    [(h, "h"), (m, "m"), (s, "s"), (rest, "ms")]
        .into_iter()
        .filter(|(n, _)| *n > 0)
        .map(|(n, unit)| format!("{n}{unit}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_duration_is_written_as_the_flags_read_it() {
        assert_eq!(duration_text(Duration::ZERO), "0s");
        for (ms, text) in [
            (45_000, "45s"),
            (90_000, "1m30s"),
            (1_800_000, "30m"),
            (5_400_000, "1h30m"),
            (1_500, "1s500ms"),
            (250, "250ms"),
        ] {
            let d = Duration::from_millis(ms);
            assert_eq!(duration_text(d), text);
            assert_eq!(parse_duration(text), Ok(d));
        }
    }

    #[test]
    fn units_and_sums_parse() {
        for (text, secs) in [
            ("30s", 30),
            ("10m", 600),
            ("1h", 3600),
            ("1h30m", 5400),
            (" 2m5s ", 125),
        ] {
            assert_eq!(
                parse_duration(text),
                Ok(Duration::from_secs(secs)),
                "{text}"
            );
        }
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
    }

    #[test]
    fn bad_durations_name_the_problem_and_the_fix() {
        for (bad, why) in [
            ("", "empty"),
            ("10", "needs a unit"),
            ("10x", "one of ms, s, m, h"),
            ("m", "whole number"),
            ("-5s", "negative"),
            ("0s", "longer than zero"),
            ("99999999999999999999s", "too large"),
            ("5000000000h", "too large"),
        ] {
            let err = parse_duration(bad).unwrap_err().to_string();
            assert!(err.contains(why), "{bad}: {err}");
            assert!(err.contains("such as `30s`"), "{bad}: {err}");
        }
    }
}
