use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;

/// Runs a local Kubernetes control plane in the foreground; prints `KUBECONFIG=<path>` once ready.
#[derive(Debug, Parser)]
#[command(version)]
struct Args {
    /// Directory in which the control plane's temporary directory is created.
    #[arg(long, env = "TESTENV_DATA_DIR")]
    data_dir: Option<PathBuf>,
    /// Port of the API server on 127.0.0.1 (default: a free one).
    #[arg(long, env = "TESTENV_PORT")]
    port: Option<u16>,
    /// Do not run kube-controller-manager.
    #[arg(long, env = "TESTENV_NO_CONTROLLER_MANAGER")]
    no_controller_manager: bool,
    /// Do not run kube-scheduler.
    #[arg(long, env = "TESTENV_NO_SCHEDULER")]
    no_scheduler: bool,
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| "info,kube_client=off".into());
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(filter)
        .init();
    let opts = testenv::Options {
        controller_manager: !args.no_controller_manager,
        scheduler: !args.no_scheduler,
        apiserver_port: args.port,
        data_dir: args.data_dir,
        extra_apiserver_args: Vec::new(),
        extra_etcd_args: Vec::new(),
    };
    match testenv::run_until_signal(opts).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("testenv-cluster: {e}");
            ExitCode::FAILURE
        }
    }
}
