//! `kubectl reboot migrate-from-kured` (docs/src/migrating-from-kured.md) on the local control
//! plane: kured DaemonSets rendered by kured's own chart (e2e/fixtures/kured-chart, 6.1.0 for
//! kured 1.23.0) from several values files are applied, the command translates each, and its
//! output, given to this chart with `helm template -f`, passes the chart's schema and renders
//! the expected flags of both programs. What cannot be translated is named. `--cleanup`
//! removes from the nodes only what kured's configuration says kured set, and is refused
//! while kured runs. A named DaemonSet that is not kured, none found and two found are each an
//! error that says what to do.

use e2e::install::{NS, chart_dir, control_plane, helm, yaml_to_json};
use serde_json::{Value, json};
use std::{
    path::{Path, PathBuf},
    process::{Command, Output},
};
use testenv::ControlPlane;

/// kured's chart, vendored.
fn kured_chart() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/kured-chart")
}

fn scratch(test: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("migrate-from-kured-{test}"));
    std::fs::create_dir_all(&dir).expect("scratch directory");
    dir
}

fn succeeded(what: &str, output: &Output) -> String {
    assert!(
        output.status.success(),
        "{what} failed: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The plugin, as the control plane's admin.
fn plugin(cp: &ControlPlane, args: &[&str]) -> Output {
    let binary = nodesim::workspace_binary("kubectl-reboot").unwrap_or_else(|e| panic!("{e}"));
    let mut command = Command::new(binary);
    command
        .arg("migrate-from-kured")
        .args(args)
        .env("KUBECONFIG", cp.kubeconfig_path());
    for (var, _) in std::env::vars() {
        if var.starts_with("KUBECTL_REBOOT_") || var == "POD_NAMESPACE" {
            command.env_remove(var);
        }
    }
    command.output().expect("the plugin runs")
}

/// Runs the plugin, which must fail; what it said on stderr.
fn plugin_fails(cp: &ControlPlane, args: &[&str]) -> String {
    let output = plugin(cp, args);
    assert!(
        !output.status.success(),
        "migrate-from-kured {args:?} succeeded: {}",
        String::from_utf8_lossy(&output.stdout)
    );
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn kubectl(cp: &ControlPlane, args: &[&str]) -> String {
    let output = cp.kubectl().args(args).output().expect("kubectl runs");
    succeeded(&format!("kubectl {}", args.join(" ")), &output)
}

/// kured's DaemonSet as its chart renders it into `namespace` from `values`, applied.
fn install_kured(cp: &ControlPlane, home: &Path, namespace: &str, values: &str) {
    let file = home.join(format!("kured-{namespace}.yaml"));
    std::fs::write(&file, values).expect("kured values");
    let mut helm = helm(home);
    helm.args(["template", "kured"])
        .arg(kured_chart())
        .args([
            "--namespace",
            namespace,
            "--show-only",
            "templates/daemonset.yaml",
            "-f",
        ])
        .arg(&file);
    let rendered = succeeded("helm template kured", &helm.output().expect("helm runs"));
    let manifest = home.join(format!("kured-{namespace}-ds.yaml"));
    std::fs::write(&manifest, rendered).expect("kured's DaemonSet");
    let _ = cp
        .kubectl()
        .args(["create", "namespace", namespace])
        .output();
    kubectl(cp, &["apply", "-f", &manifest.display().to_string()]);
}

/// One document of `helm template` as JSON.
fn document(yaml: &str) -> Value {
    let body: String = yaml
        .lines()
        .filter(|l| !l.starts_with("---"))
        .map(|l| format!("{l}\n"))
        .collect();
    yaml_to_json(&body)
}

/// This chart rendered with the values file `values`: the agent's and the controller's args.
fn this_chart_renders(home: &Path, values: &Path) -> (Vec<String>, Vec<String>) {
    let args = |template: &str| {
        let mut helm = helm(home);
        helm.args(["template", "node-reboot-operator"])
            .arg(chart_dir())
            .args(["--namespace", NS, "--show-only", template, "-f"])
            .arg(values);
        let out = succeeded(
            &format!("helm template -f {}", values.display()),
            &helm.output().expect("helm runs"),
        );
        let object = document(&out);
        serde_json::from_value::<Vec<String>>(
            object["spec"]["template"]["spec"]["containers"][0]["args"].clone(),
        )
        .expect("args")
    };
    (
        args("templates/agent-daemonset.yaml"),
        args("templates/controller-deployment.yaml"),
    )
}

/// A kured values file and what its translation must hold.
struct Case {
    name: &'static str,
    kured_values: &'static str,
    /// Chart values expected, as (`agent`|`controller`, key, value).
    values: Vec<(&'static str, &'static str, Value)>,
    /// Keys that must not be set.
    absent: Vec<(&'static str, &'static str)>,
    agent_args: Vec<&'static str>,
    controller_args: Vec<&'static str>,
    /// Words the "Not translated" list must hold, each.
    not_translated: Vec<&'static str>,
    /// Words the output's comments must hold (the `--cleanup` line, notes).
    comments: Vec<&'static str>,
}

fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "defaults",
            kured_values: "{}\n",
            values: vec![
                (
                    "agent",
                    "rebootSentinelFile",
                    json!("/host/var/run/reboot-required"),
                ),
                ("agent", "logFormat", json!("text")),
                ("controller", "concurrency", json!(1)),
                ("controller", "maxUnavailable", json!(2)),
            ],
            absent: vec![
                ("agent", "rebootCommand"),
                ("agent", "checkPeriod"),
                ("controller", "rebootWindow"),
            ],
            agent_args: vec!["--reboot-sentinel-file=/host/var/run/reboot-required"],
            controller_args: vec!["--concurrency=1", "--max-unavailable=2"],
            not_translated: vec![],
            comments: vec!["Once kured is removed: kubectl reboot migrate-from-kured --cleanup\n"],
        },
        Case {
            name: "window",
            kured_values: "configuration:\n  period: 30m\n  rebootDays: [mo, tu, we, th, fr]\n  \
                           startTime: 10pm\n  endTime: \"06:00\"\n  timeZone: Europe/Berlin\n",
            values: vec![
                ("agent", "checkPeriod", json!("30m")),
                (
                    "controller",
                    "rebootWindow",
                    json!(["Mon-Fri 22:00-06:00 Europe/Berlin"]),
                ),
            ],
            absent: vec![],
            agent_args: vec!["--check-period=30m"],
            controller_args: vec!["--reboot-window=Mon-Fri 22:00-06:00 Europe/Berlin"],
            not_translated: vec![],
            comments: vec![
                "\"Mon-Fri 00:00-06:00 Europe/Berlin\", \"Mon-Fri 22:00-24:00 Europe/Berlin\"",
            ],
        },
        Case {
            name: "weekend",
            kured_values: "configuration:\n  period: 1h30m0s\n  rebootDays: [saturday, Sun]\n  \
                           startTime: \"1:00\"\n  endTime: \"05:30:15\"\n  timeZone: America/New_York\n",
            values: vec![
                ("agent", "checkPeriod", json!("1h30m")),
                (
                    "controller",
                    "rebootWindow",
                    json!(["Sat,Sun 01:00-05:30:15 America/New_York"]),
                ),
            ],
            absent: vec![],
            agent_args: vec!["--check-period=1h30m"],
            controller_args: vec!["--reboot-window=Sat,Sun 01:00-05:30:15 America/New_York"],
            not_translated: vec![],
            comments: vec![],
        },
        Case {
            name: "gates",
            kured_values: "configuration:\n  useRebootSentinelHostPath: false\n  \
                           rebootSentinelCommand: \"sh -c '! needs-restarting -r'\"\n  \
                           blockingPodSelector: [app=backup, \"job-name in (nightly)\"]\n  \
                           prometheusUrl: http://prometheus-operated.monitoring:9090\n  \
                           alertFilterRegexp: ^(Watchdog|InfoInhibitor)$\n  alertFiringOnly: true\n  \
                           alertFilterMatchOnly: true\n  drainTimeout: 30m\n  drainGracePeriod: 60\n  \
                           skipWaitForDeleteTimeout: 300\n  lockReleaseDelay: 5m\n",
            values: vec![
                (
                    "agent",
                    "rebootSentinelCommand",
                    json!("sh -c '! needs-restarting -r'"),
                ),
                (
                    "controller",
                    "blockingPodSelector",
                    json!(["app=backup", "job-name in (nightly)"]),
                ),
                (
                    "controller",
                    "prometheusUrl",
                    json!("http://prometheus-operated.monitoring:9090"),
                ),
                (
                    "controller",
                    "alertFilter",
                    json!("^(Watchdog|InfoInhibitor)$"),
                ),
                ("controller", "alertFilterMode", json!("include")),
                ("controller", "alertFiringOnly", json!(true)),
                ("controller", "drainTimeout", json!("30m")),
                ("controller", "drainGracePeriod", json!("60s")),
                ("controller", "drainSkipWaitForDeleteMargin", json!("5m")),
                ("controller", "minReadySeconds", json!(300)),
            ],
            absent: vec![("agent", "rebootSentinelFile")],
            agent_args: vec!["--reboot-sentinel-command=sh -c '! needs-restarting -r'"],
            controller_args: vec![
                "--blocking-pod-selector=app=backup",
                "--blocking-pod-selector=job-name in (nightly)",
                "--prometheus-url=http://prometheus-operated.monitoring:9090",
                "--alert-filter=^(Watchdog|InfoInhibitor)$",
                "--alert-filter-mode=include",
                "--alert-firing-only=true",
                "--drain-timeout=30m",
                "--drain-grace-period=60s",
                "--min-ready-seconds=300",
            ],
            not_translated: vec![],
            comments: vec![],
        },
        Case {
            name: "slack",
            kured_values: "configuration:\n  slackHookUrl: https://hooks.slack.com/services/T0/B0/XXXX\n  \
                           slackChannel: ops\n  concurrency: 3\n  lockTtl: 30m\n  \
                           messageTemplateDrain: \"Draining %s\"\n  rebootMethod: signal\n  \
                           rebootSignal: 40\n  metricsPort: 9100\n",
            values: vec![
                (
                    "controller",
                    "notifyUrl",
                    json!(["https://hooks.slack.com/services/T0/B0/XXXX"]),
                ),
                ("controller", "concurrency", json!(3)),
                ("controller", "maxUnavailable", json!(6)),
                ("controller", "giveUpAfter", json!("30m")),
                ("controller", "messageTemplateDrain", json!("Draining %s")),
                ("agent", "rebootMethod", json!("signal")),
                ("agent", "rebootSignal", json!(40)),
                ("agent", "metricsBindAddress", json!("0.0.0.0:9100")),
            ],
            absent: vec![],
            agent_args: vec![
                "--reboot-method=signal",
                "--reboot-signal=40",
                "--metrics-bind-address=0.0.0.0:9100",
            ],
            controller_args: vec![
                "--notify-url=https://hooks.slack.com/services/T0/B0/XXXX",
                "--concurrency=3",
                "--max-unavailable=6",
                "--give-up-after=30m",
                "--message-template-drain=Draining %s",
            ],
            not_translated: vec!["--slack-channel=ops", "kured 1.23 ignores it"],
            comments: vec![],
        },
        Case {
            name: "shoutrrr",
            kured_values: "configuration:\n  notifyUrl: \"teams://group@tenant/altId/groupOwner?host=example.webhook.office.com\"\n  \
                           rebootDays: [\"0\", \"6\"]\n  startTime: 11pm\n  endTime: 4am\n",
            values: vec![
                (
                    "controller",
                    "notifyUrl",
                    json!([
                        "teams://group@tenant/altId/groupOwner?host=example.webhook.office.com"
                    ]),
                ),
                (
                    "controller",
                    "rebootWindow",
                    json!(["Sat,Sun 23:00-04:00 UTC"]),
                ),
            ],
            absent: vec![],
            agent_args: vec![],
            controller_args: vec!["--reboot-window=Sat,Sun 23:00-04:00 UTC"],
            not_translated: vec![],
            comments: vec![],
        },
        Case {
            name: "smtp",
            kured_values: "configuration:\n  notifyUrl: \"smtp://user:secret@mail.example.com:25/?to=ops@example.com\"\n",
            values: vec![(
                "controller",
                "notifyUrl",
                json!(["smtp://user:secret@mail.example.com:25/?to=ops@example.com"]),
            )],
            absent: vec![],
            agent_args: vec![],
            controller_args: vec![
                "--notify-url=smtp://user:secret@mail.example.com:25/?to=ops@example.com",
            ],
            not_translated: vec![],
            comments: vec![],
        },
        Case {
            name: "extra",
            kured_values: "configuration:\n  period: 1h\nextraArgs:\n  drain-timeout: 45m\n  force-reboot: true\n  \
                           prefer-no-schedule-taint: weave.works/kured-node-reboot\n  drain-delay: 1m\n  \
                           reboot-delay: 90s\n  drain-pod-selector: \"app!=daemon\"\n  not-a-kured-flag: x\n\
                           extraEnvVars:\n  - name: KURED_PERIOD\n    value: 2h\n  \
                           - name: KURED_PRE_REBOOT_NODE_LABELS\n    value: lb=out\n  \
                           - name: KURED_POST_REBOOT_NODE_LABELS\n    value: lb=in\n  \
                           - name: KURED_ANNOTATE_NODES\n    value: \"true\"\n  \
                           - name: KURED_BLOCKING_POD_SELECTOR\n    value: app=batch\n  \
                           - name: KURED_MESSAGE_TEMPLATE_REBOOT\n    \
                           valueFrom:\n      configMapKeyRef: {name: kured-texts, key: reboot}\n",
            values: vec![
                ("agent", "checkPeriod", json!("2h")),
                ("controller", "drainTimeout", json!("45m")),
                ("controller", "forceReboot", json!(true)),
                (
                    "controller",
                    "preferNoScheduleTaint",
                    json!("weave.works/kured-node-reboot"),
                ),
                ("controller", "drainDelay", json!("1m")),
                ("controller", "rebootDelay", json!("1m30s")),
                ("controller", "drainPodSelector", json!("app!=daemon")),
                ("controller", "preRebootNodeLabels", json!(["lb=out"])),
                ("controller", "postRebootNodeLabels", json!(["lb=in"])),
            ],
            absent: vec![("controller", "blockingPodSelector")],
            agent_args: vec!["--check-period=2h"],
            controller_args: vec![
                "--drain-timeout=45m",
                "--force-reboot=true",
                "--prefer-no-schedule-taint=weave.works/kured-node-reboot",
                "--drain-delay=1m",
                "--reboot-delay=1m30s",
                "--pre-reboot-node-labels=lb=out",
                "--post-reboot-node-labels=lb=in",
            ],
            not_translated: vec![
                "--not-a-kured-flag=x",
                "KURED_BLOCKING_POD_SELECTOR",
                "KURED_MESSAGE_TEMPLATE_REBOOT",
            ],
            comments: vec![
                "--cleanup --prefer-no-schedule-taint=weave.works/kured-node-reboot \
                 --pre-reboot-node-labels=lb=out --annotate-nodes\n",
                "add --post-reboot-node-labels=lb=in to --cleanup",
                "weave.works/kured-reboot-in-progress",
            ],
        },
    ]
}

