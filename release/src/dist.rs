//! The release's folder: what `make release` copies and makes into it, and its index (the
//! krew manifest and SHA256SUMS), written from the folder's own files.

use crate::Error;
use crate::archive::plugin_archive;
use crate::executable;
use crate::krew::{self, Archive};
use crate::platform::{self, Platform};
use crate::sums::{sha256_hex, sha256sums};
use chart_package::images_txt::{self, IMAGES};
use std::path::{Path, PathBuf};

/// The krew manifest's file name.
pub const MANIFEST: &str = "reboot.yaml";
/// The checksums' file name.
pub const SHA256SUMS: &str = "SHA256SUMS";
/// The architectures of the images, as `make images` names their SBOMs.
const IMAGE_ARCHITECTURES: [&str; 2] = ["amd64", "arm64"];

/// Where a release's parts are.
#[derive(Debug, Clone)]
pub struct Inputs {
    /// `make images`' folder: `<image>.oci.tar`, `<image>.<arch>.spdx.json`, images.txt.
    pub images_dir: PathBuf,
    /// `make chart`'s package.
    pub chart: PathBuf,
    /// `make static`'s target directory: `<triple>/release/kubectl-reboot[.exe]` in it.
    pub static_dir: PathBuf,
    /// The plugin's license, packed beside it.
    pub license: PathBuf,
    /// The registry and namespace the images are named under (images.txt's names).
    pub registry: String,
    pub version: String,
    /// The GitHub release's download URL, without `/v<version>`.
    pub download_url: String,
    /// The time of every file in the plugin's archives, in seconds since 1970.
    pub source_date_epoch: u64,
}

fn read(path: &Path, hint: &'static str) -> Result<Vec<u8>, Error> {
    std::fs::read(path).map_err(|source| match source.kind() {
        std::io::ErrorKind::NotFound => Error::Missing {
            path: path.to_owned(),
            hint,
        },
        _ => Error::Io {
            path: path.to_owned(),
            source,
        },
    })
}

fn write(path: &Path, bytes: &[u8]) -> Result<(), Error> {
    std::fs::write(path, bytes).map_err(Error::io(path))
}

/// Writes the release into `out_dir`, replacing what was there: built beside it first, so
/// that a failure leaves no folder that looks like a release.
pub fn assemble(inputs: &Inputs, out_dir: &Path) -> Result<(), Error> {
    let mut partial = out_dir.as_os_str().to_owned();
    partial.push(".partial");
    let partial = PathBuf::from(partial);
    remove_dir(&partial)?;
    std::fs::create_dir_all(&partial).map_err(Error::io(&partial))?;
    images(inputs, &partial)?;
    let chart_name = inputs.chart.file_name().ok_or_else(|| Error::Missing {
        path: inputs.chart.clone(),
        hint: "name the chart's package file",
    })?;
    write(
        &partial.join(chart_name),
        &read(&inputs.chart, "run `make chart`")?,
    )?;
    plugins(inputs, &partial)?;
    index(&partial, &inputs.version, &inputs.download_url)?;
    remove_dir(out_dir)?;
    std::fs::rename(&partial, out_dir).map_err(Error::io(out_dir))
}

fn remove_dir(dir: &Path) -> Result<(), Error> {
    match std::fs::remove_dir_all(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(Error::Io {
            path: dir.to_owned(),
            source: e,
        }),
        _ => Ok(()),
    }
}

/// Our two images' archives and SBOMs, and images.txt with their lines alone, each archive
/// named by its file name in the folder.
fn images(inputs: &Inputs, out_dir: &Path) -> Result<(), Error> {
    const HINT: &str = "run `make images`";
    let images_txt = inputs.images_dir.join("images.txt");
    let text = String::from_utf8_lossy(&read(&images_txt, HINT)?).into_owned();
    let pinned = images_txt::pinned(&text, &images_txt, &inputs.registry, &inputs.version)?;
    let mut summary = String::new();
    for image in &pinned {
        let repository = IMAGES
            .iter()
            .find(|(key, _)| *key == image.key)
            .map_or(image.key, |(_, repository)| repository);
        let archive = format!("{repository}.oci.tar");
        let mut files = vec![archive.clone()];
        files.extend(IMAGE_ARCHITECTURES.map(|arch| format!("{repository}.{arch}.spdx.json")));
        for file in files {
            write(
                &out_dir.join(&file),
                &read(&inputs.images_dir.join(&file), HINT)?,
            )?;
        }
        summary.push_str(&format!("{}\t{archive}\t{}\n", image.name, image.digest));
    }
    write(&out_dir.join("images.txt"), summary.as_bytes())
}

/// An archive of the plugin for each platform this machine builds it for.
fn plugins(inputs: &Inputs, out_dir: &Path) -> Result<(), Error> {
    let license = read(&inputs.license, "the workspace's LICENSE")?;
    for platform in platform::built_here() {
        let path = inputs
            .static_dir
            .join(platform.triple)
            .join("release")
            .join(platform.binary());
        let binary = read(
            &path,
            "run `make static`, which builds the plugin for every platform",
        )?;
        if executable::platform(&binary) != Some((platform.os, platform.arch)) {
            return Err(Error::WrongBinary {
                path,
                expected: format!("{}/{}", platform.os, platform.arch),
                found: executable::describe(&binary),
            });
        }
        let (name, bytes) = plugin_archive(
            platform,
            &inputs.version,
            &binary,
            &license,
            inputs.source_date_epoch,
        )?;
        write(&out_dir.join(name), &bytes)?;
    }
    Ok(())
}

