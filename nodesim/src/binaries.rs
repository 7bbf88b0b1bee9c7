//! Finds the workspace's own binaries (`reboot-agent`, `reboot-controller`) next to the
//! running executable, as cargo lays them out in `target/<profile>/`.

use crate::Error;
use std::path::PathBuf;

/// `target/<profile>/<name>`; override with the env var `<NAME>_BIN` (dashes as underscores).
pub fn workspace_binary(name: &str) -> Result<PathBuf, Error> {
    let var = format!("{}_BIN", name.to_uppercase().replace('-', "_"));
    if let Ok(path) = std::env::var(&var) {
        return Ok(PathBuf::from(path));
    }
    let exe = std::env::current_exe().map_err(Error::io("cannot find the running executable"))?;
    // Binaries run from target/<profile>/, tests from target/<profile>/deps/.
    let candidates = exe
        .ancestors()
        .skip(1)
        .take(2)
        .map(|dir| dir.join(name))
        .collect::<Vec<_>>();
    candidates.iter().find(|p| p.is_file()).cloned().ok_or_else(|| {
        Error::Setup(format!(
            "{name} is not built (looked in {}); build it with `cargo build --workspace --bins` \
             or set {var}",
            candidates
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ))
    })
}
