use clap::Parser;
use nodesim::sandbox::SandboxConfig;
use std::time::Duration;

/// A local sandbox: a real control plane, N simulated nodes each with a real reboot-agent, and
/// the real reboot-controller. Prints KUBECONFIG=<path> when ready; Ctrl-C stops everything.
#[derive(Debug, Parser)]
#[command(name = "sandbox")]
struct Args {
    /// Number of simulated nodes (sim-1 .. sim-N).
    #[arg(long, env = "SANDBOX_NODES", default_value_t = 5, value_parser = clap::value_parser!(u16).range(1..=2000))]
    nodes: u16,
    /// The controller's --max-unavailable (a number or a percentage).
    #[arg(long, env = "SANDBOX_MAX_UNAVAILABLE", default_value = "1", allow_negative_numbers = true,
          value_parser = |v: &str| v.parse::<common::MaxUnavailable>().map(|_| v.to_owned()).map_err(|e| e.to_string()))]
    max_unavailable: String,
    /// How long a simulated reboot keeps a node down, in seconds.
    #[arg(long, env = "SANDBOX_REBOOT_SECONDS", default_value_t = 3.0, value_parser = parse_seconds)]
    reboot_seconds: f64,
    /// How long after a simulated boot each node's agent starts again, in seconds (a real
    /// agent's pod takes a few once the kubelet is up).
    #[arg(long, env = "SANDBOX_AGENT_START_SECONDS", default_value_t = 3.0, value_parser = parse_seconds)]
    agent_start_seconds: f64,
}

fn parse_seconds(v: &str) -> Result<f64, String> {
    match v.parse::<f64>() {
        Ok(s) if s.is_finite() && (0.0..=3600.0).contains(&s) => Ok(s),
        _ => Err(format!(
            "{v:?} is not a number of seconds from 0 to 3600 (for example 2 or 0.5)"
        )),
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    observability::logs::init_tool("warn,kube_client=off");
    let config = SandboxConfig::with_nodes(args.nodes.into())
        .max_unavailable(args.max_unavailable)
        .reboot_duration(Duration::from_secs_f64(args.reboot_seconds))
        .agent_start_after_boot(Duration::from_secs_f64(args.agent_start_seconds));
    nodesim::sandbox::run_until_signal(config).await
}