/// kured's own manifest with every flag of its comments given.
fn manifest_case() -> Case {
    Case {
        name: "manifest",
        kured_values: "",
        values: vec![
            (
                "agent",
                "rebootSentinelFile",
                json!("/host/var/run/reboot-required"),
            ),
            ("agent", "checkPeriod", json!("1h")),
            ("agent", "rebootMethod", json!("command")),
            ("agent", "rebootSignal", json!(39)),
            (
                "controller",
                "prometheusUrl",
                json!("http://prometheus.monitoring.svc.cluster.local"),
            ),
            ("controller", "alertFilter", json!("^RebootRequired$")),
            (
                "controller",
                "notifyUrl",
                json!(["https://hooks.slack.com/..."]),
            ),
            (
                "controller",
                "messageTemplateDrain",
                json!("Draining node %s"),
            ),
            (
                "controller",
                "messageTemplateUncordon",
                json!("Node %s rebooted & uncordoned successfully!"),
            ),
            (
                "controller",
                "blockingPodSelector",
                json!(["runtime=long,cost=expensive", "name=temperamental"]),
            ),
            ("controller", "rebootDelay", json!("1m30s")),
            ("controller", "minReadySeconds", json!(1800)),
            ("controller", "concurrency", json!(1)),
        ],
        absent: vec![
            ("agent", "rebootSentinelCommand"),
            ("agent", "metricsBindAddress"),
            ("controller", "rebootWindow"),
            ("controller", "drainPodSelector"),
            ("controller", "preferNoScheduleTaint"),
            ("controller", "forceReboot"),
            ("controller", "drainTimeout"),
            ("controller", "giveUpAfter"),
            ("controller", "alertFilterMode"),
        ],
        agent_args: vec![
            "--reboot-sentinel-file=/host/var/run/reboot-required",
            "--check-period=1h",
        ],
        controller_args: vec![
            "--blocking-pod-selector=runtime=long,cost=expensive",
            "--blocking-pod-selector=name=temperamental",
            "--min-ready-seconds=1800",
            "--alert-filter=^RebootRequired$",
        ],
        not_translated: vec!["--slack-username=prod", "--slack-channel=alerting"],
        comments: vec!["Once kured is removed: kubectl reboot migrate-from-kured --cleanup\n"],
    }
}

