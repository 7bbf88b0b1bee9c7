//! `make chart`: the packaged chart, made by the real packager (`chart-package`) with the real
//! helm of testenv/bin from an images.txt fixture (so that no test waits on `make images`).
//! What a user of the package checks: it lints; it renders and installs with both images
//! pinned by the digests of images.txt; its version is the workspace's; `helm show readme`
//! and `helm show values` show the checked-in README and values.yaml (the digests aside);
//! the same inputs give the same archive; and a missing or stale images.txt is refused with
//! what to run. Also: the checked-in Chart.yaml follows the workspace's version, and the
//! chart README's defaults are what values.yaml says (as kubectl reads both).

use e2e::chart_readme::README;
use e2e::install::{NS, chart_dir, control_plane, helm, helm_on, yaml_to_json};
use nodesim::workspace_binary;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use testenv::ControlPlane;

const REGISTRY: &str = "ghcr.io/node-reboot-operator";
/// The workspace's version: e2e's own is `version.workspace = true`, as the packager's is.
const VERSION: &str = env!("CARGO_PKG_VERSION");
const CONTROLLER: &str = "sha256:c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0";
const AGENT: &str = "sha256:a9a9a9a9a9a9a9a9a9a9a9a9a9a9a9a9a9a9a9a9a9a9a9a9a9a9a9a9a9a9a9a9";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// An images.txt as `make images` writes it: name, archive and digest, tab-separated.
fn images_txt(dir: &Path, lines: &[(String, &str)]) -> PathBuf {
    let path = dir.join("images.txt");
    let text = lines
        .iter()
        .map(|(name, digest)| format!("{name}\t{}/x.oci.tar\t{digest}\n", dir.display()))
        .collect::<String>();
    std::fs::write(&path, text).expect("write images.txt");
    path
}

/// Our two images under `registry` at `tag`, and the pause image, as `make images` lists them.
fn our_images(registry: &str, tag: &str) -> Vec<(String, &'static str)> {
    vec![
        (format!("{registry}/reboot-agent:{tag}"), AGENT),
        (format!("{registry}/reboot-controller:{tag}"), CONTROLLER),
        ("registry.k8s.io/pause:3.10".to_string(), AGENT),
    ]
}

/// The packager with `images` and `out`, and `args`; its output.
fn package(images: &Path, out: &Path, args: &[&str]) -> Output {
    let bin = workspace_binary("chart-package").unwrap_or_else(|e| panic!("{e}"));
    let helm = ControlPlane::bin("helm").unwrap_or_else(|e| panic!("{e}"));
    Command::new(bin)
        .arg("--images-txt")
        .arg(images)
        .arg("--out-dir")
        .arg(out)
        .arg("--helm")
        .arg(helm)
        .args(args)
        .env_remove("OCI_IMAGES_REGISTRY")
        .env_remove("SOURCE_DATE_EPOCH")
        .output()
        .expect("the packager runs")
}

fn archive(out: &Path) -> PathBuf {
    out.join(format!("node-reboot-operator-{VERSION}.tgz"))
}

/// Packages from our images under `registry`; the archive.
fn packaged(dir: &Path, registry: &str, args: &[&str]) -> PathBuf {
    let images = images_txt(dir, &our_images(registry, VERSION));
    let out = dir.join("chart");
    let said = package(&images, &out, args);
    assert!(
        said.status.success(),
        "the packager failed: {}",
        String::from_utf8_lossy(&said.stderr)
    );
    let stdout = String::from_utf8_lossy(&said.stdout);
    assert!(
        stdout.contains("helm push"),
        "it says how to push: {stdout}"
    );
    archive(&out)
}

