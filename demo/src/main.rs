use clap::Parser;
use std::process::ExitCode;

#[tokio::main]
async fn main() -> ExitCode {
    let args = demo::Args::parse();
    observability::logs::init_tool("error,kube_client=off");
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(term) => term,
        Err(error) => {
            eprintln!("demo: cannot listen for SIGTERM: {error}");
            return ExitCode::FAILURE;
        }
    };
    // Ctrl-C or SIGTERM at any moment drops the run, and with it every process it started.
    tokio::select! {
        result = demo::run(args) => match result {
            Ok(true) => ExitCode::SUCCESS,
            Ok(false) => ExitCode::FAILURE,
            Err(error) => { eprintln!("demo: {error:#}"); ExitCode::FAILURE }
        },
        _ = tokio::signal::ctrl_c() => { eprintln!("\ndemo: interrupted; stopped everything it started"); ExitCode::from(130) }
        _ = term.recv() => { eprintln!("demo: terminated; stopped everything it started"); ExitCode::from(143) }
    }
}
