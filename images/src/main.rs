//! `make images`: writes target/images/<image>.oci.tar and target/images/images.txt, and
//! prints each image's name and manifest digest.

use anyhow::{Context, Result};
use clap::Parser;
use oci_images::images::{self, Naming};
use oci_images::inputs;
use oci_images::oci::{self, Image};
use std::path::{Path, PathBuf};

/// Builds the OCI image archives of reboot-agent, reboot-controller, the pause image and the
/// test workload, reproducibly, without a container engine.
#[derive(Debug, Parser)]
#[command(version)]
struct Args {
    /// Where `make static` put reboot-agent and reboot-controller [default:
    /// <target>/<arch>-unknown-linux-gnu/release, <target> being this program's target dir].
    #[arg(long, env = "OCI_IMAGES_BIN_DIR")]
    bin_dir: Option<PathBuf>,
    /// Where the archives and images.txt go [default: <target>/images].
    #[arg(long, env = "OCI_IMAGES_OUT_DIR")]
    out_dir: Option<PathBuf>,
    /// The pause binary and the busybox package are kept here between builds [default:
    /// ${XDG_CACHE_HOME:-$HOME/.cache}/node-reboot-operator].
    #[arg(long, env = "NRO_CACHE")]
    cache_dir: Option<PathBuf>,
    /// The registry and namespace of our images, as the chart's `image.registry`.
    #[arg(
        long,
        env = "OCI_IMAGES_REGISTRY",
        default_value = "ghcr.io/node-reboot-operator"
    )]
    registry: String,
    /// The tag of reboot-agent and reboot-controller: the chart's appVersion, which follows the
    /// workspace's version.
    #[arg(long, env = "OCI_IMAGES_TAG", default_value = env!("CARGO_PKG_VERSION"))]
    tag: String,
    /// The CA bundle the controller's image carries.
    #[arg(
        long,
        env = "OCI_IMAGES_CA_BUNDLE",
        default_value = "/etc/ssl/certs/ca-certificates.crt"
    )]
    ca_bundle: PathBuf,
    /// The Go module whose k8s.io/kubernetes version gives pause.c (the testenv's).
    #[arg(
        long,
        env = "OCI_IMAGES_GO_MODULE",
        default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/../testenv")
    )]
    go_module: PathBuf,
}

/// The target directory this program was built into: target/<profile>/oci-images.
fn target_dir() -> Result<PathBuf> {
    let exe = std::env::current_exe().context("this program's own path")?;
    exe.ancestors()
        .nth(2)
        .map(Path::to_path_buf)
        .context("this program is not in <target>/<profile>/")
}

/// As e2e/tests/static_build.rs finds them: beside this build's own target/<profile>/, in
/// target/<arch>-unknown-linux-gnu/release, where `make static` puts them.
fn static_dir(target: &Path) -> PathBuf {
    target
        .join(format!("{}-unknown-linux-gnu", std::env::consts::ARCH))
        .join("release")
}

fn static_binary(dir: &Path, name: &str) -> Result<Vec<u8>> {
    let path = dir.join(name);
    std::fs::read(&path).with_context(|| {
        format!(
            "{}: the static release binaries are missing: run `make static` first \
             (or point --bin-dir / OCI_IMAGES_BIN_DIR at them)",
            path.display()
        )
    })
}

fn read(path: &Path, what: &str) -> Result<Vec<u8>> {
    std::fs::read(path).with_context(|| format!("{what} {}", path.display()))
}

/// Writes through a temporary name, so that a reader never sees half an archive.
fn write(path: &Path, bytes: &[u8]) -> Result<()> {
    let partial = path.with_extension("partial");
    std::fs::write(&partial, bytes).with_context(|| format!("writing {}", partial.display()))?;
    std::fs::rename(&partial, path).with_context(|| format!("writing {}", path.display()))
}

/// Every image with its archive's file name, its inputs read (and pause and busybox fetched
/// or built when the cache lacks them).
fn images(args: &Args, bin_dir: &Path, cache: &Path) -> Result<Vec<(&'static str, Image)>> {
    let platform = oci::Platform::host()?;
    let naming = Naming {
        registry: args.registry.clone(),
        tag: args.tag.clone(),
    };
    let agent = static_binary(bin_dir, "reboot-agent")?;
    let controller = static_binary(bin_dir, "reboot-controller")?;
    let ca_bundle = read(
        &args.ca_bundle,
        "the controller's CA bundle (Debian's ca-certificates, or --ca-bundle)",
    )?;
    let pause_source = inputs::pause_source(&args.go_module)?;
    let pause = inputs::pause_binary(cache, &pause_source)?;
    let (_, busybox) = inputs::busybox(cache)?;
    Ok(vec![
        ("reboot-agent", images::agent(&naming, &platform, agent)),
        (
            "reboot-controller",
            images::controller(&naming, &platform, controller, ca_bundle),
        ),
        ("pause", images::pause(&platform, &pause_source.tag, pause)),
        (
            "test-workload",
            images::test_workload(&args.registry, &platform, busybox),
        ),
    ])
}

/// `<out>/<file>.oci.tar` for each image, and `<out>/images.txt`: a line per image, its name,
/// archive and manifest digest separated by tabs.
fn write_archives(out_dir: &Path, images: &[(&str, Image)]) -> Result<()> {
    std::fs::create_dir_all(out_dir).with_context(|| format!("creating {}", out_dir.display()))?;
    let mut summary = String::new();
    for (file, image) in images {
        let built = oci::build(image)?;
        let archive = out_dir.join(format!("{file}.oci.tar"));
        write(&archive, &built.archive)?;
        println!("{} {}", built.name, built.manifest_digest);
        summary.push_str(&format!(
            "{}\t{}\t{}\n",
            built.name,
            archive.display(),
            built.manifest_digest
        ));
    }
    write(&out_dir.join("images.txt"), summary.as_bytes())
}

fn main() -> Result<()> {
    let args = Args::parse();
    let target = target_dir()?;
    let bin_dir = args.bin_dir.clone().unwrap_or_else(|| static_dir(&target));
    let out_dir = args
        .out_dir
        .clone()
        .unwrap_or_else(|| target.join("images"));
    let cache = match &args.cache_dir {
        Some(dir) => dir.clone(),
        None => inputs::default_cache_dir()
            .context("neither NRO_CACHE, XDG_CACHE_HOME nor HOME is set")?,
    };
    write_archives(&out_dir, &images(&args, &bin_dir, &cache)?)
}
