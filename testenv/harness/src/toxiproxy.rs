//! A real fault proxy between a program and the API server: [Toxiproxy]'s server
//! (`testenv/bin/toxiproxy-server`, built by `make testenv`) and a small client for its HTTP API.
//!
//! Each [`Proxy`] forwards TCP from a loopback port to an upstream address. TLS passes through
//! untouched, so a kubeconfig whose server is `https://<proxy's listen address>` works with the
//! API server's own certificate (valid for 127.0.0.1 whatever the port). [`Toxic`]s then slow,
//! cut or reset what goes through, in one direction ([`Stream`]) or both; removing a toxic heals.
//!
//! ```no_run
//! # async fn demo(cp: &testenv::ControlPlane) -> Result<(), testenv::Error> {
//! use testenv::toxiproxy::{Stream, Toxic, Toxiproxy};
//! let toxiproxy = Toxiproxy::start(cp.dir()).await?;
//! let proxy = toxiproxy.proxy_to_apiserver(cp, "controller-1").await?;
//! // point the program at proxy.kubeconfig(), then:
//! proxy.add(&Toxic::latency("slow", Stream::Downstream, 3000, 2000)).await?;
//! proxy.add(&Toxic::timeout("cut", Stream::Upstream, 0)).await?;
//! proxy.remove("cut").await?;
//! # Ok(())
//! # }
//! ```
//!
//! Dropping the [`Toxiproxy`] kills its server, and with it every proxy.
//!
//! [Toxiproxy]: https://github.com/Shopify/toxiproxy

use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

use crate::process::Proc;
use crate::{ControlPlane, Error, bins, ports};

/// How long the server may take to answer its first request.
const STARTUP: Duration = Duration::from_secs(20);
/// How long one API request may take (the server answers at once; this only bounds a hang).
const REQUEST: Duration = Duration::from_secs(10);

/// A running `toxiproxy-server` on a free loopback port; killed on drop.
#[derive(Debug)]
pub struct Toxiproxy {
    proc: Proc,
    api: SocketAddr,
    dir: PathBuf,
}

impl Drop for Toxiproxy {
    fn drop(&mut self) {
        self.proc.pause(false);
        self.proc.stop(Duration::from_secs(2));
    }
}

