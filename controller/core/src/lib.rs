//! The controller's pure decision core. Everything here is a function of plain data: the
//! pool's node views, the slot ledger, the time and the budget go in; a decision, a plan or a
//! hold comes out. The reboot-controller's shell reads the cluster, calls these and writes
//! what they decide; `kubectl reboot plan` runs the same decision forward.
//!
//! This crate depends on `common` and pure data crates only (no Kubernetes client, no async
//! runtime), so the compiler keeps it pure.

pub mod alerts;
pub mod autoscaler;
pub mod budget;
pub mod decide;
pub mod dry_run;
pub mod effects;
pub mod ledger;
pub mod node_view;
pub mod pool_index;
pub mod rollout;
pub mod rollout_plan;
pub mod schedule;
pub mod scheduled_budget;
pub mod window;
