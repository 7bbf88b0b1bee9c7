//! The four images, as the Dockerfiles' final stages (and upstream's pause Dockerfile) define
//! them: which files, which user, which entrypoint.

use crate::layer::Entry;
use crate::oci::{Image, Platform, RunConfig};
#[cfg(test)]
use std::path::Path;

/// Docker's default for an image without `ENV PATH`; Dockerfile.agent sets it because the
/// agent runs `systemctl` from PATH after entering the host's mount namespace.
pub const PATH: &str = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
/// distroless's `nonroot` user, whose numeric id the controller's Deployment relies on.
pub const NONROOT: u64 = 65532;
/// Where distroless and Debian keep the CA bundle.
pub const CA_BUNDLE: &str = "etc/ssl/certs/ca-certificates.crt";
/// The test workload's tag: raise it when its files change in a way tests depend on.
pub const WORKLOAD_TAG: &str = "1";
/// The busybox applets a test pod uses: a shell that traps SIGTERM, sleeping, logging, serving.
pub const APPLETS: &[&str] = &[
    "[", "cat", "date", "echo", "env", "false", "grep", "head", "hostname", "httpd", "id", "kill",
    "ls", "mkdir", "nc", "printf", "ps", "rm", "sh", "sleep", "tail", "tee", "test", "touch",
    "true", "uname", "wc", "wget",
];

/// Where our images live and their tag: `<registry>/reboot-agent:<tag>`.
#[derive(Debug, Clone)]
pub struct Naming {
    pub registry: String,
    pub tag: String,
}

impl Naming {
    fn name(&self, repository: &str) -> String {
        format!(
            "{}/{repository}:{}",
            self.registry.trim_end_matches('/'),
            self.tag
        )
    }
}

/// Dockerfile.agent: the binary alone on `scratch`, root.
pub fn agent(naming: &Naming, platform: &Platform, binary: Vec<u8>) -> Image {
    Image {
        name: naming.name("reboot-agent"),
        platform: platform.clone(),
        run: RunConfig {
            user: Some("0:0".to_owned()),
            env: vec![PATH.to_owned()],
            entrypoint: vec!["/reboot-agent".to_owned()],
            ..RunConfig::default()
        },
        files: vec![Entry::file("reboot-agent", 0o755, binary)],
    }
}

/// Dockerfile.controller: the binary on what it uses of distroless/static:nonroot, as 65532.
pub fn controller(
    naming: &Naming,
    platform: &Platform,
    binary: Vec<u8>,
    ca_bundle: Vec<u8>,
) -> Image {
    let mut files = nonroot_base(ca_bundle);
    files.push(Entry::file("reboot-controller", 0o755, binary));
    Image {
        name: naming.name("reboot-controller"),
        platform: platform.clone(),
        run: RunConfig {
            user: Some(format!("{NONROOT}:{NONROOT}")),
            // distroless's environment: rustls-native-certs reads SSL_CERT_FILE first.
            env: vec![PATH.to_owned(), format!("SSL_CERT_FILE=/{CA_BUNDLE}")],
            entrypoint: vec!["/reboot-controller".to_owned()],
            exposed_ports: vec![8080],
            ..RunConfig::default()
        },
        files,
    }
}

/// What the controller takes from distroless/static:nonroot. Its users and groups (so that
/// 65532 has a name), the CA bundle (HTTPS to Prometheus and Alertmanager), nsswitch.conf
/// (glibc resolves names from /etc/hosts, then DNS, as in distroless), a home and /tmp.
/// tzdata is left out: the controller bundles its time zone rules (jiff's tzdb-bundle-always).
fn nonroot_base(ca_bundle: Vec<u8>) -> Vec<Entry> {
    let passwd = "root:x:0:0:root:/root:/sbin/nologin\n\
                  nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n\
                  nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n";
    let group = "root:x:0:\nnobody:x:65534:\nnonroot:x:65532:\n";
    vec![
        Entry::file("etc/passwd", 0o644, passwd.as_bytes().to_vec()),
        Entry::file("etc/group", 0o644, group.as_bytes().to_vec()),
        Entry::file("etc/nsswitch.conf", 0o644, b"hosts: files dns\n".to_vec()),
        Entry::file(CA_BUNDLE, 0o644, ca_bundle),
        Entry::dir("home/nonroot", 0o700).owned_by(NONROOT, NONROOT),
        Entry::dir("root", 0o700),
        Entry::dir("tmp", 0o1777),
    ]
}

