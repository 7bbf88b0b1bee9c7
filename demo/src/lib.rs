//! `make demo`: a local control plane, a fleet of simulated nodes with real agents, the real
//! controller, a workload with a PodDisruptionBudget, a reboot request for every node with
//! plain kubectl, a live view of the rolling reboot, and a summary.

pub mod view;

use anyhow::Context;
use clap::Parser;
use common::{
    AnnotationKeys, ControllerReason, MaxUnavailable,
    ledger::{LEDGER_NAME, OPERATOR_NAMESPACE, slots_of},
};
use k8s_openapi::api::{
    apps::v1::Deployment,
    coordination::v1::Lease,
    core::v1::{Event, Node},
};
use kube::{Api, api::ListParams};
use nodesim::{
    budget_watch::BudgetWatch,
    sandbox::{Sandbox, SandboxConfig},
};
use std::{
    collections::BTreeMap,
    io::{IsTerminal, Write},
    time::{Duration, Instant},
};
use view::{Frame, Shown};

/// A rolling reboot of a simulated fleet on a real local control plane, shown live.
#[derive(Debug, Clone, Parser)]
#[command(name = "demo")]
pub struct Args {
    /// Number of simulated nodes.
    #[arg(long, env = "DEMO_NODES", default_value_t = 12, value_parser = clap::value_parser!(u16).range(1..=500))]
    pub nodes: u16,
    /// The controller's --max-unavailable: a number or a percentage of the pool.
    #[arg(long, env = "DEMO_MAX_UNAVAILABLE", default_value = "3", allow_negative_numbers = true,
          value_parser = |v: &str| v.parse::<MaxUnavailable>().map_err(|e| e.to_string()))]
    pub max_unavailable: MaxUnavailable,
    /// How long a simulated reboot keeps a node down, in seconds.
    #[arg(long, env = "DEMO_REBOOT_SECONDS", default_value_t = 3.0, value_parser = parse_seconds)]
    pub reboot_seconds: f64,
    /// How long after a simulated boot each node's agent starts again, in seconds (a real
    /// agent's pod takes a few once the kubelet is up; a reboot completes without it).
    #[arg(long, env = "DEMO_AGENT_START_SECONDS", default_value_t = 3.0, value_parser = parse_seconds)]
    pub agent_start_seconds: f64,
    /// Spread the nodes over this many zones (label `topology.kubernetes.io/zone`, values
    /// zone-a, zone-b, ...); 0 for none.
    #[arg(long, env = "DEMO_ZONES", default_value_t = 3, value_parser = clap::value_parser!(u8).range(0..=26))]
    pub zones: u8,
    /// The controller's --max-unavailable-per-zone, when there are zones (`100%` lifts it).
    #[arg(long, env = "DEMO_MAX_UNAVAILABLE_PER_ZONE", default_value = "1",
          value_parser = |v: &str| v.parse::<MaxUnavailable>().map_err(|e| e.to_string()))]
    pub max_unavailable_per_zone: MaxUnavailable,
    /// The controller's --min-ready-seconds: each node soaks this long after its reboot.
    #[arg(long, env = "DEMO_MIN_READY_SECONDS", default_value_t = 1)]
    pub min_ready_seconds: u64,
    /// The controller's --reboot-window, such as `daily 00:00-24:00` (default: always).
    #[arg(long, env = "DEMO_REBOOT_WINDOW")]
    pub reboot_window: Option<String>,
    /// After the summary, leave everything running and wait for Ctrl-C (explore with kubectl).
    #[arg(long, env = "DEMO_KEEP")]
    pub keep: bool,
}

fn parse_seconds(v: &str) -> Result<f64, String> {
    match v.parse::<f64>() {
        Ok(s) if s.is_finite() && (0.1..=600.0).contains(&s) => Ok(s),
        _ => Err(format!(
            "{v:?} is not a number of seconds from 0.1 to 600 (for example 3 or 1.5)"
        )),
    }
}

/// The numbers the summary reports.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    pub requested: usize,
    pub rebooted: usize,
    pub total: Duration,
    pub max_unavailable_seen: usize,
    pub budget: usize,
    pub ideal: Duration,
}

/// How close to the ideal a rolling reboot should come: the benchmark's target for the makespan.
pub const IDEAL_MARGIN: f64 = 1.05;

