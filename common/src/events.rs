//! The Events of the protocol: who reports them (`reportingController`) and their reasons.
//! The programs write them, `kubectl reboot` and the tests read them, and the documentation's
//! Events table names them: one spelling for all, here. A reason's string is its variant's
//! name, so a renamed variant is a changed protocol (the tests below pin every string).

use std::{fmt, str::FromStr};

/// The `reportingController` (and the field manager) of the controller's Events.
pub const CONTROLLER: &str = "reboot-controller";
/// The `reportingController` (and the field manager) of the agents' Events.
pub const AGENT: &str = "reboot-agent";

/// How the controller's note on a requested node that waits (or is not cordoned yet) begins;
/// `kubectl reboot status` shows what follows. One spelling for the controller, the plugin and
/// the tests, so that rewording a note never breaks what reads it.
pub const NOTE_REQUESTED: &str = "reboot requested; ";
/// How the controller's note on a requested node that is never rebooted (opted out) begins.
pub const NOTE_REQUESTED_BUT: &str = "reboot requested, but ";
/// How the controller's `Requested` note goes on, after [`NOTE_REQUESTED`], on a node that
/// the rollout's canary keeps out (`--canary`).
pub const WAITING_FOR_CANARY: &str = "waiting for the canary";
/// ... on a node that the current wave keeps out (`--waves`).
pub const WAITING_FOR_WAVE: &str = "waiting for the next wave";
/// ... on a node whose reboot would not end before the window closes (`--reboot-estimate`).
pub const WAITING_FOR_FIT: &str = "waiting for the next window";
/// How the controller's `Stalled` note goes on, after [`NOTE_REQUESTED`], before why.
pub const WAITING_STALLED: &str = "waiting: the pool is stalled, ";
/// How the controller's note on a granted node that a fence holds begins.
pub const NOTE_HELD: &str = "slot granted, held: ";

/// A reason string that neither program writes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{found:?} is not an Event reason of the {program}")]
pub struct UnknownReason {
    pub found: String,
    pub program: &'static str,
}

/// The reasons of one program's Events, for code that reads the Events of both.
pub trait Reason: Copy + fmt::Display + FromStr<Err = UnknownReason> {
    /// The `reportingController` of these Events.
    const COMPONENT: &'static str;

    /// The Event's `reason`.
    fn as_str(self) -> &'static str;
}

