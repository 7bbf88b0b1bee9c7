//! A `RebootPool`'s spec read into the settings the controller runs a pool with: the
//! process's flags with the pool's own policy in place of the flags' pool policy. Each field is
//! read by the parser of the flag it stands for, so that a value means the same thing in both
//! places and is refused with the same message.

use crate::{
    args::{self, Args},
    cache::pool::PoolSelector,
};
use common::{
    MaxUnavailable,
    pool::{RebootPoolSpec, ledger_name},
};
use controller_core::window::Period;
use k8s_openapi::apimachinery::pkg::{apis::meta::v1::LabelSelector, util::intstr::IntOrString};

/// A pool's settings with the problems found in its spec, or why it cannot run at all.
pub type PoolReading = Result<(Args, Vec<String>), Vec<String>>;

/// Reads `spec` over `base`: the settings of the pool `name`, with every problem found (each
/// naming the field, for the pool's `InvalidSpec` condition). A field that cannot be read keeps
/// its default, and where the fields do not fit together the whole policy is the defaults':
/// enough for an invalid pool to carry the nodes it holds to the end, which is all it does.
/// Windows that are not the spec's are closed (see [`close_schedule`]): a claim must not
/// start outside a window the administrator set.
/// `Err` only where the pool cannot run at all: its ledger Lease cannot be named, so it never
/// held a slot.
pub fn read_pool(base: &Args, name: &str, spec: &RebootPoolSpec) -> PoolReading {
    let mut problems = Vec::new();
    let mut args = with_default_policy(base)?;
    // The Lease's name is the pool's with a prefix: a name too long for it cannot run.
    match args::parse_lease_name(&ledger_name(name)) {
        Ok(lease) => args.ledger_name = lease,
        Err(why) => {
            return Err(vec![format!(
                "metadata.name: too long for its ledger Lease: {why}"
            )]);
        }
    }
    let mut read = |field: &str, result: Result<(), String>| {
        if let Err(why) = result {
            problems.push(format!("spec.{field}: {why}"));
        }
    };
    read(
        "nodeSelector",
        selector_of(&spec.node_selector).map(|s| args.node_selector = s),
    );
    let defaults = args.clone();
    read_budgets(&mut args, spec, &mut read);
    read_schedule(&mut args, spec, &mut read);
    read_drain(&mut args, spec, &mut read);
    read_set_aside(&mut args, spec, &mut read);
    read_rollout_rules(&mut args, spec, &mut read);
    read_gates(&mut args, spec, &mut read);
    read_marks(&mut args, spec, &mut read);
    if let Err(error) = args.check() {
        if problems.is_empty() {
            problems.push(strip_clap(&error.to_string()));
        }
        args = defaults;
        close_schedule(&mut args);
    }
    Ok((args, problems))
}

/// The schedule of a pool whose windows are not the spec's (one cannot be read, or the whole
/// policy is the defaults'): closed for good, so that no claim starts on a guess of them, and
/// finishing after the window, so that every node already claimed goes on to its end.
fn close_schedule(args: &mut Args) {
    let unknown = "the windows or blackouts of an invalid spec (fix the spec)";
    args.reboot_blackouts.push(Period::always(unknown));
    args.finish_after_window = true;
}

/// The settings of a valid pool, or every problem of an invalid one (the tests' view of
/// [`read_pool`]).
#[cfg(test)]
pub fn pool_args(base: &Args, name: &str, spec: &RebootPoolSpec) -> Result<Args, Vec<String>> {
    let (args, problems) = read_pool(base, name, spec)?;
    if problems.is_empty() {
        Ok(args)
    } else {
        Err(problems)
    }
}

type Read<'a> = dyn FnMut(&str, Result<(), String>) + 'a;

