//! `migrate-from-kured`: a running kured's settings as this operator's chart values
//! ([`translate`]), and `--cleanup`, what kured leaves on the nodes once it is gone
//! ([`cleanup`]). What kured is and how it reads its settings is pure ([`flags`], [`window`],
//! [`Kured::from_daemonset`], [`pick`]); the API calls are [`find`] and [`cleanup::run`].

pub mod cleanup;
pub mod flags;
pub mod translate;
pub mod window;

use crate::error::Error;
use flags::{Env, LOCK_ANNOTATION, Settings};
use k8s_openapi::api::{apps::v1::DaemonSet, core::v1::PodSpec};
use kube::{Api, Client, api::ListParams};

/// A host directory mounted into kured's container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostMount {
    pub mount_path: String,
    pub host_path: String,
}

/// One kured DaemonSet, as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kured {
    pub namespace: String,
    pub name: String,
    pub image: String,
    pub settings: Settings,
    pub host_mounts: Vec<HostMount>,
    /// Who holds kured's lock now (its annotation on the DaemonSet), if anyone.
    pub lock_holder: Option<String>,
}

/// Whether an image is kured's: its repository's last part is `kured`
/// (`ghcr.io/kubereboot/kured:1.23.0`, `docker.io/weaveworks/kured`, a mirror's `.../kured`).
pub fn is_kured_image(image: &str) -> bool {
    let without_digest = image.split('@').next().unwrap_or_default();
    let last = without_digest.rsplit('/').next().unwrap_or_default();
    last.split(':').next() == Some("kured")
}

/// The first container of `spec` that runs kured's image.
fn kured_container(spec: &PodSpec) -> Option<&k8s_openapi::api::core::v1::Container> {
    spec.containers
        .iter()
        .find(|c| c.image.as_deref().is_some_and(is_kured_image))
}

impl Kured {
    /// kured as its DaemonSet runs it; `None` when no container runs kured's image.
    pub fn from_daemonset(ds: &DaemonSet) -> Option<Kured> {
        let spec = ds.spec.as_ref()?.template.spec.as_ref()?;
        let container = kured_container(spec)?;
        let mut args: Vec<String> = container
            .command
            .iter()
            .flatten()
            .skip(1)
            .cloned()
            .collect();
        args.extend(container.args.iter().flatten().cloned());
        let env: Vec<Env> = container
            .env
            .iter()
            .flatten()
            .map(|e| Env {
                name: e.name.clone(),
                value: match (&e.value, &e.value_from) {
                    (_, Some(_)) => None,
                    (value, None) => Some(value.clone().unwrap_or_default()),
                },
            })
            .collect();
        let settings = flags::read(&args, &env);
        let host_mounts = container
            .volume_mounts
            .iter()
            .flatten()
            .filter_map(|m| {
                let volume = spec.volumes.iter().flatten().find(|v| v.name == m.name)?;
                let host = volume.host_path.as_ref()?;
                let sub = m.sub_path.as_deref().filter(|s| !s.is_empty());
                Some(HostMount {
                    mount_path: m.mount_path.clone(),
                    host_path: match sub {
                        Some(sub) => format!("{}/{sub}", host.path.trim_end_matches('/')),
                        None => host.path.clone(),
                    },
                })
            })
            .collect();
        let lock = settings
            .one("lock-annotation")
            .filter(|v| !v.is_empty())
            .unwrap_or(LOCK_ANNOTATION);
        let lock_holder = ds
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(lock))
            .and_then(|value| lock_holders(value));
        Some(Kured {
            namespace: ds.metadata.namespace.clone().unwrap_or_default(),
            name: ds.metadata.name.clone().unwrap_or_default(),
            image: container.image.clone().unwrap_or_default(),
            settings,
            host_mounts,
            lock_holder,
        })
    }
}

/// The nodes named in kured's lock annotation (one lock, or `locks` with `--concurrency`).
fn lock_holders(value: &str) -> Option<String> {
    let json: serde_json::Value = serde_json::from_str(value).ok()?;
    let mut nodes: Vec<String> = std::iter::once(&json)
        .chain(json["locks"].as_array().into_iter().flatten())
        .filter_map(|lock| lock["nodeID"].as_str())
        .filter(|n| !n.is_empty())
        .map(|n| format!("node {n}"))
        .collect();
    nodes.dedup();
    (!nodes.is_empty()).then(|| nodes.join(", "))
}

/// Which kured to read, by flags.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Wanted {
    pub namespace: Option<String>,
    pub name: Option<String>,
}

