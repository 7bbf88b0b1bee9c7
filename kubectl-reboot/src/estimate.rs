//! When the queue should be done: the nodes left, divided by the budget (whole waves), times
//! the median of the recent reboots. A recent reboot's length is read from what the operator
//! already writes: `reboot-last-completed` on the node, minus the time of its `RebootApproved`
//! Event (or the agent's `Rebooting`). Events live an hour by default, so the history is
//! that of the last hour; without any, the controller's reboot duration histogram (a mean)
//! stands in, and without that the estimate is honestly unknown. With the controller's
//! `--reboot-window`s, a wave starts only inside one: waves that do not fit wait for the next
//! opening. Pure.

use crate::input::NodeInput;
use crate::wait::WaitReason;
use common::AnnotationKeys;
use common::events::{CONTROLLER, ControllerReason};
use controller_core::window::Windows;
use k8s_openapi::jiff::Timestamp;
use serde::Serialize;

/// A completed reboot counts only if it took at most this long (anything longer is a
/// mismatched pair of times).
const LONGEST_SECONDS: f64 = 6.0 * 3600.0;
/// Clocks of different writers (the agent's node, the controller) may differ by this much.
const SKEW_SECONDS: i64 = 5;

/// Where the typical reboot length comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Basis {
    /// The median of the reboots the Events still show.
    Events,
    /// The mean of the controller's `node_reboot_reboot_duration_seconds`.
    Metrics,
    /// No history.
    None,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Estimate {
    /// Nodes still to reboot: requested, waiting (opted-out nodes aside), granted, draining,
    /// rebooting.
    pub remaining: usize,
    /// The typical length of one reboot, in seconds; `null` without history.
    pub reboot_seconds: Option<f64>,
    pub basis: Basis,
    /// How many reboots `rebootSeconds` is computed from (Events basis).
    pub samples: usize,
    /// Until the queue is done, in seconds; `null` when unknown.
    pub done_in_seconds: Option<u64>,
    /// When (RFC 3339); `null` when unknown or while the pool is held.
    pub done_at: Option<String>,
    /// What holds the whole pool now: the estimate counts from when it lifts.
    pub held_by: Option<WaitReason>,
    /// One line for people.
    pub summary: String,
}

/// The lengths of the recent reboots, in seconds, one per node that completed one.
pub fn durations(nodes: &[NodeInput], keys: &AnnotationKeys) -> Vec<f64> {
    nodes
        .iter()
        .filter_map(|node| {
            let completed: Timestamp = node
                .facts
                .annotations
                .get(&keys.last_completed)?
                .parse()
                .ok()?;
            let approved = ControllerReason::RebootApproved.as_str();
            let start = node
                .events
                .iter()
                .filter(|e| e.component == CONTROLLER && e.reason == approved)
                .filter(|e| e.time.as_second() <= completed.as_second() + SKEW_SECONDS)
                .map(|e| e.time)
                .max()?;
            let seconds = completed.duration_since(start).as_secs_f64();
            (0.0..=LONGEST_SECONDS)
                .contains(&seconds)
                .then_some(seconds)
        })
        .collect()
}

pub fn median(values: &[f64]) -> Option<f64> {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(sorted[n / 2]),
        _ => Some((sorted[n / 2 - 1] + sorted[n / 2]) / 2.0),
    }
}

/// When `waves` waves of `seconds` each are over, from `now`: each starts only while a
/// window is open (a wave under way finishes after its window closes, as the controller's
/// grants do). `None` when a window never opens again.
pub fn waves_end(
    now: Timestamp,
    waves: usize,
    seconds: f64,
    windows: &Windows,
) -> Option<Timestamp> {
    let length = std::time::Duration::from_secs_f64(seconds.max(0.0));
    let mut t = now;
    for _ in 0..waves {
        t = windows.next_opening(t)?;
        t = t.checked_add(length).ok()?;
    }
    Some(t)
}

