//! How the agent opens the watch of its own Node (docs/src/performance.md), counted by the real API
//! server's audit log through one whole reboot, in which the agent starts twice (before the reboot,
//! and after it, as its pod restarts with the node):
//! - with the WatchList feature (on by default in the local v1.37 API server), each start is
//!   ONE watch request with `sendInitialEvents=true`, and the agent never lists;
//! - with `--feature-gates=WatchList=false`, the API server refuses that request (422) once per
//!   start, the agent falls back to a list and a watch, says so once, and the reboot completes.
//!
//! The controller's watch of every Node opens the same way: with WatchList, a streaming list
//! and no paged list of the nodes; without, the refused request, then pages of 50.

use e2e::{
    request_reboot,
    rollout::{ROLLOUT, back},
    wait_until,
};
use nodesim::sandbox::{Sandbox, SandboxConfig};
use serde_json::{Value, json};
use std::{collections::BTreeMap, path::PathBuf, time::Duration};

const NODE: &str = "sim-1";

/// The API server's audit log of list and watch requests on Nodes.
struct Audit {
    /// Holds the policy and the log.
    _dir: tempfile::TempDir,
    policy: PathBuf,
    log: PathBuf,
}

impl Audit {
    fn new() -> Audit {
        let dir = tempfile::tempdir().expect("a temporary directory for the audit log");
        let policy = dir.path().join("audit-policy.json");
        // JSON is YAML. The request is logged when received; its answer when complete (a
        // watch that stays open has none yet, a refused one has its code).
        let text = json!({
            "apiVersion": "audit.k8s.io/v1",
            "kind": "Policy",
            "omitStages": ["ResponseStarted", "Panic"],
            "rules": [
                {"level": "Metadata", "verbs": ["list", "watch"],
                 "resources": [{"group": "", "resources": ["nodes"]}]},
                {"level": "None"},
            ],
        });
        std::fs::write(&policy, format!("{text:#}\n")).expect("write the audit policy");
        let log = dir.path().join("audit.log");
        Audit {
            _dir: dir,
            policy,
            log,
        }
    }

    fn apiserver_args(&self) -> Vec<String> {
        vec![
            format!("--audit-policy-file={}", self.policy.display()),
            format!("--audit-log-path={}", self.log.display()),
            // Written before the request is served: what the agent acted on is in the log.
            "--audit-log-mode=blocking".into(),
            "--audit-log-maxsize=0".into(),
        ]
    }

    /// The list and watch requests of `node`'s agent, in the order received.
    fn agent_requests(&self, node: &str) -> Vec<Request> {
        self.requests(AGENT, |uri| {
            uri.contains(&format!("fieldSelector=metadata.name%3D{node}"))
                || uri.contains(&format!("fieldSelector=metadata.name={node}"))
        })
    }

    /// The controller's lists and watches of every node (its node cache), in the order
    /// received.
    fn controller_node_requests(&self) -> Vec<Request> {
        self.requests(CONTROLLER, |uri| {
            uri.starts_with("/api/v1/nodes?") && !uri.contains("fieldSelector")
        })
    }

    /// The controller's pages of the list of every node, 50 at a time.
    fn controller_pages(&self) -> Vec<Request> {
        let paged_by_50 = |uri: &str| {
            let query = uri.split_once('?').map_or("", |(_, q)| q);
            query.split('&').any(|param| param == "limit=50")
        };
        self.controller_node_requests()
            .into_iter()
            .filter(|r| r.verb == "list" && paged_by_50(&r.uri))
            .collect()
    }

    /// The list and watch requests of `program` (its User-Agent's name) whose URI is
    /// `wanted`, in the order received.
    fn requests(&self, program: &str, wanted: impl Fn(&str) -> bool) -> Vec<Request> {
        let text = std::fs::read_to_string(&self.log)
            .unwrap_or_else(|e| panic!("read the audit log {}: {e}", self.log.display()));
        let events: Vec<Value> = text
            .lines()
            .map(|line| {
                serde_json::from_str(line)
                    .unwrap_or_else(|e| panic!("an audit event that is not JSON ({e}): {line}"))
            })
            .collect();
        let answers: BTreeMap<&str, u64> = events
            .iter()
            .filter(|e| e["stage"] == "ResponseComplete")
            .filter_map(|e| {
                Some((
                    e["auditID"].as_str()?,
                    e["responseStatus"]["code"].as_u64()?,
                ))
            })
            .collect();
        events
            .iter()
            .filter(|e| e["stage"] == "RequestReceived")
            .filter(|e| {
                e["userAgent"]
                    .as_str()
                    .is_some_and(|agent| agent.starts_with(&format!("{program}/")))
            })
            .filter(|e| e["requestURI"].as_str().is_some_and(&wanted))
            .map(|e| Request {
                verb: e["verb"].as_str().unwrap_or_default().to_owned(),
                uri: e["requestURI"].as_str().unwrap_or_default().to_owned(),
                code: e["auditID"]
                    .as_str()
                    .and_then(|id| answers.get(id).copied()),
            })
            .collect()
    }
}

