use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: missing: {hint}", path.display())]
    Missing { path: PathBuf, hint: &'static str },
    #[error("{}: is {found}, not a {expected} program; rebuild it with `make static`", path.display())]
    WrongBinary {
        path: PathBuf,
        expected: String,
        found: String,
    },
    #[error(
        "{}: not a plugin archive of {version} (kubectl-reboot_{version}_<os>_<arch>.tar.gz, or .zip for windows, of linux, windows or darwin on amd64 or arm64); remove it or rename it",
        path.display()
    )]
    UnknownArchive { path: PathBuf, version: String },
    #[error("{}: a release's folder holds files only; remove it", path.display())]
    NotAFile { path: PathBuf },
    #[error("{}: holds no plugin archive; run `make release` first", dir.display())]
    NoArchives { dir: PathBuf },
    #[error("writing the zip archive: {0}")]
    Zip(#[from] zip::result::ZipError),
    #[error(transparent)]
    ImagesTxt(#[from] chart_package::Error),
}

impl Error {
    pub(crate) fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> Error {
        let path = path.into();
        move |source| Error::Io { path, source }
    }
}
