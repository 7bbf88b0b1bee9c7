//! The release binaries that the Dockerfiles put on `scratch` and distroless/static are fully
//! static: no ELF interpreter, no shared library needed. No container engine runs here, so
//! `make static` (a prerequisite of `make build` and `make test`) builds them with the
//! Dockerfiles' own command, and this test checks the result: for this machine, and the
//! images' two binaries for the other architecture (arm64 on amd64), which run here under
//! QEMU's user mode (`make cross-tools` registers it with binfmt_misc).

use std::path::{Path, PathBuf};

const BINARIES: [&str; 3] = ["reboot-agent", "reboot-controller", "kubectl-reboot"];
const IMAGE_BINARIES: [&str; 2] = ["reboot-agent", "reboot-controller"];
const PT_DYNAMIC: u32 = 2;
const PT_INTERP: u32 = 3;
const DT_NULL: u64 = 0;
const DT_NEEDED: u64 = 1;

/// `target/<arch>-unknown-linux-gnu/release`, next to the `target/<profile>/deps/` this test
/// runs from.
fn release_dir(arch: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("the test's own path");
    let target = exe
        .ancestors()
        .nth(3)
        .expect("target/<profile>/deps/<test>");
    target
        .join(format!("{arch}-unknown-linux-gnu"))
        .join("release")
}

/// The other architecture of the images.
fn cross_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "aarch64",
        _ => "x86_64",
    }
}

/// Every binary `make static` builds, with its architecture.
fn static_binaries() -> Vec<(&'static str, &'static str)> {
    let host = BINARIES.map(|name| (std::env::consts::ARCH, name));
    let cross = IMAGE_BINARIES.map(|name| (cross_arch(), name));
    [&host[..], &cross[..]].concat()
}

fn binary(arch: &str, name: &str) -> (PathBuf, Vec<u8>) {
    let path = release_dir(arch).join(name);
    let bytes = std::fs::read(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e}; the static release binaries are missing: run make build",
            path.display()
        )
    });
    (path, bytes)
}

fn u16_at(b: &[u8], at: usize) -> usize {
    usize::from(u16::from_le_bytes([b[at], b[at + 1]]))
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

fn offset(value: u64) -> usize {
    usize::try_from(value).expect("offset fits")
}

/// What makes an ELF file dynamic: an interpreter (PT_INTERP) and the libraries it must load
/// (DT_NEEDED). A static-pie binary has a PT_DYNAMIC for its own relocations, but neither.
fn dynamic_dependencies(path: &Path, elf: &[u8]) -> Vec<String> {
    assert!(
        elf.starts_with(b"\x7fELF") && elf[4] == 2 && elf[5] == 1,
        "{} is not a 64-bit little-endian ELF file",
        path.display()
    );
    let (phoff, phentsize, phnum) = (
        offset(u64_at(elf, 0x20)),
        u16_at(elf, 0x36),
        u16_at(elf, 0x38),
    );
    let mut found = Vec::new();
    for i in 0..phnum {
        let ph = phoff + i * phentsize;
        let (p_type, p_offset, p_filesz) = (
            u32_at(elf, ph),
            offset(u64_at(elf, ph + 8)),
            offset(u64_at(elf, ph + 32)),
        );
        if p_type == PT_INTERP {
            let interp = String::from_utf8_lossy(&elf[p_offset..p_offset + p_filesz]);
            found.push(format!("interpreter {}", interp.trim_end_matches('\0')));
        }
        if p_type == PT_DYNAMIC {
            for entry in elf[p_offset..p_offset + p_filesz].chunks_exact(16) {
                match u64_at(entry, 0) {
                    DT_NULL => break,
                    DT_NEEDED => found.push("a DT_NEEDED shared library".to_owned()),
                    _ => {}
                }
            }
        }
    }
    found
}

#[test]
fn release_binaries_are_static_and_run() {
    for (arch, name) in static_binaries() {
        let (path, elf) = binary(arch, name);
        assert_eq!(e2e::elf::architecture(&path), arch, "{}", path.display());
        let dynamic = dynamic_dependencies(&path, &elf);
        assert!(
            dynamic.is_empty(),
            "{} is not static: {dynamic:?}; build it with `make build` (crt-static)",
            path.display()
        );
        let output = std::process::Command::new(&path)
            .arg("--version")
            .output()
            .expect("the static binary starts");
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success() && stdout.starts_with(name),
            "{} --version: {stdout}{}",
            path.display(),
            String::from_utf8_lossy(&output.stderr)
        );
    }
}

/// The Dockerfiles run the command this file's binaries come from, on pinned bases.
#[test]
fn dockerfiles_build_the_same_static_binaries_on_pinned_bases() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    for (file, package, final_base) in [
        ("Dockerfile.agent", "-p agent", "FROM scratch"),
        (
            "Dockerfile.controller",
            "-p controller",
            "FROM gcr.io/distroless/static",
        ),
    ] {
        let text = std::fs::read_to_string(root.join(file)).expect("Dockerfile exists");
        for needed in [
            "cargo build --release --locked",
            "target-feature=+crt-static",
            package,
        ] {
            assert!(text.contains(needed), "{file} lacks `{needed}`");
        }
        let froms: Vec<&str> = text.lines().filter(|l| l.starts_with("FROM ")).collect();
        assert!(froms.len() >= 2, "{file} is multi-stage: {froms:?}");
        for from in &froms {
            let pinned = from.split_whitespace().nth(1).is_some_and(|image| {
                image == "scratch"
                    || image.split_once("@sha256:").is_some_and(|(_, d)| {
                        d.len() == 64 && d.chars().all(|c| c.is_ascii_hexdigit())
                    })
            });
            assert!(pinned, "{file}: `{from}` is not pinned by digest");
        }
        let last = froms.last().expect("a final stage");
        assert!(last.starts_with(final_base), "{file} ends on {last}");
    }
    let controller = std::fs::read_to_string(root.join("Dockerfile.controller")).expect("exists");
    assert!(
        controller.contains("USER 65532:65532"),
        "the controller image runs as non-root"
    );
}
