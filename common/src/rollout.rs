//! The record of the pool's rollout under way: which nodes are its canaries, how many have
//! completed, the size of its wave, and its failures. It lives on the ledger Lease beside the
//! slots and is written in the same compare-and-swap, so that every replica counts a
//! completion or a failure once, and a grant decided on an older record fails its write.
//! `kubectl reboot resume` forgives the failures that stopped the pool.

use serde::{Deserialize, Serialize};
use std::{
    collections::{BTreeMap, BTreeSet},
    fmt,
    str::FromStr,
};
use thiserror::Error;

/// The Lease annotation that holds the rollout under way as JSON; absent between rollouts.
pub const ROLLOUT_ANNOTATION: &str = "node-reboot-operator/rollout";

/// What went wrong with one node of the rollout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FailureKind {
    /// Its drain did not finish within `--drain-timeout`.
    DrainTimeout,
    /// Told to reboot, it was not back within `--reboot-timeout` (NotReady).
    RebootTimeout,
    /// Told to reboot, it stayed Ready without a new boot within `--reboot-timeout`.
    Unproven,
    /// It went NotReady during its soak after the reboot.
    NotReadyAfterReboot,
}

impl FailureKind {
    /// How a sentence names it.
    pub fn describe(self) -> &'static str {
        match self {
            Self::DrainTimeout => "its drain timed out",
            Self::RebootTimeout => "it was not back within --reboot-timeout",
            Self::Unproven => "its reboot was not proven within --reboot-timeout",
            Self::NotReadyAfterReboot => "it went NotReady after its reboot",
        }
    }

    /// The metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::DrainTimeout => "drain_timeout",
            Self::RebootTimeout => "reboot_timeout",
            Self::Unproven => "unproven",
            Self::NotReadyAfterReboot => "not_ready_after_reboot",
        }
    }
}

/// One node's failure in the rollout: the last of its grant.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Failure {
    /// The grant it failed under: the same failure seen again is not a new one.
    pub grant: String,
    pub kind: FailureKind,
    /// It was one of the rollout's canaries: one failure stops the pool.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub canary: bool,
    /// An administrator resumed the pool since (`kubectl reboot resume`): no longer counted.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub forgiven: bool,
    /// When it was counted, in Unix milliseconds: a RebootPool's `spec.resumedAt` forgives
    /// the failures counted before it. Absent in records written before it was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at: Option<u64>,
}

/// The rollout under way, as recorded on the ledger Lease.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RolloutRecord {
    /// Reboots completed in this rollout.
    #[serde(default)]
    pub completed: u32,
    /// The canaries holding a slot: granted while the canary stage ran.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub canaries: BTreeSet<String>,
    /// Canaries that completed and soaked: the stage is over once they are `--canary`.
    #[serde(default)]
    pub canaries_completed: u32,
    /// The size of the current wave (`--waves`); absent before the first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wave: Option<u32>,
    /// Nodes of the current wave that completed: at the wave's size it doubles.
    #[serde(default)]
    pub wave_completed: u32,
    /// Each failed node's last failure.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub failures: BTreeMap<String, Failure>,
}

impl RolloutRecord {
    /// The failures that count: not forgiven.
    pub fn counted_failures(&self) -> impl Iterator<Item = (&String, &Failure)> {
        self.failures.iter().filter(|(_, f)| !f.forgiven)
    }

    /// A counted failure of a canary, if any.
    pub fn failed_canary(&self) -> Option<(&String, &Failure)> {
        self.counted_failures().find(|(_, f)| f.canary)
    }

    /// The record after `kubectl reboot resume`: every failure forgiven, and the canary stage
    /// and the waves started over, since whatever failed may fail again.
    pub fn resumed(&self) -> Self {
        self.resumed_where(|_| true)
    }

    /// The record after a RebootPool's `spec.resumedAt` (Unix milliseconds): the failures
    /// counted before it (or at a time not recorded) forgiven, and the stage started over as
    /// [`Self::resumed`] does. `None` when no counted failure is that old: a resume that
    /// forgives nothing leaves the rollout as it is, and one already taken in changes nothing.
    pub fn resumed_at(&self, resumed_at: u64) -> Option<Self> {
        let before = |f: &Failure| f.at.is_none_or(|at| at < resumed_at);
        self.counted_failures()
            .any(|(_, f)| before(f))
            .then(|| self.resumed_where(before))
    }

    fn resumed_where(&self, forgive: impl Fn(&Failure) -> bool) -> Self {
        let mut next = self.clone();
        for failure in next.failures.values_mut() {
            if forgive(failure) {
                failure.forgiven = true;
            }
        }
        next.canaries_completed = 0;
        next.wave = None;
        next.wave_completed = 0;
        next
    }
}

/// The rollout annotation is there but is not a record (a hand edit, or another program).
#[derive(Debug, Error, PartialEq, Eq)]
#[error(
    "the rollout annotation {ROLLOUT_ANNOTATION} is not a rollout record ({0}); `kubectl reboot \
     resume` writes a good one on the flags' pool's Lease, and a RebootPool's is removed with \
     `kubectl annotate lease -n <namespace> node-reboot-pool-<name> {ROLLOUT_ANNOTATION}-`"
)]
pub struct RolloutFormatError(String);

/// The rollout in a ledger Lease's annotations: none between rollouts.
pub fn rollout_of(
    annotations: Option<&BTreeMap<String, String>>,
) -> Result<Option<RolloutRecord>, RolloutFormatError> {
    match annotations.and_then(|a| a.get(ROLLOUT_ANNOTATION)) {
        None => Ok(None),
        Some(json) => serde_json::from_str(json)
            .map(Some)
            .map_err(|e| RolloutFormatError(e.to_string())),
    }
}

