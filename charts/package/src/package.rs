//! The chart packaged for a release: a copy of the checked-in chart whose values.yaml pins the
//! images of `make images` by digest, packaged by helm, linted and rendered before it is kept.

use crate::helm::Helm;
use crate::images_txt::{self, Pinned};
use crate::{Error, chart_yaml, values};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// What to package, and from what.
#[derive(Debug, Clone)]
pub struct Request {
    /// The checked-in chart.
    pub chart_dir: PathBuf,
    /// `make images`' list of images.
    pub images_txt: PathBuf,
    /// The registry the chart's `image.registry` names, as `make images` named the images.
    pub registry: String,
    /// The workspace's version: the chart's version and appVersion, the images' tag.
    pub version: String,
    /// Where `<name>-<version>.tgz` goes.
    pub out_dir: PathBuf,
    /// The time of every file in the archive, in seconds since 1970 (SOURCE_DATE_EPOCH).
    pub source_date_epoch: u64,
}

/// The package written.
#[derive(Debug, Clone)]
pub struct Packaged {
    pub archive: PathBuf,
    /// `sha256:<hex>` of the archive.
    pub sha256: String,
    pub name: String,
    pub version: String,
    pub images: Vec<Pinned>,
}

fn read(path: &Path) -> Result<String, Error> {
    std::fs::read_to_string(path).map_err(Error::io(path))
}

/// Chart.yaml's name, after checking that its version and appVersion are the workspace's.
fn checked_chart_yaml(chart_dir: &Path, version: &str) -> Result<String, Error> {
    let path = chart_dir.join("Chart.yaml");
    let text = read(&path)?;
    for key in ["version", "appVersion"] {
        let found = chart_yaml::field(&text, key);
        if found.as_deref() != Some(version) {
            return Err(Error::ChartVersion {
                path,
                key,
                found: found.unwrap_or_else(|| "missing".to_owned()),
                version: version.to_owned(),
            });
        }
    }
    chart_yaml::field(&text, "name")
        .ok_or_else(|| Error::BadArgument(format!("{}: no `name`", path.display())))
}

/// Our two images from images.txt.
fn pinned_images(request: &Request) -> Result<Vec<Pinned>, Error> {
    let path = &request.images_txt;
    let text = match std::fs::read_to_string(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(Error::NoImagesTxt(path.clone()));
        }
        other => other.map_err(Error::io(path))?,
    };
    images_txt::pinned(&text, path, &request.registry, &request.version)
}

/// `from` copied into `to`, each file with the time `mtime`: helm stamps the archive's entries
/// with their files' times, so a copy made now would make every package differ.
fn copy_tree(from: &Path, to: &Path, mtime: SystemTime) -> Result<(), Error> {
    std::fs::create_dir_all(to).map_err(Error::io(to))?;
    let mut entries = std::fs::read_dir(from)
        .map_err(Error::io(from))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(Error::io(from))?;
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let (source, target) = (entry.path(), to.join(entry.file_name()));
        if source.is_dir() {
            copy_tree(&source, &target, mtime)?;
        } else {
            std::fs::copy(&source, &target).map_err(Error::io(&source))?;
            stamp(&target, mtime)?;
        }
    }
    Ok(())
}

fn stamp(path: &Path, mtime: SystemTime) -> Result<(), Error> {
    std::fs::File::options()
        .write(true)
        .open(path)
        .and_then(|f| f.set_modified(mtime))
        .map_err(Error::io(path))
}

/// What the packaged chart must render: our images by digest, and no other of ours.
fn check_rendered(helm: &Helm, archive: &Path, images: &[Pinned]) -> Result<(), Error> {
    let rendered = helm.rendered_images(archive)?;
    for image in images {
        if !rendered.contains(&image.reference()) {
            return Err(Error::Unpinned {
                problem: format!("no {} among its images {rendered:?}", image.reference()),
            });
        }
    }
    if let Some(tagged) = rendered.iter().find(|r| !r.contains("@sha256:")) {
        return Err(Error::Unpinned {
            problem: format!("{tagged}, which is not pinned by digest"),
        });
    }
    Ok(())
}

fn sha256(path: &Path) -> Result<String, Error> {
    let bytes = std::fs::read(path).map_err(Error::io(path))?;
    let hex = Sha256::digest(&bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<String>();
    Ok(format!("sha256:{hex}"))
}

/// Packages the chart as the request says; the archive appears only once helm has linted it
/// and it renders every image pinned.
pub fn package(helm: &Helm, request: &Request) -> Result<Packaged, Error> {
    if !values::plain(&request.registry) {
        return Err(Error::BadArgument(format!(
            "--registry {:?} is not a registry: no spaces, quotes, `#` or backslashes",
            request.registry
        )));
    }
    let name = checked_chart_yaml(&request.chart_dir, &request.version)?;
    let images = pinned_images(request)?;
    let out = &request.out_dir;
    std::fs::create_dir_all(out).map_err(Error::io(out))?;
    // Beside the result, so that the finished archive is renamed into place, never half-written.
    let work = tempfile::Builder::new()
        .prefix(".chart-package-")
        .tempdir_in(out)
        .map_err(Error::io(out))?;
    let chart = work.path().join(&name);
    let mtime = SystemTime::UNIX_EPOCH + Duration::from_secs(request.source_date_epoch);
    copy_tree(&request.chart_dir, &chart, mtime)?;

    let values_path = chart.join("values.yaml");
    let mut settings = vec![("image.registry".to_owned(), request.registry.clone())];
    settings.extend(
        images
            .iter()
            .map(|i| (format!("{}.image.digest", i.key), i.digest.clone())),
    );
    let pinned = values::set(
        &read(&values_path)?,
        &request.chart_dir.join("values.yaml"),
        &settings,
    )?;
    std::fs::write(&values_path, pinned).map_err(Error::io(&values_path))?;
    stamp(&values_path, mtime)?;

    let epoch = request.source_date_epoch.to_string();
    helm.run(
        &[
            "package".as_ref(),
            chart.as_os_str(),
            "--destination".as_ref(),
            work.path().as_os_str(),
        ],
        &[("SOURCE_DATE_EPOCH", &epoch)],
    )?;
    let file = format!("{name}-{}.tgz", request.version);
    let built = work.path().join(&file);
    helm.run(
        &["lint".as_ref(), "--strict".as_ref(), built.as_os_str()],
        &[],
    )?;
    check_rendered(helm, &built, &images)?;
    let archive = out.join(&file);
    std::fs::rename(&built, &archive).map_err(Error::io(&archive))?;
    Ok(Packaged {
        sha256: sha256(&archive)?,
        archive,
        name,
        version: request.version.clone(),
        images,
    })
}
