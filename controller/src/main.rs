use clap::Parser;
use controller::{Args, run};
use std::{process::ExitCode, time::Duration};

fn main() -> ExitCode {
    let args = Args::parse().checked();
    if args.validate {
        println!("valid");
        return ExitCode::SUCCESS;
    }
    observability::logs::init(args.log_format);
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(error) => {
            tracing::error!("cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(run(args));
    // Whatever still runs (a request in flight) must not hold up the exit.
    runtime.shutdown_timeout(Duration::from_millis(500));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            tracing::error!("{error:#}");
            ExitCode::FAILURE
        }
    }
}
