use clap::Parser;
use std::process::ExitCode;

#[tokio::main]
async fn main() -> anyhow::Result<ExitCode> {
    let args = soak::Args::parse();
    observability::logs::init_tool("info,kube_client=off,kube_runtime=warn,testenv=warn");
    soak::run(args).await
}
