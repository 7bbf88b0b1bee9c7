//! A release pushed to the local registry (`testenv::Registry`) as `make publish` pushes it,
//! and the tools a user checks it with (oras, cosign, helm of testenv/bin), logged in with
//! the registry's credentials and trusting its CA.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use testenv::{ControlPlane, Registry};

/// The workspace's version: e2e's own is `version.workspace = true`.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
/// The cosign key's password in the tests.
pub const COSIGN_PASSWORD: &str = "e2e-cosign";

pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("e2e is a folder of the repository")
        .to_path_buf()
}

/// The release's folder as `make release` writes it: target/dist/<version>/ when it exists,
/// else one assembled in `dir` from what `make test` builds before the tests (`make images`:
/// target/images/, `make chart`: target/chart/), the files `make publish` reads.
pub fn dist(dir: &Path) -> PathBuf {
    let made = repo().join("target/dist").join(VERSION);
    if made.is_dir() {
        return made;
    }
    let images = repo().join("target/images");
    let chart = format!("node-reboot-operator-{VERSION}.tgz");
    let out = dir.join("dist").join(VERSION);
    std::fs::create_dir_all(&out).expect("create the dist folder");
    for (from, name, make) in [
        (
            images.join("reboot-agent.oci.tar"),
            "reboot-agent.oci.tar",
            "make images",
        ),
        (
            images.join("reboot-controller.oci.tar"),
            "reboot-controller.oci.tar",
            "make images",
        ),
        (images.join("images.txt"), "images.txt", "make images"),
        (
            repo().join("target/chart").join(&chart),
            chart.as_str(),
            "make chart",
        ),
    ] {
        assert!(
            from.is_file(),
            "{}: no such file; this test publishes the real images and chart: run `{make}` \
             (`make test` does)",
            from.display()
        );
        std::os::unix::fs::symlink(&from, out.join(name)).expect("link a release file");
    }
    out
}

/// The digest that images.txt of `dist` gives the image `name` (reboot-agent, ...).
pub fn listed_digest(dist: &Path, name: &str) -> String {
    let text = std::fs::read_to_string(dist.join("images.txt")).expect("read images.txt");
    text.lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split('\t').collect();
            let image = fields.first()?.rsplit('/').next()?;
            (image.split(':').next() == Some(name)).then(|| fields.get(2).map(|d| d.to_string()))?
        })
        .next()
        .unwrap_or_else(|| panic!("images.txt of {} names no {name}", dist.display()))
}

/// `cosign generate-key-pair` in `dir`: cosign.key (password [`COSIGN_PASSWORD`]) and cosign.pub.
pub fn cosign_key_pair(dir: &Path) -> (PathBuf, PathBuf) {
    std::fs::create_dir_all(dir).expect("create the key's folder");
    let out = tool("cosign")
        .arg("generate-key-pair")
        .current_dir(dir)
        .env("COSIGN_PASSWORD", COSIGN_PASSWORD)
        .output()
        .expect("cosign runs");
    assert!(
        out.status.success(),
        "cosign generate-key-pair: {}",
        said(&out)
    );
    (dir.join("cosign.key"), dir.join("cosign.pub"))
}

/// `hack/publish.sh` (what `make publish` runs) of `dist` to `registry_path` (host/path) with
/// these credentials, signing with `key`; its output.
pub fn publish(
    dist: &Path,
    registry_path: &str,
    registry: &Registry,
    password: &str,
    key: &Path,
) -> Output {
    Command::new(repo().join("hack/publish.sh"))
        .env("REGISTRY", registry_path)
        .env("DIST", dist)
        .env("TESTENV_BIN", testenv::bin_dir())
        .env("REGISTRY_USERNAME", registry.username())
        .env("REGISTRY_PASSWORD", password)
        .env("REGISTRY_CA_FILE", registry.ca_file())
        .env("COSIGN_KEY", key)
        .env("COSIGN_PASSWORD", COSIGN_PASSWORD)
        // Neither the user's credentials nor their helm settings.
        .env("DOCKER_CONFIG", dist.join("no-docker-config"))
        .env("HELM_CONFIG_HOME", dist.join("no-helm-config"))
        .output()
        .expect("hack/publish.sh runs")
}

