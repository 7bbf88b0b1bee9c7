//! Periods: a range of dates or times (`2026-12-20..2027-01-03 Europe/Berlin`, a holiday
//! freeze) or anything `--reboot-window` takes (`Fri 16:00-24:00`, `0 0 24 12 * 72h`). A
//! blackout (`--reboot-blackout`) is a period when nothing new starts, whatever the windows
//! say; a scheduled budget (`--scheduled-budget`) applies during a period.

use super::{Window, zone_named};
use jiff::{
    Timestamp,
    civil::{Date, DateTime},
    tz::TimeZone,
};
use std::{fmt, str::FromStr};

/// The accepted syntax, shown with every parse error.
pub const PERIOD_SYNTAX: &str = "a period is `FROM..UNTIL [ZONE]`, such as \
    `2026-12-20..2027-01-03 Europe/Berlin` (whole days, both included) or \
    `2026-12-24T18:00..2026-12-27T06:00` (from one time to another, the end excluded; an \
    instant with its offset, such as `2026-12-24T17:00:00Z`, is that instant), or \
    anything --reboot-window takes, such as `Fri 16:00-24:00` or `0 0 24 12 * 72h` (every 24 \
    December, for three days); ZONE is an IANA time zone (default UTC)";

/// One period (a `--reboot-blackout`, or when a `--scheduled-budget` applies), as the
/// administrator wrote it.
#[derive(Debug, Clone)]
pub struct Period {
    text: String,
    rule: Rule,
}

#[derive(Debug, Clone)]
enum Rule {
    /// From `from` (included) to `until` (excluded).
    Range { from: Timestamp, until: Timestamp },
    /// Recurring: whenever this window is open.
    Recurring(Window),
    /// Always: what stands for a schedule that cannot be read.
    Always,
}

impl PartialEq for Period {
    fn eq(&self, other: &Self) -> bool {
        self.text == other.text
    }
}

impl fmt::Display for Period {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl FromStr for Period {
    type Err = String;

    fn from_str(text: &str) -> Result<Period, String> {
        let words: Vec<&str> = text.split_whitespace().collect();
        let Some((from, until)) = words.first().and_then(|w| w.split_once("..")) else {
            let window: Window = text.parse().map_err(|why: String| {
                format!("invalid period `{text}`: not a range of dates (no `..`), and {why}")
            })?;
            return Ok(Period {
                text: window.to_string(),
                rule: Rule::Recurring(window),
            });
        };
        let fail = |why: String| format!("invalid period `{text}`: {why}; {PERIOD_SYNTAX}");
        if words.len() > 2 {
            return Err(fail(
                "expected a range and at most a time zone after it".into(),
            ));
        }
        let zone = zone_named(words.get(1).copied()).map_err(fail)?;
        let from = instant(from, &zone, End::Start).map_err(fail)?;
        let until = instant(until, &zone, End::Until).map_err(fail)?;
        if until <= from {
            return Err(fail("it ends before it starts".into()));
        }
        Ok(Period {
            text: words.join(" "),
            rule: Rule::Range { from, until },
        })
    }
}

/// Which end of a range a date gives: its first moment, or the end of the day (the last day
/// is included).
#[derive(Clone, Copy)]
enum End {
    Start,
    Until,
}

fn instant(text: &str, zone: &TimeZone, end: End) -> Result<Timestamp, String> {
    // An instant with its offset (`2026-12-24T18:00:00Z`) is itself, whatever the zone.
    if let Ok(instant) = text.parse::<Timestamp>() {
        return Ok(instant);
    }
    // jiff reads a date from a date and time too: only text without a time is a date.
    let date = (!text.contains(['T', 't']))
        .then(|| text.parse::<Date>().ok())
        .flatten();
    let local = if let Some(date) = date {
        match end {
            End::Start => date.to_datetime(jiff::civil::Time::midnight()),
            End::Until => date
                .tomorrow()
                .map_err(|_| format!("`{text}` is the last day there is"))?
                .to_datetime(jiff::civil::Time::midnight()),
        }
    } else {
        text.parse::<DateTime>().map_err(|_| {
            format!(
                "`{text}` is not a date (2026-12-20), a local time (2026-12-24T18:00) or an \
                 instant (2026-12-24T17:00:00Z)"
            )
        })?
    };
    local
        .to_zoned(zone.clone())
        .map(|z| z.timestamp())
        .map_err(|e| format!("`{text}` is not a time in that zone ({e})"))
}

impl Period {
    /// A period that is always under way, named `text`: the blackout that stands for windows
    /// or blackouts that cannot be read, so that nothing new starts on a guess of them.
    pub fn always(text: &str) -> Period {
        Period {
            text: text.to_owned(),
            rule: Rule::Always,
        }
    }

