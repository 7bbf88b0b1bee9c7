//! Real nodes: guests of `vm/node/image` (a kubelet, containerd, runc, CNI, D-Bus, logind and
//! AppArmor) that join the local control plane as a cluster's nodes do. Each kubelet has its
//! own client certificate (`system:node:<name>`, signed by the control plane's CA), so the Node
//! authorizer and NodeRestriction hold it to its node. Each guest's containerd pulls the
//! operator's images from a registry on the host, over TLS, trusting the CA that signed the
//! registry's certificate ([`NodeRegistry`]); the sandbox image and the test workload's are
//! imported from the seed disk.

use crate::{
    Error,
    fleet::api_port,
    image::BaseImage,
    qemu::{GUEST_API_PORT, GUEST_REGISTRY_PORT, Vm, VmSpec, boot_id_prefix, wait_for_first_boots},
    seed::{SeedFile, environment_file, write_seed_disk},
};
use k8s_openapi::api::core::v1::Node;
use kube::{Api, Client};
use std::{
    path::{Path, PathBuf},
    time::Duration,
};
use testenv::{ControlPlane, GUEST_FORWARD_ADDRESS};

/// The guests' virtio log ports, each kept as `<node>.<port>.log` in the node's directory.
pub const LOG_PORTS: [&str; 3] = ["journal", "kubelet", "containerd"];

/// A kubelet and containerd in 448 MiB swap themselves to a halt; 1 GiB is comfortable.
const MEMORY_MIB: u32 = 1024;

/// The registry on the host that the guests pull from, as the host names it
/// (`127.0.0.1:<port>`, the name in the images' references). QEMU forwards
/// [`GUEST_FORWARD_ADDRESS`]:[`GUEST_REGISTRY_PORT`] to the port, and each guest's containerd
/// is told (its hosts.toml for that name, which node-setup writes at boot from the seed) to
/// reach the registry there and to trust `ca_pem`, which signed the registry's certificate
/// (its IP SANs hold both addresses).
#[derive(Debug, Clone)]
pub struct NodeRegistry {
    pub port: u16,
    pub ca_pem: String,
}

/// The real nodes of a run.
#[derive(Debug)]
pub struct NodeFleet {
    pub vms: Vec<Vm>,
    pub run_dir: PathBuf,
}

impl NodeFleet {
    /// Writes each node's seed disk (its name, pod network, kubelet credentials, the
    /// registry's name and CA, and the image archives to import) and boots it. The guests run
    /// at once: each has one vCPU.
    pub fn start(
        cp: &ControlPlane,
        image: &BaseImage,
        names: &[&str],
        (registry, archives): (&NodeRegistry, &[PathBuf]),
        run_dir: &Path,
    ) -> Result<NodeFleet, Error> {
        let api_port = api_port(cp)?;
        let mut vms = Vec::new();
        for (index, name) in names.iter().enumerate() {
            let dir = run_dir.join(name);
            let seed = dir.join("seed.img");
            std::fs::create_dir_all(&dir)
                .map_err(Error::io(format!("create {}", dir.display())))?;
            write_seed_disk(&seed_files(cp, name, index, registry, archives)?, &seed)?;
            let spec = VmSpec {
                name: (*name).to_owned(),
                memory_mib: MEMORY_MIB,
                api_port,
                registry_port: Some(registry.port),
                seed_disk: seed,
                dir,
                kernel_args: format!("systemd.hostname={name}"),
                log_ports: LOG_PORTS.map(str::to_owned).to_vec(),
            };
            let vm = Vm::boot(image, &spec)?;
            eprintln!(
                "node-e2e: {name} started (console: {})",
                vm.serial_log_path().display()
            );
            vms.push(vm);
        }
        Ok(NodeFleet {
            vms,
            run_dir: run_dir.to_path_buf(),
        })
    }

    pub fn vm(&self, name: &str) -> &Vm {
        self.vms
            .iter()
            .find(|vm| vm.name == name)
            .unwrap_or_else(|| panic!("no node {name}"))
    }

    /// Waits until every node's kubelet reports the boot that its console shows, and Ready;
    /// prints each node's time from QEMU's start.
    pub async fn wait_until_ready(
        &mut self,
        client: &Client,
        timeout: Duration,
    ) -> Result<(), Error> {
        let nodes: Api<Node> = Api::all(client.clone());
        wait_for_first_boots(
            &mut self.vms,
            timeout,
            &self.run_dir,
            "node-e2e",
            async |vm: &Vm| {
                let console = console_boot_ids(&vm.serial_log(), &vm.name);
                match (console.last(), nodes.get_opt(&vm.name).await.ok().flatten()) {
                    (Some(id), Some(node)) => {
                        boot_id(&node) == Some(id.as_str()) && is_ready(&node)
                    }
                    _ => false,
                }
            },
        )
        .await
    }
}

