//! Where each slot's time goes in a rolling reboot, to find hand-off delays: for every node,
//! the moment a watcher first saw each step of the protocol (a watch delivers the changes of
//! an object in etcd's revision order; the time is when they arrived). Steps on the Node come
//! from a watch of the pool's Nodes; the grant and the release of the slot from a watch of the
//! ledger, a separate stream: a stage between the two (granted → cordoned) carries their skew,
//! a few milliseconds either way.

use crate::stats::median;
use common::{AnnotationKeys, NodeFacts, Readiness};
use k8s_openapi::api::core::v1::Node;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use tokio::time::Instant;

/// The protocol's steps, in their order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Step {
    Requested,
    /// The node's name is in the ledger.
    Granted,
    Cordoned,
    RebootNow,
    InProgress,
    /// Uncordoned, a new `reboot-last-completed`, nothing of the protocol left.
    Completed,
    /// The node's name is gone from the ledger.
    Released,
}

impl Step {
    const ALL: [Step; 7] = [
        Step::Requested,
        Step::Granted,
        Step::Cordoned,
        Step::RebootNow,
        Step::InProgress,
        Step::Completed,
        Step::Released,
    ];

    fn name(self) -> &'static str {
        match self {
            Step::Requested => "requested",
            Step::Granted => "granted",
            Step::Cordoned => "cordoned",
            Step::RebootNow => "reboot-now",
            Step::InProgress => "reboot-in-progress",
            Step::Completed => "completed",
            Step::Released => "released",
        }
    }
}

/// The steps that a Node object shows; `completed_before` is its `reboot-last-completed` when
/// the run began (a new value is this run's completion).
pub fn shown_by(node: &Node, keys: &AnnotationKeys, completed_before: Option<&str>) -> Vec<Step> {
    let facts = NodeFacts::from_node(node);
    let value = |key: &str| facts.annotations.get(key).map(String::as_str);
    let mut steps = Vec::new();
    if value(&keys.needed) == Some("true") {
        steps.push(Step::Requested);
    }
    if facts.unschedulable && value(&keys.grant).is_some() {
        steps.push(Step::Cordoned);
    }
    if value(&keys.now) == Some("true") {
        steps.push(Step::RebootNow);
    }
    if value(&keys.in_progress).is_some() {
        steps.push(Step::InProgress);
    }
    let completed = value(&keys.last_completed);
    if completed.is_some()
        && completed != completed_before
        && facts.readiness == Readiness::Ready
        && crate::scenarios::is_clean(node)
    {
        steps.push(Step::Completed);
    }
    steps
}

/// The first sighting of each step of each node, in one run.
#[derive(Debug, Clone, Default)]
pub struct Sightings {
    first: BTreeMap<String, BTreeMap<Step, Instant>>,
}

impl Sightings {
    pub fn saw(&mut self, node: &str, step: Step, at: Instant) {
        self.first
            .entry(node.to_owned())
            .or_default()
            .entry(step)
            .or_insert(at);
    }

    /// The ledger, seen at `at`, holds slots for `holders`.
    pub fn ledger(&mut self, holders: &BTreeSet<String>, at: Instant) {
        for node in holders {
            self.saw(node, Step::Granted, at);
        }
        let released: Vec<String> = self
            .first
            .iter()
            .filter(|(node, steps)| steps.contains_key(&Step::Granted) && !holders.contains(*node))
            .map(|(node, _)| node.clone())
            .collect();
        for node in released {
            self.saw(&node, Step::Released, at);
        }
    }

    /// When each node was seen at `step`, in time order.
    pub fn times(&self, step: Step) -> Vec<Instant> {
        let mut times: Vec<Instant> = self
            .first
            .values()
            .filter_map(|steps| steps.get(&step).copied())
            .collect();
        times.sort();
        times
    }
}

/// Milliseconds from `a` to `b`, negative when `b` came first.
fn ms(a: Instant, b: Instant) -> f64 {
    if b >= a {
        b.duration_since(a).as_secs_f64() * 1000.0
    } else {
        -(a.duration_since(b).as_secs_f64() * 1000.0)
    }
}

/// The medians of a rolling reboot's stages.
#[derive(Debug, Clone, Serialize)]
pub struct Turnover {
    /// Nodes seen at every step.
    pub nodes: usize,
    /// Median milliseconds of each stage between two consecutive steps, in protocol order
    /// (`requested → granted` is mostly the wait for a free slot).
    pub stages_ms: Vec<(String, f64)>,
    /// Median milliseconds a node held its slot (granted → released).
    pub slot_held_ms: f64,
    /// Median milliseconds from a node's completion to the `reboot-now` of the node that took
    /// its slot: the i-th completion frees the slot of the (k + i)-th `reboot-now`.
    pub handoff_ms: f64,
    pub handoffs: usize,
}

