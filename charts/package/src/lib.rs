//! `make chart`: the Helm chart packaged for a release, `target/chart/<name>-<version>.tgz`.
//! Its version and appVersion are the workspace's (Chart.yaml must already say so), and its
//! values.yaml pins reboot-controller and reboot-agent by the digests `make images` wrote to
//! images.txt, under the registry they were named for. The checked-in chart is not changed:
//! the packager edits a copy, has helm package it with every file's time fixed (the same
//! inputs give the same archive), lint it and render it, and keeps it only when every image
//! it renders is pinned by digest.

pub mod chart_yaml;
pub mod crd;
mod error;
pub mod helm;
pub mod images_txt;
pub mod package;
pub mod values;

pub use error::Error;

/// The target directory the running program of the workspace was built into: the folder
/// above its profile's (`target/<profile>/<program>`), where `make images` and `make chart`
/// leave their outputs for the programs after them.
pub fn own_target_dir() -> std::io::Result<std::path::PathBuf> {
    let exe = std::env::current_exe()?;
    exe.ancestors()
        .nth(2)
        .map(std::path::Path::to_path_buf)
        .ok_or_else(|| {
            std::io::Error::other(format!("{} is not in <target>/<profile>/", exe.display()))
        })
}