/// The translation of one kured namespace, checked against `case`.
fn check(cp: &ControlPlane, home: &Path, case: &Case, args: &[&str]) {
    let output = plugin(cp, args);
    let yaml = succeeded(&format!("migrate-from-kured ({})", case.name), &output);
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    let values = yaml_to_json(&yaml);
    let context = format!("case {}:\n{yaml}\nstderr: {stderr}", case.name);
    for (program, key, value) in &case.values {
        assert_eq!(
            &values[program]["flags"][key], value,
            "{program}.flags.{key}; {context}"
        );
    }
    for (program, key) in &case.absent {
        assert_eq!(
            values[program]["flags"][key],
            Value::Null,
            "{program}.flags.{key}; {context}"
        );
    }
    let (top, _) = yaml
        .split_once("\nagent:")
        .or_else(|| yaml.split_once("\ncontroller:"))
        .unwrap_or((&yaml, ""));
    let not_translated = top
        .split_once("# Not translated:")
        .map(|(_, list)| list)
        .unwrap_or_default();
    for words in &case.not_translated {
        assert!(
            not_translated.contains(words),
            "{words:?} not listed; {context}"
        );
        assert!(stderr.contains(words), "{words:?} not on stderr; {context}");
    }
    if case.not_translated.is_empty() {
        assert!(!yaml.contains("# Not translated:"), "{context}");
    }
    for words in &case.comments {
        assert!(yaml.contains(words), "{words:?} not said; {context}");
    }
    let file = home.join(format!("values-{}.yaml", case.name));
    std::fs::write(&file, &yaml).expect("values");
    let (agent, controller) = this_chart_renders(home, &file);
    for arg in &case.agent_args {
        assert!(
            agent.iter().any(|a| a == arg),
            "agent {arg:?} not in {agent:?}; {context}"
        );
    }
    for arg in &case.controller_args {
        assert!(
            controller.iter().any(|a| a == arg),
            "controller {arg:?} not in {controller:?}; {context}"
        );
    }
}

