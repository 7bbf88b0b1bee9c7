//! `make crd`: writes the `RebootPool` CRD, generated from `common::pool::RebootPool`, to the
//! chart's `crds/` and to `manifests/`.

use anyhow::{Context, Result};
use chart_package::crd;
use std::path::Path;

const WORKSPACE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");

fn main() -> Result<()> {
    let text = crd::rebootpools_yaml();
    for file in crd::FILES {
        let path = Path::new(WORKSPACE).join(file);
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
        }
        std::fs::write(&path, &text).with_context(|| format!("write {}", path.display()))?;
        println!("{file}");
    }
    Ok(())
}
