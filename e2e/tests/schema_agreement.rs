//! The chart refuses what the programs refuse, and accepts what they accept: for every value
//! of the chart that becomes a flag, its boundary and bad values go through `helm template`
//! (values.schema.json and the templates' checks) and through the program's own parsing
//! (`--validate` with exactly the container args helm rendered), and both must say the same.
//! A value the schema let through and the program refuses would crash-loop the pod after a
//! successful `helm install`; the other way round, the chart would refuse a working setting.
//!
//! The values are read from the chart (the flag tables of templates/_helpers.tpl): a new
//! flag-backed value without cases here fails the test.

use e2e::install::{NS, chart_dir, helm};
use nodesim::workspace_binary;
use serde_json::{Value, json};
use std::{
    collections::BTreeSet,
    path::{Path, PathBuf},
    process::Command,
    sync::{
        Mutex,
        atomic::{AtomicUsize, Ordering},
    },
};

const RELEASE: &str = "node-reboot-operator";
const CONTROLLER: &str = "reboot-controller";
const AGENT: &str = "reboot-agent";

/// The chart's values that become a program's flag: (`controller`, `agent` or `` for the one
/// value both share), the value's key, the flag. From the tables `nro.controllerFlags` and
/// `nro.agentFlags` of templates/_helpers.tpl, which render the args.
fn flag_values() -> Vec<(&'static str, String, String)> {
    let helpers = std::fs::read_to_string(chart_dir().join("templates/_helpers.tpl"))
        .expect("templates/_helpers.tpl");
    let mut out = Vec::new();
    for (section, define) in [
        ("controller", "nro.controllerFlags"),
        ("agent", "nro.agentFlags"),
    ] {
        let start = helpers
            .find(&format!("define \"{define}\""))
            .unwrap_or_else(|| panic!("_helpers.tpl defines {define}"));
        let body = &helpers[start..];
        let body = &body[..body.find("{{- end").expect("the define ends")];
        for line in body.lines() {
            let Some(row) = line.trim().strip_prefix("(list \"") else {
                continue;
            };
            let words: Vec<&str> = row.split('"').collect();
            let (key, flag) = (words[0], words[2]);
            let section = if key == "annotationPrefix" {
                ""
            } else {
                section
            };
            if !out.iter().any(|(s, k, _)| *s == section && k == key) {
                out.push((section, key.to_owned(), flag.to_owned()));
            }
        }
    }
    assert!(
        out.len() > 40,
        "flag values read from _helpers.tpl: {out:?}"
    );
    out
}

/// A value's full name in the chart: `controller.flags.drainTimeout`, `annotationPrefix`.
fn value_name(section: &str, key: &str) -> String {
    match section {
        "" => key.to_owned(),
        s => format!("{s}.flags.{key}"),
    }
}

/// One case: the values it sets (beside the defaults), as a values file.
struct Case {
    /// The value the case is about (`controller.flags.drainTimeout`).
    value: String,
    values: Value,
    /// Why only the program can refuse it (the schema has no way to know), if so.
    only_the_program: Option<&'static str>,
}

fn values_for(section: &str, key: &str, value: Value) -> Value {
    match section {
        "" => json!({ key: value }),
        s => json!({ s: {"flags": { key: value }} }),
    }
}

/// The bad and boundary values of each kind of value, and a good one.
fn durations() -> Vec<Value> {
    ["0s", "00m", "-1s", "", "90", "1d", "1h30m"]
        .map(Value::from)
        .to_vec()
}

fn budgets() -> Vec<Value> {
    vec![
        json!(0),
        json!(-1),
        json!("0"),
        json!("-1"),
        json!("0%"),
        json!("110%"),
        json!("101%"),
        json!("100%"),
        json!(""),
        json!("abc"),
        json!("2.5"),
        json!(" 25% "),
        json!(2),
        json!("3"),
    ]
}

