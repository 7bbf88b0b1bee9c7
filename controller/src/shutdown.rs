//! SIGTERM (Kubernetes stopping the pod) and Ctrl-C both mean: stop soon, cleanly.

/// Resolves on the first SIGTERM or Ctrl-C.
pub async fn signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = ctrl_c => {}
                _ = term.recv() => {}
            }
        }
        Err(_) => {
            let _ = ctrl_c.await;
        }
    }
}
