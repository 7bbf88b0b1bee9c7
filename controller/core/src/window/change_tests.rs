//! When the windows next open or close: the moments the controller wakes for.

use super::*;

fn at(utc: &str) -> Timestamp {
    utc.parse().expect("an RFC 3339 instant")
}

fn windows(texts: &[&str]) -> Windows {
    Windows::new(texts.iter().map(|t| t.parse().unwrap()).collect())
}

#[test]
fn a_closed_window_changes_when_it_opens_and_an_open_one_when_it_closes() {
    // 2026-11-23 is a Monday; Berlin is UTC+1 in November.
    let w = windows(&["Mon-Fri 22:00-06:00 Europe/Berlin"]);
    assert_eq!(
        w.next_change(at("2026-11-23T12:00:00Z")),
        Some(at("2026-11-23T21:00:00Z")),
        "closed on Monday noon: opens at 22:00"
    );
    assert_eq!(
        w.next_change(at("2026-11-23T21:00:00Z")),
        Some(at("2026-11-24T05:00:00Z")),
        "open from 22:00: closes at 06:00 the next day"
    );
    assert_eq!(
        w.next_change(at("2026-11-24T04:59:59Z")),
        Some(at("2026-11-24T05:00:00Z"))
    );
}

#[test]
fn a_cron_window_changes_at_its_next_opening_and_at_the_end_of_the_one_under_way() {
    let w = windows(&["0 22 * * 1-5 8h"]);
    assert_eq!(
        w.next_change(at("2026-11-23T12:00:00Z")),
        Some(at("2026-11-23T22:00:00Z"))
    );
    assert_eq!(
        w.next_change(at("2026-11-24T01:00:00Z")),
        Some(at("2026-11-24T06:00:00Z"))
    );
}

#[test]
fn the_first_change_of_any_window_counts_and_no_window_never_changes() {
    let w = windows(&["daily 01:00-02:00", "daily 01:30-03:00"]);
    assert_eq!(
        w.next_change(at("2026-11-23T01:10:00Z")),
        Some(at("2026-11-23T01:30:00Z")),
        "the second opens while the first is open: a look too many, never one too few"
    );
    assert_eq!(
        Windows::default().next_change(at("2026-11-23T01:10:00Z")),
        None
    );
}

#[test]
fn an_open_window_closes_at_the_end_of_every_window_it_runs_into() {
    // Two windows that overlap close at the later end; a blackout starting first closes them.
    let w = windows(&["Mon 22:00-23:00 UTC", "Mon 22:30-23:30 UTC"]);
    assert_eq!(
        w.closes_at(at("2026-11-23T22:10:00Z")),
        Some(at("2026-11-23T23:30:00Z"))
    );
    assert_eq!(w.closes_at(at("2026-11-23T12:00:00Z")), None, "closed now");
    let blackout: Period = "2026-11-23T22:45..2026-11-24T00:00".parse().unwrap();
    let w = w.with_blackouts(vec![blackout]);
    assert_eq!(
        w.closes_at(at("2026-11-23T22:10:00Z")),
        Some(at("2026-11-23T22:45:00Z"))
    );
    assert_eq!(
        Windows::new(vec![]).closes_at(at("2026-11-23T12:00:00Z")),
        None,
        "always open"
    );
}