#[tokio::test]
async fn each_kured_values_file_translates_to_values_this_chart_renders() {
    let cp = control_plane(false).await;
    let home = scratch("translate");
    let cases = cases();

    // kured in kube-system, as its chart installs it, is found by its image.
    install_kured(&cp, &home, "kube-system", cases[0].kured_values);
    check(&cp, &home, &cases[0], &[]);

    for case in &cases[1..] {
        let namespace = format!("kured-{}", case.name);
        install_kured(&cp, &home, &namespace, case.kured_values);
        check(&cp, &home, case, &["--kured-namespace", &namespace]);
    }

    // kured's own manifest, every flag of its comments given (kured 1.23.0's every flag, in
    // the container's command), but `--blocking-pod-selector=...`.
    let manifest = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/kured-manifest/kured-ds.yaml"),
    )
    .expect("kured's manifest");
    let every_flag: String = manifest
        .lines()
        .filter(|l| !l.contains("--blocking-pod-selector=..."))
        .map(|l| match l.strip_prefix("#            - --") {
            Some(flag) => format!("            - --{flag}\n"),
            None => format!("{l}\n"),
        })
        .collect::<String>()
        .replace("namespace: kube-system", "namespace: kured-manifest");
    assert_eq!(
        every_flag.matches("            - --").count(),
        40,
        "{every_flag}"
    );
    kubectl(&cp, &["create", "namespace", "kured-manifest"]);
    e2e::kubectl_stdin(&cp, &["apply", "-f", "-"], &every_flag);
    check(
        &cp,
        &home,
        &manifest_case(),
        &["--kured-namespace", "kured-manifest"],
    );

    // kured's lock held by a node (kured's own format, on its DaemonSet) is said, so that kured
    // is removed only once it is released.
    kubectl(
        &cp,
        &[
            "annotate",
            "daemonset",
            "-n",
            "kured-extra",
            "kured",
            r#"weave.works/kured-node-lock={"nodeID":"worker-7","metadata":{"unschedulable":false},"created":"2026-11-28T01:00:00Z","TTL":0}"#,
        ],
    );
    let output = plugin(&cp, &["--kured-namespace", "kured-extra"]);
    let yaml = succeeded("migrate-from-kured with kured's lock held", &output);
    let held = "kured's lock is held now (node worker-7): remove kured only once it is released";
    assert!(yaml.replace("\n#  ", " ").contains(held), "{yaml}");
    assert!(String::from_utf8_lossy(&output.stderr).contains(held));

    // Several: each is named, and the way to pick one is said.
    let said = plugin_fails(&cp, &[]);
    assert!(said.contains("kured DaemonSets found"), "{said}");
    assert!(
        said.contains("kube-system/kured") && said.contains("kured-extra/kured"),
        "{said}"
    );
    assert!(
        said.contains("--kured-namespace") && said.contains("--kured-name"),
        "{said}"
    );
    // One named by both flags is read among them.
    check(
        &cp,
        &home,
        &cases[1],
        &["--kured-namespace", "kured-window", "--kured-name", "kured"],
    );
}