/// The estimate for `remaining` nodes with a budget of `budget`, in `windows` (none: always).
pub fn estimate(
    remaining: usize,
    budget: Option<usize>,
    durations: &[f64],
    metrics: Option<&crate::metrics::Reading>,
    held_by: Option<WaitReason>,
    (now, windows): (Timestamp, &Windows),
) -> Estimate {
    let (reboot_seconds, basis) = match (
        median(durations),
        metrics.and_then(|m| m.mean_reboot_seconds()),
    ) {
        (Some(median), _) => (Some(median), Basis::Events),
        (None, Some(mean)) => (Some(mean), Basis::Metrics),
        (None, None) => (None, Basis::None),
    };
    let mut estimate = Estimate {
        remaining,
        reboot_seconds,
        basis,
        samples: durations.len(),
        done_in_seconds: None,
        done_at: None,
        held_by,
        summary: String::new(),
    };
    let typical = match (basis, reboot_seconds) {
        (Basis::Events, Some(s)) => format!(
            "median reboot {} ({} recent reboot{} in the Events)",
            human(s.round() as i64),
            durations.len(),
            if durations.len() == 1 { "" } else { "s" }
        ),
        (Basis::Metrics, Some(s)) => format!(
            "mean reboot {} (the controller's metrics)",
            human(s.round() as i64)
        ),
        _ => String::new(),
    };
    estimate.summary = match (remaining, budget, reboot_seconds) {
        (0, _, _) => "nothing to reboot".to_owned(),
        (_, None, _) => format!("{remaining} to reboot; done: unknown (the budget is unknown)"),
        (_, _, None) => format!(
            "{remaining} to reboot; done: unknown (no reboot history yet: no completed reboot \
             in the Events, which last an hour, nor in the controller's metrics)"
        ),
        (_, Some(budget), Some(seconds)) => {
            let waves = remaining.div_ceil(budget.max(1));
            let done_in = match held_by {
                // Held: from when it lifts, whenever that is.
                Some(_) => Some((waves as f64 * seconds).round() as u64),
                None => waves_end(now, waves, seconds, windows)
                    .map(|end| end.duration_since(now).as_secs_f64().round().max(0.0) as u64),
            };
            estimate.done_in_seconds = done_in;
            let in_windows = if windows.open.is_empty() {
                String::new()
            } else {
                format!(", starting waves only in the windows ({windows})")
            };
            let when = match (held_by, done_in) {
                (_, None) => format!("never: no window opens again ({windows})"),
                (Some(hold), Some(done_in)) => format!(
                    "~{} once no longer held ({}){in_windows}",
                    human(done_in as i64),
                    hold.as_str()
                ),
                (None, Some(done_in)) => {
                    let at = now
                        .checked_add(std::time::Duration::from_secs(done_in))
                        .ok();
                    estimate.done_at = at.map(|t| t.to_string());
                    let format = if done_in >= 86_400 {
                        "%a %Y-%m-%d %H:%M:%SZ"
                    } else {
                        "%H:%M:%SZ"
                    };
                    let at = at.map(|t| format!(" (about {})", t.strftime(format)));
                    format!(
                        "~{}{}{in_windows}",
                        human(done_in as i64),
                        at.unwrap_or_default()
                    )
                }
            };
            let plural = if waves == 1 { "" } else { "s" };
            format!(
                "{remaining} to reboot, {budget} at a time ({waves} wave{plural}): done in {when}; \
                 {typical}"
            )
        }
    };
    if remaining > 0 && !typical.is_empty() && estimate.done_in_seconds.is_none() {
        estimate.summary.push_str(&format!("; {typical}"));
    }
    estimate
}

