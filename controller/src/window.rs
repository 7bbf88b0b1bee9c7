//! Maintenance windows (`--reboot-window`): when new slots may be granted. Pure: the time is
//! always an argument. Days and hours are read in the window's IANA time zone with jiff's
//! rules, so a window keeps its local hours across daylight saving changes.

use jiff::{
    Timestamp, ToSpan,
    civil::{Date, Time, Weekday},
    tz::TimeZone,
};
use std::{fmt, str::FromStr};

/// The accepted syntax, shown with every parse error.
pub const SYNTAX: &str = "a window is `DAYS HH:MM-HH:MM [ZONE]`, such as \
    `Mon-Fri 22:00-06:00 Europe/Berlin` or `daily 01:00-05:00`: DAYS is `daily` or days \
    (Mon Tue Wed Thu Fri Sat Sun) and day ranges joined by commas (`Sat,Sun`, `Mon-Wed,Fri`); \
    an end before the start ends on the next day, 24:00 is midnight at the end of the day, \
    seconds may be given (`22:00:30`); ZONE is an IANA time zone (default UTC)";

const WEEK: [Weekday; 7] = [
    Weekday::Monday,
    Weekday::Tuesday,
    Weekday::Wednesday,
    Weekday::Thursday,
    Weekday::Friday,
    Weekday::Saturday,
    Weekday::Sunday,
];

/// One window: on each of `days`, from `start` to `end` local time in `zone`.
#[derive(Debug, Clone)]
pub struct Window {
    text: String,
    days: [bool; 7],
    start: Time,
    /// `None` is 24:00, the end of the start day.
    end: Option<Time>,
    zone: TimeZone,
}

impl PartialEq for Window {
    fn eq(&self, other: &Self) -> bool {
        self.text == other.text
    }
}

impl fmt::Display for Window {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl FromStr for Window {
    type Err = String;

    fn from_str(text: &str) -> Result<Window, String> {
        let refuse = |why: String| Err(format!("invalid window `{text}`: {why}; {SYNTAX}"));
        let words: Vec<&str> = text.split_whitespace().collect();
        let (days, hours, zone) = match words.as_slice() {
            [days, hours] => (*days, *hours, "UTC"),
            [days, hours, zone] => (*days, *hours, *zone),
            _ => return refuse("expected two or three words".into()),
        };
        let days = match parse_days(days) {
            Ok(days) => days,
            Err(why) => return refuse(why),
        };
        let Some((start, end)) = hours.split_once('-') else {
            return refuse(format!("`{hours}` is not a range of hours"));
        };
        let (start, end) = match (parse_time(start), parse_end(end)) {
            (Ok(start), Ok(end)) => (start, end),
            (Err(why), _) | (_, Err(why)) => return refuse(why),
        };
        if end == Some(start) {
            return refuse("it starts and ends at the same time, so it never opens".into());
        }
        let zone = match TimeZone::get(zone) {
            Ok(zone) => zone,
            Err(_) => return refuse(format!("`{zone}` is not a known IANA time zone")),
        };
        Ok(Window {
            text: words.join(" "),
            days,
            start,
            end,
            zone,
        })
    }
}

fn parse_weekday(name: &str) -> Result<usize, String> {
    const FULL: [&str; 7] = [
        "monday",
        "tuesday",
        "wednesday",
        "thursday",
        "friday",
        "saturday",
        "sunday",
    ];
    let lower = name.to_ascii_lowercase();
    FULL.iter()
        .position(|full| lower == *full || (lower.len() == 3 && full.starts_with(&lower)))
        .ok_or_else(|| format!("`{name}` is not a day (Mon Tue Wed Thu Fri Sat Sun)"))
}

fn parse_days(text: &str) -> Result<[bool; 7], String> {
    if text.eq_ignore_ascii_case("daily") || text == "*" {
        return Ok([true; 7]);
    }
    let mut days = [false; 7];
    for part in text.split(',') {
        let (first, last) = match part.split_once('-') {
            Some((a, b)) => (parse_weekday(a)?, parse_weekday(b)?),
            None => (parse_weekday(part)?, parse_weekday(part)?),
        };
        // `Fri-Mon` wraps over the weekend.
        let mut day = first;
        loop {
            days[day] = true;
            if day == last {
                break;
            }
            day = (day + 1) % 7;
        }
    }
    Ok(days)
}

fn parse_time(text: &str) -> Result<Time, String> {
    let bad = || format!("`{text}` is not a time of day (HH:MM or HH:MM:SS, 00:00 to 23:59)");
    let digits = |s: &str, len: std::ops::RangeInclusive<usize>| {
        len.contains(&s.len()) && s.bytes().all(|b| b.is_ascii_digit())
    };
    let parts: Vec<&str> = text.split(':').collect();
    let (h, m, s) = match parts.as_slice() {
        [h, m] => (*h, *m, "00"),
        [h, m, s] => (*h, *m, *s),
        _ => return Err(bad()),
    };
    if !digits(h, 1..=2) || !digits(m, 2..=2) || !digits(s, 2..=2) {
        return Err(bad());
    }
    let number = |s: &str| s.parse::<i8>().map_err(|_| bad());
    Time::new(number(h)?, number(m)?, number(s)?, 0).map_err(|_| bad())
}

fn parse_end(text: &str) -> Result<Option<Time>, String> {
    if text == "24:00" {
        return Ok(None);
    }
    parse_time(text).map(Some)
}

impl Window {
    /// The openings of this window that start from the day before `now` to a week after, as
    /// `[open, close)` instants, in order.
    fn intervals_around(&self, now: Timestamp) -> Vec<(Timestamp, Timestamp)> {
        let today = now.to_zoned(self.zone.clone()).date();
        (-1..=8)
            .filter_map(|offset: i64| today.checked_add(offset.days()).ok())
            .filter(|day| self.days[weekday_index(day)])
            .filter_map(|day| self.interval_on(day))
            .collect()
    }

