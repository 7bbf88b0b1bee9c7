//! The install commands of README.md and the Quickstart (docs/src/quickstart.md), run as
//! written with Helm 3 and with Helm 4 against the local control plane, the chart pulled from
//! the local registry after `make publish` (ghcr.io/node-reboot-operator replaced by it, and
//! its CA given): each installs a deployed release, which `helm upgrade`, `helm rollback` and
//! `helm uninstall` then change as they say. The commands are found by their text (every
//! `helm install` of a `sh` block), so a rewrite of the pages keeps them tested.

use e2e::install::{NS, control_plane, controller_args, helm};
use e2e::release::{User, cosign_key_pair, dist, publish, repo, said};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use testenv::{ControlPlane, Registry};

const PAGES: [&str; 2] = ["README.md", "docs/src/quickstart.md"];
const RELEASE: &str = "node-reboot-operator";
const PUBLIC: &str = "ghcr.io/node-reboot-operator";

/// Every `helm install` command of the shell blocks of `text`, continuation lines joined.
fn install_commands(text: &str) -> Vec<String> {
    let mut commands = Vec::new();
    let mut in_block = false;
    let mut current: Option<String> = None;
    for line in text.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with("```") {
            in_block =
                !in_block && (trimmed == "```sh" || trimmed == "```bash" || trimmed == "```shell");
            continue;
        }
        if !in_block {
            continue;
        }
        let words = trimmed.strip_suffix('\\').unwrap_or(trimmed).trim();
        match current.as_mut() {
            Some(command) => command.push_str(&format!(" {words}")),
            None if trimmed.starts_with("helm install ") => current = Some(words.to_owned()),
            None => continue,
        }
        if !trimmed.ends_with('\\') {
            commands.extend(current.take());
        }
    }
    commands
}

/// The chart reference and the `--version` of an install command, for the upgrade.
fn chart_of(command: &str) -> String {
    let words: Vec<&str> = command.split_whitespace().collect();
    let chart = words
        .get(3)
        .unwrap_or_else(|| panic!("no chart in {command:?}"));
    let version = words
        .windows(2)
        .find(|w| w[0] == "--version")
        .map(|w| format!(" --version {}", w[1]))
        .unwrap_or_default();
    format!("{chart}{version}")
}

/// A user's shell on the control plane with `helm` on its PATH being `bin`, in the checkout,
/// REGISTRY naming the local registry (the pages set it for their own commands).
struct Shell {
    helm_bin: PathBuf,
    path: PathBuf,
    home: PathBuf,
    kubeconfig: PathBuf,
    registry: String,
    ca: PathBuf,
}

impl Shell {
    fn new(cp: &ControlPlane, helm_name: &str, registry: &Registry, dir: &Path) -> Shell {
        let helm_bin = ControlPlane::bin(helm_name).unwrap_or_else(|e| panic!("{e}"));
        let path = dir.join("path");
        std::fs::create_dir_all(&path).expect("create the PATH folder");
        std::os::unix::fs::symlink(&helm_bin, path.join("helm")).expect("link helm");
        Shell {
            helm_bin,
            path,
            home: dir.join("helm"),
            kubeconfig: cp.kubeconfig_path().to_path_buf(),
            registry: format!("{}/node-reboot-operator", registry.host()),
            ca: registry.ca_file().to_path_buf(),
        }
    }

    /// `command` with the public registry replaced by the local one, and its CA for an OCI chart.
    fn localised(&self, command: &str) -> String {
        let command = command.replace(PUBLIC, &self.registry);
        if command.contains("oci://") {
            format!("{command} --ca-file {}", self.ca.display())
        } else {
            command
        }
    }

