//! The controller's conversations with the API server besides the node cache: the small traits
//! a round writes Nodes and the ledger Lease through, the ledger's store, leader election and
//! Events.

pub mod api;
pub mod events;
pub mod leader;
pub mod ledger_store;
