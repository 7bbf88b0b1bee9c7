//! A VM's seed disk: what changes from run to run (the binaries under test, the credentials,
//! the environment), kept out of the cached base image so that a code change never rebuilds
//! it. The guest mounts it read-only at `/opt/node-reboot` (vm/image/rootfs/etc/fstab).

use crate::Error;
use std::{os::unix::fs::PermissionsExt, path::Path, process::Command};

/// One file of the seed disk.
#[derive(Debug, Clone)]
pub enum SeedFile {
    /// A copy of a host file, executable.
    Program {
        name: String,
        from: std::path::PathBuf,
    },
    /// A text file readable by root only (credentials, environment).
    Private { name: String, contents: String },
}

/// Writes `files` into a staging folder next to `image`, then an ext4 image of it.
pub fn write_seed_disk(files: &[SeedFile], image: &Path) -> Result<(), Error> {
    let staging = image.with_extension("d");
    std::fs::create_dir_all(&staging)
        .map_err(Error::io(format!("create {}", staging.display())))?;
    for file in files {
        let (name, mode) = match file {
            SeedFile::Program { name, from } => {
                std::fs::copy(from, staging.join(name))
                    .map_err(Error::io(format!("copy {}", from.display())))?;
                (name, 0o755)
            }
            SeedFile::Private { name, contents } => {
                std::fs::write(staging.join(name), contents)
                    .map_err(Error::io(format!("write {name}")))?;
                (name, 0o600)
            }
        };
        std::fs::set_permissions(staging.join(name), std::fs::Permissions::from_mode(mode))
            .map_err(Error::io(format!("chmod {name}")))?;
    }
    let output = Command::new(crate::find_on_path("mkfs.ext4").unwrap_or("mkfs.ext4".into()))
        .args(["-q", "-F", "-L", "nro-seed", "-d"])
        .arg(&staging)
        .arg(image)
        .arg("128M")
        .output()
        .map_err(Error::io("run mkfs.ext4"))?;
    if !output.status.success() {
        return Err(Error::Setup(format!(
            "mkfs.ext4 -d {} failed: {}",
            staging.display(),
            String::from_utf8_lossy(&output.stderr).trim()
        )));
    }
    Ok(())
}

/// An environment file for systemd's `EnvironmentFile=`: one `KEY=value` a line.
pub fn environment_file(pairs: &[(&str, &str)]) -> String {
    pairs.iter().map(|(k, v)| format!("{k}={v}\n")).collect()
}
