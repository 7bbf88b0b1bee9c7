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

/// An image archive's blobs, each checked against its name.
struct Archive(Entries);

impl Archive {
    fn read(path: &str) -> Archive {
        Archive(entries(&std::fs::read(path).expect("the archive")))
    }

    fn blob(&self, digest: &Value) -> Vec<u8> {
        let digest = digest.as_str().expect("a digest");
        let bytes = &self.0[&format!("blobs/sha256/{}", &digest[7..])].2;
        assert_eq!(oci_images::oci::digest(bytes), digest, "a blob's name");
        bytes.clone()
    }

    /// index.json's one descriptor, which names the image as containerd reads it.
    fn top(&self, name: &str) -> Value {
        let index = json(&self.0["index.json"].2);
        let descriptor = index["manifests"][0].clone();
        assert_eq!(descriptor["annotations"]["io.containerd.image.name"], name);
        descriptor
    }

    /// The image index of a multi-platform archive.
    fn index(&self, name: &str) -> Value {
        let top = self.top(name);
        assert_eq!(top["mediaType"], oci_images::oci::INDEX_TYPE, "{name}");
        json(&self.blob(&top["digest"]))
    }

    /// A manifest's config and its layer's entries.
    fn image(&self, manifest_digest: &Value) -> (Value, Entries) {
        let manifest = json(&self.blob(manifest_digest));
        let config = json(&self.blob(&manifest["config"]["digest"]));
        let layer = self.blob(&manifest["layers"][0]["digest"]);
        assert_eq!(
            config["rootfs"]["diff_ids"][0],
            manifest["layers"][0]["digest"]
        );
        (config, entries(&layer))
    }
}

/// A single-platform image's config and layer, found through index.json as containerd does.
fn open(archive_path: &str, name: &str) -> (Value, Entries) {
    let archive = Archive::read(archive_path);
    let top = archive.top(name);
    archive.image(&top["digest"])
}

/// Each platform of a multi-platform image, by architecture: its config, its layer, and the
/// SPDX document attached to it.
fn open_index(archive_path: &str, name: &str) -> BTreeMap<String, (Value, Entries, Value)> {
    let archive = Archive::read(archive_path);
    let index = archive.index(name);
    let manifests = index["manifests"].as_array().expect("manifests");
    let sbom_of = |digest: &Value| {
        let attestation = manifests
            .iter()
            .find(|m| m["annotations"]["vnd.docker.reference.digest"] == *digest)
            .unwrap_or_else(|| panic!("{name}: no attestation for {digest}"));
        let manifest = json(&archive.blob(&attestation["digest"]));
        let statement = json(&archive.blob(&manifest["layers"][0]["digest"]));
        assert_eq!(statement["predicateType"], "https://spdx.dev/Document");
        assert_eq!(
            format!(
                "sha256:{}",
                statement["subject"][0]["digest"]["sha256"]
                    .as_str()
                    .unwrap()
            ),
            digest.as_str().unwrap()
        );
        statement["predicate"].clone()
    };
    manifests
        .iter()
        .filter(|m| m["platform"]["os"] == "linux")
        .map(|m| {
            let (config, layer) = archive.image(&m["digest"]);
            assert_eq!(config["architecture"], m["platform"]["architecture"]);
            let architecture = m["platform"]["architecture"].as_str().unwrap().to_owned();
            (architecture, (config, layer, sbom_of(&m["digest"])))
        })
        .collect()
}

/// e_machine of an ELF file, as OCI names the architecture.
fn elf_architecture(elf: &[u8]) -> &'static str {
    assert!(elf.starts_with(b"\x7fELF"), "not an ELF file");
    match u16::from_le_bytes([elf[18], elf[19]]) {
        0x3e => "amd64",
        0xb7 => "arm64",
        other => panic!("e_machine {other:#x}"),
    }
}

/// The names of the crates an SPDX document lists.
fn sbom_packages(sbom: &Value) -> Vec<String> {
    sbom["packages"]
        .as_array()
        .expect("packages")
        .iter()
        .map(|p| p["name"].as_str().expect("a name").to_owned())
        .collect()
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
    let platforms = open_index(&images[agent].0, agent);
    assert_eq!(platforms.keys().collect::<Vec<_>>(), ["amd64", "arm64"]);
    for (architecture, (config, layer, sbom)) in &platforms {
        assert_eq!(paths(layer), ["reboot-agent"]);
        assert_eq!(elf_architecture(&layer["reboot-agent"].2), architecture);
        assert_eq!(layer["reboot-agent"].0, 0o755);
        assert_eq!(config["config"]["User"], "0:0");
        assert_eq!(config["config"]["Entrypoint"][0], "/reboot-agent");
        check_sbom(sbom, "agent", &["kube-client", "tokio", "nix"]);
    }
    assert_eq!(
        std::fs::read(first.path().join("reboot-agent.arm64.spdx.json")).unwrap(),
        serde_json::to_vec_pretty(&platforms["arm64"].2).unwrap(),
        "the SBOM beside the archive is the one in it"
    );

    let controller = "ghcr.io/node-reboot-operator/reboot-controller:0.1.0";
    let platforms = open_index(&images[controller].0, controller);
    assert_eq!(platforms.keys().collect::<Vec<_>>(), ["amd64", "arm64"]);
    for (architecture, (config, layer, sbom)) in &platforms {
        assert_eq!(
            elf_architecture(&layer["reboot-controller"].2),
            architecture
        );
        let passwd = String::from_utf8_lossy(&layer["etc/passwd"].2).into_owned();
        assert!(passwd.contains("nonroot:x:65532:65532:"), "{passwd}");
        let group = String::from_utf8_lossy(&layer["etc/group"].2).into_owned();
        assert!(group.contains("nonroot:x:65532:"), "{group}");
        let ca =
            String::from_utf8_lossy(&layer["etc/ssl/certs/ca-certificates.crt"].2).into_owned();
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
        check_sbom(
            sbom,
            "controller",
            &["kube-client", "jiff", "prometheus-client"],
        );
    }

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

/// An SBOM describes `program` and lists the crates linked into it, with their checksums from
/// Cargo.lock; test-only and build-time crates are not in the binary, so not in the SBOM.
fn check_sbom(sbom: &Value, program: &str, linked: &[&str]) {
    assert_eq!(sbom["spdxVersion"], "SPDX-2.3");
    let names = sbom_packages(sbom);
    for crate_name in [program].iter().chain(linked) {
        assert!(
            names.iter().any(|n| n == crate_name),
            "{crate_name} not in {names:?}"
        );
    }
    for absent in ["proptest", "tempfile", "serde_derive", "cc"] {
        assert!(
            !names.iter().any(|n| n == absent),
            "{absent} is not linked: {names:?}"
        );
    }
    let described = sbom["relationships"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["relationshipType"] == "DESCRIBES")
        .expect("a DESCRIBES relationship");
    let root = sbom["packages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["SPDXID"] == described["relatedSpdxElement"])
        .expect("the described package");
    assert_eq!(root["name"], program);
    let tokio = sbom["packages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "tokio")
        .expect("tokio");
    let purl = &tokio["externalRefs"][0]["referenceLocator"];
    assert!(
        purl.as_str().unwrap().starts_with("pkg:cargo/tokio@"),
        "{purl}"
    );
    assert_eq!(tokio["checksums"][0]["algorithm"], "SHA256");
    assert_eq!(
        tokio["checksums"][0]["checksumValue"]
            .as_str()
            .map(str::len),
        Some(64)
    );
}
