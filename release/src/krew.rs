//! The krew plugin manifest (`reboot.yaml`): plugin `reboot`, a platform per archive, each
//! pointing at the archive on the GitHub release of the version, with its sha256.

use crate::platform::Platform;

/// Where the GitHub release's files are: `<this>/v<version>/<archive>`.
pub const DOWNLOAD_URL: &str =
    "https://github.com/node-reboot-operator/node-reboot-operator/releases/download";

const HOMEPAGE: &str = "https://github.com/node-reboot-operator/node-reboot-operator";

/// One archive of the plugin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Archive {
    pub platform: &'static Platform,
    pub name: String,
    pub sha256: String,
}

/// The manifest of `version`, its platforms in the order of `archives`.
pub fn manifest(version: &str, download_url: &str, archives: &[Archive]) -> String {
    let download_url = download_url.trim_end_matches('/');
    let mut yaml = format!(
        "apiVersion: krew.googlecontainertools.github.com/v1alpha2
kind: Plugin
metadata:
  name: reboot
spec:
  version: v{version}
  homepage: {HOMEPAGE}
  shortDescription: Watch and steer node-reboot-operator's safe node reboots
  description: |
    The kubectl plugin of node-reboot-operator, which reboots the nodes that need it one
    at a time within the limits it is given. `kubectl reboot status` shows which nodes
    wait for a reboot and why, `kubectl reboot plan` the rollout wave by wave; request,
    cancel, pause and resume steer it, and migrate-from-kured translates a running kured
    into the operator's chart values.
  platforms:
"
    );
    for archive in archives {
        let platform = archive.platform;
        yaml.push_str(&format!(
            "  - selector:
      matchLabels:
        os: {os}
        arch: {arch}
    uri: {download_url}/v{version}/{name}
    sha256: {sha256}
    files:
    - from: {bin}
      to: .
    - from: LICENSE
      to: .
    bin: {bin}
",
            os = platform.os,
            arch = platform.arch,
            name = archive.name,
            sha256 = archive.sha256,
            bin = platform.binary(),
        ));
    }
    yaml
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_archive_is_a_platform_with_its_uri_and_sha256() {
        let windows = Platform::find("windows", "amd64").unwrap();
        let yaml = manifest(
            "1.2.3",
            "https://example.com/releases/download/",
            &[Archive {
                platform: windows,
                name: windows.archive_name("1.2.3"),
                sha256: "ab".repeat(32),
            }],
        );
        assert!(yaml.starts_with(
            "apiVersion: krew.googlecontainertools.github.com/v1alpha2\nkind: Plugin\nmetadata:\n  name: reboot\nspec:\n  version: v1.2.3\n"
        ));
        let platform = yaml.split_once("  platforms:\n").unwrap().1;
        assert_eq!(
            platform,
            format!(
                "  - selector:
      matchLabels:
        os: windows
        arch: amd64
    uri: https://example.com/releases/download/v1.2.3/kubectl-reboot_1.2.3_windows_amd64.zip
    sha256: {}
    files:
    - from: kubectl-reboot.exe
      to: .
    - from: LICENSE
      to: .
    bin: kubectl-reboot.exe
",
                "ab".repeat(32)
            )
        );
    }
}
