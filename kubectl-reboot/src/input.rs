//! What `kubectl reboot status`, `plan` and the estimate are computed from: the pool as read
//! from the API server (the nodes, the Events about them, the ledger, the budget), as plain
//! data.

use common::{NodeFacts, ledger::Slot};
use k8s_openapi::jiff::Timestamp;
use std::collections::BTreeMap;

/// One Event about a node, as the controller wrote it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeEvent {
    pub reason: String,
    /// Its reporting component: `reboot-controller` (only the controller's Events are read).
    pub component: String,
    pub message: String,
    /// When it was last observed (the series' last time when the Event repeated).
    pub time: Timestamp,
}

/// One node as read from the API server.
#[derive(Debug, Clone)]
pub struct NodeInput {
    pub facts: NodeFacts,
    pub labels: BTreeMap<String, String>,
    /// Selected by `--node-selector` (a node outside the pool shows only while it holds a slot).
    pub in_pool: bool,
    pub events: Vec<NodeEvent>,
    /// The pods a drain still has to evict (`namespace/name`), read for draining nodes only.
    pub pods_left: Option<Vec<String>>,
    /// The RebootPools that select it, when more than one does: no pool grants it.
    pub overlap: Vec<String>,
}

/// The slot ledger Lease as read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LedgerInput {
    /// `namespace/name`.
    pub name: String,
    /// Its resourceVersion.
    pub version: Option<String>,
    pub found: bool,
    pub slots: BTreeMap<String, Slot>,
    pub paused: bool,
    /// Why its slots annotation could not be read.
    pub damage: Option<String>,
    /// The rollout under way (`node-reboot-operator/rollout`), when the controller keeps one
    /// (a rollout rule is on); `None` between rollouts.
    pub rollout: Option<common::rollout::RolloutRecord>,
    /// Why the rollout annotation could not be read (edited by hand): the controller reads
    /// the pool as stalled until `kubectl reboot resume` writes a good one (a RebootPool's is
    /// removed by hand).
    pub rollout_unreadable: Option<String>,
}

/// What is known of the budget besides the ledger.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BudgetInput {
    /// Read from the controller's metrics.
    pub metrics: Option<crate::metrics::Reading>,
    /// Where the metrics were looked for, and why they could not be read, if so.
    pub metrics_url: Option<String>,
    pub metrics_error: Option<String>,
    /// `--max-unavailable` given to the plugin.
    pub flag: Option<common::MaxUnavailable>,
}

/// A RebootPool's budget as its spec gives it: `maxUnavailable` (default 1) and
/// `maxUnavailablePerZone`, each read or refused with why.
#[derive(Debug, Clone, PartialEq)]
pub struct SpecBudget {
    pub max_unavailable: Result<common::MaxUnavailable, String>,
    pub per_zone: Option<Result<common::MaxUnavailable, String>>,
    /// `zoneLabel`, or its default.
    pub zone_label: String,
}

/// Everything a status is computed from.
#[derive(Debug, Clone)]
pub struct PoolInput {
    /// The RebootPool's name; `None` for the flags' pool.
    pub name: Option<String>,
    /// `--node-selector`, or the RebootPool's `nodeSelector` as a label selector string.
    pub selector: String,
    /// The RebootPool's spec: its budget, windows and the rest; `None` for the flags' pool.
    pub spec: Option<common::pool::RebootPoolSpec>,
    pub nodes: Vec<NodeInput>,
    pub ledger: LedgerInput,
    pub budget: BudgetInput,
    /// Things that could not be read (Events, pods): the status is less complete.
    pub warnings: Vec<String>,
    /// The controller's `--reboot-window`s, as given to the plugin (none: always).
    pub windows: controller_core::window::Windows,
}

/// What `status` shows: every pool, or (`--pool`) one RebootPool.
#[derive(Debug, Clone)]
pub enum Pools {
    /// The flags' pool (the nodes no RebootPool selects) and each RebootPool, by name.
    All {
        flags: PoolInput,
        pools: Vec<PoolInput>,
    },
    One(PoolInput),
}