fn booleans() -> Vec<Value> {
    vec![json!(true), json!(false), json!("yes"), json!("")]
}

/// A switch is a bare flag when true: a value that is no boolean never reaches the program
/// as text, so only the schema can refuse it.
fn switches() -> Vec<Value> {
    vec![json!(true), json!(false)]
}

fn selectors() -> Vec<Value> {
    [
        "",
        " ",
        "pool=a",
        "pool in (a,b), !spot, tier != db, gpu",
        "zone in (a",
        "zone in a",
        "a b c",
        "=x",
        "pool=a,,b",
        "Bad Key=x",
        "pool=a b",
        "-x=y",
    ]
    .map(Value::from)
    .to_vec()
}

fn label_keys() -> Vec<Value> {
    [
        "",
        " ",
        "rack",
        "example.com/zone",
        "Bad Key",
        "-x",
        "Example.com/zone",
    ]
    .map(Value::from)
    .to_vec()
}

fn object_names() -> Vec<Value> {
    ["", "pool-a-slots", "Bad_Name", "a.b", "-a"]
        .map(Value::from)
        .to_vec()
}

fn urls() -> Vec<Value> {
    [
        "",
        "http://prometheus.monitoring:9090",
        "https://thanos.example.com/",
        "prometheus:9090",
        "ftp://x",
        "http://",
        "not a url",
    ]
    .map(Value::from)
    .to_vec()
}

fn bind_addresses() -> Vec<Value> {
    vec![
        json!(0),
        json!("0"),
        json!(":9090"),
        json!("127.0.0.1:9090"),
        json!("[::1]:9090"),
        json!("9090"),
        json!(""),
        json!("localhost:9090"),
        json!(":99999"),
        json!(1),
    ]
}

fn log_formats() -> Vec<Value> {
    vec![json!("text"), json!("json"), json!("yaml"), json!("")]
}

fn counts() -> Vec<Value> {
    vec![json!(-1), json!(0), json!(1), json!(300)]
}

fn free_text() -> Vec<Value> {
    vec![json!(""), json!("anything at all"), json!(" ")]
}

