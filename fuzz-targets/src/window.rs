use controller_core::window::{Period, Window, Windows};
use jiff::Timestamp;

/// Instants where windows go wrong if they ever do: both daylight saving changes of Europe
/// and of the US in 2026, Lord Howe Island's, a leap day, the end of a year, and an ordinary noon.
const INSTANTS: [&str; 8] = [
    "2026-03-29T00:30:00Z",
    "2026-10-25T00:30:00Z",
    "2026-03-08T09:59:59Z",
    "2026-11-01T06:00:00Z",
    "2028-02-29T23:30:00Z",
    "2026-12-31T23:59:59Z",
    "2026-06-17T12:00:00Z",
    // Lord Howe Island's clocks going back half an hour (cronexpr once looped there).
    "2026-04-04T14:30:00Z",
];

/// `--reboot-window`: a window's text parses back to the same window, and at each of the
/// instants above its answers agree with each other: the next opening is not in the past
/// and is open, the next change is in the future, `is_open` is `next_opening == now`.
pub fn window(data: &[u8]) {
    let Some(text) = crate::text(data) else {
        return;
    };
    // `--reboot-window` takes several, separated by `;`; those after a `!` are blackouts.
    let (open, closed): (Vec<&str>, Vec<&str>) = text.split(';').partition(|t| !t.starts_with('!'));
    let windows: Vec<Window> = open.iter().filter_map(|t| t.parse().ok()).collect();
    let blackouts: Vec<Period> = closed.iter().filter_map(|t| t[1..].parse().ok()).collect();
    blackouts.iter().for_each(|b| written_parses_back(text, b));
    windows.iter().for_each(|w| written_parses_back(text, w));
    if windows.is_empty() {
        return;
    }
    // A window is accepted only when it opens within four years of now (a weekly one, within
    // a week): one that never opens after all would hold every reboot back without a word.
    // Now, not a fixed instant: a rare schedule (the fifth Sunday of February) is accepted in
    // some years only. Blackouts may close every opening: that is theirs to say.
    let now = Timestamp::now();
    let open = Windows::new(windows.clone());
    assert!(
        open.next_opening(now).is_some(),
        "{open} never opens after {now}"
    );
    let windows = open.with_blackouts(blackouts);
    for now in INSTANTS {
        let now: Timestamp = now.parse().expect("a valid instant");
        check_at(&windows, now);
    }
}

/// `item`, read from `text`, parses back from its own text to the same item.
fn written_parses_back<T>(text: &str, item: &T)
where
    T: std::str::FromStr<Err = String> + std::fmt::Display + PartialEq + std::fmt::Debug,
{
    let written = item.to_string();
    let again: T = written
        .parse()
        .unwrap_or_else(|e| panic!("{text:?} written {written:?} no longer parses: {e}"));
    assert_eq!(&again, item, "{text:?} written {written:?}");
}

fn check_at(windows: &Windows, now: Timestamp) {
    let opening = windows.next_opening(now);
    assert_eq!(
        windows.is_open(now),
        opening == Some(now),
        "{windows} at {now}"
    );
    if let Some(at) = opening {
        assert!(
            at >= now,
            "{windows} at {now}: next opening {at} is in the past"
        );
        assert!(
            windows.is_open(at),
            "{windows} at {now}: not open at its opening {at}"
        );
    }
    if let Some(at) = windows.next_change(now) {
        assert!(
            at > now,
            "{windows} at {now}: next change {at} is not after now"
        );
    }
}
