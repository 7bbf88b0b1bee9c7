//! Maintenance windows (`--reboot-window`): when new slots may be granted. Pure: the time is
//! always an argument. Days and hours are read in the window's IANA time zone with jiff's
//! rules, so a window keeps its local hours across daylight saving changes. A window is
//! either weekly (`Mon-Fri 22:00-06:00 Europe/Berlin`) or a cron schedule of openings with a
//! length (`0 22 * * 1-5 8h Europe/Berlin`), for what a week cannot say (the first Sunday of
//! a month, quarterly).

use jiff::{
    SignedDuration, Timestamp, ToSpan,
    civil::{Date, Time, Weekday},
    tz::TimeZone,
};
use std::{fmt, str::FromStr};

mod period;
pub use period::{PERIOD_SYNTAX, Period};

/// The accepted syntax, shown with every parse error.
pub const SYNTAX: &str = "a window is `DAYS HH:MM-HH:MM [ZONE]`, such as \
    `Mon-Fri 22:00-06:00 Europe/Berlin` or `daily 01:00-05:00`: DAYS is `daily` or days \
    (Mon Tue Wed Thu Fri Sat Sun, kured's mo tu we th fr sa su, or full names) and day ranges \
    joined by commas (`Sat,Sun`, `Mon-Wed,Fri`, `mo,tu,we`); \
    an end before the start ends on the next day, 24:00 is midnight at the end of the day, \
    seconds may be given (`22:00:30`); or it is `CRON DURATION [ZONE]`, such as \
    `\"0 22 * * 1-5\" 8h Europe/Berlin` or `0 3 * * Sun#1 4h`: CRON is the five fields of a \
    crontab (minute hour day-of-month month day-of-week, Sunday is 0 or 7; the quotes are \
    optional), each match opens the window for DURATION (`8h`, `90m`, `1h30m`); ZONE is an \
    IANA time zone (default UTC)";

/// The longest opening of a cron window: a year's.
const MAX_LENGTH: SignedDuration = SignedDuration::from_hours(24 * 366);

const WEEK: [Weekday; 7] = [
    Weekday::Monday,
    Weekday::Tuesday,
    Weekday::Wednesday,
    Weekday::Thursday,
    Weekday::Friday,
    Weekday::Saturday,
    Weekday::Sunday,
];

/// One `--reboot-window`, as the administrator wrote it.
#[derive(Debug, Clone)]
pub struct Window {
    text: String,
    rule: Rule,
}

#[derive(Debug, Clone)]
enum Rule {
    Weekly(Weekly),
    Cron(CronWindow),
}

/// On each of `days`, from `start` to `end` local time in `zone`.
#[derive(Debug, Clone)]
struct Weekly {
    days: [bool; 7],
    start: Time,
    /// `None` is 24:00, the end of the start day.
    end: Option<Time>,
    zone: TimeZone,
}

/// Open for `length` from each time `schedule` matches (in the schedule's zone).
#[derive(Debug, Clone)]
struct CronWindow {
    schedule: cronexpr::Crontab,
    length: SignedDuration,
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
        // Quotes around the cron fields are optional: they survive in values from a
        // manifest or a script that quoted them for a shell.
        let unquoted = text.replace('"', " ");
        let words: Vec<&str> = unquoted.split_whitespace().collect();
        let rule = match words.len() {
            2 | 3 => Weekly::parse(&words).map(Rule::Weekly),
            6 | 7 => CronWindow::parse(&words).map(Rule::Cron),
            _ => Err(
                "expected two or three words (days, hours, zone) or six or seven (the \
                      five cron fields, a duration, a zone)"
                    .to_owned(),
            ),
        }
        .map_err(|why| format!("invalid window `{text}`: {why}; {SYNTAX}"))?;
        Ok(Window {
            text: words.join(" "),
            rule,
        })
    }
}

fn zone_named(name: Option<&str>) -> Result<TimeZone, String> {
    let name = name.unwrap_or("UTC");
    TimeZone::get(name).map_err(|_| format!("`{name}` is not a known IANA time zone"))
}

impl Weekly {
    fn parse(words: &[&str]) -> Result<Weekly, String> {
        let (days, hours) = (words[0], words[1]);
        let days = parse_days(days)?;
        let (start, end) = hours
            .split_once('-')
            .ok_or_else(|| format!("`{hours}` is not a range of hours"))?;
        let (start, end) = (parse_time(start)?, parse_end(end)?);
        if end == Some(start) {
            return Err("it starts and ends at the same time, so it never opens".into());
        }
        let zone = zone_named(words.get(2).copied())?;
        Ok(Weekly {
            days,
            start,
            end,
            zone,
        })
    }
}

