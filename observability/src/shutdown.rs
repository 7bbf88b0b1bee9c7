//! SIGTERM (Kubernetes stopping the pod) and Ctrl-C both mean: stop soon, cleanly.

/// Resolves on the first SIGTERM or Ctrl-C.
#[cfg(unix)]
pub async fn signal() {
    use tokio::signal::unix::{SignalKind, signal};
    match signal(SignalKind::terminate()) {
        Ok(mut terminate) => {
            tokio::select! {
                _ = terminate.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
        }
        Err(error) => {
            tracing::warn!(%error, "cannot listen for SIGTERM; stopping on Ctrl-C only");
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

/// Resolves on the first Ctrl-C: a system without SIGTERM (Windows, where the kubectl plugin
/// runs) has no other request to stop.
#[cfg(not(unix))]
pub async fn signal() {
    let _ = tokio::signal::ctrl_c().await;
}