/// Every flag-backed value's cases. Its type, from its key.
fn cases_of(section: &str, key: &str) -> Option<Vec<Value>> {
    let strings = |v: &[&str]| v.iter().map(|s| Value::from(*s)).collect::<Vec<_>>();
    Some(match (section, key) {
        ("", "annotationPrefix") => strings(&[
            "",
            "reboot.example.com",
            "reboot.example.com/",
            "Not_A_Domain",
            "a..b",
            " ",
        ]),
        ("controller", "maxUnavailable") => budgets(),
        ("controller", "maxUnavailablePerZone" | "concurrency") => budgets(),
        ("controller", "nodeSelector" | "agentSelector" | "drainPodSelector") => selectors(),
        ("controller", "zoneLabel") => label_keys(),
        ("controller", "namespace") => strings(&["", "ledgers", "Bad_NS", "a.b", "-a"]),
        ("controller", "ledgerName") => {
            let mut cases = object_names();
            cases.push(json!("node-reboot-pool-gpu"));
            cases
        }
        ("controller", "leaderElectionLeaseName") => object_names(),
        (
            "controller",
            "drain"
            | "forceReboot"
            | "checkDisruptionBudgets"
            | "finishAfterWindow"
            | "alertFiringOnly"
            | "leaderElect",
        ) => booleans(),
        ("controller", "dryRun") => switches(),
        (
            "controller",
            "drainTimeout"
            | "evictionRetryMaxDelay"
            | "preflightTimeout"
            | "rebootTimeout"
            | "prometheusTimeout"
            | "alertCheckPeriod"
            | "leaderElectionLeaseDuration"
            | "leaderElectionRenewDeadline"
            | "leaderElectionRetryPeriod"
            | "notifyTimeout",
        ) => durations(),
        ("controller", "drainGracePeriod" | "giveUpAfter") => durations(),
        ("controller", "drainSkipWaitForDeleteMargin" | "drainDelay" | "rebootDelay") => {
            durations()
        }
        ("controller", "minReadySeconds") => counts(),
        ("controller", "drainAttempts") => {
            let mut cases = counts();
            cases.extend(strings(&["", "3", " 2 ", "0", "three"]));
            cases
        }
        // Alone, refused on both sides (it needs drainAttempts); with it, in `combinations`.
        ("controller", "maxBlockedNodes") => counts(),
        // Alone, `true` is refused on both sides (it needs drainAttempts).
        ("controller", "keepSetAsideCordoned") => booleans(),
        ("controller", "canary") => {
            let mut cases = counts();
            cases.extend([json!(4_294_967_295_u64), json!(4_294_967_296_u64)]);
            cases
        }
        ("controller", "canarySoak") => durations(),
        ("controller", "waves") => booleans(),
        ("controller", "rebootEstimate") => {
            let mut cases = durations();
            cases.extend(strings(&[" 45m ", "0s0m", "1h-5m", "soon"]));
            cases
        }
        ("controller", "maxFailures") => {
            let mut cases = vec![json!(-1), json!(0), json!(2), json!(4_294_967_296_u64)];
            cases.extend(strings(&[
                "", " ", "0", "3", " 2 ", "-1", "x", "2.5", "0%", "10%", " 25% ", "100%", "0100%",
                "101%", "110%", "%", "10 %", "1e3",
            ]));
            cases
        }
        ("controller", "rebootWindow") => vec![
            json!([]),
            json!(["Mon-Fri 22:00-06:00"]),
            json!(["Sat,Sun 00:00-24:00 Europe/Berlin"]),
            json!(["0 22 * * 1-5 8h Europe/Berlin"]),
            json!(["Mon-Fri 25:00-26:00"]),
            json!(["Mon-Fri 22:00"]),
            json!(["Mon-Fri 9:00-17:00"]),
            json!(["Mon-Fri 09:60-17:00"]),
            json!([""]),
            json!(["always"]),
            json!(["0 22 * * 1-5"]),
            json!(["0 22 * * 1-5 0s"]),
            json!(["Mon-Fri 22:00-06:00; Sat 00:00-24:00"]),
            json!(["Mon-Fri 22:00-06:00 Mars/Olympus"]),
            json!(["Funday 22:00-06:00"]),
        ],
        ("controller", "rebootBlackout") => vec![
            json!([]),
            json!(["2026-12-20..2027-01-03 Europe/Berlin"]),
            json!(["2026-12-24T18:00..2026-12-27T06:00", "Fri 16:00-24:00"]),
            json!(["0 0 24 12 * 72h"]),
            json!([""]),
            json!(["2027-01-03..2026-12-20"]),
            json!(["sometime"]),
        ],
        ("controller", "scheduledBudget") => vec![
            json!([]),
            json!(["1 Mon-Fri 06:00-22:00 Europe/Berlin"]),
            json!(["0 2026-12-20..2027-01-03", "25% daily 01:00-05:00"]),
            json!(["1"]),
            json!(["one daily 01:00-05:00"]),
            json!(["150% daily 01:00-05:00"]),
            json!(["1 sometime"]),
        ],
        ("controller", "blockingPodSelector") => vec![
            json!([]),
            json!(["app=backup"]),
            json!(["app=backup", "job in (a,b)"]),
            json!([""]),
            json!([" "]),
            json!(["app in (a"]),
            json!(["Bad Key=x"]),
        ],
        ("controller", "blockingPodSelectorScope") => strings(&["node", "cluster", "pod", ""]),
        ("controller", "prometheusUrl") => urls(),
        ("controller", "alertmanagerUrl") => Vec::new(),
        ("controller", "alertFilter") => Vec::new(),
        ("controller", "alertFilterMode") => Vec::new(),
        ("controller" | "agent", "logFormat") => log_formats(),
        ("controller" | "agent", "metricsBindAddress") => bind_addresses(),
        ("controller", "leaderElectionIdentity") => free_text(),
        ("controller", "preRebootNodeLabels" | "postRebootNodeLabels") => vec![
            json!([]),
            json!(["node.example.com/rebooting=true"]),
            json!(["rebooting"]),
            json!(["a=b=c"]),
            json!(["Bad Key=x"]),
            json!(["x=bad value"]),
            json!(["=x"]),
            json!(["a=b,c=d"]),
        ],
        ("controller", "preferNoScheduleTaint") => strings(&[
            "",
            "node.example.com/reboot-pending",
            "reboot pending",
            "Bad_Prefix.io/x",
            " ",
        ]),
        ("controller", "notifyUrl") => vec![
            json!([]),
            json!(["https://hooks.example.com/x"]),
            json!(["slack://token@channel"]),
            json!(["smtp://user:pw@mail.example.com:25/?from=a@example.com&to=b@example.com"]),
            json!([""]),
            json!([" "]),
            json!(["nosuchservice://x"]),
            json!(["not a url"]),
        ],
        (
            "controller",
            "messageTemplateDrain" | "messageTemplateReboot" | "messageTemplateUncordon",
        ) => free_text(),
        ("agent", "bootIdFile") => strings(&["", " ", "/proc/sys/kernel/random/boot_id", "/x"]),
        ("agent", "rebootMethod") => strings(&["command", "signal", "syscall", "magic", ""]),
        ("agent", "rebootCommand" | "rebootSentinelCommand") => strings(&[
            "",
            " ",
            "systemctl reboot",
            "sh -c 'echo \"done\"'",
            "sh -c 'unclosed",
        ]),
        ("agent", "hostMountNamespace") => booleans(),
        ("agent", "signalTargetPid") => vec![json!(0), json!(-1), json!(1), json!(4242)],
        ("agent", "rebootSignal") => vec![
            json!(0),
            json!(-9),
            json!(1),
            json!(32),
            json!(33),
            json!(39),
            json!(64),
            json!(65),
        ],
        ("agent", "rebootTimeout" | "checkPeriod") => durations(),
        ("agent", "maxUnprovenReboots") => counts(),
        ("agent", "rebootAttemptsFile") => strings(&[
            "",
            "/var/lib/reboot-agent/attempts",
            "/var/lib/reboot-agent/",
        ]),
        ("agent", "rebootSentinelFile") => strings(&["", " ", "/host/var/run/reboot-required"]),
        ("agent", "rebootSentinelExitCode") => {
            vec![json!(-1), json!(0), json!(1), json!(255), json!(256)]
        }
        _ => return None,
    })
}

