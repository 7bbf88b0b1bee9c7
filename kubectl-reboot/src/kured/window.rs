//! kured's reboot window (`--reboot-days`, `--start-time`, `--end-time`, `--time-zone`, read as
//! kured reads them) as a `--reboot-window` of the controller.

use controller_core::window::Window;

const DAYS: [&str; 7] = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"];

/// kured's day names (pkg/timewindow/days.go): `su`..`sa`, three letters, full names, any case,
/// or a number, 0 for Sunday; as an index from Monday.
fn weekday(day: &str) -> Option<usize> {
    if let Ok(n) = day.parse::<usize>() {
        return (n < 7).then(|| (n + 6) % 7);
    }
    controller_core::window::parse_weekday(day).ok()
}

/// A time of day as kured reads it (Go layouts `15:04`, `15:04:05`, `03:04pm`, `15`, `03pm`,
/// `3pm`), as (hour, minute, second).
fn time_of_day(text: &str) -> Option<(u32, u32, u32)> {
    let (clock, pm) = match text.strip_suffix("pm") {
        Some(c) => (c, Some(true)),
        None => match text.strip_suffix("am") {
            Some(c) => (c, Some(false)),
            None => (text, None),
        },
    };
    let number = |s: &str, len: std::ops::RangeInclusive<usize>| {
        (len.contains(&s.len()) && s.bytes().all(|b| b.is_ascii_digit()))
            .then(|| s.parse::<u32>().ok())
            .flatten()
    };
    let parts: Vec<&str> = clock.split(':').collect();
    let (h, m, s) = match (parts.as_slice(), pm) {
        ([h], _) => (number(h, 1..=2)?, 0, 0),
        ([h, m], _) => (number(h, 1..=2)?, number(m, 2..=2)?, 0),
        ([h, m, s], None) => (number(h, 1..=2)?, number(m, 2..=2)?, number(s, 2..=2)?),
        _ => return None,
    };
    let h = match pm {
        None if h < 24 => h,
        Some(pm) if (1..=12).contains(&h) => h % 12 + if pm { 12 } else { 0 },
        _ => return None,
    };
    (m < 60 && s < 60).then_some((h, m, s))
}

fn clock((h, m, s): (u32, u32, u32)) -> String {
    if s == 0 {
        format!("{h:02}:{m:02}")
    } else {
        format!("{h:02}:{m:02}:{s:02}")
    }
}

/// The days as the operator writes them: `daily`, or names and ranges (`Mon-Fri`, `Sat,Sun`).
fn days_text(days: &[bool; 7]) -> String {
    if days.iter().all(|d| *d) {
        return "daily".to_owned();
    }
    let mut parts = Vec::new();
    let mut i = 0;
    while i < 7 {
        if !days[i] {
            i += 1;
            continue;
        }
        let start = i;
        while i + 1 < 7 && days[i + 1] {
            i += 1;
        }
        match i - start {
            0 => parts.push(DAYS[start].to_owned()),
            1 => parts.push(format!("{},{}", DAYS[start], DAYS[i])),
            _ => parts.push(format!("{}-{}", DAYS[start], DAYS[i])),
        }
        i += 1;
    }
    parts.join(",")
}

/// The window, or why it cannot be one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Translated {
    /// kured's default: every day, all day; no window.
    Always,
    /// The window, and a comment for the values file when it reads differently from kured's.
    Window {
        window: String,
        comment: Option<String>,
    },
    /// Why it cannot be translated.
    Not(String),
}