impl Toxiproxy {
    /// Starts the server; its log is `<dir>/toxiproxy.log` and the proxies' kubeconfigs are
    /// written to `dir` too. Fails (never skips) when the binary is missing.
    pub async fn start(dir: &Path) -> Result<Toxiproxy, Error> {
        let bin = bins::bin("toxiproxy-server")?;
        let port = ports::pick()?;
        let args = ["-host", "127.0.0.1", "-port", &port.to_string()];
        let args = args.iter().map(|s| (*s).to_owned()).collect();
        let mut proc = Proc::spawn("toxiproxy", bin, args, dir)?;
        let api = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        let began = Instant::now();
        loop {
            proc.ensure_running()?;
            match request(api, "GET", "/version", None).await {
                Ok(_) => break,
                Err(e) if began.elapsed() > STARTUP => {
                    return Err(proc.not_ready(STARTUP, e.to_string()));
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
        Ok(Toxiproxy {
            proc,
            api,
            dir: dir.to_path_buf(),
        })
    }

    /// Freezes the server (SIGSTOP) or thaws it: while frozen, every byte on the way through
    /// any of its proxies stays where it is, and the connections stay open, as in a network
    /// that stops forwarding for a while. Its API does not answer meanwhile.
    pub fn freeze(&self, frozen: bool) {
        self.proc.pause(frozen);
    }

    /// A new proxy named `name` from a free loopback port to `upstream` (`host:port`).
    pub async fn proxy(&self, name: &str, upstream: &str) -> Result<Proxy, Error> {
        let listen = SocketAddr::from((Ipv4Addr::LOCALHOST, ports::pick()?));
        let body = json!({"name": name, "listen": listen.to_string(), "upstream": upstream, "enabled": true});
        request(self.api, "POST", "/proxies", Some(&body)).await?;
        Ok(Proxy {
            api: self.api,
            name: name.to_owned(),
            listen,
            kubeconfig: None,
        })
    }

    /// A proxy to `cp`'s API server and an admin kubeconfig through it
    /// (`<dir>/<name>.proxied.kubeconfig`, see [`Proxy::kubeconfig`]).
    pub async fn proxy_to_apiserver(&self, cp: &ControlPlane, name: &str) -> Result<Proxy, Error> {
        let upstream = cp
            .server_url()
            .strip_prefix("https://")
            .unwrap_or(cp.server_url())
            .to_owned();
        let mut proxy = self.proxy(name, &upstream).await?;
        let path = self.dir.join(format!("{name}.proxied.kubeconfig"));
        cp.write_admin_kubeconfig_for_server(&format!("https://{}", proxy.listen), &path)?;
        proxy.kubeconfig = Some(path);
        Ok(proxy)
    }
}

/// One proxy of a [`Toxiproxy`] server.
#[derive(Debug, Clone)]
pub struct Proxy {
    api: SocketAddr,
    name: String,
    listen: SocketAddr,
    kubeconfig: Option<PathBuf>,
}

impl Proxy {
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Where the proxy listens (programs connect here instead of to the upstream).
    pub fn listen(&self) -> SocketAddr {
        self.listen
    }

    /// The admin kubeconfig through this proxy, when made by
    /// [`Toxiproxy::proxy_to_apiserver`].
    pub fn kubeconfig(&self) -> Option<&Path> {
        self.kubeconfig.as_deref()
    }

    /// Adds a toxic (its name must be new on this proxy).
    pub async fn add(&self, toxic: &Toxic) -> Result<(), Error> {
        let path = format!("/proxies/{}/toxics", self.name);
        request(self.api, "POST", &path, Some(&toxic.to_json())).await?;
        Ok(())
    }

    /// Removes the toxic named `toxic`: what it held back goes on (latency), what it dropped
    /// stays lost (timeout).
    pub async fn remove(&self, toxic: &str) -> Result<(), Error> {
        let path = format!("/proxies/{}/toxics/{toxic}", self.name);
        request(self.api, "DELETE", &path, None).await?;
        Ok(())
    }

    /// Removes every toxic.
    pub async fn clear(&self) -> Result<(), Error> {
        let path = format!("/proxies/{}/toxics", self.name);
        let toxics = request(self.api, "GET", &path, None).await?;
        for toxic in toxics.as_array().into_iter().flatten() {
            if let Some(name) = toxic.get("name").and_then(Value::as_str) {
                self.remove(name).await?;
            }
        }
        Ok(())
    }

    /// Disabling closes every connection through the proxy and refuses new ones (a crisp
    /// partition: the program sees errors at once); enabling listens again.
    pub async fn set_enabled(&self, enabled: bool) -> Result<(), Error> {
        let path = format!("/proxies/{}", self.name);
        request(self.api, "POST", &path, Some(&json!({"enabled": enabled}))).await?;
        Ok(())
    }
}

/// Which direction a toxic acts on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    /// From the program to the upstream (its requests, its writes).
    Upstream,
    /// From the upstream to the program (answers, watch events).
    Downstream,
}

/// What a toxic does (Toxiproxy's toxic types; times in milliseconds).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToxicKind {
    /// Holds each chunk `latency` ± `jitter` ms, then passes it on: nothing is lost.
    Latency { latency: u64, jitter: u64 },
    /// Resets the connections (TCP RST) after `timeout` ms (0: at once).
    ResetPeer { timeout: u64 },
    /// Drops all data; closes the connection after `timeout` ms, or never with 0 (a silent
    /// partition whose connections stay open).
    Timeout { timeout: u64 },
    /// At most `rate` KB/s.
    Bandwidth { rate: u64 },
    /// Closes the connection after `bytes` bytes.
    LimitData { bytes: u64 },
}

/// A toxic: a kind, a direction, a name to remove it by.
#[derive(Debug, Clone, PartialEq)]
pub struct Toxic {
    pub name: String,
    pub stream: Stream,
    pub kind: ToxicKind,
    /// The share of connections it applies to (1.0: all).
    pub toxicity: f32,
}

impl Toxic {
    pub fn new(name: &str, stream: Stream, kind: ToxicKind) -> Self {
        Self {
            name: name.to_owned(),
            stream,
            kind,
            toxicity: 1.0,
        }
    }

