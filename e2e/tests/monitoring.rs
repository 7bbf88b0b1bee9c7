//! Alerts and dashboard (docs/src/operations.md, `monitoring/`): the rule file passes the REAL
//! `promtool check rules` and its unit tests (`promtool test rules`), every alert is tested firing
//! and quiet and tells what to do, the dashboard's queries are valid PromQL on the `DS_PROMETHEUS`
//! datasource variable, and every metric (with its labels and values) that a rule or a panel
//! names is one the real controller and agent export, scraped from a sandbox that went
//! through a reboot and a drain timeout.

use common::ControllerReason;
use e2e::{
    BudgetWatch, apply, has_event, kubectl,
    promql::{Exposition, dashboard_expressions, rule_expressions, selectors},
    request_reboot,
    rollout::back,
    scrape::{metric, scrape},
    wait_for_event, wait_until,
};
use nodesim::sandbox::SandboxConfig;
use serde_json::Value;
use std::{
    collections::{BTreeMap, BTreeSet},
    path::{Path, PathBuf},
    process::Command,
    time::Duration,
};

const RULES: &str = "monitoring/prometheus-rules.yaml";
const RULE_TESTS: &str = "monitoring/prometheus-rules.test.yaml";
const DASHBOARD: &str = "monitoring/dashboard.json";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("e2e is in the workspace")
        .to_path_buf()
}

fn read(path: &str) -> String {
    std::fs::read_to_string(repo().join(path)).unwrap_or_else(|e| panic!("read {path}: {e}"))
}

fn dashboard() -> Value {
    serde_json::from_str(&read(DASHBOARD)).unwrap_or_else(|e| panic!("{DASHBOARD}: {e}"))
}

/// Runs the real promtool from `testenv/bin` in the repository; fails (never skips) when it
/// is not built.
fn promtool(args: &[&str]) -> String {
    let path = testenv::bin_dir().join("promtool");
    assert!(
        path.is_file(),
        "{} is missing: build it with `make testenv`",
        path.display()
    );
    let output = Command::new(&path)
        .args(args)
        .current_dir(repo())
        .output()
        .unwrap_or_else(|e| panic!("run {}: {e}", path.display()));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        output.status.success(),
        "promtool {} failed ({}):\n{text}",
        args.join(" "),
        output.status
    );
    text
}

#[test]
fn promtool_checks_the_rules_and_runs_their_unit_tests() {
    let checked = promtool(&["check", "rules", "--lint=all", "--lint-fatal", RULES]);
    assert!(checked.contains("SUCCESS"), "{checked}");
    let tested = promtool(&["test", "rules", RULE_TESTS]);
    assert!(tested.contains("SUCCESS"), "{tested}");
}

/// The alerts of the rule file, each with the lines of its rule.
fn alerts(yaml: &str) -> BTreeMap<String, Vec<String>> {
    let mut alerts: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut current = None;
    for line in yaml.lines() {
        let trimmed = line.trim_start().trim_start_matches("- ");
        if let Some(name) = trimmed.strip_prefix("alert:") {
            current = Some(name.trim().to_owned());
        } else if trimmed.starts_with("record:") {
            current = None;
        }
        if let Some(name) = &current {
            alerts
                .entry(name.clone())
                .or_default()
                .push(trimmed.to_owned());
        }
    }
    alerts
}

#[test]
fn every_alert_has_a_severity_says_what_to_do_and_is_tested_firing_and_quiet() {
    let alerts = alerts(&read(RULES));
    assert!(alerts.len() >= 7, "{:?}", alerts.keys());
    for wanted in [
        "NodeRebootStuck",
        "NodeRebootDrainBlocked",
        "NodeRebootControllerNoLeader",
        "NodeRebootControllerDown",
        "NodeRebootControllerAbsent",
        "NodeRebootsFailing",
        "NodeRebootBudgetExhausted",
    ] {
        assert!(alerts.contains_key(wanted), "no alert {wanted}");
    }
    for (name, lines) in &alerts {
        let has = |key: &str| lines.iter().any(|l| l.starts_with(key));
        assert!(
            ["severity: critical", "severity: warning", "severity: info"]
                .iter()
                .any(|s| has(s)),
            "{name}: a severity label"
        );
        for key in ["summary:", "description:", "runbook:"] {
            assert!(has(key), "{name}: a {key} annotation");
        }
        assert!(
            lines.iter().any(|l| l.contains("kubectl")),
            "{name}: its runbook names the kubectl commands to run"
        );
    }

    // In the unit tests, each alert is expected to fire at some time and not at another.
    let (mut fires, mut quiet) = (BTreeSet::new(), BTreeSet::new());
    let mut current = String::new();
    for line in read(RULE_TESTS).lines() {
        let line = line.trim();
        if let Some(name) = line.strip_prefix("alertname:") {
            current = name.trim().to_owned();
        } else if let Some(rest) = line.strip_prefix("exp_alerts:") {
            if rest.trim() == "[]" {
                quiet.insert(current.clone());
            } else {
                fires.insert(current.clone());
            }
        }
    }
    for name in alerts.keys() {
        assert!(fires.contains(name), "{name}: no unit test where it fires");
        assert!(
            quiet.contains(name),
            "{name}: no unit test where it must not fire"
        );
    }
}

