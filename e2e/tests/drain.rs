//! Draining before every reboot (docs/src/concepts.md, "Drain"), on a control plane with the
//! scheduler and the controller-manager, so that Deployments, DaemonSets and PodDisruptionBudgets
//! are real.

use common::ControllerReason;
use e2e::pod_is_ready;
use e2e::{
    BudgetWatch, apply, has_event, kubectl, node, node_events, pod_that_blocks_the_drain_of,
    protocol_annotations, request_reboot, wait_for_event, wait_until,
    wait_until_the_budget_allows_no_disruption,
};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::{Api, Client, api::ListParams, runtime::watcher};
use nodesim::{
    ControllerProcess,
    observe::{Observe, ResumingWatch},
    sandbox::{Sandbox, SandboxConfig},
};
use std::{
    collections::{BTreeMap, BTreeSet},
    path::PathBuf,
    time::Duration,
};

const ROLLOUT: Duration = Duration::from_secs(240);
/// Grants a node though a PodDisruptionBudget at 0 covers one of its pods, for the tests of a
/// drain that such a budget blocks.
const NO_PDB_CHECK: &str = "--check-disruption-budgets=false";

async fn sandbox(nodes: usize, max_unavailable: &str, controller_args: &[&str]) -> Sandbox {
    e2e::sandbox_with_pods(nodes, max_unavailable, controller_args).await
}

async fn ready_pods(client: &Client, selector: &str) -> Vec<Pod> {
    let pods = Api::<Pod>::namespaced(client.clone(), "default")
        .list(&ListParams::default().labels(selector))
        .await
        .expect("list pods");
    pods.items.into_iter().filter(pod_is_ready).collect()
}

/// The fewest Ready replicas seen after the first moment all of them were Ready.
struct Floor {
    full: usize,
    ready: BTreeMap<String, bool>,
    min_after_full: Option<usize>,
}

impl Floor {
    fn record(&mut self, pod: &Pod) {
        self.ready.insert(
            pod.metadata.uid.clone().unwrap_or_default(),
            pod_is_ready(pod),
        );
    }

    fn count(&mut self) {
        let count = self.ready.values().filter(|r| **r).count();
        self.min_after_full = match self.min_after_full {
            None if count >= self.full => Some(count),
            Some(m) => Some(m.min(count)),
            None => None,
        };
    }
}

impl Observe<Pod> for Floor {
    fn listed(&mut self, pods: &[Pod]) {
        self.ready.clear();
        pods.iter().for_each(|p| self.record(p));
        self.count();
    }

    fn applied(&mut self, pod: &Pod) {
        self.record(pod);
        self.count();
    }

    fn deleted(&mut self, pod: &Pod) {
        self.ready
            .remove(pod.metadata.uid.as_deref().unwrap_or_default());
        self.count();
    }
}

/// Watches pods independently of the operator (resuming after errors) and records the fewest
/// Ready replicas seen after the first moment all of them were Ready.
struct ReadyFloor {
    watch: ResumingWatch<Floor>,
}

impl ReadyFloor {
    async fn start(client: Client, selector: &str, full: usize) -> ReadyFloor {
        let floor = Floor {
            full,
            ready: BTreeMap::new(),
            min_after_full: None,
        };
        let config = watcher::Config::default().labels(selector);
        let watch = ResumingWatch::start(
            Api::<Pod>::namespaced(client, "default"),
            config,
            format!("pods {selector}"),
            floor,
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
        ReadyFloor { watch }
    }

    fn min(&self) -> Option<usize> {
        self.watch.check().unwrap();
        self.watch.with(|f| f.min_after_full)
    }
}

const WEB: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: default}
spec:
  replicas: 6
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
  minAvailable: 5
  selector: {matchLabels: {app: web}}
---
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: node-agent, namespace: default}
spec:
  selector: {matchLabels: {app: node-agent}}
  template:
    metadata: {labels: {app: node-agent}}
    spec:
      containers: [{name: agent, image: registry.example/agent:1}]
"#;

