//! Notifications (`--notify-url`, `NOTIFY_URL`), end to end on the real control plane with
//! real HTTP receivers on loopback: a rollout is told in order (started; each node drained,
//! rebooting, back; finished), once even with two replicas; and webhooks that hang or fail
//! neither slow nor stop the rollout, and the metrics say so.

use common::ledger::{LEDGER_NAME, OPERATOR_NAMESPACE, PAUSED_ANNOTATION};
use e2e::rollout::annotate_ledger;
use e2e::{
    BudgetWatch, eventually, kubectl,
    rollout::rollout_completes,
    scrape::{metric, scrape},
    wait_until,
};
use nodesim::sandbox::{Sandbox, SandboxConfig};
use serde_json::Value;
use std::{
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::Duration,
};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
};

/// How a receiver answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Answer {
    Ok,
    ServerError,
    /// Reads the request and never answers.
    Never,
}

/// A webhook on loopback that keeps the JSON bodies POSTed to it, in order.
#[derive(Debug, Clone)]
struct Receiver {
    address: SocketAddr,
    bodies: Arc<Mutex<Vec<Value>>>,
}

impl Receiver {
    async fn start(answer: Answer) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let address = listener.local_addr().expect("address");
        let bodies = Arc::new(Mutex::new(Vec::new()));
        let kept = bodies.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(serve(stream, answer, kept.clone()));
            }
        });
        Self { address, bodies }
    }

    fn url(&self) -> String {
        format!("http://{}/hook", self.address)
    }

    fn bodies(&self) -> Vec<Value> {
        self.bodies.lock().expect("lock").clone()
    }

    /// Waits until it has heard a notification of `kind`.
    async fn hears(&self, kind: &str) {
        let what = format!("the receiver hears {kind}");
        wait_until(&what, Duration::from_secs(60), None, || async {
            self.kinds().iter().any(|k| k == kind)
        })
        .await;
    }

    /// The first `rollout_stopped` it hears.
    async fn stop(&self) -> Value {
        let stopped = |b: &&Value| b["kind"] == "rollout_stopped";
        eventually(
            "the receiver hears that the rollout stopped",
            Duration::from_secs(90),
            None,
            || async { self.bodies().iter().find(stopped).cloned() },
        )
        .await
    }

    /// It heard of one rollout: one start, `stops` stops and one finish.
    fn told_once(&self, stops: usize) {
        let kinds = self.kinds();
        let count = |kind: &str| kinds.iter().filter(|k| *k == kind).count();
        let told = ["rollout_started", "rollout_stopped", "rollout_finished"].map(count);
        assert_eq!(told, [1, stops, 1], "{kinds:?}");
    }

    fn kinds(&self) -> Vec<String> {
        self.bodies()
            .iter()
            .map(|b| b["kind"].as_str().unwrap_or_default().to_owned())
            .collect()
    }
}

/// Serves the requests of one connection: reads each (headers, then Content-Length bytes),
/// keeps its body, and answers as told.
async fn serve(mut stream: TcpStream, answer: Answer, bodies: Arc<Mutex<Vec<Value>>>) {
    let mut buffer = Vec::new();
    loop {
        let Some(end) = find(&buffer, b"\r\n\r\n") else {
            let mut chunk = [0u8; 4096];
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buffer.extend_from_slice(&chunk[..n]),
            }
            continue;
        };
        let head = String::from_utf8_lossy(&buffer[..end]).to_ascii_lowercase();
        let length: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0);
        while buffer.len() < end + 4 + length {
            let mut chunk = [0u8; 4096];
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buffer.extend_from_slice(&chunk[..n]),
            }
        }
        let body: Value = serde_json::from_slice(&buffer[end + 4..end + 4 + length])
            .unwrap_or_else(|e| panic!("a notification that is not JSON: {e}"));
        buffer.drain(..end + 4 + length);
        bodies.lock().expect("lock").push(body);
        let status = match answer {
            Answer::Ok => "200 OK",
            Answer::ServerError => "500 Internal Server Error",
            Answer::Never => return std::future::pending().await,
        };
        let response = format!("HTTP/1.1 {status}\r\nContent-Length: 0\r\n\r\n");
        if stream.write_all(response.as_bytes()).await.is_err() {
            return;
        }
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

async fn sandbox(nodes: usize, controller_args: Vec<String>, start_controller: bool) -> Sandbox {
    let config = SandboxConfig::with_nodes(nodes)
        .reboot_duration(Duration::from_secs(1))
        .controller_args(controller_args)
        .start_controller(start_controller);
    e2e::sandbox_without_pods(config).await
}

/// Every node asks for a reboot; waits until the rollout is done and the receiver has heard
/// its end.
async fn roll(sb: &Sandbox, receiver: &Receiver) {
    e2e::every_node::request(&sb.control_plane);
    roll_on(sb, receiver).await;
}

