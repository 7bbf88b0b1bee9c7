//! Acceptance: without the binaries, starting fails and says how to build them.
//!
//! TESTENV_BIN is process-wide (and setting it is unsafe), so the check runs in a child copy of
//! this test binary that gets an empty TESTENV_BIN from the start.

use std::process::Command;

const CHILD: &str = "TESTENV_MISSING_BINARIES_CHILD";

#[tokio::test]
async fn start_fails_naming_the_missing_binary_and_make_testenv() {
    if std::env::var_os(CHILD).is_some() {
        return check_in_child().await;
    }
    let empty = tempfile::tempdir().expect("temp dir");
    let out = Command::new(std::env::current_exe().expect("test binary"))
        .args([
            "start_fails_naming_the_missing_binary_and_make_testenv",
            "--exact",
            "--nocapture",
        ])
        .env(CHILD, "1")
        .env("TESTENV_BIN", empty.path())
        .output()
        .expect("run the child test");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "child failed:\n{stdout}\n{stderr}");
    assert!(
        stdout.contains("1 passed"),
        "the child ran the check:\n{stdout}"
    );
}

async fn check_in_child() {
    let bin_dir = testenv::bin_dir();
    let err = testenv::ControlPlane::start(testenv::Options::default())
        .await
        .expect_err("start must fail without binaries");
    let message = err.to_string();
    eprintln!("start() failed as expected: {message}");
    assert!(
        message.contains(&bin_dir.join("etcd").display().to_string()),
        "{message}"
    );
    assert!(message.contains("make testenv"), "{message}");

    let message = testenv::ControlPlane::bin("kubectl")
        .expect_err("no kubectl")
        .to_string();
    assert!(
        message.contains("kubectl") && message.contains("make testenv"),
        "{message}"
    );

    // The network-fault tests fail, never skip, without the fault proxy.
    let dir = tempfile::tempdir().expect("temp dir");
    let message = testenv::toxiproxy::Toxiproxy::start(dir.path())
        .await
        .expect_err("no toxiproxy-server")
        .to_string();
    assert!(
        message.contains("toxiproxy-server") && message.contains("make testenv"),
        "{message}"
    );
}
