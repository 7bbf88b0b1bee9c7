//! The Helm chart `charts/node-reboot-operator` (docs/src/install.md), with the real helm that
//! `make testenv` builds into testenv/bin: it lints strictly; with default values it renders
//! the same objects as `kubectl kustomize manifests/` (one source of truth, checked here);
//! every flag of both programs is a value with the program's default and reaches the program;
//! values.schema.json refuses typos and wrong types; it installs, upgrades and uninstalls on
//! the local control plane; and the objects it installs pass the security checks of
//! e2e/tests/security.rs.

use e2e::install::{
    Identities, NS, chart_dir,
    check_an_agent_may_change_only_the_protocol_annotations_of_its_own_node,
    check_the_controller_pod_meets_restricted_pod_security,
    check_what_the_programs_must_not_do_is_refused, control_plane, manifests_dir,
    wait_until_the_policy_is_type_checked,
};
use nodesim::workspace_binary;
use serde_json::{Value, json};
use std::{
    collections::BTreeMap,
    io::Write as _,
    path::{Path, PathBuf},
    process::{Command, Output, Stdio},
};
use testenv::ControlPlane;

const RELEASE: &str = "node-reboot-operator";

/// A directory of this test's own, for helm's config, cache and data and for values files.
fn scratch(test: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("helm-{test}"));
    std::fs::create_dir_all(&dir).expect("scratch directory");
    dir
}

use e2e::install::{helm, helm_on, yaml_to_json};

fn run(mut command: Command, input: Option<&str>) -> Output {
    command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = command
        .spawn()
        .unwrap_or_else(|e| panic!("{command:?} starts: {e}"));
    let mut stdin = child.stdin.take().expect("stdin");
    let input = input.unwrap_or_default().to_owned();
    let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
    let output = child.wait_with_output().expect("it finishes");
    writer.join().expect("writer").expect("it reads its stdin");
    output
}

