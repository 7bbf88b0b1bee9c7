//! Simulated nodes on a real API server. Each simulated node has a Node object with a Ready
//! condition and a boot id, a heartbeat Lease, and one real `reboot-agent` process whose
//! reboot command asks the simulator for a reboot: the node goes NotReady for a while, comes
//! back with a new boot id (in its boot-id file and in `status.nodeInfo.bootID`, as a kubelet
//! reports it) and its agent is restarted. A kubelet stand-in marks pods bound to simulated
//! nodes Running and Ready and finishes the deletion of pods being deleted, so that drains and
//! PodDisruptionBudgets behave as in a cluster.

pub mod binaries;
pub mod budget_watch;
pub mod faults;
pub mod fleet;
pub mod identities;
pub mod kubelet;
pub mod node;
pub mod observe;
pub mod operator;
pub mod reboot_requests;
pub mod sandbox;

pub use binaries::{binary_in, workspace_binary};
pub use fleet::{Fleet, FleetConfig};
pub use operator::ControllerProcess;

/// Errors of the simulator.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    Setup(String),
    #[error("API request failed: {0}")]
    Api(#[from] kube::Error),
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    ControlPlane(#[from] testenv::Error),
}

impl Error {
    pub fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
        let what = what.into();
        move |source| Error::Io { what, source }
    }
}