/// The process's settings with every field a spec has at its flag's default, not at the value
/// the controller was started with: a pool means what its spec says whatever the flags are.
/// The settings a spec has no field for (the reboot delay, the eviction retries, the alert
/// filter's mode...) are the process's for every pool.
fn with_default_policy(base: &Args) -> Result<Args, Vec<String>> {
    use clap::{CommandFactory, FromArgMatches};
    // Without the environment variables, which carry the flags' pool's settings too.
    let command = Args::command().mut_args(|arg| arg.env(None::<&str>));
    let defaults = command
        .try_get_matches_from(["reboot-controller"])
        .and_then(|matches| Args::from_arg_matches(&matches))
        .map_err(|error| vec![format!("the flags' defaults cannot be read: {error}")])?;
    let mut args = base.clone();
    args.node_selector = defaults.node_selector;
    args.max_unavailable = defaults.max_unavailable;
    args.max_unavailable_per_zone = defaults.max_unavailable_per_zone;
    args.concurrency = defaults.concurrency;
    args.zone_label = defaults.zone_label;
    args.reboot_windows = defaults.reboot_windows;
    args.reboot_blackouts = defaults.reboot_blackouts;
    args.scheduled_budgets = defaults.scheduled_budgets;
    args.finish_after_window = defaults.finish_after_window;
    args.reboot_estimate = defaults.reboot_estimate;
    args.min_ready_seconds = defaults.min_ready_seconds;
    args.reboot_timeout = defaults.reboot_timeout;
    args.give_up_after = defaults.give_up_after;
    args.drain_attempts = defaults.drain_attempts;
    args.max_blocked_nodes = defaults.max_blocked_nodes;
    args.keep_set_aside_cordoned = defaults.keep_set_aside_cordoned;
    args.canary = defaults.canary;
    args.canary_soak = defaults.canary_soak;
    args.waves = defaults.waves;
    args.max_failures = defaults.max_failures;
    args.resumed_at = None;
    args.drain = defaults.drain;
    args.drain_timeout = defaults.drain_timeout;
    args.drain_grace_period = defaults.drain_grace_period;
    args.drain_pod_selector = defaults.drain_pod_selector;
    args.drain_delay = defaults.drain_delay;
    args.force_reboot = defaults.force_reboot;
    args.marks = defaults.marks;
    args.gates.alert_filter = defaults.gates.alert_filter;
    args.gates.blocking_pod_selectors = defaults.gates.blocking_pod_selectors;
    Ok(args)
}

fn read_budgets(args: &mut Args, spec: &RebootPoolSpec, read: &mut Read<'_>) {
    if let Some(value) = &spec.max_unavailable {
        read(
            "maxUnavailable",
            budget(value).map(|b| args.max_unavailable = b),
        );
    }
    if let Some(value) = &spec.max_unavailable_per_zone {
        read(
            "maxUnavailablePerZone",
            budget(value).map(|b| args.max_unavailable_per_zone = Some(b)),
        );
    }
    if let Some(value) = &spec.concurrency {
        read(
            "concurrency",
            budget(value).map(|b| args.concurrency = Some(b)),
        );
    }
    if let Some(label) = &spec.zone_label {
        read(
            "zoneLabel",
            args::parse_label_key(label).map(|l| args.zone_label = l),
        );
    }
}

fn read_schedule(args: &mut Args, spec: &RebootPoolSpec, read: &mut Read<'_>) {
    let mut unreadable = false;
    for (i, window) in spec.windows.iter().enumerate() {
        let window = args::parse_window(window);
        unreadable |= window.is_err();
        read(
            &format!("windows[{i}]"),
            window.map(|w| args.reboot_windows.push(w)),
        );
    }
    for (i, blackout) in spec.blackouts.iter().enumerate() {
        let blackout = args::parse_period(blackout);
        unreadable |= blackout.is_err();
        read(
            &format!("blackouts[{i}]"),
            blackout.map(|b| args.reboot_blackouts.push(b)),
        );
    }
    for (i, budget) in spec.scheduled_budgets.iter().enumerate() {
        read(
            &format!("scheduledBudgets[{i}]"),
            args::parse_scheduled_budget(budget).map(|b| args.scheduled_budgets.push(b)),
        );
    }
    if let Some(finish) = spec.finish_after_window {
        args.finish_after_window = finish;
    }
    if unreadable {
        close_schedule(args);
    }
    if let Some(estimate) = &spec.reboot_estimate {
        read(
            "rebootEstimate",
            args::parse_duration(estimate).map(|d| args.reboot_estimate = Some(d)),
        );
    }
    if let Some(seconds) = spec.min_ready_seconds {
        read(
            "minReadySeconds",
            u64::try_from(seconds)
                .map(|s| args.min_ready_seconds = s)
                .map_err(|_| "cannot be negative".to_owned()),
        );
    }
    if let Some(timeout) = &spec.reboot_timeout {
        read(
            "rebootTimeout",
            args::parse_duration(timeout).map(|d| args.reboot_timeout = d),
        );
    }
    if let Some(after) = &spec.give_up_after {
        read(
            "giveUpAfter",
            args::parse_duration(after).map(|d| args.give_up_after = Some(d)),
        );
    }
}

