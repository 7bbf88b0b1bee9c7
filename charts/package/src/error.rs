use std::path::PathBuf;

/// Why the chart could not be packaged; each message says what to do about it.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "{}: no such file: it lists the images to pin, and `make images` writes it; run \
         `make images` first (or point --images-txt / CHART_PACKAGE_IMAGES_TXT at one)",
        .0.display()
    )]
    NoImagesTxt(PathBuf),
    #[error(
        "{}: line {line} is not `name<TAB>archive<TAB>digest`: {text:?}; run `make images` \
         again to rewrite it",
        path.display()
    )]
    MalformedLine {
        path: PathBuf,
        line: usize,
        text: String,
    },
    #[error("{}: {problem}; run `make images` to build the images of this version", path.display())]
    Image { path: PathBuf, problem: String },
    #[error(
        "{}: {key} is {found}, but the workspace's version is {version}: set `version` and \
         `appVersion` in Chart.yaml to {version:?}",
        path.display()
    )]
    ChartVersion {
        path: PathBuf,
        key: &'static str,
        /// The value, or `missing`.
        found: String,
        version: String,
    },
    #[error(
        "{}: no line sets `{value}` (values.yaml changed shape? the packager sets it in place)",
        path.display()
    )]
    NoValue { path: PathBuf, value: String },
    #[error("{0}")]
    BadArgument(String),
    #[error(
        "{}: helm is not there; `make testenv` builds it into testenv/bin (or point --helm / \
         HELM at a helm 4)",
        .0.display()
    )]
    NoHelm(PathBuf),
    #[error("`helm {args}` failed: {output}")]
    Helm { args: String, output: String },
    #[error("the packaged chart renders {problem}; the packager is broken, please report it")]
    Unpinned { problem: String },
}

impl Error {
    pub fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> Error {
        let path = path.into();
        move |source| Error::Io { path, source }
    }
}
