//! Table tests of the rollout's rules as a round applies them: the canary goes alone and soaks,
//! a failed canary or too many failures stall the pool, the waves grow, the record is written
//! with the ledger's change and removed at the rollout's end, and nothing is kept while every
//! rule is off.

use super::tests::{
    annotate, base_round, claimed, granted, ledger_of, node_json, told_to_reboot, view,
};
use super::*;
use crate::ledger::RolloutChange;
use common::rollout::{MaxFailures, RolloutRecord};

fn requested(names: &[&str]) -> Vec<NodeView> {
    names
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let mut obj = node_json(name, true);
            annotate(&mut obj, "reboot-needed", "true");
            let mut v = view(&obj);
            v.requested_at = Some(i as u64);
            v
        })
        .collect()
}

fn canary(n: u32, soak: u64) -> RolloutRules {
    RolloutRules {
        canary: n,
        canary_soak: soak,
        ..RolloutRules::default()
    }
}

fn written(d: &Decision) -> RolloutRecord {
    match &d.ledger.rollout {
        Some(RolloutChange::Write(record)) => record.clone(),
        other => panic!("no record written: {other:?} in {d:?}"),
    }
}

/// `done` completed grant g-done (it carries reboot-last-grant), Ready since `ready_since`.
fn completed(ready: bool, ready_since: Option<u64>) -> NodeView {
    let mut obj = node_json("done", ready);
    annotate(&mut obj, "reboot-last-grant", "g-done");
    obj["metadata"]["resourceVersion"] = "5".into();
    let mut v = view(&obj);
    v.ready_since = ready_since;
    v
}

fn ledger_with(record: RolloutRecord) -> Ledger {
    let mut ledger = ledger_of(&["done"]);
    ledger.slots.get_mut("done").unwrap().grant = "g-done".into();
    ledger.rollout = Some(record);
    ledger
}

fn canary_done_holds() -> RolloutRecord {
    RolloutRecord {
        canaries: ["done".to_owned()].into(),
        ..RolloutRecord::default()
    }
}

#[test]
fn the_canary_goes_alone_and_is_recorded_with_its_grant() {
    let nodes = requested(&["a", "b", "c"]);
    let ledger = Ledger::default();
    let d = Round {
        budget: 3,
        rollout: canary(1, 0),
        ..base_round(&nodes, &ledger)
    }
    .decide();
    assert_eq!(granted(&d), ["a"], "{d:?}");
    assert_eq!(d.waiting, ["b", "c"]);
    assert_eq!(d.stage_full, BTreeSet::from(["b".into(), "c".into()]));
    assert_eq!(d.stage, Some(Stage::Canary { size: 1 }));
    assert_eq!(written(&d).canaries, BTreeSet::from(["a".to_owned()]));
}

#[test]
fn without_a_rule_no_record_is_kept() {
    let nodes = requested(&["a", "b"]);
    let ledger = Ledger::default();
    let d = Round {
        budget: 3,
        ..base_round(&nodes, &ledger)
    }
    .decide();
    assert_eq!(granted(&d), ["a", "b"]);
    assert_eq!(d.ledger.rollout, None);
}

#[test]
fn the_rest_wait_for_the_canarys_soak_then_go_up_to_the_budget() {
    let wants = requested(&["b", "c"]);
    let ledger = ledger_with(canary_done_holds());
    let decide_at = |now: u64| {
        let nodes = [vec![completed(true, Some(100))], wants.clone()].concat();
        Round {
            budget: 3,
            now,
            min_ready: 10,
            rollout: canary(1, 50),
            ..base_round(&nodes, &ledger)
        }
        .decide()
    };
    let d = decide_at(140);
    assert!(d.ledger.release.is_empty(), "40 of 50 soaked: {d:?}");
    assert!(granted(&d).is_empty(), "the canary goes alone: {d:?}");
    let d = decide_at(150);
    assert_eq!(d.ledger.release, ["done"], "soaked: {d:?}");
    assert_eq!(granted(&d), ["b", "c"], "the stage is over");
    let record = written(&d);
    assert_eq!((record.completed, record.canaries_completed), (1, 1));
    assert!(record.canaries.is_empty());
}

#[test]
fn a_canary_not_ready_after_its_reboot_stalls_the_pool_until_resumed() {
    let wants = requested(&["b"]);
    let nodes = [vec![completed(false, None)], wants].concat();
    let ledger = ledger_with(canary_done_holds());
    let round = |ledger: &Ledger| {
        Round {
            budget: 3,
            min_ready: 10,
            rollout: canary(1, 50),
            ..base_round(&nodes, ledger)
        }
        .decide()
    };
    let d = round(&ledger);
    let failure = FailureKind::NotReadyAfterReboot;
    assert_eq!(d.rollout_failures, [("done".to_owned(), failure)]);
    assert_eq!(
        d.stalled,
        Some(Stall::CanaryFailed {
            node: "done".into(),
            kind: failure
        })
    );
    assert!(granted(&d).is_empty());
    // Written, the same failure is not new; resumed, it no longer stalls.
    let failed = ledger_with(written(&d));
    let d = round(&failed);
    assert!(
        d.rollout_failures.is_empty() && d.stalled.is_some(),
        "{d:?}"
    );
    assert_eq!(d.ledger.rollout, None, "nothing new to write");
    let resumed = ledger_with(written(&round(&ledger)).resumed());
    let d = round(&resumed);
    assert_eq!(d.stalled, None, "{d:?}");
}

