//! `make chart`: packages the Helm chart with its images pinned by digest.

use anyhow::{Context, Result};
use chart_package::helm::Helm;
use chart_package::package::{self, Request};
use clap::Parser;
use std::path::{Path, PathBuf};

const WORKSPACE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");

/// Packages charts/node-reboot-operator into <target>/chart/<name>-<version>.tgz, its version
/// the workspace's and its images pinned by the digests of `make images`.
#[derive(Debug, Parser)]
#[command(version)]
struct Args {
    /// images.txt of `make images` [default: <target>/images/images.txt, <target> being this
    /// program's target dir].
    #[arg(long, env = "CHART_PACKAGE_IMAGES_TXT")]
    images_txt: Option<PathBuf>,
    /// Where the package goes [default: <target>/chart].
    #[arg(long, env = "CHART_PACKAGE_OUT_DIR")]
    out_dir: Option<PathBuf>,
    /// The registry and namespace of the images, as `make images` named them; the packaged
    /// chart's `image.registry`. The variable is oci-images', so that one setting serves both.
    #[arg(
        long,
        env = "OCI_IMAGES_REGISTRY",
        default_value = "ghcr.io/node-reboot-operator"
    )]
    registry: String,
    /// The chart to package.
    #[arg(long, env = "CHART_PACKAGE_CHART", default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/../node-reboot-operator"))]
    chart: PathBuf,
    /// helm 4 [default: testenv/bin/helm, which `make testenv` builds].
    #[arg(long, env = "HELM")]
    helm: Option<PathBuf>,
    /// The time of every file in the archive, in seconds since 1970 (as the images' files).
    #[arg(long, env = "SOURCE_DATE_EPOCH", default_value_t = 0)]
    source_date_epoch: u64,
}

fn main() -> Result<()> {
    let args = Args::parse();
    let target = chart_package::own_target_dir().context("this program's target directory")?;
    let helm = Helm::new(
        args.helm
            .unwrap_or_else(|| Path::new(WORKSPACE).join("testenv/bin/helm")),
    )?;
    let request = Request {
        chart_dir: args.chart,
        images_txt: args
            .images_txt
            .unwrap_or_else(|| target.join("images/images.txt")),
        registry: args.registry,
        // The workspace's version: this crate's is `version.workspace = true`.
        version: env!("CARGO_PKG_VERSION").to_owned(),
        out_dir: args.out_dir.unwrap_or_else(|| target.join("chart")),
        source_date_epoch: args.source_date_epoch,
    };
    let packaged = package::package(&helm, &request)?;
    println!(
        "{} {} (chart {} {}, appVersion {})",
        packaged.archive.display(),
        packaged.sha256,
        packaged.name,
        packaged.version,
        packaged.version
    );
    for image in &packaged.images {
        println!("  {}", image.reference());
    }
    println!(
        "push it with: helm push {} oci://<registry>/<path>",
        packaged.archive.display()
    );
    Ok(())
}
