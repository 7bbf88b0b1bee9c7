//! Several guests against one control plane, each with the identities a cluster would give
//! it: the agent's token is minted by TokenRequest for the manifests' ServiceAccount and bound
//! to a Pod of the DaemonSet on that node, so the manifests' admission policy applies to it.

use crate::{
    Error,
    image::BaseImage,
    qemu::{GUEST_API_PORT, Vm, VmSpec, wait_for_first_boots},
    repo_root,
    seed::{SeedFile, environment_file, write_seed_disk},
};
use k8s_openapi::api::apps::v1::DaemonSet;
use kube::{Api, Client};
use nodesim::identities;
use std::{
    path::{Path, PathBuf},
    time::Duration,
};
use testenv::{ControlPlane, GUEST_FORWARD_ADDRESS};

/// The operator's namespace in `manifests/`.
const NAMESPACE: &str = "node-reboot-operator";

/// The reporter plays the kubelet: it may register Nodes, report their status and renew their
/// heartbeat Leases, nothing else.
const REPORTER_RBAC: &str = r#"
apiVersion: v1
kind: ServiceAccount
metadata: {name: vm-node-reporter, namespace: kube-system}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: vm-node-reporter}
rules:
  - {apiGroups: [""], resources: [nodes], verbs: [get, create]}
  - {apiGroups: [""], resources: [nodes/status], verbs: [patch]}
  - {apiGroups: [coordination.k8s.io], resources: [leases], verbs: [get, create, patch]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: vm-node-reporter}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: vm-node-reporter}
subjects: [{kind: ServiceAccount, name: vm-node-reporter, namespace: kube-system}]
"#;

/// One guest: its Node name and the agent's environment beyond the DaemonSet's.
#[derive(Debug, Clone)]
pub struct Guest {
    pub name: String,
    /// Such as `REBOOT_METHOD=signal`.
    pub agent_env: Vec<(String, String)>,
}

impl Guest {
    pub fn new(name: &str, agent_env: &[(&str, &str)]) -> Guest {
        Guest {
            name: name.to_owned(),
            agent_env: agent_env
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        }
    }
}

/// The guests of a run.
#[derive(Debug)]
pub struct VmFleet {
    pub vms: Vec<Vm>,
    pub run_dir: PathBuf,
}

/// A release binary of `make static`, which the images ship and the guests run.
pub fn static_binary(name: &str) -> Result<PathBuf, Error> {
    let path = repo_root()
        .join("target")
        .join(format!("{}-unknown-linux-gnu", std::env::consts::ARCH))
        .join("release")
        .join(name);
    if path.is_file() {
        Ok(path)
    } else {
        Err(Error::Setup(format!(
            "{} is missing: the guests run the static release binaries; build them with \
             `make static`",
            path.display()
        )))
    }
}

impl VmFleet {
    /// Applies `manifests/`, creates every guest's Node and identities, and boots the guests.
    pub async fn start(
        cp: &ControlPlane,
        image: &BaseImage,
        guests: &[Guest],
        run_dir: &Path,
    ) -> Result<VmFleet, Error> {
        let binaries = [
            static_binary("reboot-agent")?,
            static_binary("vm-node-reporter")?,
        ];
        let admin = cp.client().await?;
        let manifests = repo_root().join("manifests").display().to_string();
        run_kubectl(cp, &["apply", "-k", &manifests, "--server-side"])?;
        cp.apply(REPORTER_RBAC)?;
        let names: Vec<String> = guests.iter().map(|g| g.name.clone()).collect();
        // Nodes first: a token bound to a pod names the pod's node only if the Node exists.
        for name in &names {
            identities::ensure_node(&admin, name).await?;
        }
        let identity_dir = run_dir.join("identities");
        let daemonset = Api::<DaemonSet>::namespaced(admin.clone(), NAMESPACE)
            .get("reboot-agent")
            .await?;
        let agent_kubeconfig =
            identities::agent_kubeconfigs(cp, &admin, &daemonset, &names, &identity_dir).await?;
        let reporter_kubeconfig = identities::service_account_kubeconfig(
            cp,
            &admin,
            "kube-system",
            "vm-node-reporter",
            &identity_dir.join("reporter.kubeconfig"),
        )
        .await?;
        let api_port = api_port(cp)?;
        let mut vms = Vec::new();
        for guest in guests {
            let vm_dir = run_dir.join(&guest.name);
            let seed = vm_dir.join("seed.img");
            let files = seed_files(
                guest,
                &binaries,
                &agent_kubeconfig(&guest.name),
                &reporter_kubeconfig,
            )?;
            write_seed_disk(&files, &seed)?;
            let spec = VmSpec {
                name: guest.name.clone(),
                memory_mib: 448,
                api_port,
                registry_port: None,
                seed_disk: seed,
                dir: vm_dir,
                kernel_args: String::new(),
                log_ports: Vec::new(),
            };
            vms.push(Vm::boot(image, &spec)?);
            eprintln!(
                "vm: {} started (serial console: {})",
                guest.name,
                vms.last()
                    .map_or_else(String::new, |v| v.serial_log_path().display().to_string())
            );
        }
        Ok(VmFleet {
            vms,
            run_dir: run_dir.to_path_buf(),
        })
    }

