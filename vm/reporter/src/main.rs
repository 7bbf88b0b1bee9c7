use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args = vm_node_reporter::Args::parse();
    observability::logs::init(observability::LogFormat::Text);
    match vm_node_reporter::run_blocking(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            tracing::error!("{error:#}");
            ExitCode::FAILURE
        }
    }
}
