//! `make release`: a release's files in target/dist/<version>/, the same bytes on every run.
//! The images' archives and SBOMs (`make images`) and the packaged chart (`make chart`) are
//! copied; the kubectl plugin's archives are made here from `make static`'s binaries (a
//! tar.gz, or a zip for Windows, of the binary and LICENSE, every time and owner fixed); the
//! krew manifest and SHA256SUMS are written last from the folder's own files, so that the
//! release workflow can add the macOS archives, built on a macOS runner, and write them again.

mod archive;
mod dist;
mod error;
pub mod executable;
mod krew;
pub mod platform;
mod sums;

pub use archive::{PluginFile, plugin_archive};
pub use dist::{Inputs, MANIFEST, SHA256SUMS, assemble, index};
pub use error::Error;
pub use krew::DOWNLOAD_URL;
pub use sums::sha256_hex;
