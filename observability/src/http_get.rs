//! A plain HTTP GET for what the programs read from other servers (Prometheus, Alertmanager,
//! the controller's `/metrics`), and a POST or any request for what the controller tells them
//! (notification webhooks): http or https with the system's CAs (`SSL_CERT_FILE` names a
//! bundle), through the environment's proxy (`HTTPS_PROXY`, `NO_PROXY`), HTTP/1.1.
//! The caller bounds each with its own timeout and words its own errors.

use crate::proxy::ProxyConnector;
use bytes::Bytes;
use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use hyper::StatusCode;
use hyper_rustls::HttpsConnector;
use hyper_util::{client::legacy::Client, rt::TokioExecutor};

pub type HttpClient = Client<HttpsConnector<ProxyConnector>, Full<Bytes>>;

/// The most of an answer that is read (Prometheus, Alertmanager, a webhook): a broken or
/// hostile server cannot grow the program's memory past it.
pub const ANSWER_LIMIT: usize = 16 * 1024 * 1024;

/// A client for http and https URLs, through the proxy the environment names (see
/// [`crate::proxy`]). Without CA certificates https URLs fail (and it says so in the log),
/// http ones still work.
pub fn http_client() -> HttpClient {
    let builder = hyper_rustls::HttpsConnectorBuilder::new();
    let builder = builder.with_native_roots().unwrap_or_else(|error| {
        tracing::warn!(%error, "no CA certificates found: https URLs will fail; set SSL_CERT_FILE");
        let empty = rustls::ClientConfig::builder()
            .with_root_certificates(rustls::RootCertStore::empty())
            .with_no_client_auth();
        hyper_rustls::HttpsConnectorBuilder::new().with_tls_config(empty)
    });
    let connector = builder
        .https_or_http()
        .enable_http1()
        .wrap_connector(ProxyConnector::from_env());
    Client::builder(TokioExecutor::new()).build(connector)
}

/// GETs `url`: its status and body, or what went wrong (with the error's causes).
pub async fn get(client: &HttpClient, url: &str) -> Result<(StatusCode, Bytes), String> {
    let uri: hyper::Uri = url.parse().map_err(|e| format!("{e}"))?;
    let request = hyper::Request::get(uri)
        .body(Full::default())
        .map_err(|e| e.to_string())?;
    send(client, request).await
}

/// POSTs `body` as `content_type` to `url`: the status and body of the answer, or what went
/// wrong (with the error's causes).
pub async fn post(
    client: &HttpClient,
    url: &str,
    content_type: &str,
    body: Bytes,
) -> Result<(StatusCode, Bytes), String> {
    let request = hyper::Request::post(url)
        .header(hyper::header::CONTENT_TYPE, content_type)
        .body(Full::new(body))
        .map_err(|e| e.to_string())?;
    send(client, request).await
}

/// Sends `request` as it is (any method, its own headers): the status and body of the answer,
/// or what went wrong (with the error's causes).
pub async fn send(
    client: &HttpClient,
    request: hyper::Request<Full<Bytes>>,
) -> Result<(StatusCode, Bytes), String> {
    let response = client
        .request(request)
        .await
        .map_err(|e| crate::error_chain(&e))?;
    let status = response.status();
    let body = Limited::new(response.into_body(), ANSWER_LIMIT)
        .collect()
        .await
        .map_err(|e| {
            if e.downcast_ref::<LengthLimitError>().is_some() {
                format!(
                    "HTTP {status}: the answer is larger than {} MiB, more than is read; is \
                     this the right URL?",
                    ANSWER_LIMIT >> 20
                )
            } else {
                e.to_string()
            }
        })?
        .to_bytes();
    Ok((status, body))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A server that answers with more than the limit: the read stops there, with an error
    /// that says so, instead of holding it all.
    #[tokio::test]
    async fn an_answer_past_the_limit_is_an_error_not_memory() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let (mut stream, _) = listener.accept().await.unwrap();
            let mut request = [0u8; 1024];
            let _ = stream.read(&mut request).await;
            let size = ANSWER_LIMIT + 1024;
            let head = format!("HTTP/1.1 200 OK\r\ncontent-length: {size}\r\n\r\n");
            let _ = stream.write_all(head.as_bytes()).await;
            let chunk = vec![b'x'; 64 * 1024];
            for _ in 0..=(size / chunk.len()) {
                if stream.write_all(&chunk).await.is_err() {
                    return;
                }
            }
        });
        let error = get(&http_client(), &format!("http://{address}/"))
            .await
            .unwrap_err();
        assert!(error.contains("larger than 16 MiB"), "{error}");
    }
}
