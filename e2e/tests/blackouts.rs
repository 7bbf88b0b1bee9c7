//! Blackouts and budgets by schedule (docs/src/scheduling.md), end to end on the real control
//! plane with real agents: a blackout holds a rollout whatever the window says, and a
//! scheduled budget changes how many nodes reboot at once while it is under way.

use common::ControllerReason;
use common::ledger::{LEDGER_NAME, Slot};
use e2e::rollout::{all_back, ledger_slots, rollout_completes};
use e2e::{BudgetWatch, every_node, has_event, scrape::controller_metric, wait_until};
use k8s_openapi::jiff::Timestamp;
use nodesim::sandbox::{Sandbox, SandboxConfig};
use std::{collections::BTreeMap, time::Duration};

async fn sandbox(nodes: usize, max_unavailable: &str, controller_args: &[&str]) -> Sandbox {
    let config = SandboxConfig::with_nodes(nodes)
        .max_unavailable(max_unavailable)
        .reboot_duration(Duration::from_secs(8))
        .controller_args(controller_args);
    e2e::sandbox_without_pods(config).await
}

/// A whole second `secs` from now (the periods' syntax has no fractions).
fn in_secs(secs: i64) -> Timestamp {
    Timestamp::from_second(Timestamp::now().as_second() + secs).expect("a time")
}

/// What the ledger shows, sampled until every node is back: each grant with its time, and
/// the number of slots held at each sample.
#[derive(Default)]
struct LedgerSamples {
    grants: BTreeMap<String, Timestamp>,
    held: Vec<(Timestamp, usize)>,
}

impl LedgerSamples {
    async fn until_all_back(sb: &Sandbox, watch: &BudgetWatch) -> LedgerSamples {
        let mut samples = LedgerSamples::default();
        let deadline = Timestamp::now() + e2e::rollout::ROLLOUT;
        while !all_back(sb, 1).await {
            assert!(Timestamp::now() < deadline, "the rollout did not finish");
            watch
                .check()
                .unwrap_or_else(|violation| panic!("{violation}"));
            let slots: BTreeMap<String, Slot> = ledger_slots(&sb.client, LEDGER_NAME)
                .await
                .unwrap_or_default();
            samples.held.push((Timestamp::now(), slots.len()));
            for (node, slot) in slots {
                let at: Timestamp = slot.granted_at.parse().expect("an RFC 3339 grant time");
                samples.grants.entry(node).or_insert(at);
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        samples
    }

    /// The most slots held at a sample taken in `range`.
    fn most_held(&self, from: Timestamp, until: Timestamp) -> usize {
        let within = self
            .held
            .iter()
            .filter(|(at, _)| from <= *at && *at < until);
        within.map(|(_, held)| *held).max().unwrap_or(0)
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_blackout_holds_the_rollout_until_it_ends_whatever_the_window_says() {
    // Under way from an hour ago to 45 s from now, in a window open all day.
    let end = in_secs(45);
    let blackout = format!("{}..{end}", in_secs(-3600));
    let args = [
        "--reboot-blackout",
        &blackout,
        "--reboot-window",
        "daily 00:00-24:00",
    ];
    let sb = sandbox(4, "2", &args).await;
    let watch = BudgetWatch::start(sb.client.clone(), 2).await;
    let until_end = Duration::try_from(end.duration_since(Timestamp::now())).unwrap_or_default();
    let patience = until_end.saturating_sub(Duration::from_secs(1));
    let words = [
        "blackout",
        &blackout,
        "whatever the maintenance windows say",
    ];
    every_node::request_and_wait_for_event(
        &sb,
        ControllerReason::Blackout,
        &words,
        patience,
        Some(&watch),
    )
    .await;
    assert!(
        Timestamp::now() < end,
        "the test was too slow to see the blackout"
    );
    assert_eq!(
        controller_metric(&sb, "node_reboot_window_open").await,
        Some(0.0),
        "no new reboot may start: the window gauge says closed"
    );
    let next = controller_metric(&sb, "node_reboot_window_next_open_timestamp_seconds").await;
    assert_eq!(
        next,
        Some(end.as_second() as f64),
        "new reboots may start at its end"
    );

    let samples = LedgerSamples::until_all_back(&sb, &watch).await;
    rollout_completes(&sb, &watch).await;
    assert_eq!(samples.grants.len(), 4, "{:?}", samples.grants);
    for (node, at) in &samples.grants {
        assert!(
            *at >= end,
            "{node} granted at {at}, in the blackout {blackout}"
        );
    }
    sb.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_scheduled_budget_lowers_the_wave_size_while_it_is_under_way() {
    // Three at a time, but one until 75 s from now: long enough for several nodes to reboot
    // one by one, short enough to leave some for three at a time.
    let end = in_secs(75);
    let scheduled = format!("1 {}..{end}", in_secs(-3600));
    let sb = sandbox(10, "3", &["--scheduled-budget", &scheduled]).await;
    let watch = BudgetWatch::start(sb.client.clone(), 3).await;
    every_node::request(&sb.control_plane);
    wait_until(
        "the controller's budget gauge says 1",
        Duration::from_secs(30),
        Some(&watch),
        || async { controller_metric(&sb, "node_reboot_max_unavailable").await == Some(1.0) },
    )
    .await;
    let samples = LedgerSamples::until_all_back(&sb, &watch).await;
    rollout_completes(&sb, &watch).await;

    let start = samples.held.first().map(|(at, _)| *at).expect("samples");
    assert!(
        start < end,
        "the test was too slow to see the scheduled budget"
    );
    // A grant decided just before the end may be written just after: a second's margin.
    let during = samples.most_held(start, end - Duration::from_secs(1));
    let after = samples.most_held(end, Timestamp::now());
    assert_eq!(
        during, 1,
        "more than one slot held under the scheduled budget of 1"
    );
    assert!(
        after >= 2,
        "never more than {after} at once after it ended: the test shows nothing"
    );
    let early = samples.grants.values().filter(|at| **at < end).count();
    assert!(
        early >= 2,
        "only {early} node(s) granted under the scheduled budget"
    );
    let waited = a_waiting_node_was_told(&sb, &scheduled).await;
    assert!(
        waited,
        "no waiting node was told the scheduled budget holds it"
    );
    sb.stop().await;
}

/// Whether a node was told it waits under the scheduled budget (its `Requested` Event).
async fn a_waiting_node_was_told(sb: &Sandbox, scheduled: &str) -> bool {
    let words = ["the scheduled budget", scheduled];
    for name in sb.fleet.names() {
        if has_event(&sb.client, &name, ControllerReason::Requested, &words).await {
            return true;
        }
    }
    false
}
