use kubectl_reboot::metrics::{metrics_url, parse};

/// The controller's `/metrics` as `kubectl reboot status` reads it (any answer of any server
/// the flag points at): a reading has the budget, never a negative count, and a mean only of
/// reboots counted; `--metrics-url` gets `/metrics` only when it names no path.
pub fn metrics(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    if let Ok(reading) = parse(&text) {
        assert!(reading.max_unavailable.is_some(), "{text:?}");
        if let Some(mean) = reading.mean_reboot_seconds() {
            assert!(
                reading.reboot_duration_count.is_some_and(|c| c > 0.0),
                "{mean}"
            );
        }
    }
    let url = metrics_url(&text);
    assert!(
        url.starts_with(text.trim_end_matches('/')),
        "{text:?} gave {url:?}"
    );
}
