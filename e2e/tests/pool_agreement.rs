//! What the API server accepts in a RebootPool, the controller runs and the plugin reads: every
//! edge value of every field of the spec goes to the real API server (the chart's CRD, its
//! schema and CEL rules, by a server-side dry run), to the controller's own reading of a pool
//! (`controller::pools::settings::read_pool`), to the plugin's (`kubectl reboot status` and
//! `plan` read the budget and the rollout settings) and to the chart (`helm template` of the
//! `pools` value, through values.schema.json), and all must give the same answer. Where only
//! the controller can tell (a time zone, a regular expression, two fields that contradict
//! each other), the case says why: the API server accepts it, and the pool then runs invalid
//! (it grants nothing new and finishes what it holds, with the reason on its status).

use clap::Parser;
use e2e::install::{chart_dir, control_plane};
use serde_json::{Value, json};
use std::collections::BTreeMap;

/// One value of one field, as a spec with that field alone.
struct Case {
    field: &'static str,
    spec: Value,
    /// Why the API server accepts what the controller refuses (only the controller can tell).
    only_the_controller: Option<&'static str>,
}

fn at(field: &'static str, value: Value) -> Value {
    let mut spec = json!({});
    let mut at = &mut spec;
    let mut parts = field.split('.').peekable();
    while let Some(part) = parts.next() {
        if parts.peek().is_none() {
            at[part] = value.clone();
        } else {
            at[part] = json!({});
            at = &mut at[part];
        }
    }
    spec
}