    pub fn vm(&self, name: &str) -> &Vm {
        self.vms
            .iter()
            .find(|vm| vm.name == name)
            .unwrap_or_else(|| panic!("no VM {name}"))
    }

    /// Waits until every guest reported its first boot on its console and the Node shows that
    /// boot id; prints each guest's boot time.
    pub async fn wait_until_booted(
        &mut self,
        client: &Client,
        timeout: Duration,
    ) -> Result<(), Error> {
        let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(client.clone());
        wait_for_first_boots(
            &mut self.vms,
            timeout,
            &self.run_dir,
            "vm",
            async |vm: &Vm| match vm.boot_ids().last() {
                Some(id) => reported_boot_id(&nodes, &vm.name).await.as_deref() == Some(id),
                None => false,
            },
        )
        .await
    }
}

/// The boot id a Node's status reports.
pub async fn reported_boot_id(
    nodes: &Api<k8s_openapi::api::core::v1::Node>,
    name: &str,
) -> Option<String> {
    let node = nodes.get_opt(name).await.ok().flatten()?;
    node.status?.node_info.map(|info| info.boot_id)
}

pub(crate) fn api_port(cp: &ControlPlane) -> Result<u16, Error> {
    cp.server_url()
        .rsplit(':')
        .next()
        .and_then(|port| port.parse().ok())
        .ok_or_else(|| Error::Setup(format!("no port in {}", cp.server_url())))
}

pub(crate) fn run_kubectl(cp: &ControlPlane, args: &[&str]) -> Result<(), Error> {
    let output = cp
        .kubectl()
        .args(args)
        .output()
        .map_err(Error::io("run kubectl"))?;
    if output.status.success() {
        return Ok(());
    }
    Err(Error::Setup(format!(
        "kubectl {} failed: {}",
        args.join(" "),
        String::from_utf8_lossy(&output.stderr).trim()
    )))
}

/// A kubeconfig for use inside a guest: the same credentials, the forwarded server address.
fn for_guest(kubeconfig: &Path) -> Result<String, Error> {
    let text = std::fs::read_to_string(kubeconfig)
        .map_err(Error::io(format!("read {}", kubeconfig.display())))?;
    let mut config: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| Error::Setup(format!("{}: {e}", kubeconfig.display())))?;
    let server = format!("https://{GUEST_FORWARD_ADDRESS}:{GUEST_API_PORT}");
    for cluster in config["clusters"].as_array_mut().into_iter().flatten() {
        cluster["cluster"]["server"] = server.clone().into();
    }
    Ok(format!("{config:#}\n"))
}

fn seed_files(
    guest: &Guest,
    [agent, reporter]: &[PathBuf; 2],
    agent_kubeconfig: &Path,
    reporter_kubeconfig: &Path,
) -> Result<Vec<SeedFile>, Error> {
    // What the DaemonSet gives the agent (NODE_NAME, --log-format=json), the in-cluster
    // credentials as a kubeconfig, and the guest's own choices.
    let mut agent_env: Vec<(&str, &str)> = vec![
        ("NODE_NAME", &guest.name),
        ("LOG_FORMAT", "json"),
        ("KUBECONFIG", "/opt/node-reboot/agent.kubeconfig"),
    ];
    agent_env.extend(
        guest
            .agent_env
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str())),
    );
    let reporter_env = [
        ("NODE_NAME", guest.name.as_str()),
        ("KUBECONFIG", "/opt/node-reboot/reporter.kubeconfig"),
    ];
    Ok(vec![
        SeedFile::Program {
            name: "reboot-agent".into(),
            from: agent.clone(),
        },
        SeedFile::Program {
            name: "vm-node-reporter".into(),
            from: reporter.clone(),
        },
        SeedFile::Private {
            name: "agent.env".into(),
            contents: environment_file(&agent_env),
        },
        SeedFile::Private {
            name: "reporter.env".into(),
            contents: environment_file(&reporter_env),
        },
        SeedFile::Private {
            name: "agent.kubeconfig".into(),
            contents: for_guest(agent_kubeconfig)?,
        },
        SeedFile::Private {
            name: "reporter.kubeconfig".into(),
            contents: for_guest(reporter_kubeconfig)?,
        },
    ])
}