fn read_set_aside(args: &mut Args, spec: &RebootPoolSpec, read: &mut Read<'_>) {
    if let Some(attempts) = spec.drain_attempts {
        read(
            "drainAttempts",
            args::parse_drain_attempts(&attempts.to_string())
                .map(|a| args.drain_attempts = Some(a)),
        );
    }
    if let Some(most) = spec.max_blocked_nodes {
        let most = match (u32::try_from(most), spec.drain_attempts) {
            (Err(_), _) => Err("cannot be negative".to_owned()),
            (Ok(_), None) => Err("needs drainAttempts: without it no node is set aside".to_owned()),
            (Ok(most), Some(_)) => Ok(most),
        };
        read(
            "maxBlockedNodes",
            most.map(|m| args.max_blocked_nodes = Some(m)),
        );
    }
    if let Some(keep) = spec.keep_set_aside_cordoned {
        let keep = match (keep, spec.drain_attempts) {
            (true, None) => Err("needs drainAttempts: without it no node is set aside".to_owned()),
            (keep, _) => Ok(keep),
        };
        read(
            "keepSetAsideCordoned",
            keep.map(|k| args.keep_set_aside_cordoned = k),
        );
    }
}

fn read_rollout_rules(args: &mut Args, spec: &RebootPoolSpec, read: &mut Read<'_>) {
    if let Some(canary) = spec.canary {
        read(
            "canary",
            u32::try_from(canary)
                .map(|c| args.canary = c)
                .map_err(|_| match canary {
                    ..0 => "cannot be negative".to_owned(),
                    _ => "is too large: give how many nodes go first and alone (such as 1)"
                        .to_owned(),
                }),
        );
    }
    if let Some(soak) = &spec.canary_soak {
        read(
            "canarySoak",
            args::parse_duration_or_zero(soak).map(|d| args.canary_soak = d),
        );
    }
    if let Some(waves) = spec.waves {
        args.waves = waves;
    }
    if let Some(most) = &spec.max_failures {
        let text = match most {
            IntOrString::Int(n) => n.to_string(),
            IntOrString::String(s) => s.clone(),
        };
        read(
            "maxFailures",
            args::parse_max_failures(&text).map(|m| args.max_failures = Some(m)),
        );
    }
    if let Some(at) = &spec.resumed_at {
        read(
            "resumedAt",
            common::pool::resumed_at_millis(at).map(|t| args.resumed_at = Some(t)),
        );
    }
}

fn read_drain(args: &mut Args, spec: &RebootPoolSpec, read: &mut Read<'_>) {
    let Some(drain) = &spec.drain else { return };
    if let Some(enabled) = drain.enabled {
        args.drain = enabled;
    }
    if let Some(force) = drain.force_reboot {
        args.force_reboot = force;
    }
    if let Some(timeout) = &drain.timeout {
        read(
            "drain.timeout",
            args::parse_duration(timeout).map(|d| args.drain_timeout = d),
        );
    }
    if let Some(grace) = &drain.grace_period {
        read(
            "drain.gracePeriod",
            args::parse_duration(grace).map(|d| args.drain_grace_period = Some(d)),
        );
    }
    if let Some(delay) = &drain.delay {
        read(
            "drain.delay",
            args::parse_duration_or_zero(delay).map(|d| args.drain_delay = d),
        );
    }
    if let Some(selector) = &drain.pod_selector {
        read(
            "drain.podSelector",
            args::parse_drain_pod_selector(selector)
                .map(|s| args.drain_pod_selector = Some(s).filter(|s| !s.is_empty())),
        );
    }
}

fn read_gates(args: &mut Args, spec: &RebootPoolSpec, read: &mut Read<'_>) {
    let Some(gates) = &spec.gates else { return };
    if let Some(filter) = &gates.alert_filter {
        let needs_prometheus = match args.gates.prometheus_url {
            Some(_) => Ok(()),
            None => Err("needs the controller's --prometheus-url (chart value \
                         gates.prometheusUrl), which is not set"
                .to_owned()),
        };
        read(
            "gates.alertFilter",
            needs_prometheus
                .and_then(|()| args::parse_regex(filter))
                .map(|r| args.gates.alert_filter = Some(r)),
        );
    }
    for (i, selector) in gates.blocking_pod_selectors.iter().enumerate() {
        read(
            &format!("gates.blockingPodSelectors[{i}]"),
            args::parse_pod_selector(selector).map(|s| args.gates.blocking_pod_selectors.push(s)),
        );
    }
}

