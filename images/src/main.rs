//! `make images`: writes target/images/<image>.oci.tar, the SBOMs beside them and
//! target/images/images.txt, and prints each image's name and digest.

use anyhow::{Context, Result};
use clap::Parser;
use oci_images::images::{self, Naming};
use oci_images::multiarch::{self, PlatformImage};
use oci_images::oci::{self, Built, Platform};
use oci_images::{inputs, sbom};
use std::path::{Path, PathBuf};

/// Builds the OCI image archives of reboot-agent, reboot-controller, the pause image and the
/// test workload, reproducibly, without a container engine.
#[derive(Debug, Parser)]
#[command(version)]
struct Args {
    /// Where `make static` built reboot-agent and reboot-controller: the directory that holds
    /// <arch>-unknown-linux-gnu/release/ for each architecture [default: this program's own
    /// target directory].
    #[arg(long, env = "OCI_IMAGES_STATIC_DIR")]
    static_dir: Option<PathBuf>,
    /// The architectures of reboot-agent's and reboot-controller's images, as OCI names them;
    /// each image is one index of them all. The pause and test-workload images are the host's.
    #[arg(
        long,
        env = "OCI_IMAGES_ARCHITECTURES",
        value_delimiter = ',',
        default_value = "amd64,arm64",
        value_parser = ["amd64", "arm64"]
    )]
    architectures: Vec<String>,
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
    /// The workspace whose `cargo metadata` and Cargo.lock give the SBOMs.
    #[arg(
        long,
        env = "OCI_IMAGES_WORKSPACE",
        default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/..")
    )]
    workspace: PathBuf,
}

/// The target directory this program was built into: target/<profile>/oci-images.
fn target_dir() -> Result<PathBuf> {
    let exe = std::env::current_exe().context("this program's own path")?;
    exe.ancestors()
        .nth(2)
        .map(Path::to_path_buf)
        .context("this program is not in <target>/<profile>/")
}

/// As e2e/tests/static_build.rs finds them: `make static` puts them in
/// <target>/<arch>-unknown-linux-gnu/release.
fn static_binary(static_dir: &Path, triple: &str, name: &str) -> Result<Vec<u8>> {
    let path = static_dir.join(triple).join("release").join(name);
    std::fs::read(&path).with_context(|| {
        format!(
            "{}: the static release binaries are missing: run `make static` first \
             (or point --static-dir / OCI_IMAGES_STATIC_DIR at them)",
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

/// `amd64` → `x86_64-unknown-linux-gnu`.
fn triple(architecture: &str) -> Result<&'static str> {
    match architecture {
        "amd64" => Ok("x86_64-unknown-linux-gnu"),
        "arm64" => Ok("aarch64-unknown-linux-gnu"),
        other => anyhow::bail!("no Rust target for the architecture {other:?}"),
    }
}

/// One of our programs for every architecture asked for, each with its SBOM, written beside
/// the archive as `<file>.<arch>.spdx.json` for people who read it without OCI tools.
fn program(
    args: &Args,
    static_dir: &Path,
    out_dir: &Path,
    (package, binary): (&str, &str),
    image: impl Fn(&Platform, Vec<u8>) -> oci::Image,
) -> Result<Built> {
    let lock = read(
        &args.workspace.join("Cargo.lock"),
        "the workspace's lock file",
    )?;
    let checksums = sbom::checksums(&String::from_utf8_lossy(&lock))?;
    let mut platform_images = Vec::new();
    for architecture in &args.architectures {
        let triple = triple(architecture)?;
        let platform = Platform {
            architecture: architecture.clone(),
            os: "linux".to_owned(),
        };
        let image = image(&platform, static_binary(static_dir, triple, binary)?);
        let metadata = inputs::cargo_metadata(&args.workspace, triple)?;
        let subject = sbom::Subject {
            package,
            image: &image.name,
            platform: &format!("linux/{architecture}"),
        };
        let tool = concat!("oci-images-", env!("CARGO_PKG_VERSION"));
        let sbom = sbom::spdx(&metadata, &checksums, &subject, tool)?;
        write(
            &out_dir.join(format!("{binary}.{architecture}.spdx.json")),
            &sbom,
        )?;
        platform_images.push(PlatformImage { image, sbom });
    }
    let name = platform_images
        .first()
        .map(|p| p.image.name.clone())
        .context("--architectures names none")?;
    Ok(multiarch::build(&name, &platform_images)?)
}

/// Every image with its archive's file name, built (and pause and busybox fetched or built
/// when the cache lacks them).
fn images(
    args: &Args,
    static_dir: &Path,
    out_dir: &Path,
    cache: &Path,
) -> Result<Vec<(&'static str, Built)>> {
    let host = Platform::host()?;
    let naming = Naming {
        registry: args.registry.clone(),
        tag: args.tag.clone(),
    };
    let ca_bundle = read(
        &args.ca_bundle,
        "the controller's CA bundle (Debian's ca-certificates, or --ca-bundle)",
    )?;
    let agent = program(
        args,
        static_dir,
        out_dir,
        ("agent", "reboot-agent"),
        |platform, binary| images::agent(&naming, platform, binary),
    )?;
    let controller = program(
        args,
        static_dir,
        out_dir,
        ("controller", "reboot-controller"),
        |platform, binary| images::controller(&naming, platform, binary, ca_bundle.clone()),
    )?;
    let pause_source = inputs::pause_source(&args.go_module)?;
    let pause = inputs::pause_binary(cache, &pause_source)?;
    let (_, busybox) = inputs::busybox(cache)?;
    Ok(vec![
        ("reboot-agent", agent),
        ("reboot-controller", controller),
        (
            "pause",
            oci::build(&images::pause(&host, &pause_source.tag, pause))?,
        ),
        (
            "test-workload",
            oci::build(&images::test_workload(&args.registry, &host, busybox))?,
        ),
    ])
}

/// `<out>/<file>.oci.tar` for each image, and `<out>/images.txt`: a line per image, its name,
/// archive and digest separated by tabs.
fn write_archives(out_dir: &Path, images: &[(&str, Built)]) -> Result<()> {
    let mut summary = String::new();
    for (file, built) in images {
        let archive = out_dir.join(format!("{file}.oci.tar"));
        write(&archive, &built.archive)?;
        println!("{} {}", built.name, built.digest);
        summary.push_str(&format!(
            "{}\t{}\t{}\n",
            built.name,
            archive.display(),
            built.digest
        ));
    }
    write(&out_dir.join("images.txt"), summary.as_bytes())
}

fn main() -> Result<()> {
    let args = Args::parse();
    let target = target_dir()?;
    let static_dir = args.static_dir.clone().unwrap_or_else(|| target.clone());
    let out_dir = args
        .out_dir
        .clone()
        .unwrap_or_else(|| target.join("images"));
    let cache = match &args.cache_dir {
        Some(dir) => dir.clone(),
        None => inputs::default_cache_dir()
            .context("neither NRO_CACHE, XDG_CACHE_HOME nor HOME is set")?,
    };
    std::fs::create_dir_all(&out_dir).with_context(|| format!("creating {}", out_dir.display()))?;
    write_archives(&out_dir, &images(&args, &static_dir, &out_dir, &cache)?)
}
