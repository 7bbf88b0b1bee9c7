use std::path::{Path, PathBuf};

use crate::{Error, bins};

/// What to start.
#[derive(Debug, Clone)]
pub struct Options {
    /// Run kube-controller-manager (ServiceAccounts, ReplicaSets, PDB status, node lifecycle, GC).
    pub controller_manager: bool,
    /// Run kube-scheduler, so pods get bound to nodes.
    pub scheduler: bool,
    /// Port of the API server on 127.0.0.1; a free one when `None` (or 0).
    pub apiserver_port: Option<u16>,
    /// Where the control plane's temporary directory is created; the system's temp dir when `None`.
    pub data_dir: Option<PathBuf>,
    /// Appended to kube-apiserver's command line (later flags override earlier ones).
    pub extra_apiserver_args: Vec<String>,
    /// Appended to etcd's command line (say a `--quota-backend-bytes` above the default 2 GiB,
    /// which tens of thousands of large Node objects and their history outgrow).
    pub extra_etcd_args: Vec<String>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            controller_manager: true,
            scheduler: true,
            apiserver_port: None,
            data_dir: None,
            extra_apiserver_args: Vec::new(),
            extra_etcd_args: Vec::new(),
        }
    }
}

impl Options {
    pub(crate) fn fixed_apiserver_port(&self) -> Option<u16> {
        self.apiserver_port.filter(|&port| port != 0)
    }
}

/// Every binary `start` needs, looked up before anything runs.
#[derive(Debug)]
pub(crate) struct Binaries {
    pub etcd: PathBuf,
    pub apiserver: PathBuf,
    pub controller_manager: Option<PathBuf>,
    pub scheduler: Option<PathBuf>,
}

impl Binaries {
    pub fn find(opts: &Options) -> Result<Binaries, Error> {
        Ok(Binaries {
            etcd: bins::bin("etcd")?,
            apiserver: bins::bin("kube-apiserver")?,
            controller_manager: opts
                .controller_manager
                .then(|| bins::bin("kube-controller-manager"))
                .transpose()?,
            scheduler: opts
                .scheduler
                .then(|| bins::bin("kube-scheduler"))
                .transpose()?,
        })
    }
}

/// The absolute directory to create temporary directories in; made if missing.
pub(crate) fn prepare_data_dir(dir: Option<&Path>) -> Result<PathBuf, Error> {
    let Some(dir) = dir else {
        return Ok(std::env::temp_dir());
    };
    let data_dir_error = |source| Error::DataDir {
        path: dir.to_path_buf(),
        source,
    };
    let dir = std::path::absolute(dir).map_err(data_dir_error)?;
    std::fs::create_dir_all(&dir).map_err(data_dir_error)?;
    Ok(dir)
}
