//! `kubectl reboot plan`, end to end: the real kubectl runs the plugin on a pool whose
//! controller holds eight requests for a maintenance window two days ahead. The plan shows the
//! waves of the budget inside that window, the nodes that do not fit spilling into the next
//! week's opening, as JSON and as text that agree; bad settings are refused with the fix.

use common::ControllerReason;
use e2e::every_node;
use k8s_openapi::jiff::{Timestamp, ToSpan, civil::Date, tz::TimeZone};
use nodesim::sandbox::SandboxConfig;
use serde_json::Value;
use std::{
    collections::BTreeSet,
    path::{Path, PathBuf},
    process::{Command, Output},
    time::Duration,
};

/// The real kubectl with only the plugin's directory on PATH.
fn kubectl_reboot(kubectl: &Path, path: &Path, kubeconfig: &Path, args: &[&str]) -> Output {
    Command::new(kubectl)
        .arg("reboot")
        .args(args)
        .env("PATH", path)
        .env("KUBECONFIG", kubeconfig)
        .env_remove("KUBECTL_REBOOT_METRICS_URL")
        .env_remove("MAX_UNAVAILABLE")
        .env_remove("REBOOT_WINDOW")
        .output()
        .expect("kubectl runs")
}

fn stdout_of(output: &Output) -> String {
    assert!(
        output.status.success(),
        "kubectl reboot failed: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn at(day: Date, hour: i8, minute: i8) -> String {
    day.at(hour, minute, 0, 0)
        .to_zoned(TimeZone::UTC)
        .expect("a UTC time")
        .timestamp()
        .to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_plan_shows_the_waves_of_the_window_and_the_spill_into_the_next_week() {
    // A weekly window two days ahead (never open during the test): 10:00-11:00 UTC holds
    // three waves of 25 minutes (10:00, 10:25, 10:50); with a budget of 2, the last two of
    // eight nodes wait for the same hour a week later.
    let day = Timestamp::now().to_zoned(TimeZone::UTC).date() + 2.days();
    let weekday = day.strftime("%a").to_string();
    let window = format!("{weekday} 10:00-11:00 UTC");
    let config = SandboxConfig::with_nodes(8)
        .max_unavailable("2")
        .controller_args(["--reboot-window", &window]);
    let sb = e2e::sandbox_without_pods(config).await;
    let names = sb.fleet.names();
    let (waits, patience) = (ControllerReason::OutsideWindow, Duration::from_secs(30));
    every_node::request_and_wait_for_event(&sb, waits, &[], patience, None).await;

    let built = nodesim::workspace_binary("kubectl-reboot").unwrap_or_else(|e| panic!("{e}"));
    let dir: PathBuf = sb.control_plane.dir().join("plan-plugins");
    std::fs::create_dir_all(&dir).expect("plugin dir");
    std::os::unix::fs::symlink(&built, dir.join("kubectl-reboot")).expect("symlink the plugin");
    let kubectl_bin = testenv::ControlPlane::bin("kubectl").expect("kubectl");
    let kubeconfig = sb.control_plane.kubeconfig_path().to_path_buf();
    let run = |args: &[&str]| kubectl_reboot(&kubectl_bin, &dir, &kubeconfig, args);

    // The plugin's help names the command and the controller's variables it reads.
    let help = stdout_of(&run(&["--help"]));
    assert!(help.contains("plan"), "{help}");
    let help = stdout_of(&run(&["plan", "--help"]));
    for var in [
        "REBOOT_WINDOW",
        "MAX_UNAVAILABLE",
        "MAX_UNAVAILABLE_PER_ZONE",
        "ZONE_LABEL",
        "NODE_SELECTOR",
        "MIN_READY_SECONDS",
    ] {
        assert!(help.contains(&format!("[env: {var}")), "{var} in {help}");
    }

    let settings = [
        "--max-unavailable",
        "2",
        "--reboot-window",
        &window,
        "--reboot-duration",
        "25m",
    ];
    let mut json_args = vec!["plan", "-o", "json"];
    json_args.extend_from_slice(&settings);
    let text = stdout_of(&run(&json_args));
    let plan: Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"));
    assert_eq!(plan["kind"], "RebootPlan", "{plan:#}");
    let waves = plan["waves"].as_array().expect("waves");
    let starts: Vec<&str> = waves
        .iter()
        .map(|w| w["start"].as_str().unwrap_or(""))
        .collect();
    let next_week = day + 7.days();
    assert_eq!(
        starts,
        [
            at(day, 10, 0),
            at(day, 10, 25),
            at(day, 10, 50),
            at(next_week, 10, 0)
        ],
        "{plan:#}"
    );
    let sizes: Vec<usize> = waves
        .iter()
        .map(|w| w["nodes"].as_array().map_or(0, Vec::len))
        .collect();
    assert_eq!(sizes, [2, 2, 2, 2], "{plan:#}");
    let planned: BTreeSet<&str> = waves
        .iter()
        .flat_map(|w| w["nodes"].as_array().into_iter().flatten())
        .filter_map(|n| n["name"].as_str())
        .collect();
    let all: BTreeSet<&str> = names.iter().map(String::as_str).collect();
    assert_eq!(planned, all, "every request in exactly one wave");
    assert_eq!(waves[0]["nodes"][0]["waitedFor"][0], "outside window");
    assert_eq!(waves[3]["windowOpening"], at(next_week, 10, 0));
    assert_eq!(
        plan["spills"],
        serde_json::json!([{"windowOpening": at(next_week, 10, 0), "nodes": 2}])
    );
    assert_eq!(plan["doneAt"], at(next_week, 10, 25));
    assert_eq!(plan["left"], serde_json::json!([]));

    // The text says the same, with the windows given as the controller's variable.
    let output = Command::new(&kubectl_bin)
        .args([
            "reboot",
            "plan",
            "--max-unavailable",
            "2",
            "--reboot-duration",
            "25m",
        ])
        .env("PATH", &dir)
        .env("KUBECONFIG", &kubeconfig)
        .env("REBOOT_WINDOW", format!("{window};{window}"))
        .env_remove("MAX_UNAVAILABLE")
        .output()
        .expect("kubectl runs");
    let text = stdout_of(&output);
    let opening = next_week.strftime("%a %Y-%m-%d").to_string();
    assert!(
        text.contains(&format!(
            "2 nodes spill into the window opening {opening} 10:00:00Z"
        )),
        "{text}"
    );
    assert!(text.contains("Wave 4 (2 nodes): starts in "), "{text}");
    assert!(
        text.contains(&format!("Windows:  {window} or {window}")),
        "{text}"
    );

    // Bad settings: refused before anything is read, with the fix; exit 2 as for any bad flag.
    let bad = run(&[
        "plan",
        "--max-unavailable",
        "2",
        "--reboot-window",
        "Mon 25:00-26:00",
    ]);
    assert_eq!(bad.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&bad.stderr);
    assert!(stderr.contains("DAYS HH:MM-HH:MM"), "{stderr}");
    let bad = run(&["plan", "--max-unavailable-per-zone", "150%"]);
    assert_eq!(bad.status.code(), Some(2));
    // Without the budget the plan cannot be made: it says which flag to give.
    let unknown = run(&["plan"]);
    assert!(!unknown.status.success());
    let stderr = String::from_utf8_lossy(&unknown.stderr);
    assert!(
        stderr.contains("give the controller's --max-unavailable"),
        "{stderr}"
    );
}
