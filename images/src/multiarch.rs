//! One image for several platforms: an OCI image index that names each platform's manifest
//! and, beside each, an attestation manifest carrying that platform's SBOM as an in-toto
//! statement. This is the layout `docker buildx build --platform linux/amd64,linux/arm64
//! --sbom=true` pushes, which is where SBOM-aware tools look for it, and which copies of every
//! platform (`skopeo copy --all`) carry along with the image. Only containerd's import of it
//! is tested.

use crate::Error;
use crate::oci::{self, Built, CONFIG_TYPE, Descriptor, Image, ImageBlobs, Platform};
use serde_json::json;
use std::collections::BTreeMap;

pub const IN_TOTO_TYPE: &str = "application/vnd.in-toto+json";
pub const SPDX_PREDICATE: &str = "https://spdx.dev/Document";
/// The annotations by which buildx ties an attestation manifest to the image it describes.
pub const REFERENCE_TYPE: &str = "vnd.docker.reference.type";
pub const REFERENCE_DIGEST: &str = "vnd.docker.reference.digest";

/// One platform's image and the SPDX JSON of its binary.
#[derive(Debug, Clone)]
pub struct PlatformImage {
    pub image: Image,
    pub sbom: Vec<u8>,
}

/// `pkg:docker/<repository>@<tag>?platform=linux%2Farm64`, as buildx names an attestation's
/// subject.
fn subject_name(name: &str, platform: &Platform) -> Result<String, Error> {
    let tag = oci::tag_of(name)?;
    let repository = &name[..name.len() - tag.len() - 1];
    Ok(format!(
        "pkg:docker/{repository}@{tag}?platform={}%2F{}",
        platform.os, platform.architecture
    ))
}

/// The attestation manifest's blobs (manifest, config, statement) for the image whose
/// manifest is `manifest`.
fn attestation(
    name: &str,
    platform: &Platform,
    manifest: &[u8],
    sbom: &[u8],
) -> Result<[Vec<u8>; 3], Error> {
    let predicate: serde_json::Value = serde_json::from_slice(sbom)?;
    let statement = serde_json::to_vec(&json!({
        "_type": "https://in-toto.io/Statement/v0.1",
        "predicateType": SPDX_PREDICATE,
        "subject": [{
            "name": subject_name(name, platform)?,
            "digest": { "sha256": &oci::digest(manifest)["sha256:".len()..] },
        }],
        "predicate": predicate,
    }))?;
    let config = serde_json::to_vec(&json!({
        "architecture": "unknown",
        "os": "unknown",
        "config": {},
        "rootfs": { "type": "layers", "diff_ids": [oci::digest(&statement)] },
    }))?;
    let mut layer = Descriptor::of(IN_TOTO_TYPE, &statement);
    layer.annotations = BTreeMap::from([("in-toto.io/predicate-type", SPDX_PREDICATE.to_owned())]);
    let manifest = oci::manifest_json(Descriptor::of(CONFIG_TYPE, &config), layer)?;
    Ok([manifest, config, statement])
}

