//! Network faults between each program and the API server: with
//! [`SandboxConfig::fault_proxies`](crate::sandbox::SandboxConfig::fault_proxies), every agent
//! and every controller the sandbox starts reaches the API server through a Toxiproxy proxy of
//! its own, named after the program (`sim-1`, `controller-2`), so that a test can slow or cut one
//! program and leave the others alone. Tests' own clients (the sandbox's `client`, observers)
//! are not proxied: they see the API server as it is.

use std::collections::BTreeMap;
use std::path::PathBuf;

use testenv::ControlPlane;
use testenv::toxiproxy::{Proxy, Toxiproxy};

use crate::Error;

/// The fault proxy's server and one proxy per program.
#[derive(Debug)]
pub struct Faults {
    proxies: BTreeMap<String, Proxy>,
    // Last: the proxies die with it.
    toxiproxy: Toxiproxy,
}

impl Faults {
    /// Starts the server in the control plane's directory (`toxiproxy.log`).
    pub async fn start(cp: &ControlPlane) -> Result<Faults, Error> {
        Ok(Faults {
            proxies: BTreeMap::new(),
            toxiproxy: Toxiproxy::start(cp.dir()).await?,
        })
    }

    /// A proxy to the API server for `program`; the kubeconfig through it.
    pub async fn add(&mut self, cp: &ControlPlane, program: &str) -> Result<PathBuf, Error> {
        let proxy = self.toxiproxy.proxy_to_apiserver(cp, program).await?;
        let kubeconfig = proxy
            .kubeconfig()
            .map(std::path::Path::to_path_buf)
            .ok_or_else(|| Error::Setup(format!("no kubeconfig through {program}'s proxy")))?;
        self.proxies.insert(program.to_owned(), proxy);
        Ok(kubeconfig)
    }

    /// The proxies' server (to freeze them all at once, say).
    pub fn toxiproxy(&self) -> &Toxiproxy {
        &self.toxiproxy
    }

    /// The proxy between `program` (`sim-1`, `controller-2`) and the API server.
    pub fn proxy(&self, program: &str) -> Option<&Proxy> {
        self.proxies.get(program)
    }
}
