//! Acceptance: the real kubectl and API server are the release the tests are meant to run on:
//! the one pinned in testenv/go.mod, or `$TESTENV_EXPECT_VERSION` when set. `make
//! test-oldest-k8s` points TESTENV_BIN at the oldest supported release's binaries and sets
//! TESTENV_EXPECT_VERSION to it, so this test proves that the tests beside it ran on that release.

mod common;

/// The release asked for, and where that expectation comes from (for the failure message).
fn expected_release() -> (String, &'static str) {
    match std::env::var("TESTENV_EXPECT_VERSION") {
        Ok(version) if !version.is_empty() => (version, "TESTENV_EXPECT_VERSION"),
        _ => (
            testenv::kubernetes_version().expect("version pinned in testenv/go.mod"),
            "testenv/go.mod",
        ),
    }
}

#[tokio::test]
async fn kubectl_and_the_api_server_are_the_release_asked_for() {
    let (expected, source) = expected_release();
    let cp = common::start(common::apiserver_only()).await;

    let out = common::run(cp.kubectl().args(["version", "-o", "json"]));
    assert!(
        out.status.success(),
        "kubectl version failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let version: serde_json::Value =
        serde_json::from_slice(&out.stdout).expect("JSON from kubectl");
    eprintln!(
        "binaries in {}: server {}, kubectl {}",
        testenv::bin_dir().display(),
        version["serverVersion"]["gitVersion"],
        version["clientVersion"]["gitVersion"]
    );
    for side in ["serverVersion", "clientVersion"] {
        assert_eq!(
            version[side]["gitVersion"],
            expected.as_str(),
            "{side} of the binaries in {} is not {expected} (asked for by {source}); \
             build them with `make testenv` (or `make test-oldest-k8s` for the oldest release) \
             or point TESTENV_BIN at them: {version:#}",
            testenv::bin_dir().display()
        );
    }
}