impl Outcome {
    /// The total time as a multiple of the ideal.
    pub fn ratio(&self) -> f64 {
        self.total.as_secs_f64() / self.ideal.as_secs_f64().max(f64::EPSILON)
    }

    pub fn success(&self) -> bool {
        self.rebooted == self.requested && self.max_unavailable_seen <= self.budget
    }

    pub fn render(&self) -> String {
        let verdict = if self.success() {
            "OK: every node rebooted, never more than the budget unavailable"
        } else if self.rebooted < self.requested {
            "FAILED: not every node was rebooted"
        } else {
            "FAILED: more nodes were unavailable at once than the budget allows"
        };
        // Timing is reported, never judged: a loaded machine is slower, not wrong.
        let against = if self.ratio() <= IDEAL_MARGIN {
            "within"
        } else {
            "above"
        };
        format!(
            "Summary\n  rebooted:                 {} of {} nodes requested\n  total time:               {:.1} s ({:.2} x the ideal, {against} the target of {IDEAL_MARGIN} x)\n  ideal time:               {:.1} s (ceil(N/K) x (T + soak))\n  most unavailable at once: {} (budget {})\n  {verdict}\n",
            self.rebooted,
            self.requested,
            self.total.as_secs_f64(),
            self.ratio(),
            self.ideal.as_secs_f64(),
            self.max_unavailable_seen,
            self.budget
        )
    }
}

/// Writes to stdout without panicking when the reader went away (`make demo | head`): the
/// demo goes on, and still stops everything it started at the end.
fn show(text: &str) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes());
    let _ = out.flush();
}

fn say(line: &str) {
    show(&format!("{line}\n"));
}

/// Runs the demo; `Ok(true)` when every node was rebooted within budget.
pub async fn run(args: Args) -> anyhow::Result<bool> {
    let nodes = usize::from(args.nodes);
    let budget = args.max_unavailable.resolve(nodes);
    say(&format!(
        "demo: {nodes} simulated nodes, --max-unavailable {} ({budget} nodes), simulated reboots of {} s",
        args.max_unavailable, args.reboot_seconds
    ));
    say(
        "demo: starting a real control plane (etcd, kube-apiserver, controller-manager, scheduler), the nodes with one reboot-agent each, and reboot-controller ...",
    );
    let config = SandboxConfig::with_nodes(nodes)
        .max_unavailable(args.max_unavailable.to_string())
        .reboot_duration(Duration::from_secs_f64(args.reboot_seconds))
        .agent_start_after_boot(Duration::from_secs_f64(args.agent_start_seconds))
        .controller_args(controller_args(&args));
    let sandbox = Sandbox::start(config)
        .await
        .context("the sandbox did not start")?;
    say(&format!(
        "demo: logs of every component are in {}",
        sandbox.control_plane.dir().display()
    ));
    say(&format!(
        "demo: kubectl works against it while it runs: export KUBECONFIG={}",
        sandbox.control_plane.kubeconfig_path().display()
    ));
    label_zones(&sandbox, args.zones)?;
    deploy_workload(&sandbox, nodes).await?;
    let outcome = roll(
        &sandbox,
        budget,
        args.reboot_seconds + args.min_ready_seconds as f64,
    )
    .await?;
    say(&outcome.render());
    if args.keep {
        say("demo: everything is still running; explore it with kubectl, for example:");
        say(&format!(
            "  export KUBECONFIG={}",
            sandbox.control_plane.kubeconfig_path().display()
        ));
        say("  kubectl get nodes; kubectl get events --field-selector involvedObject.name=sim-1");
        say("demo: Ctrl-C stops everything.");
        say(&format!(
            "KUBECONFIG={}",
            sandbox.control_plane.kubeconfig_path().display()
        ));
        std::future::pending::<()>().await;
    }
    sandbox.stop().await;
    Ok(outcome.success())
}

const WORKLOAD: &str = r#"apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: default}
spec:
  replicas: REPLICAS
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      topologySpreadConstraints:
      - {maxSkew: 1, topologyKey: kubernetes.io/hostname, whenUnsatisfiable: ScheduleAnyway, labelSelector: {matchLabels: {app: web}}}
      containers: [{name: web, image: registry.example/web:1}]
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: web, namespace: default}
spec:
  maxUnavailable: 1
  selector: {matchLabels: {app: web}}
"#;