/// A RebootPool's `spec.resumedAt` forgives, in the round's own write, the failures counted
/// before it, and only those: one counted at or after it still stalls the pool. A time ahead
/// of the controller's clock forgives nothing until the clock reaches it (else it would
/// forgive every failure counted meanwhile).
#[test]
fn a_pools_resumed_at_forgives_the_failures_counted_before_it() {
    let wants = requested(&["b"]);
    let nodes = [vec![completed(false, None)], wants].concat();
    let round_at = |ledger: &Ledger, resumed_at, clock| {
        Round {
            budget: 3,
            min_ready: 10,
            clock,
            rollout: RolloutRules {
                resumed_at,
                ..canary(1, 50)
            },
            ..base_round(&nodes, ledger)
        }
        .decide()
    };
    let round = |ledger: &Ledger, resumed_at| round_at(ledger, resumed_at, 2_000);
    let failed = written(&round_at(&ledger_with(canary_done_holds()), None, 1_000));
    assert_eq!(failed.failures["done"].at, Some(1_000), "{failed:?}");
    let failed = ledger_with(failed);
    let ahead = round(&failed, Some(5_000));
    assert!(
        ahead.stalled.is_some(),
        "a resumedAt ahead of the clock: {ahead:?}"
    );
    assert!(
        round_at(&failed, Some(5_000), 5_000).stalled.is_none(),
        "forgiven once the clock reaches it"
    );
    for (resumed_at, stalled) in [(None, true), (Some(1_000), true), (Some(1_001), false)] {
        let d = round(&failed, resumed_at);
        assert_eq!(d.stalled.is_some(), stalled, "{resumed_at:?}: {d:?}");
        if stalled {
            assert_eq!(d.ledger.rollout, None, "{resumed_at:?}: nothing to write");
        } else {
            let record = written(&d);
            assert!(record.failures["done"].forgiven, "{record:?}");
            assert!(d.rollout_failures.is_empty(), "the same failure is not new");
            // Taken in, the same resumedAt changes nothing more.
            let again = round(&ledger_with(record), resumed_at);
            assert_eq!(again.stalled, None, "{again:?}");
            assert_eq!(again.ledger.rollout, None, "{again:?}");
        }
    }
}

#[test]
fn failures_past_max_failures_stall_the_pool() {
    // `a` does not come back within the reboot timeout; b and c wait.
    let mut a = node_json("a", false);
    claimed(&mut a, "g-a");
    annotate(&mut a, "reboot-now", "true");
    let nodes = told_to_reboot(&a);
    let ledger = ledger_of(&["a"]);
    for (most, stalled) in [(0, true), (1, false)] {
        let d = Round {
            budget: 3,
            clock: 2000,
            reboot_timeout: 600,
            rollout: RolloutRules {
                max_failures: Some(MaxFailures::Count(most)),
                ..RolloutRules::default()
            },
            ..base_round(&nodes, &ledger)
        }
        .decide();
        assert_eq!(d.overdue, ["a"]);
        assert_eq!(
            d.rollout_failures,
            [("a".to_owned(), FailureKind::RebootTimeout)]
        );
        let expected = stalled.then_some(Stall::TooManyFailures { failed: 1, most: 0 });
        assert_eq!(d.stalled, expected, "{most}: {d:?}");
        assert!(written(&d).failures.contains_key("a"));
    }
}

#[test]
fn the_waves_grow_with_each_completed_one() {
    let wants = requested(&["b", "c", "d"]);
    let rules = RolloutRules {
        waves: true,
        ..RolloutRules::default()
    };
    let ledger = ledger_with(RolloutRecord::default());
    let nodes = [vec![completed(true, Some(0))], wants].concat();
    let d = Round {
        budget: 5,
        rollout: rules,
        ..base_round(&nodes, &ledger)
    }
    .decide();
    assert_eq!(d.ledger.release, ["done"]);
    assert_eq!(granted(&d), ["b", "c"], "the second wave is two: {d:?}");
    assert_eq!(d.stage, Some(Stage::Wave { size: 2 }));
    assert_eq!(written(&d).wave, Some(2));
}

#[test]
fn the_record_is_removed_once_nothing_holds_or_waits() {
    let ledger = ledger_with(canary_done_holds());
    let nodes = [completed(true, Some(0))];
    let d = Round {
        rollout: canary(1, 0),
        ..base_round(&nodes, &ledger)
    }
    .decide();
    assert_eq!(d.ledger.release, ["done"]);
    assert_eq!(d.ledger.rollout, Some(RolloutChange::End));
}