    fn run(&self, command: &str) -> Output {
        let path = format!(
            "{}:{}",
            self.path.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let mut shell = Command::new("bash");
        shell
            .args(["-euo", "pipefail", "-c", command])
            .current_dir(repo())
            .env("PATH", path)
            .env("KUBECONFIG", &self.kubeconfig)
            .env("REGISTRY", &self.registry);
        let helm = helm(&self.home);
        for (var, value) in helm.get_envs() {
            match value {
                Some(value) => shell.env(var, value),
                None => shell.env_remove(var),
            };
        }
        shell.env("KUBECONFIG", &self.kubeconfig);
        shell.output().expect("bash runs")
    }

    fn succeeds(&self, command: &str) -> String {
        let out = self.run(command);
        assert!(
            out.status.success(),
            "`{command}` failed with {}: {}",
            self.helm_bin.display(),
            said(&out)
        );
        said(&out)
    }

    /// `helm status` of the release, as JSON; None when there is no release.
    fn status(&self) -> Option<Value> {
        let out = self.run(&format!("helm status {RELEASE} -n {NS} -o json"));
        if !out.status.success() {
            let said = said(&out);
            assert!(said.contains("not found"), "helm status failed: {said}");
            return None;
        }
        Some(serde_json::from_slice(&out.stdout).expect("helm status -o json is JSON"))
    }

    /// The release's revision and state.
    fn revision(&self) -> (i64, String) {
        let status = self.status().expect("a release");
        let state = status["info"]["status"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        (status["version"].as_i64().expect("a revision"), state)
    }
}

fn max_unavailable(cp: &ControlPlane) -> String {
    controller_args(cp)
        .into_iter()
        .find_map(|a| a.strip_prefix("--max-unavailable=").map(str::to_owned))
        .expect("the controller's --max-unavailable")
}

/// Publishes the release to a local registry and runs each page's install command with the
/// helm of testenv/bin named `helm_name`, then upgrade, rollback and uninstall.
async fn quickstart_with(helm_name: &str, helm_major: u32) {
    ControlPlane::bin(helm_name).unwrap_or_else(|e| panic!("{e}"));
    let mut commands = Vec::new();
    for page in PAGES {
        let text =
            std::fs::read_to_string(repo().join(page)).unwrap_or_else(|e| panic!("{page}: {e}"));
        commands.extend(install_commands(&text).into_iter().map(|c| (page, c)));
    }
    for page in PAGES {
        assert!(
            commands.iter().any(|(p, _)| *p == page),
            "{page} has no `helm install` command in a ```sh block: the Quickstart must show how to \
             install, and this test runs it"
        );
    }

    let registry = Registry::start().await.unwrap_or_else(|e| panic!("{e}"));
    let dir = tempfile::tempdir().expect("temp dir");
    let dist = dist(dir.path());
    let (key, _) = cosign_key_pair(&dir.path().join("key"));
    let path = format!("{}/node-reboot-operator", registry.host());
    let out = publish(&dist, &path, &registry, registry.password(), &key);
    assert!(out.status.success(), "publish: {}", said(&out));
    drop(User::login(&registry, &dir.path().join("user")));

    let cp = control_plane(false).await;
    let shell = Shell::new(&cp, helm_name, &registry, dir.path());
    let version = shell.succeeds("helm version --template '{{.Version}}'");
    assert!(
        version.starts_with(&format!("v{helm_major}.")),
        "{helm_name} is Helm {version}"
    );
    shell.succeeds(&format!(
        "helm registry login {} -u {} -p {} --ca-file {}",
        registry.host(),
        registry.username(),
        registry.password(),
        registry.ca_file().display()
    ));

    for (page, command) in &commands {
        let local = shell.localised(command);
        let said = shell.succeeds(&local);
        assert!(
            said.contains("STATUS: deployed"),
            "{page}: `{local}`: {said}"
        );
        assert_eq!(
            shell.revision(),
            (1, "deployed".to_owned()),
            "{page}: `{local}`"
        );
        assert_eq!(max_unavailable(&cp), "1", "{page}: the default budget");
        let namespace: Value =
            serde_json::from_str(&e2e::kubectl(&cp, &["get", "namespace", NS, "-o", "json"]))
                .expect("JSON");
        if helm_major >= 4 {
            assert_eq!(
                namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"], "privileged",
                "{page}: Helm 4 applies the chart's namespace"
            );
        }

        let chart = shell.localised(&chart_of(command));
        shell.succeeds(&format!(
            "helm upgrade {RELEASE} {chart} -n {NS} --reuse-values --set controller.flags.maxUnavailable=2"
        ));
        assert_eq!(
            shell.revision(),
            (2, "deployed".to_owned()),
            "{page}: after the upgrade"
        );
        assert_eq!(max_unavailable(&cp), "2", "{page}: the upgrade's budget");

        shell.succeeds(&format!("helm rollback {RELEASE} 1 -n {NS}"));
        assert_eq!(
            shell.revision(),
            (3, "deployed".to_owned()),
            "{page}: after the rollback"
        );
        assert_eq!(max_unavailable(&cp), "1", "{page}: the rollback's budget");

        shell.succeeds(&format!("helm uninstall {RELEASE} -n {NS}"));
        assert!(shell.status().is_none(), "{page}: the release is gone");
        let left = e2e::kubectl(
            &cp,
            &["get", "deployment,daemonset", "-n", NS, "-o", "name"],
        );
        assert_eq!(left.trim(), "", "{page}: the workloads are gone");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_quickstart_installs_upgrades_rolls_back_and_uninstalls_with_helm_3() {
    quickstart_with("helm3", 3).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_quickstart_installs_upgrades_rolls_back_and_uninstalls_with_helm_4() {
    quickstart_with("helm", 4).await;
}

#[test]
fn install_commands_are_found_with_their_continuation_lines() {
    let page = "text\n```sh\nREGISTRY=x\nhelm install r oci://ghcr.io/node-reboot-operator/charts/c \\\n  \
                --version 0.1.0 --namespace n \\\n  --create-namespace\nkubectl get pods\n```\n\
                ```text\nhelm install not a command\n```\n";
    let found = install_commands(page);
    assert_eq!(
        found,
        [
            "helm install r oci://ghcr.io/node-reboot-operator/charts/c --version 0.1.0 --namespace n --create-namespace"
        ]
    );
    assert_eq!(
        chart_of(&found[0]),
        "oci://ghcr.io/node-reboot-operator/charts/c --version 0.1.0"
    );
}
