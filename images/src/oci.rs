//! An image as an OCI image layout in a tar: `oci-layout`, `index.json`, `blobs/sha256/…`,
//! plus Docker's `manifest.json`. One plain-tar layer: gzip would add a header with a time
//! and a compressor whose output may change between versions, and these images are imported
//! from a file, never pulled.
//!
//! Every JSON document is serialized from structs and `BTreeMap`s, so its bytes do not depend
//! on whether some other crate in the build turned on serde_json's `preserve_order`.

use crate::Error;
use crate::layer::{self, Entry};
use serde::Serialize;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;

pub const MANIFEST_TYPE: &str = "application/vnd.oci.image.manifest.v1+json";
pub const INDEX_TYPE: &str = "application/vnd.oci.image.index.v1+json";
pub const CONFIG_TYPE: &str = "application/vnd.oci.image.config.v1+json";
pub const LAYER_TYPE: &str = "application/vnd.oci.image.layer.v1.tar";
/// containerd's `ctr images import` names the image by this annotation.
pub const CONTAINERD_NAME: &str = "io.containerd.image.name";
pub const REF_NAME: &str = "org.opencontainers.image.ref.name";
/// A fixed creation time: the build's time would change the digest.
pub const EPOCH: &str = "1970-01-01T00:00:00Z";

/// `sha256:<hex>`.
pub fn digest(bytes: &[u8]) -> String {
    let hash = Sha256::digest(bytes);
    let hex: String = hash.iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Platform {
    pub architecture: String,
    pub os: String,
}

impl Platform {
    /// Linux on the host's architecture, named as OCI names it (`amd64`, not `x86_64`).
    pub fn host() -> Result<Platform, Error> {
        let architecture = match std::env::consts::ARCH {
            "x86_64" => "amd64",
            "aarch64" => "arm64",
            "powerpc64" if cfg!(target_endian = "little") => "ppc64le",
            "s390x" => "s390x",
            "riscv64" => "riscv64",
            other => return Err(Error::Architecture(other.to_owned())),
        };
        Ok(Platform {
            architecture: architecture.to_owned(),
            os: "linux".to_owned(),
        })
    }
}

/// How a container of the image runs: the Dockerfile instructions that are not files.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunConfig {
    /// `uid:gid`; `None` runs as the runtime's default, root.
    pub user: Option<String>,
    pub env: Vec<String>,
    pub entrypoint: Vec<String>,
    pub cmd: Vec<String>,
    /// TCP ports, as `EXPOSE`.
    pub exposed_ports: Vec<u16>,
}

/// An image to build: its full reference (`<repository>:<tag>`), platform, run config and
/// files (one layer).
#[derive(Debug, Clone)]
pub struct Image {
    pub name: String,
    pub platform: Platform,
    pub run: RunConfig,
    pub files: Vec<Entry>,
}

/// A built image: the archive's bytes and the digest that names the image (its manifest's, or
/// for several platforms its image index's).
#[derive(Debug, Clone)]
pub struct Built {
    pub name: String,
    pub digest: String,
    pub archive: Vec<u8>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Descriptor {
    media_type: &'static str,
    digest: String,
    size: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) platform: Option<Platform>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub(crate) annotations: BTreeMap<&'static str, String>,
}

impl Descriptor {
    pub(crate) fn of(media_type: &'static str, bytes: &[u8]) -> Descriptor {
        Descriptor {
            media_type,
            digest: digest(bytes),
            size: bytes.len(),
            platform: None,
            annotations: BTreeMap::new(),
        }
    }
}

#[derive(Debug, Serialize)]
struct ConfigJson<'a> {
    created: &'static str,
    architecture: &'a str,
    os: &'a str,
    config: ContainerConfig<'a>,
    rootfs: RootFs,
    history: [History; 1],
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
struct ContainerConfig<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    user: Option<&'a str>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    exposed_ports: BTreeMap<String, BTreeMap<String, String>>,
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    env: &'a [String],
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    entrypoint: &'a [String],
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    cmd: &'a [String],
}

#[derive(Debug, Serialize)]
struct RootFs {
    #[serde(rename = "type")]
    kind: &'static str,
    diff_ids: [String; 1],
}

