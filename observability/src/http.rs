//! The small HTTP server of each program: `/healthz` (the process is alive), `/readyz` (ready
//! to work: the controller's node cache is synced, the agent's watch of its node runs) and
//! `/metrics` (OpenMetrics text). HTTP/1.1 only, GET and HEAD only, no TLS: it is scraped
//! and probed from inside the cluster.

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Method, Request, Response, StatusCode, body::Incoming, header, service::service_fn};
use hyper_util::rt::TokioIo;
use prometheus_client::registry::Registry;
use std::{
    convert::Infallible,
    fmt,
    net::{Ipv4Addr, SocketAddr},
    str::FromStr,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};
use tokio::net::TcpListener;

/// The content type of `/metrics`.
pub const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// A slow or idle client gets this long per connection.
const CONNECTION_TIMEOUT: Duration = Duration::from_secs(30);

/// `--metrics-bind-address`: `host:port`, `:port` for every interface, or `0` for no server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BindAddress(pub Option<SocketAddr>);

impl FromStr for BindAddress {
    type Err = String;

    fn from_str(value: &str) -> Result<Self, Self::Err> {
        let value = value.trim();
        if value == "0" {
            return Ok(Self(None));
        }
        let parsed = match value.strip_prefix(':') {
            Some(port) => port
                .parse::<u16>()
                .map(|port| SocketAddr::from((Ipv4Addr::UNSPECIFIED, port)))
                .map_err(|_| ()),
            None => value.parse::<SocketAddr>().map_err(|_| ()),
        };
        parsed.map(|a| Self(Some(a))).map_err(|()| {
            format!(
                "{value:?} is not an address to listen on: give IP:PORT (such as `0.0.0.0:8080` \
                 or `127.0.0.1:9090`), `:PORT` for every interface, or `0` for no server"
            )
        })
    }
}

impl fmt::Display for BindAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(address) => write!(f, "{address}"),
            None => f.write_str("0"),
        }
    }
}

/// What `/readyz` answers: not ready (503, with the reason) until [`Health::set_ready`].
#[derive(Debug, Clone)]
pub struct Health {
    ready: Arc<AtomicBool>,
    not_ready_because: &'static str,
}

impl Health {
    /// Not ready yet; `/readyz` says `not ready: <because>` until it is.
    pub fn new(not_ready_because: &'static str) -> Self {
        Self {
            ready: Arc::new(AtomicBool::new(false)),
            not_ready_because,
        }
    }

    pub fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::Relaxed);
    }

    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Relaxed)
    }
}

/// Binds `address` and serves in a background task; returns the address bound (the port
/// chosen by the system when `address` has port 0).
pub async fn serve(
    address: SocketAddr,
    registry: Arc<Registry>,
    health: Health,
) -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind(address).await?;
    let local = listener.local_addr()?;
    tokio::spawn(async move {
        loop {
            let stream = match listener.accept().await {
                Ok((stream, _)) => stream,
                Err(error) => {
                    tracing::warn!(%error, "metrics server: accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            let registry = registry.clone();
            let health = health.clone();
            tokio::spawn(async move {
                let service = service_fn(move |request: Request<Incoming>| {
                    let response = respond(&request, &registry, &health);
                    async move { Ok::<_, Infallible>(response) }
                });
                let connection = hyper::server::conn::http1::Builder::new()
                    .keep_alive(true)
                    .serve_connection(TokioIo::new(stream), service);
                let _ = tokio::time::timeout(CONNECTION_TIMEOUT, connection).await;
            });
        }
    });
    Ok(local)
}

fn respond(
    request: &Request<Incoming>,
    registry: &Registry,
    health: &Health,
) -> Response<Full<Bytes>> {
    if request.method() != Method::GET && request.method() != Method::HEAD {
        return text(StatusCode::METHOD_NOT_ALLOWED, "only GET and HEAD\n".into());
    }
    match request.uri().path() {
        "/healthz" | "/livez" => text(StatusCode::OK, "ok\n".into()),
        "/readyz" if health.is_ready() => text(StatusCode::OK, "ok\n".into()),
        "/readyz" => text(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {}\n", health.not_ready_because),
        ),
        "/metrics" => {
            let mut body = String::new();
            match prometheus_client::encoding::text::encode(&mut body, registry) {
                Ok(()) => {
                    let mut response = Response::new(Full::new(Bytes::from(body)));
                    response.headers_mut().insert(
                        header::CONTENT_TYPE,
                        header::HeaderValue::from_static(OPENMETRICS),
                    );
                    response
                }
                Err(_) => text(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "cannot encode the metrics\n".into(),
                ),
            }
        }
        _ => text(
            StatusCode::NOT_FOUND,
            "not found: try /metrics, /healthz or /readyz\n".into(),
        ),
    }
}

fn text(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::metrics::counter::Counter;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[test]
    fn bind_addresses_parse() {
        let parse = |v: &str| v.parse::<BindAddress>();
        assert_eq!(
            parse("0.0.0.0:8080").unwrap().0,
            Some(SocketAddr::from(([0, 0, 0, 0], 8080)))
        );
        assert_eq!(
            parse(":9090").unwrap().0,
            Some(SocketAddr::from(([0, 0, 0, 0], 9090)))
        );
        assert_eq!(parse("[::1]:8081").unwrap().0.unwrap().port(), 8081);
        assert_eq!(parse("0").unwrap().0, None);
        for bad in ["8080", "localhost:8080", ":http", "1.2.3.4", ""] {
            let err = parse(bad).unwrap_err();
            assert!(err.contains("`0.0.0.0:8080`"), "{bad}: {err}");
        }
        assert_eq!(parse(":8080").unwrap().to_string(), "0.0.0.0:8080");
        assert_eq!(parse("0").unwrap().to_string(), "0");
    }

    async fn get(address: SocketAddr, path: &str) -> String {
        let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
        let request = format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).await.unwrap();
        response
    }

    #[tokio::test]
    async fn health_readiness_and_metrics_are_served() {
        let mut registry = Registry::with_prefix("test");
        let counter = Counter::<u64>::default();
        registry.register("things", "Things done", counter.clone());
        counter.inc();
        let health = Health::new("cache not synced");
        let address = serve(
            "127.0.0.1:0".parse().unwrap(),
            Arc::new(registry),
            health.clone(),
        )
        .await
        .unwrap();
        assert!(get(address, "/healthz").await.starts_with("HTTP/1.1 200"));
        let not_ready = get(address, "/readyz").await;
        assert!(not_ready.starts_with("HTTP/1.1 503"), "{not_ready}");
        assert!(
            not_ready.contains("not ready: cache not synced"),
            "{not_ready}"
        );
        health.set_ready(true);
        assert!(get(address, "/readyz").await.starts_with("HTTP/1.1 200"));
        let metrics = get(address, "/metrics").await;
        assert!(metrics.contains(OPENMETRICS), "{metrics}");
        assert!(metrics.contains("test_things_total 1"), "{metrics}");
        assert!(metrics.trim_end().ends_with("# EOF"), "{metrics}");
        assert!(get(address, "/nope").await.starts_with("HTTP/1.1 404"));
    }
}