async fn pod_uids(client: &Client, selector: &str) -> BTreeSet<String> {
    ready_pods(client, selector)
        .await
        .into_iter()
        .filter_map(|p| p.metadata.uid)
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_rollout_keeps_the_pod_disruption_budget_and_leaves_daemonset_pods_alone() {
    let sb = sandbox(4, "2", &[]).await;
    apply(&sb.control_plane, WEB);
    wait_until(
        "6 web replicas and 4 node-agent pods are Ready",
        ROLLOUT,
        None,
        || async {
            ready_pods(&sb.client, "app=web").await.len() == 6
                && ready_pods(&sb.client, "app=node-agent").await.len() == 4
        },
    )
    .await;
    let floor = ReadyFloor::start(sb.client.clone(), "app=web", 6).await;
    let daemon_pods = pod_uids(&sb.client, "app=node-agent").await;
    let watch = BudgetWatch::start(sb.client.clone(), 2).await;
    e2e::every_node::request(&sb.control_plane);
    wait_until(
        "every node rebooted once and back",
        ROLLOUT,
        Some(&watch),
        || async {
            for name in sb.fleet.names() {
                let n = node(&sb.client, &name).await;
                if sb.fleet.reboots(&name) != 1 || !protocol_annotations(&n).is_empty() {
                    return false;
                }
            }
            true
        },
    )
    .await;
    wait_until(
        "6 web replicas Ready again",
        ROLLOUT,
        Some(&watch),
        || async { ready_pods(&sb.client, "app=web").await.len() == 6 },
    )
    .await;
    let min = floor.min().expect("the watcher saw 6 Ready replicas");
    assert!(
        min >= 5,
        "only {min} Ready replicas at one point: the PodDisruptionBudget was broken"
    );
    assert_eq!(
        pod_uids(&sb.client, "app=node-agent").await,
        daemon_pods,
        "DaemonSet pods were evicted"
    );
    let reasons: Vec<String> = node_events(&sb.client, "sim-1")
        .await
        .into_iter()
        .map(|e| e.0)
        .collect();
    assert!(
        reasons.contains(&ControllerReason::Draining.to_string()),
        "{reasons:?}"
    );
    sb.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_drain_that_times_out_gives_the_slot_to_another_node() {
    // The drain must start though the budget allows no disruption (the pre-flight would
    // not grant the node).
    let sb = sandbox(3, "1", &["--drain-timeout", "6s", NO_PDB_CHECK]).await;
    apply(&sb.control_plane, &pod_that_blocks_the_drain_of("sim-1"));
    wait_until_the_budget_allows_no_disruption(&sb.control_plane).await;
    let watch = BudgetWatch::start(sb.client.clone(), 1).await;
    request_reboot(&sb.control_plane, "sim-1");
    wait_until("sim-1 is draining", ROLLOUT, Some(&watch), || async {
        has_event(&sb.client, "sim-1", ControllerReason::Draining, &[]).await
    })
    .await;
    request_reboot(&sb.control_plane, "sim-2");
    wait_for_event(
        &sb.client,
        "sim-1",
        ControllerReason::DrainBlocked,
        &["default/precious", "never-disrupt"],
        Some(&watch),
    )
    .await;
    wait_until(
        "sim-2 is rebooted meanwhile",
        ROLLOUT,
        Some(&watch),
        || async { sb.fleet.reboots("sim-2") == 1 },
    )
    .await;
    let sim1 = node(&sb.client, "sim-1").await;
    assert_ne!(
        sim1.spec.as_ref().and_then(|s| s.unschedulable),
        Some(true),
        "sim-1 was uncordoned"
    );
    assert_eq!(
        protocol_annotations(&sim1),
        vec!["reboot-needed".to_owned()],
        "the request is kept"
    );
    assert_eq!(sb.fleet.reboots("sim-1"), 0);
    let warning = kubectl(
        &sb.control_plane,
        &[
            "get",
            "events",
            "--field-selector",
            "involvedObject.name=sim-1,type=Warning",
        ],
    );
    assert!(warning.contains("DrainBlocked"), "{warning}");
    sb.stop().await;
}

const PAIR: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: pair, namespace: default}
spec:
  replicas: 2
  selector: {matchLabels: {app: pair}}
  template:
    metadata: {labels: {app: pair}}
    spec:
      nodeSelector: {kubernetes.io/hostname: sim-1}
      containers: [{name: c, image: registry.example/pair:1}]
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: pair, namespace: default}
spec:
  minAvailable: 2
  selector: {matchLabels: {app: pair}}
"#;