    pub fn latency(name: &str, stream: Stream, latency: u64, jitter: u64) -> Self {
        Self::new(name, stream, ToxicKind::Latency { latency, jitter })
    }

    pub fn reset_peer(name: &str, stream: Stream, timeout: u64) -> Self {
        Self::new(name, stream, ToxicKind::ResetPeer { timeout })
    }

    pub fn timeout(name: &str, stream: Stream, timeout: u64) -> Self {
        Self::new(name, stream, ToxicKind::Timeout { timeout })
    }

    pub fn bandwidth(name: &str, stream: Stream, rate: u64) -> Self {
        Self::new(name, stream, ToxicKind::Bandwidth { rate })
    }

    pub fn limit_data(name: &str, stream: Stream, bytes: u64) -> Self {
        Self::new(name, stream, ToxicKind::LimitData { bytes })
    }

    fn to_json(&self) -> Value {
        let (kind, attributes) = match self.kind {
            ToxicKind::Latency { latency, jitter } => {
                ("latency", json!({"latency": latency, "jitter": jitter}))
            }
            ToxicKind::ResetPeer { timeout } => ("reset_peer", json!({"timeout": timeout})),
            ToxicKind::Timeout { timeout } => ("timeout", json!({"timeout": timeout})),
            ToxicKind::Bandwidth { rate } => ("bandwidth", json!({"rate": rate})),
            ToxicKind::LimitData { bytes } => ("limit_data", json!({"bytes": bytes})),
        };
        let stream = match self.stream {
            Stream::Upstream => "upstream",
            Stream::Downstream => "downstream",
        };
        json!({"name": self.name, "type": kind, "stream": stream,
               "toxicity": self.toxicity, "attributes": attributes})
    }
}

/// One HTTP/1.0 request to the API (1.0: the answer ends when the connection does, no chunks
/// to decode); the JSON answer, or an error with the server's message.
async fn request(
    api: SocketAddr,
    method: &str,
    path: &str,
    body: Option<&Value>,
) -> Result<Value, Error> {
    let what = format!("ask toxiproxy ({method} {path})");
    let exchange = async {
        let body = body.map(Value::to_string).unwrap_or_default();
        let mut stream = TcpStream::connect(api).await?;
        let head = format!(
            "{method} {path} HTTP/1.0\r\nHost: {api}\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\n\r\n",
            body.len()
        );
        stream.write_all(head.as_bytes()).await?;
        stream.write_all(body.as_bytes()).await?;
        let mut answer = String::new();
        stream.read_to_string(&mut answer).await?;
        Ok::<_, std::io::Error>(answer)
    };
    let answer = tokio::time::timeout(REQUEST, exchange)
        .await
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::TimedOut))
        .and_then(|r| r)
        .map_err(Error::io(what.clone()))?;
    let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
    let status = head.split_whitespace().nth(1).unwrap_or("");
    if !status.starts_with('2') {
        let message = format!("the server answered {status}: {}", body.trim());
        return Err(Error::io(what)(std::io::Error::other(message)));
    }
    Ok(serde_json::from_str(body).unwrap_or(Value::Null))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn toxics_are_sent_as_toxiproxy_names_them() {
        let toxic = Toxic::latency("slow", Stream::Downstream, 3000, 2000).to_json();
        assert_eq!(
            toxic,
            json!({"name": "slow", "type": "latency", "stream": "downstream", "toxicity": 1.0,
                   "attributes": {"latency": 3000, "jitter": 2000}})
        );
        let cut = Toxic::timeout("cut", Stream::Upstream, 0).to_json();
        assert_eq!(cut["type"], "timeout");
        assert_eq!(cut["stream"], "upstream");
        assert_eq!(
            Toxic::limit_data("l", Stream::Upstream, 9).to_json()["type"],
            "limit_data"
        );
        assert_eq!(
            Toxic::reset_peer("r", Stream::Upstream, 0).to_json()["type"],
            "reset_peer"
        );
        assert_eq!(
            Toxic::bandwidth("b", Stream::Upstream, 1).to_json()["type"],
            "bandwidth"
        );
    }
}
