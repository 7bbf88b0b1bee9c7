//! The API client of the agent and the controller: kube's, with `TCP_NODELAY` on its
//! connections.
//!
//! kube's own client leaves Nagle's algorithm on (kube-rs/kube#2056). On a new connection that
//! costs about 40 ms: the client's TLS Finished is still unacknowledged when it writes the
//! request, so Nagle holds the request back until the API server's delayed ACK comes. Every
//! agent pays it at each start (its watch holds the first connection, so its first write opens
//! a second), and that start is on the critical path of every slot of a rolling reboot. Go's
//! clients (kubectl, client-go) set `TCP_NODELAY` on every connection; this does the same.
//!
//! The stack is the one kube builds (base URI, authentication, extra headers, the default
//! retry of 429/503/504 when `default_retry` is on, connect, read and write timeouts), without
//! its request tracing. It is the only one linked in: falling back to kube's own stack for some
//! configurations doubled the HTTP client's code (1.3 MB of the agent's 8.8 MB of machine code,
//! every page of it resident). A proxy gets the error kube's own client gives in this build (no
//! `http-proxy` or `socks5` feature): the agent and the controller talk to the API server
//! directly. Certificates and tokens from an exec credential plugin come through kube's TLS
//! configuration and authentication layer, as in kube's own stack.

use http::header::{HeaderValue, USER_AGENT};
use hyper_timeout::TimeoutConnector;
use hyper_util::{
    client::legacy::{self, connect::HttpConnector},
    rt::TokioExecutor,
};
use kube::{
    Client, Config,
    client::{Body, ConfigExt, retry::RetryPolicy},
};
use tower::{BoxError, ServiceBuilder, retry::RetryLayer};

/// A client for `config`, whose connections send each write at once, and whose requests
/// name `program` and its version as their User-Agent (`reboot-agent/0.1.0`): the API
/// server's audit log then tells the operator's requests from the rest.
pub fn client(mut config: Config, program: &str) -> Result<Client, kube::Error> {
    if let Some(proxy_url) = &config.proxy_url {
        return Err(kube::Error::ProxyProtocolUnsupported {
            proxy_url: Box::new(proxy_url.clone()),
        });
    }
    let agent = format!("{program}/{}", env!("CARGO_PKG_VERSION"));
    let agent =
        HeaderValue::from_str(&agent).map_err(|e| kube::Error::HttpError(http::Error::from(e)))?;
    config.headers.push((USER_AGENT, agent));
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    let https = config.rustls_https_connector_with_connector(http)?;
    let mut connector = TimeoutConnector::new(https);
    connector.set_connect_timeout(config.connect_timeout);
    connector.set_read_timeout(config.read_timeout);
    connector.set_write_timeout(config.write_timeout);
    connector.set_reset_reader_on_write(config.reset_reader_on_write);
    let http_client: legacy::Client<_, Body> =
        legacy::Client::builder(TokioExecutor::new()).build(connector);
    let service = ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(
            config
                .default_retry
                .then(|| RetryLayer::new(RetryPolicy::server_retry())),
        )
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        .map_err(BoxError::from)
        .service(http_client);
    Ok(Client::new(service, config.default_namespace))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_proxy_is_refused_with_a_message_naming_it() {
        let mut config = Config::new("https://10.0.0.1:6443".parse().unwrap());
        config.proxy_url = Some("http://proxy.example:3128".parse().unwrap());
        let error = client(config, "reboot-agent")
            .err()
            .expect("a proxy must be refused");
        assert!(
            matches!(error, kube::Error::ProxyProtocolUnsupported { .. }),
            "{error:?}"
        );
        assert!(error.to_string().contains("proxy.example:3128"), "{error}");
    }
}
