//! One node as the decision core and the budget see it: the facts read from the node, its
//! protocol state and what this replica knows about it. Its own module, so that the budget
//! (which counts views) and the decision core (which uses the budget) do not import each other.

use common::{NodeFacts, OptOut, ProtocolState};

/// Where the drain of one grant stands, as this replica knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DrainState {
    #[default]
    NotStarted,
    Running,
    Drained,
    /// The drain gave up (timeout): the node leaves its slot and waits its turn again.
    Failed,
}

/// One node as the decision core sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeView {
    pub facts: NodeFacts,
    pub state: ProtocolState,
    /// Selected by `--node-selector`. A node outside the pool is acted on only while it holds
    /// one of this pool's slots.
    pub in_pool: bool,
    /// Selected by another pool too: granted by neither, counted by both while it is
    /// unavailable (in the pool's budget and its zone's).
    pub shared: bool,
    /// When this controller first saw the request (any monotonic unit); oldest goes first.
    pub requested_at: Option<u64>,
    /// A node whose drain failed is not granted again before this time.
    pub not_before: Option<u64>,
    /// The drain of the grant the node holds in the ledger (`NotStarted` without one).
    pub drain: DrainState,
    /// The value of its `--zone-label`; `None` without one (such nodes form one zone).
    pub zone: Option<String>,
    /// How its `reboot-disabled` label reads: any value but `false` opts it out, and an
    /// opted-out node is never granted.
    pub opt_out: OptOut,
    /// Since when (same unit as `now`) this controller has seen the node Ready without a
    /// break and after its last completed reboot (a short reboot may never show NotReady);
    /// `None` while it is not Ready.
    pub ready_since: Option<u64>,
    /// When (Unix milliseconds, as `clock`) the node was told to reboot: its
    /// `reboot-approved-at`, else the time of the grant it holds (a `reboot-now` set by a
    /// version that did not record it). `--reboot-timeout` counts from it.
    pub approved_at: Option<u64>,
    /// This copy is what a read of the API server returned since the last round, not the
    /// cache's: only such a copy may re-key a slot to the grant the node carries.
    pub fresh: bool,
    /// When (Unix milliseconds, as `clock`) the node was cordoned for the grant it holds in the
    /// ledger, as this replica knows it: its own claim, else when it first saw the node carry
    /// the grant (never before the cordon, whatever the clocks). `--drain-delay` counts from
    /// it; `None`: no wait.
    pub claimed_at: Option<u64>,
    /// When (as `clock`) the drain of that grant first ended drained; `--reboot-delay` counts
    /// from it. `None`: no wait.
    pub drained_at: Option<u64>,
}

impl NodeView {
    pub fn name(&self) -> &str {
        &self.facts.name
    }

    /// Whether the node counts against the pool's budgets: its own, or shared with another
    /// pool.
    pub fn counted(&self) -> bool {
        self.in_pool || self.shared
    }

    pub(crate) fn version(&self) -> Option<&str> {
        self.facts.resource_version.as_deref()
    }
}
