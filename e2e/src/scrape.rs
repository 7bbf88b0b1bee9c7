//! Reading a program's `/metrics`, `/healthz` and `/readyz` over plain HTTP, as a
//! Prometheus server or a probe would.

use std::net::SocketAddr;
use std::time::Duration;
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
};

/// `GET path` on a program's metrics server: the status and the body.
pub async fn get(address: SocketAddr, path: &str) -> Option<(u16, String)> {
    let attempt = async {
        let mut stream = TcpStream::connect(address).await.ok()?;
        let request =
            format!("GET {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await.ok()?;
        let mut response = String::new();
        stream.read_to_string(&mut response).await.ok()?;
        let status = response.split(' ').nth(1)?.parse().ok()?;
        let body = response.split_once("\r\n\r\n")?.1.to_owned();
        Some((status, body))
    };
    tokio::time::timeout(Duration::from_secs(5), attempt)
        .await
        .ok()
        .flatten()
}

/// What an agent logs when its metrics server is up, with the `address` it serves on.
const SERVING: &str = "serving /metrics, /healthz and /readyz";

/// The address the `start`-th process of `node`'s agent (counted from 1) serves on, once it is
/// Ready; the agent must log JSON (`--log-format=json`). A simulated agent starts again a few
/// seconds after its node's boot, often after the kubelet's report completed the node: a
/// test of the agent after a reboot waits for it here.
pub async fn agent_serving(sb: &nodesim::sandbox::Sandbox, node: &str, start: usize) -> SocketAddr {
    let log = sb
        .control_plane
        .dir()
        .join("nodes")
        .join(node)
        .join("agent.log");
    crate::eventually(
        &format!("the agent of {node} serves, started {start} time(s)"),
        Duration::from_secs(60),
        None,
        || async {
            let text = std::fs::read_to_string(&log).ok()?;
            let serving: Vec<SocketAddr> = text
                .lines()
                .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
                .filter(|l| l["message"] == SERVING)
                .filter_map(|l| l["address"].as_str()?.parse().ok())
                .collect();
            let agent = *serving.get(start.checked_sub(1)?)?;
            (get(agent, "/readyz").await.map(|r| r.0) == Some(200)).then_some(agent)
        },
    )
    .await
}

/// The body of `GET /metrics`; panics when the program does not answer 200.
pub async fn scrape(address: SocketAddr) -> String {
    match get(address, "/metrics").await {
        Some((200, body)) => body,
        other => panic!("GET http://{address}/metrics: {other:?}"),
    }
}

/// The value of one series (`name` or `name{labels}`) in OpenMetrics text.
pub fn metric(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|line| {
        line.strip_prefix(series)?
            .strip_prefix(' ')?
            .split(' ')
            .next()?
            .parse()
            .ok()
    })
}

/// The controller's count of evictions the API server refused with 429 (a PodDisruptionBudget).
pub const REFUSED_EVICTIONS: &str =
    r#"node_reboot_api_errors_total{resource="eviction",kind="too_many_requests"}"#;

/// Waits until the controller serving metrics at `address` has had an eviction refused
/// (`what` says which), checking `budget` meanwhile.
pub async fn wait_for_a_refused_eviction(
    address: SocketAddr,
    what: &str,
    timeout: Duration,
    budget: Option<&crate::BudgetWatch>,
) {
    crate::wait_until(what, timeout, budget, || async {
        metric(&scrape(address).await, REFUSED_EVICTIONS).is_some_and(|n| n >= 1.0)
    })
    .await;
}

/// One series of the first controller of `sb`, scraped now; `None` when the series is not
/// there. Panics when the controller serves no metrics: a test that reads them needs them.
pub async fn controller_metric(sb: &nodesim::sandbox::Sandbox, series: &str) -> Option<f64> {
    let address = sb.controllers[0]
        .metrics_address()
        .expect("the controller's metrics address");
    metric(&scrape(address).await, series)
}

/// The rounds the controllers of `sb` have completed as the leader, summed over those that
/// answer (a controller killed by the test does not).
pub async fn controller_rounds(sb: &nodesim::sandbox::Sandbox) -> f64 {
    let mut rounds = 0.0;
    for controller in &sb.controllers {
        let Some(address) = controller.metrics_address() else {
            continue;
        };
        if let Some((200, body)) = get(address, "/metrics").await {
            rounds += metric(&body, "node_reboot_rounds_total").unwrap_or_default();
        }
    }
    rounds
}

/// Waits until the controllers of `sb` have completed `more` rounds as the leader after this
/// call, checking `budget` meanwhile: a check that nothing happened, made then, means that the
/// controller looked again after the change and decided so, not that a sleep ran out on a
/// slow machine. Two rounds at least: one under way at the call may have read the state
/// before it.
pub async fn after_rounds(
    sb: &nodesim::sandbox::Sandbox,
    more: u32,
    budget: Option<&crate::BudgetWatch>,
) {
    let more = f64::from(more.max(2));
    let from = controller_rounds(sb).await;
    let what = format!("the controller completes {more} more rounds (from {from})");
    crate::wait_until(&what, Duration::from_secs(120), budget, || async {
        controller_rounds(sb).await >= from + more
    })
    .await;
}
