//! Bad input to the programs: a clear message naming the problem and the fix, exit code 2,
//! never a panic; a node that does not exist yet is waited for, not an error.

use nodesim::workspace_binary;
use std::{process::Command, time::Duration};
use testenv::{ControlPlane, Options};

/// The controller started with `args` stops at once with exit code 2 (a bad program argument),
/// without a panic, and its message says each of `says`: the problem and the fix.
fn refused_at_start(args: &[&str], says: &[&str]) {
    let (code, stderr) = controller(args);
    assert_eq!(code, 2, "{args:?}: {stderr}");
    assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    for words in says {
        assert!(
            stderr.contains(words),
            "{args:?}: {words:?} not in {stderr}"
        );
    }
}

fn controller(args: &[&str]) -> (i32, String) {
    let bin = workspace_binary("reboot-controller").expect("reboot-controller is built");
    let out = Command::new(bin)
        .args(args)
        .env_remove("KUBECONFIG")
        .output()
        .expect("runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn bad_labels_and_taint_keys_stop_the_controller_at_start() {
    for (flag, value, says) in [
        ("--pre-reboot-node-labels", "rebooting", "write key=value"),
        (
            "--post-reboot-node-labels",
            "Bad_Prefix.io/x=1",
            "write key=value",
        ),
        (
            "--prefer-no-schedule-taint",
            "reboot pending",
            "label-style key",
        ),
    ] {
        refused_at_start(&[&format!("{flag}={value}")], &[says]);
    }
}

/// A pre-reboot label of the key that places the node in its pool, its zone, or out of the
/// protocol would move the node, for good once the label is removed: refused at start.
#[test]
fn a_pre_reboot_label_of_a_pool_zone_or_opt_out_key_stops_the_controller_at_start() {
    for (args, says) in [
        (
            &[
                "--node-selector=pool=a,!spot",
                "--pre-reboot-node-labels=pool=rebooting",
            ][..],
            "`pool` is a key of --node-selector",
        ),
        (
            &[
                "--node-selector=pool=a,!spot",
                "--pre-reboot-node-labels=spot=true",
            ],
            "`spot` is a key of --node-selector",
        ),
        (
            &["--pre-reboot-node-labels=lb=out,topology.kubernetes.io/zone=none"],
            "`topology.kubernetes.io/zone` is the --zone-label",
        ),
        (
            &["--zone-label=rack", "--pre-reboot-node-labels=rack=none"],
            "`rack` is the --zone-label",
        ),
        (
            &["--pre-reboot-node-labels=reboot-disabled=true"],
            "`reboot-disabled` is the label that opts a node out",
        ),
        (
            &[
                "--annotation-prefix=reboot.example.com",
                "--pre-reboot-node-labels=reboot.example.com/reboot-disabled=true",
            ],
            "`reboot.example.com/reboot-disabled` is the label that opts a node out",
        ),
    ] {
        // The flag and the fix are named.
        refused_at_start(args, &[says, "--pre-reboot-node-labels", "another key"]);
    }
}

/// A give-up before a node is even overdue would give up reboots that are merely slow.
#[test]
fn a_give_up_shorter_than_the_reboot_timeout_stops_the_controller_at_start() {
    refused_at_start(
        &["--give-up-after=10m", "--reboot-timeout=30m"],
        &[
            "--give-up-after 10m is shorter than --reboot-timeout 30m",
            "at least",
        ],
    );
}

#[test]
fn a_pools_ledger_as_the_flags_ledger_stops_the_controller_at_start() {
    refused_at_start(
        &["--ledger-name=node-reboot-pool-gpu"],
        &[
            "is the ledger of the RebootPool \"gpu\"",
            "a name of its own",
        ],
    );
}

#[test]
fn bad_budgets_stop_the_controller_at_start() {
    for (value, why) in [
        ("-1", "negative"),
        ("abc", "not a number"),
        ("150%", "cannot exceed 100%"),
    ] {
        refused_at_start(&["--max-unavailable", value], &[why, "for example `25%`"]);
    }
}

#[test]
fn bad_drain_durations_stop_the_controller_at_start() {
    for (flag, value, why) in [
        (
            "--drain-timeout",
            "abc",
            "every part must start with a whole number",
        ),
        ("--drain-timeout", "-5m", "negative"),
        ("--drain-timeout", "10", "needs a unit"),
        (
            "--drain-grace-period",
            "soon",
            "every part must start with a whole number",
        ),
        ("--drain-grace-period", "-30s", "negative"),
        (
            "--drain-delay",
            "abc",
            "every part must start with a whole number",
        ),
        ("--drain-delay", "30", "needs a unit"),
        ("--reboot-delay", "-1m", "negative"),
        (
            "--reboot-delay",
            "soon",
            "every part must start with a whole number",
        ),
    ] {
        refused_at_start(&[flag, value], &[why, "such as `30s`"]);
    }
}

#[test]
fn bad_reboot_windows_stop_the_controller_at_start_showing_the_syntax() {
    for (value, why) in [
        ("Feb 30 22:00-23:00", "`Feb` is not a day"),
        ("Mon 22:00-22:00", "never opens"),
        (
            "Mon-Fri 22:00-06:00 Europe/Atlantis",
            "not a known IANA time zone",
        ),
        ("Mon 9pm-5am", "not a time of day"),
        ("\"0 22 30 2 *\" 2h Europe/Berlin", "never opens"),
        ("0 22 * * 1-5 8 Europe/Berlin", "`8` is not a duration"),
    ] {
        // The accepted syntax is shown.
        refused_at_start(
            &["--reboot-window", value],
            &[why, "`Mon-Fri 22:00-06:00 Europe/Berlin`"],
        );
    }
}

#[test]
fn bad_blackouts_and_scheduled_budgets_stop_the_controller_at_start_showing_the_syntax() {
    for (flag, value, why, syntax) in [
        (
            "--reboot-blackout",
            "2027-01-03..2026-12-20",
            "ends before it starts",
            "`FROM..UNTIL [ZONE]`",
        ),
        (
            "--reboot-blackout",
            "2026-12-20..2027-01-03 Europe/Atlantis",
            "not a known IANA time zone",
            "`FROM..UNTIL [ZONE]`",
        ),
        (
            "--reboot-blackout",
            "christmas",
            "not a range of dates",
            "`Mon-Fri 22:00-06:00 Europe/Berlin`",
        ),
        (
            "--scheduled-budget",
            "1",
            "expected a budget and when it applies",
            "`BUDGET WHEN`",
        ),
        (
            "--scheduled-budget",
            "-1 daily 01:00-05:00",
            "negative",
            "`BUDGET WHEN`",
        ),
        (
            "--scheduled-budget",
            "1 2027-01-03..2026-12-20",
            "ends before it starts",
            "`BUDGET WHEN`",
        ),
    ] {
        refused_at_start(&[flag, value], &[why, syntax]);
    }
}

#[test]
fn bad_drain_attempts_stop_the_controller_at_start_with_the_fix() {
    for (args, why) in [
        (&["--drain-attempts", "0"][..], "1 or more (such as 3)"),
        (
            &["--drain-attempts", "three"][..],
            "leave the flag out to retry for ever",
        ),
        (&["--max-blocked-nodes", "2"][..], "--drain-attempts"),
        (
            &["--keep-set-aside-cordoned"][..],
            "--keep-set-aside-cordoned needs --drain-attempts",
        ),
        (
            &["--drain-attempts", "3", "--max-blocked-nodes", "-1"][..],
            "0 or more (such as 2)",
        ),
    ] {
        refused_at_start(args, &[why]);
    }
}

#[test]
fn bad_rollout_rules_stop_the_controller_at_start_with_the_fix() {
    for (args, says) in [
        (
            &["--canary", "-1"][..],
            &["\"-1\" is not a number of nodes", "or 0 for no canary"][..],
        ),
        (
            &["--canary", "x"][..],
            &["\"x\" is not a number of nodes", "(such as 1)"][..],
        ),
        (
            &["--canary-soak", "soon"][..],
            &["invalid duration \"soon\"", "such as `30s`"][..],
        ),
        (
            &["--max-failures", "101%"][..],
            &["cannot exceed 100%", "for example `10%`"][..],
        ),
        (
            &["--max-failures", "x"][..],
            &["not a number", "for example `0`"][..],
        ),
        (
            &["--max-failures", "-1"][..],
            &["it is negative", "for example `0`"][..],
        ),
        (&["--waves", "sometimes"][..], &["--waves", "true"][..]),
    ] {
        refused_at_start(args, says);
    }
}

#[test]
fn a_bad_reboot_estimate_stops_the_controller_at_start_with_the_fix() {
    for (value, why) in [
        ("soon", "invalid duration \"soon\""),
        ("0s", "it must be longer than zero"),
        ("-5m", "it is negative"),
    ] {
        refused_at_start(
            &["--reboot-estimate", value],
            &["--reboot-estimate", why, "such as `30s`"],
        );
    }
}

#[test]
fn bad_health_gates_stop_the_controller_at_start() {
    for (args, why) in [
        (
            &["--prometheus-url", "prometheus:9090"][..],
            "http://prometheus.monitoring:9090",
        ),
        (
            &["--prometheus-url", "ftp://prometheus"][..],
            "not an http(s) URL",
        ),
        (&["--alert-filter", "Watchdog"][..], "--prometheus-url"),
        (
            &[
                "--prometheus-url",
                "http://p:9090",
                "--alert-filter",
                "(Watchdog",
            ][..],
            "not a regular expression",
        ),
        (
            &["--alertmanager-url", "http://am:9093"][..],
            "--prometheus-url",
        ),
        (
            &["--blocking-pod-selector", "app in backup"][..],
            "such as `app=backup`",
        ),
        (
            &["--blocking-pod-selector-scope", "zone"][..],
            "node, cluster",
        ),
        (
            &[
                "--prometheus-url",
                "http://p:9090",
                "--prometheus-timeout",
                "ten",
            ][..],
            "such as `30s`",
        ),
    ] {
        refused_at_start(args, &[why]);
    }
}

#[test]
fn a_bad_annotation_prefix_stops_the_controller_at_start() {
    refused_at_start(&["--annotation-prefix", "Not_A_Domain"], &["DNS subdomain"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_agent_waits_for_a_node_that_does_not_exist_yet() {
    let cp = ControlPlane::start(Options {
        controller_manager: false,
        scheduler: false,
        ..Options::default()
    })
    .await
    .expect("control plane starts");
    let dir = tempfile_dir(&cp);
    let boot_id = dir.join("boot_id");
    std::fs::write(&boot_id, "b-1\n").unwrap();
    let log = dir.join("agent.log");
    let rebooted = dir.join("rebooted");
    let mut agent = tokio::process::Command::new(workspace_binary("reboot-agent").unwrap())
        .args(["--node-name", "ghost", "--boot-id-file"])
        .arg(&boot_id)
        .args([
            "--reboot-method",
            "command",
            "--host-mount-namespace",
            "false",
            "--reboot-command",
        ])
        .arg(format!("touch {}", rebooted.display()))
        .env("KUBECONFIG", cp.kubeconfig_path())
        .stderr(std::fs::File::create(&log).unwrap())
        .stdout(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    e2e::wait_until(
        "the agent says the node is missing",
        Duration::from_secs(30),
        None,
        || async {
            std::fs::read_to_string(&log)
                .unwrap_or_default()
                .contains("ghost not found")
        },
    )
    .await;
    assert!(
        agent.try_wait().unwrap().is_none(),
        "the agent keeps waiting instead of exiting"
    );
    // Once the node is registered (already told to reboot), the waiting agent acts on it.
    let ghost = "apiVersion: v1\nkind: Node\nmetadata: {name: ghost, annotations: {reboot-now: \"true\"}}\n";
    e2e::kubectl_stdin(&cp, &["create", "-f", "-"], ghost);
    e2e::wait_until(
        "the agent reboots the node once it exists",
        Duration::from_secs(60),
        None,
        || async { rebooted.exists() },
    )
    .await;
    let annotations = e2e::node(&cp.client().await.unwrap(), "ghost")
        .await
        .metadata
        .annotations
        .unwrap();
    assert_eq!(
        annotations.get("reboot-boot-id").map(String::as_str),
        Some("b-1")
    );
    agent.kill().await.unwrap();
}

fn tempfile_dir(cp: &ControlPlane) -> std::path::PathBuf {
    let dir = cp.dir().join("agent");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