/// Upstream's build/pause/Dockerfile: `/pause` on scratch as 65535, named as the kubelet and
/// containerd know it, so that the sandbox image never needs a registry.
pub fn pause(platform: &Platform, tag: &str, binary: Vec<u8>) -> Image {
    Image {
        name: format!("registry.k8s.io/pause:{tag}"),
        platform: platform.clone(),
        run: RunConfig {
            user: Some("65535:65535".to_owned()),
            entrypoint: vec!["/pause".to_owned()],
            ..RunConfig::default()
        },
        files: vec![Entry::file("pause", 0o755, binary)],
    }
}

/// A static busybox for test pods: `sh -c 'trap … TERM; …'`, `sleep`, `httpd`. Root, like
/// the busybox image, and a shell by default.
pub fn test_workload(registry: &str, platform: &Platform, busybox: Vec<u8>) -> Image {
    let mut files = vec![
        Entry::file("bin/busybox", 0o755, busybox),
        Entry::dir("tmp", 0o1777),
    ];
    files.extend(
        APPLETS
            .iter()
            .map(|applet| Entry::symlink(&format!("bin/{applet}"), "busybox")),
    );
    Image {
        name: format!(
            "{}/test-workload:{WORKLOAD_TAG}",
            registry.trim_end_matches('/')
        ),
        platform: platform.clone(),
        run: RunConfig {
            env: vec![PATH.to_owned()],
            cmd: vec!["sh".to_owned()],
            ..RunConfig::default()
        },
        files,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The final stage's `USER`, `ENTRYPOINT`, `EXPOSE` and `ENV` lines, as written.
    fn final_stage(dockerfile: &str) -> Vec<String> {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("..")
            .join(dockerfile);
        let text = std::fs::read_to_string(&path).expect("the Dockerfile");
        let last_from = text.rfind("\nFROM ").expect("a FROM");
        text[last_from..]
            .lines()
            .filter(|l| {
                ["USER ", "ENTRYPOINT ", "EXPOSE ", "ENV "]
                    .iter()
                    .any(|k| l.starts_with(k))
            })
            .map(str::to_owned)
            .collect()
    }

    /// The same instructions, written from an image's run config.
    fn instructions(run: &RunConfig, env_from_base: &[&str]) -> Vec<String> {
        let mut lines: Vec<String> = run
            .env
            .iter()
            .filter(|e| !env_from_base.contains(&e.as_str()))
            .map(|e| format!("ENV {e}"))
            .collect();
        lines.extend(run.user.iter().map(|u| format!("USER {u}")));
        lines.extend(run.exposed_ports.iter().map(|p| format!("EXPOSE {p}")));
        let entrypoint = serde_json::to_string(&run.entrypoint).expect("JSON");
        lines.push(format!("ENTRYPOINT {}", entrypoint.replace(',', ", ")));
        lines
    }

    fn sorted(mut lines: Vec<String>) -> Vec<String> {
        lines.sort();
        lines
    }

    fn platform() -> Platform {
        Platform {
            architecture: "amd64".to_owned(),
            os: "linux".to_owned(),
        }
    }

    fn naming() -> Naming {
        Naming {
            registry: "r".to_owned(),
            tag: "t".to_owned(),
        }
    }

    #[test]
    fn the_agent_runs_as_dockerfile_agent_says() {
        let image = agent(&naming(), &platform(), vec![]);
        assert_eq!(
            sorted(final_stage("Dockerfile.agent")),
            sorted(instructions(&image.run, &[]))
        );
    }

    /// The controller's environment comes from distroless, not from an `ENV` line.
    #[test]
    fn the_controller_runs_as_dockerfile_controller_says() {
        let image = controller(&naming(), &platform(), vec![], vec![]);
        let from_base: Vec<&str> = image.run.env.iter().map(String::as_str).collect();
        assert_eq!(
            sorted(final_stage("Dockerfile.controller")),
            sorted(instructions(&image.run, &from_base))
        );
    }
}
