//! reboot-controller: watches the pool's Nodes, grants reboot slots under `--max-unavailable`
//! with a compare-and-swap on one ledger object, cordons, drains and promotes requested nodes,
//! and completes proven reboots.

pub mod args;
pub mod cache;
pub mod clock;
pub mod cluster;
pub mod drain;
pub mod gates;
pub mod metrics;
#[cfg(test)]
mod model;
pub mod notify;
pub mod pools;
pub mod run;
pub mod shell;

pub use args::Args;
pub use run::run;