#[test]
fn a_record_that_cannot_be_read_stalls_the_pool_and_is_not_written_over() {
    let nodes = requested(&["a"]);
    let ledger = Ledger {
        rollout_unreadable: Some("not JSON".into()),
        ..Ledger::default()
    };
    let d = Round {
        rollout: canary(1, 0),
        ..base_round(&nodes, &ledger)
    }
    .decide();
    assert_eq!(d.stalled, Some(Stall::Unreadable("not JSON".into())));
    assert!(granted(&d).is_empty());
    assert_eq!(d.ledger.rollout, None);
}

#[test]
fn a_release_the_shell_keeps_back_is_not_counted_as_completed() {
    // The canary soaked as the cache saw it, but a fresh read finds it NotReady: the shell
    // keeps its slot (and drops the round's grants), and the record must not count it.
    let nodes = [vec![completed(true, Some(0))], requested(&["b"])].concat();
    let ledger = ledger_with(canary_done_holds());
    let mut d = Round {
        budget: 3,
        rollout: canary(1, 0),
        ..base_round(&nodes, &ledger)
    }
    .decide();
    assert_eq!(written(&d).canaries_completed, 1, "{d:?}");
    crate::effects::keep_soaking(&mut d, "done");
    d.settle_rollout(canary(1, 0), &ledger);
    assert_eq!(d.ledger.rollout, None, "nothing changed: {d:?}");
}

#[test]
fn a_reboot_that_would_not_fit_before_the_window_closes_is_not_started() {
    let nodes = requested(&["a"]);
    let ledger = Ledger::default();
    // (clock, granted): the window closes at 10 000 and a reboot needs 3 000.
    for (clock, fits) in [(7_000, true), (7_001, false)] {
        let d = Round {
            clock,
            window_fit: Some(WindowFit {
                closes_at: 10_000,
                needs: 3_000,
            }),
            ..base_round(&nodes, &ledger)
        }
        .decide();
        assert_eq!(!granted(&d).is_empty(), fits, "{clock}: {d:?}");
        assert_eq!(d.too_late_in_window.is_some(), !fits, "{clock}");
        if !fits {
            assert_eq!(d.waiting, ["a"]);
        }
    }
}

#[test]
fn a_failed_drain_waiting_out_its_retry_keeps_the_rollout_and_its_failure() {
    // `n` failed its drain: its slot is released and it waits 5 before it may go again. It is
    // the pool's only request, and no candidate meanwhile: the rollout is not over.
    let mut released = node_json("n", true);
    annotate(&mut released, "reboot-needed", "true");
    released["metadata"]["resourceVersion"] = "3".into();
    let mut n = view(&released);
    n.drain = DrainState::Failed;
    n.not_before = Some(5);
    let nodes = [n];
    let ledger = ledger_of(&["n"]);
    let rules = RolloutRules {
        max_failures: Some(MaxFailures::Count(0)),
        ..RolloutRules::default()
    };
    let d = Round {
        drain_enabled: true,
        rollout: rules,
        ..base_round(&nodes, &ledger)
    }
    .decide();
    assert_eq!(
        d.release_reasons,
        [("n".to_owned(), ReleaseReason::DrainFailed)]
    );
    assert!(d.waiting.is_empty(), "no candidate: {d:?}");
    assert!(written(&d).failures.contains_key("n"), "{d:?}");
    assert!(d.stalled.is_some(), "{d:?}");
}

/// A RebootPool's ledger recreated paused (its Lease created at 1 000): a `spec.resumedAt`
/// after that creation, once the clock reaches it, lifts the pause in the round's own write;
/// one before it (an older resume), one ahead of the clock, or a ledger not paused, does not.
#[test]
fn a_pools_resumed_at_after_its_ledger_was_recreated_lifts_its_pause() {
    let nodes = requested(&["b"]);
    let mut ledger = ledger_of(&[]);
    ledger.paused = true;
    ledger.created_at = Some(1_000);
    let unpause = |ledger: &Ledger, resumed_at| {
        Round {
            clock: 2_000,
            rollout: RolloutRules {
                resumed_at,
                ..RolloutRules::default()
            },
            fence: Fence {
                paused: ledger.paused,
                ..super::tests::OPEN
            },
            ..base_round(&nodes, ledger)
        }
        .decide()
        .ledger
        .unpause
    };
    assert!(unpause(&ledger, Some(1_500)));
    assert!(
        unpause(&ledger, Some(1_000)),
        "in the second of the creation"
    );
    for before_or_ahead in [None, Some(900), Some(2_500)] {
        assert!(!unpause(&ledger, before_or_ahead), "{before_or_ahead:?}");
    }
    let not_paused = Ledger {
        paused: false,
        ..ledger.clone()
    };
    assert!(!unpause(&not_paused, Some(1_500)));
}