/// kured's window from its four settings (`None` for kured's defaults).
pub fn translate(
    days: &[String],
    start: Option<&str>,
    end: Option<&str>,
    zone: Option<&str>,
) -> Translated {
    let mut set = [false; 7];
    if days.is_empty() {
        set = [true; 7];
    }
    for day in days.iter().filter(|d| !d.is_empty()) {
        match weekday(day) {
            Some(i) => set[i] = true,
            None => {
                return Translated::Not(format!("--reboot-days {day:?} is not a day kured reads"));
            }
        }
    }
    if !set.iter().any(|d| *d) {
        return Translated::Always;
    }
    let start_text = start.unwrap_or("0:00");
    let end_text = end.unwrap_or("23:59:59");
    let Some(from) = time_of_day(start_text) else {
        return Translated::Not(format!(
            "--start-time {start_text:?} is not a time kured reads"
        ));
    };
    let Some(to) = time_of_day(end_text) else {
        return Translated::Not(format!("--end-time {end_text:?} is not a time kured reads"));
    };
    let zone = match zone.unwrap_or("UTC") {
        "" | "Local" => "UTC",
        zone => zone,
    };
    // kured's end is the last second of its window, included.
    let until = if to == (23, 59, 59) {
        "24:00".to_owned()
    } else {
        clock(to)
    };
    if set.iter().all(|d| *d) && from == (0, 0, 0) && until == "24:00" {
        return Translated::Always;
    }
    if from == to {
        return Translated::Not(format!(
            "--start-time and --end-time are both {start_text}: kured's window is one second a \
             day; set controller.flags.rebootWindow to the hours you mean"
        ));
    }
    let days = days_text(&set);
    let window = format!("{days} {}-{until} {zone}", clock(from));
    if let Err(why) = window.parse::<Window>() {
        return Translated::Not(why);
    }
    let crosses_midnight = until != "24:00" && from > to;
    let comment = (crosses_midnight && days != "daily").then(|| {
        format!(
            "A window here belongs to the day it starts on: {days} nights, each to the next \
             morning. kured's hours were {start_text}-{end_text} within each of its days; the \
             same here:\n  rebootWindow: [\"{days} 00:00-{until} {zone}\", \"{days} {}-24:00 {zone}\"]",
            clock(from)
        )
    });
    Translated::Window { window, comment }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn days(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    fn window(t: Translated) -> String {
        match t {
            Translated::Window { window, .. } => window,
            other => panic!("not a window: {other:?}"),
        }
    }

    #[test]
    fn kureds_defaults_are_always() {
        assert_eq!(translate(&[], None, None, None), Translated::Always);
        assert_eq!(
            translate(
                &days(&["su", "mo", "tu", "we", "th", "fr", "sa"]),
                Some("0:00"),
                Some("23:59:59"),
                Some("Europe/Berlin")
            ),
            Translated::Always
        );
    }

    #[test]
    fn day_names_and_time_forms_are_read_as_kured_reads_them() {
        assert_eq!(
            window(translate(
                &days(&["mo", "TUE", "wednesday", "4", "fri"]),
                Some("22:00"),
                Some("06:00"),
                Some("Europe/Berlin")
            )),
            "Mon-Fri 22:00-06:00 Europe/Berlin"
        );
        assert_eq!(
            window(translate(
                &days(&["sa", "0"]),
                Some("3pm"),
                Some("11:30pm"),
                None
            )),
            "Sat,Sun 15:00-23:30 UTC"
        );
        assert_eq!(
            window(translate(&[], Some("01"), Some("05:00:30"), Some("Local"))),
            "daily 01:00-05:00:30 UTC"
        );
        assert_eq!(
            window(translate(
                &days(&["mo", "we"]),
                Some("12am"),
                Some("02pm"),
                None
            )),
            "Mon,Wed 00:00-14:00 UTC"
        );
    }

    #[test]
    fn a_night_window_says_how_its_days_read_here() {
        let Translated::Window { comment, .. } = translate(
            &days(&["mo", "tu", "we", "th", "fr"]),
            Some("22:00"),
            Some("06:00"),
            None,
        ) else {
            panic!("a window")
        };
        let comment = comment.unwrap_or_default();
        assert!(
            comment.contains("\"Mon-Fri 00:00-06:00 UTC\", \"Mon-Fri 22:00-24:00 UTC\""),
            "{comment}"
        );
    }

    #[test]
    fn what_kured_would_refuse_is_not_translated() {
        assert!(matches!(
            translate(&days(&["xx"]), None, None, None),
            Translated::Not(_)
        ));
        assert!(matches!(
            translate(&[], Some("25:00"), None, None),
            Translated::Not(_)
        ));
        assert!(
            matches!(translate(&[], Some("1:00"), None, Some("Mars/Base")), Translated::Not(w) if w.contains("Mars/Base"))
        );
    }
}
