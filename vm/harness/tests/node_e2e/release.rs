//! The operator as a user installs a release: `make publish` (hack/publish.sh, run here
//! without make's `testenv` prerequisite) pushes the release of
//! `make release` (target/dist/<version>/) to the local registry and signs it with a key of
//! the test's; the user verifies the signatures of both images and of the chart with
//! `cosign verify --key`, logs helm in to the registry, creates an image pull secret and
//! installs the chart from `oci://<registry>/charts/node-reboot-operator`. The guests'
//! containerd pulls the images from the same registry (vmtest::node::NodeRegistry).

use std::{
    collections::BTreeMap,
    io::Write as _,
    path::{Path, PathBuf},
    process::{Command, Output, Stdio},
};
use testenv::{ControlPlane, Registry};

/// The repository under the registry that the release is published to, as
/// `ghcr.io/node-reboot-operator` is on GitHub.
const OWNER: &str = "node-reboot-operator";
/// The image pull secret that the chart's `imagePullSecrets` names.
pub const PULL_SECRET: &str = "registry";
/// The password of the signing key (cosign's own prompt would ask for it).
const KEY_PASSWORD: &str = "node-e2e";

/// A release published to the local registry.
pub struct Published {
    pub registry: Registry,
    /// `<registry>/node-reboot-operator`: the images' `image.registry`.
    pub prefix: String,
    pub version: String,
    /// The digests of `make release`'s images.txt, by image name (`reboot-agent`).
    pub digests: BTreeMap<String, String>,
    /// The signing key pair and cosign's registry login.
    dir: PathBuf,
}

impl Published {
    /// `oci://<registry>/node-reboot-operator/charts/node-reboot-operator`.
    pub fn chart(&self) -> String {
        format!("oci://{}/charts/node-reboot-operator", self.prefix)
    }

    fn public_key(&self) -> PathBuf {
        self.dir.join("cosign.pub")
    }
}

/// target/dist/<version>/, which `make publish` reads; fails naming `make release`.
pub fn dist_dir() -> PathBuf {
    let version = env!("CARGO_PKG_VERSION");
    let dir = vmtest::repo_root().join("target/dist").join(version);
    assert!(
        dir.join("images.txt").is_file(),
        "{} holds no release: run `make release` (make node-e2e does)",
        dir.display()
    );
    dir
}

/// Makes a signing key and publishes the release into `registry` with it, as `make publish
/// REGISTRY=<registry>/node-reboot-operator` does.
pub fn publish(registry: Registry, work: &Path) -> Published {
    let dir = work.join("release");
    std::fs::create_dir_all(&dir).expect("create the release's directory");
    let key_prefix = dir.join("cosign");
    run(cosign(&dir, registry.ca_file())
        .args(["generate-key-pair", "--output-key-prefix"])
        .arg(&key_prefix));
    let prefix = format!("{}/{OWNER}", registry.host());
    let version = env!("CARGO_PKG_VERSION").to_owned();
    let dist = dist_dir();
    let mut publish = Command::new("bash");
    publish
        .current_dir(vmtest::repo_root())
        .arg("hack/publish.sh")
        .env("REGISTRY", &prefix)
        .env("VERSION", &version)
        .env("REGISTRY_USERNAME", registry.username())
        .env("REGISTRY_PASSWORD", registry.password())
        .env("REGISTRY_CA_FILE", registry.ca_file())
        .env("COSIGN_KEY", key_prefix.with_extension("key"))
        .env("COSIGN_PASSWORD", KEY_PASSWORD);
    let published = run(&mut publish);
    eprintln!(
        "node-e2e: make publish REGISTRY={prefix}:\n{}",
        String::from_utf8_lossy(&published.stdout).trim_end()
    );
    let digests = digests(&dist.join("images.txt"));
    Published {
        registry,
        prefix,
        version,
        digests,
        dir,
    }
}

/// What a cautious user does before installing: logs cosign in to the registry and verifies
/// the signature of each image and of the chart with the release's public key. No
/// transparency log is reachable from the test, so its proof is not asked for (the key is).
pub fn verify(published: &Published) {
    let registry = &published.registry;
    let cosign = || cosign(&published.dir, registry.ca_file());
    run_with_input(
        cosign()
            .args(["login", &registry.host(), "--username", registry.username()])
            .arg("--password-stdin"),
        registry.password(),
    );
    let refs = [
        format!("{}/reboot-agent:{}", published.prefix, published.version),
        format!(
            "{}/reboot-controller:{}",
            published.prefix, published.version
        ),
        format!(
            "{}/charts/node-reboot-operator:{}",
            published.prefix, published.version
        ),
    ];
    for reference in &refs {
        run(cosign()
            .arg("verify")
            .arg("--key")
            .arg(published.public_key())
            .args(["--insecure-ignore-tlog=true", "--output", "text"])
            .arg(reference));
        eprintln!("node-e2e: cosign verify --key cosign.pub {reference}: verified");
    }
}