/// Grafana's variables replaced by values a query could get.
fn without_variables(expr: &str) -> String {
    let mut out = String::new();
    let mut rest = expr;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        let (name, tail) = match after.strip_prefix('{') {
            Some(braced) => {
                let end = braced.find('}').expect("a closed ${...}");
                (&braced[..end], &braced[end + 1..])
            }
            None => {
                let end = after
                    .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .unwrap_or(after.len());
                (&after[..end], &after[end..])
            }
        };
        out.push_str(match name {
            "window" => "1h",
            n if n.starts_with("__") => "5m",
            _ => ".*",
        });
        rest = tail;
    }
    out.push_str(rest);
    out
}

#[test]
fn the_dashboard_uses_the_datasource_variable_and_valid_promql() {
    let dashboard = dashboard();
    let variables = dashboard["templating"]["list"]
        .as_array()
        .expect("templating");
    assert!(
        variables
            .iter()
            .any(|v| v["name"] == "DS_PROMETHEUS" && v["type"] == "datasource"),
        "a datasource variable DS_PROMETHEUS"
    );
    let mut ids = BTreeSet::new();
    let mut titles = Vec::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        assert!(
            ids.insert(panel["id"].as_u64().expect("an id")),
            "ids are unique"
        );
        titles.push(panel["title"].as_str().unwrap_or_default().to_owned());
        if panel["type"] == "row" {
            continue;
        }
        assert_eq!(
            panel["datasource"]["uid"], "${DS_PROMETHEUS}",
            "{}",
            panel["title"]
        );
        let targets = panel["targets"].as_array().expect("targets");
        assert!(!targets.is_empty(), "{}: a query", panel["title"]);
        for target in targets {
            assert_eq!(target["datasource"]["uid"], "${DS_PROMETHEUS}");
        }
    }
    for wanted in [
        "Slots in use vs budget",
        "Nodes by state",
        "Reboot duration",
        "Drain duration",
        "API errors",
        "Reboot failures",
        "Gates, window and pause",
    ] {
        assert!(
            titles.iter().any(|t| t.starts_with(wanted)),
            "a panel {wanted:?} in {titles:?}"
        );
    }

    // Every query is valid PromQL: promtool checks them as recording rules.
    let queries = dashboard_expressions(&dashboard);
    assert!(queries.len() > 20, "{queries:?}");
    let mut rules = String::from("groups:\n  - name: dashboard\n    rules:\n");
    for (i, (_, expr)) in queries.iter().enumerate() {
        let expr = serde_json::to_string(&without_variables(expr)).unwrap();
        rules.push_str(&format!(
            "      - record: dashboard_query_{i}\n        expr: {expr}\n"
        ));
    }
    let file = std::env::temp_dir().join(format!("dashboard-queries-{}.yaml", std::process::id()));
    std::fs::write(&file, &rules).unwrap();
    let checked = promtool(&["check", "rules", &file.display().to_string()]);
    std::fs::remove_file(&file).ok();
    assert!(checked.contains("SUCCESS"), "{checked}\n{rules}");
}

/// Every query of the rules and of the dashboard, with where it is from.
fn all_queries() -> Vec<(String, String)> {
    let mut queries: Vec<(String, String)> = rule_expressions(&read(RULES))
        .into_iter()
        .map(|(alert, expr)| (format!("{RULES}: {alert}"), expr))
        .collect();
    queries.extend(
        dashboard_expressions(&dashboard())
            .into_iter()
            .map(|(place, expr)| (format!("{DASHBOARD}: {place}"), expr)),
    );
    queries
}

/// What is wrong with the queries against `exported`, and the notes on what could not be
/// checked.
fn problems(queries: &[(String, String)], exported: &Exposition) -> (Vec<String>, Vec<String>) {
    let (mut wrong, mut notes) = (Vec::new(), BTreeSet::new());
    for (place, expr) in queries {
        match selectors(expr) {
            Err(error) => wrong.push(format!("{place}: {error}")),
            Ok(found) => {
                if found.is_empty() {
                    wrong.push(format!("{place}: no metric in {expr}"));
                }
                for selector in found {
                    match exported.check(&selector) {
                        Err(error) => wrong.push(format!("{place}: {error}")),
                        Ok(Some(note)) => {
                            notes.insert(note);
                        }
                        Ok(None) => {}
                    }
                }
            }
        }
    }
    (wrong, notes.into_iter().collect())
}

