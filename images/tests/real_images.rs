//! `make images` for real: the tool built twice from `make static`'s binaries, into two
//! directories, must give the same bytes, and the images must hold what the Dockerfiles put
//! in them under the names the chart and kustomize deploy, so that `IfNotPresent` finds them.

use serde_json::Value;
use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;
use std::process::Command;

/// `oci-images --out-dir <dir>`: its stdout, or a panic with its stderr, which names
/// `make static` when the static binaries are missing.
fn build_into(dir: &Path) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_oci-images"))
        .arg("--out-dir")
        .arg(dir)
        .output()
        .expect("oci-images starts");
    assert!(
        output.status.success(),
        "oci-images failed ({}); this test needs `make static`:\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).expect("UTF-8")
}

/// images.txt: name → (archive, digest).
fn listing(dir: &Path) -> BTreeMap<String, (String, String)> {
    let text = std::fs::read_to_string(dir.join("images.txt")).expect("images.txt");
    text.lines()
        .map(|line| {
            let fields: Vec<&str> = line.split('\t').collect();
            let [name, archive, digest] = fields[..] else {
                panic!("images.txt line {line:?} is not name<TAB>archive<TAB>digest");
            };
            (name.to_owned(), (archive.to_owned(), digest.to_owned()))
        })
        .collect()
}

/// A tar's entries: path → (mode, uid, content or link target).
type Entries = BTreeMap<String, (u32, u64, Vec<u8>)>;

fn entries(tar_bytes: &[u8]) -> Entries {
    let mut found = BTreeMap::new();
    for entry in tar::Archive::new(tar_bytes).entries().expect("a tar") {
        let mut entry = entry.expect("an entry");
        let path = entry.path().expect("a path").display().to_string();
        let header = entry.header().clone();
        let mut content = Vec::new();
        entry.read_to_end(&mut content).expect("readable");
        if let Some(target) = entry.link_name().expect("a link name") {
            content = target.display().to_string().into_bytes();
        }
        let mode = header.mode().expect("a mode");
        found.insert(path, (mode, header.uid().expect("a uid"), content));
    }
    found
}

fn json(bytes: &[u8]) -> Value {
    serde_json::from_slice(bytes).expect("JSON")
}

/// The image's config and its layer's entries, found through index.json as containerd does.
fn open(archive_path: &str, name: &str) -> (Value, Entries) {
    let archive = entries(&std::fs::read(archive_path).expect("the archive"));
    let blob = |digest: &Value| {
        let digest = digest.as_str().expect("a digest");
        let bytes = &archive[&format!("blobs/sha256/{}", &digest[7..])].2;
        assert_eq!(oci_images::oci::digest(bytes), digest, "a blob's name");
        bytes.clone()
    };
    let index = json(&archive["index.json"].2);
    let descriptor = &index["manifests"][0];
    assert_eq!(descriptor["annotations"]["io.containerd.image.name"], name);
    let manifest = json(&blob(&descriptor["digest"]));
    let config = json(&blob(&manifest["config"]["digest"]));
    let layer = blob(&manifest["layers"][0]["digest"]);
    assert_eq!(
        config["rootfs"]["diff_ids"][0],
        manifest["layers"][0]["digest"]
    );
    (config, entries(&layer))
}

fn paths(entries: &Entries) -> Vec<&str> {
    entries.keys().map(String::as_str).collect()
}

/// `newName:newTag` of every image in manifests/kustomization.yaml.
fn kustomize_images() -> Vec<String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../manifests/kustomization.yaml");
    let text = std::fs::read_to_string(path).expect("manifests/kustomization.yaml");
    let values = |key: &str| -> Vec<String> {
        text.lines()
            .filter_map(|l| l.trim().strip_prefix(key))
            .map(|v| v.trim().to_owned())
            .collect()
    };
    let (names, tags) = (values("newName:"), values("newTag:"));
    assert_eq!(names.len(), tags.len(), "a newTag per newName");
    names
        .iter()
        .zip(&tags)
        .map(|(n, t)| format!("{n}:{t}"))
        .collect()
}

