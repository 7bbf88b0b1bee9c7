//! What a person watches: each node's state, slots in use against the budget, elapsed time.
//! Redrawn in place on a terminal; one plain line per change otherwise (logs, CI).

use common::{AnnotationKeys, NodeFacts, Phase, Readiness, Request};
use k8s_openapi::api::core::v1::Node;
use std::{collections::BTreeMap, fmt::Write as _, time::Duration};

/// A node's state as the demo shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Shown {
    Idle,
    Requested,
    Draining,
    Rebooting,
    /// Rebooted and completed, its slot still held (`--min-ready-seconds`).
    Soaking,
    Back,
}

impl Shown {
    fn label(self) -> &'static str {
        match self {
            Self::Idle => "idle",
            Self::Requested => "requested",
            Self::Draining => "draining",
            Self::Rebooting => "rebooting",
            Self::Soaking => "soaking",
            Self::Back => "back",
        }
    }

    fn symbol(self) -> &'static str {
        match self {
            Self::Idle => ".",
            Self::Requested => "?",
            Self::Draining => "D",
            Self::Rebooting => "R",
            Self::Soaking => "S",
            Self::Back => "+",
        }
    }

    /// Holds one of the operator's slots.
    pub fn in_slot(self) -> bool {
        matches!(self, Self::Draining | Self::Rebooting | Self::Soaking)
    }
}

/// `first_boot_id`: its boot id at the start; a node is back once its boot id changed and the
/// protocol is over, soaking while the ledger still holds its slot after that.
pub fn shown(
    node: &Node,
    keys: &AnnotationKeys,
    first_boot_id: Option<&String>,
    holds_slot: bool,
) -> Shown {
    let facts = NodeFacts::from_node(node);
    let state = facts.protocol(keys);
    let rebooted = first_boot_id.is_some_and(|first| facts.boot_id.as_ref() != Some(first));
    match state.phase {
        Phase::RebootNow | Phase::InProgress { .. } | Phase::Done { .. } => Shown::Rebooting,
        Phase::Idle
            if state.request == Request::Needed
                && (state.grant.is_some() || state.cordoned_by_operator) =>
        {
            Shown::Draining
        }
        Phase::Idle if state.request == Request::Needed => Shown::Requested,
        Phase::Idle if state.cordoned_by_operator || facts.readiness != Readiness::Ready => {
            Shown::Rebooting
        }
        Phase::Idle if rebooted && holds_slot => Shown::Soaking,
        Phase::Idle if rebooted => Shown::Back,
        Phase::Idle => Shown::Idle,
    }
}

/// The whole picture at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    pub nodes: BTreeMap<String, Shown>,
    /// What to show next to a node's name: its zone, why it waits.
    pub notes: BTreeMap<String, String>,
    pub budget: usize,
    pub elapsed: Duration,
}

impl Frame {
    pub fn slots_in_use(&self) -> usize {
        self.nodes.values().filter(|s| s.in_slot()).count()
    }

    pub fn count(&self, state: Shown) -> usize {
        self.nodes.values().filter(|s| **s == state).count()
    }

    fn header(&self) -> String {
        format!(
            "{:>6.1}s  slots in use {}/{}  back {}/{}",
            self.elapsed.as_secs_f64(),
            self.slots_in_use(),
            self.budget,
            self.count(Shown::Back),
            self.nodes.len()
        )
    }

    /// The block drawn on a terminal: a header, then one line per state with its nodes.
    pub fn render(&self) -> String {
        let mut out = self.header();
        out.push('\n');
        for state in [
            Shown::Idle,
            Shown::Requested,
            Shown::Draining,
            Shown::Rebooting,
            Shown::Soaking,
            Shown::Back,
        ] {
            let names: Vec<String> = self
                .nodes
                .iter()
                .filter(|(_, s)| **s == state)
                .map(|(n, _)| match self.notes.get(n) {
                    Some(note) => format!("{n}({note})"),
                    None => n.clone(),
                })
                .collect();
            let _ = writeln!(
                out,
                "  {} {:<10} {:>3}  {}",
                state.symbol(),
                state.label(),
                names.len(),
                names.join(" ")
            );
        }
        out
    }

    /// Plain lines for what changed since `before`.
    pub fn changes_since(&self, before: &Frame) -> Vec<String> {
        self.nodes
            .iter()
            .filter_map(|(name, now)| {
                let was = before.nodes.get(name).copied().unwrap_or(Shown::Idle);
                (was != *now).then(|| {
                    let note = self
                        .notes
                        .get(name)
                        .map(|n| format!(" [{n}]"))
                        .unwrap_or_default();
                    format!(
                        "[{:>6.1}s] {name:<8} {:<9} -> {:<9} (slots {}/{}){note}",
                        self.elapsed.as_secs_f64(),
                        was.label(),
                        now.label(),
                        self.slots_in_use(),
                        self.budget
                    )
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(states: &[(&str, Shown)]) -> Frame {
        Frame {
            nodes: states.iter().map(|(n, s)| ((*n).to_owned(), *s)).collect(),
            notes: BTreeMap::new(),
            budget: 2,
            elapsed: Duration::from_millis(1500),
        }
    }

    #[test]
    fn plain_lines_name_each_change() {
        let before = frame(&[("sim-1", Shown::Requested), ("sim-2", Shown::Idle)]);
        let after = frame(&[("sim-1", Shown::Draining), ("sim-2", Shown::Idle)]);
        assert_eq!(
            after.changes_since(&before),
            vec!["[   1.5s] sim-1    requested -> draining  (slots 1/2)"]
        );
    }

    #[test]
    fn the_block_counts_slots_against_the_budget() {
        let f = frame(&[("sim-1", Shown::Rebooting), ("sim-2", Shown::Back)]);
        let text = f.render();
        assert!(
            text.starts_with("   1.5s  slots in use 1/2  back 1/2"),
            "{text}"
        );
        assert!(text.contains("R rebooting    1  sim-1"), "{text}");
    }

    #[test]
    fn waiting_nodes_show_their_zone_and_why_they_wait() {
        let mut f = frame(&[("sim-1", Shown::Requested), ("sim-2", Shown::Soaking)]);
        f.notes
            .insert("sim-1".into(), "zone-a, zone budget full".into());
        let text = f.render();
        assert!(
            text.contains("? requested    1  sim-1(zone-a, zone budget full)"),
            "{text}"
        );
        assert!(text.contains("S soaking      1  sim-2"), "{text}");
        assert!(text.contains("slots in use 1/2"), "{text}");
    }
}
