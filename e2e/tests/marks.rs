//! Labels and a taint around a reboot (kured's `--pre-reboot-node-labels`,
//! `--post-reboot-node-labels`, `--prefer-no-schedule-taint`), end to end on the real control
//! plane with the real controller and agents on simulated nodes.
//!
//! An independent observer watches every version of every node: the pre-reboot labels are
//! never on a node without a grant or a reboot under way, and the taint never appears on a
//! node without a request; and it records that each mark was seen where it belongs, so that a feature
//! that set nothing cannot pass.

use common::NodeFacts;
use e2e::{BudgetWatch, NodeState, kubectl, node, wait_until};
use k8s_openapi::api::core::v1::Node;
use kube::{Api, Client, runtime::watcher};
use nodesim::{
    observe::{Observe, ResumingWatch},
    sandbox::{Sandbox, SandboxConfig},
};
use std::{collections::BTreeSet, time::Duration};

const PRE: (&str, &str) = ("example.com/rebooting", "true");
const TAINT: &str = "example.com/reboot-pending";
const PHASE: Duration = Duration::from_secs(120);

#[derive(Debug, Default)]
struct Marks {
    /// Nodes seen with the pre-reboot label while holding a grant.
    labelled_with_grant: BTreeSet<String>,
    /// Nodes seen tainted while they waited (requested, no grant).
    tainted_while_waiting: BTreeSet<String>,
    /// Nodes whose last version seen had the taint.
    tainted: BTreeSet<String>,
    violation: Option<String>,
}

fn has_pre_label(n: &Node) -> bool {
    n.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(PRE.0))
        .is_some_and(|v| v == PRE.1)
}

fn has_taint(n: &Node) -> bool {
    NodeFacts::from_node(n)
        .taints
        .unwrap_or_default()
        .iter()
        .any(|(k, e)| k == TAINT && e == "PreferNoSchedule")
}

impl Marks {
    fn record(&mut self, n: &Node) {
        let name = n.metadata.name.clone().unwrap_or_default();
        let state = NodeState::of(n);
        let has = |key: &str| state.annotations.iter().any(|a| a == key);
        let granted = has("reboot-grant");
        let rebooting = has("reboot-now") || has("reboot-in-progress") || has("reboot-done");
        let requested = has("reboot-needed");
        if has_pre_label(n) && granted {
            self.labelled_with_grant.insert(name.clone());
        }
        if has_taint(n) && requested && !granted {
            self.tainted_while_waiting.insert(name.clone());
        }
        let violation = if has_pre_label(n) && !granted && !rebooting {
            Some("the pre-reboot label without a grant or a reboot under way")
        } else if has_taint(n) && !self.tainted.contains(&name) && !requested {
            // Withdrawn, a request leaves its taint until the controller's next write.
            Some("the waiting taint put on a node that waits for nothing")
        } else {
            None
        };
        if has_taint(n) {
            self.tainted.insert(name.clone());
        } else {
            self.tainted.remove(&name);
        }
        if let (Some(what), None) = (violation, &self.violation) {
            self.violation = Some(format!("{name} at revision {}: {what}", state.revision));
        }
    }
}

impl Observe<Node> for Marks {
    fn listed(&mut self, nodes: &[Node]) {
        nodes.iter().for_each(|n| self.record(n));
    }

    fn applied(&mut self, node: &Node) {
        self.record(node);
    }

    fn deleted(&mut self, _: &Node) {}
}

struct MarksWatch(ResumingWatch<Marks>);

