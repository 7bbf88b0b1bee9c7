//! What both programs share to be operated: logs (`--log-format text|json`, level from
//! `RUST_LOG`), the small HTTP server for `/healthz`, `/readyz` and `/metrics`
//! (`--metrics-bind-address`), the SIGTERM/Ctrl-C shutdown signal, and API errors by kind
//! (for decisions and for the error metrics).

pub mod api_client;
pub mod api_error;
pub mod http;
pub mod http_get;
pub mod logs;
pub mod proxy;
pub mod shutdown;
pub mod streaming_watch;
pub mod watch_retry;

pub use api_error::ApiErrorKind;

/// An error and its causes, joined: "connection refused" is often only in the innermost one.
pub fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
pub use http::{BindAddress, Health, serve};
pub use logs::LogFormat;