/// `<image.registry>/<repository>:<appVersion>` of each image the chart deploys by default.
fn chart_images() -> Vec<String> {
    let chart = Path::new(env!("CARGO_MANIFEST_DIR")).join("../charts/node-reboot-operator");
    let read = |file: &str| std::fs::read_to_string(chart.join(file)).expect(file);
    let (values, chart_yaml) = (read("values.yaml"), read("Chart.yaml"));
    let value = |text: &str, key: &str| -> Vec<String> {
        text.lines()
            .filter_map(|l| l.trim().strip_prefix(key))
            .map(|v| v.trim().trim_matches('"').to_owned())
            .collect()
    };
    let registry = value(&values, "registry:").remove(0);
    let app_version = value(&chart_yaml, "appVersion:").remove(0);
    value(&values, "repository:")
        .iter()
        .map(|repository| format!("{registry}/{repository}:{app_version}"))
        .collect()
}

#[test]
fn the_images_are_reproducible_and_hold_what_the_dockerfiles_put_in_them() {
    let (first, second) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let printed = build_into(first.path());
    assert_eq!(
        build_into(second.path()),
        printed,
        "the digests of two builds"
    );
    let (images, again) = (listing(first.path()), listing(second.path()));
    for (name, (archive, digest)) in &images {
        assert!(printed.contains(&format!("{name} {digest}")), "{printed}");
        let archive_again = &again[name].0;
        assert!(
            std::fs::read(archive).unwrap() == std::fs::read(archive_again).unwrap(),
            "{archive} and {archive_again} differ"
        );
    }
    let deployed = [kustomize_images(), chart_images()].concat();
    assert_eq!(deployed.len(), 4, "two images each: {deployed:?}");
    for deployed in deployed {
        assert!(
            images.contains_key(&deployed),
            "{deployed} is not built: {images:?}"
        );
    }

    let agent = "ghcr.io/node-reboot-operator/reboot-agent:0.1.0";
    let (config, layer) = open(&images[agent].0, agent);
    assert_eq!(paths(&layer), ["reboot-agent"]);
    assert!(layer["reboot-agent"].2.starts_with(b"\x7fELF"));
    assert_eq!(layer["reboot-agent"].0, 0o755);
    assert_eq!(config["config"]["User"], "0:0");
    assert_eq!(config["config"]["Entrypoint"][0], "/reboot-agent");

    let controller = "ghcr.io/node-reboot-operator/reboot-controller:0.1.0";
    let (config, layer) = open(&images[controller].0, controller);
    assert!(layer["reboot-controller"].2.starts_with(b"\x7fELF"));
    let passwd = String::from_utf8_lossy(&layer["etc/passwd"].2).into_owned();
    assert!(passwd.contains("nonroot:x:65532:65532:"), "{passwd}");
    let group = String::from_utf8_lossy(&layer["etc/group"].2).into_owned();
    assert!(group.contains("nonroot:x:65532:"), "{group}");
    let ca = String::from_utf8_lossy(&layer["etc/ssl/certs/ca-certificates.crt"].2).into_owned();
    assert!(
        ca.contains("-----BEGIN CERTIFICATE-----"),
        "an empty CA bundle"
    );
    assert_eq!(layer["home/nonroot"].1, 65532);
    assert_eq!(config["config"]["User"], "65532:65532");
    assert_eq!(config["config"]["Entrypoint"][0], "/reboot-controller");
    assert_eq!(
        config["config"]["ExposedPorts"]["8080/tcp"],
        Value::Object(Default::default())
    );

    let pause = images
        .keys()
        .find(|n| n.starts_with("registry.k8s.io/pause:3."))
        .expect("the pause image");
    let (config, layer) = open(&images[pause].0, pause);
    assert_eq!(paths(&layer), ["pause"]);
    assert_eq!(config["config"]["Entrypoint"][0], "/pause");
    assert_eq!(config["config"]["User"], "65535:65535");

    let workload = "ghcr.io/node-reboot-operator/test-workload:1";
    let (_, layer) = open(&images[workload].0, workload);
    assert!(layer["bin/busybox"].2.starts_with(b"\x7fELF"));
    for applet in ["bin/sh", "bin/sleep", "bin/httpd"] {
        assert_eq!(layer[applet].2, b"busybox", "{applet}");
    }
}
