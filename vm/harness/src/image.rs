//! The base image of `vm/image/build.sh`, built once and cached by its inputs.

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
        let script = repo_root().join("vm/image/build.sh");
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
                if let Some(rest) = line.strip_prefix("vm-image: ready ") {
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
                    "vm-image: {} after {}",
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
