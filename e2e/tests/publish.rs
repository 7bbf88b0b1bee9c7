//! `make publish` (hack/publish.sh) against a real registry (CNCF Distribution over TLS with
//! htpasswd, `testenv::Registry`), with the real images and chart of `make images` and
//! `make chart`, checked as a user checks a release: `oras manifest fetch` shows each image's
//! index with both platforms and their SBOM attestations, `cosign verify --key` passes for
//! both images and the chart and fails for an image nobody signed; publishing again changes
//! no digest; a wrong password and an unreachable registry fail naming the problem and the fix.

use e2e::release::{User, VERSION, cosign_key_pair, dist, listed_digest, publish, said};
use serde_json::Value;
use std::path::Path;
use testenv::Registry;

const IMAGES: [&str; 2] = ["reboot-agent", "reboot-controller"];

/// The platforms of an index's images, and what each attestation manifest refers to.
fn platforms_and_attestations(index: &Value) -> (Vec<String>, Vec<String>) {
    let manifests = index["manifests"].as_array().expect("an index");
    let mut platforms = Vec::new();
    let mut attested = Vec::new();
    for m in manifests {
        let annotations = &m["annotations"];
        if annotations["vnd.docker.reference.type"] == "attestation-manifest" {
            attested.push(
                annotations["vnd.docker.reference.digest"]
                    .as_str()
                    .expect("a digest")
                    .to_owned(),
            );
        } else {
            platforms.push(format!(
                "{}/{}",
                m["platform"]["os"].as_str().unwrap_or("?"),
                m["platform"]["architecture"].as_str().unwrap_or("?")
            ));
        }
    }
    (platforms, attested)
}

/// Each platform's image has its attestation in the index.
fn check_index(index: &Value, image: &str) {
    let (mut platforms, attested) = platforms_and_attestations(index);
    platforms.sort();
    assert_eq!(
        platforms,
        ["linux/amd64", "linux/arm64"],
        "{image}: {index}"
    );
    for m in index["manifests"].as_array().expect("an index") {
        if m["platform"]["os"] == "linux" {
            let digest = m["digest"].as_str().expect("a digest");
            assert!(
                attested.iter().any(|a| a == digest),
                "{image}: no attestation of {digest}: {index}"
            );
        }
    }
}