impl CronWindow {
    fn parse(words: &[&str]) -> Result<CronWindow, String> {
        let fields = words[..5].join(" ");
        let length = words[5];
        let zone = words.get(6).copied().unwrap_or("UTC");
        if let Some(minutes) = uneven_clock_change(&zone_named(Some(zone))?) {
            return Err(format!(
                "the clocks of {zone} change by {minutes} minutes, where cron schedules never \
                 find their next match; give a weekly window (`DAYS HH:MM-HH:MM {zone}`), or \
                 the cron schedule in another zone"
            ));
        }
        let schedule = cronexpr::parse_crontab(&format!("{fields} {zone}"))
            .map_err(|e| format!("`{fields}` is not a cron schedule ({e})"))?;
        let length: SignedDuration = length
            .parse()
            .map_err(|_| format!("`{length}` is not a duration (such as 8h, 90m, 1h30m)"))?;
        if length < SignedDuration::from_mins(1) {
            return Err(format!(
                "a window must last a minute or more, not `{length}`"
            ));
        }
        // Longer, and the start of the opening under way falls outside the time range (jiff's
        // years -9999 to 9999): the window never opened (found by fuzzing).
        if length > MAX_LENGTH {
            return Err(format!(
                "a window lasts at most 366 days (8784h), not `{length}`; for reboots at any \
                 time, give no window"
            ));
        }
        let window = CronWindow { schedule, length };
        // cronexpr looks four years ahead, so a leap day still opens and `30 2` never does.
        if window.next_start_after(Timestamp::now()).is_none() {
            return Err(format!("no date matches `{fields}`, so it never opens"));
        }
        Ok(window)
    }

    /// The first opening strictly after `t`, if any within four years.
    fn next_start_after(&self, t: Timestamp) -> Option<Timestamp> {
        self.schedule.find_next(t).ok().map(|z| z.timestamp())
    }

    /// `now` when open, else its next opening. The first opening after `now - length` is
    /// the only one that can still be open at `now`.
    fn next_opening(&self, now: Timestamp) -> Option<Timestamp> {
        let since = now.checked_sub(self.length).ok()?;
        let start = self.next_start_after(since)?;
        Some(start.max(now))
    }

    /// The end of the opening under way at `now` (the first that started, when they overlap).
    fn closing(&self, now: Timestamp) -> Option<Timestamp> {
        let since = now.checked_sub(self.length).ok()?;
        let start = self.next_start_after(since).filter(|start| *start <= now)?;
        start.checked_add(self.length).ok()
    }
}

/// A change of the zone's offset by other than whole hours, in minutes, from a year ago to
/// five years ahead (what a search of cronexpr, four years long, may cross). cronexpr (1.7)
/// advances an hour and truncates to the hour: in a fold of half an hour (Lord Howe Island,
/// when its clocks go back) that lands on the same hour, earlier, and it loops for ever
/// (found by fuzzing).
fn uneven_clock_change(zone: &TimeZone) -> Option<i32> {
    let now = Timestamp::now();
    let from = now.checked_sub(SignedDuration::from_hours(24 * 366)).ok()?;
    let until = now
        .checked_add(SignedDuration::from_hours(24 * 366 * 5))
        .ok()?;
    let mut offset = zone.to_offset(from).seconds();
    for transition in zone.following(from) {
        if transition.timestamp() > until {
            break;
        }
        let next = transition.offset().seconds();
        if (next - offset) % 3600 != 0 {
            return Some((next - offset).abs() / 60);
        }
        offset = next;
    }
    None
}

/// A day's name as windows and kured write it (`Mon`, `mo`, `monday`): 0 is Monday.
pub fn parse_weekday(name: &str) -> Result<usize, String> {
    const FULL: [&str; 7] = [
        "monday",
        "tuesday",
        "wednesday",
        "thursday",
        "friday",
        "saturday",
        "sunday",
    ];
    // Two letters are kured's own day names (`mo`, `tu`, ... as its chart writes them); no
    // two days share their first two letters.
    let lower = name.to_ascii_lowercase();
    FULL.iter()
        .position(|full| lower == *full || ((2..=3).contains(&lower.len()) && full.starts_with(&lower)))
        .ok_or_else(|| {
            format!("`{name}` is not a day (Mon Tue Wed Thu Fri Sat Sun, kured's mo tu we th fr sa su, or full names)")
        })
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

impl Weekly {
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

    /// `now` when open, else when it next opens (within a week: every window opens weekly).
    fn next_opening(&self, now: Timestamp) -> Option<Timestamp> {
        self.intervals_around(now)
            .into_iter()
            .filter(|(_, close)| now < *close)
            .map(|(open, _)| open.max(now))
            .min()
    }

    /// The end of the opening under way at `now`.
    fn closing(&self, now: Timestamp) -> Option<Timestamp> {
        self.intervals_around(now)
            .into_iter()
            .filter(|(open, close)| *open <= now && now < *close)
            .map(|(_, close)| close)
            .max()
    }
}

impl Window {
    pub fn is_open(&self, now: Timestamp) -> bool {
        self.next_opening(now) == Some(now)
    }

    /// `now` when open, else when it next opens; `None` if not within four years.
    pub fn next_opening(&self, now: Timestamp) -> Option<Timestamp> {
        match &self.rule {
            Rule::Weekly(weekly) => weekly.next_opening(now),
            Rule::Cron(cron) => cron.next_opening(now),
        }
    }

    /// After `now`, the first moment this window opens or closes (`None`: not within four
    /// years).
    pub fn next_change(&self, now: Timestamp) -> Option<Timestamp> {
        let change = match (self.next_opening(now), &self.rule) {
            (Some(at), Rule::Weekly(weekly)) if at == now => weekly.closing(now),
            (Some(at), Rule::Cron(cron)) if at == now => cron.closing(now),
            (opening, _) => opening,
        };
        change.filter(|at| *at > now)
    }
}

fn weekday_index(day: &Date) -> usize {
    WEEK.iter()
        .position(|w| *w == day.weekday())
        .unwrap_or_default()
}

/// Every `--reboot-window` (their union) and every `--reboot-blackout`: a window opens what no
/// blackout closes. No window at all means always open.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Windows {
    pub open: Vec<Window>,
    pub blackouts: Vec<Period>,
}

