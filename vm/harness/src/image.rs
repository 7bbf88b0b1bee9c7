//! The guests' disk images, each built once by its script and cached by its inputs:
//! `vm/image/build.sh` (the agent as a service, a reporter in place of the kubelet) and
//! `vm/node/image/build.sh` (real nodes: kubelet, containerd, runc, CNI).

use crate::{Error, repo_root};
use std::{
    io::{BufRead, BufReader},
    path::PathBuf,
    process::{Command, Stdio},
    time::Instant,
};

/// The cached kernel, initramfs and root disk of the guests.
#[derive(Debug, Clone)]
pub struct BaseImage {
    pub dir: PathBuf,
}

impl BaseImage {
    /// Runs `vm/image/build.sh` (at once when cached), passing its progress on to stderr.
    pub fn ensure() -> Result<BaseImage, Error> {
        Self::build("vm/image/build.sh", "vm-image")
    }

    /// The real nodes' image of `vm/node/image/build.sh`.
    pub fn ensure_node() -> Result<BaseImage, Error> {
        Self::build("vm/node/image/build.sh", "node-image")
    }

    /// Runs `script` (relative to the workspace), whose last line is `<tag>: ready <dir>`.
    fn build(script: &str, tag: &str) -> Result<BaseImage, Error> {
        let script = repo_root().join(script);
        let ready_prefix = format!("{tag}: ready ");
        let started = Instant::now();
        let mut child = Command::new("bash")
            .arg(&script)
            .stdout(Stdio::piped())
            .spawn()
            .map_err(Error::io(format!("run {}", script.display())))?;
        let mut ready = None;
        if let Some(stdout) = child.stdout.take() {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                eprintln!("{line}");
                if let Some(rest) = line.strip_prefix(&ready_prefix) {
                    ready = rest.split_whitespace().next().map(PathBuf::from);
                }
            }
        }
        let status = child
            .wait()
            .map_err(Error::io("wait for the image build"))?;
        match ready {
            Some(dir) if status.success() => {
                eprintln!(
                    "{tag}: {} after {}",
                    dir.display(),
                    crate::secs(started.elapsed())
                );
                Ok(BaseImage { dir })
            }
            _ => Err(Error::Setup(format!(
                "{} failed ({status}); its message is above",
                script.display()
            ))),
        }
    }

    pub fn kernel(&self) -> PathBuf {
        self.dir.join("vmlinuz")
    }

    pub fn initrd(&self) -> PathBuf {
        self.dir.join("initrd.img")
    }

    pub fn disk(&self) -> PathBuf {
        self.dir.join("base.qcow2")
    }
}