async fn deploy_workload(sandbox: &Sandbox, replicas: usize) -> anyhow::Result<()> {
    let manifest = WORKLOAD.replace("REPLICAS", &replicas.to_string());
    say(&format!(
        "demo: deploying a workload so the drains have something to do: Deployment web ({replicas} replicas) with a PodDisruptionBudget maxUnavailable 1"
    ));
    sandbox
        .control_plane
        .apply(&manifest)
        .context("kubectl apply of the workload failed")?;
    let deployments: Api<Deployment> = Api::namespaced(sandbox.client.clone(), "default");
    let start = Instant::now();
    loop {
        let ready = deployments
            .get("web")
            .await?
            .status
            .and_then(|s| s.ready_replicas)
            .unwrap_or(0);
        if usize::try_from(ready).unwrap_or(0) >= replicas {
            return Ok(());
        }
        anyhow::ensure!(
            start.elapsed() < Duration::from_secs(120),
            "the workload did not become Ready in 2 minutes"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn request_every_node(sandbox: &Sandbox) -> anyhow::Result<()> {
    say("demo: requesting a reboot of every node, as an administrator would:");
    for name in sandbox.fleet.names() {
        say(&format!(
            "  $ kubectl annotate node {name} reboot-needed=true"
        ));
        let status = sandbox
            .control_plane
            .kubectl()
            .args(["annotate", "node", &name, "reboot-needed=true"])
            .stdout(std::process::Stdio::null())
            .status()
            .context("cannot run kubectl")?;
        anyhow::ensure!(status.success(), "kubectl annotate node {name} failed");
    }
    Ok(())
}

/// The controller flags the demo's own flags stand for.
fn controller_args(args: &Args) -> Vec<String> {
    let mut flags = Vec::new();
    if args.zones > 0 {
        flags.extend([
            "--max-unavailable-per-zone".into(),
            args.max_unavailable_per_zone.to_string(),
        ]);
    }
    if args.min_ready_seconds > 0 {
        flags.extend([
            "--min-ready-seconds".into(),
            args.min_ready_seconds.to_string(),
        ]);
    }
    if let Some(window) = &args.reboot_window {
        flags.extend(["--reboot-window".into(), window.clone()]);
    }
    flags
}

const ZONE_LABEL: &str = "topology.kubernetes.io/zone";

/// Labels the nodes zone-a, zone-b, ... in turn, as a cloud provider would.
fn label_zones(sandbox: &Sandbox, zones: u8) -> anyhow::Result<()> {
    if zones == 0 {
        return Ok(());
    }
    for (i, name) in sandbox.fleet.names().iter().enumerate() {
        let zone = char::from(b'a' + (i % usize::from(zones)) as u8);
        let status = sandbox
            .control_plane
            .kubectl()
            .args(["label", "node", name, &format!("{ZONE_LABEL}=zone-{zone}")])
            .stdout(std::process::Stdio::null())
            .status()
            .context("cannot run kubectl")?;
        anyhow::ensure!(status.success(), "kubectl label node {name} failed");
    }
    Ok(())
}

/// Why a request waits, as the demo words the reason of the controller's Event that says so.
fn waiting(reason: ControllerReason) -> Option<&'static str> {
    use ControllerReason as R;
    Some(match reason {
        R::Requested => "budget full",
        R::ZoneBudgetFull => "zone budget full",
        R::OutsideWindow => "outside the window",
        R::Blackout => "blackout",
        R::Paused => "paused",
        R::NotReadyAfterReboot => "NotReady after reboot",
        R::AlertsFiring => "alerts firing",
        R::PrometheusUnreachable => "Prometheus unreachable",
        R::BlockingPod => "blocking pod",
        R::RebootDisabled => "opted out",
        _ => return None,
    })
}

/// Each node's state, and what to show next to its name: its zone, and for a waiting node
/// the reason from the controller's latest Event about it.
async fn snapshot(
    client: &kube::Client,
    keys: &AnnotationKeys,
    first_boot: &BTreeMap<String, String>,
) -> anyhow::Result<(BTreeMap<String, Shown>, BTreeMap<String, String>)> {
    let list = Api::<Node>::all(client.clone())
        .list(&ListParams::default())
        .await?;
    let ledger = Api::<Lease>::namespaced(client.clone(), OPERATOR_NAMESPACE)
        .get_opt(LEDGER_NAME)
        .await?;
    let slots = slots_of(
        ledger
            .as_ref()
            .and_then(|l| l.metadata.annotations.as_ref()),
    )
    .unwrap_or_default();
    let mut events = Api::<Event>::namespaced(client.clone(), "default")
        .list(&ListParams::default())
        .await?
        .items;
    events.sort_by_key(nodesim::observe::revision);
    let mut why: BTreeMap<String, &str> = BTreeMap::new();
    for event in &events {
        let reason = event.reason.as_deref().unwrap_or_default();
        if let Some(words) = reason.parse().ok().and_then(waiting) {
            let node = event.involved_object.name.clone().unwrap_or_default();
            why.insert(node, words);
        }
    }
    let mut states = BTreeMap::new();
    let mut notes = BTreeMap::new();
    for node in &list.items {
        let name = node.metadata.name.clone().unwrap_or_default();
        let state = view::shown(node, keys, first_boot.get(&name), slots.contains_key(&name));
        let zone = node
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(ZONE_LABEL));
        let reason = why.get(&name).filter(|_| state == Shown::Requested);
        let note: Vec<&str> = zone
            .map(String::as_str)
            .into_iter()
            .chain(reason.copied())
            .collect();
        if !note.is_empty() {
            notes.insert(name.clone(), note.join(", "));
        }
        states.insert(name, state);
    }
    Ok((states, notes))
}

/// `turnover` is how long a node keeps its slot: its reboot, then its soak.
async fn roll(sandbox: &Sandbox, budget: usize, turnover: f64) -> anyhow::Result<Outcome> {
    let nodes: Api<Node> = Api::all(sandbox.client.clone());
    let keys = AnnotationKeys::default();
    let first_boot: BTreeMap<String, String> = nodes
        .list(&ListParams::default())
        .await?
        .items
        .iter()
        .filter_map(|n| {
            Some((
                n.metadata.name.clone()?,
                common::NodeFacts::from_node(n).boot_id?,
            ))
        })
        .collect();
    let watch = BudgetWatch::start(sandbox.client.clone(), budget).await;
    request_every_node(sandbox).await?;
    let count = first_boot.len();
    let ideal = Duration::from_secs_f64(count.div_ceil(budget) as f64 * turnover);
    let deadline = Duration::from_secs(120).max(ideal * 20);
    let start = Instant::now();
    let terminal = std::io::stdout().is_terminal();
    let mut shown_lines = 0;
    let mut last: Option<Frame> = None;
    loop {
        let (states, notes) = snapshot(&sandbox.client, &keys, &first_boot).await?;
        let frame = Frame {
            nodes: states,
            notes,
            budget,
            elapsed: start.elapsed(),
        };
        if terminal {
            let block = frame.render();
            show(&format!(
                "{}{}",
                "\x1b[1A\x1b[2K".repeat(shown_lines),
                block
            ));
            shown_lines = block.lines().count();
        } else {
            let before = last.clone().unwrap_or_else(|| Frame {
                nodes: BTreeMap::new(),
                ..frame.clone()
            });
            for line in frame.changes_since(&before) {
                say(&line);
            }
        }
        let done = frame.count(Shown::Back) == count;
        last = Some(frame);
        if done || start.elapsed() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let rebooted = last.map_or(0, |f| f.count(Shown::Back));
    Ok(Outcome {
        requested: count,
        rebooted,
        total: start.elapsed(),
        max_unavailable_seen: watch.max_seen(),
        budget,
        ideal,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(total_s: f64) -> Outcome {
        Outcome {
            requested: 12,
            rebooted: 12,
            total: Duration::from_secs_f64(total_s),
            max_unavailable_seen: 3,
            budget: 3,
            ideal: Duration::from_secs(16),
        }
    }

    #[test]
    fn the_summary_shows_the_total_against_the_ideal() {
        let within = outcome(16.5).render();
        assert!(
            within.contains("16.5 s (1.03 x the ideal, within the target of 1.05 x)"),
            "{within}"
        );
        let above = outcome(33.8).render();
        assert!(
            above.contains("33.8 s (2.11 x the ideal, above the target of 1.05 x)"),
            "{above}"
        );
        assert!(
            above.contains("OK: every node rebooted"),
            "timing is not judged: {above}"
        );
    }
}
