use clap::Parser;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = bench::Args::parse();
    observability::logs::init_tool("info,kube_client=off,kube_runtime=warn,testenv=warn");
    bench::run(args).await
}