/// Cases of two values together, each about the first value named.
fn combinations() -> Vec<(&'static str, &'static str, Value)> {
    let set_aside = |most: Value| json!({"controller": {"flags": {"drainAttempts": 3, "maxBlockedNodes": most}}});
    vec![
        ("controller", "maxBlockedNodes", set_aside(json!(0))),
        ("controller", "maxBlockedNodes", set_aside(json!(2))),
        ("controller", "maxBlockedNodes", set_aside(json!("2"))),
        ("controller", "maxBlockedNodes", set_aside(json!(-1))),
        (
            "controller",
            "keepSetAsideCordoned",
            json!({"controller": {"flags": {"drainAttempts": 3, "keepSetAsideCordoned": true}}}),
        ),
        (
            "controller",
            "canary",
            json!({"controller": {"flags": {
                "canary": 1, "canarySoak": "30m", "waves": true, "maxFailures": "10%"}}}),
        ),
        (
            "controller",
            "rebootEstimate",
            json!({"controller": {"flags": {
                "rebootEstimate": "45m", "rebootWindow": ["Mon-Fri 22:00-06:00 Europe/Berlin"],
                "finishAfterWindow": false}}}),
        ),
        (
            "agent",
            "rebootSentinelFile",
            json!({"agent": {"flags": {
                "rebootSentinelFile": "/host/var/run/reboot-required",
                "rebootSentinelCommand": "needs-restarting -r"}}}),
        ),
        (
            "agent",
            "rebootSentinelCommand",
            json!({"agent": {"flags": {
                "rebootSentinelFile": "", "rebootSentinelCommand": "needs-restarting -r",
                "rebootSentinelExitCode": 1}}}),
        ),
        (
            "controller",
            "alertFilter",
            json!({"controller": {"flags": {
                "prometheusUrl": "http://prometheus:9090", "alertFilter": "^Watchdog$"}}}),
        ),
        (
            "controller",
            "alertFilter",
            json!({"controller": {"flags": {
                "prometheusUrl": "http://prometheus:9090", "alertFilter": "Watch(dog"}}}),
        ),
        (
            "controller",
            "alertFilter",
            json!({"controller": {"flags": {"alertFilter": "^Watchdog$"}}}),
        ),
        (
            "controller",
            "alertFilterMode",
            json!({"controller": {"flags": {
                "prometheusUrl": "http://prometheus:9090", "alertFilter": "^Watchdog$",
                "alertFilterMode": "include"}}}),
        ),
        (
            "controller",
            "alertFilterMode",
            json!({"controller": {"flags": {
                "prometheusUrl": "http://prometheus:9090", "alertFilter": "^Watchdog$",
                "alertFilterMode": "both"}}}),
        ),
        (
            "controller",
            "alertFilterMode",
            json!({"controller": {"flags": {"alertFilterMode": "include"}}}),
        ),
        (
            "controller",
            "alertFiringOnly",
            json!({"controller": {"flags": {
                "prometheusUrl": "http://prometheus:9090", "alertFiringOnly": true}}}),
        ),
        (
            "controller",
            "alertmanagerUrl",
            json!({"controller": {"flags": {
                "prometheusUrl": "http://prometheus:9090",
                "alertmanagerUrl": "http://alertmanager:9093"}}}),
        ),
        (
            "controller",
            "alertmanagerUrl",
            json!({"controller": {"flags": {
                "prometheusUrl": "http://prometheus:9090", "alertmanagerUrl": "alertmanager"}}}),
        ),
        (
            "controller",
            "alertmanagerUrl",
            json!({"controller": {"flags": {"alertmanagerUrl": "http://alertmanager:9093"}}}),
        ),
        (
            "controller",
            "giveUpAfter",
            json!({"controller": {"flags": {"rebootTimeout": "30m", "giveUpAfter": "10m"}}}),
        ),
        (
            "controller",
            "giveUpAfter",
            json!({"controller": {"flags": {"rebootTimeout": "30m", "giveUpAfter": "30m"}}}),
        ),
        (
            "controller",
            "leaderElectionRenewDeadline",
            json!({"controller": {"flags": {"leaderElectionRenewDeadline": "15s"}}}),
        ),
        (
            "controller",
            "leaderElectionRetryPeriod",
            json!({"controller": {"flags": {"leaderElectionRetryPeriod": "10s"}}}),
        ),
        (
            "controller",
            "leaderElectionLeaseDuration",
            json!({"controller": {"flags": {
                "leaderElectionLeaseDuration": "900ms", "leaderElectionRenewDeadline": "500ms",
                "leaderElectionRetryPeriod": "100ms"}}}),
        ),
        (
            "controller",
            "preRebootNodeLabels",
            json!({"controller": {"flags": {
                "nodeSelector": "pool=a", "preRebootNodeLabels": ["pool=b"]}}}),
        ),
    ]
}

