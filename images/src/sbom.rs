//! The SBOM of a program's binary: an SPDX 2.3 JSON document listing every crate linked into
//! it for one target, read from `cargo metadata --filter-platform <target>` and Cargo.lock's
//! checksums. Dev-dependencies, build-dependencies and proc macros (with what only they use)
//! run at build time and are not in the binary, so they are left out.
//!
//! The document is reproducible: a fixed creation time, like the images, and a namespace
//! derived from its own content, as SPDX asks of a namespace (unique per document).

use crate::Error;
use crate::oci::{EPOCH, digest};
use cargo_metadata::{DependencyKind, Metadata, Package, PackageId};
use serde::Deserialize;
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};

const CRATES_IO: &str = "registry+https://github.com/rust-lang/crates.io-index";

/// Cargo.lock's checksum of each registry crate, by `(name, version)`.
pub type Checksums = BTreeMap<(String, String), String>;

#[derive(Deserialize)]
struct Lockfile {
    #[serde(default)]
    package: Vec<LockedPackage>,
}

#[derive(Deserialize)]
struct LockedPackage {
    name: String,
    version: String,
    checksum: Option<String>,
}

/// The checksums Cargo.lock records (registry crates have one; path crates none).
pub fn checksums(cargo_lock: &str) -> Result<Checksums, Error> {
    let lock: Lockfile = toml::from_str(cargo_lock)
        .map_err(|e| Error::Input(format!("Cargo.lock does not parse: {e}")))?;
    Ok(lock
        .package
        .into_iter()
        .filter_map(|p| Some(((p.name, p.version), p.checksum?)))
        .collect())
}

/// What the document describes: `package` (a workspace member) built for `target` into the
/// image `image` for `platform` (`linux/arm64`).
#[derive(Debug, Clone)]
pub struct Subject<'a> {
    pub package: &'a str,
    pub image: &'a str,
    pub platform: &'a str,
}

/// The SPDX document of `subject.package` and the crates linked into it, as JSON bytes.
pub fn spdx(
    metadata: &Metadata,
    checksums: &Checksums,
    subject: &Subject,
    tool: &str,
) -> Result<Vec<u8>, Error> {
    let root = metadata
        .workspace_packages()
        .into_iter()
        .find(|p| p.name.as_str() == subject.package)
        .ok_or_else(|| {
            Error::Input(format!(
                "cargo metadata: no workspace package {:?}",
                subject.package
            ))
        })?;
    let graph = linked(metadata, &root.id)?;
    let ids = spdx_ids(metadata, graph.keys());
    let packages: Vec<Value> = graph
        .keys()
        .map(|id| package_json(&metadata[id], &ids[id], checksums, id == &root.id))
        .collect();
    let mut relationships = vec![json!({
        "spdxElementId": "SPDXRef-DOCUMENT",
        "relationshipType": "DESCRIBES",
        "relatedSpdxElement": ids[&root.id],
    })];
    for (from, deps) in &graph {
        relationships.extend(deps.iter().map(|to| {
            json!({
                "spdxElementId": ids[from],
                "relationshipType": "DEPENDS_ON",
                "relatedSpdxElement": ids[to],
            })
        }));
    }
    let mut document = json!({
        "spdxVersion": "SPDX-2.3",
        "dataLicense": "CC0-1.0",
        "SPDXID": "SPDXRef-DOCUMENT",
        "name": format!("{} {}", subject.image, subject.platform),
        "creationInfo": { "created": EPOCH, "creators": [format!("Tool: {tool}")] },
        "packages": packages,
        "relationships": relationships,
    });
    let content = digest(&serde_json::to_vec(&document)?);
    document["documentNamespace"] = json!(format!(
        "https://spdx.org/spdxdocs/{}-{}-{}",
        subject.package,
        subject.platform.replace('/', "-"),
        &content["sha256:".len()..]
    ));
    Ok(serde_json::to_vec_pretty(&document)?)
}

