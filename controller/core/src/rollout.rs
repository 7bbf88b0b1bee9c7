//! The rules a rollout protects itself by (`--canary`, `--canary-soak`, `--waves`,
//! `--max-failures`), applied to its record ([`common::rollout::RolloutRecord`]). Pure: the
//! round hands in what it saw (completions, failures, grants) and gets back the record to
//! write, the room the rollout leaves and whether it is stalled.

use common::rollout::{Failure, FailureKind, MaxFailures, RolloutRecord};
use std::collections::BTreeSet;

/// A pool's rollout rules. All off by default: no record is kept then.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RolloutRules {
    /// `--canary`: the first this many nodes of a rollout go alone; the rest wait until they
    /// have completed and soaked. 0: no canary.
    pub canary: u32,
    /// `--canary-soak`, in the unit of the round's `now`: how long a canary is Ready after its
    /// reboot before it completes (its slot held meanwhile, as `--min-ready-seconds` does).
    pub canary_soak: u64,
    /// `--waves`: the nodes in the protocol start at 1 (or twice the canary) and double after
    /// each wave completes; a failure drops them back to 1.
    pub waves: bool,
    /// `--max-failures`: more failed nodes than this stop the pool. `None`: no limit.
    pub max_failures: Option<MaxFailures>,
    /// A RebootPool's `spec.resumedAt`, in Unix milliseconds: the failures counted before it
    /// are forgiven, as `kubectl reboot resume` forgives them on the flags' pool's Lease.
    pub resumed_at: Option<u64>,
}

/// Why nothing new is granted in the pool until an administrator acts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stall {
    /// More nodes are set aside after failed drains than `--max-blocked-nodes`.
    SetAside { count: usize, most: usize },
    /// A canary failed.
    CanaryFailed { node: String, kind: FailureKind },
    /// More nodes of the rollout failed than `--max-failures` allows.
    TooManyFailures { failed: usize, most: usize },
    /// The rollout record cannot be read (edited by hand): read as stalled, which does less.
    Unreadable(String),
}

impl Stall {
    /// The sentence the Events and the status say.
    pub fn describe(&self) -> String {
        match self {
            Self::SetAside { count, most } => format!(
                "{count} node(s) are set aside after failed drains, more than --max-blocked-nodes \
                 {most}"
            ),
            Self::CanaryFailed { node, kind } => {
                format!("the canary {node} failed: {}", kind.describe())
            }
            Self::TooManyFailures { failed, most } => format!(
                "{failed} node(s) of the rollout failed, more than --max-failures allows ({most})"
            ),
            Self::Unreadable(why) => why.clone(),
        }
    }

    /// The short reason, for metrics and the plugin.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::SetAside { .. } => "set_aside",
            Self::CanaryFailed { .. } => "canary_failed",
            Self::TooManyFailures { .. } => "too_many_failures",
            Self::Unreadable(_) => "unreadable",
        }
    }
}

/// What limits how many nodes the rollout has in the protocol now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// The canaries go alone: at most this many nodes hold a slot.
    Canary { size: u32 },
    /// A wave of this size (`--waves`).
    Wave { size: u32 },
}

impl RolloutRules {
    /// Whether any rule is on: a record is kept only then.
    pub fn is_on(&self) -> bool {
        self.canary > 0 || self.waves || self.max_failures.is_some()
    }

    /// The soak a completed node needs before its slot is released: a canary's is at least
    /// `--canary-soak`.
    pub fn soak(&self, record: Option<&RolloutRecord>, node: &str, min_ready: u64) -> u64 {
        match record {
            Some(r) if r.canaries.contains(node) => min_ready.max(self.canary_soak),
            _ => min_ready,
        }
    }

    /// Takes in the failures seen this round (node, grant, kind): a failure of a grant already
    /// recorded is not new. Returns the new ones.
    /// `clock` (Unix milliseconds) is recorded as when each was counted.
    pub fn failed(
        &self,
        record: &mut RolloutRecord,
        seen: &[(String, String, FailureKind)],
        clock: u64,
    ) -> Vec<(String, FailureKind)> {
        let mut new = Vec::new();
        for (node, grant, kind) in seen {
            if record.failures.get(node).is_some_and(|f| &f.grant == grant) {
                continue;
            }
            let canary = record.canaries.contains(node);
            let failure = Failure {
                grant: grant.clone(),
                kind: *kind,
                canary,
                forgiven: false,
                at: Some(clock),
            };
            record.failures.insert(node.clone(), failure);
            if self.waves {
                record.wave = Some(1);
                record.wave_completed = 0;
            }
            new.push((node.clone(), *kind));
        }
        new
    }

