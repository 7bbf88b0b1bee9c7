//! `kubectl reboot`: the node-reboot-operator from kubectl. `status` shows every node of the
//! pool with its state and why it waits, the slots against the budget and when the queue
//! should be done; `plan` shows the whole rollout wave by wave, windows included; `request`,
//! `cancel`, `pause` and `resume` do what the docs tell an administrator to do by hand;
//! `abandon` asks the controller to give a node up; `migrate-from-kured` translates a running
//! kured's settings into this operator's chart values ([`kured`]). It reads only what the
//! operator already writes, and kured's DaemonSet.
//!
//! The classification and the estimate are pure functions ([`status`], [`estimate`]) over
//! what [`read`] gathers; [`actions`] decides its patches purely and writes them.

pub mod abandon;
pub mod actions;
pub mod cli;
pub mod error;
pub mod estimate;
pub mod identity;
pub mod input;
pub mod kured;
pub mod metrics;
pub mod plan;
pub mod plan_render;
pub mod pool_spec;
pub mod read;
pub mod render;
pub mod status;
pub mod wait;

#[cfg(test)]
mod fixtures;

pub use cli::Cli;
pub use error::Error;

use cli::{Command, Global, MigrateArgs, Output, PlanArgs, StatusArgs};
use k8s_openapi::jiff::Timestamp;
use kube::{
    Client, Config,
    config::{KubeConfigOptions, Kubeconfig},
};
use std::io::{IsTerminal, Write};

/// Runs one command.
pub async fn run(cli: Cli) -> Result<(), Error> {
    let client = client(&cli.global).await?;
    let global = &cli.global;
    let keys = &global.annotation_prefix;
    match &cli.command {
        Command::Status(args) => status(&client, global, args).await,
        Command::Plan(args) => plan(&client, global, args).await,
        Command::Request(nodes) => {
            each(&nodes.nodes, async |name| {
                actions::request_node(&client, keys, name).await
            })
            .await
        }
        Command::Cancel(nodes) => {
            each(&nodes.nodes, async |name| {
                actions::cancel_node(&client, keys, name).await
            })
            .await
        }
        Command::Abandon(args) => {
            let by = identity::caller(&client, global).await;
            say(&abandon::abandon_node(&client, keys, &args.node, &by, &args.reason).await?);
            Ok(())
        }
        Command::Pause(args) | Command::Resume(args) => {
            let pause = matches!(cli.command, Command::Pause(_));
            let (namespace, ledger) = (&global.namespace, &global.ledger_name);
            match &args.pool {
                Some(pool) if pause => {
                    say(&actions::set_pool_paused(&client, pool, true, None).await?)
                }
                // Its controller forgives the rollout's failures, asked by the pool's spec.
                Some(pool) => say(&actions::resume_pool(&client, namespace, pool).await?),
                None => {
                    say(&actions::set_paused(&client, namespace, ledger, pause).await?);
                    // Resuming also forgives the rollout's failures that stalled the pool.
                    if !pause
                        && let Some(forgiven) =
                            actions::forgive_rollout(&client, namespace, ledger).await?
                    {
                        say(&forgiven);
                    }
                }
            }
            Ok(())
        }
        Command::MigrateFromKured(args) => migrate_from_kured(&client, args).await,
    }
}

/// `migrate-from-kured`: the values on stdout, what was not translated also on stderr; or,
/// with `--cleanup`, kured's marks off the nodes.
async fn migrate_from_kured(client: &Client, args: &MigrateArgs) -> Result<(), Error> {
    if args.cleanup {
        let marks = kured::cleanup::KuredMarks {
            taint: args
                .prefer_no_schedule_taint
                .clone()
                .filter(|t| !t.is_empty()),
            labels: args
                .pre_reboot_node_labels
                .iter()
                .chain(&args.post_reboot_node_labels)
                .cloned()
                .collect(),
            annotations: args.annotate_nodes,
        };
        return kured::cleanup::run(client, &marks, args.dry_run, say).await;
    }
    let wanted = kured::Wanted {
        namespace: args.kured_namespace.clone(),
        name: args.kured_name.clone(),
    };
    let found = kured::find(client, &wanted).await?;
    let translation = kured::translate::translate(&found);
    let mut stderr = std::io::stderr().lock();
    for (what, why) in &translation.not_translated {
        let _ = writeln!(stderr, "not translated: {what}: {why}");
    }
    for note in &translation.notes {
        let _ = writeln!(stderr, "note: {note}");
    }
    drop(stderr);
    let _ = write!(
        std::io::stdout().lock(),
        "{}",
        kured::translate::render(&found, &translation)
    );
    Ok(())
}

