//! The figures of a rollout on real nodes: for each node, the phases that belong to the node
//! and its workload (the drain while evicted pods wait for their replacements, the graceful
//! shutdown, the boot to the kubelet's Ready), and the time the operator adds between them;
//! then the makespan against its ideal: pools reboot side by side, each one node at a time,
//! so the ideal is the slowest pool's sum of its nodes' own phases. Reported against their
//! targets, never asserted: these machines are too noisy for a test to judge durations.

use std::{
    collections::BTreeMap,
    time::{Duration, Instant},
};

/// What the operator may add to each node's turn, on real nodes.
pub const ADDED_PER_NODE_TARGET: Duration = Duration::from_secs(2);
/// How far the makespan may be from the slowest pool's sum of its nodes' own phases (each
/// pool's budget 1).
pub const MAKESPAN_TARGET: f64 = 1.1;

/// When one node's reboot reached each step, as the test saw it.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Timeline {
    /// The node carries a grant.
    pub granted: Option<Instant>,
    pub cordoned: Option<Instant>,
    /// Cordoned, and none of the pods a drain evicts is on the node any more.
    pub drained: Option<Instant>,
    pub reboot_now: Option<Instant>,
    /// The agent took `reboot-now` (`reboot-in-progress`).
    pub in_progress: Option<Instant>,
    /// The kernel's `reboot: Restarting system` on the console: the shutdown is over.
    pub restarting: Option<Instant>,
    /// The kubelet reports the new boot, Ready.
    pub ready_again: Option<Instant>,
    /// Out of the protocol and uncordoned.
    pub back: Option<Instant>,
}

/// `b - a`, where both were seen in that order.
fn span(a: Option<Instant>, b: Option<Instant>) -> Option<Duration> {
    match (a, b) {
        (Some(a), Some(b)) if b >= a => Some(b - a),
        _ => None,
    }
}

fn show(d: Option<Duration>) -> String {
    d.map_or_else(|| "?".to_owned(), |d| format!("{:.1} s", d.as_secs_f64()))
}

impl Timeline {
    /// The node's own phases: drain, shutdown, boot to Ready.
    pub fn own(&self) -> [Option<Duration>; 3] {
        [
            span(self.cordoned, self.drained),
            span(self.in_progress, self.restarting),
            span(self.restarting, self.ready_again),
        ]
    }

    /// What the operator adds: grant to cordon, drain end to `reboot-now`, `reboot-now` to
    /// the agent's action, Ready in the new boot to uncordoned, and uncordoned to
    /// `next_grant` (the next node's grant; none for the last node).
    pub fn added(&self, next_grant: Option<Instant>) -> [Option<Duration>; 5] {
        [
            span(self.granted, self.cordoned),
            span(self.drained, self.reboot_now),
            span(self.reboot_now, self.in_progress),
            span(self.ready_again, self.back),
            span(self.back, next_grant),
        ]
    }
}