/// The boot ids a node's console shows, one per boot, in order (node-setup's line).
pub fn console_boot_ids(console: &str, node: &str) -> Vec<String> {
    let prefix = format!("node-setup: node {node} pods in ");
    let mut ids: Vec<String> = console
        .lines()
        .filter_map(|line| line.split_once(&prefix))
        .filter_map(|(_, rest)| rest.split_once(" boot id "))
        .map(|(_, id)| boot_id_prefix(id))
        .collect();
    ids.dedup();
    ids
}

/// The boot id the kubelet reports.
pub fn boot_id(node: &Node) -> Option<&str> {
    Some(node.status.as_ref()?.node_info.as_ref()?.boot_id.as_str())
}

/// Whether the kubelet reports Ready=True.
pub fn is_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .any(|c| c.type_ == "Ready" && c.status == "True")
}

fn seed_files(
    cp: &ControlPlane,
    name: &str,
    index: usize,
    registry: &NodeRegistry,
    archives: &[PathBuf],
) -> Result<Vec<SeedFile>, Error> {
    let (cert, key) = cp.node_client_certificate(name)?;
    let pod_cidr = format!("10.244.{}.0/24", index + 1);
    let conflist = serde_json::json!({
        "cniVersion": "1.0.0",
        "name": "pods",
        "plugins": [{
            "type": "bridge",
            "bridge": "cni0",
            "isGateway": true,
            "ipMasq": true,
            "ipam": {
                "type": "host-local",
                "ranges": [[{"subnet": pod_cidr}]],
                "routes": [{"dst": "0.0.0.0/0"}],
            },
        }],
    });
    let kubeconfig = format!(
        "apiVersion: v1\nkind: Config\n\
         clusters: [{{name: testenv, cluster: {{server: 'https://{GUEST_FORWARD_ADDRESS}:{GUEST_API_PORT}', certificate-authority: /opt/node-reboot/ca.crt}}}}]\n\
         users: [{{name: kubelet, user: {{client-certificate: /opt/node-reboot/kubelet.crt, client-key: /opt/node-reboot/kubelet.key}}}}]\n\
         contexts: [{{name: kubelet, context: {{cluster: testenv, user: kubelet}}}}]\n\
         current-context: kubelet\n"
    );
    let private = |name: &str, contents: String| SeedFile::Private {
        name: name.to_owned(),
        contents,
    };
    let mut files = vec![
        private(
            "node.env",
            environment_file(&[
                ("NODE_NAME", name),
                ("POD_CIDR", &pod_cidr),
                ("REGISTRY", &format!("127.0.0.1:{}", registry.port)),
                (
                    "REGISTRY_ENDPOINT",
                    &format!("{GUEST_FORWARD_ADDRESS}:{GUEST_REGISTRY_PORT}"),
                ),
            ]),
        ),
        private("ca.crt", cp.ca_pem().to_owned()),
        private("registry-ca.crt", registry.ca_pem.clone()),
        private("kubelet.crt", cert),
        private("kubelet.key", key),
        private("kubelet.kubeconfig", kubeconfig),
        private("10-pods.conflist", format!("{conflist:#}\n")),
    ];
    for archive in archives {
        let file_name = archive
            .file_name()
            .map(|n| n.to_string_lossy().into_owned());
        files.push(SeedFile::Data {
            name: format!("images/{}", file_name.unwrap_or_default()),
            from: archive.clone(),
        });
    }
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kernel_message_on_the_same_line_is_not_part_of_the_boot_id() {
        let console = "[ 54.99] node-setup[334]: node-setup: node node-2 pods in 10.244.2.0/24 boot id \
                       290777d0-533f-4325-bedf-c23dabb487d9[   54.959570] AES CTR mode by8 optimization enabled\r\n\
                       [ 60.1] node-setup: node node-2 pods in 10.244.2.0/24 boot id 1111-22\n";
        assert_eq!(
            console_boot_ids(console, "node-2"),
            ["290777d0-533f-4325-bedf-c23dabb487d9", "1111-22"]
        );
    }
}
