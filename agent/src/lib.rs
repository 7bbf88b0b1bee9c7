//! reboot-agent: runs on every node (a DaemonSet pod), watches its own Node, and reboots it
//! when the controller sets `reboot-now`; after the boot it proves the reboot by a new boot id
//! and reports it done. See docs/src/concepts.md, "Proof".
//!
//! The decision is the pure [`decide`]; the one destructive side effect sits behind the
//! [`Rebooter`] trait; [`run_with_client`] is the loop that connects them to the API server.

pub mod args;
pub mod attempts;
pub mod decision;
pub mod error;
pub mod events;
pub mod host_exec;
pub mod metrics;
pub mod node_agent;
pub mod node_watch;
mod own_write;
pub mod rebooter;
mod retry;
mod run_loop;
pub mod sentinel;
pub mod settings;
mod steps;
pub mod test_hook;

pub use args::{Args, LogFormat};
pub use decision::{AgentAction, decide};
pub use error::AgentError;
pub use metrics::Metrics;
pub use observability::Health;
pub use rebooter::{RebootCommand, RebootMethod, RebootSettings};
pub use rebooter::{RebootError, Rebooter, rebooter_for};
pub use settings::{ConfigError, Settings};

use std::{future::Future, sync::Arc};
use tracing::Instrument;

/// [`run`] on a single-threaded runtime (the agent watches one object), as `main` does.
pub fn run_blocking(args: Args) -> Result<(), AgentError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(AgentError::Runtime)?;
    let result = runtime.block_on(run(args));
    // Do not wait for a reboot command that may still run in a blocking thread.
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    result
}

/// Runs the agent as the binary does: validates `args`, serves `/metrics`, `/healthz` and
/// `/readyz`, connects with the default client configuration (KUBECONFIG or in-cluster) and
/// [`observability::api_client`], reboots with the configured method, and stops gracefully on
/// SIGTERM or Ctrl-C.
pub async fn run(args: Args) -> Result<(), AgentError> {
    let settings = Settings::from_args(&args)?;
    let (metrics, registry) = Metrics::new();
    let health = Health::new("the watch of this node is not running yet");
    let span = tracing::info_span!("reboot_agent", node = %settings.node_name);
    let client = async {
        if let Some(address) = args.metrics_bind_address.0 {
            match observability::serve(address, Arc::new(registry), health.clone()).await {
                Ok(bound) => {
                    tracing::info!(address = %bound, "serving /metrics, /healthz and /readyz")
                }
                Err(error) => tracing::error!(
                    %error,
                    "cannot serve /metrics, /healthz and /readyz on {address}; going on without \
                     them (choose another --metrics-bind-address, env METRICS_BIND_ADDRESS, or 0 \
                     for none)"
                ),
            }
        }
        let config = kube::Config::infer()
            .await
            .map_err(|e| AgentError::Client(kube::Error::InferConfig(e)))?;
        observability::api_client::client(config, "reboot-agent").map_err(AgentError::Client)
    }
    .instrument(span)
    .await?;
    let rebooter = rebooter_for(&settings.reboot);
    let observed = Observed { metrics, health };
    run_with_client(client, settings, rebooter, observed, shutdown_signal()).await
}

/// Where the agent reports how it is doing: its metrics and its readiness.
#[derive(Debug, Clone)]
pub struct Observed {
    pub metrics: Metrics,
    pub health: Health,
}

impl Default for Observed {
    fn default() -> Self {
        Self {
            metrics: Metrics::new().0,
            health: Health::new("the watch of this node is not running yet"),
        }
    }
}

/// Runs the agent of `settings.node_name` with a given client and rebooter until `shutdown`
/// completes (Ok) or a reboot fails or does not happen in time (Err). For tests and simulators.
pub async fn run_with_client(
    client: kube::Client,
    settings: Settings,
    rebooter: Arc<dyn Rebooter>,
    observed: Observed,
    shutdown: impl Future<Output = ()>,
) -> Result<(), AgentError> {
    let span = tracing::info_span!("reboot_agent", node = %settings.node_name);
    node_agent::NodeAgent::new(client, settings, rebooter, observed)
        .run(shutdown)
        .instrument(span)
        .await
}

/// Completes on SIGTERM (the kubelet stopping the pod) or Ctrl-C.
pub async fn shutdown_signal() {
    observability::shutdown::signal().await;
}
