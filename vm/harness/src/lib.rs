//! The VM test tier (docs/src/development.md, "Real reboots in virtual machines"): Debian guests under QEMU,
//! each running the real static `reboot-agent` as a systemd service and a small status
//! reporter in place of the kubelet, against the local control plane on loopback.
//!
//! [`image::BaseImage`] is the cached root file system; [`seed`] gives each VM the binaries and
//! credentials of this run; [`qemu::Vm`] is one guest with its serial console log;
//! [`fleet::VmFleet`] boots several and knows their identities.

pub mod figures;
pub mod fleet;
pub mod image;
pub mod node;
pub mod qemu;
pub mod seed;

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    Setup(String),
    #[error("{what}: {source}")]
    Io {
        what: String,
        source: std::io::Error,
    },
    #[error(transparent)]
    Kube(#[from] kube::Error),
    #[error(transparent)]
    Nodesim(#[from] nodesim::Error),
    #[error(transparent)]
    Testenv(#[from] testenv::Error),
}

impl Error {
    pub fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
        let what = what.into();
        move |source| Error::Io { what, source }
    }
}

/// The Debian packages of every host tool the tier runs, in one install command.
pub const INSTALL_HINT: &str =
    "apt-get install -y qemu-system-x86 qemu-utils debootstrap e2fsprogs socat util-linux";

/// Fails, naming the install command, when a host tool of the tier is missing: the tier never
/// skips itself.
pub fn require_tools() -> Result<(), Error> {
    let missing: Vec<&str> = [
        "qemu-system-x86_64",
        "qemu-img",
        "socat",
        "mkfs.ext4",
        "debootstrap",
        // util-linux's: QEMU runs under `setpriv --pdeathsig KILL` (see `qemu`).
        "setpriv",
    ]
    .into_iter()
    .filter(|tool| find_on_path(tool).is_none())
    .collect();
    if missing.is_empty() {
        return Ok(());
    }
    Err(Error::Setup(format!(
        "the VM test tier needs {} and cannot find it on PATH (nor in /usr/sbin, /sbin); \
         install with `{INSTALL_HINT}` (make test does this on Debian)",
        missing.join(", ")
    )))
}

/// `tool` on PATH or in the sbin directories that a non-login PATH may lack.
pub fn find_on_path(tool: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin"].map(PathBuf::from))
        .map(|dir| dir.join(tool))
        .find(|candidate| candidate.is_file())
}

/// Runs `work` unless SIGINT, SIGTERM or SIGHUP comes first; then drops it, which stops
/// everything it started (the guests' QEMU, the controller, the control plane: each stops in
/// its `Drop`), and panics, so the test fails and says why.
///
/// Without this a signal sent to the test process alone (`kill <pid>`, a CI timeout) ends it
/// at once, without running any `Drop`: QEMU would still die (its parent death signal), the
/// control plane's processes would not.
pub async fn unless_interrupted<T>(work: impl std::future::Future<Output = T>) -> T {
    use tokio::signal::unix::{SignalKind, signal};
    let listen = |kind| signal(kind).expect("listen for signals");
    let mut interrupt = listen(SignalKind::interrupt());
    let mut terminate = listen(SignalKind::terminate());
    let mut hangup = listen(SignalKind::hangup());
    // `work` is moved into `select!`, which drops it before this returns.
    let name = tokio::select! {
        done = work => return done,
        _ = interrupt.recv() => "SIGINT",
        _ = terminate.recv() => "SIGTERM",
        _ = hangup.recv() => "SIGHUP",
    };
    panic!("interrupted by {name}: stopped the guests' QEMU, the controller and the control plane");
}

/// The workspace's root directory.
pub fn repo_root() -> PathBuf {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    root.canonicalize().unwrap_or(root)
}

/// Elapsed seconds as people read them in progress lines.
pub fn secs(elapsed: std::time::Duration) -> String {
    format!("{:.1} s", elapsed.as_secs_f64())
}