/// `helm <args>` with a helm home in `dir`; its stdout, or a panic with what it said.
fn helm_says(dir: &Path, args: &[&str]) -> String {
    let out = helm(&dir.join("helm"))
        .args(args)
        .output()
        .expect("helm runs");
    assert!(
        out.status.success(),
        "helm {args:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Every `image:` that `helm template` of `chart` renders, sorted and deduplicated.
fn rendered_images(dir: &Path, chart: &Path) -> Vec<String> {
    let chart = chart.to_str().expect("a UTF-8 path");
    let rendered = helm_says(dir, &["template", "node-reboot-operator", chart, "-n", NS]);
    let mut images = rendered
        .lines()
        .filter_map(|l| l.trim().strip_prefix("image:"))
        .map(|i| i.trim().trim_matches('"').to_string())
        .collect::<Vec<_>>();
    images.sort();
    images.dedup();
    images
}

/// The first line where `a` and `b` differ, numbered.
fn first_difference(a: &str, b: &str) -> String {
    let at = a
        .lines()
        .zip(b.lines())
        .position(|(x, y)| x != y)
        .unwrap_or(a.lines().count().min(b.lines().count()));
    format!(
        "line {}: {:?} against {:?}",
        at + 1,
        a.lines().nth(at).unwrap_or("(end)"),
        b.lines().nth(at).unwrap_or("(end)")
    )
}

/// The value of a top-level `key: value` of `helm show chart`.
fn chart_field(shown: &str, key: &str) -> Option<String> {
    shown.lines().find_map(|l| {
        let v = l.strip_prefix(key)?.strip_prefix(':')?.trim();
        Some(v.trim_matches('"').to_string())
    })
}

#[test]
fn the_package_lints_renders_both_images_by_digest_and_is_the_checked_in_chart() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let values_before = read(&chart_dir().join("values.yaml"));
    let tgz = packaged(dir.path(), REGISTRY, &[]);
    let chart = tgz.to_str().expect("a UTF-8 path");

    helm_says(dir.path(), &["lint", "--strict", chart]);
    assert_eq!(
        rendered_images(dir.path(), &tgz),
        [
            format!("{REGISTRY}/reboot-agent@{AGENT}"),
            format!("{REGISTRY}/reboot-controller@{CONTROLLER}")
        ],
        "the packaged chart renders the images of images.txt, by digest"
    );

    let shown = helm_says(dir.path(), &["show", "chart", chart]);
    assert_eq!(chart_field(&shown, "version").as_deref(), Some(VERSION));
    assert_eq!(chart_field(&shown, "appVersion").as_deref(), Some(VERSION));
    // helm prints the file and a line break.
    let readme = helm_says(dir.path(), &["show", "readme", chart]);
    assert!(
        readme.trim_end() == read(&repo().join(README)).trim_end(),
        "helm show readme does not show the checked-in README: {}",
        first_difference(&readme, &read(&repo().join(README)))
    );

    // The RebootPool CRD of crds/, which `helm install` installs first.
    // helm prints each CRD file after a `---` line.
    let crds = helm_says(dir.path(), &["show", "crds", chart]);
    let crds = crds.strip_prefix("---\n").unwrap_or(&crds);
    let crd_file = read(&chart_dir().join("crds/rebootpools.yaml"));
    assert!(
        crds.trim_end() == crd_file.trim_end(),
        "helm show crds does not show crds/rebootpools.yaml: {}",
        first_difference(crds, &crd_file)
    );

    // values.yaml as checked in, the two digests set; and the checked-in file untouched.
    let shown = helm_says(dir.path(), &["show", "values", chart]);
    assert_eq!(read(&chart_dir().join("values.yaml")), values_before);
    let changed = values_before
        .lines()
        .zip(shown.lines())
        .filter(|(a, b)| a != b)
        .collect::<Vec<_>>();
    assert_eq!(
        changed,
        [
            (
                "    digest: \"\"",
                &*format!("    digest: \"{CONTROLLER}\"")
            ),
            ("    digest: \"\"", &*format!("    digest: \"{AGENT}\"")),
        ],
        "the packaged values.yaml differs from the checked-in one in the digests only"
    );
    assert_eq!(
        values_before.trim_end().lines().count(),
        shown.trim_end().lines().count()
    );
}

#[test]
fn the_same_inputs_give_the_same_archive() {
    let (a, b) = (
        tempfile::tempdir().expect("dir"),
        tempfile::tempdir().expect("dir"),
    );
    let tgz = packaged(a.path(), REGISTRY, &[]);
    let first = std::fs::read(&tgz).expect("the archive");
    let second = std::fs::read(packaged(b.path(), REGISTRY, &[])).expect("the archive");
    assert!(first == second, "two packages of the same inputs differ");
    // Not by luck within one second: every entry has the time SOURCE_DATE_EPOCH (default 0),
    // not its file's or the clock's.
    let listed = Command::new("tar")
        .args(["--list", "--verbose", "--full-time", "--gzip", "--file"])
        .arg(&tgz)
        .env("TZ", "UTC")
        .output()
        .expect("tar runs");
    let listed = String::from_utf8_lossy(&listed.stdout);
    assert!(
        listed.contains("node-reboot-operator/values.yaml"),
        "{listed}"
    );
    let stamped = |l: &&str| !l.contains(" 1970-01-01 00:00:00 ");
    assert_eq!(
        listed.lines().find(stamped),
        None,
        "an entry has another time"
    );
}

#[test]
fn another_registry_is_the_packaged_charts_image_registry() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let registry = "registry.example.com:5000/infra";
    let tgz = packaged(dir.path(), registry, &["--registry", registry]);
    assert_eq!(
        rendered_images(dir.path(), &tgz),
        [
            format!("{registry}/reboot-agent@{AGENT}"),
            format!("{registry}/reboot-controller@{CONTROLLER}")
        ]
    );
}