#[test]
fn a_query_of_a_metric_that_is_not_exported_is_caught() {
    let scrape = "# TYPE node_reboot_slots_in_use gauge\nnode_reboot_slots_in_use 0\n\
                  # TYPE node_reboot_nodes gauge\nnode_reboot_nodes{state=\"idle\"} 1\n# EOF\n";
    let mut exported = Exposition::default();
    exported.add(scrape);
    let query = |expr: &str| vec![("q".to_owned(), expr.to_owned())];
    assert!(
        problems(&query("max(node_reboot_slots_in_use)"), &exported)
            .0
            .is_empty()
    );
    for wrong in [
        "max(node_reboot_slot_in_use)",
        "max(node_reboot_slots_in_use) / max(node_reboot_budget)",
        "node_reboot_nodes{phase=\"idle\"}",
        "node_reboot_nodes{state=\"idel\"}",
        "maxx(node_reboot_slots_in_use)",
    ] {
        assert_eq!(
            problems(&query(wrong), &exported).0.len(),
            1,
            "{wrong} is not caught"
        );
    }
}

/// Labelled families the agent registers but that are in its scrape only after their first
/// sample (prometheus-client leaves a family without series out), which a healthy sandbox
/// does not produce: a reboot method that fails, an API error of the agent. Each is checked
/// against the agent's source instead: `(name in a query, source file, registered name)`.
const UNSAMPLED: &[(&str, &str, &str)] = &[
    (
        "node_reboot_agent_reboot_failures_total",
        "agent/src/metrics.rs",
        "reboot_failures",
    ),
    (
        "node_reboot_agent_api_errors_total",
        "agent/src/metrics.rs",
        "api_errors",
    ),
];

/// Adds to `exported` the [`UNSAMPLED`] counters the scrape lacks, once their registration
/// with the agent's prefix is found in the source.
fn add_unsampled(exported: &mut Exposition) {
    for (name, file, registered) in UNSAMPLED {
        if exported.family_of(name).is_some() {
            eprintln!("note: {name} is in the scrape now; its UNSAMPLED entry can go");
            continue;
        }
        let source = read(file).split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(
            source.contains("Registry::with_prefix(\"node_reboot_agent\")")
                && source.contains(&format!("register( \"{registered}\",")),
            "{name}: {file} does not register {registered:?} with the prefix node_reboot_agent"
        );
        let family = name.strip_suffix("_total").expect("a counter");
        exported.add(&format!("# TYPE {family} counter\n"));
        eprintln!("note: {name} has no sample in the sandbox; found registered in {file}");
    }
}

