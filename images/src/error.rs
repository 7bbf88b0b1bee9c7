use std::path::PathBuf;

/// Why an image could not be built; each message says what to do about it.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    /// Writing a tar into memory fails only on a malformed entry.
    #[error("tar entry {path}: {source}")]
    Tar {
        path: String,
        source: std::io::Error,
    },
    #[error("bad path {0:?} in an image: relative, without `.` or `..`, not empty")]
    BadPath(String),
    #[error("{0:?} is in the layer twice")]
    Duplicate(String),
    #[error("image reference {0:?} has no tag (`<repository>:<tag>`)")]
    NoTag(String),
    #[error("no OCI architecture for the host's {0}")]
    Architecture(String),
    #[error("{what}: {detail}")]
    Command { what: String, detail: String },
    #[error("{0}")]
    Input(String),
    #[error("JSON: {0}")]
    Json(#[from] serde_json::Error),
}

impl Error {
    pub fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> Error {
        let path = path.into();
        move |source| Error::Io { path, source }
    }
}
