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
    /// A copy of a host file, readable by all (an image archive).
    Data {
        name: String,
        from: std::path::PathBuf,
    },
}

impl SeedFile {
    /// Its path on the seed disk (it may name a folder, as images/agent.tar does).
    pub fn name(&self) -> &str {
        match self {
            SeedFile::Program { name, .. }
            | SeedFile::Private { name, .. }
            | SeedFile::Data { name, .. } => name,
        }
    }
}

/// Writes `files` into a staging folder next to `image`, then an ext4 image of it.
pub fn write_seed_disk(files: &[SeedFile], image: &Path) -> Result<(), Error> {
    let staging = image.with_extension("d");
    std::fs::create_dir_all(&staging)
        .map_err(Error::io(format!("create {}", staging.display())))?;
    let mut bytes = 0;
    for file in files {
        if let Some(parent) = staging.join(file.name()).parent() {
            std::fs::create_dir_all(parent)
                .map_err(Error::io(format!("create {}", parent.display())))?;
        }
        let (name, mode) = match file {
            SeedFile::Program { name, from } | SeedFile::Data { name, from } => {
                std::fs::copy(from, staging.join(name))
                    .map_err(Error::io(format!("copy {}", from.display())))?;
                let executable = matches!(file, SeedFile::Program { .. });
                (name, if executable { 0o755 } else { 0o644 })
            }
            SeedFile::Private { name, contents } => {
                std::fs::write(staging.join(name), contents)
                    .map_err(Error::io(format!("write {name}")))?;
                (name, 0o600)
            }
        };
        std::fs::set_permissions(staging.join(name), std::fs::Permissions::from_mode(mode))
            .map_err(Error::io(format!("chmod {name}")))?;
        bytes += std::fs::metadata(staging.join(name)).map_or(0, |m| m.len());
    }
    // Room for the files and ext4's own: the real nodes' seeds carry image archives.
    let size_mib = 128.max(bytes / (1 << 20) * 5 / 4 + 32);
    let output = Command::new(crate::find_on_path("mkfs.ext4").unwrap_or("mkfs.ext4".into()))
        .args(["-q", "-F", "-L", "nro-seed", "-d"])
        .arg(&staging)
        .arg(image)
        .arg(format!("{size_mib}M"))
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
