//! `make images`: OCI image archives of reboot-agent, reboot-controller, Kubernetes' pause and
//! a busybox test workload, built from static binaries without a container engine and
//! reproducibly (the same inputs give the same digests), so that a node's containerd can
//! import them and `imagePullPolicy: IfNotPresent` never asks a registry. Our two programs are
//! one index each for amd64 and arm64, with an SPDX SBOM per platform.
//!
//! [`layer`], [`oci`], [`multiarch`], [`sbom`] and [`images`] are pure: bytes in, bytes out.
//! [`inputs`] runs cargo metadata, and gcc, go and apt for the two images whose binaries are
//! not ours.

mod error;
pub mod images;
pub mod inputs;
pub mod layer;
pub mod multiarch;
pub mod oci;
pub mod sbom;

pub use error::Error;