#[tokio::test(flavor = "multi_thread")]
async fn a_drain_resumes_after_the_controller_is_killed() {
    // The drain must start though the budget allows no disruption (the pre-flight would
    // not grant the node).
    let mut sb = sandbox(2, "1", &[NO_PDB_CHECK]).await;
    apply(&sb.control_plane, PAIR);
    wait_until("2 pair replicas Ready on sim-1", ROLLOUT, None, || async {
        ready_pods(&sb.client, "app=pair").await.len() == 2
    })
    .await;
    let watch = BudgetWatch::start(sb.client.clone(), 1).await;
    request_reboot(&sb.control_plane, "sim-1");
    wait_until("sim-1 is draining", ROLLOUT, Some(&watch), || async {
        has_event(&sb.client, "sim-1", ControllerReason::Draining, &[]).await
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    sb.controllers[0].kill().await;
    // With the controller down, the budget is relaxed: only a resumed drain can finish now.
    kubectl(
        &sb.control_plane,
        &[
            "patch",
            "pdb",
            "pair",
            "--type=merge",
            "-p",
            r#"{"spec":{"minAvailable":0}}"#,
        ],
    );
    sb.controllers[0]
        .restart()
        .await
        .expect("controller restarts");
    wait_until(
        "sim-1 is rebooted after the drain resumed",
        ROLLOUT,
        Some(&watch),
        || async {
            sb.fleet.reboots("sim-1") == 1
                && protocol_annotations(&node(&sb.client, "sim-1").await).is_empty()
        },
    )
    .await;
    let drains = node_events(&sb.client, "sim-1")
        .await
        .into_iter()
        .filter(|e| e.0 == ControllerReason::Draining.as_str())
        .count();
    assert!(
        drains >= 2,
        "the drain was started again after the restart ({drains} Draining Events)"
    );
    sb.stop().await;
}

const BARE: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: loner, namespace: default}
spec:
  nodeName: sim-1
  containers: [{name: c, image: registry.example/loner:1}]
"#;

#[tokio::test(flavor = "multi_thread")]
async fn a_bare_pod_is_evicted_with_a_warning_that_it_will_not_come_back() {
    let sb = sandbox(2, "1", &[]).await;
    apply(&sb.control_plane, BARE);
    wait_until("the bare pod runs", ROLLOUT, None, || async {
        Api::<Pod>::namespaced(sb.client.clone(), "default")
            .get_opt("loner")
            .await
            .ok()
            .flatten()
            .is_some_and(|p| pod_is_ready(&p))
    })
    .await;
    request_reboot(&sb.control_plane, "sim-1");
    wait_until("sim-1 is rebooted", ROLLOUT, None, || async {
        sb.fleet.reboots("sim-1") == 1
    })
    .await;
    let gone = Api::<Pod>::namespaced(sb.client.clone(), "default")
        .get_opt("loner")
        .await
        .unwrap();
    assert!(gone.is_none(), "the bare pod was evicted");
    let events = node_events(&sb.client, "sim-1").await;
    assert!(
        events
            .iter()
            .any(|(_, _, m)| m.contains("default/loner") && m.contains("will not come back")),
        "{events:?}"
    );
    sb.stop().await;
}

/// A pod `freed-<suffix>` labelled `app: freed`, bound to `node`.
fn freed_pod(suffix: &str, node: &str) -> String {
    format!(
        r#"
apiVersion: v1
kind: Pod
metadata: {{name: freed-{suffix}, namespace: default, labels: {{app: freed}}}}
spec:
  nodeName: {node}
  automountServiceAccountToken: false
  containers: [{{name: c, image: registry.example/freed:1}}]
"#
    )
}

const FREED_BUDGET: &str = r#"
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: freed, namespace: default}
spec:
  minAvailable: 2
  selector: {matchLabels: {app: freed}}
"#;