#[derive(Debug, Serialize)]
struct History {
    created: &'static str,
    created_by: &'static str,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Manifest {
    schema_version: u32,
    media_type: &'static str,
    config: Descriptor,
    layers: [Descriptor; 1],
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Index {
    schema_version: u32,
    media_type: &'static str,
    manifests: Vec<Descriptor>,
}

/// Docker's `manifest.json`, for `docker load` and podman, which predate OCI layouts.
#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
struct DockerManifest {
    config: String,
    repo_tags: [String; 1],
    layers: [String; 1],
}

/// The image config: what `docker inspect` shows as `Config`, and the layer's uncompressed
/// digest (`diff_id`, the same as the layer's digest since it is not compressed).
pub fn config_json(image: &Image, layer_digest: &str) -> Result<Vec<u8>, Error> {
    let run = &image.run;
    let config = ConfigJson {
        created: EPOCH,
        architecture: &image.platform.architecture,
        os: &image.platform.os,
        config: ContainerConfig {
            user: run.user.as_deref(),
            exposed_ports: run
                .exposed_ports
                .iter()
                .map(|p| (format!("{p}/tcp"), BTreeMap::new()))
                .collect(),
            env: &run.env,
            entrypoint: &run.entrypoint,
            cmd: &run.cmd,
        },
        rootfs: RootFs {
            kind: "layers",
            diff_ids: [layer_digest.to_owned()],
        },
        history: [History {
            created: EPOCH,
            created_by: "oci-images (make images)",
        }],
    };
    Ok(serde_json::to_vec(&config)?)
}

/// A manifest of one config and one layer (an image's, or an attestation's).
pub(crate) fn manifest_json(config: Descriptor, layer: Descriptor) -> Result<Vec<u8>, Error> {
    Ok(serde_json::to_vec(&Manifest {
        schema_version: 2,
        media_type: MANIFEST_TYPE,
        config,
        layers: [layer],
    })?)
}

/// An image index naming `manifests`.
pub(crate) fn image_index_json(manifests: Vec<Descriptor>) -> Result<Vec<u8>, Error> {
    Ok(serde_json::to_vec(&Index {
        schema_version: 2,
        media_type: INDEX_TYPE,
        manifests,
    })?)
}

/// The tag of `<repository>:<tag>`: after the last `:` that follows the last `/` (a registry
/// may have a port).
pub fn tag_of(name: &str) -> Result<&str, Error> {
    let last = name.rsplit('/').next().unwrap_or(name);
    match last.rsplit_once(':') {
        Some((_, tag)) if !tag.is_empty() => Ok(tag),
        _ => Err(Error::NoTag(name.to_owned())),
    }
}

/// The layout's index.json: the one thing the archive holds (a manifest or an image index),
/// named twice: containerd reads the full name, other OCI tools the tag.
pub(crate) fn layout_index_json(name: &str, mut top: Descriptor) -> Result<Vec<u8>, Error> {
    top.annotations = BTreeMap::from([
        (CONTAINERD_NAME, name.to_owned()),
        (REF_NAME, tag_of(name)?.to_owned()),
    ]);
    image_index_json(vec![top])
}

pub(crate) fn blob_path(bytes: &[u8]) -> String {
    format!("blobs/sha256/{}", &digest(bytes)["sha256:".len()..])
}

/// One platform's image as blobs.
#[derive(Debug, Clone)]
pub(crate) struct ImageBlobs {
    pub manifest: Vec<u8>,
    pub config: Vec<u8>,
    pub layer: Vec<u8>,
}

impl ImageBlobs {
    pub(crate) fn of(image: &Image) -> Result<ImageBlobs, Error> {
        let layer = layer::tar(&image.files)?;
        let config = config_json(image, &digest(&layer))?;
        let manifest = manifest_json(
            Descriptor::of(CONFIG_TYPE, &config),
            Descriptor::of(LAYER_TYPE, &layer),
        )?;
        Ok(ImageBlobs {
            manifest,
            config,
            layer,
        })
    }