#[derive(Debug)]
struct Request {
    verb: String,
    uri: String,
    /// The HTTP status, once the request is complete.
    code: Option<u64>,
}

impl Request {
    /// A watch that asks for the initial state (a streaming list).
    fn streaming(&self) -> bool {
        self.verb == "watch" && self.uri.contains("sendInitialEvents=true")
    }
}

/// The User-Agents' names of the two programs.
const AGENT: &str = "reboot-agent";
const CONTROLLER: &str = "reboot-controller";

/// The agent's log lines for each way its watch can start.
const STREAMED: &str = "the watch of the node started with a streaming list";
const FELL_BACK: &str = "falling back to a list and a watch of the node";

fn said<'l>(log: &'l str, what: &str) -> Vec<&'l str> {
    log.lines().filter(|l| l.contains(what)).collect()
}

/// A sandbox of `nodes` nodes on an API server with `extra_apiserver_args`, once sim-1 has
/// rebooted and is back.
async fn sim_1_rebooted(nodes: usize, extra_apiserver_args: Vec<String>) -> Sandbox {
    let config = SandboxConfig::with_nodes(nodes)
        .reboot_duration(Duration::from_secs(1))
        .without_pods()
        .apiserver_args(extra_apiserver_args);
    let sb = Sandbox::start(config).await.expect("sandbox starts");
    request_reboot(&sb.control_plane, NODE);
    wait_until("sim-1 is rebooted and back", ROLLOUT, None, || {
        back(&sb, NODE, 1)
    })
    .await;
    sb
}

async fn reboot_once(extra_apiserver_args: Vec<String>) -> Sandbox {
    let sb = sim_1_rebooted(1, extra_apiserver_args).await;
    // The kubelet's report of the new boot completes the node, mostly before the agent starts
    // again: wait until both starts have opened their watch, one way or the other.
    wait_until(
        "the agent started again after the boot and opened its watch",
        ROLLOUT,
        None,
        || async {
            let log = sb.fleet.agent_log(NODE);
            sb.fleet.agent_starts(NODE) >= 2
                && said(&log, STREAMED).len() + said(&log, FELL_BACK).len() >= 2
        },
    )
    .await;
    sb
}

