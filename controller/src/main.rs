use clap::Parser;
use controller::{Args, run, telemetry};

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let args = Args::parse();
    telemetry::init(args.log_format);
    match run(args).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            tracing::error!("{error:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
