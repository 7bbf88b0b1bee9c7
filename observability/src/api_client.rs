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
//! its request tracing. A configuration this stack does not cover, a proxy or an exec
//! credential plugin (which may issue client certificates that expire), gets kube's own client.

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

/// A client for `config`, whose connections send each write at once.
pub fn client(config: Config) -> Result<Client, kube::Error> {
    if config.proxy_url.is_some() || config.auth_info.exec.is_some() {
        tracing::debug!("a proxy or an exec plugin is configured: kube's own client");
        return Client::try_from(config);
    }
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
