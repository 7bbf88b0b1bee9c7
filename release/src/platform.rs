//! The platforms the kubectl plugin is released for, as krew's selectors name them (`os`,
//! `arch`), with the Rust target that builds each and the name of its archive.

/// One platform of the plugin.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Platform {
    pub os: &'static str,
    pub arch: &'static str,
    pub triple: &'static str,
}

/// Every platform, in the order of the krew manifest. Linux's and Windows' are built by
/// `make static`; macOS' only on a macOS runner, by the release workflow.
pub const PLATFORMS: [Platform; 5] = [
    Platform::new("darwin", "amd64", "x86_64-apple-darwin"),
    Platform::new("darwin", "arm64", "aarch64-apple-darwin"),
    Platform::new("linux", "amd64", "x86_64-unknown-linux-gnu"),
    Platform::new("linux", "arm64", "aarch64-unknown-linux-gnu"),
    Platform::new("windows", "amd64", "x86_64-pc-windows-gnu"),
];

/// The platforms `make release` packs: those this machine's toolchains build.
pub fn built_here() -> impl Iterator<Item = &'static Platform> {
    PLATFORMS.iter().filter(|p| p.os != "darwin")
}

impl Platform {
    const fn new(os: &'static str, arch: &'static str, triple: &'static str) -> Platform {
        Platform { os, arch, triple }
    }

    /// `linux`, `amd64`: the platform of that name, if the plugin is released for it.
    pub fn find(os: &str, arch: &str) -> Option<&'static Platform> {
        PLATFORMS.iter().find(|p| p.os == os && p.arch == arch)
    }

    /// The plugin's file name on this platform.
    pub fn binary(&self) -> &'static str {
        if self.os == "windows" {
            "kubectl-reboot.exe"
        } else {
            "kubectl-reboot"
        }
    }

    /// `zip` for Windows, where it is what people open; `tar.gz` elsewhere.
    pub fn extension(&self) -> &'static str {
        if self.os == "windows" {
            "zip"
        } else {
            "tar.gz"
        }
    }

    /// `kubectl-reboot_<version>_<os>_<arch>.<extension>`.
    pub fn archive_name(&self, version: &str) -> String {
        format!(
            "kubectl-reboot_{version}_{}_{}.{}",
            self.os,
            self.arch,
            self.extension()
        )
    }

    /// The platform whose archive of `version` has this file name.
    pub fn of_archive(name: &str, version: &str) -> Option<&'static Platform> {
        PLATFORMS.iter().find(|p| p.archive_name(version) == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn archive_names_round_trip_and_others_are_not_archives() {
        for platform in &PLATFORMS {
            let name = platform.archive_name("1.2.3");
            assert_eq!(Platform::of_archive(&name, "1.2.3"), Some(platform));
            assert_eq!(Platform::of_archive(&name, "1.2.4"), None);
        }
        assert_eq!(
            Platform::find("windows", "amd64").map(|p| p.archive_name("0.1.0")),
            Some("kubectl-reboot_0.1.0_windows_amd64.zip".to_owned())
        );
        assert_eq!(
            Platform::of_archive("kubectl-reboot_0.1.0_linux_amd64.zip", "0.1.0"),
            None
        );
        assert_eq!(Platform::of_archive("SHA256SUMS", "0.1.0"), None);
    }
}