/// Blackouts followed one into the next at most, when looking for the end of one: far above
/// any real list, so that a bug cannot loop forever.
const MAX_BLACKOUT_STEPS: usize = 1_000;

impl Windows {
    pub fn new(open: Vec<Window>) -> Windows {
        Windows {
            open,
            blackouts: Vec::new(),
        }
    }

    pub fn with_blackouts(self, blackouts: Vec<Period>) -> Windows {
        Windows { blackouts, ..self }
    }

    /// Whether new grants may be made at `now`: a window is open and no blackout is.
    pub fn is_open(&self, now: Timestamp) -> bool {
        self.windows_open(now) && self.blackout_at(now).is_none()
    }

    fn windows_open(&self, now: Timestamp) -> bool {
        self.open.is_empty() || self.open.iter().any(|w| w.is_open(now))
    }

    /// The blackout that holds new grants at `now`, if one does.
    pub fn blackout_at(&self, now: Timestamp) -> Option<&Period> {
        self.blackouts.iter().find(|b| b.is_active(now))
    }

    /// When new grants may next be made: `now` while open; `None` if not within four years.
    pub fn next_opening(&self, now: Timestamp) -> Option<Timestamp> {
        let mut t = now;
        for _ in 0..MAX_BLACKOUT_STEPS {
            if !self.open.is_empty() {
                t = self.open.iter().filter_map(|w| w.next_opening(t)).min()?;
            }
            if self.blackout_at(t).is_none() {
                return Some(t);
            }
            t = self.blackout_end(t)?;
        }
        None
    }

    /// When the blackouts active at `t` (and those they run into) are over.
    fn blackout_end(&self, mut t: Timestamp) -> Option<Timestamp> {
        for _ in 0..MAX_BLACKOUT_STEPS {
            let active = self.blackouts.iter().filter(|b| b.is_active(t));
            match active.filter_map(|b| b.next_change(t)).max() {
                Some(end) => t = end,
                None if self.blackout_at(t).is_some() => return None,
                None => return Some(t),
            }
        }
        None
    }

    /// When the windows open at `now` close (or a blackout starts): the end of the time a
    /// reboot started now has. `None` while closed, or when nothing closes within
    /// [`MAX_BLACKOUT_STEPS`] changes (no windows and no blackouts: never).
    pub fn closes_at(&self, now: Timestamp) -> Option<Timestamp> {
        if !self.is_open(now) {
            return None;
        }
        let mut t = now;
        for _ in 0..MAX_BLACKOUT_STEPS {
            t = self.next_change(t)?;
            if !self.is_open(t) {
                return Some(t);
            }
        }
        None
    }

    /// After `now`, the first moment a window or a blackout starts or ends: whether new grants
    /// may be made (and, with `--finish-after-window=false`, whether grants may go on) can
    /// change only then. `None` without windows and blackouts.
    pub fn next_change(&self, now: Timestamp) -> Option<Timestamp> {
        let windows = self.open.iter().filter_map(|w| w.next_change(now));
        let blackouts = self.blackouts.iter().filter_map(|b| b.next_change(now));
        windows.chain(blackouts).min()
    }
}

impl fmt::Display for Windows {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.open.is_empty() {
            f.write_str("always")?;
        } else {
            let texts: Vec<String> = self.open.iter().map(ToString::to_string).collect();
            f.write_str(&texts.join(" or "))?;
        }
        if !self.blackouts.is_empty() {
            let texts: Vec<String> = self.blackouts.iter().map(ToString::to_string).collect();
            write!(f, ", except {}", texts.join(" and "))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod change_tests;