#[tokio::test]
async fn a_daemonset_that_is_not_kured_or_no_kured_at_all_is_a_clear_error() {
    let cp = control_plane(false).await;
    let said = plugin_fails(&cp, &[]);
    assert!(said.contains("no kured DaemonSet found"), "{said}");
    assert!(said.contains("--kured-name"), "{said}");

    kubectl(&cp, &["create", "namespace", "web"]);
    let manifest = json!({
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": "web", "namespace": "web"},
        "spec": {"selector": {"matchLabels": {"app": "web"}}, "template": {
            "metadata": {"labels": {"app": "web"}},
            "spec": {"containers": [{"name": "web", "image": "nginx:1.27"}]}}}
    });
    e2e::kubectl_stdin(&cp, &["apply", "-f", "-"], &manifest.to_string());
    let said = plugin_fails(&cp, &["--kured-namespace", "web", "--kured-name", "web"]);
    assert!(
        said.contains("DaemonSet web/web is not kured") && said.contains("nginx:1.27"),
        "{said}"
    );
    let said = plugin_fails(&cp, &["--kured-namespace", "web"]);
    assert!(
        said.contains("no kured DaemonSet found in namespace web"),
        "{said}"
    );
    let said = plugin_fails(&cp, &["--kured-namespace", "web", "--kured-name", "kured"]);
    assert!(said.contains("DaemonSet web/kured not found"), "{said}");
}