/// stdout and stderr, for a failure message.
pub fn said(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// A Go tool of testenv/bin; fails naming `make testenv` when it is not built.
pub fn tool(name: &str) -> Command {
    Command::new(ControlPlane::bin(name).unwrap_or_else(|e| panic!("{e}")))
}

/// A user of the registry: a credentials file (`oras login`) in `dir` for oras and cosign,
/// the registry's CA trusted.
#[derive(Debug)]
pub struct User {
    config: PathBuf,
    ca: PathBuf,
}

impl User {
    pub fn login(registry: &Registry, dir: &Path) -> User {
        std::fs::create_dir_all(dir).expect("create the user's folder");
        let user = User {
            config: dir.join("config.json"),
            ca: registry.ca_file().to_path_buf(),
        };
        let out = user
            .oras(&[
                "login",
                "-u",
                registry.username(),
                "-p",
                registry.password(),
            ])
            .arg(registry.host())
            .output()
            .expect("oras runs");
        assert!(out.status.success(), "oras login: {}", said(&out));
        user
    }

    /// oras with `args` then the user's credentials file.
    pub fn oras(&self, args: &[&str]) -> Command {
        let mut oras = tool("oras");
        oras.args(args)
            .arg("--registry-config")
            .arg(&self.config)
            .env("SSL_CERT_FILE", &self.ca);
        oras
    }

    /// `oras cp -r <from> <to>` (what refers to `from` too, the signatures included), as a
    /// user mirrors a release; copy's own flags name the credentials of each side.
    pub fn copy(&self, from: &str, to: &str) -> std::process::Output {
        tool("oras")
            .args(["cp", "-r", from, to, "--from-registry-config"])
            .arg(&self.config)
            .arg("--to-registry-config")
            .arg(&self.config)
            .env("SSL_CERT_FILE", &self.ca)
            .output()
            .expect("oras runs")
    }

    /// `oras manifest fetch <reference>`, parsed.
    pub fn manifest(&self, reference: &str) -> serde_json::Value {
        let out = self
            .oras(&["manifest", "fetch", reference])
            .output()
            .expect("oras runs");
        assert!(
            out.status.success(),
            "oras manifest fetch {reference}: {}",
            said(&out)
        );
        serde_json::from_slice(&out.stdout).expect("a manifest is JSON")
    }

    /// The digest `reference` points to now.
    pub fn digest(&self, reference: &str) -> String {
        let out = self
            .oras(&["manifest", "fetch", "--descriptor", reference])
            .output()
            .expect("oras runs");
        assert!(
            out.status.success(),
            "oras manifest fetch --descriptor {reference}: {}",
            said(&out)
        );
        let descriptor: serde_json::Value =
            serde_json::from_slice(&out.stdout).expect("a descriptor is JSON");
        descriptor["digest"].as_str().expect("a digest").to_owned()
    }

    /// cosign with the user's credentials (DOCKER_CONFIG) and the registry's CA.
    pub fn cosign(&self, args: &[&str]) -> Command {
        let mut cosign = tool("cosign");
        cosign
            .args(args)
            .env("DOCKER_CONFIG", self.config.parent().expect("a folder"))
            .env("SSL_CERT_FILE", &self.ca);
        cosign
    }

    /// `cosign verify --key <public> <reference>` without a transparency log (key-based
    /// signatures are not logged): success, and what it said.
    pub fn verify(&self, public: &Path, reference: &str) -> (bool, String) {
        let out = self
            .cosign(&["verify", "--insecure-ignore-tlog=true", "--key"])
            .arg(public)
            .arg(reference)
            .output()
            .expect("cosign runs");
        (out.status.success(), said(&out))
    }
}
