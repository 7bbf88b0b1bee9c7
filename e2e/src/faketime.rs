//! A controller whose wall clock is off by minutes: libfaketime (Debian's `libfaketime`,
//! installed by `make test` through hack/install-faketime.sh) preloaded into the process. Only
//! the wall clock moves (`FAKETIME_DONT_FAKE_MONOTONIC=1`): timers, leases and soaks run on the
//! monotonic clock, as they do on a machine whose NTP is off.

use std::path::{Path, PathBuf};

/// Where Debian puts the library on this machine's architecture.
fn debian_path() -> PathBuf {
    let multiarch = format!("{}-linux-gnu", std::env::consts::ARCH);
    Path::new("/usr/lib")
        .join(multiarch)
        .join("faketime/libfaketime.so.1")
}

/// The library as the package lists it (another layout, a Debian derivative).
fn listed_by_dpkg() -> Option<PathBuf> {
    let out = std::process::Command::new("dpkg")
        .args(["-L", "libfaketime"])
        .output()
        .ok()?;
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find(|l| l.ends_with("/faketime/libfaketime.so.1"))
        .map(PathBuf::from)
}

/// The path of `libfaketime.so.1`: `LIBFAKETIME` when set, else where Debian's package put it.
///
/// # Panics
/// When it is missing: the tests that need it fail, never skip.
pub fn library() -> PathBuf {
    if let Some(given) = std::env::var_os("LIBFAKETIME") {
        let given = PathBuf::from(given);
        assert!(
            given.is_file(),
            "LIBFAKETIME={} is not a file; unset it or point it at libfaketime.so.1",
            given.display()
        );
        return given;
    }
    let debian = debian_path();
    if debian.is_file() {
        return debian;
    }
    listed_by_dpkg().filter(|p| p.is_file()).unwrap_or_else(|| {
        panic!(
            "libfaketime is missing ({} does not exist): run hack/install-faketime.sh (or \
             `apt-get install libfaketime`), or set LIBFAKETIME to its libfaketime.so.1",
            debian.display()
        )
    })
}

/// The environment of a process whose wall clock reads `offset` from the real one, in
/// libfaketime's relative form: `+5m`, `-3m`, `+10m`.
pub fn skewed(offset: &str) -> Vec<(String, String)> {
    vec![
        ("LD_PRELOAD".into(), library().display().to_string()),
        ("FAKETIME".into(), offset.into()),
        ("FAKETIME_DONT_FAKE_MONOTONIC".into(), "1".into()),
    ]
}
