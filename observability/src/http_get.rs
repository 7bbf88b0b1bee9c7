//! A plain HTTP GET for what the programs read from other servers (Prometheus, Alertmanager,
//! the controller's `/metrics`), and a POST or any request for what the controller tells them
//! (notification webhooks): http or https with the system's CAs (`SSL_CERT_FILE` names a
//! bundle), through the environment's proxy (`HTTPS_PROXY`, `NO_PROXY`), HTTP/1.1.
//! The caller bounds each with its own timeout and words its own errors.

use crate::proxy::ProxyConnector;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::StatusCode;
use hyper_rustls::HttpsConnector;
use hyper_util::{client::legacy::Client, rt::TokioExecutor};

pub type HttpClient = Client<HttpsConnector<ProxyConnector>, Full<Bytes>>;

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
    let body = response
        .into_body()
        .collect()
        .await
        .map_err(|e| e.to_string())?
        .to_bytes();
    Ok((status, body))
}