/// One enum of reasons: `as_str` (the Event's `reason`), `ALL`, `FromStr`, `Display` and
/// whether the Event is a Warning (else Normal).
macro_rules! reasons {
    (
        $(#[$meta:meta])*
        $name:ident, $program:literal, $component:path,
        warnings: [$($warning:ident),* $(,)?],
        $($(#[$vmeta:meta])* $variant:ident,)+
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $name {
            $($(#[$vmeta])* $variant,)+
        }

        impl $name {
            pub const ALL: &[Self] = &[$(Self::$variant,)+];

            pub const fn as_str(self) -> &'static str {
                match self {
                    $(Self::$variant => stringify!($variant),)+
                }
            }

            /// A Warning Event (something went wrong or holds the pool), else a Normal one.
            pub fn is_warning(self) -> bool {
                matches!(self, $(Self::$warning)|*)
            }
        }

        impl Reason for $name {
            const COMPONENT: &'static str = $component;

            fn as_str(self) -> &'static str {
                $name::as_str(self)
            }
        }

        impl FromStr for $name {
            type Err = UnknownReason;

            fn from_str(s: &str) -> Result<Self, Self::Err> {
                Self::ALL.iter().copied().find(|r| r.as_str() == s).ok_or_else(|| UnknownReason {
                    found: s.to_owned(),
                    program: $program,
                })
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

reasons! {
    /// The reasons of the controller's Events.
    ControllerReason, "controller", CONTROLLER,
    warnings: [
        DrainBlocked, RebootForced, InvalidRequest, LedgerDamaged, LedgerRecreated,
        UnknownFormat, UnexpectedPauseValue, NotReadyAfterReboot, RebootOverdue,
        ZoneLabelMissing, NoAgent, PrometheusUnreachable, LabelKept, UnexpectedOptOutValue,
        UnexpectedAbandonValue, PreflightUnanswered, GaveUp, InvalidSpec, PoolOverlap, SetAside,
        Stalled, UnexpectedDrainFailuresValue, RolloutFailure, UnexpectedRolloutValue,
    ],
    Requested,
    Draining,
    DrainBlocked,
    RebootApproved,
    Rebooted,
    Cancelled,
    InvalidRequest,
    /// The ledger Lease's slots annotation could not be read; rebuilt from the nodes.
    LedgerDamaged,
    /// The ledger Lease was deleted; recreated from the leader's last copy.
    LedgerRecreated,
    /// A node's protocol annotations or the ledger are in a format this build does not know
    /// (a newer operator wrote them): left alone until an operator that knows it takes over.
    UnknownFormat,
    /// A requested node waits for the next maintenance window.
    OutsideWindow,
    /// A requested node waits for a blackout (`--reboot-blackout`) to end.
    Blackout,
    /// A requested node waits while the pool is paused.
    Paused,
    /// The ledger's `reboot-paused` has a value other than `true` or `false`: read as paused.
    UnexpectedPauseValue,
    /// A requested node waits for a slot in its zone (`--max-unavailable-per-zone`).
    ZoneBudgetFull,
    /// A requested node has no zone label while zone budgets are on: not granted until it has.
    ZoneLabelMissing,
    /// A node of the pool carries another ledger's grant (relabelled from another pool
    /// mid-reboot): counted here, driven by that pool's controller only.
    ForeignGrant,
    /// A requested node is opted out (`reboot-disabled=true`): it is never granted.
    RebootDisabled,
    /// A requested node's `reboot-disabled` has a value other than `true` or `false` (an empty
    /// one, `True`, `yes`, `1`...): read as opted out, never granted.
    UnexpectedOptOutValue,
    /// A node's `reboot-abandon` reads as no (`false`, `no`, `0`): not a give-up.
    UnexpectedAbandonValue,
    /// A node went NotReady within `--min-ready-seconds` of its reboot; the pool holds.
    NotReadyAfterReboot,
    /// A node told to reboot was not completed (new boot, Ready) within `--reboot-timeout`;
    /// the pool holds.
    RebootOverdue,
    /// An administrator gave a node up (`kubectl reboot abandon`): its protocol is cleared,
    /// its slot released.
    RebootAbandoned,
    /// An administrator cleared a node's soak (removed `reboot-last-grant`); its slot is free.
    SoakCleared,
    /// `--dry-run`: what the controller would do about the node (nothing was written).
    DryRun,
    /// A requested node waits while alerts are active (`--prometheus-url`).
    AlertsFiring,
    /// A requested node waits because Prometheus cannot be asked (fail-safe).
    PrometheusUnreachable,
    /// A requested node waits while a blocking pod runs (`--blocking-pod-selector`).
    BlockingPod,
    /// A requested node has no Running and Ready agent pod (`--agent-selector`): not granted.
    NoAgent,
    /// The Eviction API would refuse to evict a pod of a requested node
    /// (`--check-disruption-budgets`): not granted; with `--force-reboot`, granted and its
    /// drain forced.
    DisruptionBudget,
    /// A requested node is being removed by an autoscaler (its `ToBeDeletedByClusterAutoscaler`
    /// or `karpenter.sh/disrupted` taint): not granted while the taint is there.
    NodeBeingRemoved,
    /// A drain timed out and the node is rebooted anyway with pods on it (`--force-reboot`).
    RebootForced,
    /// A label of a key `--pre-reboot-node-labels` or `--post-reboot-node-labels` sets was
    /// already on the node, somebody else's: left as it is, neither set nor removed.
    LabelKept,
    /// A pre-flight check has had no answer for `--preflight-timeout` (its watch cannot list):
    /// the requested node goes without it.
    PreflightUnanswered,
    /// `--give-up-after` passed since the node was told to reboot, and it has not completed:
    /// the controller gave it up, as `kubectl reboot abandon` does.
    GaveUp,
    /// A `RebootPool`'s spec has a value the controller cannot use: the pool grants nothing.
    InvalidSpec,
    /// A node is selected by two `RebootPool`s: neither grants it.
    PoolOverlap,
    /// A node's drains failed `--drain-attempts` times: set aside, not granted again until an
    /// administrator removes its `reboot-drain-failures`; the Event names the blocking pods.
    SetAside,
    /// More nodes of the pool are set aside than `--max-blocked-nodes`: no new reboot starts
    /// until an administrator looks at them.
    Stalled,
    /// A requested node's `reboot-drain-failures` is not a count (edited by hand): read as set
    /// aside.
    UnexpectedDrainFailuresValue,
    /// A node of the rollout failed (its drain timed out, its reboot is overdue or unproven,
    /// it is NotReady after it): counted against `--max-failures`; a canary's stalls the pool.
    RolloutFailure,
    /// The ledger Lease's rollout record cannot be read (edited by hand): the pool is read as
    /// stalled until `kubectl reboot resume`.
    UnexpectedRolloutValue,
    /// The canaries of a rollout completed and soaked: the rest of it starts.
    CanaryPassed,
}

reasons! {
    /// The reasons of the agent's Events.
    AgentReason, "agent", AGENT,
    warnings: [
        RebootRetried, RebootTimedOut, RebootFailed, SentinelPersists, RebootUnproven,
        UnknownFormat, UnexpectedOptOutValue, SentinelFailed,
    ],
    /// The agent is rebooting the node. (Its proof after the boot has no Event of the agent:
    /// the controller's `Rebooted` at completion tells of it.)
    Rebooting,
    /// The reboot had not happened (same boot id); the agent reboots again.
    RebootRetried,
    /// A triggered reboot did not happen within `--reboot-timeout`.
    RebootTimedOut,
    /// The reboot method itself failed.
    RebootFailed,
    /// The node's reboot sentinel asked for a reboot; the agent requested one.
    RebootRequired,
    /// The sentinel a reboot was requested for is still there after that reboot.
    SentinelPersists,
    /// `--max-unproven-reboots` reboots from the same boot id proved nothing: stopped.
    RebootUnproven,
    /// The node's protocol annotations are in a format this agent does not know.
    UnknownFormat,
    /// The sentinel asks for a reboot, but the node's `reboot-disabled` has a value other than
    /// `true` or `false`: read as opted out, no request.
    UnexpectedOptOutValue,
    /// The sentinel could not be looked at (a command that did not run to an answer, a file
    /// that cannot be read): whether the node needs a reboot is not known, none is requested.
    SentinelFailed,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The strings users and the documentation know: a rename of a variant must fail here.
    #[test]
    fn reasons_are_spelled_as_the_protocol_says() {
        let controller: Vec<_> = ControllerReason::ALL.iter().map(|r| r.as_str()).collect();
        assert_eq!(
            controller,
            [
                "Requested",
                "Draining",
                "DrainBlocked",
                "RebootApproved",
                "Rebooted",
                "Cancelled",
                "InvalidRequest",
                "LedgerDamaged",
                "LedgerRecreated",
                "UnknownFormat",
                "OutsideWindow",
                "Blackout",
                "Paused",
                "UnexpectedPauseValue",
                "ZoneBudgetFull",
                "ZoneLabelMissing",
                "ForeignGrant",
                "RebootDisabled",
                "UnexpectedOptOutValue",
                "UnexpectedAbandonValue",
                "NotReadyAfterReboot",
                "RebootOverdue",
                "RebootAbandoned",
                "SoakCleared",
                "DryRun",
                "AlertsFiring",
                "PrometheusUnreachable",
                "BlockingPod",
                "NoAgent",
                "DisruptionBudget",
                "NodeBeingRemoved",
                "RebootForced",
                "LabelKept",
                "PreflightUnanswered",
                "GaveUp",
                "InvalidSpec",
                "PoolOverlap",
                "SetAside",
                "Stalled",
                "UnexpectedDrainFailuresValue",
                "RolloutFailure",
                "UnexpectedRolloutValue",
                "CanaryPassed",
            ]
        );
        let agent: Vec<_> = AgentReason::ALL.iter().map(|r| r.as_str()).collect();
        assert_eq!(
            agent,
            [
                "Rebooting",
                "RebootRetried",
                "RebootTimedOut",
                "RebootFailed",
                "RebootRequired",
                "SentinelPersists",
                "RebootUnproven",
                "UnknownFormat",
                "UnexpectedOptOutValue",
                "SentinelFailed",
            ]
        );
    }

    #[test]
    fn every_reason_parses_back() {
        for r in ControllerReason::ALL {
            assert_eq!(r.as_str().parse::<ControllerReason>(), Ok(*r));
        }
        for r in AgentReason::ALL {
            assert_eq!(r.to_string().parse::<AgentReason>(), Ok(*r));
        }
    }

    #[test]
    fn each_program_reports_its_own() {
        assert_eq!(<ControllerReason as Reason>::COMPONENT, "reboot-controller");
        assert_eq!(<AgentReason as Reason>::COMPONENT, "reboot-agent");
        assert_eq!(Reason::as_str(AgentReason::RebootFailed), "RebootFailed");
    }

    #[test]
    fn an_unknown_reason_is_named() {
        let error = "rebooted".parse::<ControllerReason>().unwrap_err();
        assert_eq!(
            error.to_string(),
            "\"rebooted\" is not an Event reason of the controller"
        );
        assert!("Rebooted".parse::<AgentReason>().is_err());
    }

    #[test]
    fn warnings_are_the_ones_that_hold_or_fail() {
        let warnings: Vec<_> = ControllerReason::ALL
            .iter()
            .filter(|r| r.is_warning())
            .map(|r| r.as_str())
            .collect();
        assert_eq!(
            warnings,
            [
                "DrainBlocked",
                "InvalidRequest",
                "LedgerDamaged",
                "LedgerRecreated",
                "UnknownFormat",
                "UnexpectedPauseValue",
                "ZoneLabelMissing",
                "UnexpectedOptOutValue",
                "UnexpectedAbandonValue",
                "NotReadyAfterReboot",
                "RebootOverdue",
                "PrometheusUnreachable",
                "NoAgent",
                "RebootForced",
                "LabelKept",
                "PreflightUnanswered",
                "GaveUp",
                "InvalidSpec",
                "PoolOverlap",
                "SetAside",
                "Stalled",
                "UnexpectedDrainFailuresValue",
                "RolloutFailure",
                "UnexpectedRolloutValue",
            ]
        );
        assert!(!AgentReason::Rebooting.is_warning());
        assert!(!AgentReason::RebootRequired.is_warning());
        assert!(AgentReason::RebootFailed.is_warning());
    }
}