fn read_marks(args: &mut Args, spec: &RebootPoolSpec, read: &mut Read<'_>) {
    let Some(marks) = &spec.marks else { return };
    for (key, value) in &marks.pre_reboot_node_labels {
        read(
            &format!("marks.preRebootNodeLabels[{key}]"),
            args::parse_label(&format!("{key}={value}"))
                .map(|l| args.marks.pre_reboot_node_labels.push(l)),
        );
    }
    for (key, value) in &marks.post_reboot_node_labels {
        read(
            &format!("marks.postRebootNodeLabels[{key}]"),
            args::parse_label(&format!("{key}={value}"))
                .map(|l| args.marks.post_reboot_node_labels.push(l)),
        );
    }
    if let Some(key) = &marks.prefer_no_schedule_taint {
        read(
            "marks.preferNoScheduleTaint",
            args::parse_taint_key(key).map(|k| args.marks.prefer_no_schedule_taint = Some(k)),
        );
    }
}

/// An int or a percentage, as `--max-unavailable` reads it.
fn budget(value: &IntOrString) -> Result<MaxUnavailable, String> {
    MaxUnavailable::from_spec(value).map_err(|e| e.to_string())
}

/// A label selector as a Deployment's `selector`, read into the pool's selector as the
/// plugin reads it (`common::pool::node_selector`).
pub fn selector_of(selector: &LabelSelector) -> Result<PoolSelector, String> {
    common::pool::node_selector(selector).map(PoolSelector::of)
}

