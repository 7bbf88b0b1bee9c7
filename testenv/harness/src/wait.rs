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

/// etcd's `/health` over plain HTTP/1.0, which needs no HTTP client.
pub(crate) async fn etcd_health(port: u16) -> Result<(), String> {
    let request = async {
        let mut stream = TcpStream::connect((Ipv4Addr::LOCALHOST, port)).await?;
        stream.write_all(b"GET /health HTTP/1.0\r\n\r\n").await?;
        let mut response = String::new();
        stream.read_to_string(&mut response).await?;
        Ok::<_, std::io::Error>(response)
    };
    let response = tokio::time::timeout(Duration::from_secs(2), request)
        .await
        .map_err(|_| "GET /health timed out".to_owned())?
        .map_err(|e| format!("GET /health: {e}"))?;
    if response.contains(r#""health":"true""#) {
        Ok(())
    } else {
        Err(format!(
            "GET /health: {}",
            response.lines().last().unwrap_or("")
        ))
    }
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
