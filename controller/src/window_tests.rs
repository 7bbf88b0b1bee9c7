use super::*;

fn at(utc: &str) -> Timestamp {
    utc.parse().expect("an RFC 3339 instant")
}

fn window(text: &str) -> Window {
    text.parse().unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn a_window_that_crosses_midnight_belongs_to_its_start_day() {
    let w = window("Mon-Fri 22:00-06:00 Europe/Berlin");
    // 2026-11-23 is a Monday; Berlin is UTC+1 in November.
    assert!(!w.is_open(at("2026-11-23T20:59:00Z")), "Mon 21:59");
    assert!(w.is_open(at("2026-11-23T21:00:00Z")), "Mon 22:00");
    assert!(
        w.is_open(at("2026-11-24T04:59:00Z")),
        "Tue 05:59, Monday's window"
    );
    assert!(!w.is_open(at("2026-11-24T05:00:00Z")), "Tue 06:00");
    assert!(
        w.is_open(at("2026-11-28T04:00:00Z")),
        "Sat 05:00, Friday's window"
    );
    assert!(!w.is_open(at("2026-11-28T21:30:00Z")), "Sat 22:30");
    assert!(
        !w.is_open(at("2026-11-30T04:00:00Z")),
        "Mon 05:00: Sunday has none"
    );
    assert_eq!(
        w.next_opening(at("2026-11-28T12:00:00Z")),
        Some(at("2026-11-30T21:00:00Z")),
        "from Saturday noon, Monday 22:00"
    );
    let open = at("2026-11-24T01:00:00Z");
    assert_eq!(w.next_opening(open), Some(open), "open now");
}

#[test]
fn berlin_spring_forward_moves_an_end_in_the_gap_past_it() {
    // 2026-03-29 02:00 CET becomes 03:00 CEST: 02:30 does not exist and means 03:30 CEST
    // (the clock moved on by the gap), so the window keeps its hour.
    let w = window("daily 01:30-02:30 Europe/Berlin");
    assert!(!w.is_open(at("2026-03-29T00:29:00Z")), "01:29 CET");
    assert!(w.is_open(at("2026-03-29T00:45:00Z")), "01:45 CET");
    assert!(w.is_open(at("2026-03-29T01:15:00Z")), "03:15 CEST");
    assert!(
        !w.is_open(at("2026-03-29T01:30:00Z")),
        "03:30 CEST, the window's end"
    );
    assert!(
        w.is_open(at("2026-03-30T00:00:00Z")),
        "the next day, 02:00 CEST"
    );
}

#[test]
fn berlin_fall_back_lengthens_a_window_over_the_fold() {
    // 2026-10-25 03:00 CEST becomes 02:00 CET: 02:00 happens twice; the window opens at the
    // first and closes at 03:00 CET, two hours later.
    let w = window("daily 02:00-03:00 Europe/Berlin");
    assert!(!w.is_open(at("2026-10-24T23:59:00Z")), "01:59 CEST");
    assert!(w.is_open(at("2026-10-25T00:00:00Z")), "02:00 CEST");
    assert!(
        w.is_open(at("2026-10-25T01:30:00Z")),
        "02:30 CET, the second time"
    );
    assert!(!w.is_open(at("2026-10-25T02:00:00Z")), "03:00 CET");
}

#[test]
fn new_york_overnight_windows_across_both_changes() {
    let w = window("Sat 22:00-06:00 America/New_York");
    // Spring forward, 2026-03-08: 22:00 EST Saturday to 06:00 EDT Sunday is 7 hours.
    assert!(w.is_open(at("2026-03-08T03:00:00Z")), "Sat 22:00 EST");
    assert!(w.is_open(at("2026-03-08T09:59:00Z")), "Sun 05:59 EDT");
    assert!(!w.is_open(at("2026-03-08T10:00:00Z")), "Sun 06:00 EDT");
    // Fall back, 2026-11-01: 22:00 EDT Saturday to 06:00 EST Sunday is 9 hours.
    assert!(w.is_open(at("2026-11-01T02:00:00Z")), "Sat 22:00 EDT");
    assert!(w.is_open(at("2026-11-01T10:59:00Z")), "Sun 05:59 EST");
    assert!(!w.is_open(at("2026-11-01T11:00:00Z")), "Sun 06:00 EST");
}

#[test]
fn several_windows_are_a_union_and_none_is_always_open() {
    let windows = Windows(vec![
        window("Sat,Sun 00:00-24:00"),
        window("Wed 12:00-13:00 UTC"),
    ]);
    assert!(windows.is_open(at("2026-11-28T23:59:00Z")), "Saturday");
    assert!(
        windows.is_open(at("2026-11-25T12:30:00Z")),
        "Wednesday noon"
    );
    assert!(!windows.is_open(at("2026-11-25T13:00:00Z")));
    assert_eq!(
        windows.next_opening(at("2026-11-25T13:00:00Z")),
        Some(at("2026-11-28T00:00:00Z"))
    );
    let always = Windows::default();
    assert!(always.is_open(at("2026-11-25T13:00:00Z")));
    assert_eq!(always.to_string(), "always");
}

#[test]
fn day_lists_and_ranges() {
    let w = window("Fri-Mon,Wed 09:00-10:00");
    let open_on = |date: &str| w.is_open(at(&format!("{date}T09:30:00Z")));
    // 2026-11-23 Mon .. 2026-11-29 Sun
    let week = ["23", "24", "25", "26", "27", "28", "29"].map(|d| open_on(&format!("2026-11-{d}")));
    assert_eq!(week, [true, false, true, false, true, true, true]);
    assert!(window("monday 09:00-10:00").is_open(at("2026-11-23T09:00:00Z")));
    let seconds = window("daily 09:00:30-09:01:10 UTC");
    assert!(!seconds.is_open(at("2026-11-23T09:00:29Z")));
    assert!(seconds.is_open(at("2026-11-23T09:00:30Z")));
    assert!(!seconds.is_open(at("2026-11-23T09:01:10Z")));
}

#[test]
fn bad_windows_are_refused_with_the_syntax() {
    for (text, why) in [
        ("Feb 30 22:00-23:00", "`Feb` is not a day"),
        ("Mon 22:00-22:00", "never opens"),
        ("Mon 25:00-26:00", "`25:00` is not a time"),
        (
            "Mon 22:00-06:00 Mars/Olympus_Mons",
            "not a known IANA time zone",
        ),
        ("Mon", "two or three words"),
        ("Mon 22:00", "not a range of hours"),
        ("Monkey 22:00-23:00", "`Monkey` is not a day"),
        ("Mon 9:0-10:00", "`9:0` is not a time"),
    ] {
        let error = text.parse::<Window>().expect_err(text);
        assert!(error.contains(why), "{text}: {error}");
        assert!(
            error.contains("Mon-Fri 22:00-06:00 Europe/Berlin"),
            "{error}"
        );
    }
}