#[tokio::test(flavor = "multi_thread")]
async fn each_start_of_the_agent_is_one_streaming_watch_and_no_list() {
    let audit = Audit::new();
    let sb = reboot_once(audit.apiserver_args()).await;
    let starts = sb.fleet.agent_starts(NODE);
    assert_eq!(starts, 2, "the agent started before and after the reboot");
    let requests = audit.agent_requests(NODE);
    eprintln!("the agent's list and watch requests: {requests:#?}");
    assert!(
        requests.iter().all(|r| r.verb == "watch"),
        "the agent listed: {requests:#?}"
    );
    let streaming = requests.iter().filter(|r| r.streaming()).count();
    assert_eq!(
        streaming, starts as usize,
        "one streaming watch per start: {requests:#?}"
    );
    // Its first request at each start is that watch: nothing before it.
    assert!(
        requests.first().is_some_and(|r| r.streaming()),
        "{requests:#?}"
    );
    // And the API server really streamed: each start saw the end of the initial events (the
    // bookmark), none fell back.
    let log = sb.fleet.agent_log(NODE);
    assert_eq!(said(&log, STREAMED).len(), starts as usize, "{log}");
    assert!(said(&log, FELL_BACK).is_empty(), "{log}");
    sb.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn without_watch_list_the_agent_falls_back_to_a_list_and_a_watch_and_reboots() {
    let audit = Audit::new();
    let mut args = audit.apiserver_args();
    args.push("--feature-gates=WatchList=false".into());
    let sb = reboot_once(args).await;
    let starts = sb.fleet.agent_starts(NODE) as usize;
    assert_eq!(starts, 2, "the agent started before and after the reboot");
    // The reboot completes on the kubelet's report, not on the agent's: its second start may
    // not have opened its watch yet.
    wait_until(
        "the agent watches after its list",
        ROLLOUT,
        None,
        || async {
            let requests = audit.agent_requests(NODE);
            requests
                .iter()
                .filter(|r| r.verb == "watch" && !r.streaming())
                .count()
                >= starts
        },
    )
    .await;
    let requests = audit.agent_requests(NODE);
    eprintln!("the agent's list and watch requests: {requests:#?}");
    let streaming: Vec<&Request> = requests.iter().filter(|r| r.streaming()).collect();
    // Refused once per start and never asked again in that life: no loop on the refusal.
    assert_eq!(streaming.len(), starts, "{requests:#?}");
    assert!(
        streaming.iter().all(|r| r.code == Some(422)),
        "the API server refuses sendInitialEvents without WatchList: {requests:#?}"
    );
    let lists = requests.iter().filter(|r| r.verb == "list").count();
    let watches = requests
        .iter()
        .filter(|r| r.verb == "watch" && !r.streaming())
        .count();
    assert_eq!(lists, starts, "one list per start: {requests:#?}");
    assert!(watches >= starts, "a watch after each list: {requests:#?}");
    // Each start: the refused streaming watch, then its list.
    let order: Vec<&str> = requests
        .iter()
        .filter(|r| r.streaming() || r.verb == "list")
        .map(|r| if r.streaming() { "streaming" } else { "list" })
        .collect();
    assert_eq!(order, ["streaming", "list"].repeat(starts), "{requests:#?}");

    // Said once per start, with the API server's reason.
    let log = sb.fleet.agent_log(NODE);
    let fell_back = said(&log, FELL_BACK);
    assert_eq!(fell_back.len(), starts, "{log}");
    assert!(
        fell_back
            .iter()
            .all(|l| l.contains("WatchList feature gate")),
        "the reason is the API server's: {fell_back:#?}"
    );
    assert!(said(&log, STREAMED).is_empty(), "{log}");
    sb.stop().await;
}

/// The controller's log lines for each way its node cache's watch can start.
const CACHE_STREAMED: &str = "the watch of every node started with a streaming list";
const CACHE_FELL_BACK: &str = "falling back to a list and a watch of every node";

/// A sandbox of three nodes whose controller has rebooted sim-1, and the controller's log.
async fn controller_reboots_a_node(extra_apiserver_args: Vec<String>) -> (Sandbox, String) {
    let sb = sim_1_rebooted(3, extra_apiserver_args).await;
    let log = std::fs::read_to_string(sb.controllers[0].log_path()).expect("the controller's log");
    (sb, log)
}

#[tokio::test(flavor = "multi_thread")]
async fn the_controllers_node_cache_starts_with_a_streaming_list_and_pages_nothing() {
    let audit = Audit::new();
    let (sb, log) = controller_reboots_a_node(audit.apiserver_args()).await;
    assert_eq!(said(&log, CACHE_STREAMED).len(), 1, "{log}");
    assert!(said(&log, CACHE_FELL_BACK).is_empty(), "{log}");
    let pages = audit.controller_pages();
    assert!(
        pages.is_empty(),
        "the controller listed the nodes: {pages:#?}"
    );
    // Not a check that passes because the audit log names no request of the controller.
    let requests = audit.controller_node_requests();
    let first = requests
        .first()
        .expect("the controller's watch is in the audit log");
    assert!(first.streaming(), "{requests:#?}");
    assert!(
        first.code.is_none_or(|code| code < 400),
        "the streaming list was refused: {requests:#?}"
    );
    sb.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn without_watch_list_the_controllers_node_cache_lists_in_pages_and_reboots() {
    let audit = Audit::new();
    let mut args = audit.apiserver_args();
    args.push("--feature-gates=WatchList=false".into());
    let (sb, log) = controller_reboots_a_node(args).await;
    let fell_back = said(&log, CACHE_FELL_BACK);
    assert_eq!(fell_back.len(), 1, "said once: {log}");
    assert!(
        fell_back[0].contains("WatchList feature gate"),
        "the reason is the API server's: {fell_back:#?}"
    );
    assert!(said(&log, CACHE_STREAMED).is_empty(), "{log}");
    let requests = audit.controller_node_requests();
    let first = requests
        .first()
        .expect("the controller's watch is in the audit log");
    assert!(
        first.streaming() && first.code == Some(422),
        "the streaming list comes first and is refused: {requests:#?}"
    );
    let pages = audit.controller_pages();
    assert!(!pages.is_empty(), "the nodes are listed in pages of 50");
    sb.stop().await;
}

#[test]
fn the_audit_log_is_read_as_the_agent_requests_it() {
    // The parsing above on two events as the v1.37 API server writes them.
    let audit = Audit::new();
    let received = json!({"kind": "Event", "stage": "RequestReceived", "auditID": "a1",
        "userAgent": "reboot-agent/0.1.0", "verb": "watch", "requestURI": "/api/v1/nodes?allowWatchBookmarks=true&\
        fieldSelector=metadata.name%3Dsim-1&resourceVersion=0&resourceVersionMatch=NotOlderThan&\
        sendInitialEvents=true&timeoutSeconds=290&watch=true"});
    let complete = json!({"kind": "Event", "stage": "ResponseComplete", "auditID": "a1",
        "verb": "watch", "requestURI": received["requestURI"], "responseStatus": {"code": 422}});
    let other = json!({"kind": "Event", "stage": "RequestReceived", "auditID": "a2",
        "userAgent": "reboot-controller/0.1.0", "verb": "list", "requestURI": "/api/v1/nodes?limit=50"});
    let kubectl = json!({"kind": "Event", "stage": "RequestReceived", "auditID": "a3",
        "userAgent": "kubectl/v1.37.1", "verb": "list", "requestURI": received["requestURI"]});
    std::fs::write(
        &audit.log,
        format!("{received}\n{complete}\n{other}\n{kubectl}\n"),
    )
    .unwrap();
    let requests = audit.agent_requests(NODE);
    assert_eq!(requests.len(), 1, "{requests:#?}");
    assert_eq!(requests[0].verb, "watch");
    assert!(requests[0].streaming());
    assert_eq!(requests[0].code, Some(422));
    assert_eq!(audit.controller_pages().len(), 1);
}
