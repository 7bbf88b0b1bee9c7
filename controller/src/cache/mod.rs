//! What the controller keeps in memory between rounds: the pool's nodes (a trimmed reflector
//! with an overlay of its own writes), when it first saw each request and grant, and which
//! Events it already sent. The API server stays the truth: losing any of it on a restart costs
//! at most a different order among waiting requests and a repeated Event.

pub mod memory;
pub mod nodes;
pub mod pool;
pub mod sightings;