    fn interval_on(&self, day: Date) -> Option<(Timestamp, Timestamp)> {
        // A local time in a daylight saving gap (02:30 on the night the clocks go forward)
        // is moved on by the gap (03:30); in a fold, the earlier of the two is taken (jiff's
        // "compatible" rule, as RFC 5545 and cron implementations do).
        let instant = |day: Date, time: Time| {
            day.to_datetime(time)
                .to_zoned(self.zone.clone())
                .ok()
                .map(|z| z.timestamp())
        };
        let open = instant(day, self.start)?;
        let close = match self.end {
            Some(end) if end > self.start => instant(day, end)?,
            Some(end) => instant(day.tomorrow().ok()?, end)?,
            None => instant(day.tomorrow().ok()?, Time::midnight())?,
        };
        (open < close).then_some((open, close))
    }

    pub fn is_open(&self, now: Timestamp) -> bool {
        self.intervals_around(now)
            .iter()
            .any(|(open, close)| *open <= now && now < *close)
    }

    /// `now` when open, else when it next opens (within a week: every window opens weekly).
    pub fn next_opening(&self, now: Timestamp) -> Option<Timestamp> {
        self.intervals_around(now)
            .into_iter()
            .filter(|(_, close)| now < *close)
            .map(|(open, _)| open.max(now))
            .min()
    }
}

fn weekday_index(day: &Date) -> usize {
    WEEK.iter()
        .position(|w| *w == day.weekday())
        .unwrap_or_default()
}

/// Every `--reboot-window`: their union. None at all means always open.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Windows(pub Vec<Window>);

impl Windows {
    pub fn is_open(&self, now: Timestamp) -> bool {
        self.0.is_empty() || self.0.iter().any(|w| w.is_open(now))
    }

    /// When new grants may next be made: `now` while open.
    pub fn next_opening(&self, now: Timestamp) -> Option<Timestamp> {
        if self.0.is_empty() {
            return Some(now);
        }
        self.0.iter().filter_map(|w| w.next_opening(now)).min()
    }
}

impl fmt::Display for Windows {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return f.write_str("always");
        }
        let texts: Vec<String> = self.0.iter().map(ToString::to_string).collect();
        f.write_str(&texts.join(" or "))
    }
}

#[cfg(test)]
#[path = "window_tests.rs"]
mod tests;