/// Whether no taint of kured's key is left on `node` (the API server adds its own, such as
/// `node.kubernetes.io/not-ready`).
fn kured_taint_gone(node: &Value) -> bool {
    !node["spec"]["taints"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|t| t["key"] == "weave.works/kured-node-reboot")
}

fn has(node: &Value, taint: &Value) -> bool {
    node["spec"]["taints"]
        .as_array()
        .is_some_and(|taints| taints.contains(taint))
}

fn node_manifest(name: &str, labels: Value, annotations: Value, taints: Value) -> String {
    json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": labels, "annotations": annotations},
        "spec": {"taints": taints}
    })
    .to_string()
}

#[tokio::test]
async fn cleanup_removes_only_what_kured_set_and_only_once_kured_is_gone() {
    let cp = control_plane(false).await;
    let home = scratch("cleanup");
    let kured_taint = json!({"key": "weave.works/kured-node-reboot", "effect": "PreferNoSchedule"});
    let admin_taint = json!({"key": "dedicated", "value": "db", "effect": "NoSchedule"});
    let nodes = [
        node_manifest(
            "worker-1",
            json!({"lb": "in", "team": "payments"}),
            json!({"weave.works/kured-reboot-in-progress": "2026-11-01T01:00:00Z",
                   "weave.works/kured-most-recent-reboot-needed": "2026-11-01T01:00:00Z",
                   "example.com/owner": "ops"}),
            json!([kured_taint, admin_taint]),
        ),
        // An administrator's own value of kured's label key stays.
        node_manifest(
            "worker-2",
            json!({"lb": "maintenance"}),
            json!({"example.com/owner": "ops"}),
            json!([admin_taint]),
        ),
        node_manifest(
            "worker-3",
            json!({"lb": "out"}),
            json!({}),
            json!([kured_taint]),
        ),
    ];
    for node in &nodes {
        e2e::kubectl_stdin(&cp, &["apply", "-f", "-"], node);
    }
    let flags = [
        "--cleanup",
        "--prefer-no-schedule-taint=weave.works/kured-node-reboot",
        "--pre-reboot-node-labels=lb=out",
        "--post-reboot-node-labels=lb=in",
        "--annotate-nodes",
    ];
    let snapshot = || kubectl(&cp, &["get", "nodes", "-o", "json"]);
    let before = snapshot();

    // Refused while kured runs, with the fix; nothing changed.
    install_kured(
        &cp,
        &home,
        "kube-system",
        "configuration:\n  preferNoScheduleTaint: weave.works/kured-node-reboot\n",
    );
    let said = plugin_fails(&cp, &flags);
    assert!(
        said.contains("kured still runs (DaemonSet kube-system/kured)"),
        "{said}"
    );
    assert!(said.contains("helm uninstall kured"), "{said}");
    kubectl(&cp, &["delete", "daemonset", "-n", "kube-system", "kured"]);

    // A dry run says what it would remove, and changes nothing.
    let mut dry = flags.to_vec();
    dry.push("--dry-run");
    let output = plugin(&cp, &dry);
    let said = succeeded("--cleanup --dry-run", &output);
    assert!(said.contains("node/worker-1: would remove label lb=in, annotation weave.works/kured-reboot-in-progress, annotation weave.works/kured-most-recent-reboot-needed, taint weave.works/kured-node-reboot:PreferNoSchedule"), "{said}");
    assert!(said.contains("node/worker-3: would remove label lb=out, taint weave.works/kured-node-reboot:PreferNoSchedule"), "{said}");
    assert!(!said.contains("worker-2"), "{said}");
    let strip = |text: String| {
        let mut v: Value = serde_json::from_str(&text).expect("json");
        for item in v["items"].as_array_mut().into_iter().flatten() {
            item["metadata"]["managedFields"] = Value::Null;
        }
        v
    };
    assert_eq!(
        strip(snapshot()),
        strip(before),
        "the dry run changed a node"
    );

    let said = succeeded("--cleanup", &plugin(&cp, &flags));
    assert!(
        said.contains("node/worker-1: removed label lb=in"),
        "{said}"
    );
    assert!(
        said.contains("node/worker-3: removed label lb=out, taint"),
        "{said}"
    );
    let after = strip(snapshot());
    let node = |name: &str| {
        after["items"]
            .as_array()
            .and_then(|items| items.iter().find(|n| n["metadata"]["name"] == name))
            .cloned()
            .unwrap_or_else(|| panic!("node {name}"))
    };
    let w1 = node("worker-1");
    assert_eq!(w1["metadata"]["labels"]["lb"], Value::Null);
    assert_eq!(w1["metadata"]["labels"]["team"], "payments");
    assert_eq!(
        w1["metadata"]["annotations"]["weave.works/kured-reboot-in-progress"],
        Value::Null
    );
    assert_eq!(
        w1["metadata"]["annotations"]["weave.works/kured-most-recent-reboot-needed"],
        Value::Null
    );
    assert_eq!(w1["metadata"]["annotations"]["example.com/owner"], "ops");
    assert!(kured_taint_gone(&w1) && has(&w1, &admin_taint), "{w1}");
    let w2 = node("worker-2");
    assert_eq!(w2["metadata"]["labels"]["lb"], "maintenance");
    assert!(has(&w2, &admin_taint), "{w2}");
    let w3 = node("worker-3");
    assert_eq!(w3["metadata"]["labels"]["lb"], Value::Null);
    assert!(kured_taint_gone(&w3), "{w3}");

    // Once clean, again is nothing to do.
    let said = succeeded("--cleanup again", &plugin(&cp, &flags));
    assert!(
        said.contains("nothing of kured's configuration is left on any node"),
        "{said}"
    );
}
