//! What a `RebootPool`'s status shows, built from what its last round saw. Pure: the writer
//! (`pools::status_writer` in `run`) patches it when it changes, at most once a second.

use crate::{
    cache::pool::PoolSelector,
    metrics::{NODE_STATES, PoolSummary},
    shell::PoolFacts,
};
use common::pool::{OverlappingNode, RebootPoolStatus, condition, reason};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use std::collections::BTreeMap;

/// At most this many nodes are named in `status.nodesInProtocol`.
const NAMED: usize = 50;

/// What one running pool last saw.
#[derive(Debug, Clone, Default)]
pub struct Seen {
    pub summary: PoolSummary,
    pub budget: usize,
    /// The budget as given, when it is not a count (`25%`), and the zones' (`1/zone`).
    pub budget_given: Option<String>,
    pub zone_budget: Option<String>,
    pub facts: PoolFacts,
    /// The pool's nodes in the protocol, by name.
    pub in_protocol: Vec<String>,
    /// The last node completed, and when.
    pub last_completed: Option<(String, Time)>,
}

/// Pure: the status of a running pool.
pub fn running(
    generation: Option<i64>,
    seen: &Seen,
    overlapping: Vec<OverlappingNode>,
    paused: bool,
    deleting: bool,
    previous: &[Condition],
    now: &Time,
) -> RebootPoolStatus {
    let count = |state: &str| {
        NODE_STATES
            .iter()
            .position(|s| *s == state)
            .map_or(0, |i| seen.summary.by_state[i])
    };
    let rebooting = i64::try_from(seen.summary.slots_in_use).unwrap_or(i64::MAX);
    let waiting = count("requested");
    let held = if deleting && paused {
        // A pause holds the granted nodes where they stand, so the deletion cannot end: say
        // how to let it.
        Some(
            "the pool is being deleted while paused: its granted nodes are held where they \
             stand and its finalizer stays until spec.paused is false"
                .into(),
        )
    } else if deleting {
        Some("the pool is being deleted: its reboots under way finish, no new one starts".into())
    } else if paused {
        Some("the pool is paused (spec.paused)".into())
    } else if !seen.facts.overdue.is_empty() {
        Some(format!(
            "the reboot of {} is overdue",
            seen.facts.overdue.join(", ")
        ))
    } else {
        seen.facts.held.clone()
    };
    let overdue = !seen.facts.overdue.is_empty();
    let stalled = seen.facts.stalled.is_some();
    let busy = rebooting > 0 || waiting > 0;
    let mut conditions = vec![
        condition_of(
            condition::READY,
            !overdue,
            if overdue {
                reason::OVERDUE
            } else {
                reason::IDLE
            },
            "the pool's policy is in force".into(),
        ),
        condition_of(
            condition::RECONCILING,
            busy && !overdue,
            if busy {
                reason::REBOOTING
            } else {
                reason::IDLE
            },
            format!("{rebooting} node(s) rebooting, {waiting} waiting"),
        ),
        condition_of(
            condition::STALLED,
            overdue || stalled,
            if overdue {
                reason::OVERDUE
            } else if stalled {
                reason::ROLLOUT_STALLED
            } else {
                reason::IDLE
            },
            held.clone()
                .unwrap_or_else(|| "nothing holds the pool".into()),
        ),
        condition_of(
            condition::NODE_OVERDUE,
            overdue,
            reason::OVERDUE,
            if overdue {
                format!("overdue: {}", seen.facts.overdue.join(", "))
            } else {
                "no reboot is overdue".into()
            },
        ),
        condition_of(
            condition::OVERLAP,
            !overlapping.is_empty(),
            reason::OVERLAP,
            overlap_message(&overlapping),
        ),
    ];
    if deleting {
        conditions[0] = condition_of(
            condition::READY,
            false,
            reason::DELETING,
            held.clone().unwrap_or_default(),
        );
    }
    let in_protocol = seen.in_protocol.len();
    RebootPoolStatus {
        observed_generation: generation,
        nodes: i64::try_from(seen.summary.nodes + overlapping.len()).unwrap_or(i64::MAX),
        budget: Some(budget_text(seen)),
        unavailable: i64::try_from(seen.summary.unavailable).unwrap_or(i64::MAX),
        rebooting,
        waiting,
        held: held.or_else(|| {
            (!overlapping.is_empty())
                .then(|| format!("{} node(s) in another pool too", overlapping.len()))
        }),
        nodes_in_protocol: seen.in_protocol.iter().take(NAMED).cloned().collect(),
        and_more: (in_protocol > NAMED).then(|| i64::try_from(in_protocol - NAMED).unwrap_or(0)),
        overlapping,
        last_completed: seen
            .last_completed
            .clone()
            .map(|(node, time)| common::pool::LastCompleted { node, time }),
        conditions: keep_transition_times(conditions, previous, now),
    }
}

