use std::path::PathBuf;
use std::process::ExitStatus;
use std::time::Duration;
use std::{fmt, io};

/// Why a control plane could not be started or used.
///
/// `Debug` prints the same text as `Display`, so `start().await.unwrap()` in a test shows the
/// readable message and the log's tail.
#[derive(thiserror::Error)]
pub enum Error {
    #[error(
        "missing {}: build it with `make testenv` (or point TESTENV_BIN at a directory that has it)",
        path.display()
    )]
    MissingBinary { path: PathBuf },

    #[error("port {port} on 127.0.0.1 is already in use: {source}")]
    PortInUse { port: u16, source: io::Error },

    #[error("data dir {} is not writable: {source}", path.display())]
    DataDir { path: PathBuf, source: io::Error },

    #[error("cannot {what}: {source}")]
    Io { what: String, source: io::Error },

    #[error("cannot start {name} ({}): {source}", path.display())]
    Spawn {
        name: &'static str,
        path: PathBuf,
        source: io::Error,
    },

    #[error("{name} exited ({status}); the last lines of its log:\n{tail}")]
    Exited {
        name: &'static str,
        status: ExitStatus,
        log: PathBuf,
        tail: String,
    },

    #[error(
        "{name} was not ready after {waited:?} (last check: {last}); the last lines of its log:\n{tail}"
    )]
    NotReady {
        name: &'static str,
        waited: Duration,
        last: String,
        log: PathBuf,
        tail: String,
    },

    #[error("kubectl {args} failed: {stderr}")]
    Kubectl { args: String, stderr: String },

    #[error("cannot generate certificates: {0}")]
    Cert(#[from] rcgen::Error),

    #[error("invalid kubeconfig: {0}")]
    Kubeconfig(#[from] kube::config::KubeconfigError),

    #[error("cannot create a Kubernetes client: {0}")]
    Client(#[from] kube::Error),

    #[error("cannot find the `k8s.io/kubernetes` version in {}", path.display())]
    Version { path: PathBuf },
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl Error {
    pub(crate) fn io(what: impl Into<String>) -> impl FnOnce(io::Error) -> Error {
        let what = what.into();
        move |source| Error::Io { what, source }
    }

    /// A component lost a race for a port picked as free; starting again with new ports helps.
    pub(crate) fn is_port_race(&self) -> bool {
        match self {
            Error::Exited { tail, .. } | Error::NotReady { tail, .. } => {
                tail.contains("address already in use")
            }
            _ => false,
        }
    }
}