    /// Takes in the slots released this round: `completed` says which completed their reboot.
    pub fn released(&self, record: &mut RolloutRecord, node: &str, completed: bool) {
        let canary = record.canaries.remove(node);
        if !completed {
            return;
        }
        record.completed = record.completed.saturating_add(1);
        if canary && record.canaries_completed < self.canary {
            record.canaries_completed += 1;
            if record.canaries_completed == self.canary && self.waves {
                record.wave = Some(self.canary.saturating_mul(2));
                record.wave_completed = 0;
            }
        } else if self.waves {
            let size = record.wave.unwrap_or(1);
            record.wave_completed += 1;
            if record.wave_completed >= size {
                record.wave = Some(size.saturating_mul(2));
                record.wave_completed = 0;
            }
        }
    }

    /// Takes in the nodes granted this round: in the canary stage, they are its canaries.
    pub fn granted<'n>(&self, record: &mut RolloutRecord, nodes: impl Iterator<Item = &'n str>) {
        if self.canary_stage(record) {
            record.canaries.extend(nodes.map(str::to_owned));
        }
    }

    fn canary_stage(&self, record: &RolloutRecord) -> bool {
        record.canaries_completed < self.canary
    }

    /// How many nodes of the pool may hold a slot now, and by which stage; `None`: as many as
    /// the budgets allow.
    pub fn room(&self, record: &RolloutRecord) -> Option<(Stage, usize)> {
        if self.canary_stage(record) {
            let left = self.canary - record.canaries_completed;
            return Some((Stage::Canary { size: self.canary }, left as usize));
        }
        if self.waves {
            let size = record.wave.unwrap_or(1);
            let left = size.saturating_sub(record.wave_completed);
            return Some((Stage::Wave { size }, left as usize));
        }
        None
    }

    /// Whether the rollout is stalled by its failures: a failed canary, or more failed nodes
    /// than `--max-failures` of `nodes` (the rollout's nodes, for a percentage).
    pub fn stall(&self, record: &RolloutRecord, nodes: usize) -> Option<Stall> {
        if let Some((node, failure)) = record.failed_canary() {
            return Some(Stall::CanaryFailed {
                node: node.clone(),
                kind: failure.kind,
            });
        }
        let most = self.max_failures?.resolve(nodes);
        let failed = record.counted_failures().count();
        (failed > most).then_some(Stall::TooManyFailures { failed, most })
    }

    /// The rollout's nodes, for a percentage: completed, failed, holding a slot or waiting.
    pub fn rollout_nodes<'n>(
        record: &'n RolloutRecord,
        in_protocol: impl Iterator<Item = &'n str>,
    ) -> usize {
        let mut nodes: BTreeSet<&str> = record.failures.keys().map(String::as_str).collect();
        nodes.extend(in_protocol);
        record.completed as usize + nodes.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GRANT: &str = "ns/l/g1";

    fn seen(node: &str, grant: &str, kind: FailureKind) -> (String, String, FailureKind) {
        (node.into(), grant.into(), kind)
    }

    #[test]
    fn the_canaries_go_alone_and_the_stage_ends_once_they_completed() {
        let rules = RolloutRules {
            canary: 2,
            ..RolloutRules::default()
        };
        let mut record = RolloutRecord::default();
        assert_eq!(rules.room(&record), Some((Stage::Canary { size: 2 }, 2)));
        rules.granted(&mut record, ["a", "b"].into_iter());
        rules.released(&mut record, "a", true);
        assert_eq!(rules.room(&record), Some((Stage::Canary { size: 2 }, 1)));
        // A canary given back without its reboot frees its place for another.
        rules.released(&mut record, "b", false);
        assert!(record.canaries.is_empty());
        rules.granted(&mut record, ["c"].into_iter());
        rules.released(&mut record, "c", true);
        assert_eq!(rules.room(&record), None, "the stage is over");
        assert_eq!(record.completed, 2);
    }

    #[test]
    fn a_canary_soaks_at_least_the_canary_soak() {
        let rules = RolloutRules {
            canary: 1,
            canary_soak: 600,
            ..RolloutRules::default()
        };
        let mut record = RolloutRecord::default();
        rules.granted(&mut record, ["a"].into_iter());
        assert_eq!(rules.soak(Some(&record), "a", 30), 600);
        assert_eq!(rules.soak(Some(&record), "b", 30), 30);
        assert_eq!(rules.soak(None, "a", 30), 30);
    }

    #[test]
    fn waves_double_after_each_and_a_failure_drops_them_back_to_one() {
        let rules = RolloutRules {
            waves: true,
            ..RolloutRules::default()
        };
        let mut record = RolloutRecord::default();
        assert_eq!(rules.room(&record), Some((Stage::Wave { size: 1 }, 1)));
        rules.released(&mut record, "a", true);
        assert_eq!(rules.room(&record), Some((Stage::Wave { size: 2 }, 2)));
        rules.released(&mut record, "b", true);
        assert_eq!(rules.room(&record), Some((Stage::Wave { size: 2 }, 1)));
        rules.released(&mut record, "c", true);
        assert_eq!(rules.room(&record), Some((Stage::Wave { size: 4 }, 4)));
        rules.failed(
            &mut record,
            &[seen("d", GRANT, FailureKind::DrainTimeout)],
            0,
        );
        assert_eq!(rules.room(&record), Some((Stage::Wave { size: 1 }, 1)));
    }

    #[test]
    fn waves_after_a_canary_start_at_twice_its_size() {
        let rules = RolloutRules {
            canary: 2,
            waves: true,
            ..RolloutRules::default()
        };
        let mut record = RolloutRecord::default();
        rules.granted(&mut record, ["a", "b"].into_iter());
        rules.released(&mut record, "a", true);
        rules.released(&mut record, "b", true);
        assert_eq!(rules.room(&record), Some((Stage::Wave { size: 4 }, 4)));
    }

    #[test]
    fn a_failure_is_counted_once_per_grant_and_a_canarys_stalls_the_pool() {
        let rules = RolloutRules {
            canary: 1,
            ..RolloutRules::default()
        };
        let mut record = RolloutRecord::default();
        rules.granted(&mut record, ["a"].into_iter());
        let failure = [seen("a", GRANT, FailureKind::NotReadyAfterReboot)];
        assert_eq!(rules.failed(&mut record, &failure, 0).len(), 1);
        assert!(
            rules.failed(&mut record, &failure, 0).is_empty(),
            "seen before"
        );
        assert_eq!(
            rules.stall(&record, 10),
            Some(Stall::CanaryFailed {
                node: "a".into(),
                kind: FailureKind::NotReadyAfterReboot
            })
        );
        // Resumed, the same failure stays forgiven; the next grant's counts again.
        record = record.resumed();
        assert!(rules.failed(&mut record, &failure, 0).is_empty());
        assert_eq!(rules.stall(&record, 10), None);
        let again = [seen("a", "ns/l/g2", FailureKind::RebootTimeout)];
        assert_eq!(rules.failed(&mut record, &again, 0).len(), 1);
    }

    #[test]
    fn more_failures_than_the_budget_stall_the_pool() {
        let rules = RolloutRules {
            max_failures: Some(MaxFailures::Count(1)),
            ..RolloutRules::default()
        };
        let mut record = RolloutRecord::default();
        rules.failed(
            &mut record,
            &[seen("a", GRANT, FailureKind::DrainTimeout)],
            0,
        );
        assert_eq!(rules.stall(&record, 10), None, "one is allowed");
        rules.failed(&mut record, &[seen("b", GRANT, FailureKind::Unproven)], 0);
        assert_eq!(
            rules.stall(&record, 10),
            Some(Stall::TooManyFailures { failed: 2, most: 1 })
        );
        let percent = RolloutRules {
            max_failures: Some(MaxFailures::Percent(10)),
            ..RolloutRules::default()
        };
        assert_eq!(percent.stall(&record, 30), None, "2 of 30 is within 10%");
        assert!(percent.stall(&record, 19).is_some(), "10% of 19 is 1");
    }

    #[test]
    fn the_rollouts_nodes_count_each_node_once() {
        let mut record = RolloutRecord {
            completed: 3,
            ..RolloutRecord::default()
        };
        let rules = RolloutRules::default();
        rules.failed(
            &mut record,
            &[seen("a", GRANT, FailureKind::DrainTimeout)],
            0,
        );
        assert_eq!(
            RolloutRules::rollout_nodes(&record, ["a", "b"].into_iter()),
            5
        );
    }
}
