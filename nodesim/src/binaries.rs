//! Finds the workspace's own binaries (`reboot-agent`, `reboot-controller`) next to the
//! running executable, as cargo lays them out in `target/<profile>/`, or in a directory given.

use crate::Error;
use std::path::{Path, PathBuf};

/// `target/<profile>/<name>`; override with the env var `<NAME>_BIN` (dashes as underscores).
pub fn workspace_binary(name: &str) -> Result<PathBuf, Error> {
    let exe = std::env::current_exe().map_err(Error::io("cannot find the running executable"))?;
    // Binaries run from target/<profile>/, tests from target/<profile>/deps/.
    let dirs = exe.ancestors().skip(1).take(2).collect::<Vec<_>>();
    binary_in(
        &dirs,
        name,
        "build it with `cargo build --workspace --bins`",
    )
}

/// `<name>` in the first of `dirs` that has it, or where the env var `<NAME>_BIN` points; the
/// error names where it looked, the variable, and `how_to_build`.
pub fn binary_in(dirs: &[&Path], name: &str, how_to_build: &str) -> Result<PathBuf, Error> {
    let var = format!("{}_BIN", name.to_uppercase().replace('-', "_"));
    if let Ok(path) = std::env::var(&var) {
        let path = PathBuf::from(path);
        if !path.is_file() {
            return Err(Error::Setup(format!(
                "{var} points to {}, which is not a file; unset {var} or point it to {name}",
                path.display()
            )));
        }
        return Ok(path);
    }
    let candidates = dirs.iter().map(|dir| dir.join(name)).collect::<Vec<_>>();
    candidates
        .iter()
        .find(|p| p.is_file())
        .cloned()
        .ok_or_else(|| {
            Error::Setup(format!(
                "{name} is not built (looked in {}); {how_to_build} or set {var}",
                candidates
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        })
}