/// Two pods of a budget that allows one disruption on sim-1, a third on sim-2: the drain of
/// sim-1 evicts one and is refused the other (429) until a fourth pod is Ready on sim-2. The
/// backoff's first wait is 24 minutes here (a 25th of 10 hours), longer than the test waits, so
/// only the budget watch can evict it again: as soon as the budget allows a disruption.
#[tokio::test(flavor = "multi_thread")]
async fn an_eviction_a_budget_refused_is_tried_again_as_soon_as_the_budget_frees() {
    let sb = sandbox(2, "1", &["--eviction-retry-max-delay=10h"]).await;
    let address = sb.controllers[0]
        .metrics_address()
        .expect("metrics address");
    let pods = [("a", "sim-1"), ("b", "sim-1"), ("c", "sim-2")];
    let manifest: Vec<String> = pods.iter().map(|(s, n)| freed_pod(s, n)).collect();
    apply(
        &sb.control_plane,
        &format!("{}---{FREED_BUDGET}", manifest.join("---")),
    );
    wait_until(
        "3 freed pods Ready, the budget allowing one disruption",
        ROLLOUT,
        None,
        || async {
            let budget = kubectl(
                &sb.control_plane,
                &[
                    "get",
                    "pdb",
                    "freed",
                    "-o",
                    "jsonpath={.status.disruptionsAllowed}",
                ],
            );
            ready_pods(&sb.client, "app=freed").await.len() == 3 && budget.trim() == "1"
        },
    )
    .await;
    let watch = BudgetWatch::start(sb.client.clone(), 1).await;
    request_reboot(&sb.control_plane, "sim-1");
    let what = "the Eviction API refused the second pod of sim-1";
    e2e::scrape::wait_for_a_refused_eviction(address, what, ROLLOUT, Some(&watch)).await;
    assert_eq!(sb.fleet.reboots("sim-1"), 0, "rebooted with a pod on it");
    apply(&sb.control_plane, &freed_pod("d", "sim-2"));
    wait_until(
        "sim-1 is rebooted once the budget freed",
        ROLLOUT,
        Some(&watch),
        || async { sb.fleet.reboots("sim-1") == 1 },
    )
    .await;
    let on_sim_1: Vec<Pod> = ready_pods(&sb.client, "app=freed")
        .await
        .into_iter()
        .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some("sim-1"))
        .collect();
    assert!(on_sim_1.is_empty(), "both pods were evicted: {on_sim_1:?}");
    let metrics = e2e::scrape::scrape(address).await;
    assert_eq!(
        e2e::scrape::metric(&metrics, e2e::scrape::REFUSED_EVICTIONS),
        Some(1.0),
        "one refusal, then the eviction the budget allowed: {metrics}"
    );
    sb.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn removing_the_request_during_the_drain_cancels_it() {
    // The drain must start though the budget allows no disruption (the pre-flight would
    // not grant the node).
    let sb = sandbox(2, "1", &[NO_PDB_CHECK]).await;
    apply(&sb.control_plane, &pod_that_blocks_the_drain_of("sim-1"));
    wait_until_the_budget_allows_no_disruption(&sb.control_plane).await;
    let watch = BudgetWatch::start(sb.client.clone(), 1).await;
    request_reboot(&sb.control_plane, "sim-1");
    wait_until(
        "sim-1 is cordoned and draining",
        ROLLOUT,
        Some(&watch),
        || async {
            let n = node(&sb.client, "sim-1").await;
            n.spec.as_ref().and_then(|s| s.unschedulable) == Some(true)
                && has_event(&sb.client, "sim-1", ControllerReason::Draining, &[]).await
        },
    )
    .await;
    kubectl(
        &sb.control_plane,
        &["annotate", "node", "sim-1", "reboot-needed-"],
    );
    wait_until(
        "sim-1 is uncordoned and its slot released",
        ROLLOUT,
        Some(&watch),
        || async {
            let n = node(&sb.client, "sim-1").await;
            n.spec.as_ref().and_then(|s| s.unschedulable) != Some(true)
                && protocol_annotations(&n).is_empty()
                && has_event(&sb.client, "sim-1", ControllerReason::Cancelled, &[]).await
        },
    )
    .await;
    request_reboot(&sb.control_plane, "sim-2");
    wait_until(
        "sim-2 gets the slot and is rebooted",
        ROLLOUT,
        Some(&watch),
        || async { sb.fleet.reboots("sim-2") == 1 },
    )
    .await;
    assert_eq!(sb.fleet.reboots("sim-1"), 0);
    sb.stop().await;
}

const SELECTED: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: kept, namespace: default, labels: {app: other}}
spec:
  nodeName: sim-1
  containers: [{name: c, image: registry.example/kept:1}]
---
apiVersion: v1
kind: Pod
metadata: {name: moved, namespace: default, labels: {app: web}}
spec:
  nodeName: sim-1
  containers: [{name: c, image: registry.example/moved:1}]