impl MarksWatch {
    async fn start(client: Client) -> Self {
        let watch = ResumingWatch::start(
            Api::<Node>::all(client),
            watcher::Config::default(),
            "every Node (labels and taint)",
            Marks::default(),
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
        Self(watch)
    }

    fn check(&self) {
        if let Some(violation) = self.0.with(|m| m.violation.clone()) {
            panic!("{violation}");
        }
        self.0.check().unwrap_or_else(|e| panic!("{e}"));
    }
}

async fn sandbox() -> Sandbox {
    let args = [
        &format!("--pre-reboot-node-labels={}={},lb=out", PRE.0, PRE.1),
        "--post-reboot-node-labels=lb=in",
        &format!("--prefer-no-schedule-taint={TAINT}"),
    ];
    e2e::sandbox_without_pods(SandboxConfig::with_nodes(3).controller_args(args)).await
}

fn completed(n: &Node) -> bool {
    let state = NodeState::of(n);
    state.last_completed.is_some() && state.annotations.is_empty() && !state.unschedulable
}

/// What `kubectl get node` shows of the marks: the `lb` label, the pre-reboot label and the
/// taint keys (but the `node.kubernetes.io/` ones the node's own conditions bring).
fn shown(sb: &Sandbox, name: &str) -> String {
    let get = |path: &str| {
        kubectl(
            &sb.control_plane,
            &["get", "node", name, "-o", &format!("jsonpath={path}")],
        )
    };
    let lb = get("{.metadata.labels.lb}");
    let rebooting = get("{.metadata.labels.example\\.com/rebooting}");
    let taints = get("{.spec.taints[*].key}");
    let taints: Vec<&str> = taints
        .split_whitespace()
        .filter(|key| !key.starts_with("node.kubernetes.io/"))
        .collect();
    format!("lb={lb} rebooting={rebooting} taints={}", taints.join(","))
}

#[tokio::test(flavor = "multi_thread")]
async fn labels_and_the_taint_mark_a_reboot_and_are_gone_when_it_is_done() {
    let sb = sandbox().await;
    let client = sb.client.clone();
    let cp = &sb.control_plane;
    let marks = MarksWatch::start(client.clone()).await;
    let budget = BudgetWatch::start(client.clone(), 1).await;
    // An administrator's taint of another key stays where it is, before and after ours.
    kubectl(
        cp,
        &["taint", "node", "sim-2", "example.com/admin=x:NoSchedule"],
    );
    // Two at once with a budget of 1: one reboots while the other waits, tainted.
    kubectl(
        cp,
        &["annotate", "node", "sim-1", "sim-2", "reboot-needed=true"],
    );
    wait_until(
        "sim-1 and sim-2 are rebooted",
        PHASE,
        Some(&budget),
        || async {
            marks.check();
            let mut done = true;
            for name in ["sim-1", "sim-2"] {
                done &= sb.fleet.reboots(name) == 1 && completed(&node(&client, name).await);
            }
            done
        },
    )
    .await;
    marks.check();
    for name in ["sim-1", "sim-2"] {
        assert_eq!(
            shown(&sb, name),
            if name == "sim-2" {
                "lb=in rebooting= taints=example.com/admin"
            } else {
                "lb=in rebooting= taints="
            },
            "{name}: the post-reboot label replaced the pre-reboot one, and our taint is gone"
        );
    }
    let (labelled, waited) = marks.0.with(|m| {
        (
            m.labelled_with_grant.clone(),
            m.tainted_while_waiting.clone(),
        )
    });
    assert_eq!(
        labelled,
        BTreeSet::from(["sim-1".to_owned(), "sim-2".to_owned()]),
        "each node carried the pre-reboot labels while it held its grant"
    );
    assert_eq!(
        waited.len(),
        1,
        "the node that waited for the other was tainted: {waited:?}"
    );

    // A request held by a pause waits tainted; withdrawn, the taint goes with it.
    kubectl(
        cp,
        &[
            "annotate",
            "lease",
            "-n",
            common::ledger::OPERATOR_NAMESPACE,
            common::ledger::LEDGER_NAME,
            "reboot-paused=true",
        ],
    );
    kubectl(cp, &["annotate", "node", "sim-3", "reboot-needed=true"]);
    wait_until(
        "sim-3 is tainted while paused",
        PHASE,
        Some(&budget),
        || async {
            marks.check();
            has_taint(&node(&client, "sim-3").await)
        },
    )
    .await;
    kubectl(cp, &["annotate", "node", "sim-3", "reboot-needed-"]);
    wait_until(
        "the taint leaves with the request",
        PHASE,
        Some(&budget),
        || async {
            marks.check();
            let n = node(&client, "sim-3").await;
            !has_taint(&n) && NodeState::of(&n).annotations.is_empty()
        },
    )
    .await;
    marks.check();
    assert_eq!(
        sb.fleet.reboots("sim-3"),
        0,
        "the withdrawn request rebooted nothing"
    );
    assert_eq!(shown(&sb, "sim-3"), "lb= rebooting= taints=");
}
