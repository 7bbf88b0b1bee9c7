//! The operator as a user installs a release: `make publish` (hack/publish.sh) pushes the
//! release of `make release` (target/dist/<version>/) to the local registry and signs it with
//! a key of the run; the user verifies the signatures of both images and of the chart with
//! `cosign verify --key`, logs helm in to the registry, creates an image pull secret and
//! installs the chart from `oci://<registry>/<owner>/charts/node-reboot-operator`. The
//! guests' containerd pulls the images from the same registry (vmtest::node::NodeRegistry).

use e2e::release::{User, VERSION, cosign_key_pair, listed_digest, said};
use std::{
    io::Write as _,
    path::{Path, PathBuf},
    process::{Command, Stdio},
};
use testenv::{ControlPlane, Registry};

/// The path under the registry that the release is published to, as on
/// `ghcr.io/node-reboot-operator`.
const OWNER: &str = "node-reboot-operator";
/// The image pull secret that the chart's `imagePullSecrets` names.
const PULL_SECRET: &str = "registry";
/// The images of the release, as images.txt names them.
pub const IMAGES: [&str; 2] = ["reboot-agent", "reboot-controller"];

/// A release published to the local registry.
pub struct Published {
    pub registry: Registry,
    /// `<registry>/node-reboot-operator`: the images' `image.registry`.
    pub prefix: String,
    /// The release's folder (target/dist/<version>/).
    pub dist: PathBuf,
    /// The public key of the run's signing key.
    public_key: PathBuf,
    /// The user's registry login, for cosign.
    user: User,
}

impl Published {
    /// `oci://<registry>/node-reboot-operator/charts/node-reboot-operator`.
    pub fn chart(&self) -> String {
        format!("oci://{}/charts/node-reboot-operator", self.prefix)
    }

    /// `<registry>/node-reboot-operator/<image>@<digest of images.txt>`: what the operator's
    /// containers must run.
    pub fn pinned(&self, image: &str) -> String {
        format!(
            "{}/{image}@{}",
            self.prefix,
            listed_digest(&self.dist, image)
        )
    }
}

/// Makes a signing key and publishes the release into `registry` with it, as `make publish
/// REGISTRY=<registry>/node-reboot-operator` does, then logs a user in.
pub fn publish(registry: Registry, work: &Path) -> Published {
    let dir = work.join("release");
    let dist = e2e::release::dist(&dir);
    let (key, public_key) = cosign_key_pair(&dir.join("key"));
    let prefix = format!("{}/{OWNER}", registry.host());
    let out = e2e::release::publish(&dist, &prefix, &registry, registry.password(), &key);
    assert!(out.status.success(), "make publish: {}", said(&out));
    eprintln!(
        "node-e2e: make publish REGISTRY={prefix}:\n{}",
        String::from_utf8_lossy(&out.stdout).trim_end()
    );
    let user = User::login(&registry, &dir.join("user"));
    Published {
        registry,
        prefix,
        dist,
        public_key,
        user,
    }
}

/// What a cautious user does before installing: verifies the signature of each image and of
/// the chart with the release's public key (no transparency log is reachable from the test;
/// key-based signatures are not logged).
pub fn verify(published: &Published) {
    let charts = format!("{}/charts/node-reboot-operator", published.prefix);
    let references = IMAGES
        .map(|image| format!("{}/{image}:{VERSION}", published.prefix))
        .into_iter()
        .chain([format!("{charts}:{VERSION}")]);
    for reference in references {
        let (verified, what) = published.user.verify(&published.public_key, &reference);
        assert!(
            verified,
            "cosign verify --key cosign.pub {reference}: {what}"
        );
        eprintln!("node-e2e: cosign verify --key cosign.pub {reference}: verified");
    }
}

/// `helm registry login`; the operator's namespace, created and labelled as the chart's own
/// would be, since it holds the image pull secret before the release (Helm does not adopt a
/// namespace it did not create: `namespace.create=false`); the secret; then `helm install`
/// from the registry, with `pools` (the chart's value, as JSON) and the flags' pool turned off.
pub fn install(
    cp: &ControlPlane,
    published: &Published,
    (namespace, release): (&str, &str),
    pools: &str,
) {
    let registry = &published.registry;
    let mut login = e2e::install::helm_on(cp);
    login
        .args(["registry", "login", &registry.host()])
        .args(["--username", registry.username(), "--password-stdin"])
        .arg("--ca-file")
        .arg(registry.ca_file());
    run_with_input(&mut login, registry.password());
    e2e::kubectl(cp, &["create", "namespace", namespace]);
    let privileged = "pod-security.kubernetes.io/enforce=privileged";
    e2e::kubectl(cp, &["label", "namespace", namespace, privileged]);
    e2e::kubectl(
        cp,
        &[
            "create",
            "secret",
            "docker-registry",
            PULL_SECRET,
            "--namespace",
            namespace,
            &format!("--docker-server={}", registry.host()),
            &format!("--docker-username={}", registry.username()),
            &format!("--docker-password={}", registry.password()),
        ],
    );
    let image_registry = format!("image.registry={}", published.prefix);
    let pull_secret = format!("imagePullSecrets[0].name={PULL_SECRET}");
    let values = [
        &image_registry,
        &pull_secret,
        "namespace.create=false",
        "defaultPool=false",
    ];
    helm_with(
        cp,
        published,
        (release, namespace),
        false,
        (&values, Some(pools)),
    );
}

/// `helm install` (`upgrade` false) or `helm upgrade --reuse-values` of the published chart
/// with `values`.
pub fn helm(
    cp: &ControlPlane,
    published: &Published,
    (release, namespace): (&str, &str),
    upgrade: bool,
    values: &[&str],
) {
    helm_with(cp, published, (release, namespace), upgrade, (values, None));
}

/// [`helm`], with the value `pools` given as JSON (`--set-json`) where there is one.
fn helm_with(
    cp: &ControlPlane,
    published: &Published,
    (release, namespace): (&str, &str),
    upgrade: bool,
    (values, pools): (&[&str], Option<&str>),
) {
    let mut helm = e2e::install::helm_on(cp);
    if upgrade {
        helm.args(["upgrade", release, "--reuse-values"]);
    } else {
        helm.args(["install", release]);
    }
    helm.arg(published.chart())
        .args(["--version", VERSION, "--namespace", namespace])
        .arg("--ca-file")
        .arg(published.registry.ca_file());
    for value in values {
        helm.args(["--set", value]);
    }
    if let Some(pools) = pools {
        helm.args(["--set-json", &format!("pools={pools}")]);
    }
    let out = helm.output().expect("helm runs");
    assert!(out.status.success(), "{helm:?}: {}", said(&out));
    let verb = if upgrade { "upgrade" } else { "install" };
    eprintln!(
        "node-e2e: helm {verb} {release} {} --version {VERSION} {}",
        published.chart(),
        values.join(" ")
    );
}

/// Runs `command` with `input` on its stdin (a password); fails with what it said.
fn run_with_input(command: &mut Command, input: &str) {
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{command:?} could not start: {e}"));
    if let Some(mut stdin) = child.stdin.take() {
        stdin.write_all(input.as_bytes()).expect("write its input");
    }
    let out = child.wait_with_output().expect("wait for it");
    assert!(out.status.success(), "{command:?}: {}", said(&out));
}
