//! The images' inputs that are not ours: Kubernetes' pause, compiled with the host's gcc from
//! the k8s.io/kubernetes module the testenv builds from, and Debian's static busybox. Both are
//! kept in a cache outside the checkout, keyed by what they are built from, so that a fresh
//! clone builds them once and a changed source builds them again.

use crate::Error;
use crate::oci::digest;
use std::path::{Path, PathBuf};
use std::process::Command;

const KUBERNETES: &str = "k8s.io/kubernetes";

/// `$NRO_CACHE`, else `${XDG_CACHE_HOME:-$HOME/.cache}/node-reboot-operator`, as
/// testenv/hack/build.sh.
pub fn default_cache_dir() -> Option<PathBuf> {
    let env = |name| std::env::var_os(name).filter(|v| !v.is_empty());
    if let Some(dir) = env("NRO_CACHE") {
        return Some(PathBuf::from(dir));
    }
    let base = env("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| env("HOME").map(|home| Path::new(&home).join(".cache")))?;
    Some(base.join("node-reboot-operator"))
}

/// Kubernetes' pause source as the module holds it.
#[derive(Debug, Clone)]
pub struct PauseSource {
    pub kubernetes_version: String,
    /// build/pause/Makefile's `TAG`: the image's tag.
    pub tag: String,
    pub source: Vec<u8>,
    pub path: PathBuf,
}

/// Finds pause.c in the k8s.io/kubernetes module that `go_module` (testenv/) requires, through
/// `go mod download`, so that the pause image follows the testenv's Kubernetes version.
pub fn pause_source(go_module: &Path) -> Result<PauseSource, Error> {
    let json = run(
        Command::new("go")
            .args(["mod", "download", "-json", KUBERNETES])
            .current_dir(go_module)
            .env("GOWORK", "off")
            .env("GOFLAGS", "-mod=mod"),
        &format!("go mod download {KUBERNETES} in {}", go_module.display()),
    )?;
    let module: serde_json::Value = serde_json::from_slice(&json)?;
    let field = |name: &str| {
        module[name].as_str().map(str::to_owned).ok_or_else(|| {
            Error::Input(format!(
                "go mod download {KUBERNETES}: no {name:?} in {module}"
            ))
        })
    };
    let dir = PathBuf::from(field("Dir")?);
    let makefile_path = dir.join("build/pause/Makefile");
    let makefile = std::fs::read_to_string(&makefile_path).map_err(Error::io(&makefile_path))?;
    let tag = makefile_tag(&makefile)
        .ok_or_else(|| Error::Input(format!("{}: no `TAG ?=` line", makefile_path.display())))?;
    let path = dir.join("build/pause/linux/pause.c");
    let source = std::fs::read(&path).map_err(Error::io(&path))?;
    Ok(PauseSource {
        kubernetes_version: field("Version")?,
        tag,
        source,
        path,
    })
}

/// The workspace's dependency graph as resolved for `triple` (the crates an SBOM lists),
/// without changing Cargo.lock.
pub fn cargo_metadata(workspace: &Path, triple: &str) -> Result<cargo_metadata::Metadata, Error> {
    cargo_metadata::MetadataCommand::new()
        .manifest_path(workspace.join("Cargo.toml"))
        .other_options(["--locked".to_owned(), format!("--filter-platform={triple}")])
        .exec()
        .map_err(|e| Error::Command {
            what: format!(
                "cargo metadata --filter-platform={triple} in {}",
                workspace.display()
            ),
            detail: e.to_string(),
        })
}

/// `TAG ?= 3.10.2` in build/pause/Makefile.
pub fn makefile_tag(makefile: &str) -> Option<String> {
    makefile.lines().find_map(|line| {
        let (name, value) = line.split_once("?=")?;
        (name.trim() == "TAG" && !value.trim().is_empty()).then(|| value.trim().to_owned())
    })
}

/// Upstream's CFLAGS (build/pause/Makefile): static, `-Os`, warnings as errors, the version
/// define, which `pause -v` prints. Upstream's REV is `git describe` of its checkout; a module
/// has no git, so its version stands in. `-s` strips, as upstream's separate `strip` does.
pub fn pause_cflags(source: &PauseSource) -> Vec<String> {
    [
        "-Os",
        "-Wall",
        "-Werror",
        "-static",
        "-s",
        &format!("-DVERSION=v{}-{}", source.tag, source.kubernetes_version),
    ]
    .map(str::to_owned)
    .to_vec()
}

/// The pause binary, from the cache when the same source was compiled with the same flags by
/// the same gcc.
pub fn pause_binary(cache: &Path, source: &PauseSource) -> Result<Vec<u8>, Error> {
    let cflags = pause_cflags(source);
    let gcc = run(Command::new("gcc").arg("--version"), "gcc --version")?;
    let key_input = [source.source.as_slice(), cflags.join(" ").as_bytes(), &gcc].concat();
    let key = &digest(&key_input)["sha256:".len()..][..16];
    let cached = cache
        .join("pause")
        .join(format!("pause-{}-{key}", source.tag));
    if let Ok(binary) = std::fs::read(&cached) {
        return Ok(binary);
    }
    let dir = cached.parent().unwrap_or(cache);
    std::fs::create_dir_all(dir).map_err(Error::io(dir))?;
    let partial = cached.with_extension("partial");
    run(
        Command::new("gcc")
            .args(&cflags)
            .arg("-o")
            .arg(&partial)
            .arg(&source.path),
        &format!("gcc {}", source.path.display()),
    )?;
    std::fs::rename(&partial, &cached).map_err(Error::io(&cached))?;
    std::fs::read(&cached).map_err(Error::io(&cached))
}

/// Debian's busybox-static: its version and `/bin/busybox`, from the cache when that version
/// was fetched before.
pub fn busybox(cache: &Path) -> Result<(String, Vec<u8>), Error> {
    const PACKAGE: &str = "busybox-static";
    let show_it = || {
        run(
            Command::new("apt-cache").args(["show", "--no-all-versions", PACKAGE]),
            &format!("apt-cache show {PACKAGE} (run `apt-get update` if it is unknown)"),
        )
    };
    // A fresh machine has no package lists yet, an old one stale ones: refresh once and retry.
    let show = show_it().or_else(|first| {
        if refresh_package_lists() {
            show_it()
        } else {
            Err(first)
        }
    })?;
    let version = package_version(&String::from_utf8_lossy(&show))
        .ok_or_else(|| Error::Input(format!("apt-cache show {PACKAGE}: no Version")))?;
    // The epoch's `:` is legal in a path but not in every tool's idea of one.
    let dir = cache.join(PACKAGE).join(version.replace(':', "_"));
    let cached = dir.join("busybox");
    if let Ok(binary) = std::fs::read(&cached) {
        return Ok((version, binary));
    }
    let work = dir.join("partial");
    // A previous attempt may have died halfway; start clean.
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work).map_err(Error::io(&work))?;
    let download = || {
        run(
            Command::new("apt-get")
                .args(["download", &format!("{PACKAGE}={version}")])
                .current_dir(&work),
            &format!("apt-get download {PACKAGE}={version}"),
        )
    };
    download().or_else(|first| {
        if refresh_package_lists() {
            download()
        } else {
            Err(first)
        }
    })?;
    let deb = single_deb(&work)?;
    let root = work.join("root");
    run(
        Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&root),
        &format!("dpkg-deb -x {}", deb.display()),
    )?;
    let extracted = root.join("bin/busybox");
    std::fs::rename(&extracted, &cached).map_err(Error::io(&extracted))?;
    std::fs::remove_dir_all(&work).map_err(Error::io(&work))?;
    let binary = std::fs::read(&cached).map_err(Error::io(&cached))?;
    Ok((version, binary))
}

