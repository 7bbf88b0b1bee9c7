//! The CI mode of the benchmark: `bench --quick` runs every scenario at small sizes on the local
//! control plane and writes a report.json with every figure, the machine, the commit and the
//! load during each scenario. Times are not judged here (nor anywhere in the tests: the
//! benchmark reports them).

use std::process::Command;

#[test]
fn quick_mode_produces_every_figure() {
    let out = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("bench-quick");
    let _ = std::fs::remove_dir_all(&out);
    // The bench builds the controller and the agent of its own profile (debug here) first.
    let output = Command::new(env!("CARGO_BIN_EXE_bench"))
        .arg("--quick")
        .arg("--out")
        .arg(&out)
        .output()
        .expect("the bench binary runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "bench --quick failed\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    let text = std::fs::read_to_string(out.join("report.json")).expect("report.json is written");
    let report: serde_json::Value = serde_json::from_str(&text).expect("report.json is JSON");
    for key in bench::report::KEYS {
        assert!(
            report[key].is_number(),
            "report.json has no figure {key}: {text}"
        );
    }
    assert!(
        report["machine"]["cores"].as_u64().unwrap_or(0) > 0,
        "{text}"
    );
    assert!(
        report["machine"]["memory_gib"].as_f64().unwrap_or(0.0) > 0.0,
        "{text}"
    );
    assert!(
        !report["commit"].as_str().unwrap_or("").is_empty(),
        "{text}"
    );
    assert_eq!(report["mode"], "quick", "{text}");
    for scenario in ["requests", "makespan", "scale", "idle"] {
        assert!(
            report["load"][scenario]["median"].is_number(),
            "report.json has no load for {scenario}: {text}"
        );
    }
    assert!(
        stdout.contains("| measure | target | result | load (1-min avg) | pass/miss |"),
        "{stdout}"
    );
    assert!(out.join("details.json").is_file());
}
