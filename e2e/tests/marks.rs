//! Labels and a taint around a reboot (kured's `--pre-reboot-node-labels`,
//! `--post-reboot-node-labels`, `--prefer-no-schedule-taint`), end to end on the real control
//! plane with the real controller and agents on simulated nodes.
//!
//! An independent observer watches every version of every node: the pre-reboot labels are
//! never on a node without a grant or a reboot under way, and the taint never appears on a
//! node without a request; and it records that each mark was seen where it belongs, so that a feature
//! that set nothing cannot pass.

use common::{ControllerReason, NodeFacts};
use e2e::{
    BudgetWatch, NodeState, PENDING_TAINT, has_pending_taint, kubectl, node,
    rollout::{all_back_in, annotate_ledger},
    wait_until,
};
use k8s_openapi::api::core::v1::Node;
use kube::{
    Api, Client,
    api::{Patch, PatchParams},
    runtime::watcher,
};
use nodesim::{
    observe::{Observe, ResumingWatch},
    sandbox::{Sandbox, SandboxConfig},
};
use std::{
    collections::{BTreeMap, BTreeSet},
    time::Duration,
};

const PRE: (&str, &str) = ("example.com/rebooting", "true");
const PHASE: Duration = Duration::from_secs(120);

#[derive(Debug, Default)]
struct Marks {
    /// The labels an administrator set, by node: once a version shows one, every later version
    /// must show it as it was (the operator never overwrites or removes it).
    admins: BTreeMap<String, BTreeMap<String, String>>,
    /// The administrator's labels seen on their node, as `(node, key)`.
    admins_seen: BTreeSet<(String, String)>,
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

impl Marks {
    /// The administrator's label `key` on node `name`, with its value.
    fn admins_label(&self, name: &str, key: &str) -> Option<&String> {
        self.admins.get(name).and_then(|labels| labels.get(key))
    }

    /// A version of node `name` whose administrator's labels are not as they were set.
    fn admins_labels_changed(&mut self, name: &str, n: &Node) -> Option<String> {
        let labels = n.metadata.labels.clone().unwrap_or_default();
        for (key, value) in self.admins.get(name).cloned().unwrap_or_default() {
            let seen = (name.to_owned(), key.clone());
            if labels.get(&key) == Some(&value) {
                self.admins_seen.insert(seen);
            } else if self.admins_seen.contains(&seen) {
                return Some(format!(
                    "the administrator's label {key}={value:?} is now {:?}",
                    labels.get(&key)
                ));
            }
        }
        None
    }

