//! Why the agent stops.

use crate::{rebooter::RebootError, settings::ConfigError};
use std::time::Duration;
use thiserror::Error;

/// Exit code for a configuration the agent cannot start with.
pub const EXIT_USAGE: u8 = 2;
/// Exit code for everything else: the pod restarts and the agent resumes from the node.
pub const EXIT_FAILURE: u8 = 1;

#[derive(Debug, Error)]
pub enum AgentError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("cannot start the async runtime: {0}")]
    Runtime(#[source] std::io::Error),
    #[error(
        "cannot build a Kubernetes client: {0}; run in a pod with a ServiceAccount, or set \
         KUBECONFIG"
    )]
    Client(#[source] kube::Error),
    #[error("cannot {action} node {node}: {source}")]
    Api {
        action: &'static str,
        node: String,
        #[source]
        source: kube::Error,
    },
    #[error("node {node} kept changing: {attempts} writes in a row were refused")]
    KeepsChanging { node: String, attempts: usize },
    #[error("cannot reboot node {node}: {source}")]
    Reboot {
        node: String,
        #[source]
        source: RebootError,
    },
    #[error(
        "node {node} did not reboot within {timeout:?} (--reboot-timeout); exiting so that \
         the pod restarts and tries again"
    )]
    RebootTimedOut { node: String, timeout: Duration },
    #[error("the watch of node {0} ended")]
    WatchEnded(String),
}

impl AgentError {
    /// Whether the agent must stop (its pod restarts and resumes from the node) rather than
    /// try the step again: a reboot that failed or did not happen.
    pub fn is_fatal(&self) -> bool {
        matches!(self, Self::Reboot { .. } | Self::RebootTimedOut { .. })
    }

    /// The process's exit code for this error: 2 for a bad configuration, else 1.
    pub fn exit_code(&self) -> u8 {
        match self {
            Self::Config(_) => EXIT_USAGE,
            _ => EXIT_FAILURE,
        }
    }
}
