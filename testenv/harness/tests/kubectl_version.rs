//! Acceptance: the real kubectl reports the pinned server version.

mod common;

#[tokio::test]
async fn kubectl_version_reports_the_pinned_release() {
    let expected = testenv::kubernetes_version().expect("version pinned in testenv/go.mod");
    let cp = common::start(common::apiserver_only()).await;

    let out = common::run(cp.kubectl().args(["version", "-o", "json"]));
    assert!(
        out.status.success(),
        "kubectl version failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let version: serde_json::Value =
        serde_json::from_slice(&out.stdout).expect("JSON from kubectl");
    assert_eq!(
        version["serverVersion"]["gitVersion"],
        expected.as_str(),
        "{version:#}"
    );
    assert_eq!(
        version["clientVersion"]["gitVersion"],
        expected.as_str(),
        "{version:#}"
    );
}
