use controller::notify::target::{parse, parse_all, redact};

/// `--notify-url`: a target's webhook URL is itself an accepted value that gives the same
/// webhook (and, given as http(s), the same service); what a target shows is the
/// redaction of its URL, which never holds the URL's path or query, where webhooks keep
/// their secrets.
pub fn notify(data: &[u8]) {
    let Some(value) = crate::text(data) else {
        return;
    };
    let _ = parse_all(&[value.to_owned()]);
    let _ = redact(value);
    let Ok(target) = parse(value) else { return };
    assert_eq!(target.shown, redact(&target.url), "{value:?}");
    let again = parse(&target.url)
        .unwrap_or_else(|e| panic!("{value:?} gave the webhook {:?}, refused: {e}", target.url));
    assert_eq!(again.url, target.url, "{value:?}");
    // A shoutrrr form (teams://, discord://, ...) says which service the plain URL cannot.
    let http = value
        .trim()
        .get(..4)
        .is_some_and(|s| s.eq_ignore_ascii_case("http"));
    if http {
        assert_eq!(
            std::mem::discriminant(&again.service),
            std::mem::discriminant(&target.service),
            "{value:?}"
        );
    }
    // Shown is `scheme://host` and, when the URL has more, `/***`: nothing of the path, the
    // query or the user.
    let (_, after) = target
        .shown
        .split_once("://")
        .expect("shown with its scheme");
    let host = after.strip_suffix("/***").unwrap_or(after);
    assert!(
        !host.contains(['/', '?', '#', '@']),
        "{value:?} shows {:?}",
        target.shown
    );
    if secret_of(&target.url).is_some() {
        assert!(after.ends_with("***"), "{value:?} shows {:?}", target.shown);
    }
}

/// The path, query and fragment of a URL, when there are any (a bare `/` is none).
fn secret_of(url: &str) -> Option<&str> {
    let (_, rest) = url.split_once("://")?;
    let start = rest.find(['/', '?', '#'])?;
    let secret = &rest[start..];
    (secret.len() > 1).then_some(secret)
}