/// clap's message without its `error: ` prefix and usage lines: a pool has no command line.
fn strip_clap(message: &str) -> String {
    let first = message.lines().next().unwrap_or(message);
    first
        .trim_start_matches("error: ")
        .replace("--", "the flag --")
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn base() -> Args {
        Args::parse_from(["reboot-controller", "--max-unavailable", "3"])
    }

    fn spec(json: serde_json::Value) -> RebootPoolSpec {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn a_pool_runs_with_its_own_policy_and_ledger() {
        let args = pool_args(
            &base(),
            "gpu",
            &spec(serde_json::json!({
                "nodeSelector": {"matchLabels": {"pool": "gpu"}},
                "maxUnavailable": "25%",
                "windows": ["mon-fri 22:00-06:00 UTC"],
                "blackouts": ["2026-12-20..2027-01-03 Europe/Berlin"],
                "scheduledBudgets": ["1 Mon-Fri 06:00-22:00"],
                "minReadySeconds": 120,
                "rebootTimeout": "1h",
                "drain": {"timeout": "5m", "podSelector": "app=web"},
                "marks": {"preferNoScheduleTaint": "example.com/reboot-pending"},
            })),
        )
        .unwrap();
        assert_eq!(args.ledger_name, "node-reboot-pool-gpu");
        assert_eq!(args.max_unavailable, "25%".parse().unwrap());
        assert_eq!(args.node_selector.text(), Some("pool=gpu"));
        assert_eq!(args.reboot_windows.len(), 1);
        assert_eq!(args.reboot_blackouts.len(), 1);
        assert_eq!(args.budgets().scheduled.len(), 1);
        assert_eq!(args.min_ready_seconds, 120);
        assert_eq!(args.reboot_timeout.as_secs(), 3600);
        assert_eq!(args.drain_timeout.as_secs(), 300);
        assert_eq!(args.drain_pod_selector.as_deref(), Some("app=web"));
    }

    #[test]
    fn a_bad_blackout_or_scheduled_budget_names_its_field() {
        let problems = pool_args(
            &base(),
            "a",
            &spec(serde_json::json!({
                "blackouts": ["2027-01-03..2026-12-20"],
                "scheduledBudgets": ["some daily 01:00-02:00"],
            })),
        )
        .unwrap_err();
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(
            problems[0].starts_with("spec.blackouts[0]: "),
            "{problems:?}"
        );
        assert!(
            problems[0].contains("ends before it starts"),
            "{problems:?}"
        );
        assert!(
            problems[1].starts_with("spec.scheduledBudgets[0]: "),
            "{problems:?}"
        );
    }

    #[test]
    fn a_pool_does_not_inherit_the_flags_pools_budget() {
        let args = pool_args(&base(), "a", &RebootPoolSpec::default()).unwrap();
        assert_eq!(args.max_unavailable, MaxUnavailable::Count(1));
    }

    #[test]
    fn a_field_left_out_is_the_flags_default_not_the_flags_pools_value() {
        let started = Args::parse_from([
            "reboot-controller",
            "--min-ready-seconds=300",
            "--drain-timeout=5m",
            "--drain=false",
            "--reboot-delay=10s",
        ]);
        let args = pool_args(&started, "a", &RebootPoolSpec::default()).unwrap();
        assert_eq!(args.min_ready_seconds, 0);
        assert_eq!(args.drain_timeout.as_secs(), 15 * 60);
        assert!(args.drain);
        assert_eq!(
            args.reboot_delay.as_secs(),
            10,
            "a setting a pool has no field for stays the process's"
        );
    }

    #[test]
    fn a_pool_reads_its_rollout_rules() {
        use common::rollout::MaxFailures;
        let args = pool_args(
            &base(),
            "a",
            &spec(serde_json::json!({
                "canary": 2,
                "canarySoak": "1h30m",
                "waves": true,
                "maxFailures": "10%",
            })),
        )
        .unwrap();
        assert_eq!(args.canary, 2);
        assert_eq!(args.canary_soak.as_secs(), 90 * 60);
        assert!(args.waves);
        assert_eq!(args.max_failures, Some(MaxFailures::Percent(10)));
        let rules = args.rollout_rules();
        assert_eq!(
            (rules.canary, rules.canary_soak, rules.waves),
            (2, 90 * 60 * 1000, true)
        );
        let args = pool_args(
            &base(),
            "a",
            &spec(serde_json::json!({"maxFailures": 0, "canarySoak": "0s"})),
        )
        .unwrap();
        assert_eq!(args.max_failures, Some(MaxFailures::Count(0)));
        assert!(args.canary_soak.is_zero());
    }

    #[test]
    fn a_pool_keeps_its_nodes_set_aside_cordoned_only_with_drain_attempts() {
        let read = |fields| pool_args(&base(), "a", &spec(fields));
        let args =
            read(serde_json::json!({"drainAttempts": 2, "keepSetAsideCordoned": true})).unwrap();
        assert!(args.set_aside().keep_cordoned);
        assert_eq!(args.set_aside().keep_cordon_at(), Some(2));
        let problems = read(serde_json::json!({"keepSetAsideCordoned": true})).unwrap_err();
        assert_eq!(
            problems,
            ["spec.keepSetAsideCordoned: needs drainAttempts: without it no node is set aside"]
        );
        let off = read(serde_json::json!({"keepSetAsideCordoned": false})).unwrap();
        assert!(!off.set_aside().keep_cordoned);
        let started = Args::parse_from([
            "reboot-controller",
            "--drain-attempts=2",
            "--keep-set-aside-cordoned",
        ]);
        assert!(started.set_aside().keep_cordoned, "the flags' pool has it");
        let inherited = pool_args(&started, "a", &RebootPoolSpec::default()).unwrap();
        assert!(
            !inherited.set_aside().keep_cordoned,
            "a pool does not inherit it"
        );
    }

    #[test]
    fn a_pools_resumed_at_reaches_its_rollout_rules_and_a_bad_one_names_its_field() {
        let read = |at: &str| pool_args(&base(), "a", &spec(serde_json::json!({"resumedAt": at})));
        let args = read("2026-12-03T07:40:00.5Z").unwrap();
        assert_eq!(args.rollout_rules().resumed_at, Some(1_796_283_600_500));
        let problems = read("yesterday").unwrap_err();
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(
            problems[0].starts_with("spec.resumedAt: \"yesterday\" is not an RFC 3339 time"),
            "{problems:?}"
        );
        assert_eq!(base().rollout_rules().resumed_at, None, "no flag has it");
    }

    #[test]
    fn rollout_rules_left_out_are_the_flags_defaults_not_the_flags_pools_values() {
        let started = Args::parse_from([
            "reboot-controller",
            "--canary=3",
            "--canary-soak=1h",
            "--waves",
            "--max-failures=2",
        ]);
        assert_eq!(
            (
                started.canary,
                started.waves,
                started.max_failures.is_some()
            ),
            (3, true, true),
            "the flags' pool has them"
        );
        let args = pool_args(&started, "a", &RebootPoolSpec::default()).unwrap();
        assert_eq!(args.canary, 0);
        assert!(args.canary_soak.is_zero());
        assert!(!args.waves);
        assert_eq!(args.max_failures, None);
    }

    #[test]
    fn bad_rollout_rules_name_their_fields() {
        for (field, value, says) in [
            (
                "maxFailures",
                serde_json::json!("101%"),
                "cannot exceed 100%",
            ),
            ("maxFailures", serde_json::json!("x"), "it is not a number"),
            ("maxFailures", serde_json::json!(-1), "it is negative"),
            ("canary", serde_json::json!(-1), "cannot be negative"),
            ("canarySoak", serde_json::json!("soon"), "such as `30s`"),
        ] {
            let problems =
                pool_args(&base(), "a", &spec(serde_json::json!({ field: value }))).unwrap_err();
            assert_eq!(problems.len(), 1, "{field} {value}: {problems:?}");
            let prefix = format!("spec.{field}: ");
            assert!(
                problems[0].starts_with(&prefix) && problems[0].contains(says),
                "{field} {value}: {problems:?}"
            );
        }
        let problems = pool_args(
            &base(),
            "a",
            &spec(serde_json::json!({"maxFailures": "101%"})),
        )
        .unwrap_err();
        assert!(
            problems[0].contains("for example `10%`"),
            "the fix, as the flag's: {problems:?}"
        );
    }

    #[test]
    fn a_pool_reads_its_reboot_estimate() {
        use std::time::Duration;
        let args = pool_args(
            &base(),
            "a",
            &spec(serde_json::json!({
                "windows": ["mon-fri 22:00-06:00 UTC"],
                "rebootEstimate": "1h30m",
            })),
        )
        .unwrap();
        assert_eq!(args.reboot_estimate, Some(Duration::from_secs(90 * 60)));
        let args = pool_args(&base(), "a", &spec(serde_json::json!({}))).unwrap();
        assert_eq!(args.reboot_estimate, None, "unset: off");
    }

    #[test]
    fn a_reboot_estimate_left_out_is_the_flags_default_not_the_flags_pools_value() {
        let started = Args::parse_from(["reboot-controller", "--reboot-estimate=2h"]);
        assert!(started.reboot_estimate.is_some(), "the flags' pool has it");
        let args = pool_args(&started, "a", &RebootPoolSpec::default()).unwrap();
        assert_eq!(args.reboot_estimate, None);
    }

    #[test]
    fn a_bad_reboot_estimate_names_its_field() {
        for (value, says) in [
            ("soon", "invalid duration \"soon\""),
            ("0s", "it must be longer than zero"),
            ("-5m", "it is negative"),
            ("", "it is empty"),
        ] {
            let problems = pool_args(
                &base(),
                "a",
                &spec(serde_json::json!({ "rebootEstimate": value })),
            )
            .unwrap_err();
            assert_eq!(problems.len(), 1, "{value:?}: {problems:?}");
            assert!(
                problems[0].starts_with("spec.rebootEstimate: ")
                    && problems[0].contains(says)
                    && problems[0].contains("such as `30s`"),
                "{value:?}: {problems:?}"
            );
        }
    }

    #[test]
    fn a_name_too_long_for_its_ledger_is_refused() {
        let long = "p".repeat(240);
        let problems = pool_args(&base(), &long, &RebootPoolSpec::default()).unwrap_err();
        assert!(problems[0].starts_with("metadata.name"), "{problems:?}");
    }

    #[test]
    fn every_problem_is_named_by_its_field() {
        let problems = pool_args(
            &base(),
            "a",
            &spec(serde_json::json!({
                "maxUnavailable": "lots",
                "windows": ["someday"],
                "rebootTimeout": "soon",
                "gates": {"alertFilter": "Kube.*"},
            })),
        )
        .unwrap_err();
        let all = problems.join("\n");
        for field in [
            "spec.maxUnavailable",
            "spec.windows[0]",
            "spec.rebootTimeout",
            "spec.gates.alertFilter: needs the controller's --prometheus-url",
        ] {
            assert!(all.contains(field), "{field} in {all}");
        }
    }

    #[test]
    fn contradictions_between_fields_are_refused_as_the_flags_are() {
        let problems = pool_args(
            &base(),
            "a",
            &spec(serde_json::json!({"rebootTimeout": "1h", "giveUpAfter": "10m"})),
        )
        .unwrap_err();
        assert!(problems[0].contains("give-up-after"), "{problems:?}");
    }
}
