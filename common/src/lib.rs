//! The node reboot protocol shared by `reboot-agent` and `reboot-controller`: the annotation
//! keys, the Events' reasons and reporters, the protocol state of a node read from its annotations, the JSON patches that move a
//! node from one state to the next, and the `--max-unavailable` budget. Pure: no I/O, no client.

pub mod abandon;
pub mod budget;
pub mod drain_failures;
pub mod duration;
pub mod events;
pub mod eviction;
pub mod format;
pub mod keys;
pub mod ledger;
pub mod marks;
pub mod opt_out;
pub mod patch;
pub mod pool;
pub mod rollout;
pub mod state;
// The unit tests of every crate write their Nodes with it (`test-util` in [dev-dependencies]).
#[cfg(any(test, feature = "test-util"))]
pub mod test_util;

pub use budget::{MaxUnavailable, MaxUnavailableError};
pub use events::{AgentReason, ControllerReason, Reason};
pub use keys::{AnnotationKeys, PrefixError};
pub use marks::{MarkError, RebootMarks};
pub use opt_out::OptOut;
pub use patch::Transition;
pub use state::{NodeFacts, Phase, ProtocolState, Readiness, Request, unavailable};