/// Pure: the status of a pool whose spec the controller refuses.
pub fn invalid(
    generation: Option<i64>,
    problems: &[String],
    previous: &[Condition],
    now: &Time,
) -> RebootPoolStatus {
    let message = format!(
        "the spec is invalid, so no new reboot starts (the nodes it holds finish): {}",
        problems.join("; ")
    );
    let conditions = vec![
        condition_of(
            condition::READY,
            false,
            reason::INVALID_SPEC,
            message.clone(),
        ),
        condition_of(
            condition::RECONCILING,
            false,
            reason::INVALID_SPEC,
            message.clone(),
        ),
        condition_of(
            condition::STALLED,
            true,
            reason::INVALID_SPEC,
            message.clone(),
        ),
    ];
    RebootPoolStatus {
        observed_generation: generation,
        held: Some(message),
        conditions: keep_transition_times(conditions, previous, now),
        ..RebootPoolStatus::default()
    }
}

/// Pure: the nodes that two or more pools' own selectors select, per pool, with the others.
pub fn overlaps<'a>(
    nodes: impl IntoIterator<Item = (&'a str, &'a BTreeMap<String, String>)>,
    pools: &[(String, PoolSelector)],
) -> BTreeMap<String, Vec<OverlappingNode>> {
    let mut found: BTreeMap<String, Vec<OverlappingNode>> = BTreeMap::new();
    for (node, labels) in nodes {
        let selecting: Vec<&String> = pools
            .iter()
            .filter(|(_, s)| s.selects(labels))
            .map(|(name, _)| name)
            .collect();
        if selecting.len() < 2 {
            continue;
        }
        for pool in &selecting {
            found
                .entry((*pool).clone())
                .or_default()
                .push(OverlappingNode {
                    node: node.to_owned(),
                    pools: selecting
                        .iter()
                        .filter(|other| *other != pool)
                        .map(|other| (*other).clone())
                        .collect(),
                });
        }
    }
    found
}

/// `2`, `2 (25%)`, `2, 1/zone`.
fn budget_text(seen: &Seen) -> String {
    let mut text = seen.budget.to_string();
    if let Some(given) = &seen.budget_given {
        text.push_str(&format!(" ({given})"));
    }
    if let Some(zone) = &seen.zone_budget {
        text.push_str(&format!(", {zone}/zone"));
    }
    text
}

fn overlap_message(overlapping: &[OverlappingNode]) -> String {
    match overlapping.first() {
        None => "no node is in another pool too".into(),
        Some(first) => format!(
            "{} node(s) are selected by another pool too and rebooted by neither (such as {} \
             with {}): make the pools' nodeSelectors disjoint",
            overlapping.len(),
            first.node,
            first.pools.join(", ")
        ),
    }
}

fn condition_of(kind: &str, status: bool, reason: &str, message: String) -> Condition {
    Condition {
        type_: kind.to_owned(),
        status: if status { "True" } else { "False" }.to_owned(),
        reason: reason.to_owned(),
        message,
        last_transition_time: Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH),
        observed_generation: None,
    }
}