    fn record(&mut self, n: &Node) {
        let name = n.metadata.name.clone().unwrap_or_default();
        let state = NodeState::of(n);
        if let (Some(what), None) = (self.admins_labels_changed(&name, n), &self.violation) {
            self.violation = Some(format!("{name} at revision {}: {what}", state.revision));
        }
        let admins_pre_label = self.admins_label(&name, PRE.0).map(String::as_str) == Some(PRE.1);
        let has = |key: &str| state.annotations.iter().any(|a| a == key);
        let granted = has("reboot-grant");
        let rebooting = has("reboot-now") || has("reboot-in-progress") || has("reboot-done");
        let requested = has("reboot-needed");
        if has_pre_label(n) && granted {
            self.labelled_with_grant.insert(name.clone());
        }
        if has_pending_taint(n) && requested && !granted {
            self.tainted_while_waiting.insert(name.clone());
        }
        let violation = if has_pre_label(n) && !granted && !rebooting && !admins_pre_label {
            Some("the pre-reboot label without a grant or a reboot under way")
        } else if has_pending_taint(n) && !self.tainted.contains(&name) && !requested {
            // Withdrawn, a request leaves its taint until the controller's next write.
            Some("the waiting taint put on a node that waits for nothing")
        } else {
            None
        };
        if has_pending_taint(n) {
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
    sandbox_with(SandboxConfig::with_nodes(3), &[]).await
}

/// The marks of [`sandbox`], with `more` flags.
async fn sandbox_with(config: SandboxConfig, more: &[&str]) -> Sandbox {
    let mut args = vec![
        format!("--pre-reboot-node-labels={}={},lb=out", PRE.0, PRE.1),
        "--post-reboot-node-labels=lb=in".to_owned(),
        format!("--prefer-no-schedule-taint={PENDING_TAINT}"),
    ];
    args.extend(more.iter().map(|a| (*a).to_owned()));
    e2e::sandbox_without_pods(config.controller_args(args)).await
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
            all_back_in(&sb.fleet, &client, &["sim-1", "sim-2"], 1).await
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
    annotate_ledger(cp, "reboot-paused=true");
    kubectl(cp, &["annotate", "node", "sim-3", "reboot-needed=true"]);
    wait_until(
        "sim-3 is tainted while paused",
        PHASE,
        Some(&budget),
        || async {
            marks.check();
            has_pending_taint(&node(&client, "sim-3").await)
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
            !has_pending_taint(&n) && NodeState::of(&n).annotations.is_empty()
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

/// The labels of a node that `--pre-reboot-node-labels` and `--post-reboot-node-labels` set,
/// as `kubectl get node` shows them (`-`: no such label).
fn mark_labels(sb: &Sandbox, name: &str) -> String {
    let labels = kubectl(
        &sb.control_plane,
        &["get", "node", name, "-o", "jsonpath={.metadata.labels}"],
    );
    let labels: BTreeMap<String, String> = serde_json::from_str(&labels).expect("labels");
    let shown = |key: &str| labels.get(key).map_or("-".to_owned(), |v| format!("{v:?}"));
    format!("lb={} rebooting={}", shown("lb"), shown(PRE.0))
}

/// An administrator labels `name` with `labels` (`key=value`), and the observer knows them.
fn label_as_administrator(sb: &Sandbox, marks: &MarksWatch, name: &str, labels: &[&str]) {
    marks.0.with_mut(|m| {
        let admins = m.admins.entry(name.to_owned()).or_default();
        for label in labels {
            let (key, value) = label.split_once('=').expect("key=value");
            admins.insert(key.to_owned(), value.to_owned());
        }
    });
    let mut args = vec!["label", "node", name];
    args.extend(labels);
    kubectl(&sb.control_plane, &args);
}

/// Labels of the keys `--pre-reboot-node-labels` sets, already on the node (an
/// administrator's: kubeadm puts `node.kubernetes.io/exclude-from-external-load-balancers`
/// on control-plane nodes), at the same value and at another: left as they are through the
/// reboot and after it, never recorded as the operator's, and said so in a Warning.
#[tokio::test(flavor = "multi_thread")]
async fn labels_a_node_already_has_are_left_as_they_are_through_its_reboot() {
    let sb = sandbox().await;
    let client = sb.client.clone();
    let marks = MarksWatch::start(client.clone()).await;
    let budget = BudgetWatch::start(client.clone(), 1).await;
    let same = format!("{}={}", PRE.0, PRE.1);
    label_as_administrator(&sb, &marks, "sim-1", &[&same, "lb=admin"]);
    // Only the label the node lacks is the operator's, set and removed.
    label_as_administrator(&sb, &marks, "sim-2", &["lb="]);
    e2e::request_reboot(&sb.control_plane, "sim-1");
    e2e::request_reboot(&sb.control_plane, "sim-2");
    wait_until(
        "sim-1 and sim-2 are rebooted",
        PHASE,
        Some(&budget),
        || async {
            marks.check();
            all_back_in(&sb.fleet, &client, &["sim-1", "sim-2"], 1).await
        },
    )
    .await;
    marks.check();
    assert_eq!(mark_labels(&sb, "sim-1"), "lb=\"admin\" rebooting=\"true\"");
    assert_eq!(mark_labels(&sb, "sim-2"), "lb=\"\" rebooting=-");
    let labelled = marks.0.with(|m| m.labelled_with_grant.clone());
    assert!(
        labelled.contains("sim-2"),
        "sim-2 carried the label it lacked while it held its grant: {labelled:?}"
    );
    for (name, words) in [("sim-1", &["lb=admin", &same][..]), ("sim-2", &["lb="][..])] {
        e2e::wait_for_event(
            &client,
            name,
            ControllerReason::LabelKept,
            words,
            Some(&budget),
        )
        .await;
    }
}

/// The same, when the node is given back before its reboot (the request withdrawn) or given
/// up (`reboot-abandon`): the operator removes only the label it set.
#[tokio::test(flavor = "multi_thread")]
async fn labels_a_node_already_has_are_left_as_they_are_when_it_is_given_back_or_up() {
    // The drain delay keeps both granted nodes cordoned, short of `reboot-now`, meanwhile.
    let config = SandboxConfig::with_nodes(3).max_unavailable("2");
    let sb = sandbox_with(config, &["--drain-delay=10m"]).await;
    let client = sb.client.clone();
    let cp = &sb.control_plane;
    let marks = MarksWatch::start(client.clone()).await;
    let budget = BudgetWatch::start(client.clone(), 2).await;
    label_as_administrator(&sb, &marks, "sim-1", &["lb=admin"]);
    label_as_administrator(&sb, &marks, "sim-2", &[&format!("{}=admin", PRE.0)]);
    kubectl(
        cp,
        &["annotate", "node", "sim-1", "sim-2", "reboot-needed=true"],
    );
    wait_until("both are claimed", PHASE, Some(&budget), || async {
        marks.check();
        let mut claimed = true;
        for name in ["sim-1", "sim-2"] {
            claimed &= NodeState::of(&node(&client, name).await)
                .annotations
                .iter()
                .any(|a| a == "reboot-grant");
        }
        claimed
    })
    .await;
    assert_eq!(mark_labels(&sb, "sim-1"), "lb=\"admin\" rebooting=\"true\"");
    assert_eq!(mark_labels(&sb, "sim-2"), "lb=\"out\" rebooting=\"admin\"");
    kubectl(cp, &["annotate", "node", "sim-1", "reboot-needed-"]);
    kubectl(cp, &["annotate", "node", "sim-2", "reboot-abandon=e2e"]);
    wait_until("both are given back", PHASE, Some(&budget), || async {
        marks.check();
        let mut back = true;
        for name in ["sim-1", "sim-2"] {
            let state = NodeState::of(&node(&client, name).await);
            back &= state.annotations.is_empty() && !state.unschedulable;
        }
        back
    })
    .await;
    marks.check();
    assert_eq!(mark_labels(&sb, "sim-1"), "lb=\"admin\" rebooting=-");
    assert_eq!(mark_labels(&sb, "sim-2"), "lb=- rebooting=\"admin\"");
    assert_eq!(sb.fleet.reboots("sim-1") + sb.fleet.reboots("sim-2"), 0);
}

/// The guard under the rule, on the real API server: the claim tests that each label it adds
/// is still absent, so a label an administrator added after the controller's read fails the
/// write instead of being overwritten (the claim's own test of the node's version aside).
#[tokio::test(flavor = "multi_thread")]
async fn a_label_added_after_the_read_fails_the_claim_instead_of_being_overwritten() {
    let sb = e2e::sandbox_without_pods(SandboxConfig::with_nodes(2).no_controller()).await;
    let client = sb.client.clone();
    let cp = &sb.control_plane;
    kubectl(
        cp,
        &["annotate", "node", "sim-1", "sim-2", "reboot-needed=true"],
    );
    let keys = common::AnnotationKeys::default();
    let marks = common::RebootMarks {
        pre_reboot_labels: BTreeMap::from([("lb".to_owned(), "out".to_owned())]),
        ..common::RebootMarks::default()
    };
    let t = common::Transition::new(&keys).with_marks(&marks);
    let nodes = Api::<Node>::all(client.clone());
    let claim = |read: &NodeFacts, version: &str| {
        Patch::Json::<()>(t.claim(read, "g1", version, false, "2026-01-01T00:00:00Z"))
    };
    let version = |n: &Node| n.metadata.resource_version.clone().expect("a version");

    // Absent as read and as written: the test of absence passes, the label is set.
    let read = node(&client, "sim-2").await;
    let patched = nodes
        .patch(
            "sim-2",
            &PatchParams::default(),
            &claim(&NodeFacts::from_node(&read), &version(&read)),
        )
        .await;
    assert!(patched.is_ok(), "{patched:?}");
    assert_eq!(mark_labels(&sb, "sim-2"), "lb=\"out\" rebooting=-");

    // Added after the read: refused, even at the node's current version.
    let read = NodeFacts::from_node(&node(&client, "sim-1").await);
    kubectl(cp, &["label", "node", "sim-1", "lb=admin"]);
    let now = version(&node(&client, "sim-1").await);
    let refused = nodes
        .patch("sim-1", &PatchParams::default(), &claim(&read, &now))
        .await;
    assert!(
        matches!(&refused, Err(kube::Error::Api(status)) if status.code == 422),
        "{refused:?}"
    );
    assert_eq!(mark_labels(&sb, "sim-1"), "lb=\"admin\" rebooting=-");

    // Read again: the label is there, so the claim leaves it alone and goes through.
    let read = node(&client, "sim-1").await;
    let patched = nodes
        .patch(
            "sim-1",
            &PatchParams::default(),
            &claim(&NodeFacts::from_node(&read), &version(&read)),
        )
        .await;
    assert!(patched.is_ok(), "{patched:?}");
    assert_eq!(mark_labels(&sb, "sim-1"), "lb=\"admin\" rebooting=-");
}