/// The packager's refusal of `images` (or with `args`): it fails, names the fix, and leaves
/// no package.
fn refused(dir: &Path, images: &Path, args: &[&str]) -> String {
    let out = dir.join("chart");
    let said = package(images, &out, args);
    let stderr = String::from_utf8_lossy(&said.stderr).into_owned();
    assert!(
        !said.status.success(),
        "the packager did not refuse: {stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(!archive(&out).exists(), "a package was written: {stderr}");
    stderr
}

#[test]
fn a_missing_or_stale_images_txt_is_refused_with_what_to_run() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let dir = dir.path();
    let said = refused(dir, &dir.join("no-images.txt"), &[]);
    assert!(
        said.contains("no-images.txt: no such file") && said.contains("run `make images`"),
        "{said}"
    );

    let mut lines = our_images(REGISTRY, VERSION);
    lines.retain(|(name, _)| !name.contains("reboot-agent"));
    let said = refused(dir, &images_txt(dir, &lines), &[]);
    assert!(
        said.contains("no reboot-agent image") && said.contains("make images"),
        "{said}"
    );

    let old = our_images(REGISTRY, "0.0.1-old");
    let said = refused(dir, &images_txt(dir, &old), &[]);
    assert!(
        said.contains(&format!("tagged {REGISTRY}/reboot-controller:0.0.1-old"))
            && said.contains("make images"),
        "{said}"
    );

    let said = refused(
        dir,
        &images_txt(dir, &our_images(REGISTRY, VERSION)),
        &["--registry", "registry.example.com/infra"],
    );
    assert!(said.contains("OCI_IMAGES_REGISTRY"), "{said}");
}

#[test]
fn a_chart_yaml_of_another_version_is_refused() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let chart = dir.path().join("node-reboot-operator");
    let copy = Command::new("cp")
        .arg("-r")
        .arg(chart_dir())
        .arg(&chart)
        .status()
        .expect("cp");
    assert!(copy.success());
    let chart_yaml = chart.join("Chart.yaml");
    let text = read(&chart_yaml).replace(&format!("version: {VERSION}"), "version: 9.9.9");
    std::fs::write(&chart_yaml, text).expect("write Chart.yaml");
    let images = images_txt(dir.path(), &our_images(REGISTRY, VERSION));
    let said = refused(
        dir.path(),
        &images,
        &["--chart", chart.to_str().expect("UTF-8")],
    );
    assert!(
        said.contains("Chart.yaml: version is 9.9.9") && said.contains(VERSION),
        "{said}"
    );
}

