use std::path::Path;
use std::time::Duration;

use base64::Engine as _;
use kube::config::{KubeConfigOptions, Kubeconfig};

use crate::Error;

/// A kubeconfig that authenticates with a bearer token. JSON is valid YAML, so kubectl reads it.
pub(crate) fn render(server: &str, ca_pem: &str, token: &str) -> String {
    let ca = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    let config = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "testenv", "cluster": {"server": server, "certificate-authority-data": ca}}],
        "users": [{"name": "testenv", "user": {"token": token}}],
        "contexts": [{"name": "testenv", "context": {"cluster": "testenv", "user": "testenv"}}],
        "current-context": "testenv",
    });
    format!("{config:#}\n")
}

pub(crate) fn write(path: &Path, server: &str, ca_pem: &str, token: &str) -> Result<(), Error> {
    write_private(path, &render(server, ca_pem, token))
}

/// Writes a file only its owner can read: it holds a credential or a key.
pub(crate) fn write_private(path: &Path, contents: &str) -> Result<(), Error> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .and_then(|mut f| f.write_all(contents.as_bytes()))
        .map_err(Error::io(format!("write {}", path.display())))
}

pub(crate) async fn config(server: &str, ca_pem: &str, token: &str) -> Result<kube::Config, Error> {
    let kubeconfig = Kubeconfig::from_yaml(&render(server, ca_pem, token))?;
    Ok(kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await?)
}

pub(crate) async fn client(server: &str, ca_pem: &str, token: &str) -> Result<kube::Client, Error> {
    Ok(kube::Client::try_from(
        config(server, ca_pem, token).await?,
    )?)
}

/// A client for polling during startup: gives up quickly on a server that is not listening yet.
pub(crate) async fn probe_client(
    server: &str,
    ca_pem: &str,
    token: &str,
) -> Result<kube::Client, Error> {
    let mut config = config(server, ca_pem, token).await?;
    config.connect_timeout = Some(Duration::from_secs(1));
    config.read_timeout = Some(Duration::from_secs(5));
    Ok(kube::Client::try_from(config)?)
}
