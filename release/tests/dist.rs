//! `make release`'s folder from the outputs `make test-inputs` builds (`make static`,
//! `make images`, `make chart`): assembled twice, into two folders, it is the same bytes, the
//! files the release names; SHA256SUMS and the krew manifest match the files; each plugin
//! archive holds LICENSE and the plugin built for its platform.

use flate2::read::GzDecoder;
use release_dist::{Inputs, assemble};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::io::{Cursor, Read};
use std::path::{Path, PathBuf};

const VERSION: &str = env!("CARGO_PKG_VERSION");
const WORKSPACE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/..");

/// target/, from this test's own path: target/debug/deps/<test>.
fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.ancestors().nth(3).unwrap().to_path_buf()
}

fn inputs(target: &Path) -> Inputs {
    Inputs {
        images_dir: target.join("images"),
        chart: target
            .join("chart")
            .join(format!("node-reboot-operator-{VERSION}.tgz")),
        static_dir: target.to_path_buf(),
        license: Path::new(WORKSPACE).join("LICENSE"),
        registry: "ghcr.io/node-reboot-operator".to_owned(),
        version: VERSION.to_owned(),
        download_url: release_dist::DOWNLOAD_URL.to_owned(),
        source_date_epoch: 0,
    }
}

fn files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| {
            let entry = entry.unwrap();
            let name = entry.file_name().into_string().unwrap();
            (name, std::fs::read(entry.path()).unwrap())
        })
        .collect()
}

fn sha256(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The platform of a program's header, read here apart from the crate's own reading of it.
fn machine(binary: &[u8]) -> &'static str {
    if binary.starts_with(b"\x7fELF") {
        match u16::from_le_bytes([binary[18], binary[19]]) {
            0x3e => return "linux/amd64",
            0xb7 => return "linux/arm64",
            _ => {}
        }
    }
    if binary.starts_with(b"MZ") {
        let pe = u32::from_le_bytes(binary[0x3c..0x40].try_into().unwrap()) as usize;
        if &binary[pe..pe + 4] == b"PE\0\0" && binary[pe + 4..pe + 6] == [0x64, 0x86] {
            return "windows/amd64";
        }
    }
    "something else"
}

/// (name, mode, mtime, uid, gid, bytes) of each entry, in the archive's order.
type Entry = (String, u32, u64, u64, u64, Vec<u8>);

fn tar_gz_entries(bytes: &[u8]) -> Vec<Entry> {
    let mut archive = tar::Archive::new(GzDecoder::new(bytes));
    archive
        .entries()
        .unwrap()
        .map(|entry| {
            let mut entry = entry.unwrap();
            let h = entry.header().clone();
            let mut data = Vec::new();
            entry.read_to_end(&mut data).unwrap();
            let name = entry.path().unwrap().display().to_string();
            let (mode, mtime) = (h.mode().unwrap(), h.mtime().unwrap());
            (name, mode, mtime, h.uid().unwrap(), h.gid().unwrap(), data)
        })
        .collect()
}

fn zip_entries(bytes: &[u8]) -> Vec<Entry> {
    let mut archive = zip::ZipArchive::new(Cursor::new(bytes)).unwrap();
    (0..archive.len())
        .map(|i| {
            let mut file = archive.by_index(i).unwrap();
            let mut data = Vec::new();
            file.read_to_end(&mut data).unwrap();
            let mode = file.unix_mode().unwrap() & 0o7777;
            (file.name().unwrap().to_string(), mode, 0, 0, 0, data)
        })
        .collect()
}

/// Each platform block of the krew manifest: its `os`, `arch`, `uri`, `sha256` and `bin`.
fn manifest_platforms(yaml: &str) -> Vec<BTreeMap<String, String>> {
    let platforms = yaml.split_once("  platforms:\n").expect("no platforms").1;
    platforms
        .split("  - selector:\n")
        .skip(1)
        .map(|block| {
            block
                .lines()
                .filter_map(|line| line.trim().split_once(": "))
                .filter(|(key, _)| ["os", "arch", "uri", "sha256", "bin"].contains(key))
                .map(|(key, value)| (key.to_owned(), value.to_owned()))
                .collect()
        })
        .collect()
}

