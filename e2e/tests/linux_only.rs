//! The agent's image is a Linux binary, and its DaemonSet tolerates every taint: without a
//! node selector it would land on the Windows nodes of a mixed cluster and never start there.
//! Both ways of installing select `kubernetes.io/os: linux` (the chart renders what
//! `manifests/` holds with its default values: `helm.rs` checks that).

use std::path::Path;

fn read(relative: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(relative);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The non-empty lines of the block under the line `key` (those indented deeper).
fn block<'a>(text: &'a str, key: &str) -> Vec<&'a str> {
    let mut lines = text.lines().skip_while(|l| *l != key);
    let Some(first) = lines.next() else {
        panic!("no line `{key}`")
    };
    let indent = first.len() - first.trim_start().len();
    lines
        .take_while(|l| l.trim().is_empty() || l.len() - l.trim_start().len() > indent)
        .filter(|l| !l.trim().is_empty())
        .collect()
}

#[test]
fn the_agent_runs_on_linux_nodes_only() {
    let manifest = read("manifests/agent-daemonset.yaml");
    assert_eq!(
        block(&manifest, "      nodeSelector:"),
        ["        kubernetes.io/os: linux"],
        "manifests/agent-daemonset.yaml: the pod's nodeSelector"
    );
    let values = read("charts/node-reboot-operator/values.yaml");
    let agent = block(&values, "agent:").join("\n");
    assert_eq!(
        block(&agent, "  nodeSelector:"),
        ["    kubernetes.io/os: linux"],
        "charts/node-reboot-operator/values.yaml: agent.nodeSelector"
    );
}