/// A client as kubectl would make it: `--kubeconfig` (or `KUBECONFIG`, a `:`-separated
/// list), `--context`, else the usual places (`~/.kube/config`, in-cluster).
async fn client(global: &Global) -> Result<Client, Error> {
    let config = config(global).await?;
    Client::try_from(config).map_err(|e| Error::Config(e.to_string()))
}

/// The kubeconfig as kubectl reads it, merged from `--kubeconfig` (or `KUBECONFIG`); `None`
/// for the usual places.
pub(crate) fn kubeconfig(global: &Global) -> Result<Option<Kubeconfig>, Error> {
    let fail = |e: &dyn std::fmt::Display| Error::Config(e.to_string());
    let Some(paths) = global.kubeconfig.as_deref().filter(|k| !k.is_empty()) else {
        return Ok(None);
    };
    let mut merged: Option<Kubeconfig> = None;
    for path in std::env::split_paths(paths).filter(|p| !p.as_os_str().is_empty()) {
        let next = Kubeconfig::read_from(&path).map_err(|e| fail(&e))?;
        merged = Some(match merged {
            None => next,
            Some(m) => m.merge(next).map_err(|e| fail(&e))?,
        });
    }
    merged
        .map(Some)
        .ok_or_else(|| Error::Config("empty --kubeconfig".into()))
}

async fn config(global: &Global) -> Result<Config, Error> {
    let fail = |e: &dyn std::fmt::Display| Error::Config(e.to_string());
    let options = KubeConfigOptions {
        context: global.context.clone(),
        ..KubeConfigOptions::default()
    };
    match kubeconfig(global)? {
        Some(merged) => Config::from_custom_kubeconfig(merged, &options)
            .await
            .map_err(|e| fail(&e)),
        None if global.context.is_some() => Config::from_kubeconfig(&options)
            .await
            .map_err(|e| fail(&e)),
        None => Config::infer().await.map_err(|e| fail(&e)),
    }
}

/// Does `action` to every node in turn, saying what was done; fails if any failed.
async fn each(
    nodes: &[String],
    action: impl AsyncFn(&str) -> Result<String, Error>,
) -> Result<(), Error> {
    if let [one] = nodes {
        say(&action(one).await?);
        return Ok(());
    }
    let mut failed = 0;
    for name in nodes {
        match action(name).await {
            Ok(done) => say(&done),
            Err(error) => {
                failed += 1;
                eprintln!("error: {error}");
            }
        }
    }
    if failed == 0 {
        Ok(())
    } else {
        Err(Error::SomeFailed {
            failed,
            total: nodes.len(),
        })
    }
}

fn say(line: &str) {
    let _ = writeln!(std::io::stdout().lock(), "{line}");
}

/// One status, read now.
async fn snapshot(client: &Client, global: &Global, args: &StatusArgs) -> Result<String, Error> {
    let pools = read::pools(client, global, args).await?;
    let status = status::every_pool(&pools, &global.annotation_prefix, Timestamp::now());
    Ok(match args.output {
        Output::Text => render::text(&status),
        Output::Json => render::json(&status, args.watch),
    })
}

