//! A real local Kubernetes control plane for tests, the node simulator and benchmarks.
//!
//! [`ControlPlane::start`] runs etcd, kube-apiserver and, by default, kube-controller-manager and
//! kube-scheduler from `testenv/bin` (built by `make testenv`) on free loopback ports, with
//! certificates and tokens generated here and `--authorization-mode=Node,RBAC`. Dropping the
//! [`ControlPlane`] stops every process and removes its temporary directory.
//!
//! ```no_run
//! # async fn demo() -> Result<(), testenv::Error> {
//! let cp = testenv::ControlPlane::start(testenv::Options::default()).await?;
//! let client = cp.client().await?;
//! let status = cp.kubectl().args(["get", "nodes"]).status();
//! # drop((client, status));
//! # Ok(())
//! # }
//! ```

mod bins;
mod cluster;
mod components;
mod control_plane;
mod error;
mod kubeconfig;
mod monitoring;
mod options;
mod pki;
mod ports;
mod process;
mod registry;
pub mod toxiproxy;
mod wait;

pub use bins::{bin_dir, kubernetes_version};
pub use cluster::run_until_signal;
pub use control_plane::ControlPlane;
pub use error::Error;
pub use monitoring::{Alertmanager, Prometheus, rules};
pub use options::Options;
pub use pki::{GUEST_FORWARD_ADDRESS, KUBERNETES_SERVICE_IP};
pub use registry::Registry;