/// `apt-get update`, where this process may run it (as root); whether it succeeded.
fn refresh_package_lists() -> bool {
    Command::new("apt-get")
        .args(["update", "-q"])
        .stdout(std::process::Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}

/// The `Version:` field of one `apt-cache show` stanza.
pub fn package_version(stanza: &str) -> Option<String> {
    stanza
        .lines()
        .find_map(|line| line.strip_prefix("Version:"))
        .map(|v| v.trim().to_owned())
        .filter(|v| !v.is_empty())
}

/// apt names the file with the epoch escaped (`1%3a1.35…`): find it rather than guess.
fn single_deb(dir: &Path) -> Result<PathBuf, Error> {
    let entries = std::fs::read_dir(dir).map_err(Error::io(dir))?;
    let debs: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "deb"))
        .collect();
    match debs.as_slice() {
        [deb] => Ok(deb.clone()),
        _ => Err(Error::Input(format!(
            "expected one .deb in {}, found {debs:?}",
            dir.display()
        ))),
    }
}

/// Runs a command to completion; its stdout, or an error with its stderr.
fn run(command: &mut Command, what: &str) -> Result<Vec<u8>, Error> {
    let output = command.output().map_err(|e| Error::Command {
        what: what.to_owned(),
        detail: format!("cannot start {:?}: {e}", command.get_program()),
    })?;
    if output.status.success() {
        Ok(output.stdout)
    } else {
        Err(Error::Command {
            what: what.to_owned(),
            detail: format!(
                "{}: {}",
                output.status,
                String::from_utf8_lossy(&output.stderr).trim()
            ),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pause_tag_comes_from_the_makefile() {
        let makefile =
            "REGISTRY ?= staging-k8s.gcr.io\nIMAGE = $(REGISTRY)/pause\n\nTAG ?= 3.10.2\n";
        assert_eq!(makefile_tag(makefile).as_deref(), Some("3.10.2"));
        assert_eq!(makefile_tag("TAGS ?= x\n"), None);
    }

    #[test]
    fn the_pause_version_define_names_the_tag_and_the_module() {
        let source = PauseSource {
            kubernetes_version: "v1.37.1".to_owned(),
            tag: "3.10.2".to_owned(),
            source: vec![],
            path: PathBuf::from("pause.c"),
        };
        let cflags = pause_cflags(&source);
        assert!(cflags.contains(&"-static".to_owned()) && cflags.contains(&"-Os".to_owned()));
        assert!(cflags.contains(&"-DVERSION=v3.10.2-v1.37.1".to_owned()));
    }

    #[test]
    fn the_package_version_keeps_its_epoch() {
        let stanza =
            "Package: busybox-static\nVersion: 1:1.35.0-4+deb12u1+b1\nArchitecture: amd64\n";
        assert_eq!(
            package_version(stanza).as_deref(),
            Some("1:1.35.0-4+deb12u1+b1")
        );
    }
}
