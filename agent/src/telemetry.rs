//! Logging: text or JSON lines on stderr, level from RUST_LOG (default info).

use crate::args::LogFormat;
use std::io::IsTerminal;
use tracing_subscriber::{EnvFilter, fmt};

/// Installs the global subscriber. Call once, at the top of `main`.
pub fn init(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .init(),
    }
}