/// `status`, once or (`--watch`) until Ctrl-C, which exits 0.
async fn status(client: &Client, global: &Global, args: &StatusArgs) -> Result<(), Error> {
    if !args.watch {
        let out = snapshot(client, global, args).await?;
        let _ = write!(std::io::stdout().lock(), "{}", with_newline(out));
        return Ok(());
    }
    let in_place = std::io::stdout().is_terminal() && args.output == Output::Text;
    let interrupted = tokio::signal::ctrl_c();
    tokio::pin!(interrupted);
    loop {
        let frame = tokio::select! {
            _ = &mut interrupted => return Ok(()),
            frame = snapshot(client, global, args) => frame,
        };
        let frame = match (frame, args.output) {
            (Ok(frame), _) => frame,
            (Err(error), Output::Json) => {
                serde_json::json!({"error": error.to_string()}).to_string()
            }
            (Err(error), Output::Text) => format!("error: {error}\n"),
        };
        let mut stdout = std::io::stdout().lock();
        let written = if in_place {
            // Home, clear the screen, then the frame: refreshed in place.
            write!(stdout, "\x1b[H\x1b[2J{}", with_newline(frame))
        } else if args.output == Output::Json {
            write!(stdout, "{}", with_newline(frame))
        } else {
            writeln!(stdout, "{}", with_newline(frame))
        };
        // A closed pipe (`| head`) ends the watch quietly.
        if written.and_then(|()| stdout.flush()).is_err() {
            return Ok(());
        }
        drop(stdout);
        tokio::select! {
            _ = &mut interrupted => return Ok(()),
            () = tokio::time::sleep(args.interval) => {}
        }
    }
}

/// `plan`: the pool read once, the rollout planned from it.
async fn plan(client: &Client, global: &Global, args: &PlanArgs) -> Result<(), Error> {
    let input = match read::pools(client, global, &args.status_args()).await? {
        input::Pools::One(pool) | input::Pools::All { flags: pool, .. } => pool,
    };
    let settings = match &input.spec {
        Some(spec) => {
            let pool = input.name.as_deref().unwrap_or_default();
            plan::Settings::of_spec(spec, args.reboot_duration)
                .map_err(|why| Error::CannotPlan(format!("the RebootPool {pool}'s {why}")))?
        }
        None => plan::Settings {
            windows: controller_core::window::Windows::new(args.reboot_windows.clone())
                .with_blackouts(args.reboot_blackouts.clone()),
            scheduled_budgets: args.scheduled_budgets.clone(),
            zone_label: args.zone_label.clone(),
            zone_budget: args.max_unavailable_per_zone,
            concurrency: args.concurrency,
            min_ready: std::time::Duration::from_secs(args.min_ready_seconds),
            // The controller's --drain-attempts is not the plugin's to know, nor its
            // --canary, --waves and --max-failures (a stall it says holds the plan).
            set_aside: Default::default(),
            rollout: Default::default(),
            reboot_estimate: None,
            reboot: args.reboot_duration,
        },
    };
    let planned = plan::plan(
        &input,
        &global.annotation_prefix,
        &settings,
        Timestamp::now(),
    )
    .map_err(Error::CannotPlan)?;
    let out = match args.output {
        Output::Text => plan_render::text(&planned),
        Output::Json => plan_render::json(&planned),
    };
    let _ = write!(std::io::stdout().lock(), "{}", with_newline(out));
    Ok(())
}

fn with_newline(mut text: String) -> String {
    if !text.ends_with('\n') {
        text.push('\n');
    }
    text
}

#[cfg(test)]
mod tests {
    /// The docs (docs/src/operations.md) show the roles of `rbac.yaml` as they are, so that
    /// what people copy is what the end-to-end test applies.
    #[test]
    fn the_docs_show_the_rbac_that_the_tests_apply() {
        let dir = env!("CARGO_MANIFEST_DIR");
        let rbac = std::fs::read_to_string(format!("{dir}/rbac.yaml")).expect("rbac.yaml");
        let docs = std::fs::read_to_string(format!("{dir}/../docs/src/operations.md"))
            .expect("docs/src/operations.md");
        assert!(
            docs.contains(&format!("```yaml\n{rbac}```")),
            "docs/src/operations.md must show kubectl-reboot/rbac.yaml verbatim in a yaml block"
        );
    }
}