/// The version cargo reads from Cargo.toml now, which every crate of the workspace shares.
fn workspace_version() -> String {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let out = Command::new(cargo)
        .args([
            "metadata",
            "--no-deps",
            "--format-version",
            "1",
            "--manifest-path",
        ])
        .arg(repo().join("Cargo.toml"))
        .output()
        .expect("cargo metadata runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let metadata: Value = serde_json::from_slice(&out.stdout).expect("cargo metadata's JSON");
    let mut versions = metadata["packages"]
        .as_array()
        .expect("packages")
        .iter()
        .map(|p| p["version"].as_str().expect("a version").to_string())
        .collect::<Vec<_>>();
    versions.dedup();
    assert_eq!(
        versions.len(),
        1,
        "the crates' versions differ: {versions:?}"
    );
    versions.remove(0)
}

#[test]
fn the_checked_in_chart_follows_the_workspace_version() {
    let version = workspace_version();
    assert_eq!(
        version, VERSION,
        "this test was built from another Cargo.toml"
    );
    let chart_yaml = read(&chart_dir().join("Chart.yaml"));
    for key in ["version", "appVersion"] {
        assert_eq!(
            chart_field(&chart_yaml, key).as_deref(),
            Some(&*version),
            "charts/node-reboot-operator/Chart.yaml: {key} must be the workspace's version"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_package_installs_with_both_workloads_pinned_by_digest() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let tgz = packaged(dir.path(), REGISTRY, &[]);
    let cp = control_plane(false).await;
    let out = helm_on(&cp)
        .args(["install", "node-reboot-operator"])
        .arg(&tgz)
        .args(["--namespace", NS, "--create-namespace"])
        .output()
        .expect("helm runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for (workload, image) in [
        (
            "daemonset/reboot-agent",
            format!("{REGISTRY}/reboot-agent@{AGENT}"),
        ),
        (
            "deployment/reboot-controller",
            format!("{REGISTRY}/reboot-controller@{CONTROLLER}"),
        ),
    ] {
        let get = |path: &str| {
            let got = cp
                .kubectl()
                .args(["-n", NS, "get", workload, "-o"])
                .arg(format!("jsonpath={{.spec.template.spec.{path}}}"))
                .output()
                .expect("kubectl runs");
            String::from_utf8_lossy(&got.stdout).into_owned()
        };
        assert_eq!(get("containers[*].image"), image, "{workload}");
        // Linux binaries: neither lands on a Windows node (e2e/tests/linux_only.rs).
        assert_eq!(
            get("nodeSelector"),
            r#"{"kubernetes.io/os":"linux"}"#,
            "{workload}"
        );
    }
}

// ---------------------------------------------------------------------------------------
// The values table's defaults, read back as YAML.

/// The configuration reference, where the one table of the chart's values is.
const REFERENCE: &str = "docs/src/reference.md";

/// The rows of the reference's chart values table as (value, default) pairs, the default's
/// YAML out of its code span.
fn table_defaults() -> Vec<(String, String)> {
    let page = read(&repo().join(REFERENCE));
    let start = page
        .find("<!-- generated:chart-values")
        .expect("the reference has the chart values table");
    let end = page[start..]
        .find("<!-- end generated:chart-values")
        .map_or(page.len(), |e| start + e);
    page[start..end]
        .lines()
        .filter(|l| l.starts_with("| `"))
        .map(|line| {
            let cells = line.replace("\\|", "\u{0}");
            let cells = cells.split(" | ").collect::<Vec<_>>();
            let path = cells[0].trim_start_matches("| ").trim_matches('`');
            let default = cells[2].replace('\u{0}', "|");
            (path.to_string(), default.trim_matches('`').to_string())
        })
        .collect()
}

#[test]
fn the_values_table_gives_each_value_its_default_from_values_yaml() {
    let defaults = table_defaults();
    assert!(
        defaults.len() > 50,
        "only {} rows in {REFERENCE}'s chart values",
        defaults.len()
    );
    let values = yaml_to_json(&read(&chart_dir().join("values.yaml")));
    let listed = defaults
        .iter()
        .filter(|(_, d)| d != "none")
        .map(|(p, d)| format!("{p:?}: {d}\n"))
        .collect::<String>();
    let readme = yaml_to_json(&listed);
    let mut wrong = Vec::new();
    for (path, default) in defaults.iter().filter(|(_, d)| d != "none") {
        let actual = path.split('.').fold(&values, |v, key| &v[key]);
        if &readme[path] != actual {
            wrong.push(format!("{path}: table `{default}`, values.yaml {actual}"));
        }
    }
    assert!(
        wrong.is_empty(),
        "{REFERENCE} gives wrong defaults:\n{}",
        wrong.join("\n")
    );
}
