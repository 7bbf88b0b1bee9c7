//! Client-side request counting: a plain-HTTP reverse proxy on loopback between one program
//! (the controller or an agent) and the API server. The program's kubeconfig points at the
//! proxy; the proxy records every HTTP request the program sends, then forwards it with the
//! credentials of the program's own ServiceAccount (so the API server's audit log attributes it
//! to that identity, for the cross-check) and streams the answer back, watches included.
//!
//! The programs themselves are not changed: counting happens on their side of the wire.

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::{body::Incoming, server::conn::http1, service::service_fn};
use hyper_util::rt::TokioIo;
use std::{
    convert::Infallible,
    path::Path,
    sync::{Arc, Mutex},
    time::SystemTime,
};
use tokio::{net::TcpListener, task::JoinHandle};

/// One request as the program sent it.
#[derive(Debug, Clone)]
pub struct Sent {
    pub at: SystemTime,
    pub method: String,
    pub path: String,
    pub query: String,
}

impl Sent {
    /// The request as the API server's audit log names it: `verb resource[/subresource]`, and
    /// the object's name when there is one.
    pub fn kind(&self) -> RequestKind {
        RequestKind::of(&self.method, &self.path, &self.query)
    }
}

/// A request in the terms of the API server's audit events.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct RequestKind {
    pub verb: String,
    pub resource: String,
    pub name: Option<String>,
}

impl RequestKind {
    pub fn of(method: &str, path: &str, query: &str) -> Self {
        let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
        let rest: &[&str] = match segments.first() {
            Some(&"api") => segments.get(2..).unwrap_or_default(),
            Some(&"apis") => segments.get(3..).unwrap_or_default(),
            _ => &segments,
        };
        let rest = match rest {
            ["namespaces", _, resource, more @ ..] => {
                let mut v = vec![*resource];
                v.extend_from_slice(more);
                v
            }
            other => other.to_vec(),
        };
        let resource = match (rest.first(), rest.get(2)) {
            (Some(r), Some(sub)) => format!("{r}/{sub}"),
            (Some(r), None) => (*r).to_owned(),
            _ => path.to_owned(),
        };
        let name = rest.get(1).map(|n| (*n).to_owned());
        let watch = query
            .split('&')
            .any(|kv| kv == "watch=true" || kv == "watch=1");
        let verb = match method {
            "GET" if watch => "watch",
            "GET" if name.is_none() => "list",
            "GET" => "get",
            "POST" => "create",
            "PUT" => "update",
            "PATCH" => "patch",
            "DELETE" if name.is_none() => "deletecollection",
            "DELETE" => "delete",
            other => other,
        };
        Self {
            verb: verb.to_owned(),
            resource,
            name,
        }
    }

    pub fn label(&self) -> String {
        format!("{} {}", self.verb, self.resource)
    }
}

type Log = Arc<Mutex<Vec<Sent>>>;

/// A running counting proxy; dropping it stops accepting connections.
#[derive(Debug)]
pub struct CountingProxy {
    url: String,
    log: Log,
    task: JoinHandle<()>,
}

impl CountingProxy {
    /// Listens on a free loopback port and forwards through `upstream`, which should be a client
    /// with retries off (so one request of the program is one request to the API server).
    pub async fn start(upstream: kube::Client) -> anyhow::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}", listener.local_addr()?);
        let log: Log = Arc::default();
        let recorded = log.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    // Out of file descriptors, say: try again in a moment.
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                };
                let upstream = upstream.clone();
                let log = recorded.clone();
                tokio::spawn(async move {
                    let service =
                        service_fn(move |request| forward(request, upstream.clone(), log.clone()));
                    if let Err(error) = http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await
                    {
                        tracing::debug!(%error, "proxied connection ended");
                    }
                });
            }
        });
        Ok(Self { url, log, task })
    }

    /// A kubeconfig that sends a program through this proxy (no credentials: the proxy adds them).
    pub fn write_kubeconfig(&self, path: &Path) -> anyhow::Result<()> {
        let config = serde_json::json!({
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "proxy", "cluster": {"server": self.url}}],
            "users": [{"name": "proxy", "user": {}}],
            "contexts": [{"name": "proxy", "context": {"cluster": "proxy", "user": "proxy"}}],
            "current-context": "proxy",
        });
        std::fs::write(path, format!("{config:#}\n"))?;
        Ok(())
    }

    /// Every request so far.
    pub fn sent(&self) -> Vec<Sent> {
        self.log.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The requests sent from `from` (inclusive) to `to` (exclusive).
    pub fn sent_between(&self, from: SystemTime, to: SystemTime) -> Vec<Sent> {
        self.sent()
            .into_iter()
            .filter(|s| s.at >= from && s.at < to)
            .collect()
    }
}

