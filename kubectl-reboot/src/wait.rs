//! Why a requested node waits, as `kubectl reboot status` names it, and the controller's
//! Events that tell it.

pub use common::events::{WAITING_FOR_CANARY, WAITING_FOR_FIT, WAITING_FOR_WAVE};
use common::{
    ControllerReason,
    events::{NOTE_REQUESTED, NOTE_REQUESTED_BUT, WAITING_STALLED as STALLED},
};
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
    /// The pool is stalled (`Stalled`): more nodes set aside than `--max-blocked-nodes`, a
    /// failed canary, more failures than `--max-failures`, or a rollout record that does not
    /// read; nothing new starts until an administrator acts (`kubectl reboot resume`).
    Stalled,
    /// The first `--canary` nodes of the rollout go alone: the rest wait until they have
    /// completed and soaked (`Requested`, its note "waiting for the canary").
    AfterCanary,
    /// The current wave (`--waves`) is full: the next, twice its size, starts once it has
    /// completed (`Requested`, its note "waiting for the next wave").
    NextWave,
    /// A reboot would not end before the window closes (`--reboot-estimate`): it waits for
    /// the next window (`Requested`, its note "waiting for the next window").
    WindowFit,
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
            Self::Stalled => "stalled",
            Self::AfterCanary => WAITING_FOR_CANARY,
            Self::NextWave => WAITING_FOR_WAVE,
            Self::WindowFit => WAITING_FOR_FIT,
            Self::Overlap => "in two pools",
        }
    }

    /// The reason of one of the controller's Events (its `reason`, and its `note` where one
    /// reason says several things), if it says why a request waits.
    pub fn of_event(reason: &str, note: &str) -> Option<Self> {
        use ControllerReason as R;
        Some(match reason.parse().ok()? {
            R::Requested if short_note(note).starts_with(WAITING_FOR_CANARY) => Self::AfterCanary,
            R::Requested if short_note(note).starts_with(WAITING_FOR_WAVE) => Self::NextWave,
            R::Requested if short_note(note).starts_with(WAITING_FOR_FIT) => Self::WindowFit,
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

    /// What a node waiting for this reason shows, from the controller's `note`: the note
    /// without the words every one of them starts with, after the reason unless it says it
    /// already ("waiting for the canary: ..."); a stall says why it is ("stalled: the canary
    /// n1 failed: ...").
    pub fn detail(self, note: &str) -> String {
        let note = short_note(note);
        match self {
            Self::Stalled => match note.strip_prefix(STALLED) {
                Some(why) => format!("{}: {why}", self.as_str()),
                None if note.is_empty() => self.as_str().to_owned(),
                None => format!("{}: {note}", self.as_str()),
            },
            Self::AfterCanary | Self::NextWave | Self::WindowFit
                if note.starts_with(self.as_str()) =>
            {
                note.to_owned()
            }
            // "reboot requested, but set aside: its drain failed 3 time(s), ..."
            Self::SetAside if note.starts_with("set aside") => note.to_owned(),
            _ => format!("{}: {note}", self.as_str()),
        }
    }

    /// Holds the whole pool, not just one node.
    pub(crate) fn holds_pool(self) -> bool {
        matches!(
            self,
            Self::OutsideWindow
                | Self::WindowFit
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

/// A controller's waiting note without the words every one of them starts with.
pub(crate) fn short_note(message: &str) -> &str {
    let message = message.trim();
    message
        .strip_prefix(NOTE_REQUESTED)
        .or_else(|| message.strip_prefix(NOTE_REQUESTED_BUT))
        .unwrap_or(message)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The controller's notes, as it writes them (controller/src/shell/rollout_rules.rs and,
    /// before the rollout rules, announce.rs).
    const SET_ASIDE_STALL: &str = "reboot requested; waiting: the pool is stalled, 2 node(s) \
        are set aside after failed drains (a, b), more than --max-blocked-nodes 1; no new reboot \
        starts until an administrator fixes what blocks their drains and removes their \
        reboot-drain-failures, or gives them up";
    const CANARY_STALL: &str = "reboot requested; waiting: the pool is stalled, the canary n1 \
        failed: its drain timed out; no new reboot starts until an administrator has looked at \
        the failed nodes (give up or mend each) and runs `kubectl reboot resume --pool gpu`. \
        Reboots under way finish";
    const CANARY_WAIT: &str = "reboot requested; waiting for the canary: the first 1 node(s) of \
        the rollout go alone until they have completed and soaked (--canary, --canary-soak)";
    const WAVE_WAIT: &str = "reboot requested; waiting for the next wave: this one holds 2 \
        node(s) and the next, twice as many, starts once it has completed (--waves)";
    const SLOT_WAIT: &str = "reboot requested; waiting for a slot (max-unavailable 1 of 4 nodes)";
    const FIT_WAIT: &str = "reboot requested; waiting for the next window: a reboot takes about \
        20 min (--reboot-estimate) and the window closes in 12 min, so one started now would not \
        end in it";

    #[test]
    fn each_event_row_reads_as_its_reason() {
        let rows = [
            (
                "SetAside",
                "pods default/web-0 blocked its drains",
                Some(WaitReason::SetAside),
            ),
            (
                "UnexpectedDrainFailuresValue",
                "x",
                Some(WaitReason::SetAside),
            ),
            ("Stalled", SET_ASIDE_STALL, Some(WaitReason::Stalled)),
            ("Stalled", CANARY_STALL, Some(WaitReason::Stalled)),
            ("Requested", CANARY_WAIT, Some(WaitReason::AfterCanary)),
            ("Requested", WAVE_WAIT, Some(WaitReason::NextWave)),
            ("Requested", FIT_WAIT, Some(WaitReason::WindowFit)),
            ("Requested", SLOT_WAIT, Some(WaitReason::BudgetFull)),
            // Only the note's start says the stage: words further on do not.
            (
                "Requested",
                "reboot requested; waiting for a slot (not waiting for the canary)",
                Some(WaitReason::BudgetFull),
            ),
            ("Requested", "", Some(WaitReason::BudgetFull)),
            // A Warning about a failed node is no reason to wait; nor is an unknown reason.
            ("RolloutFailure", "counted as a failure", None),
            ("CanaryPassed", "the canary stage passed", None),
            ("Whatever", CANARY_WAIT, None),
        ];
        for (reason, note, expected) in rows {
            assert_eq!(
                WaitReason::of_event(reason, note),
                expected,
                "{reason}: {note}"
            );
        }
    }

    #[test]
    fn a_stall_says_why_from_its_note() {
        assert_eq!(
            WaitReason::Stalled.detail(CANARY_STALL),
            "stalled: the canary n1 failed: its drain timed out; no new reboot starts until an \
             administrator has looked at the failed nodes (give up or mend each) and runs \
             `kubectl reboot resume --pool gpu`. Reboots under way finish"
        );
        let set_aside = WaitReason::Stalled.detail(SET_ASIDE_STALL);
        assert!(
            set_aside.starts_with("stalled: 2 node(s) are set aside after failed drains (a, b)"),
            "{set_aside}"
        );
        // A note in another shape is shown whole; none at all, the reason alone.
        assert_eq!(
            WaitReason::Stalled.detail("reboot requested; the pool stopped"),
            "stalled: the pool stopped"
        );
        assert_eq!(WaitReason::Stalled.detail(""), "stalled");
    }

    #[test]
    fn a_stage_wait_is_said_once_and_other_reasons_keep_their_name_first() {
        assert_eq!(
            WaitReason::AfterCanary.detail(CANARY_WAIT),
            "waiting for the canary: the first 1 node(s) of the rollout go alone until they \
             have completed and soaked (--canary, --canary-soak)"
        );
        assert!(
            WaitReason::NextWave
                .detail(WAVE_WAIT)
                .starts_with("waiting for the next wave: this one holds 2 node(s)")
        );
        assert_eq!(
            WaitReason::BudgetFull.detail(SLOT_WAIT),
            "budget full: waiting for a slot (max-unavailable 1 of 4 nodes)"
        );
        assert_eq!(
            WaitReason::SetAside.detail(
                "reboot requested, but set aside: its drain failed 3 time(s) (--drain-attempts \
                 3). It keeps its request"
            ),
            "set aside: its drain failed 3 time(s) (--drain-attempts 3). It keeps its request"
        );
        assert_eq!(
            WaitReason::SetAside.detail("reboot requested; x is not a count"),
            "set aside: its drains kept failing: x is not a count"
        );
    }

    #[test]
    fn a_stall_holds_the_pool_and_a_stage_does_not() {
        assert!(WaitReason::Stalled.holds_pool());
        assert!(!WaitReason::AfterCanary.holds_pool());
        assert!(!WaitReason::NextWave.holds_pool());
    }
}
