use std::path::{Path, PathBuf};

use crate::Error;

/// Directory holding the control plane binaries: `$TESTENV_BIN`, else `testenv/bin` of this repo.
pub fn bin_dir() -> PathBuf {
    match std::env::var_os("TESTENV_BIN") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => testenv_dir().join("bin"),
    }
}

/// Path of a control plane binary, which must exist.
pub fn bin(name: &str) -> Result<PathBuf, Error> {
    let path = bin_dir().join(name);
    if path.is_file() {
        Ok(path)
    } else {
        Err(Error::MissingBinary { path })
    }
}

/// The Kubernetes release the binaries are built from, e.g. `v1.37.1`, as pinned in `testenv/go.mod`.
pub fn kubernetes_version() -> Result<String, Error> {
    let path = testenv_dir().join("go.mod");
    let text =
        std::fs::read_to_string(&path).map_err(Error::io(format!("read {}", path.display())))?;
    text.lines()
        .filter_map(|line| line.trim().strip_prefix("k8s.io/kubernetes "))
        .map(str::trim)
        .find(|version| version.starts_with('v'))
        .map(str::to_owned)
        .ok_or(Error::Version { path })
}

fn testenv_dir() -> PathBuf {
    // The harness lives in testenv/harness; the Go module and its bin/ are one level up.
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map_or_else(|| PathBuf::from("testenv"), Path::to_path_buf)
}