/// Every package linked into `root`, with the linked packages each depends on directly.
fn linked(
    metadata: &Metadata,
    root: &PackageId,
) -> Result<BTreeMap<PackageId, BTreeSet<PackageId>>, Error> {
    let resolve = metadata.resolve.as_ref().ok_or_else(|| {
        Error::Input("cargo metadata gave no dependency graph (was --no-deps passed?)".into())
    })?;
    let nodes: BTreeMap<&PackageId, _> = resolve.nodes.iter().map(|n| (&n.id, n)).collect();
    let mut graph = BTreeMap::new();
    let mut todo = vec![root.clone()];
    while let Some(id) = todo.pop() {
        if graph.contains_key(&id) {
            continue;
        }
        let deps: BTreeSet<PackageId> = nodes
            .get(&id)
            .map(|node| &node.deps)
            .into_iter()
            .flatten()
            .filter(|dep| {
                dep.dep_kinds
                    .iter()
                    .any(|k| k.kind == DependencyKind::Normal)
                    && !is_proc_macro(&metadata[&dep.pkg])
            })
            .map(|dep| dep.pkg.clone())
            .collect();
        todo.extend(deps.iter().cloned());
        graph.insert(id, deps);
    }
    Ok(graph)
}

fn is_proc_macro(package: &Package) -> bool {
    package.targets.iter().any(|t| t.is_proc_macro())
}

/// `SPDXRef-<name>-<version>`, with the characters SPDX does not allow in an id replaced, and a
/// suffix where two packages would get the same id (one crate from two sources).
fn spdx_ids<'a>(
    metadata: &Metadata,
    ids: impl Iterator<Item = &'a PackageId>,
) -> BTreeMap<PackageId, String> {
    let mut taken = BTreeSet::new();
    ids.map(|id| {
        let package = &metadata[id];
        let base: String = format!("SPDXRef-{}-{}", package.name, package.version)
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                    c
                } else {
                    '-'
                }
            })
            .collect();
        let mut spdx_id = base.clone();
        for n in 2.. {
            if taken.insert(spdx_id.clone()) {
                break;
            }
            spdx_id = format!("{base}-{n}");
        }
        (id.clone(), spdx_id)
    })
    .collect()
}

fn package_json(package: &Package, spdx_id: &str, checksums: &Checksums, root: bool) -> Value {
    let (name, version) = (package.name.as_str(), package.version.to_string());
    let from_crates_io = package.source.as_ref().is_some_and(|s| s.repr == CRATES_IO);
    let mut value = json!({
        "SPDXID": spdx_id,
        "name": name,
        "versionInfo": version,
        "filesAnalyzed": false,
        "licenseConcluded": "NOASSERTION",
        "licenseDeclared": license(package.license.as_deref()),
        "copyrightText": "NOASSERTION",
        "downloadLocation": if from_crates_io {
            format!("https://crates.io/api/v1/crates/{name}/{version}/download")
        } else {
            "NOASSERTION".to_owned()
        },
    });
    if root {
        value["primaryPackagePurpose"] = json!("APPLICATION");
    }
    // A purl names a crate on crates.io; a workspace crate of the same name is another thing.
    if from_crates_io {
        value["externalRefs"] = json!([{
            "referenceCategory": "PACKAGE-MANAGER",
            "referenceType": "purl",
            "referenceLocator": format!("pkg:cargo/{name}@{version}"),
        }]);
    }
    if let Some(sum) = checksums.get(&(name.to_owned(), version)) {
        value["checksums"] = json!([{ "algorithm": "SHA256", "checksumValue": sum }]);
    }
    value
}

/// Cargo's license field as an SPDX expression: the old `MIT/Apache-2.0` form means OR.
fn license(field: Option<&str>) -> String {
    match field.map(str::trim) {
        Some(expression) if !expression.is_empty() => expression.replace('/', " OR "),
        _ => "NOASSERTION".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checksums_come_from_registry_packages_only() {
        let lock = r#"
version = 4

[[package]]
name = "agent"
version = "0.1.0"

[[package]]
name = "serde"
version = "1.0.229"
source = "registry+https://github.com/rust-lang/crates.io-index"
checksum = "abcd"
"#;
        let sums = checksums(lock).unwrap();
        assert_eq!(sums.len(), 1);
        assert_eq!(sums[&("serde".to_owned(), "1.0.229".to_owned())], "abcd");
        assert!(checksums("[[package]\n").is_err());
    }

    #[test]
    fn the_old_slash_form_of_a_license_means_or() {
        assert_eq!(license(Some("MIT/Apache-2.0")), "MIT OR Apache-2.0");
        assert_eq!(
            license(Some("Apache-2.0 WITH LLVM-exception")),
            "Apache-2.0 WITH LLVM-exception"
        );
        assert_eq!(license(None), "NOASSERTION");
        assert_eq!(license(Some(" ")), "NOASSERTION");
    }
}