impl Drop for CountingProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Headers that belong to one hop, not to the request.
fn hop_by_hop(name: &http::HeaderName) -> bool {
    use http::header;
    [
        header::HOST,
        header::CONNECTION,
        header::TRANSFER_ENCODING,
        header::CONTENT_LENGTH,
        header::AUTHORIZATION,
        header::UPGRADE,
        header::TE,
        header::TRAILER,
        header::PROXY_AUTHORIZATION,
    ]
    .contains(name)
        || name.as_str() == "keep-alive"
}

async fn forward(
    request: http::Request<Incoming>,
    upstream: kube::Client,
    log: Log,
) -> Result<http::Response<kube::client::Body>, Infallible> {
    let (parts, body) = request.into_parts();
    let path = parts.uri.path().to_owned();
    let query = parts.uri.query().unwrap_or_default().to_owned();
    log.lock().unwrap_or_else(|e| e.into_inner()).push(Sent {
        at: SystemTime::now(),
        method: parts.method.to_string(),
        path: path.clone(),
        query: query.clone(),
    });
    let body: Bytes = match body.collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(error) => return Ok(bad_gateway(format!("reading the request: {error}"))),
    };
    let target = if query.is_empty() {
        path
    } else {
        format!("{path}?{query}")
    };
    let mut builder = http::Request::builder().method(parts.method).uri(target);
    for (name, value) in parts.headers.iter().filter(|(n, _)| !hop_by_hop(n)) {
        builder = builder.header(name, value);
    }
    let request = match builder.body(kube::client::Body::from(body)) {
        Ok(request) => request,
        Err(error) => return Ok(bad_gateway(format!("rebuilding the request: {error}"))),
    };
    match upstream.send(request).await {
        Ok(response) => {
            let (mut parts, body) = response.into_parts();
            let headers = std::mem::take(&mut parts.headers);
            parts.headers = headers
                .iter()
                .filter(|(name, _)| !hop_by_hop(name))
                .map(|(name, value)| (name.clone(), value.clone()))
                .collect();
            Ok(http::Response::from_parts(parts, body))
        }
        Err(error) => Ok(bad_gateway(format!("forwarding: {error}"))),
    }
}

fn bad_gateway(why: String) -> http::Response<kube::client::Body> {
    tracing::warn!("counting proxy: {why}");
    let mut response = http::Response::new(kube::client::Body::from(why.into_bytes()));
    *response.status_mut() = http::StatusCode::BAD_GATEWAY;
    response
}

#[cfg(test)]
mod tests {
    use super::RequestKind;

    fn label(method: &str, path: &str, query: &str) -> (String, Option<String>) {
        let kind = RequestKind::of(method, path, query);
        (kind.label(), kind.name)
    }

    #[test]
    fn requests_are_named_as_the_audit_log_names_them() {
        let cases = [
            (
                ("GET", "/api/v1/nodes", "fieldSelector=x"),
                ("list nodes", None),
            ),
            (
                ("GET", "/api/v1/nodes", "watch=true&resourceVersion=5"),
                ("watch nodes", None),
            ),
            (
                ("PATCH", "/api/v1/nodes/n1", ""),
                ("patch nodes", Some("n1")),
            ),
            (
                ("PATCH", "/api/v1/nodes/n1/status", ""),
                ("patch nodes/status", Some("n1")),
            ),
            (
                (
                    "POST",
                    "/apis/events.k8s.io/v1/namespaces/default/events",
                    "",
                ),
                ("create events", None),
            ),
            (
                (
                    "PUT",
                    "/apis/coordination.k8s.io/v1/namespaces/ns/leases/slots",
                    "",
                ),
                ("update leases", Some("slots")),
            ),
        ];
        for ((method, path, query), (want, name)) in cases {
            assert_eq!(
                label(method, path, query),
                (want.to_owned(), name.map(str::to_owned)),
                "{method} {path}?{query}"
            );
        }
    }
}
