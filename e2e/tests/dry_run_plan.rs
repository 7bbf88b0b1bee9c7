//! `--dry-run` says the whole rollout, on the real control plane: besides the writes of the
//! round, the controller logs the waves it would carry out, in order, and what no wave reaches.

use e2e::{label_node, wait_until};
use nodesim::sandbox::SandboxConfig;
use std::{collections::BTreeSet, time::Duration};

#[tokio::test(flavor = "multi_thread")]
async fn a_dry_run_logs_every_wave_of_the_rollout_in_order() {
    let config = SandboxConfig::with_nodes(5)
        .max_unavailable("2")
        .controller_args(["--dry-run"]);
    let sb = e2e::sandbox_without_pods(config).await;
    let names = sb.fleet.names();
    label_node(&sb.control_plane, &names[4], "reboot-disabled=true");
    e2e::every_node::request(&sb.control_plane);
    let log = sb.controllers[0].log_path().clone();
    let plan_lines = || {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        text.lines()
            .filter_map(|l| l.split_once("dry run: rollout plan: "))
            // The text log puts the fields after the message.
            .map(|(_, p)| {
                p.trim_end()
                    .trim_end_matches("dry_run=true")
                    .trim_end()
                    .to_owned()
            })
            .collect::<Vec<_>>()
    };
    wait_until(
        "the log says the rollout wave by wave",
        Duration::from_secs(60),
        None,
        || async {
            let lines = plan_lines();
            lines
                .iter()
                .any(|l| l.starts_with("wave 2 (after wave 1): "))
                && lines.iter().any(|l| l.starts_with("not planned: "))
        },
    )
    .await;
    let lines = plan_lines();
    // The last plan said: its waves, from the last `wave 1` on.
    let last = lines
        .iter()
        .rposition(|l| l.starts_with("wave 1 "))
        .expect("a first wave");
    let said = &lines[last..];
    let wave = |prefix: &str| -> BTreeSet<String> {
        said.iter()
            .find_map(|l| l.strip_prefix(prefix))
            .unwrap_or_else(|| panic!("no `{prefix}` in {said:?}"))
            .split(", ")
            .map(str::to_owned)
            .collect()
    };
    let first = wave("wave 1 (starts now): ");
    let second = wave("wave 2 (after wave 1): ");
    assert_eq!((first.len(), second.len()), (2, 2), "{said:?}");
    let planned: BTreeSet<String> = first.union(&second).cloned().collect();
    let requested: BTreeSet<String> = names[..4].iter().cloned().collect();
    assert_eq!(planned, requested, "{said:?}");
    assert_eq!(
        said.last().map(String::as_str),
        Some(format!("not planned: {} (opted out)", names[4]).as_str()),
        "{said:?}"
    );
}
