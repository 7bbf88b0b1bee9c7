//! reboot-controller: watches the pool's Nodes, grants reboot slots under `--max-unavailable`
//! with a compare-and-swap on one ledger object, cordons, drains and promotes requested nodes,
//! and completes proven reboots.

pub mod decide;
pub mod ledger;