/// Every published digest: both images and the chart.
fn digests(user: &User, path: &str) -> Vec<String> {
    let mut refs: Vec<String> = IMAGES
        .iter()
        .map(|i| format!("{path}/{i}:{VERSION}"))
        .collect();
    refs.push(format!("{path}/charts/node-reboot-operator:{VERSION}"));
    refs.iter().map(|r| user.digest(r)).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn publish_pushes_both_indexes_and_the_chart_signed_and_again_changes_nothing() {
    let registry = Registry::start().await.unwrap_or_else(|e| panic!("{e}"));
    let dir = tempfile::tempdir().expect("temp dir");
    let dist = dist(dir.path());
    let (key, public) = cosign_key_pair(&dir.path().join("key"));
    let path = format!("{}/node-reboot-operator", registry.host());

    let out = publish(&dist, &path, &registry, registry.password(), &key);
    assert!(
        out.status.success(),
        "publish failed: {}\nregistry log:\n{}",
        said(&out),
        registry.log_tail()
    );
    let printed = String::from_utf8_lossy(&out.stdout).into_owned();

    let user = User::login(&registry, &dir.path().join("user"));
    for image in IMAGES {
        let reference = format!("{path}/{image}:{VERSION}");
        let index = user.manifest(&reference);
        check_index(&index, image);
        let digest = user.digest(&reference);
        assert_eq!(
            digest,
            listed_digest(&dist, image),
            "{image}: the index of the archive"
        );
        assert!(
            printed.contains(&format!("{path}/{image}@{digest}")),
            "{printed}"
        );
        let (ok, what) = user.verify(&public, &format!("{path}/{image}@{digest}"));
        assert!(ok, "cosign verify {image}: {what}");
    }
    let chart = format!("{path}/charts/node-reboot-operator:{VERSION}");
    let manifest = user.manifest(&chart);
    assert_eq!(
        manifest["config"]["mediaType"], "application/vnd.cncf.helm.config.v1+json",
        "{manifest}"
    );
    let (ok, what) = user.verify(&public, &chart);
    assert!(ok, "cosign verify of the chart: {what}");

    // Again: the same digests, and no second signature.
    let before = digests(&user, &path);
    let signatures = signature_count(&user, &format!("{path}/reboot-agent:{VERSION}"));
    let again = publish(&dist, &path, &registry, registry.password(), &key);
    assert!(
        again.status.success(),
        "publishing again failed: {}",
        said(&again)
    );
    assert_eq!(
        digests(&user, &path),
        before,
        "publishing again changed a digest"
    );
    assert_eq!(
        signature_count(&user, &format!("{path}/reboot-agent:{VERSION}")),
        signatures
    );

    // A mirror, as install.md tells: `oras cp -r` keeps each digest and brings the signatures
    // along, so the chart's pinned digests resolve there and `cosign verify` passes there.
    let mirror = format!("{}/mirror", registry.host());
    for name in IMAGES
        .iter()
        .copied()
        .chain(["charts/node-reboot-operator"])
    {
        let (from, to) = (
            format!("{path}/{name}:{VERSION}"),
            format!("{mirror}/{name}:{VERSION}"),
        );
        let copied = user.copy(&from, &to);
        assert!(
            copied.status.success(),
            "oras cp -r {from}: {}",
            said(&copied)
        );
        assert_eq!(
            user.digest(&to),
            user.digest(&from),
            "{name}: the mirror's digest"
        );
        let (ok, what) = user.verify(&public, &to);
        assert!(ok, "cosign verify of the mirror's {name}: {what}");
    }

    // An image that nobody signed under the same name, and a key that did not sign it, fail.
    let tampered = format!("{path}/reboot-agent:tampered");
    let pushed = user
        .oras(&[
            "push",
            &tampered,
            "--artifact-type",
            "application/vnd.e2e.tampered",
        ])
        .current_dir(dir.path())
        .output()
        .expect("oras runs");
    assert!(pushed.status.success(), "oras push: {}", said(&pushed));
    let (ok, what) = user.verify(&public, &tampered);
    assert!(!ok, "an unsigned image verified: {what}");
    let (_, other) = cosign_key_pair(&dir.path().join("other-key"));
    let (ok, what) = user.verify(&other, &format!("{path}/reboot-agent@{}", before[0]));
    assert!(!ok, "another key verified the agent: {what}");
}

/// The signatures cosign finds on `reference` (`cosign tree`'s lines of signatures).
fn signature_count(user: &User, reference: &str) -> usize {
    let out = user
        .cosign(&["tree", reference])
        .output()
        .expect("cosign runs");
    assert!(out.status.success(), "cosign tree: {}", said(&out));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains("sha256:"))
        .count()
}

/// publish's exit status must be a failure whose message says `words`.
fn refused(out: &std::process::Output, words: &[&str]) {
    let said = said(out);
    assert!(!out.status.success(), "publish succeeded: {said}");
    for word in words {
        assert!(
            said.contains(word),
            "publish's message does not say {word:?}: {said}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_wrong_password_fails_naming_the_credentials_to_check() {
    let registry = Registry::start().await.unwrap_or_else(|e| panic!("{e}"));
    let dir = tempfile::tempdir().expect("temp dir");
    let dist = dist(dir.path());
    let path = format!("{}/node-reboot-operator", registry.host());
    let out = publish(
        &dist,
        &path,
        &registry,
        "not-the-password",
        Path::new("/nonexistent"),
    );
    refused(
        &out,
        &[
            "refused the credentials",
            "REGISTRY_USERNAME and REGISTRY_PASSWORD",
        ],
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unreachable_registry_fails_naming_the_registry_to_check() {
    let registry = Registry::start().await.unwrap_or_else(|e| panic!("{e}"));
    let dir = tempfile::tempdir().expect("temp dir");
    let dist = dist(dir.path());
    // A loopback port that nothing listens on, whose number holds "401": the error names it,
    // and must still read as the network's, not as a refused login (a port such as 40167 once
    // did).
    let closed = (40100..40200)
        .find(|port| std::net::TcpListener::bind(("127.0.0.1", *port)).is_ok())
        .expect("a free port from 40100 to 40199");
    let path = format!("127.0.0.1:{closed}/node-reboot-operator");
    let out = publish(
        &dist,
        &path,
        &registry,
        registry.password(),
        Path::new("/nonexistent"),
    );
    refused(
        &out,
        &["cannot reach the registry 127.0.0.1:", "check REGISTRY"],
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_missing_release_names_make_release() {
    let dir = tempfile::tempdir().expect("temp dir");
    let out = std::process::Command::new(e2e::release::repo().join("hack/publish.sh"))
        .env("REGISTRY", "127.0.0.1:1/x")
        .env("DIST", dir.path().join("nothing"))
        .output()
        .expect("publish runs");
    refused(&out, &["no such file", "make release"]);
}