#[test]
fn the_release_folder_is_reproducible_and_its_index_matches_its_files() {
    let target = target_dir();
    let scratch = tempfile::tempdir_in(&target).unwrap();
    let (first, second) = (scratch.path().join("1"), scratch.path().join("2"));
    let inputs = inputs(&target);
    for dir in [&first, &second] {
        assemble(&inputs, dir).unwrap_or_else(|e| {
            panic!("assembling the release from make test-inputs' outputs: {e}")
        });
    }
    let files = files(&first);
    let again = self::files(&second);

    let plugin = |os_arch: &str| {
        let ext = if os_arch.starts_with("windows") {
            "zip"
        } else {
            "tar.gz"
        };
        format!("kubectl-reboot_{VERSION}_{os_arch}.{ext}")
    };
    let mut expected = vec![
        "SHA256SUMS".to_owned(),
        "images.txt".to_owned(),
        format!("node-reboot-operator-{VERSION}.tgz"),
        "reboot.yaml".to_owned(),
        plugin("linux_amd64"),
        plugin("linux_arm64"),
        plugin("windows_amd64"),
    ];
    for image in ["reboot-agent", "reboot-controller"] {
        expected.push(format!("{image}.oci.tar"));
        expected.push(format!("{image}.amd64.spdx.json"));
        expected.push(format!("{image}.arm64.spdx.json"));
    }
    expected.sort();
    assert_eq!(files.keys().cloned().collect::<Vec<_>>(), expected);
    for (name, bytes) in &files {
        assert!(again[name] == *bytes, "{name} differs between two runs");
    }

    // SHA256SUMS: every other file, as sha256sum -c reads it.
    let sums = String::from_utf8(files["SHA256SUMS"].clone()).unwrap();
    let listed: BTreeMap<_, _> = sums
        .lines()
        .map(|line| {
            let (sum, name) = line.split_once("  ").expect("a line <sha256>  <name>");
            (name.to_owned(), sum.to_owned())
        })
        .collect();
    let others: BTreeMap<_, _> = files
        .iter()
        .filter(|(name, _)| *name != "SHA256SUMS")
        .map(|(name, bytes)| (name.clone(), sha256(bytes)))
        .collect();
    assert_eq!(listed, others);

    // The krew manifest: one platform per archive, its download URL and sha256.
    let yaml = String::from_utf8(files["reboot.yaml"].clone()).unwrap();
    assert!(yaml.starts_with(
        "apiVersion: krew.googlecontainertools.github.com/v1alpha2\nkind: Plugin\nmetadata:\n  name: reboot\n"
    ));
    let platforms = manifest_platforms(&yaml);
    assert_eq!(platforms.len(), 3, "{yaml}");
    for platform in platforms {
        let os_arch = format!("{}_{}", platform["os"], platform["arch"]);
        let archive = plugin(&os_arch);
        assert_eq!(
            platform["uri"],
            format!(
                "https://github.com/node-reboot-operator/node-reboot-operator/releases/download/v{VERSION}/{archive}"
            )
        );
        assert_eq!(platform["sha256"], sha256(&files[&archive]), "{archive}");
        let bin = if platform["os"] == "windows" {
            "kubectl-reboot.exe"
        } else {
            "kubectl-reboot"
        };
        assert_eq!(platform["bin"], bin);
    }

    // Each archive: LICENSE and the plugin of its platform, root's, at time 0.
    let license = std::fs::read(Path::new(WORKSPACE).join("LICENSE")).unwrap();
    for (os_arch, bin) in [
        ("linux/amd64", "kubectl-reboot"),
        ("linux/arm64", "kubectl-reboot"),
        ("windows/amd64", "kubectl-reboot.exe"),
    ] {
        let archive = plugin(&os_arch.replace('/', "_"));
        let bytes = &files[&archive];
        let entries = if archive.ends_with(".zip") {
            zip_entries(bytes)
        } else {
            tar_gz_entries(bytes)
        };
        let shape: Vec<_> = entries
            .iter()
            .map(|e| (e.0.as_str(), e.1, e.2, e.3, e.4))
            .collect();
        assert_eq!(
            shape,
            [("LICENSE", 0o644, 0, 0, 0), (bin, 0o755, 0, 0, 0)],
            "{archive}"
        );
        assert!(
            entries[0].5 == license,
            "{archive}: LICENSE is not the workspace's"
        );
        assert_eq!(machine(&entries[1].5), os_arch, "{archive}'s {bin}");
    }
    assert_eq!(
        &GzDecoder::new(&files[&plugin("linux_amd64")][..])
            .header()
            .unwrap()
            .mtime(),
        &0
    );

    // The images and the chart as make images and make chart wrote them; images.txt names
    // the two images by their archives' names in the folder, with make images' digests.
    for name in files
        .keys()
        .filter(|n| n.ends_with(".oci.tar") || n.ends_with(".spdx.json"))
    {
        assert!(
            files[name] == std::fs::read(target.join("images").join(name)).unwrap(),
            "{name}"
        );
    }
    let chart = format!("node-reboot-operator-{VERSION}.tgz");
    assert!(files[&chart] == std::fs::read(target.join("chart").join(&chart)).unwrap());
    let built = std::fs::read_to_string(target.join("images/images.txt")).unwrap();
    let images_txt = String::from_utf8(files["images.txt"].clone()).unwrap();
    let mut names = Vec::new();
    for line in images_txt.lines() {
        let [name, archive, digest] = line.split('\t').collect::<Vec<_>>()[..] else {
            panic!("images.txt: {line:?} is not name, archive, digest")
        };
        assert!(files.contains_key(archive), "{line}");
        assert!(
            built.lines().any(|l| l.starts_with(&format!("{name}\t")) && l.ends_with(&format!("\t{digest}"))),
            "{line} is not in make images' images.txt:\n{built}"
        );
        names.push(name.to_owned());
    }
    names.sort();
    assert_eq!(
        names,
        [
            format!("ghcr.io/node-reboot-operator/reboot-agent:{VERSION}"),
            format!("ghcr.io/node-reboot-operator/reboot-controller:{VERSION}")
        ]
    );
}