impl Turnover {
    /// Over the runs together; `None` when no node was seen at every step.
    pub fn of(runs: &[Sightings], max_unavailable: usize) -> Option<Self> {
        let complete = |steps: &&BTreeMap<Step, Instant>| steps.len() == Step::ALL.len();
        let nodes: Vec<&BTreeMap<Step, Instant>> = runs
            .iter()
            .flat_map(|r| r.first.values())
            .filter(complete)
            .collect();
        if nodes.is_empty() {
            return None;
        }
        let stage = |a: Step, b: Step| {
            let samples: Vec<f64> = nodes.iter().map(|s| ms(s[&a], s[&b])).collect();
            median(&samples).unwrap_or(f64::NAN)
        };
        let stages_ms = Step::ALL
            .windows(2)
            .map(|w| {
                (
                    format!("{} → {}", w[0].name(), w[1].name()),
                    stage(w[0], w[1]),
                )
            })
            .collect();
        let handoffs: Vec<f64> = runs
            .iter()
            .flat_map(|run| {
                let (done, now) = (run.times(Step::Completed), run.times(Step::RebootNow));
                let next = now.into_iter().skip(max_unavailable);
                done.into_iter()
                    .zip(next)
                    .map(|(d, n)| ms(d, n))
                    .collect::<Vec<_>>()
            })
            .collect();
        Some(Self {
            nodes: nodes.len(),
            stages_ms,
            slot_held_ms: stage(Step::Granted, Step::Released),
            handoff_ms: median(&handoffs).unwrap_or(f64::NAN),
            handoffs: handoffs.len(),
        })
    }

    /// One line for the report: where a slot's turnover goes.
    pub fn line(&self) -> String {
        let stages: Vec<String> = self
            .stages_ms
            .iter()
            .skip(1)
            .map(|(name, ms)| format!("{name} {ms:.0} ms"))
            .collect();
        format!(
            "slot held {:.0} ms: {}; completion → next reboot-now {:.0} ms",
            self.slot_held_ms,
            stages.join(", "),
            self.handoff_ms
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::time::Duration;

    fn node(annotations: serde_json::Value, unschedulable: bool) -> Node {
        serde_json::from_value(json!({
            "metadata": {"name": "n", "annotations": annotations},
            "spec": {"unschedulable": unschedulable},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]},
        }))
        .unwrap()
    }

    #[test]
    fn a_node_shows_its_steps() {
        let keys = AnnotationKeys::default();
        let shown = |a, u, before| shown_by(&node(a, u), &keys, before);
        assert_eq!(
            shown(json!({"reboot-needed": "true"}), false, None),
            [Step::Requested]
        );
        assert_eq!(
            shown(
                json!({"reboot-now": "true", "reboot-grant": "g"}),
                true,
                None
            ),
            [Step::Cordoned, Step::RebootNow]
        );
        let done = json!({"reboot-last-completed": "t2"});
        assert_eq!(shown(done.clone(), false, Some("t1")), [Step::Completed]);
        assert_eq!(shown(done.clone(), false, Some("t2")), []);
        assert_eq!(shown(done, true, None), [], "still cordoned");
    }

    #[test]
    fn stages_and_handoffs_are_medians() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut run = Sightings::default();
        // Two nodes, one slot: b takes a's slot 30 ms after a completed.
        for (name, start) in [("a", 0), ("b", 1000)] {
            for (i, step) in Step::ALL.iter().enumerate() {
                if !matches!(step, Step::Granted | Step::Released) {
                    run.saw(name, *step, at(start + 100 * i as u64));
                }
            }
        }
        run.saw("a", Step::Requested, at(5000)); // a later sighting changes nothing
        run.ledger(&BTreeSet::from(["a".to_owned()]), at(100));
        run.ledger(&BTreeSet::new(), at(700));
        run.ledger(&BTreeSet::from(["b".to_owned()]), at(1100));
        run.ledger(&BTreeSet::new(), at(1700));
        let t = Turnover::of(&[run], 1).expect("complete nodes");
        assert_eq!(t.nodes, 2);
        assert_eq!(t.stages_ms[0], ("requested → granted".to_owned(), 100.0));
        assert_eq!(t.slot_held_ms, 600.0);
        // a completed at 500, b's reboot-now at 1300.
        assert_eq!((t.handoff_ms, t.handoffs), (800.0, 1));
        assert!(
            t.line().contains("completion → next reboot-now 800 ms"),
            "{}",
            t.line()
        );
        assert!(Turnover::of(&[Sightings::default()], 1).is_none());
    }
}