/// The one kured among the DaemonSets read, or an error that says what to do.
pub fn pick(daemonsets: &[DaemonSet], wanted: &Wanted) -> Result<Kured, Error> {
    let id = |ds: &DaemonSet| {
        format!(
            "{}/{}",
            ds.metadata.namespace.as_deref().unwrap_or_default(),
            ds.metadata.name.as_deref().unwrap_or_default()
        )
    };
    if let Some(name) = &wanted.name {
        let ds = daemonsets
            .iter()
            .find(|ds| {
                ds.metadata.name.as_deref() == Some(name)
                    && wanted
                        .namespace
                        .as_ref()
                        .is_none_or(|ns| ds.metadata.namespace.as_ref() == Some(ns))
            })
            .ok_or_else(|| {
                Error::Kured(format!(
                    "DaemonSet {}/{name} not found: give kured's namespace with \
                     --kured-namespace and its name with --kured-name",
                    wanted.namespace.as_deref().unwrap_or("kube-system")
                ))
            })?;
        return Kured::from_daemonset(ds).ok_or_else(|| {
            let images: Vec<String> = ds
                .spec
                .iter()
                .flat_map(|s| s.template.spec.iter())
                .flat_map(|s| s.containers.iter())
                .filter_map(|c| c.image.clone())
                .collect();
            Error::Kured(format!(
                "DaemonSet {} is not kured: none of its containers runs kured's image (it runs \
                 {}); name kured's DaemonSet with --kured-namespace and --kured-name, or leave \
                 them out to find it by its image",
                id(ds),
                images.join(", ")
            ))
        });
    }
    let found: Vec<Kured> = daemonsets
        .iter()
        .filter_map(Kured::from_daemonset)
        .collect();
    match found.as_slice() {
        [one] => Ok(one.clone()),
        [] => Err(Error::Kured(format!(
            "no kured DaemonSet found{}: none runs an image named kured \
             (ghcr.io/kubereboot/kured, docker.io/weaveworks/kured). Name it with \
             --kured-namespace and --kured-name",
            wanted
                .namespace
                .as_deref()
                .map(|ns| format!(" in namespace {ns}"))
                .unwrap_or_default()
        ))),
        many => Err(Error::Kured(format!(
            "{} kured DaemonSets found: {}. Name the one to translate with --kured-namespace \
             and --kured-name",
            many.len(),
            many.iter()
                .map(|k| format!("{}/{}", k.namespace, k.name))
                .collect::<Vec<_>>()
                .join(", ")
        ))),
    }
}

/// The DaemonSets where kured may be: `wanted`'s namespace (kube-system when only a name is
/// given), else every namespace.
pub async fn list(client: &Client, wanted: &Wanted) -> Result<Vec<DaemonSet>, Error> {
    let namespace = wanted
        .namespace
        .clone()
        .or_else(|| wanted.name.as_ref().map(|_| "kube-system".to_owned()));
    let api: Api<DaemonSet> = match &namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let what = match &namespace {
        Some(ns) => format!("list the DaemonSets of namespace {ns}"),
        None => "list the DaemonSets of every namespace".to_owned(),
    };
    api.list(&ListParams::default())
        .await
        .map(|list| list.items)
        .map_err(Error::api(
            what,
            "migrate-from-kured",
            "list on daemonsets (the cluster-admin role, or a role that may read DaemonSets)",
        ))
}

/// The one kured DaemonSet to translate.
pub async fn find(client: &Client, wanted: &Wanted) -> Result<Kured, Error> {
    pick(&list(client, wanted).await?, wanted)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ds(namespace: &str, name: &str, image: &str) -> DaemonSet {
        serde_json::from_value(json!({
            "metadata": {"namespace": namespace, "name": name,
                "annotations": {"weave.works/kured-node-lock": "{\"nodeID\":\"n2\",\"created\":\"2026-01-01T00:00:00Z\",\"TTL\":0}"}},
            "spec": {"selector": {}, "template": {"spec": {
                "containers": [{"name": "kured", "image": image,
                    "command": ["/usr/bin/kured"],
                    "args": ["--period=2h", "--reboot-sentinel=/sentinel/reboot-required"],
                    "volumeMounts": [{"name": "sentinel", "mountPath": "/sentinel"}],
                    "env": [{"name": "KURED_NODE_ID", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}]}],
                "volumes": [{"name": "sentinel", "hostPath": {"path": "/var/run"}}]}}}
        }))
        .expect("a DaemonSet")
    }

    #[test]
    fn kureds_images_are_known_by_their_last_part() {
        assert!(is_kured_image("ghcr.io/kubereboot/kured:1.23.0"));
        assert!(is_kured_image("docker.io/weaveworks/kured"));
        assert!(is_kured_image(
            "registry.example.com:5000/mirror/kured@sha256:abc"
        ));
        assert!(!is_kured_image("ghcr.io/kubereboot/kured-extra:1"));
        assert!(!is_kured_image("ghcr.io/node-reboot-operator/reboot-agent"));
    }

    #[test]
    fn one_kured_is_read_with_its_mounts_and_lock() {
        let k = pick(
            &[
                ds("kube-system", "kured", "ghcr.io/kubereboot/kured:1.23.0"),
                ds("a", "b", "nginx"),
            ],
            &Wanted::default(),
        )
        .expect("one kured");
        assert_eq!(
            (k.namespace.as_str(), k.name.as_str()),
            ("kube-system", "kured")
        );
        assert_eq!(k.settings.one("period"), Some("2h"));
        assert_eq!(
            k.host_mounts,
            [HostMount {
                mount_path: "/sentinel".into(),
                host_path: "/var/run".into()
            }]
        );
        assert_eq!(k.lock_holder.as_deref(), Some("node n2"));
    }

    #[test]
    fn none_two_or_a_named_one_that_is_not_kured_are_errors_that_say_what_to_do() {
        let two = [
            ds("a", "kured", "weaveworks/kured"),
            ds("b", "kured", "ghcr.io/kubereboot/kured"),
        ];
        let err = pick(&two, &Wanted::default()).unwrap_err().to_string();
        assert!(
            err.contains("a/kured, b/kured") && err.contains("--kured-name"),
            "{err}"
        );
        let err = pick(&[], &Wanted::default()).unwrap_err().to_string();
        assert!(err.contains("no kured DaemonSet"), "{err}");
        let wanted = Wanted {
            namespace: Some("a".into()),
            name: Some("web".into()),
        };
        let err = pick(&[ds("a", "web", "nginx:1")], &wanted)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("a/web is not kured") && err.contains("nginx:1"),
            "{err}"
        );
        let wanted = Wanted {
            namespace: Some("b".into()),
            name: Some("kured".into()),
        };
        assert_eq!(
            pick(&two, &wanted).map(|k| k.image).ok().as_deref(),
            Some("ghcr.io/kubereboot/kured")
        );
    }
}