/// The lines of the figures of one rollout that started (every request written) at
/// `requested` and took `makespan`, each prefixed with `prefix`. `pools` names each node's
/// pool (a node it does not name is in the pool `""`): a node's turn ends at the next grant
/// of its own pool, and each pool's own phases are summed apart.
pub fn report(
    prefix: &str,
    timelines: &BTreeMap<String, Timeline>,
    pools: &BTreeMap<String, String>,
    requested: Instant,
    makespan: Duration,
) -> Vec<String> {
    let pool_of = |name: &str| pools.get(name).map_or("", String::as_str);
    let mut order: Vec<(&String, &Timeline)> = timelines.iter().collect();
    order.sort_by_key(|(name, t)| (t.granted, (*name).clone()));
    let mut lines = vec![format!(
        "{prefix} node | own: drain | shutdown | boot to Ready | operator: grant to cordon | \
         drained to reboot-now | reboot-now to the agent | Ready to uncordoned | uncordoned to \
         the next grant | operator's total (target < {:.0} s)",
        ADDED_PER_NODE_TARGET.as_secs_f64()
    )];
    let mut own_sums: BTreeMap<&str, (usize, Duration)> = BTreeMap::new();
    for (i, (name, t)) in order.iter().enumerate() {
        let pool = pool_of(name);
        let next_grant = order[i + 1..]
            .iter()
            .find(|(next, _)| pool_of(next) == pool)
            .and_then(|(_, next)| next.granted);
        let own = t.own();
        let added = t.added(next_grant);
        let sum = own_sums.entry(pool).or_default();
        sum.0 += 1;
        sum.1 += own.iter().flatten().sum::<Duration>();
        let total: Duration = added.iter().flatten().sum();
        let cells: Vec<String> = own.iter().chain(&added).map(|d| show(*d)).collect();
        lines.push(format!(
            "{prefix} {name} | {} | {}",
            cells.join(" | "),
            show(Some(total))
        ));
    }
    let first_grant = order.first().and_then(|(_, t)| t.granted);
    lines.push(format!(
        "{prefix} requests to the first grant: {}",
        show(span(Some(requested), first_grant))
    ));
    for (pool, (nodes, sum)) in own_sums.iter().filter(|_| own_sums.len() > 1) {
        lines.push(format!(
            "{prefix} pool {pool}: {nodes} nodes, {} of their own phases",
            show(Some(*sum))
        ));
    }
    let slowest = own_sums.iter().max_by_key(|(_, (_, sum))| *sum);
    if let Some((pool, (_, ideal))) = slowest.filter(|(_, (_, sum))| !sum.is_zero()) {
        let of = if own_sums.len() > 1 {
            format!("the slowest pool's ({pool}) own phases")
        } else {
            "the nodes' own phases".to_owned()
        };
        lines.push(format!(
            "{prefix} makespan {} against {} of {of}: {:.2} x (target {MAKESPAN_TARGET} x)",
            show(Some(makespan)),
            show(Some(*ideal)),
            makespan.as_secs_f64() / ideal.as_secs_f64()
        ));
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(start: Instant, s: u64) -> Option<Instant> {
        Some(start + Duration::from_secs(s))
    }

    #[test]
    fn each_span_goes_to_the_node_or_to_the_operator_and_the_next_grant_ends_a_turn() {
        let t0 = Instant::now();
        let timeline = |g| Timeline {
            granted: at(t0, g),
            cordoned: at(t0, g + 1),
            drained: at(t0, g + 11),
            reboot_now: at(t0, g + 12),
            in_progress: at(t0, g + 13),
            restarting: at(t0, g + 23),
            ready_again: at(t0, g + 83),
            back: at(t0, g + 85),
        };
        let a = timeline(1);
        let b = timeline(90);
        let secs = |d: &[Option<Duration>]| -> Vec<Option<u64>> {
            d.iter().map(|d| d.map(|d| d.as_secs())).collect()
        };
        assert_eq!(secs(&a.own()), [Some(10), Some(10), Some(60)]);
        assert_eq!(
            secs(&a.added(b.granted)),
            [Some(1), Some(1), Some(1), Some(2), Some(4)]
        );
        assert_eq!(secs(&b.added(None))[4], None);

        let timelines = BTreeMap::from([("n2".to_owned(), b), ("n1".to_owned(), a)]);
        let lines = report(
            "x:",
            &timelines,
            &BTreeMap::new(),
            t0,
            Duration::from_secs(175),
        );
        assert!(
            lines[1].starts_with("x: n1 | 10.0 s | 10.0 s | 60.0 s | 1.0 s"),
            "{lines:?}"
        );
        assert!(lines[1].ends_with("| 4.0 s | 9.0 s"), "{lines:?}");
        assert!(lines[2].ends_with("| 2.0 s | ? | 5.0 s"), "{lines:?}");
        assert_eq!(lines[3], "x: requests to the first grant: 1.0 s");
        assert!(lines[4].contains("175.0 s against 160.0 s"), "{lines:?}");
        assert!(lines[4].contains("1.09 x"), "{lines:?}");
    }

    #[test]
    fn a_step_not_seen_is_shown_as_unknown_and_counts_nothing() {
        let t0 = Instant::now();
        let seen_in_part = Timeline {
            granted: at(t0, 1),
            cordoned: at(t0, 2),
            ..Timeline::default()
        };
        assert_eq!(seen_in_part.own(), [None, None, None]);
        let timelines = BTreeMap::from([("n1".to_owned(), seen_in_part)]);
        let lines = report(
            "x:",
            &timelines,
            &BTreeMap::new(),
            t0,
            Duration::from_secs(9),
        );
        assert!(
            lines[1].starts_with("x: n1 | ? | ? | ? | 1.0 s | ?"),
            "{lines:?}"
        );
        assert_eq!(
            lines.len(),
            3,
            "no ratio without the node's phases: {lines:?}"
        );
    }

    /// Two pools rebooting side by side: the ideal is the slower pool's own sum, not the sum
    /// of both, and a node's turn ends at its own pool's next grant.
    #[test]
    fn pools_side_by_side_are_held_to_the_slowest_pools_own_phases() {
        let t0 = Instant::now();
        let timeline = |g, boot| Timeline {
            granted: at(t0, g),
            cordoned: at(t0, g + 1),
            drained: at(t0, g + 11),
            reboot_now: at(t0, g + 12),
            in_progress: at(t0, g + 13),
            restarting: at(t0, g + 23),
            ready_again: at(t0, g + 23 + boot),
            back: at(t0, g + 25 + boot),
        };
        let timelines = BTreeMap::from([
            ("cp".to_owned(), timeline(1, 60)),
            ("w1".to_owned(), timeline(2, 100)),
            ("w2".to_owned(), timeline(130, 100)),
        ]);
        let pools = BTreeMap::from([
            ("cp".to_owned(), "control-plane".to_owned()),
            ("w1".to_owned(), "workers".to_owned()),
            ("w2".to_owned(), "workers".to_owned()),
        ]);
        let lines = report("x:", &timelines, &pools, t0, Duration::from_secs(260));
        // cp's turn ends with no next grant of its pool, not at w1's grant.
        assert!(
            lines[1].starts_with("x: cp |") && lines[1].ends_with("| ? | 5.0 s"),
            "{lines:?}"
        );
        assert!(
            lines
                .iter()
                .any(|l| l == "x: pool workers: 2 nodes, 240.0 s of their own phases"),
            "{lines:?}"
        );
        let last = lines.last().expect("the makespan");
        assert!(
            last.contains("260.0 s against 240.0 s of the slowest pool's (workers)"),
            "{last}"
        );
        assert!(last.contains("1.08 x"), "{last}");
    }
}