fn cases() -> Vec<Case> {
    let mut out = Vec::new();
    let mut add = |field: &'static str, values: Vec<Value>| {
        for value in values {
            out.push(Case {
                field,
                spec: at(field, value),
                only_the_controller: None,
            });
        }
    };
    let budgets = || {
        vec![
            json!(0),
            json!(-1),
            json!(2),
            json!("0%"),
            json!("25%"),
            json!("100%"),
            json!("101%"),
            json!("0100%"),
            json!("abc"),
            json!("25"),
            json!(" 25% "),
        ]
    };
    add("maxUnavailable", budgets());
    add("maxUnavailablePerZone", budgets());
    add("concurrency", budgets());
    add(
        "zoneLabel",
        vec![json!("rack"), json!("example.com/zone"), json!("")],
    );
    add(
        "windows",
        vec![
            json!(["Mon-Fri 22:00-06:00"]),
            json!(["0 22 * * 1-5 8h Europe/Berlin"]),
        ],
    );
    add(
        "blackouts",
        vec![json!(["2026-12-20..2027-01-03 Europe/Berlin"])],
    );
    add(
        "scheduledBudgets",
        vec![
            json!(["1 Mon-Fri 06:00-22:00 Europe/Berlin"]),
            json!(["0 2026-12-20..2027-01-03"]),
        ],
    );
    add("finishAfterWindow", vec![json!(true), json!(false)]);
    let durations = || {
        vec![
            json!("45m"),
            json!("1h30m"),
            json!("500ms"),
            json!("0s"),
            json!("1d"),
            json!("soon"),
            json!("-5m"),
            json!(""),
        ]
    };
    add("rebootEstimate", durations());
    add("rebootTimeout", durations());
    add("canarySoak", durations());
    add("drain.timeout", durations());
    add("drain.gracePeriod", durations());
    add("drain.delay", durations());
    add("minReadySeconds", vec![json!(0), json!(-1), json!(300)]);
    add("drainAttempts", vec![json!(0), json!(1), json!(-1)]);
    add("maxBlockedNodes", vec![json!(-1)]);
    add("keepSetAsideCordoned", vec![json!(false)]);
    add(
        "canary",
        vec![json!(0), json!(1), json!(-1), json!(4_294_967_296_u64)],
    );
    add("waves", vec![json!(true)]);
    add(
        "maxFailures",
        vec![
            json!(0),
            json!(-1),
            json!(2),
            json!("10%"),
            json!("101%"),
            json!("x"),
        ],
    );
    add("paused", vec![json!(true)]);
    add(
        "resumedAt",
        vec![
            json!("2026-12-03T07:40:00Z"),
            json!("2026-12-03T07:40:00.000+01:00"),
            json!("yesterday"),
        ],
    );
    add("drain.enabled", vec![json!(false)]);
    add("drain.forceReboot", vec![json!(true)]);
    add("drain.podSelector", vec![json!("app!=critical"), json!("")]);
    add(
        "gates.blockingPodSelectors",
        vec![json!(["app=backup"]), json!([])],
    );
    add(
        "marks.preRebootNodeLabels",
        vec![json!({"lb": "out"}), json!({})],
    );
    add("marks.postRebootNodeLabels", vec![json!({"lb": "in"})]);
    add(
        "marks.preferNoScheduleTaint",
        vec![json!("example.com/reboot-pending")],
    );
    add(
        "nodeSelector",
        vec![
            json!({"matchLabels": {"pool": "gpu"}}),
            json!({"matchExpressions": [{"key": "a", "operator": "In", "values": []}]}),
            json!({"matchExpressions": [{"key": "a", "operator": "Exists"}]}),
            json!({"matchExpressions": [{"key": "a", "operator": "Gt", "values": ["1"]}]}),
        ],
    );
    let only = |field, value, why| Case {
        field,
        spec: at(field, value),
        only_the_controller: Some(why),
    };
    out.extend([
        only(
            "windows",
            json!(["Mon-Fri 22:00-06:00 Mars/Olympus"]),
            "a time zone: the API server has no zone database",
        ),
        only(
            "windows",
            json!(["never"]),
            "a window's words: CEL has no parser for them",
        ),
        only(
            "blackouts",
            json!(["2026-13-01..2027-01-03"]),
            "a calendar date: CEL has no parser for them",
        ),
        only(
            "scheduledBudgets",
            json!(["150% daily 01:00-05:00"]),
            "a scheduled budget's words: CEL has no parser for them",
        ),
        only(
            "gates.alertFilter",
            json!("^Watchdog$"),
            "the controller's --prometheus-url: this one runs without it",
        ),
        only(
            "gates.alertFilter",
            json!("("),
            "a regular expression: RE2 as the controller compiles it",
        ),
        only(
            "drain.podSelector",
            json!("app in ("),
            "a selector's syntax: CEL has no parser for it",
        ),
        only(
            "gates.blockingPodSelectors",
            json!(["app in ("]),
            "a selector's syntax: CEL has no parser for it",
        ),
        only(
            "marks.preRebootNodeLabels",
            json!({"bad key!": "x"}),
            "a label key's syntax, as the controller reads it",
        ),
        only(
            "marks.preferNoScheduleTaint",
            json!("Bad Taint!"),
            "a taint key's syntax, as the controller reads it",
        ),
        only(
            "zoneLabel",
            json!("Bad Key"),
            "a label key's syntax, as the controller reads it",
        ),
        only(
            "nodeSelector",
            json!({"matchLabels": {"bad key!": "x"}}),
            "a label key's syntax, as the controller reads it",
        ),
        only(
            "maxBlockedNodes",
            json!(0),
            "it needs drainAttempts, another field",
        ),
        only(
            "keepSetAsideCordoned",
            json!(true),
            "it needs drainAttempts, another field",
        ),
        only(
            "giveUpAfter",
            json!("10m"),
            "shorter than rebootTimeout (30m by default), another field",
        ),
    ]);
    out
}

/// The fields the plugin reads of a spec (`kubectl reboot status` and `plan`).
const PLUGIN_READS: &[&str] = &[
    "maxUnavailable",
    "maxUnavailablePerZone",
    "concurrency",
    "windows",
    "blackouts",
    "scheduledBudgets",
    "minReadySeconds",
    "drainAttempts",
    "maxBlockedNodes",
    "keepSetAsideCordoned",
    "canary",
    "canarySoak",
    "waves",
    "maxFailures",
    "resumedAt",
    "rebootEstimate",
];

/// The controller's answer: `None` when it runs the pool as written, else its problems.
fn controller_reads(spec: &Value) -> Option<String> {
    let typed: common::pool::RebootPoolSpec = match serde_json::from_value(spec.clone()) {
        Ok(typed) => typed,
        Err(error) => return Some(format!("not a RebootPool spec: {error}")),
    };
    let base = controller::args::Args::parse_from(["reboot-controller"]);
    match controller::pools::settings::read_pool(&base, "p", &typed) {
        Ok((_, problems)) if problems.is_empty() => None,
        Ok((_, problems)) | Err(problems) => Some(problems.join("; ")),
    }
}