/// Waits until the rollout under way is done and the receiver has heard its end.
async fn roll_on(sb: &Sandbox, receiver: &Receiver) {
    let watch = BudgetWatch::start(sb.client.clone(), 1).await;
    rollout_completes(sb, &watch).await;
    receiver.hears("rollout_finished").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_rollout_is_told_once_in_order_started_each_node_drained_rebooting_back_then_finished() {
    let receiver = Receiver::start(Answer::Ok).await;
    let args = vec![
        format!("--notify-url={}", receiver.url()),
        // kured's default drain template, as a kured user passes it.
        "--message-template-drain=Draining node %s".to_owned(),
    ];
    let mut sb = sandbox(3, args, true).await;
    // A second replica stands by: only the leader notifies.
    sb.start_controller(&[]).expect("a second replica starts");
    roll(&sb, &receiver).await;
    // What comes after the finish would be a second message about the same steps.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let kinds = receiver.kinds();
    assert_eq!(
        kinds.first().map(String::as_str),
        Some("rollout_started"),
        "{kinds:?}"
    );
    assert_eq!(
        kinds.last().map(String::as_str),
        Some("rollout_finished"),
        "{kinds:?}"
    );
    receiver.told_once(0);
    let bodies = receiver.bodies();
    for name in sb.fleet.names() {
        let steps: Vec<&Value> = bodies
            .iter()
            .filter(|b| b["node"] == name.as_str())
            .collect();
        let order: Vec<&str> = steps.iter().filter_map(|b| b["kind"].as_str()).collect();
        assert_eq!(
            order,
            ["node_drained", "node_rebooting", "node_back"],
            "{name}: {kinds:?}"
        );
        assert_eq!(steps[0]["message"], format!("Draining node {name}"));
        assert_eq!(steps[1]["message"], format!("Rebooting node {name}"));
        assert!(
            steps[2]["details"]["boot_id"]
                .as_str()
                .is_some_and(|b| !b.is_empty())
        );
    }
    for body in &bodies {
        assert_eq!(body["pool"], format!("{OPERATOR_NAMESPACE}/{LEDGER_NAME}"));
        assert!(
            body["time"].as_str().is_some_and(|t| t.ends_with('Z')),
            "{body}"
        );
    }
    let mut sent = 0.0;
    for controller in &sb.controllers {
        let address = controller.metrics_address().expect("metrics address");
        sent += counter(address, "node_reboot_notifications_total{outcome=\"sent\"}").await;
    }
    assert_eq!(
        sent,
        bodies.len() as f64,
        "each was sent once, by one replica"
    );

    // The next rollout is told again, and finishes though a node's request is not one (its
    // Warning stays as long as the value does).
    kubectl(
        &sb.control_plane,
        &[
            "annotate",
            "--overwrite",
            "node",
            "sim-1",
            "reboot-needed=banana",
        ],
    );
    e2e::request_reboot(&sb.control_plane, "sim-2");
    let finished = || {
        receiver
            .kinds()
            .iter()
            .filter(|k| *k == "rollout_finished")
            .count()
    };
    wait_until(
        "the receiver hears that the second rollout finished",
        Duration::from_secs(60),
        None,
        || async { finished() == 2 },
    )
    .await;
    let second: Vec<Value> = receiver.bodies().split_off(bodies.len());
    let told: Vec<(String, String)> = second
        .iter()
        .map(|b| {
            (
                b["kind"].as_str().unwrap_or_default().to_owned(),
                b["node"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    let want: Vec<(String, String)> = [
        ("rollout_started", ""),
        ("node_drained", "sim-2"),
        ("node_rebooting", "sim-2"),
        ("node_back", "sim-2"),
        ("rollout_finished", ""),
    ]
    .iter()
    .map(|(k, n)| ((*k).to_owned(), (*n).to_owned()))
    .collect();
    assert_eq!(told, want);
    sb.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_node_not_back_within_the_reboot_timeout_is_told_as_the_rollouts_stop_and_the_rest_follows_once_fixed()
 {
    let receiver = Receiver::start(Answer::Ok).await;
    let args = vec![
        format!("--notify-url={}", receiver.url()),
        "--reboot-timeout=5s".to_owned(),
    ];
    let sb = sandbox(2, args, true).await;
    sb.fleet.bad_kernel("sim-1", true);
    // sim-1 asks first: it is the one granted first.
    e2e::request_reboot(&sb.control_plane, "sim-1");
    e2e::request_reboot(&sb.control_plane, "sim-2");
    let stop = receiver.stop().await;
    assert_eq!(stop["node"], "sim-1", "{stop}");
    assert_eq!(stop["details"]["reason"], "reboot_timeout", "{stop}");
    let message = stop["message"].as_str().unwrap_or_default();
    assert!(message.contains("--reboot-timeout (5s)"), "{message}");
    // Fixed: sim-1 is Ready in its new boot, and the rollout goes on by itself.
    sb.fleet.set_ready("sim-1", true).await;
    roll_on(&sb, &receiver).await;
    let bodies = receiver.bodies();
    let at = |kind: &str, node: &str| {
        bodies
            .iter()
            .position(|b| b["kind"] == kind && b["node"] == node)
            .unwrap_or_else(|| panic!("no {kind} of {node} in {:?}", receiver.kinds()))
    };
    let stop = bodies
        .iter()
        .position(|b| b["kind"] == "rollout_stopped")
        .expect("a stop");
    assert!(at("node_rebooting", "sim-1") < stop && stop < at("node_back", "sim-1"));
    assert!(
        stop < at("node_drained", "sim-2"),
        "sim-2 went on while stopped"
    );
    receiver.told_once(1);
    sb.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pause_while_nodes_wait_is_told_once_as_the_rollouts_stop() {
    let receiver = Receiver::start(Answer::Ok).await;
    let sb = sandbox(3, vec![format!("--notify-url={}", receiver.url())], true).await;
    e2e::every_node::request(&sb.control_plane);
    receiver.hears("node_rebooting").await;
    annotate_ledger(&sb.control_plane, &format!("{PAUSED_ANNOTATION}=true"));
    let stop = receiver.stop().await;
    assert_eq!(stop["details"]["reason"], "paused", "{stop}");
    assert!(stop["node"].is_null(), "the pool's stop: {stop}");
    annotate_ledger(&sb.control_plane, &format!("{PAUSED_ANNOTATION}=false"));
    roll_on(&sb, &receiver).await;
    receiver.told_once(1);
    sb.stop().await;
}

/// The counter `series` of the controller at `address`, 0 when absent.
async fn counter(address: SocketAddr, series: &str) -> f64 {
    metric(&scrape(address).await, series).unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread")]
async fn webhooks_that_hang_or_fail_neither_slow_nor_stop_a_rollout_notified_from_notify_url_in_the_environment()
 {
    let hangs = Receiver::start(Answer::Never).await;
    let fails = Receiver::start(Answer::ServerError).await;
    let works = Receiver::start(Answer::Ok).await;
    let sb = sandbox(2, Vec::new(), false).await;
    // The controller as the sandbox's: NOTIFY_URL in the environment it inherits, several
    // URLs separated by a comma and a space.
    let metrics = {
        let free = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
        free.local_addr().expect("address")
    };
    let log = sb.control_plane.dir().join("controller-env.log");
    let out = std::fs::File::create(&log).expect("log file");
    let mut controller = tokio::process::Command::new(
        nodesim::workspace_binary("reboot-controller").expect("reboot-controller is built"),
    )
    .args(["--max-unavailable=1", "--notify-timeout=1s"])
    // The sandbox's agents are processes, not pods.
    .arg(nodesim::sandbox::NO_AGENT_PODS)
    .arg(format!("--metrics-bind-address={metrics}"))
    .env("KUBECONFIG", sb.control_plane.kubeconfig_path())
    .env("POD_NAME", "controller-env")
    .env(
        "NOTIFY_URL",
        format!("{}, {} {}", hangs.url(), fails.url(), works.url()),
    )
    .stdout(out.try_clone().expect("log file"))
    .stderr(out)
    .kill_on_drop(true)
    .spawn()
    .expect("the controller starts");
    roll(&sb, &works).await;
    wait_until(
        "the failed notifications are counted",
        Duration::from_secs(60),
        None,
        || async {
            counter(
                metrics,
                "node_reboot_notifications_total{outcome=\"failed\"}",
            )
            .await
                >= 2.0
        },
    )
    .await;
    assert!(
        !hangs.bodies().is_empty() && !fails.bodies().is_empty(),
        "every webhook was tried"
    );
    let tries = fails
        .kinds()
        .iter()
        .filter(|k| *k == "rollout_started")
        .count();
    assert!(
        tries >= 2,
        "a webhook answering 500 is retried: {tries} tries"
    );
    let text = scrape(metrics).await;
    assert!(
        text.contains("node_reboot_notifications_dropped_total{reason=\"queue_full\"}"),
        "{text}"
    );
    let logged = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(logged.contains("notification not delivered"), "{logged}");
    let _ = controller.kill().await;
    sb.stop().await;
}

#[test]
fn a_webhook_url_of_another_kind_stops_the_controller_at_start_without_showing_its_secret() {
    let bin = nodesim::workspace_binary("reboot-controller").expect("reboot-controller is built");
    for (how, url) in [
        ("flag", "irc://user:s3cret@irc.example.com/ops"),
        ("env", "https://ok.example.com/hook, slack://T0001/s3cret"),
    ] {
        let mut command = std::process::Command::new(&bin);
        command.env_remove("KUBECONFIG").env_remove("NOTIFY_URL");
        if how == "flag" {
            command.arg(format!("--notify-url={url}"));
        } else {
            command.env("NOTIFY_URL", url);
        }
        let out = command.output().expect("runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{how}: {stderr}");
        assert!(
            stderr.contains("accepted forms: http(s)://"),
            "{how}: {stderr}"
        );
        assert!(stderr.contains("slack://hook:"), "{how}: {stderr}");
        assert!(
            !stderr.contains("s3cret"),
            "{how}: the secret shows in {stderr}"
        );
        assert!(!stderr.contains("panicked"), "{how}: {stderr}");
    }
}