/// A condition keeps its transition time while its status stays; a new one takes `now`.
fn keep_transition_times(
    mut conditions: Vec<Condition>,
    previous: &[Condition],
    now: &Time,
) -> Vec<Condition> {
    for condition in &mut conditions {
        condition.last_transition_time = previous
            .iter()
            .find(|p| p.type_ == condition.type_ && p.status == condition.status)
            .map_or_else(|| now.clone(), |p| p.last_transition_time.clone());
    }
    conditions
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> Time {
        Time(k8s_openapi::jiff::Timestamp::from_second(1_800_000_000).unwrap())
    }

    fn seen(requested: i64, slots: usize, overdue: &[&str]) -> Seen {
        let mut summary = PoolSummary {
            nodes: 10,
            slots_in_use: slots,
            unavailable: slots,
            ..PoolSummary::default()
        };
        summary.by_state[1] = requested;
        Seen {
            summary,
            budget: 2,
            facts: PoolFacts {
                held: None,
                overdue: overdue.iter().map(|s| (*s).to_owned()).collect(),
                stalled: None,
            },
            ..Seen::default()
        }
    }

    fn status_of<'a>(status: &'a RebootPoolStatus, kind: &str) -> &'a str {
        &status
            .conditions
            .iter()
            .find(|c| c.type_ == kind)
            .unwrap()
            .status
    }

    #[test]
    fn kstatus_reads_idle_as_current_a_rollout_as_in_progress_and_overdue_as_failed() {
        let idle = running(Some(3), &seen(0, 0, &[]), vec![], false, false, &[], &now());
        assert_eq!(idle.observed_generation, Some(3));
        assert_eq!(status_of(&idle, "Ready"), "True");
        assert_eq!(status_of(&idle, "Reconciling"), "False");
        assert_eq!(status_of(&idle, "Stalled"), "False");
        let busy = running(Some(3), &seen(3, 2, &[]), vec![], false, false, &[], &now());
        assert_eq!((busy.waiting, busy.rebooting), (3, 2));
        let mut shares = seen(0, 0, &[]);
        shares.budget_given = Some("25%".into());
        shares.zone_budget = Some("1".into());
        let status = running(Some(1), &shares, vec![], false, false, &[], &now());
        assert_eq!(status.budget.as_deref(), Some("2 (25%), 1/zone"));
        assert_eq!(status_of(&busy, "Reconciling"), "True");
        let late = running(
            Some(3),
            &seen(3, 2, &["n1"]),
            vec![],
            false,
            false,
            &[],
            &now(),
        );
        assert_eq!(status_of(&late, "Stalled"), "True");
        assert_eq!(status_of(&late, "NodeOverdue"), "True");
        assert!(late.held.unwrap().contains("n1"));
        let mut failed = seen(3, 0, &[]);
        failed.facts.stalled = Some("the canary n1 failed".into());
        let stalled = running(Some(3), &failed, vec![], false, false, &[], &now());
        assert_eq!(status_of(&stalled, "Stalled"), "True");
        let condition = stalled
            .conditions
            .iter()
            .find(|c| c.type_ == "Stalled")
            .unwrap();
        assert_eq!(condition.reason, "RolloutStalled");
    }

    #[test]
    fn a_pool_deleted_while_paused_says_how_to_let_its_deletion_end() {
        let held = |paused, deleting| {
            running(
                Some(1),
                &seen(0, 1, &[]),
                vec![],
                paused,
                deleting,
                &[],
                &now(),
            )
            .held
            .unwrap_or_default()
        };
        assert!(held(true, true).contains("until spec.paused is false"));
        assert!(held(false, true).contains("its reboots under way finish"));
        assert!(held(true, false).contains("paused"));
    }

    #[test]
    fn an_invalid_spec_is_stalled_with_its_problems() {
        let status = invalid(Some(2), &["spec.windows[0]: bad".into()], &[], &now());
        assert_eq!(status_of(&status, "Stalled"), "True");
        assert_eq!(status_of(&status, "Ready"), "False");
        assert!(status.held.unwrap().contains("spec.windows[0]"));
    }

    #[test]
    fn a_condition_keeps_its_transition_time_while_it_holds() {
        let first = running(Some(1), &seen(0, 0, &[]), vec![], false, false, &[], &now());
        let later = Time(k8s_openapi::jiff::Timestamp::from_second(1_900_000_000).unwrap());
        let again = running(
            Some(1),
            &seen(1, 1, &[]),
            vec![],
            false,
            false,
            &first.conditions,
            &later,
        );
        let time = |s: &RebootPoolStatus, kind: &str| {
            s.conditions
                .iter()
                .find(|c| c.type_ == kind)
                .unwrap()
                .last_transition_time
                .clone()
        };
        assert_eq!(time(&again, "Ready"), now());
        assert_eq!(time(&again, "Reconciling"), later);
    }

    #[test]
    fn overlapping_nodes_are_named_with_the_other_pools() {
        let a = PoolSelector::parse("pool=a").unwrap();
        let spot = PoolSelector::parse("spot").unwrap();
        let both: BTreeMap<String, String> =
            [("pool".into(), "a".into()), ("spot".into(), String::new())].into();
        let only_a: BTreeMap<String, String> = [("pool".into(), "a".into())].into();
        let found = overlaps(
            [("n1", &both), ("n2", &only_a)],
            &[("a".into(), a), ("spot".into(), spot)],
        );
        assert_eq!(
            found["a"],
            [OverlappingNode {
                node: "n1".into(),
                pools: vec!["spot".into()]
            }]
        );
        assert_eq!(found["spot"][0].pools, ["a"]);
    }
}