/// Runs `command`; its stdout, or a panic with its stderr.
fn succeeds(command: Command) -> String {
    let what = format!("{command:?}");
    let output = run(command, None);
    assert!(
        output.status.success(),
        "{what} failed: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Runs `command`, which must fail; what it said on stderr.
fn fails(command: Command) -> String {
    let what = format!("{command:?}");
    let output = run(command, None);
    assert!(
        !output.status.success(),
        "{what} succeeded: {}",
        String::from_utf8_lossy(&output.stdout)
    );
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// `helm template` of the chart into [`NS`] with `args` (`--set ...`, `-f ...`).
fn template(home: &Path, args: &[&str]) -> String {
    let mut helm = helm(home);
    helm.args(["template", RELEASE])
        .arg(chart_dir())
        .args(["--namespace", NS])
        .args(args);
    succeeds(helm)
}

/// The objects of a YAML stream as JSON, parsed by the real kubectl without a server
/// (`kubectl label --local`, which adds an empty `labels` where there is none), keyed by
/// `Kind apiVersion namespace/name`.
fn objects(yaml: &str) -> BTreeMap<String, Value> {
    let mut kubectl = Command::new(ControlPlane::bin("kubectl").unwrap_or_else(|e| panic!("{e}")));
    kubectl
        .args(["label", "--local", "-f", "-", "-o", "json", "e2e-none-"])
        .env("KUBECONFIG", "/dev/null");
    let output = run(kubectl, Some(yaml));
    assert!(
        output.status.success(),
        "kubectl could not parse the objects: {}\n{yaml}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::Deserializer::from_slice(&output.stdout)
        .into_iter::<Value>()
        .map(|object| {
            let object = object.expect("kubectl writes JSON");
            let meta = &object["metadata"];
            let key = format!(
                "{} {} {}/{}",
                object["kind"].as_str().unwrap_or_default(),
                object["apiVersion"].as_str().unwrap_or_default(),
                meta["namespace"].as_str().unwrap_or_default(),
                meta["name"].as_str().unwrap_or_default()
            );
            (key, object)
        })
        .collect()
}

/// The chart's default values.
fn default_values() -> Value {
    let text = std::fs::read_to_string(chart_dir().join("values.yaml")).expect("values.yaml");
    yaml_to_json(&text)
}

/// Where two JSON values differ, as `path: kustomize <a>, helm <b>` lines.
fn differences(path: &str, a: &Value, b: &Value, out: &mut Vec<String>) {
    match (a, b) {
        (Value::Object(a), Value::Object(b)) => {
            for key in a.keys().chain(b.keys().filter(|k| !a.contains_key(*k))) {
                let (x, y) = (
                    a.get(key).unwrap_or(&Value::Null),
                    b.get(key).unwrap_or(&Value::Null),
                );
                differences(&format!("{path}/{key}"), x, y, out);
            }
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            for (i, (x, y)) in x.iter().zip(y).enumerate() {
                differences(&format!("{path}/{i}"), x, y, out);
            }
        }
        _ if a != b => out.push(format!("{path}: kustomize {a}, helm {b}")),
        _ => {}
    }
}

/// What the comparison forgives: kustomize (kyaml) writes a line break before a more-indented
/// line of a folded (`>-`) scalar as two, which changes nothing in a CEL expression.
fn normalize(value: &mut Value) {
    match value {
        Value::String(s) => {
            while s.contains("\n\n") {
                *s = s.replace("\n\n", "\n");
            }
        }
        Value::Array(items) => items.iter_mut().for_each(normalize),
        Value::Object(map) => map.values_mut().for_each(normalize),
        _ => {}
    }
}

/// The container args of the one workload called `name` among rendered `objects`.
fn args_of(objects: &BTreeMap<String, Value>, kind: &str, name: &str) -> Vec<String> {
    let key = format!("{kind} apps/v1 {NS}/{name}");
    let object = objects
        .get(&key)
        .unwrap_or_else(|| panic!("{key} rendered"));
    serde_json::from_value(object["spec"]["template"]["spec"]["containers"][0]["args"].clone())
        .expect("args")
}

#[test]
fn the_chart_passes_helm_lint_strict() {
    let home = scratch("lint");
    let samples = home.join("samples.json");
    std::fs::write(&samples, sample_values().to_string()).expect("values file");
    let samples = samples.display().to_string();
    for args in [
        vec![],
        vec![
            "--set",
            "metrics.serviceMonitor.enabled=true,metrics.prometheusRule.enabled=true",
        ],
        vec!["-f", &samples],
    ] {
        let mut lint = helm(&home);
        lint.args(["lint", "--strict", "--namespace", NS])
            .arg(chart_dir())
            .args(&args);
        let said = succeeds(lint);
        assert!(
            said.contains("1 chart(s) linted, 0 chart(s) failed"),
            "{said}"
        );
    }
}

#[test]
fn default_values_render_the_same_objects_as_kubectl_kustomize_manifests() {
    let home = scratch("parity");
    // The CRD too: manifests/ ships the chart's crds/rebootpools.yaml.
    let mut helm_objects = objects(&template(&home, &["--include-crds"]));
    let mut kustomize =
        Command::new(ControlPlane::bin("kubectl").unwrap_or_else(|e| panic!("{e}")));
    kustomize.arg("kustomize").arg(manifests_dir());
    let mut kustomize_objects = objects(&succeeds(kustomize));

    // The one object that differs on purpose: helm uninstall keeps the namespace.
    let namespace = format!("Namespace v1 /{NS}");
    let annotations = helm_objects
        .get_mut(&namespace)
        .expect("the chart renders the Namespace")["metadata"]
        .as_object_mut()
        .expect("metadata")
        .remove("annotations");
    assert_eq!(
        annotations,
        Some(json!({"helm.sh/resource-policy": "keep"})),
        "the Namespace's only annotation"
    );

    helm_objects.values_mut().for_each(normalize);
    kustomize_objects.values_mut().for_each(normalize);
    let mut report = Vec::new();
    for key in kustomize_objects
        .keys()
        .filter(|k| !helm_objects.contains_key(*k))
    {
        report.push(format!("{key}: only in kustomize"));
    }
    for key in helm_objects
        .keys()
        .filter(|k| !kustomize_objects.contains_key(*k))
    {
        report.push(format!("{key}: only in the chart"));
    }
    for (key, ours) in &helm_objects {
        if let Some(theirs) = kustomize_objects.get(key) {
            let mut found = Vec::new();
            differences("", theirs, ours, &mut found);
            report.extend(found.into_iter().map(|d| format!("{key} {d}")));
        }
    }
    assert!(
        report.is_empty(),
        "the chart with default values and manifests/ differ; change both:\n{}",
        report.join("\n")
    );
    assert_eq!(helm_objects.len(), 17, "{:#?}", helm_objects.keys());
    assert!(
        helm_objects.contains_key(
            "CustomResourceDefinition apiextensions.k8s.io/v1 /rebootpools.node-reboot-operator.io"
        ),
        "{:#?}",
        helm_objects.keys()
    );
}

/// The flags of a program's `--help`, with their defaults (`None`: no default shown).
fn flags_of(program: &str) -> Vec<(String, Option<String>)> {
    let binary = workspace_binary(program).expect("built: cargo build --workspace --bins");
    let mut help = Command::new(binary);
    help.arg("--help");
    let text = succeeds(help);
    let mut flags: Vec<(String, Option<String>)> = Vec::new();
    for line in text.lines() {
        if line.starts_with("      --") || line.starts_with("  -") {
            let flag = line
                .split_whitespace()
                .find_map(|word| word.strip_prefix("--"))
                .expect("a long flag");
            flags.push((flag.to_owned(), None));
        } else if let Some(default) = line
            .trim()
            .strip_prefix("[default: ")
            .and_then(|d| d.strip_suffix(']'))
            && let Some(last) = flags.last_mut()
        {
            last.1 = Some(default.trim_matches('"').to_owned());
        }
    }
    // --validate checks the flags and exits: for a run by hand, not a value of the pod.
    flags.retain(|(flag, _)| !["help", "version", "validate"].contains(&flag.as_str()));
    assert!(
        flags.len() > 10,
        "flags parsed from {program} --help: {flags:?}"
    );
    flags
}

fn camel_case(flag: &str) -> String {
    let mut words = flag.split('-');
    let first = words.next().unwrap_or_default().to_owned();
    words.fold(first, |mut out, word| {
        let mut chars = word.chars();
        out.extend(chars.next().map(|c| c.to_ascii_uppercase()));
        out.push_str(chars.as_str());
        out
    })
}

/// A value as the flag would be written: what `--help` shows as its default.
fn as_flag_text(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s.clone()),
        Value::Bool(b) => Some(b.to_string()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// Values whose default is on purpose not the program's: (program, flag, value, why).
const NOT_THE_PROGRAMS_DEFAULT: &[(&str, &str, &str, &str)] = &[
    (
        "reboot-controller",
        "log-format",
        "json",
        "manifests/ deploys json",
    ),
    (
        "reboot-agent",
        "log-format",
        "json",
        "manifests/ deploys json",
    ),
    (
        "reboot-controller",
        "namespace",
        "",
        "empty: the pod's namespace (POD_NAMESPACE)",
    ),
];

#[test]
fn every_flag_of_both_programs_is_a_value_with_the_programs_default() {
    let values = default_values();
    let mut problems = Vec::new();
    let mut exceptions_used = 0;
    for (program, section) in [
        ("reboot-controller", "controller"),
        ("reboot-agent", "agent"),
    ] {
        let flags = flags_of(program);
        let table = values[section]["flags"].as_object().expect("flags").clone();
        let mut keys: Vec<String> = Vec::new();
        for (flag, default) in &flags {
            let key = camel_case(flag);
            let value = match flag.as_str() {
                // From the downward API: one per node, not a value.
                "node-name" => continue,
                // One value for both programs and the admission policy.
                "annotation-prefix" => values["annotationPrefix"].clone(),
                // Beside `pools`, not a setting of the flags' pool: its env var DEFAULT_POOL.
                "default-pool" => values["defaultPool"].clone(),
                _ => {
                    keys.push(key.clone());
                    match table.get(&key) {
                        Some(value) => value.clone(),
                        None => {
                            problems.push(format!(
                                "{program} --{flag}: no value {section}.flags.{key}"
                            ));
                            continue;
                        }
                    }
                }
            };
            let exception = NOT_THE_PROGRAMS_DEFAULT
                .iter()
                .find(|(p, f, _, _)| *p == program && f == flag);
            let expected = match (exception, default) {
                (Some((_, _, value, _)), _) => {
                    exceptions_used += 1;
                    Some(value.to_string())
                }
                (None, Some(default)) => Some(default.clone()),
                // No default: off, none or empty.
                (None, None) => None,
            };
            let ok = match (&expected, as_flag_text(&value)) {
                (Some(expected), Some(text)) => *expected == text,
                (None, Some(text)) => text.is_empty() || text == "false",
                (None, None) => value == json!([]),
                (Some(_), None) => false,
            };
            if !ok {
                problems.push(format!(
                    "{program} --{flag}: the value {section}.flags.{key} is {value}, the default {expected:?}"
                ));
            }
        }
        for key in table.keys().filter(|k| !keys.contains(k)) {
            problems.push(format!("{section}.flags.{key}: {program} has no such flag"));
        }
    }
    assert!(problems.is_empty(), "{problems:#?}");
    assert_eq!(exceptions_used, NOT_THE_PROGRAMS_DEFAULT.len());
}

/// A value other than the default for every flag, as a values file.
fn sample_values() -> Value {
    json!({
        "annotationPrefix": "reboot.example.com",
        "controller": {"flags": {
            "maxUnavailable": "25%",
            "nodeSelector": "pool=a",
            "maxUnavailablePerZone": 2,
            "concurrency": "10%",
            "zoneLabel": "example.com/zone",
            "namespace": "ledgers",
            "ledgerName": "pool-a-slots",
            "drain": false,
            "drainTimeout": "1h30m",
            "drainGracePeriod": "30s",
            "drainSkipWaitForDeleteMargin": "90s",
            "evictionRetryMaxDelay": "10s",
            "drainDelay": "30s",
            "rebootDelay": "1m",
            "forceReboot": true,
            "drainAttempts": 3,
            "maxBlockedNodes": 2,
            "keepSetAsideCordoned": true,
            "canary": 2,
            "canarySoak": "30m",
            "waves": true,
            "rebootEstimate": "45m",
            "maxFailures": "10%",
            "drainPodSelector": "drain=yes",
            "checkDisruptionBudgets": false,
            "agentSelector": "app=my-agent",
            "preflightTimeout": "7m",
            "minReadySeconds": 1_000_000,
            "rebootTimeout": "45m",
            "giveUpAfter": "2h",
            "rebootWindow": ["Mon-Fri 22:00-06:00 Europe/Berlin", "0 2 * * 6 4h"],
            "rebootBlackout": ["2026-12-20..2027-01-03 Europe/Berlin", "Fri 16:00-24:00"],
            "scheduledBudget": ["1 Mon-Fri 06:00-22:00 Europe/Berlin", "0 2026-12-20..2027-01-03"],
            "finishAfterWindow": false,
            "blockingPodSelector": ["app=backup", "reboot-blocker=true"],
            "blockingPodSelectorScope": "cluster",
            "prometheusUrl": "http://prometheus.monitoring:9090",
            "alertFilter": "^Watchdog$",
            "alertFilterMode": "include",
            "alertFiringOnly": true,
            "prometheusTimeout": "20s",
            "alertCheckPeriod": "1m",
            "alertmanagerUrl": "http://alertmanager.monitoring:9093",
            "logFormat": "text",
            "metricsBindAddress": ":9090",
            "dryRun": true,
            "leaderElect": false,
            "leaderElectionLeaseName": "pool-a-leader",
            "leaderElectionLeaseDuration": "30s",
            "leaderElectionRenewDeadline": "20s",
            "leaderElectionRetryPeriod": "5s",
            "leaderElectionIdentity": "fixed",
            "preRebootNodeLabels": ["example.com/rebooting=true", "lb=out"],
            "postRebootNodeLabels": ["lb=in"],
            "preferNoScheduleTaint": "example.com/reboot-pending",
            "notifyUrl": ["slack://hook:A-B-C@webhook", "https://hooks.example.com/reboots"],
            "notifyTimeout": "3s",
            "messageTemplateDrain": "Draining node %s",
            "messageTemplateReboot": "Rebooting node %s",
            "messageTemplateUncordon": "Node %s rebooted & uncordoned successfully!",
        }},
        "agent": {"flags": {
            "bootIdFile": "/host/boot_id",
            "rebootMethod": "signal",
            "rebootCommand": "/sbin/reboot now",
            "hostMountNamespace": false,
            "signalTargetPid": 2,
            "rebootSignal": 10,
            "rebootTimeout": "20m",
            "maxUnprovenReboots": 5,
            "rebootAttemptsFile": "/var/lib/reboot-agent/attempts",
            "rebootSentinelFile": "/host/var/run/reboot-required",
            // Empty: the agent takes a file or a command, not both; the command is below.
            "rebootSentinelCommand": "",
            "rebootSentinelExitCode": 1,
            "checkPeriod": "1h",
            "logFormat": "text",
            "metricsBindAddress": "0.0.0.0:9091",
        }},
    })
}

/// `--flag=VALUE` (or a bare `--flag`, or one per item) for a sample value.
fn expected_args(flag: &str, value: &Value) -> Vec<String> {
    match value {
        Value::Array(items) => items
            .iter()
            .map(|i| format!("--{flag}={}", as_flag_text(i).expect("text")))
            .collect(),
        Value::Bool(true) if flag == "dry-run" => vec!["--dry-run".to_owned()],
        _ => vec![format!("--{flag}={}", as_flag_text(value).expect("text"))],
    }
}

#[test]
fn every_flag_value_reaches_its_program() {
    let home = scratch("flags");
    let samples = sample_values();
    let file = home.join("samples.json");
    std::fs::write(&file, samples.to_string()).expect("values file");
    let rendered = objects(&template(&home, &["-f", &file.display().to_string()]));
    for (program, kind, section) in [
        ("reboot-controller", "Deployment", "controller"),
        ("reboot-agent", "DaemonSet", "agent"),
    ] {
        let args = args_of(&rendered, kind, program);
        let mut expected = Vec::new();
        for (flag, default) in flags_of(program) {
            let value = match flag.as_str() {
                // As the env var DEFAULT_POOL, not an arg:
                // the_default_pool_value_reaches_the_controller_only_when_false.
                "node-name" | "default-pool" => continue,
                "annotation-prefix" => &samples["annotationPrefix"],
                _ => &samples[section]["flags"][camel_case(&flag)],
            };
            assert!(!value.is_null(), "a sample for {program} --{flag}");
            // An empty value is the flag left out (a sentinel command beside the file).
            if value == &json!("") && default.is_none() {
                continue;
            }
            // The program's own default is not passed (`--log-format=text`), except the
            // budget, which manifests/ too always passes.
            if flag != "max-unavailable" && default.is_some() && as_flag_text(value) == default {
                continue;
            }
            expected.extend(expected_args(&flag, value));
        }
        assert_eq!(args, expected, "{program}'s args, in --help's order");
    }

    // What follows from the flags: the ports, the agent's capabilities, the Role of the
    // Leases and the policy's keys.
    let port = |kind: &str, name: &str| {
        rendered[&format!("{kind} apps/v1 {NS}/{name}")]["spec"]["template"]["spec"]["containers"]
            [0]["ports"][0]["containerPort"]
            .clone()
    };
    assert_eq!(port("Deployment", "reboot-controller"), json!(9090));
    assert_eq!(port("DaemonSet", "reboot-agent"), json!(9091));
    let agent = &rendered[&format!("DaemonSet apps/v1 {NS}/reboot-agent")];
    assert_eq!(
        agent["spec"]["template"]["spec"]["containers"][0]["securityContext"]["capabilities"],
        json!({"drop": ["ALL"], "add": ["KILL"]}),
        "the signal method needs KILL only"
    );
    // The real-node tier of `make test` reboots with `command` only: the other method's
    // capability is checked here.
    let syscall = objects(&template(
        &home,
        &["--set", "agent.flags.rebootMethod=syscall"],
    ));
    assert_eq!(
        syscall[&format!("DaemonSet apps/v1 {NS}/reboot-agent")]["spec"]["template"]["spec"]["containers"]
            [0]["securityContext"]["capabilities"],
        json!({"drop": ["ALL"], "add": ["SYS_BOOT"]}),
        "the syscall method needs SYS_BOOT only"
    );
    // A sentinel command enters the host's mount namespace whatever the reboot method.
    let signal_and_command = objects(&template(
        &home,
        &[
            "--set",
            "agent.flags.rebootMethod=signal",
            "--set",
            "agent.flags.rebootSentinelCommand=sh -c '! needs-restarting -r'",
        ],
    ));
    assert_eq!(
        signal_and_command[&format!("DaemonSet apps/v1 {NS}/reboot-agent")]["spec"]["template"]["spec"]
            ["containers"][0]["securityContext"]["capabilities"],
        json!({"drop": ["ALL"], "add": ["KILL", "SYS_ADMIN", "SYS_CHROOT", "SYS_PTRACE"]}),
        "the signal method with a sentinel command needs what the command needs too"
    );
    assert!(
        args_of(&signal_and_command, "DaemonSet", "reboot-agent")
            .contains(&"--reboot-sentinel-command=sh -c '! needs-restarting -r'".to_owned()),
        "the sentinel command reaches the agent as written"
    );
    // Every Lease of that namespace: each RebootPool's ledger is named after the pool.
    let role = &rendered["Role rbac.authorization.k8s.io/v1 ledgers/reboot-controller-leases"];
    assert_eq!(
        role["rules"][0],
        json!({"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
               "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]})
    );
    assert!(
        rendered.contains_key(
            "RoleBinding rbac.authorization.k8s.io/v1 ledgers/reboot-controller-leases"
        )
    );
    let policy = &rendered["ValidatingAdmissionPolicy admissionregistration.k8s.io/v1 /node-reboot-operator-agent"];
    let keys = policy["spec"]["variables"]
        .as_array()
        .expect("variables")
        .iter()
        .find(|v| v["name"] == "keys")
        .expect("the agent's keys")["expression"]
        .as_str()
        .expect("CEL")
        .to_owned();
    assert!(
        keys.starts_with(
            "{'needed': 'reboot.example.com/reboot-needed', 'now': 'reboot.example.com/reboot-now',"
        ),
        "{keys}"
    );
    // The agent's steps only: never reboot-cordoned, reboot-last-completed or a grant key.
    assert_eq!(keys.matches("reboot.example.com/").count(), 7, "{keys}");
    for key in common::keys::CONTROLLER_ONLY
        .iter()
        .chain(&common::keys::ADMINISTRATOR_ONLY)
    {
        assert!(!keys.contains(key), "{key} in {keys}");
    }

    // `0`: no server, so no port and no probes that would fail.
    let off = objects(&template(
        &home,
        &["--set", "controller.flags.metricsBindAddress=0"],
    ));
    let container = &off[&format!("Deployment apps/v1 {NS}/reboot-controller")]["spec"]["template"]
        ["spec"]["containers"][0];
    for field in ["ports", "livenessProbe", "readinessProbe"] {
        assert!(container[field].is_null(), "{field}: {container}");
    }
}

/// `defaultPool: false` reaches the controller as DEFAULT_POOL=false (`--default-pool`);
/// `true`, the default, is the program's own and is not passed, so the Deployment stays
/// manifests/'.
#[test]
fn the_default_pool_value_reaches_the_controller_only_when_false() {
    let home = scratch("default-pool");
    let env_of = |args: &[&str]| {
        let rendered = objects(&template(&home, args));
        rendered[&format!("Deployment apps/v1 {NS}/reboot-controller")]["spec"]["template"]["spec"]
            ["containers"][0]["env"]
            .as_array()
            .expect("env")
            .iter()
            .filter(|e| e["name"] == "DEFAULT_POOL")
            .cloned()
            .collect::<Vec<_>>()
    };
    assert_eq!(
        env_of(&["--set", "defaultPool=false"]),
        [json!({"name": "DEFAULT_POOL", "value": "false"})]
    );
    assert_eq!(env_of(&[]), Vec::<Value>::new());
    assert_eq!(env_of(&["--set", "defaultPool=true"]), Vec::<Value>::new());
    let mut wrong = helm(&home);
    wrong.args(["template", RELEASE]).arg(chart_dir()).args([
        "--namespace",
        NS,
        "--set",
        "defaultPool=no",
    ]);
    let said = fails(wrong);
    assert!(
        said.contains("at '/defaultPool': got string, want boolean"),
        "{said}"
    );
}

/// Two pools of one name would be one RebootPool written twice: the chart refuses it.
#[test]
fn two_pools_of_one_name_are_refused() {
    let home = scratch("pool-names");
    let mut twice = helm(&home);
    twice
        .args(["template", RELEASE])
        .arg(chart_dir())
        .args(["--namespace", NS])
        .args([
            "--set",
            "pools[0].name=gpu,pools[1].name=general,pools[2].name=gpu",
        ]);
    let said = fails(twice);
    assert!(
        said.contains("pools[2]: the name \"gpu\" is pools[0]'s too"),
        "{said}"
    );
}

#[test]
fn the_optional_monitoring_objects_render_when_enabled() {
    let home = scratch("monitoring");
    let rendered = objects(&template(
        &home,
        &[
            "--set",
            "metrics.serviceMonitor.enabled=true,metrics.serviceMonitor.labels.release=kps",
            "--set",
            "metrics.prometheusRule.enabled=true",
        ],
    ));
    for name in ["reboot-controller", "reboot-agent"] {
        let service = &rendered[&format!("Service v1 {NS}/{name}")];
        assert_eq!(
            service["spec"]["selector"],
            json!({"app.kubernetes.io/name": name})
        );
        let monitor = &rendered[&format!("ServiceMonitor monitoring.coreos.com/v1 {NS}/{name}")];
        assert_eq!(monitor["metadata"]["labels"]["release"], "kps");
        assert_eq!(monitor["spec"]["endpoints"][0]["port"], "metrics");
    }
    let rule =
        &rendered[&format!("PrometheusRule monitoring.coreos.com/v1 {NS}/node-reboot-operator")];
    let file = std::fs::read_to_string(chart_dir().join("files/prometheus-rules.yaml"))
        .expect("files/prometheus-rules.yaml");
    assert_eq!(rule["spec"]["groups"], yaml_to_json(&file)["groups"]);
}

#[test]
fn the_webhook_urls_come_from_a_secret_when_one_is_named_and_not_from_both_places() {
    let home = scratch("notify");
    let rendered = objects(&template(
        &home,
        &["--set", "controller.notify.existingSecret=reboot-notify"],
    ));
    let deployment = &rendered[&format!("Deployment apps/v1 {NS}/reboot-controller")];
    let env = &deployment["spec"]["template"]["spec"]["containers"][0]["env"];
    let notify_url = env
        .as_array()
        .and_then(|env| env.iter().find(|e| e["name"] == "NOTIFY_URL"))
        .unwrap_or_else(|| panic!("no NOTIFY_URL in {env}"));
    assert_eq!(
        notify_url["valueFrom"]["secretKeyRef"],
        json!({"name": "reboot-notify", "key": "notify-url"})
    );
    let args = args_of(&rendered, "Deployment", "reboot-controller");
    assert!(
        !args.iter().any(|a| a.starts_with("--notify-url")),
        "{args:?}"
    );

    let mut helm = helm(&home);
    helm.args(["template", RELEASE])
        .arg(chart_dir())
        .args(["--namespace", NS])
        .args(["--set", "controller.notify.existingSecret=reboot-notify"])
        .args([
            "--set",
            "controller.flags.notifyUrl={https://hooks.example.com/x}",
        ]);
    let said = fails(helm);
    assert!(
        said.contains("give the webhook URLs in one of them"),
        "{said}"
    );
}

/// The chart refuses, as the controller does at start, a pre-reboot label of the key that
/// places the node in its pool, its zone, or out of the protocol.
#[test]
fn a_pre_reboot_label_of_a_pool_zone_or_opt_out_key_is_refused() {
    let home = scratch("reserved-labels");
    for (sets, says) in [
        (
            &[
                "controller.flags.nodeSelector=pool=a\\,zone in (z1\\,z2)\\,!spot",
                "controller.flags.preRebootNodeLabels={lb=out,pool=b}",
            ][..],
            "`pool` is a key of controller.flags.nodeSelector",
        ),
        (
            &[
                "controller.flags.nodeSelector=pool=a\\,zone in (z1\\,z2)\\,!spot",
                "controller.flags.preRebootNodeLabels={spot=true}",
            ],
            "`spot` is a key of controller.flags.nodeSelector",
        ),
        (
            &["controller.flags.preRebootNodeLabels={topology.kubernetes.io/zone=none}"],
            "`topology.kubernetes.io/zone` is controller.flags.zoneLabel",
        ),
        (
            &["controller.flags.preRebootNodeLabels={reboot-disabled=true}"],
            "`reboot-disabled` is the label that opts a node out",
        ),
        (
            &[
                "annotationPrefix=reboot.example.com",
                "controller.flags.preRebootNodeLabels={reboot.example.com/reboot-disabled=true}",
            ],
            "`reboot.example.com/reboot-disabled` is the label that opts a node out",
        ),
    ] {
        let mut helm = helm(&home);
        helm.args(["template", RELEASE])
            .arg(chart_dir())
            .args(["--namespace", NS]);
        for set in sets {
            helm.args(["--set", set]);
        }
        let said = fails(helm);
        assert!(said.contains(says), "{sets:?}: {said}");
        assert!(
            said.contains("controller.flags.preRebootNodeLabels") && said.contains("another key"),
            "{sets:?}: {said}"
        );
    }
    // A value of the selector, or a key of the selector's value sets, is no key of it.
    template(
        &home,
        &[
            "--set",
            "controller.flags.nodeSelector=pool=zone\\,rack in (lb\\,x)",
            "--set",
            "controller.flags.preRebootNodeLabels={zone=x,lb=out,x=y}",
        ],
    );
}

#[test]
fn the_charts_alert_rules_are_a_copy_of_monitoring_prometheus_rules() {
    let copy = chart_dir().join("files/prometheus-rules.yaml");
    let copy = std::fs::read_to_string(&copy).expect("the chart's copy");
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("../monitoring/prometheus-rules.yaml");
    match std::fs::read_to_string(&source) {
        Ok(source) => assert!(
            copy == source,
            "charts/node-reboot-operator/files/prometheus-rules.yaml differs from \
             monitoring/prometheus-rules.yaml: cp monitoring/prometheus-rules.yaml \
             charts/node-reboot-operator/files/"
        ),
        // Until monitoring/ has its rules: a rule file all the same.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            assert!(
                yaml_to_json(&copy)["groups"].is_array(),
                "a rule file: {copy}"
            )
        }
        Err(e) => panic!("{}: {e}", source.display()),
    }
}

#[test]
fn a_typo_or_a_wrong_type_is_refused_by_the_schema_with_a_clear_message() {
    let home = scratch("schema");
    for (set, says) in [
        (
            "controller.flags.maxUnavailble=2",
            "at '/controller/flags': additional properties 'maxUnavailble' not allowed",
        ),
        ("imag.tag=0.2.0", "additional properties 'imag' not allowed"),
        (
            "controller.flags.drain=maybe",
            "at '/controller/flags/drain': got string, want boolean",
        ),
        (
            "controller.replicas=two",
            "at '/controller/replicas': got string, want integer",
        ),
        (
            "controller.flags.maxUnavailable=-1",
            "at '/controller/flags/maxUnavailable'",
        ),
        (
            "controller.flags.maxUnavailable=ten",
            "at '/controller/flags/maxUnavailable'",
        ),
        (
            "controller.flags.maxUnavailable=101%",
            "at '/controller/flags/maxUnavailable'",
        ),
        (
            "controller.flags.drainTimeout=15 minutes",
            "at '/controller/flags/drainTimeout'",
        ),
        (
            "agent.flags.rebootMethod=kexec",
            "at '/agent/flags/rebootMethod'",
        ),
        ("annotationPrefix=Not_A_Domain", "at '/annotationPrefix'"),
    ] {
        let mut helm = helm(&home);
        helm.args(["template", RELEASE])
            .arg(chart_dir())
            .args(["--namespace", NS, "--set", set]);
        let said = fails(helm);
        assert!(
            said.contains("values don't meet the specifications of the schema"),
            "{set}: {said}"
        );
        assert!(said.contains(says), "{set}: {said}");
    }
}

/// The agent looks at one sentinel: a file and a command together are refused by the schema,
/// naming the value to empty, and by the template when the schema is skipped.
#[test]
fn a_sentinel_file_and_command_together_are_refused() {
    let home = scratch("sentinels");
    let both = [
        "--set",
        "agent.flags.rebootSentinelFile=/var/run/reboot-required",
        "--set",
        "agent.flags.rebootSentinelCommand=needs-restarting -r",
    ];
    let mut schema = helm(&home);
    schema
        .args(["template", RELEASE])
        .arg(chart_dir())
        .args(["--namespace", NS])
        .args(both);
    let said = fails(schema);
    assert!(
        said.contains("at '/agent/flags/rebootSentinelCommand': maxLength"),
        "{said}"
    );
    let mut template = helm(&home);
    template
        .args(["template", RELEASE, "--skip-schema-validation"])
        .arg(chart_dir())
        .args(["--namespace", NS])
        .args(both);
    let said = fails(template);
    assert!(said.contains("the agent looks at one sentinel"), "{said}");
}

/// `helm install` of the chart into [`NS`], creating it, with `args`.
fn install_chart(cp: &ControlPlane, args: &[&str]) -> String {
    let mut helm = helm_on(cp);
    helm.args(["install", RELEASE])
        .arg(chart_dir())
        .args(["--namespace", NS, "--create-namespace"])
        .args(args);
    succeeds(helm)
}

fn kubectl_get(cp: &ControlPlane, args: &[&str], manifest: &str) -> String {
    cp.kubectl_with_input(args, manifest)
        .unwrap_or_else(|e| panic!("{e}"))
}

/// `helm list` of every release in any namespace and state (but kept history), as JSON.
fn releases(cp: &ControlPlane) -> String {
    let mut list = helm_on(cp);
    list.args(["list", "--all-namespaces", "-o", "json"]).args([
        "--deployed",
        "--failed",
        "--pending",
        "--uninstalling",
    ]);
    succeeds(list).trim().to_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn helm_install_upgrade_and_uninstall_on_the_local_control_plane() {
    let cp = control_plane(false).await;
    let manifest = template(&cp.dir().join("helm"), &[]);

    // A bad value fails the install before anything is created.
    let mut bad = helm_on(&cp);
    bad.args(["install", RELEASE])
        .arg(chart_dir())
        .args(["--namespace", NS, "--create-namespace"])
        .args(["--set", "controller.flags.maxUnavailable=-1"]);
    let said = fails(bad);
    assert!(said.contains("/controller/flags/maxUnavailable"), "{said}");
    assert_eq!(releases(&cp), "[]");
    let names = ["get", "-f", "-", "--ignore-not-found", "-o", "name"];
    assert_eq!(kubectl_get(&cp, &names, &manifest).trim(), "");

    let said = install_chart(&cp, &[]);
    assert!(said.contains("STATUS: deployed"), "{said}");
    let listed = releases(&cp);
    assert!(
        listed.contains(r#""name":"node-reboot-operator","namespace":"node-reboot-operator""#)
            && listed.contains(r#""status":"deployed""#),
        "{listed}"
    );
    let installed = kubectl_get(&cp, &names, &manifest);
    assert_eq!(
        installed.lines().count(),
        16,
        "every object installed: {installed}"
    );
    // crds/: installed with the release.
    let crd = "customresourcedefinition.apiextensions.k8s.io/rebootpools.node-reboot-operator.io";
    assert_eq!(e2e::kubectl(&cp, &["get", crd, "-o", "name"]).trim(), crd);
    let namespace: Value =
        serde_json::from_str(&e2e::kubectl(&cp, &["get", "namespace", NS, "-o", "json"]))
            .expect("JSON");
    assert_eq!(
        namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"],
        "privileged"
    );
    let args = |cp: &ControlPlane| {
        serde_json::to_string(&e2e::install::controller_args(cp)).expect("JSON")
    };
    assert_eq!(args(&cp), r#"["--max-unavailable=1","--log-format=json"]"#);

    let mut upgrade = helm_on(&cp);
    upgrade
        .args(["upgrade", RELEASE])
        .arg(chart_dir())
        .args(["--namespace", NS, "--reuse-values"])
        .args(["--set", "controller.flags.maxUnavailable=25%"]);
    let said = succeeds(upgrade);
    assert!(said.contains("REVISION: 2"), "{said}");
    assert_eq!(
        args(&cp),
        r#"["--max-unavailable=25%","--log-format=json"]"#
    );

    // A typo in an upgrade is refused too, and changes nothing.
    let mut typo = helm_on(&cp);
    typo.args(["upgrade", RELEASE])
        .arg(chart_dir())
        .args(["--namespace", NS, "--reuse-values"])
        .args(["--set", "controller.flags.maxUnavalable=3"]);
    let said = fails(typo);
    assert!(
        said.contains("additional properties 'maxUnavalable' not allowed"),
        "{said}"
    );
    assert_eq!(
        args(&cp),
        r#"["--max-unavailable=25%","--log-format=json"]"#
    );

    let mut uninstall = helm_on(&cp);
    uninstall.args(["uninstall", RELEASE, "--namespace", NS, "--wait"]);
    let said = succeeds(uninstall);
    assert!(
        said.contains("[Namespace] node-reboot-operator"),
        "the namespace is kept: {said}"
    );
    let left = kubectl_get(&cp, &names, &manifest);
    assert_eq!(
        left.trim(),
        format!("namespace/{NS}"),
        "every object but the namespace is gone"
    );
    // Helm never deletes a chart's CRDs: the RebootPools stay.
    assert_eq!(
        e2e::kubectl(&cp, &["get", crd, "-o", "name"]).trim(),
        crd,
        "helm uninstall keeps the CRD"
    );
    assert_eq!(releases(&cp), "[]");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_charts_controller_pod_meets_restricted_pod_security() {
    // The controller-manager type-checks admission policies.
    let cp = control_plane(true).await;
    let client = cp.client().await.expect("admin client");
    install_chart(&cp, &[]);
    wait_until_the_policy_is_type_checked(&client).await;
    check_the_controller_pod_meets_restricted_pod_security(&cp, &client).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn with_the_chart_each_service_account_may_do_only_its_part() {
    let ids = Identities::start(|cp| {
        install_chart(cp, &[]);
    })
    .await;
    check_an_agent_may_change_only_the_protocol_annotations_of_its_own_node(&ids).await;
    check_what_the_programs_must_not_do_is_refused(&ids).await;
}
