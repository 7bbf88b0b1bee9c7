//! The outbound proxy of `HTTPS_PROXY`, `HTTP_PROXY`, `ALL_PROXY` and `NO_PROXY` (upper or
//! lower case, read as curl and Go read them): an https destination is reached through a
//! `CONNECT` tunnel (TLS end to end, the proxy's credentials from its URL), an http one by
//! sending the request to the proxy in absolute form. Without those variables, or for a host
//! `NO_PROXY` names, connections go straight to the destination.

use hyper::rt::{Read, ReadBufCursor, Write};
use hyper_util::client::legacy::connect::proxy::Tunnel;
use hyper_util::client::legacy::connect::{Connected, Connection, HttpConnector};
use hyper_util::client::proxy::matcher::Matcher;
use hyper_util::rt::TokioIo;
use std::{
    future::Future,
    io,
    pin::Pin,
    sync::Arc,
    task::{Context, Poll},
};
use tokio::net::TcpStream;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Connects to a destination, or to it through the proxy the environment names.
#[derive(Clone)]
pub struct ProxyConnector {
    http: HttpConnector,
    matcher: Arc<Matcher>,
}

impl std::fmt::Debug for ProxyConnector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProxyConnector").finish_non_exhaustive()
    }
}

impl ProxyConnector {
    /// The proxies the environment names now.
    pub fn from_env() -> Self {
        Self::new(Matcher::from_env())
    }

    /// The proxies `matcher` names.
    pub fn new(matcher: Matcher) -> Self {
        let mut http = HttpConnector::new();
        // HttpsConnector adds TLS itself; this one only opens TCP connections.
        http.enforce_http(false);
        Self {
            http,
            matcher: Arc::new(matcher),
        }
    }
}

impl tower::Service<hyper::Uri> for ProxyConnector {
    type Response = Stream;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Stream, BoxError>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, destination: hyper::Uri) -> Self::Future {
        let mut http = self.http.clone();
        let intercept = self.matcher.intercept(&destination);
        Box::pin(async move {
            let Some(intercept) = intercept else {
                let io = http.call(destination).await?;
                return Ok(Stream { io, proxied: false });
            };
            if destination.scheme_str() == Some("https") {
                let mut tunnel = Tunnel::new(intercept.uri().clone(), http);
                if let Some(auth) = intercept.basic_auth() {
                    tunnel = tunnel.with_auth(auth.clone());
                }
                let io = tunnel.call(destination).await?;
                return Ok(Stream { io, proxied: false });
            }
            let io = http.call(intercept.uri().clone()).await?;
            Ok(Stream { io, proxied: true })
        })
    }
}

/// A connection, to the destination or to the proxy that forwards plain http requests.
#[derive(Debug)]
pub struct Stream {
    io: TokioIo<TcpStream>,
    /// Requests on it go to the proxy, in absolute form.
    proxied: bool,
}

impl Connection for Stream {
    fn connected(&self) -> Connected {
        self.io.connected().proxy(self.proxied)
    }
}

impl Read for Stream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl Write for Stream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use http_body_util::Full;
    use hyper_util::{client::legacy::Client, rt::TokioExecutor};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    /// A proxy on loopback that answers 200 and tells the first line it was sent.
    async fn proxy() -> (String, tokio::sync::oneshot::Receiver<String>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let address = listener.local_addr().expect("address");
        let (tx, rx) = tokio::sync::oneshot::channel();
        tokio::spawn(async move {
            let Ok((mut stream, _)) = listener.accept().await else {
                return;
            };
            let mut request = vec![0; 4096];
            let read = stream.read(&mut request).await.unwrap_or(0);
            let text = String::from_utf8_lossy(&request[..read]).into_owned();
            let _ = tx.send(text.lines().next().unwrap_or_default().to_owned());
            let _ = stream
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
                .await;
        });
        (format!("http://{address}"), rx)
    }

    #[tokio::test]
    async fn an_http_request_goes_to_the_proxy_in_absolute_form_and_no_proxy_is_honoured() {
        let (proxy, first_line) = proxy().await;
        let matcher = Matcher::builder()
            .http(proxy.clone())
            .no("direct.example")
            .build();
        let client: Client<_, Full<Bytes>> =
            Client::builder(TokioExecutor::new()).build(ProxyConnector::new(matcher));
        let uri: hyper::Uri = "http://hooks.example/a?b=c".parse().expect("a URI");
        let answer = client.get(uri).await.expect("the proxy answers");
        assert_eq!(answer.status(), 200);
        assert_eq!(
            first_line.await.expect("the proxy was asked"),
            "GET http://hooks.example/a?b=c HTTP/1.1"
        );
        let matcher = Matcher::builder().http(proxy).no("direct.example").build();
        let intercepted = matcher.intercept(&"http://direct.example/".parse().expect("a URI"));
        assert!(intercepted.is_none(), "NO_PROXY's host is reached straight");
    }
}