---
apiVersion: v1
kind: Pod
metadata: {name: double, namespace: default, labels: {app: web, tier: double}}
spec:
  nodeName: sim-2
  containers: [{name: c, image: registry.example/double:1}]
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: double-a, namespace: default}
spec:
  maxUnavailable: 1
  selector: {matchLabels: {tier: double}}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: double-b, namespace: default}
spec:
  maxUnavailable: 1
  selector: {matchLabels: {tier: double}}
"#;

#[tokio::test(flavor = "multi_thread")]
async fn the_pod_selector_limits_the_drain_and_two_budgets_on_one_pod_are_reported() {
    // The drain's own report of the two budgets is checked here: the pre-flight would not
    // grant sim-2 (the disruption controller shows a budget of a doubly covered pod at 0).
    let sb = sandbox(
        2,
        "1",
        &[
            "--drain-pod-selector",
            "app=web",
            "--drain-timeout",
            "5s",
            NO_PDB_CHECK,
        ],
    )
    .await;
    apply(&sb.control_plane, SELECTED);
    let pods: Api<Pod> = Api::namespaced(sb.client.clone(), "default");
    wait_until("the three pods run", ROLLOUT, None, || async {
        ready_pods(&sb.client, "app in (web, other)").await.len() == 3
    })
    .await;
    request_reboot(&sb.control_plane, "sim-1");
    wait_until("sim-1 is rebooted", ROLLOUT, None, || async {
        sb.fleet.reboots("sim-1") == 1
    })
    .await;
    assert!(
        pods.get_opt("moved").await.unwrap().is_none(),
        "the selected pod was evicted"
    );
    assert!(
        pods.get_opt("kept").await.unwrap().is_some(),
        "the pod outside the selector was left alone"
    );
    request_reboot(&sb.control_plane, "sim-2");
    wait_for_event(
        &sb.client,
        "sim-2",
        ControllerReason::DrainBlocked,
        &["default/double", "more than one PodDisruptionBudget"],
        None,
    )
    .await;
    assert_eq!(sb.fleet.reboots("sim-2"), 0);
    sb.stop().await;
}

/// Only the ServiceAccounts of this namespace are audited: the controller's own.
const AUDITED: &str = "drain-audit";

/// The API server's audit log of the controller's requests, one line per request.
struct Audit {
    dir: PathBuf,
}

impl Audit {
    fn prepare(name: &str) -> Audit {
        let dir = std::env::temp_dir().join(format!("drain-audit-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let policy = serde_json::json!({
            "apiVersion": "audit.k8s.io/v1",
            "kind": "Policy",
            "omitStages": ["ResponseStarted", "ResponseComplete", "Panic"],
            "rules": [
                {"level": "Metadata", "userGroups": [format!("system:serviceaccounts:{AUDITED}")]},
                {"level": "None"},
            ],
        });
        std::fs::write(dir.join("policy.json"), policy.to_string()).unwrap();
        let _ = std::fs::remove_file(dir.join("audit.log"));
        Audit { dir }
    }

    fn apiserver_args(&self) -> Vec<String> {
        vec![
            format!(
                "--audit-policy-file={}",
                self.dir.join("policy.json").display()
            ),
            format!("--audit-log-path={}", self.dir.join("audit.log").display()),
            "--audit-log-mode=blocking".into(),
            "--audit-log-maxsize=0".into(),
        ]
    }

    /// Each request received since `from`, as `verb resource[/subresource] [name]`.
    fn since(&self, from: Timestamp) -> Vec<String> {
        let text = std::fs::read_to_string(self.dir.join("audit.log")).unwrap_or_default();
        text.lines()
            .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
            .filter(|event| {
                event["requestReceivedTimestamp"]
                    .as_str()
                    .and_then(|t| t.parse::<Timestamp>().ok())
                    .is_some_and(|at| at >= from)
            })
            .map(|event| {
                let object = &event["objectRef"];
                let mut label = format!(
                    "{} {}",
                    event["verb"].as_str().unwrap_or_default(),
                    object["resource"].as_str().unwrap_or_default()
                );
                if let Some(sub) = object["subresource"].as_str() {
                    label.push_str(&format!("/{sub}"));
                }
                if let Some(name) = object["name"].as_str() {
                    label.push_str(&format!(" {name}"));
                }
                label
            })
            .collect()
    }
}