/// Cases the schema cannot refuse, only the program: (value, case, why). The test requires
/// that helm accepts them and the program refuses them, so that an entry goes when it is
/// no longer true.
fn only_the_program() -> Vec<(&'static str, Value, &'static str)> {
    let zones = "a time zone: the schema has no list of the IANA zones";
    vec![
        (
            "controller.flags.rebootWindow",
            json!(["Mon-Fri 22:00-06:00 Mars/Olympus"]),
            zones,
        ),
        (
            "controller.flags.rebootWindow",
            json!(["Funday 22:00-06:00"]),
            "a day's name: the schema checks the window's shape, not its words",
        ),
        (
            "controller.flags.rebootBlackout",
            json!(["2027-01-03..2026-12-20"]),
            "the order of two dates: the schema checks a blackout is not blank",
        ),
        (
            "controller.flags.rebootBlackout",
            json!(["sometime"]),
            "a period's words: the schema checks a blackout is not blank",
        ),
        (
            "controller.flags.scheduledBudget",
            json!(["150% daily 01:00-05:00"]),
            "a percentage over 100: the schema checks the budget is a number or a percentage",
        ),
        (
            "controller.flags.scheduledBudget",
            json!(["1 sometime"]),
            "a period's words: the schema checks the budget and that a period follows",
        ),
        (
            "controller.flags.notifyUrl",
            json!(["slack://token@channel"]),
            "the form of each service's URL: the schema checks the scheme only",
        ),
        (
            "controller.flags.alertFilter",
            json!({"controller": {"flags": {
                "prometheusUrl": "http://prometheus:9090", "alertFilter": "Watch(dog"}}}),
            "a regular expression's syntax",
        ),
    ]
}