/// A small sandbox where one node reboots and another's drain times out (a pod with a
/// PodDisruptionBudget that nothing may disrupt: without a controller-manager its status is
/// never computed, so the API server refuses every eviction), with a blocking-pod gate
/// configured: then the counters, histograms and labelled families the queries use have
/// samples. Every metric name, label and label value the rules and the dashboard use must be
/// in the controller's or the agent's scrape.
#[tokio::test(flavor = "multi_thread")]
async fn every_metric_the_rules_and_the_dashboard_use_is_exported() {
    let config = SandboxConfig::with_nodes(3)
        .reboot_duration(Duration::from_secs(1))
        // The budget allows no disruption before the request: the pre-flight check would hold
        // sim-1 instead of letting its drain time out.
        .controller_args([
            "--drain-timeout",
            "4s",
            "--blocking-pod-selector",
            "monitoring-e2e=never-matches",
            "--check-disruption-budgets=false",
        ])
        .agent_args(["--log-format=json"]);
    let sb = e2e::sandbox_without_pods(config).await;
    // No controller-manager here to create the namespace's default ServiceAccount.
    apply(
        &sb.control_plane,
        "apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: default, namespace: default}\n",
    );
    apply(
        &sb.control_plane,
        &e2e::pod_that_blocks_the_drain_of("sim-1"),
    );
    wait_until(
        "the blocking pod runs",
        Duration::from_secs(60),
        None,
        || async {
            kubectl(
                &sb.control_plane,
                &["get", "pod", "precious", "-o", "jsonpath={.status.phase}"],
            ) == "Running"
        },
    )
    .await;
    let watch = BudgetWatch::start(sb.client.clone(), 1).await;
    request_reboot(&sb.control_plane, "sim-1");
    wait_until(
        "sim-1 is draining",
        Duration::from_secs(120),
        Some(&watch),
        || async { has_event(&sb.client, "sim-1", ControllerReason::Draining, &[]).await },
    )
    .await;
    request_reboot(&sb.control_plane, "sim-2");
    wait_for_event(
        &sb.client,
        "sim-1",
        ControllerReason::DrainBlocked,
        &[],
        Some(&watch),
    )
    .await;
    wait_until(
        "sim-2 rebooted and is back",
        Duration::from_secs(120),
        Some(&watch),
        || back(&sb, "sim-2", 1),
    )
    .await;
    // Give sim-1 up, so that it does not keep the slot for more timeouts meanwhile.
    kubectl(
        &sb.control_plane,
        &["annotate", "node", "sim-1", "reboot-needed-"],
    );

    let controller = sb.controllers[0]
        .metrics_address()
        .expect("the controller serves metrics");
    let text = e2e::eventually(
        "the controller's metrics show the reboot and the drain timeout",
        Duration::from_secs(30),
        None,
        || async {
            let text = scrape(controller).await;
            let at_least_one = |series: &str| metric(&text, series).is_some_and(|v| v >= 1.0);
            let done = at_least_one("node_reboot_reboots_completed_total")
                && at_least_one("node_reboot_drain_timeouts_total")
                && at_least_one("node_reboot_reboot_duration_seconds_count")
                && at_least_one("node_reboot_reboots_failed_total{reason=\"drain_timeout\"}")
                && metric(&text, "node_reboot_gate_open{gate=\"blocking_pods\"}").is_some();
            done.then_some(text)
        },
    )
    .await;
    // The agent of sim-2 after its reboot: its second process.
    let agent = scrape(e2e::scrape::agent_serving(&sb, "sim-2", 2).await).await;
    let mut exported = Exposition::default();
    exported.add(&text);
    exported.add(&agent);
    add_unsampled(&mut exported);

    let queries = all_queries();
    assert!(queries.len() > 30, "{queries:?}");
    let (wrong, notes) = problems(&queries, &exported);
    for note in &notes {
        eprintln!("note: {note}");
    }
    // Families nobody looks at: a hint for the dashboard, not a failure.
    let used: BTreeSet<String> = queries
        .iter()
        .filter_map(|(_, expr)| selectors(expr).ok())
        .flatten()
        .filter_map(|s| exported.family_of(&s.name).map(str::to_owned))
        .collect();
    for family in exported.families.keys().filter(|f| !used.contains(*f)) {
        eprintln!("note: {family} is exported but on no panel and in no rule");
    }
    assert!(
        wrong.is_empty(),
        "queries that name what the programs do not export:\n{}\n\ncontroller scrape:\n{text}\n\
         agent scrape:\n{agent}",
        wrong.join("\n")
    );
    watch
        .check()
        .unwrap_or_else(|violation| panic!("{violation}"));
    sb.stop().await;
}

/// What replaces kured's `kured_reboot_required`: each agent's
/// `node_reboot_agent_reboot_required` is 1 while its node has a reboot requested and not
/// completed, whatever holds it (here an opt-out label keeps it from ever being granted), and
/// 0 again once the request is gone.
#[tokio::test(flavor = "multi_thread")]
async fn the_agents_reboot_required_gauge_follows_its_nodes_request() {
    let config = SandboxConfig::with_nodes(1)
        .reboot_duration(Duration::from_secs(1))
        .agent_args(["--log-format=json"]);
    let sb = e2e::sandbox_without_pods(config).await;
    let agent = e2e::scrape::agent_serving(&sb, "sim-1", 1).await;
    let required = "node_reboot_agent_reboot_required";
    let gauge = || async { metric(&scrape(agent).await, required) };
    assert_eq!(gauge().await, Some(0.0), "no request yet");
    kubectl(
        &sb.control_plane,
        &["label", "node", "sim-1", "reboot-disabled=true"],
    );
    kubectl(
        &sb.control_plane,
        &["annotate", "node", "sim-1", "reboot-needed=true"],
    );
    e2e::eventually(
        "the gauge says 1",
        Duration::from_secs(30),
        None,
        || async { (gauge().await == Some(1.0)).then_some(()) },
    )
    .await;
    kubectl(
        &sb.control_plane,
        &["annotate", "node", "sim-1", "reboot-needed-"],
    );
    e2e::eventually(
        "the gauge says 0 again",
        Duration::from_secs(30),
        None,
        || async { (gauge().await == Some(0.0)).then_some(()) },
    )
    .await;
    assert_eq!(
        sb.fleet.reboots("sim-1"),
        0,
        "an opted-out node is not rebooted"
    );
    sb.stop().await;
}