/// Writes `dir`'s krew manifest, from the plugin archives in it, and then SHA256SUMS, of
/// every other file in it. Run again after adding an archive (macOS', by the workflow).
pub fn index(dir: &Path, version: &str, download_url: &str) -> Result<(), Error> {
    let names = file_names(dir)?;
    let mut archives = Vec::new();
    for name in names.iter().filter(|n| n.starts_with("kubectl-reboot_")) {
        let path = dir.join(name);
        let platform =
            Platform::of_archive(name, version).ok_or_else(|| Error::UnknownArchive {
                path: path.clone(),
                version: version.to_owned(),
            })?;
        let sha256 = sha256_hex(&read(&path, "a file that was listed")?);
        archives.push(Archive {
            platform,
            name: name.clone(),
            sha256,
        });
    }
    if archives.is_empty() {
        return Err(Error::NoArchives {
            dir: dir.to_owned(),
        });
    }
    archives.sort_by_key(|archive| archive.platform);
    write(
        &dir.join(MANIFEST),
        krew::manifest(version, download_url, &archives).as_bytes(),
    )?;
    let mut sums = Vec::new();
    for name in file_names(dir)?.into_iter().filter(|n| n != SHA256SUMS) {
        let sha256 = sha256_hex(&read(&dir.join(&name), "a file that was listed")?);
        sums.push((name, sha256));
    }
    let text = sha256sums(sums.iter().map(|(n, s)| (n.as_str(), s.as_str())));
    write(&dir.join(SHA256SUMS), text.as_bytes())
}

/// The names of the files in `dir`, sorted; anything but a file is an error.
fn file_names(dir: &Path) -> Result<Vec<String>, Error> {
    let mut names = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(Error::io(dir))? {
        let entry = entry.map_err(Error::io(dir))?;
        let path = entry.path();
        let kind = entry.file_type().map_err(Error::io(&path))?;
        match entry.file_name().into_string() {
            Ok(name) if kind.is_file() => names.push(name),
            _ => return Err(Error::NotAFile { path }),
        }
    }
    names.sort();
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn platform(os: &str, arch: &str) -> &'static Platform {
        Platform::find(os, arch).unwrap()
    }

    #[test]
    fn the_index_takes_in_an_archive_added_later() {
        let dir = tempfile::tempdir().unwrap();
        let linux = platform("linux", "amd64");
        let darwin = platform("darwin", "arm64");
        let (name, bytes) = plugin_archive(linux, "1.0.0", b"\x7fELF", b"license", 0).unwrap();
        std::fs::write(dir.path().join(&name), &bytes).unwrap();
        std::fs::write(dir.path().join("chart.tgz"), b"chart").unwrap();
        index(dir.path(), "1.0.0", "https://example.com").unwrap();
        let manifest = std::fs::read_to_string(dir.path().join(MANIFEST)).unwrap();
        assert!(manifest.contains(&format!("sha256: {}\n", sha256_hex(&bytes))));
        assert!(!manifest.contains("darwin"));

        let (mac_name, mac) = plugin_archive(darwin, "1.0.0", b"mach-o", b"license", 0).unwrap();
        std::fs::write(dir.path().join(&mac_name), &mac).unwrap();
        index(dir.path(), "1.0.0", "https://example.com").unwrap();
        let manifest = std::fs::read_to_string(dir.path().join(MANIFEST)).unwrap();
        let darwin_at = manifest.find("os: darwin").unwrap();
        assert!(
            darwin_at < manifest.find("os: linux").unwrap(),
            "{manifest}"
        );
        assert!(manifest.contains(&format!(
            "uri: https://example.com/v1.0.0/{mac_name}\n    sha256: {}\n",
            sha256_hex(&mac)
        )));
        let sums = std::fs::read_to_string(dir.path().join(SHA256SUMS)).unwrap();
        let listed: Vec<_> = sums
            .lines()
            .map(|l| l.split_once("  ").unwrap().1)
            .collect();
        assert_eq!(listed, ["chart.tgz", &mac_name, &name, MANIFEST]);
        assert!(sums.contains(&format!(
            "{}  {MANIFEST}\n",
            sha256_hex(manifest.as_bytes())
        )));
    }

    #[test]
    fn the_index_refuses_a_stranger_archive_and_a_folder_without_any() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("chart.tgz"), b"chart").unwrap();
        let err = index(dir.path(), "1.0.0", "https://example.com").unwrap_err();
        assert!(matches!(err, Error::NoArchives { .. }), "{err}");
        std::fs::write(
            dir.path().join("kubectl-reboot_0.9.0_linux_amd64.tar.gz"),
            b"",
        )
        .unwrap();
        let err = index(dir.path(), "1.0.0", "https://example.com").unwrap_err();
        assert!(
            err.to_string()
                .contains("kubectl-reboot_0.9.0_linux_amd64.tar.gz: not a plugin archive of 1.0.0"),
            "{err}"
        );
    }
}