impl Drop for Audit {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Pods `<name>-<i>` bound to `node`, owned by a ReplicaSet (which is not there: without a
/// controller-manager nothing acts on it), so that they are managed pods, evicted without an
/// Event of their own. `<name>-0` has a finalizer with `hold`: it stays until it is removed.
fn managed_pods(name: &str, node: &str, count: usize, hold: bool) -> String {
    (0..count)
        .map(|i| {
            let finalizers = if hold && i == 0 {
                "[drain.test/hold]"
            } else {
                "[]"
            };
            format!(
                r#"
apiVersion: v1
kind: Pod
metadata:
  name: {name}-{i}
  namespace: default
  labels: {{app: {name}}}
  ownerReferences:
  - {{apiVersion: apps/v1, kind: ReplicaSet, name: {name}, uid: 00000000-0000-0000-0000-00000000000{i}, controller: true}}
  finalizers: {finalizers}
spec:
  nodeName: {node}
  automountServiceAccountToken: false
  containers: [{{name: c, image: registry.example/{name}:1}}]
"#
            )
        })
        .collect::<Vec<_>>()
        .join("---")
}

/// The controller's requests of one reboot that belong to the drain of `node`.
#[derive(Debug, Default, PartialEq, Eq)]
struct DrainRequests {
    /// Lists and watches of the node's pods.
    pod_views: usize,
    node_reads: usize,
    evictions: usize,
    /// `Draining` Events, read back from the API server.
    draining_events: usize,
}

/// The requests a drain makes (docs/src/performance.md), counted by the API server's audit log of
/// the controller's own ServiceAccount over each node's whole reboot: with nothing to evict, one
/// (the list of the node's pods, a streaming list that would go on as the watch); with pods,
/// one eviction each, one read of the node before them and one `Draining` Event naming them,
/// however long the pods take to terminate.
#[tokio::test(flavor = "multi_thread")]
async fn a_drain_costs_one_request_with_nothing_to_evict_and_one_more_per_pod() {
    count_drain_requests(true).await;
}

/// The same on an API server without streaming lists (the WatchList feature off, as by
/// default on Kubernetes 1.33): the drain lists, then watches. The first drain asks for a
/// streaming list once, and is refused.
#[tokio::test(flavor = "multi_thread")]
async fn without_streaming_lists_a_drain_lists_then_watches() {
    count_drain_requests(false).await;
}

async fn count_drain_requests(streaming: bool) {
    let audit = Audit::prepare(if streaming { "streaming" } else { "listing" });
    let mut apiserver_args = audit.apiserver_args();
    if !streaming {
        apiserver_args.push("--feature-gates=WatchList=false".into());
    }
    let config = SandboxConfig::with_nodes(3)
        .reboot_duration(Duration::from_secs(1))
        .no_controller()
        // No controller-manager: nothing else changes the nodes while they drain (its node
        // lifecycle controller taints a node right after its cordon, and a drain stands only
        // for the version of the node it ended on: it is then drained once more).
        .without_pods()
        .apiserver_args(apiserver_args);
    let mut sb = Sandbox::start(config).await.expect("sandbox starts");
    let cp = &sb.control_plane;
    kubectl(cp, &["create", "namespace", AUDITED]);
    // Without a controller-manager, nobody creates the namespace's default ServiceAccount.
    kubectl(
        cp,
        &["create", "serviceaccount", "-n", "default", "default"],
    );
    kubectl(
        cp,
        &["create", "serviceaccount", "-n", AUDITED, "controller"],
    );
    let subject = format!("--serviceaccount={AUDITED}:controller");
    let binding = [
        "create",
        "clusterrolebinding",
        AUDITED,
        "--clusterrole=cluster-admin",
    ];
    kubectl(cp, &[&binding[..], &[subject.as_str()]].concat());
    let token = kubectl(
        cp,
        &[
            "create",
            "token",
            "-n",
            AUDITED,
            "controller",
            "--duration=2h",
        ],
    );
    let kubeconfig = cp.dir().join("controller-audited.kubeconfig");
    cp.write_kubeconfig_for_token(token.trim(), &kubeconfig)
        .unwrap();
    let controller = ControllerProcess::start(
        nodesim::workspace_binary("reboot-controller").unwrap(),
        kubeconfig,
        vec![
            "--max-unavailable".into(),
            "1".into(),
            nodesim::sandbox::NO_AGENT_PODS.into(),
        ],
        cp.dir().join("controller-1.log"),
    )
    .unwrap();
    sb.controllers.push(controller);
    apply(&sb.control_plane, &managed_pods("one", "sim-2", 1, false));
    apply(&sb.control_plane, &managed_pods("three", "sim-3", 3, true));
    wait_until("the four pods are Ready", ROLLOUT, None, || async {
        ready_pods(&sb.client, "app in (one, three)").await.len() == 4
    })
    .await;
    let watch = BudgetWatch::start(sb.client.clone(), 1).await;
    let mut counted = BTreeMap::new();
    for (name, app, pods) in [("sim-1", "", 0), ("sim-2", "one", 1), ("sim-3", "three", 3)] {
        let from = Timestamp::now();
        request_reboot(&sb.control_plane, name);
        if name == "sim-3" {
            // One pod takes its time to terminate (a finalizer holds it): the drain waits for
            // it through its watch, without a request more.
            let pods: Api<Pod> = Api::namespaced(sb.client.clone(), "default");
            wait_until("three-0 is terminating", ROLLOUT, Some(&watch), || async {
                pods.get("three-0")
                    .await
                    .is_ok_and(|p| p.metadata.deletion_timestamp.is_some())
            })
            .await;
            // Time enough for a drain that polls to show it.
            tokio::time::sleep(Duration::from_secs(3)).await;
            assert_eq!(
                sb.fleet.reboots(name),
                0,
                "rebooted while three-0 was still there"
            );
            let patch = r#"[{"op": "remove", "path": "/metadata/finalizers"}]"#;
            kubectl(
                &sb.control_plane,
                &["patch", "pod", "three-0", "--type=json", "-p", patch],
            );
        }
        wait_until(
            &format!("{name} is rebooted, back and its slot released"),
            ROLLOUT,
            Some(&watch),
            || async {
                sb.fleet.reboots(name) == 1
                    && protocol_annotations(&node(&sb.client, name).await).is_empty()
                    && e2e::rollout::ledger_is_empty(&sb).await
            },
        )
        .await;
        let requests = audit.since(from);
        let count = |label: &str| requests.iter().filter(|r| *r == label).count();
        let draining = node_events(&sb.client, name)
            .await
            .into_iter()
            .filter(|(reason, _, _)| reason == ControllerReason::Draining.as_str())
            .collect::<Vec<_>>();
        let got = DrainRequests {
            pod_views: count("list pods") + count("watch pods"),
            node_reads: count(&format!("get nodes {name}")),
            evictions: requests
                .iter()
                .filter(|r| r.starts_with("create pods/eviction "))
                .count(),
            draining_events: draining.len(),
        };
        let mut breakdown: BTreeMap<&str, usize> = BTreeMap::new();
        for request in &requests {
            *breakdown.entry(request.as_str()).or_default() += 1;
        }
        eprintln!(
            "{name} ({pods} pods to evict): {} requests of the controller: {breakdown:?}; \
             drain: {got:?}; Draining Events: {draining:?}",
            requests.len()
        );
        for i in 0..pods {
            let pod = format!("default/{app}-{i}");
            assert!(
                draining.iter().any(|(_, _, note)| note.contains(&pod)),
                "the Draining Event names {pod}: {draining:?}"
            );
        }
        let approved = match pods {
            0 => "no pod to evict".to_owned(),
            1 => "(1 pod evicted)".to_owned(),
            n => format!("({n} pods evicted)"),
        };
        assert!(
            has_event(
                &sb.client,
                name,
                ControllerReason::RebootApproved,
                &[&approved]
            )
            .await,
            "RebootApproved on {name} says {approved:?}: {:?}",
            node_events(&sb.client, name).await
        );
        counted.insert(name, (pods, got));
    }
    for (name, (pods, got)) in counted {
        let evicting = usize::from(pods > 0);
        // Without streaming lists: a list and a watch, or, on the first drain (sim-1, nothing
        // to evict), the refused streaming list and a list.
        let pod_views = if streaming { 1 } else { 2 };
        assert_eq!(
            got,
            DrainRequests {
                pod_views,
                node_reads: evicting,
                evictions: pods,
                draining_events: evicting,
            },
            "the drain of {name} with {pods} pods to evict"
        );
    }
    sb.stop().await;
}
