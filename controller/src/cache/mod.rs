//! What the controller keeps in memory between rounds: the pool's nodes (a trimmed reflector
//! with an overlay of its own writes, over the pool `--node-selector` selects), when it first
//! saw each request and each grant, and which Events it already sent. The API server stays
//! the truth: a restart lists the nodes again, and losing the rest costs at most a different
//! order among waiting requests, a repeated Event, and delays waited again from the new
//! process's first sight of a grant (longer, never shorter).

pub mod memory;
pub mod nodes;
pub mod pool;
pub mod sightings;