/// The record as the annotation's value.
pub fn rollout_json(record: &RolloutRecord) -> String {
    serde_json::to_string(record).unwrap_or_else(|_| "{}".to_owned())
}

/// `--max-failures`: how many nodes of a rollout may fail before the pool stops, as a count
/// (`0` stops at the first) or a percentage of the rollout's nodes (`10%`, rounded down).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MaxFailures {
    Count(u32),
    /// Percent of the rollout's nodes, 0 to 100.
    Percent(u32),
}

/// A `--max-failures` value that is not one.
#[derive(Debug, Error, PartialEq, Eq)]
#[error(
    "invalid max-failures {value:?}: {why}; use a whole number of failed nodes (for example `0` \
     to stop at the first, or `2`) or a percentage of the rollout's nodes from 0% to 100% (for \
     example `10%`)"
)]
pub struct MaxFailuresError {
    value: String,
    why: &'static str,
}

impl FromStr for MaxFailures {
    type Err = MaxFailuresError;

    fn from_str(value: &str) -> Result<Self, Self::Err> {
        let fail = |why| MaxFailuresError {
            value: value.to_owned(),
            why,
        };
        match crate::budget::count_or_percent(value).map_err(fail)? {
            (101.., true) => Err(fail("a percentage cannot exceed 100%")),
            (n, true) => Ok(Self::Percent(n)),
            (n, false) => Ok(Self::Count(n)),
        }
    }
}

impl fmt::Display for MaxFailures {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Count(n) => write!(f, "{n}"),
            Self::Percent(p) => write!(f, "{p}%"),
        }
    }
}

impl MaxFailures {
    /// How many failed nodes a rollout of `nodes` nodes tolerates (a percentage rounds down).
    pub fn resolve(self, nodes: usize) -> usize {
        match self {
            Self::Count(n) => n as usize,
            Self::Percent(p) => nodes * p as usize / 100,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failure(canary: bool) -> Failure {
        Failure {
            grant: "ns/l/g1".into(),
            kind: FailureKind::RebootTimeout,
            canary,
            forgiven: false,
            at: Some(1_000),
        }
    }

    #[test]
    fn a_record_reads_back_what_was_written_and_absent_is_no_rollout() {
        let mut record = RolloutRecord {
            completed: 3,
            canaries: BTreeSet::from(["a".to_owned()]),
            wave: Some(4),
            ..RolloutRecord::default()
        };
        record.failures.insert("b".into(), failure(false));
        let annotations = BTreeMap::from([(ROLLOUT_ANNOTATION.to_owned(), rollout_json(&record))]);
        assert_eq!(rollout_of(Some(&annotations)), Ok(Some(record)));
        assert_eq!(rollout_of(None), Ok(None));
    }

    #[test]
    fn a_record_that_does_not_read_says_how_to_mend_it() {
        let annotations = BTreeMap::from([(ROLLOUT_ANNOTATION.to_owned(), "{".to_owned())]);
        let error = rollout_of(Some(&annotations)).unwrap_err().to_string();
        assert!(error.contains("kubectl reboot resume"), "{error}");
    }

    #[test]
    fn resume_forgives_every_failure_and_starts_the_canary_and_the_waves_over() {
        let mut record = RolloutRecord {
            completed: 5,
            canaries_completed: 1,
            wave: Some(4),
            wave_completed: 2,
            ..RolloutRecord::default()
        };
        record.failures.insert("b".into(), failure(true));
        assert!(record.failed_canary().is_some());
        let resumed = record.resumed();
        assert_eq!(resumed.counted_failures().count(), 0);
        assert_eq!(resumed.failed_canary(), None);
        assert_eq!(resumed.failures.len(), 1, "kept, as history");
        assert_eq!((resumed.canaries_completed, resumed.wave), (0, None));
        assert_eq!(resumed.completed, 5);
    }

    /// `spec.resumedAt` forgives the failures counted before it, and those of a record
    /// written before their time was kept; none that old, and nothing changes.
    #[test]
    fn resumed_at_forgives_only_the_failures_counted_before_it() {
        let mut record = RolloutRecord {
            wave: Some(4),
            ..RolloutRecord::default()
        };
        record.failures.insert("old".into(), failure(false)); // at 1000
        let mut late = failure(false);
        late.at = Some(5_000);
        record.failures.insert("late".into(), late);
        let mut unknown = failure(false);
        unknown.at = None;
        assert_eq!(record.resumed_at(1_000), None, "none before 1000");
        let resumed = record.resumed_at(2_000).expect("old is forgiven");
        let counted: Vec<&String> = resumed.counted_failures().map(|(n, _)| n).collect();
        assert_eq!(counted, ["late"]);
        assert_eq!(resumed.wave, None, "the waves start over");
        assert_eq!(resumed.resumed_at(2_000), None, "taken in once");
        let mut legacy = RolloutRecord::default();
        legacy.failures.insert("x".into(), unknown);
        assert!(legacy.resumed_at(1).is_some(), "a failure of unknown time");
    }

    #[test]
    fn max_failures_reads_a_count_or_a_percentage_and_refuses_the_rest() {
        assert_eq!("0".parse(), Ok(MaxFailures::Count(0)));
        assert_eq!(" 10% ".parse(), Ok(MaxFailures::Percent(10)));
        for bad in ["-1", "x", "101%", "%", ""] {
            let error = bad.parse::<MaxFailures>().unwrap_err().to_string();
            assert!(error.contains("for example"), "{bad}: {error}");
        }
        assert_eq!(MaxFailures::Percent(10).resolve(25), 2);
        assert_eq!(MaxFailures::Percent(10).resolve(9), 0, "rounds down");
        assert_eq!(MaxFailures::Count(2).resolve(1), 2);
    }
}
