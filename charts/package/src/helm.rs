//! The helm that packages, lints and renders the chart.

use crate::Error;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;

#[derive(Debug, Clone)]
pub struct Helm {
    bin: PathBuf,
}

impl Helm {
    pub fn new(bin: PathBuf) -> Result<Self, Error> {
        if !bin.is_file() {
            return Err(Error::NoHelm(bin));
        }
        Ok(Helm { bin })
    }

    /// `helm <args>` with `env`; its stdout, or an error with everything it said.
    pub fn run<S: AsRef<OsStr>>(&self, args: &[S], env: &[(&str, &str)]) -> Result<String, Error> {
        let shown = args
            .iter()
            .map(|a| a.as_ref().to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join(" ");
        let output = Command::new(&self.bin)
            .args(args)
            .envs(env.iter().copied())
            .output()
            .map_err(Error::io(&self.bin))?;
        if !output.status.success() {
            return Err(Error::Helm {
                args: shown,
                output: format!(
                    "{}{}",
                    String::from_utf8_lossy(&output.stdout),
                    String::from_utf8_lossy(&output.stderr)
                ),
            });
        }
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    }

    /// Every `image:` the chart at `chart` renders with its defaults, in order.
    pub fn rendered_images(&self, chart: &Path) -> Result<Vec<String>, Error> {
        let rendered = self.run(
            &[
                OsStr::new("template"),
                OsStr::new("node-reboot-operator"),
                chart.as_os_str(),
                OsStr::new("--namespace"),
                OsStr::new("node-reboot-operator"),
            ],
            &[],
        )?;
        Ok(rendered
            .lines()
            .filter_map(|l| l.trim().strip_prefix("image:"))
            .map(|i| i.trim().trim_matches('"').to_owned())
            .collect())
    }
}
