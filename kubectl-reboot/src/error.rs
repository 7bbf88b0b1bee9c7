//! The plugin's errors: each one says what failed and what to do about it.

use thiserror::Error;

#[derive(Debug, Error)]
pub enum Error {
    #[error("cannot set up the connection to the cluster: {0}")]
    Config(String),

    /// The API server refused for lack of permission.
    #[error(
        "forbidden: {what}: {message}\n`kubectl reboot {command}` needs {needs}; see \
         \"kubectl reboot\" in docs/src/operations.md for the node-reboot-viewer and \
         node-reboot-admin roles"
    )]
    Forbidden {
        what: String,
        message: String,
        command: &'static str,
        needs: &'static str,
    },

    #[error(
        "the ledger Lease {namespace}/{name} does not exist yet: the controller creates it when \
         it starts. Is the controller running, with --namespace {namespace} and --ledger-name \
         {name}? (give the same flags here)"
    )]
    NoLedger { namespace: String, name: String },

    /// The write cannot be made (a reboot under way cannot be cancelled).
    #[error("{0}")]
    TooLate(String),

    #[error("node {0} not found")]
    NodeNotFound(String),

    #[error(
        "node/{0} is not in the reboot protocol (no request, slot, reboot or operator's cordon): \
         nothing to give up. Check the name with `kubectl reboot status`; a node given up \
         already has a RebootAbandoned Event"
    )]
    NotInProtocol(String),

    #[error("{what}: {source}")]
    Api {
        what: String,
        #[source]
        source: kube::Error,
    },

    /// `plan` lacks a setting it needs.
    #[error("cannot plan: {0}")]
    CannotPlan(String),

    #[error("cannot read the controller's metrics: {0}")]
    Metrics(String),

    /// `migrate-from-kured`: kured cannot be read, or is still running.
    #[error("{0}")]
    Kured(String),

    /// `--pool` names no RebootPool.
    #[error(
        "no RebootPool {name}: {}; without --pool, every pool is shown (the flags' pool and \
         each RebootPool)",
        known_pools(known)
    )]
    UnknownPool { name: String, known: Vec<String> },

    /// Some of the nodes could not be changed; each was reported.
    #[error("{failed} of {total} nodes could not be changed (see above)")]
    SomeFailed { failed: usize, total: usize },
}

fn known_pools(known: &[String]) -> String {
    if known.is_empty() {
        "there is none (kubectl get rebootpools)".to_owned()
    } else {
        format!("the RebootPools are {}", known.join(", "))
    }
}

impl Error {
    /// The exit code: 2 for a bad argument, 1 for the rest.
    pub fn exit_code(&self) -> u8 {
        match self {
            Self::UnknownPool { .. } => 2,
            _ => 1,
        }
    }

    /// Classifies an API error of `what`, for `command` (which needs `needs`).
    pub fn api(
        what: impl Into<String>,
        command: &'static str,
        needs: &'static str,
    ) -> impl FnOnce(kube::Error) -> Error {
        let what = what.into();
        move |source| match &source {
            kube::Error::Api(status) if status.is_forbidden() => Error::Forbidden {
                what,
                message: status.message.clone(),
                command,
                needs,
            },
            _ => Error::Api { what, source },
        }
    }
}

/// Whether the API server refused a JSON Patch because one of its `test`s failed, or the
/// write because the object changed: read again and decide again.
pub fn is_stale(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(s) if s.is_invalid() || s.is_conflict())
}

/// Not found: the object, or its whole resource (a CRD not installed answers a plain 404
/// page, without a Status reason).
pub fn is_not_found(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(s) if s.is_not_found() || s.code == 404)
}
