//! A real OCI registry: CNCF Distribution's `registry` (`testenv/bin/registry`, built by
//! `make testenv`), the reference implementation of the OCI distribution API that ghcr.io,
//! Harbor and Docker Hub speak, on a free loopback port, over TLS with a certificate of a
//! testenv CA, behind htpasswd (bcrypt) authentication, its storage in a temporary directory.
//!
//! ```no_run
//! # async fn demo() -> Result<(), testenv::Error> {
//! let registry = testenv::Registry::start().await?;
//! // oras login --ca-file <registry.ca_file()> -u <username> -p <password> <registry.host()>
//! # drop(registry);
//! # Ok(())
//! # }
//! ```
//!
//! Dropping the [`Registry`] stops the process and removes its directory (its storage too).

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tempfile::TempDir;
use tokio::net::TcpStream;

use crate::pki::{self, GUEST_FORWARD_ADDRESS};
use crate::process::Proc;
use crate::{ControlPlane, Error, bins, ports, wait};

const READY_TIMEOUT: Duration = Duration::from_secs(30);
const STOP_GRACE: Duration = Duration::from_secs(5);
/// bcrypt's cost for the htpasswd entry: the least the registry accepts quickly; the password
/// is random and lives as long as the test.
const BCRYPT_COST: u32 = 6;
const USERNAME: &str = "testenv";

/// A running `registry` on `127.0.0.1:<port>`; killed on drop.
#[derive(Debug)]
pub struct Registry {
    proc: Proc,
    port: u16,
    password: String,
    ca_file: PathBuf,
    dir: TempDir,
}

impl Registry {
    /// Starts a registry whose certificate a new testenv CA signs ([`Self::ca_file`]).
    pub async fn start() -> Result<Registry, Error> {
        let (ca_pem, ca_key) = pki::new_ca()?;
        let (cert, key) = pki::server_certificate(&ca_key, &Self::names())?;
        Self::start_signed(&ca_pem, &cert, &key).await
    }

    /// Starts a registry whose certificate the control plane's CA signs, so that whatever
    /// trusts the cluster's CA (the real-node tier's containerd) trusts the registry too.
    pub async fn start_for(cp: &ControlPlane) -> Result<Registry, Error> {
        let (cert, key) = cp.server_certificate(&Self::names())?;
        Self::start_signed(cp.ca_pem(), &cert, &key).await
    }

    /// The names its certificate holds: loopback for the host, the guests' forward for the VM
    /// tiers.
    fn names() -> [&'static str; 3] {
        ["127.0.0.1", "localhost", GUEST_FORWARD_ADDRESS]
    }

    async fn start_signed(ca_pem: &str, cert: &str, key: &str) -> Result<Registry, Error> {
        let bin = bins::bin("registry")?;
        let dir =
            TempDir::with_prefix("testenv-registry-").map_err(Error::io("create a temp dir"))?;
        let password = pki::random_token()?;
        let files = Files::write(dir.path(), ca_pem, cert, key, &password)?;
        let port = ports::pick()?;
        std::fs::write(&files.config, config(&files, port, &pki::random_token()?))
            .map_err(Error::io(format!("write {}", files.config.display())))?;
        let args = vec!["serve".to_owned(), files.config.display().to_string()];
        let mut proc = Proc::spawn("registry", bin, args, dir.path())?;
        wait::until_ready(&mut proc, READY_TIMEOUT, async || listening(port).await).await?;
        Ok(Registry {
            proc,
            port,
            password,
            ca_file: files.ca,
            dir,
        })
    }

    /// `127.0.0.1:<port>`: the registry part of an image reference.
    pub fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn username(&self) -> &str {
        USERNAME
    }

    pub fn password(&self) -> &str {
        &self.password
    }

    /// The PEM of the CA that signed its certificate (`--ca-file` of oras and helm).
    pub fn ca_file(&self) -> &Path {
        &self.ca_file
    }

    /// Its directory: configuration, certificate, htpasswd, storage and `registry.log`.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The last lines of its log, for a test's failure message.
    pub fn log_tail(&self) -> String {
        self.proc.log_tail()
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        self.proc.stop(STOP_GRACE);
    }
}

/// The files the registry is started with.
struct Files {
    config: PathBuf,
    ca: PathBuf,
    cert: PathBuf,
    key: PathBuf,
    htpasswd: PathBuf,
    storage: PathBuf,
}

impl Files {
    fn write(dir: &Path, ca: &str, cert: &str, key: &str, password: &str) -> Result<Files, Error> {
        let files = Files {
            config: dir.join("config.yml"),
            ca: dir.join("ca.crt"),
            cert: dir.join("registry.crt"),
            key: dir.join("registry.key"),
            htpasswd: dir.join("htpasswd"),
            storage: dir.join("storage"),
        };
        let hash = bcrypt::hash(password, BCRYPT_COST)
            .map_err(|e| Error::io("hash the registry's password")(std::io::Error::other(e)))?;
        for (path, text) in [
            (&files.ca, ca.to_owned()),
            (&files.cert, cert.to_owned()),
            (&files.key, key.to_owned()),
            (&files.htpasswd, format!("{USERNAME}:{hash}\n")),
        ] {
            std::fs::write(path, text).map_err(Error::io(format!("write {}", path.display())))?;
        }
        Ok(files)
    }
}

/// Distribution's configuration: TLS, htpasswd, the filesystem driver, deletes allowed (so a
/// test can remove a tag), no access log.
fn config(files: &Files, port: u16, secret: &str) -> String {
    format!(
        "version: 0.1\n\
         log:\n  level: info\n  accesslog:\n    disabled: true\n\
         storage:\n  filesystem:\n    rootdirectory: {storage}\n  delete:\n    enabled: true\n\
         http:\n  addr: 127.0.0.1:{port}\n  secret: {secret}\n  \
         tls:\n    certificate: {cert}\n    key: {key}\n\
         auth:\n  htpasswd:\n    realm: testenv-registry\n    path: {htpasswd}\n",
        storage = files.storage.display(),
        cert = files.cert.display(),
        key = files.key.display(),
        htpasswd = files.htpasswd.display(),
    )
}

async fn listening(port: u16) -> Result<(), String> {
    TcpStream::connect((Ipv4Addr::LOCALHOST, port))
        .await
        .map(drop)
        .map_err(|e| format!("connect to 127.0.0.1:{port}: {e}"))
}
