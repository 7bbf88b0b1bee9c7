//! `testenv-cluster`: a control plane in the foreground until Ctrl-C or SIGTERM.

use std::io::Write as _;
use std::time::Duration;

use tokio::signal::unix::{SignalKind, signal};

use crate::{ControlPlane, Error, Options};

/// Starts a control plane, prints `KUBECONFIG=<path>` on stdout once it is ready, and stops it
/// on SIGINT or SIGTERM. Fails when it cannot start or when a component dies meanwhile.
pub async fn run_until_signal(opts: Options) -> Result<(), Error> {
    // Registered before anything starts, so an early signal still cleans up.
    let mut interrupt = signal(SignalKind::interrupt()).map_err(Error::io("handle SIGINT"))?;
    let mut terminate = signal(SignalKind::terminate()).map_err(Error::io("handle SIGTERM"))?;
    let stopped = async move {
        tokio::select! {
            _ = interrupt.recv() => "SIGINT",
            _ = terminate.recv() => "SIGTERM",
        }
    };
    tokio::pin!(stopped);

    let mut cp = tokio::select! {
        cp = ControlPlane::start(opts) => cp?,
        signal = &mut stopped => {
            tracing::info!("{signal} during startup; stopping");
            return Ok(());
        }
    };
    println!("KUBECONFIG={}", cp.kubeconfig_path().display());
    std::io::stdout()
        .flush()
        .map_err(Error::io("write to stdout"))?;
    tracing::info!(
        "control plane running in {}; stop it with Ctrl-C",
        cp.dir().display()
    );

    let mut check = tokio::time::interval(Duration::from_secs(1));
    loop {
        tokio::select! {
            signal = &mut stopped => {
                tracing::info!("{signal}: stopping the control plane");
                return Ok(());
            }
            _ = check.tick() => cp.ensure_running()?,
        }
    }
}
