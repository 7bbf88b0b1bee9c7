//! The files and command lines of each component.

use std::path::{Path, PathBuf};

use crate::Error;
use crate::kubeconfig;
use crate::pki::{Pki, random_token};

pub(crate) const SERVICE_CLUSTER_IP_RANGE: &str = "10.96.0.0/16";
const SERVICE_ACCOUNT_ISSUER: &str = "https://kubernetes.default.svc.cluster.local";

/// Credentials and certificates written into the control plane's directory.
#[derive(Debug)]
pub(crate) struct Files {
    pub dir: PathBuf,
    pub ca_pem: String,
    pub admin_token: String,
}

impl Files {
    pub fn write(dir: &Path, server_url: &str) -> Result<Files, Error> {
        let pki = Pki::generate()?;
        let write =
            |name: &str, contents: &str| kubeconfig::write_private(&dir.join(name), contents);
        write("ca.crt", &pki.ca_cert)?;
        write("ca.key", &pki.ca_key)?;
        write("apiserver.crt", &pki.server_cert)?;
        write("apiserver.key", &pki.server_key)?;
        write("service-account.key", &pki.service_account_key)?;
        write("service-account.pub", &pki.service_account_pub)?;

        let admin = random_token()?;
        let kcm = random_token()?;
        let scheduler = random_token()?;
        // The controller-manager gets system:masters: its controllers then need no RBAC of their own.
        write(
            "tokens.csv",
            &format!(
                "{admin},testenv-admin,testenv-admin,\"system:masters\"\n\
                 {kcm},system:kube-controller-manager,system:kube-controller-manager,\"system:masters\"\n\
                 {scheduler},system:kube-scheduler,system:kube-scheduler\n"
            ),
        )?;
        let ca = &pki.ca_cert;
        kubeconfig::write(&dir.join("admin.kubeconfig"), server_url, ca, &admin)?;
        kubeconfig::write(
            &dir.join("kube-controller-manager.kubeconfig"),
            server_url,
            ca,
            &kcm,
        )?;
        kubeconfig::write(
            &dir.join("kube-scheduler.kubeconfig"),
            server_url,
            ca,
            &scheduler,
        )?;
        Ok(Files {
            dir: dir.to_path_buf(),
            ca_pem: pki.ca_cert,
            admin_token: admin,
        })
    }

    pub fn path(&self, name: &str) -> String {
        self.dir.join(name).display().to_string()
    }

    pub fn etcd_args(&self, client_port: u16, peer_port: u16, extra: &[String]) -> Vec<String> {
        let client = format!("http://127.0.0.1:{client_port}");
        let peer = format!("http://127.0.0.1:{peer_port}");
        let mut args = vec![
            "--name=testenv".into(),
            format!("--data-dir={}", self.path("etcd")),
            format!("--listen-client-urls={client}"),
            format!("--advertise-client-urls={client}"),
            format!("--listen-peer-urls={peer}"),
            format!("--initial-advertise-peer-urls={peer}"),
            format!("--initial-cluster=testenv={peer}"),
            // Throwaway data: durability only costs time.
            "--unsafe-no-fsync".into(),
        ];
        args.extend_from_slice(extra);
        args
    }

    pub fn apiserver_args(&self, port: u16, etcd_port: u16, extra: &[String]) -> Vec<String> {
        let mut args = vec![
            format!("--etcd-servers=http://127.0.0.1:{etcd_port}"),
            "--bind-address=127.0.0.1".into(),
            "--advertise-address=127.0.0.1".into(),
            // Endpoints of the `kubernetes` Service may not be loopback; nothing in-cluster needs them.
            "--endpoint-reconciler-type=none".into(),
            format!("--secure-port={port}"),
            format!("--tls-cert-file={}", self.path("apiserver.crt")),
            format!("--tls-private-key-file={}", self.path("apiserver.key")),
            format!("--client-ca-file={}", self.path("ca.crt")),
            format!("--token-auth-file={}", self.path("tokens.csv")),
            "--authorization-mode=Node,RBAC".into(),
            // A kubelet (the real-node tier's) may change only its own Node and its pods.
            "--enable-admission-plugins=NodeRestriction".into(),
            format!("--service-account-issuer={SERVICE_ACCOUNT_ISSUER}"),
            format!(
                "--service-account-key-file={}",
                self.path("service-account.pub")
            ),
            format!(
                "--service-account-signing-key-file={}",
                self.path("service-account.key")
            ),
            format!("--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}"),
            "--allow-privileged=true".into(),
            // Otherwise an open watch holds up shutdown (and every test's teardown) for 60s.
            "--shutdown-send-retry-after=true".into(),
        ];
        args.extend_from_slice(extra);
        args
    }

    pub fn controller_manager_args(&self) -> Vec<String> {
        vec![
            format!(
                "--kubeconfig={}",
                self.path("kube-controller-manager.kubeconfig")
            ),
            "--leader-elect=false".into(),
            // No serving port: nothing scrapes it, and free ports are what parallel tests race for.
            "--secure-port=0".into(),
            format!("--root-ca-file={}", self.path("ca.crt")),
            format!(
                "--service-account-private-key-file={}",
                self.path("service-account.key")
            ),
            format!("--cluster-signing-cert-file={}", self.path("ca.crt")),
            format!("--cluster-signing-key-file={}", self.path("ca.key")),
            format!("--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}"),
        ]
    }

    pub fn scheduler_args(&self) -> Vec<String> {
        vec![
            format!("--kubeconfig={}", self.path("kube-scheduler.kubeconfig")),
            "--leader-elect=false".into(),
            "--secure-port=0".into(),
        ]
    }
}