    /// The manifest's descriptor, with the platform that an index selects it by.
    pub(crate) fn descriptor(&self, platform: &Platform) -> Descriptor {
        let mut descriptor = Descriptor::of(MANIFEST_TYPE, &self.manifest);
        descriptor.platform = Some(platform.clone());
        descriptor
    }
}

/// The archive of an OCI layout whose index.json names `top`: `blobs` each once, and Docker's
/// manifest.json, which can name one platform's image only: `docker_image`'s.
pub(crate) fn archive(
    name: &str,
    top: Descriptor,
    docker_image: &ImageBlobs,
    blobs: &[&[u8]],
) -> Result<Vec<u8>, Error> {
    let docker = serde_json::to_vec(&[DockerManifest {
        config: blob_path(&docker_image.config),
        repo_tags: [name.to_owned()],
        layers: [blob_path(&docker_image.layer)],
    }])?;
    let mut files = vec![
        Entry::file(
            "oci-layout",
            0o644,
            br#"{"imageLayoutVersion":"1.0.0"}"#.to_vec(),
        ),
        Entry::file("index.json", 0o644, layout_index_json(name, top)?),
        Entry::file("manifest.json", 0o644, docker),
    ];
    let unique: BTreeMap<String, &[u8]> = blobs.iter().map(|b| (blob_path(b), *b)).collect();
    files.extend(
        unique
            .into_iter()
            .map(|(path, bytes)| Entry::file(&path, 0o644, bytes.to_vec())),
    );
    layer::tar(&files)
}

/// The image's archive, and its manifest's digest: the digest containerd shows for it.
pub fn build(image: &Image) -> Result<Built, Error> {
    tag_of(&image.name)?;
    let blobs = ImageBlobs::of(image)?;
    let top = blobs.descriptor(&image.platform);
    let archive = archive(
        &image.name,
        top,
        &blobs,
        &[&blobs.manifest, &blobs.config, &blobs.layer],
    )?;
    Ok(Built {
        name: image.name.clone(),
        digest: digest(&blobs.manifest),
        archive,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::images::{self, Naming};
    use serde_json::{Value, json};

    fn platform() -> Platform {
        Platform {
            architecture: "amd64".to_owned(),
            os: "linux".to_owned(),
        }
    }

    fn naming() -> Naming {
        Naming {
            registry: "ghcr.io/node-reboot-operator".to_owned(),
            tag: "0.1.0".to_owned(),
        }
    }

    fn agent() -> Image {
        images::agent(&naming(), &platform(), b"\x7fELF agent".to_vec())
    }

    fn json(bytes: &[u8]) -> Value {
        serde_json::from_slice(bytes).expect("JSON")
    }

    /// The archive's regular files by path.
    fn archive_files(archive: &[u8]) -> BTreeMap<String, Vec<u8>> {
        let mut files = BTreeMap::new();
        for entry in tar::Archive::new(archive).entries().unwrap() {
            let mut entry = entry.unwrap();
            if entry.header().entry_type() == tar::EntryType::Regular {
                let path = entry.path().unwrap().display().to_string();
                let mut bytes = Vec::new();
                std::io::Read::read_to_end(&mut entry, &mut bytes).unwrap();
                files.insert(path, bytes);
            }
        }
        files
    }

    #[test]
    fn the_agent_config_runs_the_binary_as_root_with_path() {
        let config = json(&config_json(&agent(), "sha256:00").unwrap());
        assert_eq!(
            config["config"],
            json!({
                "User": "0:0",
                "Env": [images::PATH],
                "Entrypoint": ["/reboot-agent"],
            })
        );
        assert_eq!(config["architecture"], "amd64");
        assert_eq!(config["os"], "linux");
        assert_eq!(config["created"], EPOCH);
        assert_eq!(config["rootfs"]["diff_ids"], json!(["sha256:00"]));
    }

    #[test]
    fn the_controller_config_is_nonroot_and_exposes_8080() {
        let image = images::controller(&naming(), &platform(), vec![1], b"certs".to_vec());
        let config = json(&config_json(&image, "sha256:00").unwrap());
        assert_eq!(config["config"]["User"], "65532:65532");
        assert_eq!(config["config"]["ExposedPorts"], json!({"8080/tcp": {}}));
        assert_eq!(
            config["config"]["Entrypoint"],
            json!(["/reboot-controller"])
        );
    }

    #[test]
    fn the_index_names_the_image_for_containerd_and_for_oci_tools() {
        let mut top = Descriptor::of(MANIFEST_TYPE, b"{}");
        top.platform = Some(platform());
        let index = json(&layout_index_json(&agent().name, top).unwrap());
        let manifest = &index["manifests"][0];
        assert_eq!(
            manifest["annotations"],
            json!({
                CONTAINERD_NAME: "ghcr.io/node-reboot-operator/reboot-agent:0.1.0",
                REF_NAME: "0.1.0",
            })
        );
        assert_eq!(manifest["mediaType"], MANIFEST_TYPE);
        assert_eq!(manifest["digest"], digest(b"{}"));
        assert_eq!(
            manifest["platform"],
            json!({"architecture": "amd64", "os": "linux"})
        );
    }

    #[test]
    fn a_tag_follows_the_last_colon_after_the_last_slash() {
        assert_eq!(tag_of("registry.k8s.io/pause:3.10.2").unwrap(), "3.10.2");
        assert_eq!(tag_of("localhost:5000/a/b:1").unwrap(), "1");
        assert!(tag_of("localhost:5000/a/b").is_err());
        assert!(tag_of("a:").is_err());
    }

    #[test]
    fn an_archive_is_the_same_bytes_twice_and_its_blobs_match_their_names() {
        let built = build(&agent()).unwrap();
        assert_eq!(build(&agent()).unwrap().archive, built.archive);
        let files = archive_files(&built.archive);
        for (path, bytes) in &files {
            if let Some(hex) = path.strip_prefix("blobs/sha256/") {
                assert_eq!(digest(bytes), format!("sha256:{hex}"));
            }
        }
        let index = json(&files["index.json"]);
        assert_eq!(index["manifests"][0]["digest"], built.digest);
        let manifest_path = format!("blobs/sha256/{}", &built.digest[7..]);
        let manifest = json(&files[&manifest_path]);
        let layer_path = format!(
            "blobs/sha256/{}",
            &manifest["layers"][0]["digest"].as_str().unwrap()[7..]
        );
        let docker = json(&files["manifest.json"]);
        assert_eq!(docker[0]["Layers"], json!([layer_path]));
        assert_eq!(
            docker[0]["RepoTags"],
            json!(["ghcr.io/node-reboot-operator/reboot-agent:0.1.0"])
        );
        assert_eq!(
            json(&files["oci-layout"]),
            json!({"imageLayoutVersion": "1.0.0"})
        );
    }

    #[test]
    fn another_binary_gives_another_digest() {
        let other = images::agent(&naming(), &platform(), b"\x7fELF other".to_vec());
        assert_ne!(
            build(&agent()).unwrap().digest,
            build(&other).unwrap().digest
        );
    }
}