/// `helm registry login`; the operator's namespace, created and labelled as the chart's own
/// would be, since it holds the image pull secret before the release (Helm refuses to adopt a
/// namespace it did not create: `namespace.create=false`); the secret; then `helm install`
/// from the registry.
pub fn install(cp: &ControlPlane, published: &Published, namespace: &str, release: &str) {
    let registry = &published.registry;
    let mut login = e2e::install::helm_on(cp);
    login
        .args(["registry", "login", &registry.host()])
        .args(["--username", registry.username(), "--password-stdin"])
        .arg("--ca-file")
        .arg(registry.ca_file());
    run_with_input(&mut login, registry.password());
    e2e::kubectl(cp, &["create", "namespace", namespace]);
    e2e::kubectl(
        cp,
        &[
            "label",
            "namespace",
            namespace,
            "pod-security.kubernetes.io/enforce=privileged",
        ],
    );
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
    let pull_secret = format!("imagePullSecrets[0].name={PULL_SECRET}");
    let image_registry = format!("image.registry={}", published.prefix);
    let values = [
        image_registry.as_str(),
        pull_secret.as_str(),
        "namespace.create=false",
    ];
    helm(cp, published, release, namespace, false, &values);
}

/// `helm install` (`upgrade` false) or `helm upgrade --reuse-values` of the published chart
/// with `values`.
pub fn helm(
    cp: &ControlPlane,
    published: &Published,
    release: &str,
    namespace: &str,
    upgrade: bool,
    values: &[&str],
) {
    let mut helm = e2e::install::helm_on(cp);
    if upgrade {
        helm.args(["upgrade", release, "--reuse-values"]);
    } else {
        helm.args(["install", release]);
    }
    helm.arg(published.chart())
        .args(["--version", &published.version, "--namespace", namespace])
        .arg("--ca-file")
        .arg(published.registry.ca_file());
    for value in values {
        helm.args(["--set", value]);
    }
    run(&mut helm);
    let verb = if upgrade { "upgrade" } else { "install" };
    eprintln!(
        "node-e2e: helm {verb} {release} {} --version {} {}",
        published.chart(),
        published.version,
        values.join(" ")
    );
}

/// images.txt's digests by image name: `<registry>/<name>:<tag>\t<archive>\t<digest>`.
fn digests(images_txt: &Path) -> BTreeMap<String, String> {
    let text = std::fs::read_to_string(images_txt)
        .unwrap_or_else(|e| panic!("read {}: {e}", images_txt.display()));
    text.lines()
        .filter_map(|line| {
            let mut fields = line.split('\t');
            let reference = fields.next()?;
            let digest = fields.nth(1)?;
            let name = reference.rsplit('/').next()?.split(':').next()?;
            Some((name.to_owned(), digest.to_owned()))
        })
        .collect()
}

/// testenv/bin's cosign, its registry login kept in `dir` (DOCKER_CONFIG), trusting the
/// registry's CA as the system's roots would (SSL_CERT_FILE).
fn cosign(dir: &Path, ca: &Path) -> Command {
    let bin = ControlPlane::bin("cosign").unwrap_or_else(|e| panic!("{e}"));
    let mut cosign = Command::new(bin);
    cosign
        .current_dir(dir)
        .env("DOCKER_CONFIG", dir.join("docker"))
        .env("SSL_CERT_FILE", ca)
        .env("COSIGN_PASSWORD", KEY_PASSWORD)
        .env("COSIGN_YES", "true");
    cosign
}

/// Runs `command`, failing with its output unless it succeeds.
fn run(command: &mut Command) -> Output {
    let output = command
        .output()
        .unwrap_or_else(|e| panic!("{command:?} could not start: {e}"));
    check(command, output)
}

fn run_with_input(command: &mut Command, input: &str) -> Output {
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{command:?} could not start: {e}"));
    if let Some(mut stdin) = child.stdin.take() {
        stdin.write_all(input.as_bytes()).expect("write its input");
    }
    let output = child.wait_with_output().expect("wait for it");
    check(command, output)
}

fn check(command: &Command, output: Output) -> Output {
    assert!(
        output.status.success(),
        "{command:?} failed ({}): {}{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}
