//! `make soak`: a simulated fleet on the local control plane under random reboot requests,
//! cancels and faults for a bounded time, watched by the independent observer of the chaos
//! tests (every node and workload pod, at every event). It prints the figures at the end and
//! exits non-zero on any violation, any request lost and any node left cordoned.

mod args;
mod faults;
mod figures;
mod load;

pub use args::Args;
pub use figures::Figures;

use anyhow::Context;
use e2e::{observer::Observer, workload};
use faults::Faults;
use load::Load;
use nodesim::sandbox::{Sandbox, SandboxConfig};
use rand::{SeedableRng, rngs::StdRng};
use std::{
    process::ExitCode,
    time::{Duration, Instant},
};

/// Leader election fast enough that a frozen or killed leader is replaced within seconds.
const FAST_LEADER_ELECTION: [&str; 3] = [
    "--leader-election-lease-duration=4s",
    "--leader-election-renew-deadline=3s",
    "--leader-election-retry-period=1s",
];
/// How often the load and the faults are looked after.
const TICK: Duration = Duration::from_secs(1);
/// How long to wait for the workload to be Ready.
const SETUP: Duration = Duration::from_secs(300);

/// Runs the soak and prints its figures; the exit code says whether every figure held.
///
/// # Errors
/// When the sandbox cannot start.
pub async fn run(args: Args) -> anyhow::Result<ExitCode> {
    args.check()?;
    let seed = args.seed.unwrap_or_else(rand::random);
    eprintln!(
        "soak: {} nodes, a budget of {}, {} controller replicas (clocks {}), for {:?}, seed \
         {seed} (SOAK_SEED={seed} repeats the random choices)",
        args.nodes,
        args.max_unavailable,
        args.controllers,
        (0..args.controllers)
            .map(|i| args
                .clock_offset(i)
                .map_or("in step".into(), |o| format!("{o} s")))
            .collect::<Vec<_>>()
            .join(", "),
        args.duration
    );
    let mut rng = StdRng::seed_from_u64(seed);
    let mut sb = start_sandbox(&args).await?;
    let names = sb.fleet.names();
    workload::deploy(&sb, names.len(), args.pdb_max_unavailable(), &[], SETUP).await;
    for i in 0..args.controllers {
        let env = args
            .clock_offset(i)
            .map(|offset| e2e::faketime::skewed(&offset))
            .unwrap_or_default();
        sb.start_proxied_controller_with_env(&[], env)
            .await
            .context("starting a controller")?;
    }
    let observer = Observer::start(
        sb.client.clone(),
        args.max_unavailable,
        workload::NAMESPACE,
        workload::WORKLOAD,
    )
    .await;
    eprintln!(
        "soak: sandbox in {} (controller logs there)",
        sb.control_plane.dir().display()
    );
    let mut load = Load::new(&args, names);
    let mut faults = Faults::new(args.fault_every);
    let started = Instant::now();
    let mut last_progress = Instant::now();
    while started.elapsed() < args.duration {
        sb.control_plane
            .ensure_running()
            .context("a component of the control plane stopped")?;
        if let Err(broken) = observer.check() {
            eprintln!("soak: {broken}");
            break;
        }
        load.tick(&sb, &observer, &mut rng, &faults.reserved());
        faults.tick(&mut sb, &observer, &mut rng, &mut load).await?;
        if last_progress.elapsed() > Duration::from_secs(60) {
            eprintln!(
                "soak: {:>4}s of {}s: {} | faults: {}",
                started.elapsed().as_secs(),
                args.duration.as_secs(),
                load.progress(&observer),
                faults.summary()
            );
            last_progress = Instant::now();
        }
        tokio::time::sleep(TICK).await;
    }
    eprintln!("soak: time is up; healing every fault and waiting for the requests left");
    faults.heal_all(&mut sb, &observer).await?;
    load.finish(&observer, args.finish_timeout).await;
    faults.recoveries(&observer);
    faults.look_after_the_admin_cordon(&sb, &load);
    if !load.lost.is_empty() {
        diagnose(&sb, &load.lost);
    }
    let figures = Figures::gather(
        &args,
        seed,
        started.elapsed(),
        &sb,
        &observer,
        &load,
        &faults,
    )
    .await;
    println!("{}", figures.table());
    figures.write(&args.report)?;
    eprintln!("soak: figures written to {}", args.report.display());
    let held = figures.held();
    if held {
        // The observer's own end-of-scenario judgement as well: it panics (non-zero exit)
        // with everything it saw when the end state is not what the figures say.
        observer.finish(&faults.admin_cordoned()).await;
    }
    if !held {
        sb.control_plane.keep_dir();
        eprintln!(
            "soak: kept {} for its logs (controller-<n>.log, the components' logs)",
            sb.control_plane.dir().display()
        );
    }
    sb.stop().await;
    Ok(if held {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

async fn start_sandbox(args: &Args) -> anyhow::Result<Sandbox> {
    let config = SandboxConfig::with_nodes(args.nodes)
        .max_unavailable(args.max_unavailable.to_string())
        .reboot_duration(args.reboot_duration)
        .controller_args(FAST_LEADER_ELECTION)
        .controller_args(["--drain-timeout", "120s"])
        .no_controller()
        .fault_proxies()
        .control_plane(e2e::observer::observed_control_plane());
    Sandbox::start(config).await.context("starting the sandbox")
}

/// Runs the real kubectl against the sandbox; its output, or `None` when it failed (the API
/// server restarting, say). The sandbox's kubelets and the observer run on this runtime: the
/// wait for kubectl must not hold up one of its few threads.
pub(crate) fn kubectl(sb: &Sandbox, args: &[&str]) -> Option<String> {
    let out = tokio::task::block_in_place(|| sb.control_plane.kubectl().args(args).output());
    match out {
        Ok(out) if out.status.success() => Some(String::from_utf8_lossy(&out.stdout).into_owned()),
        _ => None,
    }
}

/// What a user would look at when requests are stuck: the nodes, the workload's budget and
/// pods, and the stuck nodes' annotations and Events.
fn diagnose(sb: &Sandbox, stuck: &[String]) {
    let mut looks: Vec<Vec<String>> = [
        "get nodes -o wide",
        "get pdb -A -o yaml",
        "get pods -o wide --field-selector=status.phase!=Running",
        "get pods -o wide -l app=web",
    ]
    .iter()
    .map(|l| l.split(' ').map(str::to_owned).collect())
    .collect();
    for node in stuck {
        looks.push(
            [
                "get",
                "node",
                node,
                "-o",
                "jsonpath={.metadata.annotations}",
            ]
            .map(str::to_owned)
            .to_vec(),
        );
        looks.push(
            [
                "get",
                "events",
                "--field-selector",
                &format!("involvedObject.name={node}"),
                "--sort-by=.lastTimestamp",
            ]
            .map(str::to_owned)
            .to_vec(),
        );
    }
    for args in looks {
        let text =
            match tokio::task::block_in_place(|| sb.control_plane.kubectl().args(&args).output()) {
                Ok(o) => {
                    String::from_utf8_lossy(&o.stdout).into_owned()
                        + &String::from_utf8_lossy(&o.stderr)
                }
                Err(e) => e.to_string(),
            };
        eprintln!("soak: kubectl {}\n{text}", args.join(" "));
    }
}