/// The plugin's answer, for the fields it reads.
fn plugin_reads(spec: &Value) -> Option<String> {
    let typed: common::pool::RebootPoolSpec = match serde_json::from_value(spec.clone()) {
        Ok(typed) => typed,
        Err(error) => return Some(format!("not a RebootPool spec: {error}")),
    };
    if let Err(why) = kubectl_reboot::pool_spec::budget(&typed).max_unavailable {
        return Some(why);
    }
    kubectl_reboot::plan::Settings::of_spec(&typed, None).err()
}

/// The chart's answer: `None` when `helm template` renders the pool, else helm's message.
fn chart_renders(home: &std::path::Path, index: usize, spec: &Value) -> Option<String> {
    let mut pool = spec.clone();
    pool["name"] = json!(format!("c{index}"));
    let values = home.join(format!("case-{index}.json"));
    std::fs::write(&values, json!({"pools": [pool]}).to_string()).expect("values file");
    let out = e2e::install::template_pools(home, &values);
    (!out.status.success()).then(|| String::from_utf8_lossy(&out.stderr).into_owned())
}

/// `kubectl create --dry-run=server` of `list`: what it printed of the objects it accepted,
/// and of those it refused (it goes on past each).
fn dry_run(cp: &testenv::ControlPlane, list: &str) -> (String, String) {
    let out = e2e::install::create_dry_run(cp, &["-o", "name"], list);
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn the_api_server_the_controller_the_plugin_and_the_chart_agree_on_every_pool_value() {
    let cp = control_plane(false).await;
    let crd = chart_dir().join("crds/rebootpools.yaml");
    let crd = crd.display().to_string();
    for args in [
        &["apply", "--server-side", "-f", &crd][..],
        &[
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            "customresourcedefinition/rebootpools.node-reboot-operator.io",
        ],
    ] {
        cp.kubectl_with_input(args, "")
            .unwrap_or_else(|e| panic!("{e}"));
    }
    let cases = cases();
    // One dry run of every case's pool: kubectl names each it refuses, and goes on.
    let pools: Vec<Value> = cases
        .iter()
        .enumerate()
        .map(|(i, case)| {
            json!({
                "apiVersion": "node-reboot-operator.io/v1alpha1",
                "kind": "RebootPool",
                "metadata": {"name": format!("c{i}")},
                "spec": case.spec,
            })
        })
        .collect();
    let list = json!({"apiVersion": "v1", "kind": "List", "items": pools}).to_string();
    let (accepted, refused) = dry_run(&cp, &list);
    let refusals: BTreeMap<usize, String> = (0..cases.len())
        .filter_map(|i| {
            let named = format!("\"c{i}\"");
            refused
                .lines()
                .find(|line| line.contains(&named))
                .map(|line| (i, line.to_owned()))
        })
        .collect();
    let home = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("pool-agreement");
    std::fs::create_dir_all(&home).expect("scratch directory");
    let mut disagreements = Vec::new();
    for (i, case) in cases.iter().enumerate() {
        let api = refusals.get(&i).cloned();
        let seen = accepted
            .lines()
            .any(|l| l.trim_end() == format!("rebootpool.node-reboot-operator.io/c{i}"));
        assert!(
            seen != api.is_some(),
            "case {i} ({}) neither accepted nor refused by the API server:\n{accepted}\n{refused}",
            case.spec
        );
        let controller = controller_reads(&case.spec);
        let wanted_controller = api.is_some() || case.only_the_controller.is_some();
        if controller.is_some() != wanted_controller {
            disagreements.push(format!(
                "{} {}: API server {:?}, controller {:?}",
                case.field, case.spec, api, controller
            ));
        }
        if case.only_the_controller.is_none() && PLUGIN_READS.contains(&case.field) {
            let plugin = plugin_reads(&case.spec);
            if plugin.is_some() != api.is_some() {
                disagreements.push(format!(
                    "{} {}: API server {:?}, plugin {:?}",
                    case.field, case.spec, api, plugin
                ));
            }
        }
        let chart = chart_renders(&home, i, &case.spec);
        if chart.is_some() != api.is_some() {
            disagreements.push(format!(
                "{} {}: API server {:?}, chart {:?}",
                case.field, case.spec, api, chart
            ));
        }
    }
    assert!(
        disagreements.is_empty(),
        "{} disagreements:\n{}",
        disagreements.len(),
        disagreements.join("\n")
    );
}
