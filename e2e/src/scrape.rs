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
