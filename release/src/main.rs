//! `make release`: writes target/dist/<version>/. Its subcommands also serve the release
//! workflow: `plugin-archive` packs the macOS plugin on a macOS runner, `index` writes the
//! krew manifest and SHA256SUMS again once those archives are in the folder.

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use release_dist::platform::Platform;
use release_dist::{DOWNLOAD_URL, Inputs, executable};
use std::path::{Path, PathBuf};

const WORKSPACE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
/// The workspace's version: this crate's is `version.workspace = true`.
const VERSION: &str = env!("CARGO_PKG_VERSION");

/// Assembles a release of node-reboot-operator, reproducibly.
#[derive(Debug, Parser)]
#[command(version)]
struct Args {
    #[command(subcommand)]
    command: Command,
    /// The release's folder [default: <target>/dist/<version>, <target> being this program's
    /// target dir].
    #[arg(long, global = true, env = "RELEASE_DIR")]
    dir: Option<PathBuf>,
    /// Where the krew manifest points: the GitHub release's download URL, without
    /// `/v<version>/<archive>`.
    #[arg(long, global = true, env = "RELEASE_DOWNLOAD_URL", default_value = DOWNLOAD_URL)]
    download_url: String,
    /// The time of every file in the plugin's archives, in seconds since 1970 (as the images'
    /// and the chart's files).
    #[arg(long, global = true, env = "SOURCE_DATE_EPOCH", default_value_t = 0)]
    source_date_epoch: u64,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Writes the whole folder from `make images`, `make chart` and `make static`.
    Assemble(AssembleArgs),
    /// Packs one platform's plugin binary into its archive in the folder (the workflow's macOS
    /// job); run `index` after.
    PluginArchive(PluginArchiveArgs),
    /// Writes the krew manifest from the folder's plugin archives, then SHA256SUMS.
    Index,
}

#[derive(Debug, clap::Args)]
struct AssembleArgs {
    /// `make images`' folder [default: <target>/images].
    #[arg(long, env = "RELEASE_IMAGES_DIR")]
    images_dir: Option<PathBuf>,
    /// `make chart`'s package [default: <target>/chart/node-reboot-operator-<version>.tgz].
    #[arg(long, env = "RELEASE_CHART")]
    chart: Option<PathBuf>,
    /// `make static`'s target directory, with <triple>/release/kubectl-reboot[.exe] for each
    /// platform [default: <target>].
    #[arg(long, env = "RELEASE_STATIC_DIR")]
    static_dir: Option<PathBuf>,
    /// The registry and namespace `make images` named the images under.
    #[arg(
        long,
        env = "OCI_IMAGES_REGISTRY",
        default_value = "ghcr.io/node-reboot-operator"
    )]
    registry: String,
}

#[derive(Debug, clap::Args)]
struct PluginArchiveArgs {
    /// The platform's OS, as krew names it.
    #[arg(long, env = "RELEASE_PLUGIN_OS", value_parser = ["linux", "windows", "darwin"])]
    os: String,
    /// The platform's architecture, as krew names it.
    #[arg(long, env = "RELEASE_PLUGIN_ARCH", value_parser = ["amd64", "arm64"])]
    arch: String,
    /// The plugin built for it.
    #[arg(long, env = "RELEASE_PLUGIN_BINARY")]
    binary: PathBuf,
}

fn plugin_archive(args: &PluginArchiveArgs, dir: &Path, mtime: u64) -> Result<()> {
    let platform = Platform::find(&args.os, &args.arch)
        .with_context(|| format!("no plugin is released for {}/{}", args.os, args.arch))?;
    let binary = std::fs::read(&args.binary)
        .with_context(|| format!("reading the plugin {}", args.binary.display()))?;
    if executable::platform(&binary) != Some((platform.os, platform.arch)) {
        anyhow::bail!(
            "{} is {}, not a {}/{} program: build it with --target {}",
            args.binary.display(),
            executable::describe(&binary),
            platform.os,
            platform.arch,
            platform.triple
        );
    }
    let license_path = Path::new(WORKSPACE).join("LICENSE");
    let license = std::fs::read(&license_path)
        .with_context(|| format!("reading {}", license_path.display()))?;
    let (name, bytes) = release_dist::plugin_archive(platform, VERSION, &binary, &license, mtime)?;
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let path = dir.join(name);
    std::fs::write(&path, bytes).with_context(|| format!("writing {}", path.display()))?;
    println!("{}", path.display());
    Ok(())
}

fn main() -> Result<()> {
    let args = Args::parse();
    let target = chart_package::own_target_dir().context("this program's target directory")?;
    let dir = args
        .dir
        .clone()
        .unwrap_or_else(|| target.join("dist").join(VERSION));
    match &args.command {
        Command::Assemble(assemble) => {
            let inputs = Inputs {
                images_dir: assemble
                    .images_dir
                    .clone()
                    .unwrap_or_else(|| target.join("images")),
                chart: assemble.chart.clone().unwrap_or_else(|| {
                    target
                        .join("chart")
                        .join(format!("node-reboot-operator-{VERSION}.tgz"))
                }),
                static_dir: assemble.static_dir.clone().unwrap_or(target),
                license: Path::new(WORKSPACE).join("LICENSE"),
                registry: assemble.registry.clone(),
                version: VERSION.to_owned(),
                download_url: args.download_url.clone(),
                source_date_epoch: args.source_date_epoch,
            };
            release_dist::assemble(&inputs, &dir)?;
        }
        Command::PluginArchive(archive) => {
            plugin_archive(archive, &dir, args.source_date_epoch)?;
            return Ok(());
        }
        Command::Index => release_dist::index(&dir, VERSION, &args.download_url)?,
    }
    let sums = dir.join("SHA256SUMS");
    let text =
        std::fs::read_to_string(&sums).with_context(|| format!("reading {}", sums.display()))?;
    println!("{}:\n{text}", dir.display());
    Ok(())
}