/// `45s`, `3m20s`, `2h5m`, `1d3h`.
pub fn human(seconds: i64) -> String {
    let s = seconds.max(0);
    match s {
        0..60 => format!("{s}s"),
        60..3600 if s % 60 == 0 => format!("{}m", s / 60),
        60..3600 => format!("{}m{}s", s / 60, s % 60),
        3600..86400 if s % 3600 / 60 == 0 => format!("{}h", s / 3600),
        3600..86400 => format!("{}h{}m", s / 3600, s % 3600 / 60),
        _ if s % 86400 / 3600 == 0 => format!("{}d", s / 86400),
        _ => format!("{}d{}h", s / 86400, s % 86400 / 3600),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::{at, event, node_input};
    use common::NodeFacts;

    fn node(completed: Option<&str>, events: &[(&str, &str, &str)]) -> NodeInput {
        let mut facts = NodeFacts::from_node(&Default::default());
        if let Some(t) = completed {
            facts
                .annotations
                .insert("reboot-last-completed".into(), t.into());
        }
        NodeInput {
            events: events
                .iter()
                .map(|(reason, component, time)| event(reason, component, time, ""))
                .collect(),
            ..node_input(facts)
        }
    }

    #[test]
    fn a_reboot_lasts_from_its_approval_to_its_completion() {
        let keys = AnnotationKeys::default();
        let nodes = [
            node(
                Some("2026-01-01T10:00:30Z"),
                &[
                    ("RebootApproved", CONTROLLER, "2026-01-01T09:00:00Z"),
                    ("RebootApproved", CONTROLLER, "2026-01-01T10:00:00Z"),
                    // The next reboot's approval, after the completion: not this one's.
                    ("RebootApproved", CONTROLLER, "2026-01-01T10:05:00Z"),
                ],
            ),
            node(
                Some("2026-01-01T10:01:00Z"),
                &[("RebootApproved", CONTROLLER, "2026-01-01T10:00:50Z")],
            ),
            // Only the controller's Events count: another component's, even of its reason,
            // is no sample.
            node(
                Some("2026-01-01T10:01:00Z"),
                &[
                    ("Rebooting", common::events::AGENT, "2026-01-01T10:00:50Z"),
                    (
                        "RebootApproved",
                        common::events::AGENT,
                        "2026-01-01T10:00:50Z",
                    ),
                ],
            ),
            // No Event left, or never rebooted: no sample.
            node(Some("2026-01-01T10:01:00Z"), &[]),
            node(
                None,
                &[("RebootApproved", CONTROLLER, "2026-01-01T10:00:00Z")],
            ),
        ];
        assert_eq!(durations(&nodes, &keys), vec![30.0, 10.0]);
    }

    #[test]
    fn medians() {
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), Some(2.5));
    }

    #[test]
    fn the_queue_takes_whole_waves_of_the_budget() {
        let now = at("2026-01-01T10:00:00Z");
        let e = estimate(
            5,
            Some(2),
            &[10.0, 20.0, 30.0],
            None,
            None,
            (now, &Windows::default()),
        );
        assert_eq!(e.basis, Basis::Events);
        assert_eq!(e.reboot_seconds, Some(20.0));
        assert_eq!(e.done_in_seconds, Some(60), "3 waves of 20 s");
        assert_eq!(e.done_at.as_deref(), Some("2026-01-01T10:01:00Z"));
        assert!(
            e.summary.contains("done in ~1m (about 10:01:00Z)"),
            "{}",
            e.summary
        );
        assert!(
            e.summary.contains("median reboot 20s (3 recent reboots"),
            "{}",
            e.summary
        );
    }

    #[test]
    fn unknown_is_said_honestly() {
        let now = at("2026-01-01T10:00:00Z");
        let no_history = estimate(3, Some(1), &[], None, None, (now, &Windows::default()));
        assert_eq!(no_history.done_in_seconds, None);
        assert_eq!(no_history.basis, Basis::None);
        assert!(
            no_history.summary.contains("unknown (no reboot history"),
            "{}",
            no_history.summary
        );
        let no_budget = estimate(3, None, &[5.0], None, None, (now, &Windows::default()));
        assert!(
            no_budget.summary.contains("budget is unknown"),
            "{}",
            no_budget.summary
        );
        assert_eq!(
            estimate(0, None, &[], None, None, (now, &Windows::default())).summary,
            "nothing to reboot"
        );
    }

    #[test]
    fn the_metrics_stand_in_without_events_and_a_hold_has_no_end_time() {
        let now = at("2026-01-01T10:00:00Z");
        let metrics = crate::metrics::Reading {
            reboot_duration_sum: Some(90.0),
            reboot_duration_count: Some(3.0),
            ..Default::default()
        };
        let e = estimate(
            2,
            Some(1),
            &[],
            Some(&metrics),
            Some(WaitReason::Paused),
            (now, &Windows::default()),
        );
        assert_eq!(e.basis, Basis::Metrics);
        assert_eq!(e.done_in_seconds, Some(60));
        assert_eq!(e.done_at, None);
        assert!(
            e.summary.contains("once no longer held (paused)"),
            "{}",
            e.summary
        );
    }

    #[test]
    fn waves_that_do_not_fit_the_window_wait_for_its_next_opening() {
        // Tuesday 22:00-23:00 holds three waves of 20 minutes; five waves need next Tuesday.
        let windows = Windows::new(vec!["Tue 22:00-23:00".parse().unwrap()]);
        let now = at("2026-11-24T21:00:00Z");
        let e = estimate(10, Some(2), &[1200.0], None, None, (now, &windows));
        assert_eq!(e.done_at.as_deref(), Some("2026-12-01T22:40:00Z"));
        assert!(
            e.summary.contains("(about Tue 2026-12-01 22:40:00Z), starting waves only in the windows (Tue 22:00-23:00)"),
            "{}",
            e.summary
        );
        let always = estimate(
            10,
            Some(2),
            &[1200.0],
            None,
            None,
            (now, &Windows::default()),
        );
        assert_eq!(always.done_at.as_deref(), Some("2026-11-24T22:40:00Z"));
    }

    #[test]
    fn durations_read_like_kubectl_ages() {
        assert_eq!(human(5), "5s");
        assert_eq!(human(200), "3m20s");
        assert_eq!(human(120), "2m");
        assert_eq!(human(7500), "2h5m");
        assert_eq!(human(97200), "1d3h");
        assert_eq!(human(-3), "0s");
    }
}
