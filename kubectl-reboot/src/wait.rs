//! Why a requested node waits, as `kubectl reboot status` names it, and the controller's
//! Events that tell it.

use common::ControllerReason;
use serde::Serialize;

/// Why a requested node waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum WaitReason {
    /// Every slot of `--max-unavailable` is taken (Event `Requested`).
    BudgetFull,
    /// Its zone's `--max-unavailable-per-zone` is taken (`ZoneBudgetFull`).
    ZoneBudgetFull,
    /// Zone budgets are on and the node has no zone label: not granted until it has one
    /// (`ZoneLabelMissing`).
    NoZoneLabel,
    /// Outside every `--reboot-window` (`OutsideWindow`).
    OutsideWindow,
    /// A `--reboot-blackout` holds new reboots (`Blackout`).
    Blackout,
    /// `reboot-paused=true` on the ledger Lease (`Paused`).
    Paused,
    /// Prometheus reports alerts that count (`AlertsFiring`).
    AlertsFiring,
    /// Prometheus cannot be asked (`PrometheusUnreachable`).
    PrometheusUnreachable,
    /// A `--blocking-pod-selector` pod runs on it or in the cluster (`BlockingPod`).
    BlockingPod,
    /// Labelled `reboot-disabled` with any value but `false`: never rebooted (`RebootDisabled`).
    OptedOut,
    /// A node of the pool is NotReady within `--min-ready-seconds` of its reboot
    /// (`NotReadyAfterReboot` on that node).
    NotReadyAfterReboot,
    /// A node of the pool was told to reboot and did not complete (new boot, Ready) within
    /// the controller's `--reboot-timeout` (`RebootOverdue` on that node).
    RebootOverdue,
    /// Its last drain timed out; tried again later (`DrainBlocked`).
    DrainTimedOut,
    /// No agent pod is Running and Ready on it: not cordoned while that lasts (`NoAgent`).
    NoAgent,
    /// A PodDisruptionBudget that allows no disruption covers one of its pods: not cordoned
    /// until the budget allows one (`DisruptionBudget`, which names the budget).
    DisruptionBudget,
    /// An autoscaler is removing it (`ToBeDeletedByClusterAutoscaler`, `karpenter.sh/disrupted`):
    /// not cordoned while the taint is there (`NodeBeingRemoved`).
    BeingRemoved,
    /// Its drains failed `--drain-attempts` times: not granted until an administrator removes
    /// its `reboot-drain-failures` (`SetAside`, which names the blocking pods).
    SetAside,
    /// More nodes of the pool are set aside than `--max-blocked-nodes` (`Stalled`).
    Stalled,
    /// Two or more RebootPools select it: none of them grants it until their selectors no
    /// longer overlap.
    Overlap,
}

impl WaitReason {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::BudgetFull => "budget full",
            Self::ZoneBudgetFull => "zone budget full",
            Self::NoZoneLabel => "no zone label",
            Self::OutsideWindow => "outside window",
            Self::Blackout => "blackout",
            Self::Paused => "paused",
            Self::AlertsFiring => "gate closed: alerts firing",
            Self::PrometheusUnreachable => "gate closed: Prometheus unreachable",
            Self::BlockingPod => "gate closed: blocking pod",
            Self::OptedOut => "opted out",
            Self::NotReadyAfterReboot => "a node is NotReady after its reboot",
            Self::RebootOverdue => "a node did not come back from its reboot",
            Self::DrainTimedOut => "drain timed out, retried later",
            Self::NoAgent => "no agent",
            Self::DisruptionBudget => "PodDisruptionBudget allows no disruption",
            Self::BeingRemoved => "an autoscaler is removing it",
            Self::SetAside => "set aside: its drains kept failing",
            Self::Stalled => "stalled: too many nodes set aside",
            Self::Overlap => "in two pools",
        }
    }

    /// The reason of one of the controller's Events, if it says why a request waits.
    pub fn of_event(reason: &str) -> Option<Self> {
        use ControllerReason as R;
        Some(match reason.parse().ok()? {
            R::Requested => Self::BudgetFull,
            R::ZoneBudgetFull => Self::ZoneBudgetFull,
            R::ZoneLabelMissing => Self::NoZoneLabel,
            R::OutsideWindow => Self::OutsideWindow,
            R::Blackout => Self::Blackout,
            R::Paused => Self::Paused,
            R::AlertsFiring => Self::AlertsFiring,
            R::PrometheusUnreachable => Self::PrometheusUnreachable,
            R::BlockingPod => Self::BlockingPod,
            R::RebootDisabled => Self::OptedOut,
            R::DrainBlocked => Self::DrainTimedOut,
            R::NoAgent => Self::NoAgent,
            R::DisruptionBudget => Self::DisruptionBudget,
            R::NodeBeingRemoved => Self::BeingRemoved,
            R::SetAside | R::UnexpectedDrainFailuresValue => Self::SetAside,
            R::Stalled => Self::Stalled,
            _ => return None,
        })
    }

    /// Holds the whole pool, not just one node.
    pub(crate) fn holds_pool(self) -> bool {
        matches!(
            self,
            Self::OutsideWindow
                | Self::Blackout
                | Self::Paused
                | Self::AlertsFiring
                | Self::PrometheusUnreachable
                | Self::NotReadyAfterReboot
                | Self::RebootOverdue
                | Self::Stalled
        )
    }
}