fn all_cases() -> Vec<Case> {
    let exceptions = only_the_program();
    let why = |name: &str, values: &Value| {
        exceptions
            .iter()
            .find(|(v, case, _)| *v == name && case == values)
            .map(|(_, _, why)| *why)
    };
    let mut cases = Vec::new();
    let mut missing = Vec::new();
    let values = flag_values();
    for (section, key, _) in &values {
        let name = value_name(section, key);
        match cases_of(section, key) {
            Some(list) => {
                for value in list {
                    let values = values_for(section, key, value.clone());
                    cases.push(Case {
                        only_the_program: why(&name, &value),
                        value: name.clone(),
                        values,
                    });
                }
            }
            None => missing.push(name),
        }
    }
    for (section, key, values) in combinations() {
        let name = value_name(section, key);
        cases.push(Case {
            only_the_program: why(&name, &values),
            value: name,
            values,
        });
    }
    assert!(
        missing.is_empty(),
        "chart values that become flags but have no cases in {}: {missing:?}; add their \
         boundary and bad values to `cases_of`",
        file!()
    );
    let known: BTreeSet<String> = values.iter().map(|(s, k, _)| value_name(s, k)).collect();
    for (name, _, _) in &exceptions {
        assert!(known.contains(*name), "an exception for no value: {name}");
    }
    cases
}

/// What one side said of a case.
#[derive(Debug, Clone)]
struct Verdict {
    accepted: bool,
    said: String,
}

fn scratch() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("schema-agreement");
    std::fs::create_dir_all(&dir).expect("scratch directory");
    dir
}

/// `helm template` of the controller's Deployment and the agent's DaemonSet with `values`.
fn template(values: &Path, skip_schema: bool) -> (bool, String) {
    let mut helm = helm(&scratch().join("helm"));
    helm.args(["template", RELEASE])
        .arg(chart_dir())
        .args(["--namespace", NS, "--values"])
        .arg(values)
        .args([
            "--show-only=templates/controller-deployment.yaml",
            "--show-only=templates/agent-daemonset.yaml",
        ]);
    if skip_schema {
        helm.arg("--skip-schema-validation");
    }
    let out = helm.output().expect("helm runs");
    let text = if out.status.success() {
        String::from_utf8_lossy(&out.stdout)
    } else {
        String::from_utf8_lossy(&out.stderr)
    };
    (out.status.success(), text.trim().to_owned())
}

