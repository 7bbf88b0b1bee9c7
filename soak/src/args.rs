use clap::Parser;
use std::{path::PathBuf, time::Duration};

/// A long soak of the operator on a simulated fleet: random requests, cancels and faults,
/// watched by an independent observer. Needs `make testenv` and `make bins`.
#[derive(Debug, Parser)]
#[command(name = "soak")]
pub struct Args {
    /// How long to inject requests and faults; then every fault is healed and the requests
    /// left are waited for.
    #[arg(long, env = "SOAK_DURATION", default_value = "30m", value_parser = duration)]
    pub duration: Duration,
    /// Simulated nodes.
    #[arg(long, env = "SOAK_NODES", default_value_t = 50)]
    pub nodes: usize,
    /// The operator's budget (`--max-unavailable`), in nodes.
    #[arg(long, env = "SOAK_MAX_UNAVAILABLE", default_value_t = 5)]
    pub max_unavailable: usize,
    /// Controller replicas, with leader election.
    #[arg(long, env = "SOAK_CONTROLLERS", default_value_t = 3)]
    pub controllers: usize,
    /// How far the second and third controller replicas' wall clocks are off (ahead, then
    /// behind; libfaketime), as clocks without NTP drift; `0s` for clocks in step.
    #[arg(long, env = "SOAK_CLOCK_SKEW", default_value = "3m", value_parser = duration_or_zero)]
    pub clock_skew: Duration,
    /// The seed of every random choice (printed at the start; random when not given).
    #[arg(long, env = "SOAK_SEED")]
    pub seed: Option<u64>,
    /// The pause between one fault healed and the next injected.
    #[arg(long, env = "SOAK_FAULT_EVERY", default_value = "20s", value_parser = duration)]
    pub fault_every: Duration,
    /// How long a simulated reboot takes.
    #[arg(long, env = "SOAK_REBOOT_DURATION", default_value = "2s", value_parser = duration)]
    pub reboot_duration: Duration,
    /// How long to wait, after the faults stop, for the requests left to finish before they
    /// count as lost.
    #[arg(long, env = "SOAK_FINISH_TIMEOUT", default_value = "10m", value_parser = duration)]
    pub finish_timeout: Duration,
    /// Where the figures go, as JSON.
    #[arg(long, env = "SOAK_REPORT", default_value = "target/soak/report.json")]
    pub report: PathBuf,
}

fn duration(value: &str) -> Result<Duration, String> {
    common::duration::parse_duration(value).map_err(|e| e.to_string())
}

fn duration_or_zero(value: &str) -> Result<Duration, String> {
    match value.trim() {
        "0" | "0s" => Ok(Duration::ZERO),
        _ => duration(value),
    }
}

impl Args {
    /// The wall-clock offset of controller replica `i` (counted from 0), in seconds, in
    /// libfaketime's relative form: the first in step, then one ahead and one behind.
    pub fn clock_offset(&self, i: usize) -> Option<String> {
        let skew = self.clock_skew.as_secs();
        match (skew, i % 3) {
            (0, _) | (_, 0) => None,
            (_, 1) => Some(format!("+{skew}")),
            _ => Some(format!("-{skew}")),
        }
    }

    /// Rejects what cannot make a soak, naming the fix.
    pub fn check(&self) -> anyhow::Result<()> {
        if self.nodes < 4 {
            anyhow::bail!(
                "--nodes {} is too few for a soak; give 4 or more",
                self.nodes
            );
        }
        if self.max_unavailable == 0 || self.max_unavailable >= self.nodes {
            anyhow::bail!(
                "--max-unavailable {} must be at least 1 and below --nodes {}",
                self.max_unavailable,
                self.nodes
            );
        }
        if self.controllers < 2 {
            anyhow::bail!(
                "--controllers {} leaves no replica to take over from a killed or cut leader; \
                 give 2 or more",
                self.controllers
            );
        }
        if self.duration.is_zero() {
            anyhow::bail!("--duration 0 soaks nothing; give a duration such as 30m");
        }
        Ok(())
    }

    /// What the workload's PodDisruptionBudget lets go at once: a tenth of its replicas (one
    /// per node), at least one.
    pub fn pdb_max_unavailable(&self) -> usize {
        (self.nodes / 10).max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Args {
        Args::try_parse_from(std::iter::once("soak").chain(args.iter().copied())).unwrap()
    }

    #[test]
    fn the_defaults_make_a_soak_of_half_an_hour_on_fifty_nodes() {
        let args = parse(&[]);
        args.check().unwrap();
        assert_eq!(args.duration, Duration::from_secs(30 * 60));
        assert_eq!((args.nodes, args.max_unavailable), (50, 5));
    }

    #[test]
    fn replicas_run_in_step_ahead_and_behind() {
        let args = parse(&["--clock-skew", "2m"]);
        let offsets: Vec<_> = (0..4).map(|i| args.clock_offset(i)).collect();
        assert_eq!(
            offsets,
            [None, Some("+120".into()), Some("-120".into()), None]
        );
        assert_eq!(parse(&["--clock-skew", "0s"]).clock_offset(1), None);
    }

    #[test]
    fn a_budget_as_large_as_the_fleet_is_refused_with_the_fix() {
        let error = parse(&["--nodes", "8", "--max-unavailable", "8"])
            .check()
            .unwrap_err()
            .to_string();
        assert!(error.contains("below --nodes 8"), "{error}");
    }

    #[test]
    fn a_single_controller_is_refused() {
        let error = parse(&["--controllers", "1"])
            .check()
            .unwrap_err()
            .to_string();
        assert!(error.contains("give 2 or more"), "{error}");
    }

    #[test]
    fn a_duration_without_a_unit_is_refused_by_the_parser() {
        let error = Args::try_parse_from(["soak", "--duration", "30"]).unwrap_err();
        assert!(
            error.to_string().contains("use a number with a unit"),
            "{error}"
        );
    }
}
