use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

use crate::Error;
use crate::process::Proc;

const POLL: Duration = Duration::from_millis(50);

/// Polls `check` until it passes; fails early, with the log's tail, if the process exits.
pub(crate) async fn until_ready(
    proc: &mut Proc,
    timeout: Duration,
    mut check: impl AsyncFnMut() -> Result<(), String>,
) -> Result<(), Error> {
    let began = Instant::now();
    loop {
        proc.ensure_running()?;
        let last = match check().await {
            Ok(()) => return Ok(()),
            Err(e) => e,
        };
        if began.elapsed() >= timeout {
            return Err(proc.not_ready(began.elapsed(), last));
        }
        tokio::time::sleep(POLL).await;
    }
}

/// etcd's `/health`.
pub(crate) async fn etcd_health(port: u16) -> Result<(), String> {
    let (_, body) = http(port, "GET", "/health", None).await?;
    if body.contains(r#""health":"true""#) {
        Ok(())
    } else {
        Err(format!(
            "GET /health: {}",
            body.lines().last().unwrap_or("")
        ))
    }
}

/// One plain HTTP/1.0 request to a loopback port (no HTTP client needed): the status and the
/// body. The servers it asks (etcd, Prometheus, Alertmanager) are Go's, which answer 1.0.
pub(crate) async fn http(
    port: u16,
    method: &str,
    path: &str,
    json: Option<&str>,
) -> Result<(u16, String), String> {
    let request = async {
        let mut stream = TcpStream::connect((Ipv4Addr::LOCALHOST, port)).await?;
        let body = json.unwrap_or_default();
        let head = format!(
            "{method} {path} HTTP/1.0\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\n\r\n",
            body.len()
        );
        stream.write_all(head.as_bytes()).await?;
        stream.write_all(body.as_bytes()).await?;
        let mut response = String::new();
        stream.read_to_string(&mut response).await?;
        Ok::<_, std::io::Error>(response)
    };
    let response = tokio::time::timeout(Duration::from_secs(5), request)
        .await
        .map_err(|_| format!("{method} {path} timed out"))?
        .map_err(|e| format!("{method} {path}: {e}"))?;
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| format!("{method} {path}: not an HTTP answer: {head}"))?;
    Ok((status, body.to_owned()))
}

/// The API server's `/readyz`: it passes once every post-start hook (RBAC bootstrap etc.) is done.
pub(crate) async fn apiserver_ready(client: &kube::Client) -> Result<(), String> {
    let request = http::Request::get("/readyz")
        .body(Vec::new())
        .map_err(|e| e.to_string())?;
    match client.request_text(request).await {
        Ok(body) if body.trim() == "ok" => Ok(()),
        Ok(body) => Err(format!("GET /readyz: {body}")),
        Err(e) => Err(format!("GET /readyz: {e}")),
    }
}