/// The container args of the workload of `kind` in helm's output: the chart writes them as
/// one JSON list.
fn rendered_args(manifests: &str, kind: &str) -> Vec<String> {
    let document = manifests
        .split("\n---")
        .find(|d| d.contains(&format!("\nkind: {kind}\n")))
        .unwrap_or_else(|| panic!("no {kind} rendered:\n{manifests}"));
    let line = document
        .lines()
        .find_map(|l| l.trim().strip_prefix("args: "))
        .unwrap_or_else(|| panic!("no args in the {kind}:\n{document}"));
    serde_json::from_str(line).unwrap_or_else(|e| panic!("{kind} args {line}: {e}"))
}

/// The args helm would give the programs for `values` when a template refused it (no
/// rendering at all): the defaults' args with the case's own flags added as the chart
/// writes them.
fn args_by_hand(values: &Value, program: &str, defaults: &[String]) -> Vec<String> {
    let section = if program == CONTROLLER {
        "controller"
    } else {
        "agent"
    };
    let mut args = defaults.to_vec();
    for (s, key, flag) in flag_values() {
        let value = match s {
            "" => &values[key.as_str()],
            s if s == section => &values[s]["flags"][key.as_str()],
            _ => continue,
        };
        let text = |v: &Value| match v {
            Value::String(s) => s.clone(),
            v => v.to_string(),
        };
        match value {
            Value::Null => {}
            Value::Array(items) => {
                args.extend(items.iter().map(|i| format!("--{flag}={}", text(i))));
            }
            v => args.push(format!("--{flag}={}", text(v))),
        }
    }
    args
}

fn validate(program: &str, args: &[String]) -> Verdict {
    let binary = workspace_binary(program).expect("built: cargo build --workspace --bins");
    let out = Command::new(binary)
        .arg("--validate")
        .args(args)
        .env_clear()
        .output()
        .expect("the program runs");
    let stdout = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).trim().to_owned();
    match out.status.code() {
        Some(0) => {
            assert_eq!(stdout, "valid", "{program} --validate {args:?}: {stderr}");
            Verdict {
                accepted: true,
                said: stdout,
            }
        }
        Some(2) => Verdict {
            accepted: false,
            said: stderr
                .lines()
                .next()
                .unwrap_or("exit code 2 without a word")
                .to_owned(),
        },
        code => panic!("{program} --validate {args:?}: exit code {code:?}, {stderr}"),
    }
}

/// What helm and the programs say of one case: helm's verdict, each program's verdict, and
/// the args each program got.
fn judge(n: usize, case: &Case, defaults: &[(String, Vec<String>)]) -> Vec<String> {
    let file = scratch().join(format!("case-{n}.json"));
    std::fs::write(&file, case.values.to_string()).expect("values file");
    let (accepted, output) = template(&file, false);
    let helm = Verdict {
        accepted,
        said: if accepted {
            "rendered".to_owned()
        } else {
            output.clone()
        },
    };
    let manifests = if accepted {
        Some(output)
    } else {
        // Refused: what the programs would get without the schema, or by hand when a
        // template refused it too.
        let (rendered, output) = template(&file, true);
        rendered.then_some(output)
    };
    let mut problems = Vec::new();
    for (program, default_args) in defaults {
        if !case_touches(case, program) {
            continue;
        }
        let kind = if program == CONTROLLER {
            "Deployment"
        } else {
            "DaemonSet"
        };
        let args = match &manifests {
            Some(m) => rendered_args(m, kind),
            None => args_by_hand(&case.values, program, default_args),
        };
        let verdict = validate(program, &args);
        let ok = match case.only_the_program {
            Some(_) => helm.accepted && !verdict.accepted,
            None => helm.accepted == verdict.accepted,
        };
        if !ok {
            let side = |accepted| if accepted { "accepted" } else { "refused" };
            problems.push(format!(
                "{}: values {}{}\n  helm {}: {}\n  {program} {}: {}\n  args: {args:?}",
                case.value,
                case.values,
                case.only_the_program
                    .map(|why| format!(" (listed as refused by the program only: {why})"))
                    .unwrap_or_default(),
                side(helm.accepted),
                helm.said.replace('\n', " "),
                side(verdict.accepted),
                verdict.said
            ));
        }
    }
    problems
}