    /// Whether it is under way at `now`.
    pub fn is_active(&self, now: Timestamp) -> bool {
        match &self.rule {
            Rule::Range { from, until } => *from <= now && now < *until,
            Rule::Recurring(window) => window.is_open(now),
            Rule::Always => true,
        }
    }

    /// After `now`, the first moment it starts or ends (`None`: never again).
    pub fn next_change(&self, now: Timestamp) -> Option<Timestamp> {
        match &self.rule {
            Rule::Range { from, .. } if now < *from => Some(*from),
            Rule::Range { until, .. } => (now < *until).then_some(*until),
            Rule::Recurring(window) => window.next_change(now),
            Rule::Always => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(utc: &str) -> Timestamp {
        utc.parse().expect("an RFC 3339 instant")
    }

    fn period(text: &str) -> Period {
        text.parse().unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn a_range_of_dates_covers_both_days_whole_in_its_zone() {
        let b = period("2026-12-20..2027-01-03 Europe/Berlin");
        // Berlin is UTC+1 in winter.
        assert!(!b.is_active(at("2026-12-19T22:59:59Z")), "19 Dec 23:59:59");
        assert!(b.is_active(at("2026-12-19T23:00:00Z")), "20 Dec 00:00");
        assert!(b.is_active(at("2027-01-03T22:59:59Z")), "3 Jan 23:59:59");
        assert!(!b.is_active(at("2027-01-03T23:00:00Z")), "4 Jan 00:00");
        assert_eq!(
            b.next_change(at("2026-12-01T00:00:00Z")),
            Some(at("2026-12-19T23:00:00Z"))
        );
        assert_eq!(
            b.next_change(at("2026-12-25T00:00:00Z")),
            Some(at("2027-01-03T23:00:00Z"))
        );
        assert_eq!(b.next_change(at("2027-02-01T00:00:00Z")), None, "over");
    }

    #[test]
    fn a_range_of_times_excludes_its_end() {
        let b = period("2026-12-24T18:00..2026-12-27T06:00");
        assert!(b.is_active(at("2026-12-24T18:00:00Z")));
        assert!(!b.is_active(at("2026-12-27T06:00:00Z")));
        assert_eq!(b.to_string(), "2026-12-24T18:00..2026-12-27T06:00");
        let utc = period("2026-12-24T17:00:00Z..2026-12-27T05:00:00Z Europe/Berlin");
        assert!(utc.is_active(at("2026-12-24T17:00:00Z")));
        assert!(!utc.is_active(at("2026-12-27T05:00:00Z")));
    }

    #[test]
    fn always_is_under_way_for_good() {
        let b = Period::always("the spec's windows cannot be read");
        assert!(b.is_active(Timestamp::MIN) && b.is_active(Timestamp::MAX));
        assert_eq!(b.next_change(at("2026-12-01T00:00:00Z")), None);
        let windows = super::super::Windows::default().with_blackouts(vec![b]);
        let now = at("2026-12-01T00:00:00Z");
        assert!(!windows.is_open(now));
        assert_eq!(windows.next_opening(now), None, "never opens");
    }

    #[test]
    fn a_recurring_period_is_a_window() {
        let b = period("Fri 16:00-24:00");
        // 2026-11-27 is a Friday.
        assert!(b.is_active(at("2026-11-27T17:00:00Z")));
        assert!(!b.is_active(at("2026-11-27T15:59:00Z")));
        let christmas = period("0 0 24 12 * 72h");
        assert!(christmas.is_active(at("2026-12-26T12:00:00Z")));
        assert!(!christmas.is_active(at("2026-12-27T00:00:00Z")));
    }

    #[test]
    fn bad_periods_name_the_problem_and_the_syntax() {
        for (bad, why) in [
            ("2027-01-03..2026-12-20", "ends before it starts"),
            ("2026-12-20..tomorrow", "not a date"),
            (
                "2026-12-20..2026-12-21 Mars/Olympus",
                "not a known IANA time zone",
            ),
            ("2026-12-20..2026-12-21 UTC extra", "at most a time zone"),
        ] {
            let err = bad.parse::<Period>().unwrap_err();
            assert!(err.contains(why), "{bad}: {err}");
            assert!(err.contains("FROM..UNTIL"), "{bad}: {err}");
        }
        let err = "sometimes".parse::<Period>().unwrap_err();
        assert!(err.contains("not a range of dates"), "{err}");
        assert!(err.contains("DAYS HH:MM-HH:MM"), "{err}");
    }
}
