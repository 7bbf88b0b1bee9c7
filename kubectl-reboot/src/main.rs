use clap::Parser;
use kubectl_reboot::{Cli, run};
use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: {:#}", anyhow::Error::from(error));
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            let code = error.exit_code();
            eprintln!("error: {:#}", anyhow::Error::from(error));
            ExitCode::from(code)
        }
    }
}