/// The archive of one image for every platform of `images` (all named `name`), and its
/// index's digest. Docker's manifest.json names the first platform's image.
pub fn build(name: &str, images: &[PlatformImage]) -> Result<Built, Error> {
    if let Some(other) = images.iter().find(|p| p.image.name != name) {
        return Err(Error::Input(format!(
            "{} in the index of {name}",
            other.image.name
        )));
    }
    let image_blobs: Vec<ImageBlobs> = images
        .iter()
        .map(|p| ImageBlobs::of(&p.image))
        .collect::<Result<_, _>>()?;
    let Some(docker_image) = image_blobs.first() else {
        return Err(Error::Input(format!("{name}: no platform to build")));
    };
    let mut blobs: Vec<Vec<u8>> = Vec::new();
    let mut manifests: Vec<Descriptor> = Vec::new();
    let mut attestations = Vec::new();
    for (platform_image, image) in images.iter().zip(&image_blobs) {
        let platform = &platform_image.image.platform;
        manifests.push(image.descriptor(platform));
        let [manifest, config, statement] =
            attestation(name, platform, &image.manifest, &platform_image.sbom)?;
        let mut descriptor = Descriptor::of(oci::MANIFEST_TYPE, &manifest);
        descriptor.platform = Some(Platform {
            architecture: "unknown".to_owned(),
            os: "unknown".to_owned(),
        });
        descriptor.annotations = BTreeMap::from([
            (REFERENCE_TYPE, "attestation-manifest".to_owned()),
            (REFERENCE_DIGEST, oci::digest(&image.manifest)),
        ]);
        attestations.push(descriptor);
        blobs.extend([manifest, config, statement]);
    }
    manifests.extend(attestations);
    let index = oci::image_index_json(manifests)?;
    let top = Descriptor::of(oci::INDEX_TYPE, &index);
    let mut blob_refs: Vec<&[u8]> = blobs.iter().map(Vec::as_slice).collect();
    for image in &image_blobs {
        blob_refs.extend([&image.manifest[..], &image.config, &image.layer]);
    }
    blob_refs.push(&index);
    Ok(Built {
        name: name.to_owned(),
        digest: oci::digest(&index),
        archive: oci::archive(name, top, docker_image, &blob_refs)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::images::{self, Naming};
    use serde_json::Value;

    fn platform(architecture: &str) -> Platform {
        Platform {
            architecture: architecture.to_owned(),
            os: "linux".to_owned(),
        }
    }

    fn agent(architecture: &str) -> PlatformImage {
        let naming = Naming {
            registry: "r.example/x".to_owned(),
            tag: "1.2.3".to_owned(),
        };
        PlatformImage {
            image: images::agent(&naming, &platform(architecture), architecture.into()),
            sbom: format!(r#"{{"spdxVersion":"SPDX-2.3","name":"{architecture}"}}"#).into(),
        }
    }

    fn files(archive: &[u8]) -> BTreeMap<String, Vec<u8>> {
        let mut files = BTreeMap::new();
        for entry in tar::Archive::new(archive).entries().unwrap() {
            let mut entry = entry.unwrap();
            let path = entry.path().unwrap().display().to_string();
            let mut bytes = Vec::new();
            std::io::Read::read_to_end(&mut entry, &mut bytes).unwrap();
            files.insert(path, bytes);
        }
        files
    }

    fn blob(files: &BTreeMap<String, Vec<u8>>, digest: &Value) -> Value {
        let digest = digest.as_str().unwrap();
        serde_json::from_slice(&files[&format!("blobs/sha256/{}", &digest[7..])]).unwrap()
    }

    #[test]
    fn the_index_names_each_platform_and_an_sbom_for_each() {
        let built = build(
            "r.example/x/reboot-agent:1.2.3",
            &[agent("amd64"), agent("arm64")],
        )
        .unwrap();
        let files = files(&built.archive);
        let layout: Value = serde_json::from_slice(&files["index.json"]).unwrap();
        assert_eq!(layout["manifests"][0]["mediaType"], oci::INDEX_TYPE);
        assert_eq!(layout["manifests"][0]["digest"], built.digest);
        let index = blob(&files, &layout["manifests"][0]["digest"]);
        let entries = index["manifests"].as_array().unwrap();
        let platforms: Vec<&Value> = entries.iter().map(|m| &m["platform"]).collect();
        assert_eq!(
            platforms,
            [
                &json!({"architecture": "amd64", "os": "linux"}),
                &json!({"architecture": "arm64", "os": "linux"}),
                &json!({"architecture": "unknown", "os": "unknown"}),
                &json!({"architecture": "unknown", "os": "unknown"}),
            ]
        );
        for (image, attestation) in entries[..2].iter().zip(&entries[2..]) {
            assert_eq!(
                attestation["annotations"][REFERENCE_DIGEST],
                image["digest"]
            );
            let manifest = blob(&files, &attestation["digest"]);
            let layer = &manifest["layers"][0];
            assert_eq!(layer["mediaType"], IN_TOTO_TYPE);
            let statement = blob(&files, &layer["digest"]);
            assert_eq!(statement["predicateType"], SPDX_PREDICATE);
            let arch = image["platform"]["architecture"].as_str().unwrap();
            assert_eq!(statement["predicate"]["name"], arch);
            assert_eq!(
                format!(
                    "sha256:{}",
                    statement["subject"][0]["digest"]["sha256"]
                        .as_str()
                        .unwrap()
                ),
                image["digest"].as_str().unwrap()
            );
            assert_eq!(
                statement["subject"][0]["name"],
                format!("pkg:docker/r.example/x/reboot-agent@1.2.3?platform=linux%2F{arch}")
            );
        }
        let docker: Value = serde_json::from_slice(&files["manifest.json"]).unwrap();
        let amd64 = blob(&files, &entries[0]["digest"]);
        assert_eq!(
            docker[0]["Config"],
            format!(
                "blobs/sha256/{}",
                &amd64["config"]["digest"].as_str().unwrap()[7..]
            )
        );
    }

    #[test]
    fn an_index_of_mixed_names_or_no_platform_is_refused() {
        let mut other = agent("arm64");
        other.image.name = "r.example/x/other:1.2.3".to_owned();
        let name = "r.example/x/reboot-agent:1.2.3";
        assert!(build(name, &[agent("amd64"), other]).is_err());
        assert!(build(name, &[]).is_err());
    }
}