/// Whether a case sets a value that reaches `program`.
fn case_touches(case: &Case, program: &str) -> bool {
    let section = if program == CONTROLLER {
        "controller"
    } else {
        "agent"
    };
    case.values.get(section).is_some() || case.values.get("annotationPrefix").is_some()
}

#[test]
fn the_schema_refuses_what_the_programs_refuse() {
    let cases = all_cases();
    let empty = scratch().join("defaults.json");
    std::fs::write(&empty, "{}").expect("values file");
    let (ok, manifests) = template(&empty, false);
    assert!(ok, "the default values render: {manifests}");
    let defaults: Vec<(String, Vec<String>)> = [(CONTROLLER, "Deployment"), (AGENT, "DaemonSet")]
        .into_iter()
        .map(|(program, kind)| {
            let args = rendered_args(&manifests, kind);
            let verdict = validate(program, &args);
            assert!(
                verdict.accepted,
                "{program} refuses the default args: {verdict:?}"
            );
            (program.to_owned(), args)
        })
        .collect();
    let next = AtomicUsize::new(0);
    let problems = Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..3 {
            scope.spawn(|| {
                loop {
                    let n = next.fetch_add(1, Ordering::Relaxed);
                    let Some(case) = cases.get(n) else { break };
                    let found = judge(n, case, &defaults);
                    problems.lock().expect("problems").extend(found);
                }
            });
        }
    });
    let problems = problems.into_inner().expect("problems");
    assert!(
        problems.is_empty(),
        "helm template and the programs' --validate disagree on {} of {} cases:\n\n{}",
        problems.len(),
        cases.len(),
        problems.join("\n\n")
    );
}

/// The chart's `pools` items take exactly the fields of a RebootPool's spec, and its `name`,
/// each of the CRD's type: a field the chart's schema lacked would be refused by `helm
/// install`, one the CRD lacked would not reach the controller.
#[test]
fn the_charts_pools_take_the_fields_of_a_rebootpool_spec_with_their_types() {
    use kube::CustomResourceExt as _;
    let crd = serde_json::to_value(common::pool::RebootPool::crd()).expect("JSON");
    let spec = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"];
    let spec = spec.as_object().expect("the spec's properties");
    let schema = e2e::chart_values::chart_schema();
    let items = &schema["properties"]["pools"]["items"];
    assert_eq!(items["required"], json!(["name"]), "{items}");
    assert_eq!(items["additionalProperties"], json!(false), "{items}");
    let chart = items["properties"]
        .as_object()
        .expect("the items' properties");
    let chart_keys: BTreeSet<&String> = chart.keys().filter(|k| *k != "name").collect();
    let spec_keys: BTreeSet<&String> = spec.keys().collect();
    assert_eq!(
        chart_keys, spec_keys,
        "the properties of pools[] in values.schema.json (beside `name`) and RebootPool's spec"
    );
    let type_of = |field: &Value| -> Value {
        if field["x-kubernetes-int-or-string"] == json!(true) {
            return json!(["integer", "string"]);
        }
        match field.get("anyOf").and_then(Value::as_array) {
            Some(any) => Value::Array(any.iter().map(|a| a["type"].clone()).collect()),
            None => field["type"].clone(),
        }
    };
    for (key, field) in spec {
        assert_eq!(
            type_of(&chart[key]),
            type_of(field),
            "pools[].{key}: values.schema.json's type and the CRD's"
        );
    }
}
