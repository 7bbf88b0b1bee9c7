//! reboot-controller: watches the pool's Nodes, grants reboot slots under `--max-unavailable`
//! with a compare-and-swap on one ledger object, cordons, drains and promotes requested nodes,
//! and completes proven reboots.

pub mod alert_watch;
pub mod alerts;
pub mod api;
pub mod api_error;
pub mod args;
pub mod blocking_pods;
pub mod budget;
pub mod clock;
pub mod decide;
pub mod drain;
pub mod drain_tracker;
pub mod dry_run;
pub mod events;
pub mod gates;
pub mod leader;
pub mod ledger;
pub mod ledger_store;
pub mod memory;
pub mod metrics;
#[cfg(test)]
mod model;
pub mod node_pods;
pub mod node_view;
pub mod nodes;
pub mod notify;
pub mod plan;
pub mod pool;
pub mod pool_index;
pub mod preflight;
pub mod rollout_plan;
pub mod run;
pub mod schedule;
pub mod shell;
pub mod sightings;
pub mod window;

pub use args::Args;
pub use run::run;
