//! The budgets a grant must fit in, counted from one rule (`common::unavailable`): the pool's
//! `--max-unavailable` and, with `--max-unavailable-per-zone`, each zone's. Part of the pure
//! decision core.

use crate::{node_view::NodeView, pool_index::PoolCounts};
use common::MaxUnavailable;
use std::collections::BTreeMap;

/// A zone: the value of the zone label; nodes without it form one zone of their own (`None`)
/// for counting, and are not granted while zone budgets are on.
pub type Zone<'a> = Option<&'a str>;

/// The slot holders, each with the zone its slot was granted in (`None`: not known, so it
/// counts against every zone).
pub type Holders = BTreeMap<String, Option<String>>;

/// `--max-unavailable` resolved against the pool, and `--max-unavailable-per-zone`.
pub type Budgets = (usize, Option<MaxUnavailable>);

/// Whether a request fits the budgets, and which one is full if not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    Granted,
    PoolFull,
    /// The pool has room, the node's zone has not.
    ZoneFull,
    /// Zone budgets are on and the node has no zone label: it is not granted until it has
    /// one, so that a late or missing label does not escape its real zone's budget.
    NoZone,
}

/// How many nodes are unavailable, in the pool and per zone, as grants are added in a round.
#[derive(Debug)]
pub struct Usage<'a> {
    unavailable: BTreeMap<&'a str, bool>,
    in_use: usize,
    zone_in_use: BTreeMap<Zone<'a>, usize>,
    zone_size: BTreeMap<Zone<'a>, usize>,
    /// Slot holders whose zone is not known (the cache lacks the node, or the ledger did not
    /// record the zone of its grant): they count in every zone.
    unplaced: usize,
    /// Of those, how many each zone already counts (by the holder's current label).
    unplaced_here: BTreeMap<Zone<'a>, usize>,
    budget: usize,
    zone_budget: Option<MaxUnavailable>,
}

impl<'a> Usage<'a> {
    /// Counts `nodes` (with the slot holders `slots`) and `others` (the rest of the pool,
    /// none of which holds a slot) against the budgets. A node outside the pool counts only
    /// while it holds a slot; one that another pool selects too counts in both. An unavailable node counts in the zone its label says; a slot
    /// holder also in the zone its slot was granted in (a relabel does not move a slot out of
    /// its zone), and in every zone when that is not known.
    pub fn count(
        nodes: &'a [NodeView],
        others: &'a PoolCounts,
        slots: &'a Holders,
        (budget, zone_budget): Budgets,
    ) -> Self {
        let mut usage = Usage {
            unavailable: BTreeMap::new(),
            in_use: others.unavailable(),
            zone_in_use: BTreeMap::new(),
            zone_size: BTreeMap::new(),
            unplaced: 0,
            unplaced_here: BTreeMap::new(),
            budget,
            zone_budget,
        };
        for (zone, count) in &others.zones {
            usage.zone_size.insert(zone.as_deref(), count.size);
            usage.zone_in_use.insert(zone.as_deref(), count.unavailable);
        }
        for view in nodes {
            let slot = slots.get(view.name());
            let holds = slot.is_some();
            let counts = if view.counted() {
                *usage.zone_size.entry(view.zone.as_deref()).or_default() += 1;
                common::unavailable(&view.facts, &view.state, holds)
            } else {
                holds
            };
            usage.unavailable.insert(view.name(), counts);
            if counts {
                let here = view.zone.as_deref();
                usage.in_use += 1;
                *usage.zone_in_use.entry(here).or_default() += 1;
                match slot {
                    Some(Some(granted)) if Some(granted.as_str()) != here => {
                        *usage.zone_in_use.entry(Some(granted)).or_default() += 1;
                    }
                    Some(None) => {
                        usage.unplaced += 1;
                        *usage.unplaced_here.entry(here).or_default() += 1;
                    }
                    _ => {}
                }
            }
        }
        let missing = slots
            .keys()
            .filter(|s| !usage.unavailable.contains_key(s.as_str()))
            .count();
        usage.unplaced += missing;
        usage.in_use += missing;
        usage
    }

    fn already(&self, view: &NodeView) -> bool {
        self.unavailable.get(view.name()).copied().unwrap_or(false)
    }

    /// Unavailable nodes in the zone, the unplaced slot holders included (once each).
    pub fn in_zone(&self, zone: Zone<'_>) -> usize {
        let counted_here = self.unplaced_here.get(&zone).copied().unwrap_or(0);
        self.zone_in_use.get(&zone).copied().unwrap_or(0) + self.unplaced - counted_here
    }

    /// Whether granting `view` keeps both budgets: the OTHER unavailable nodes stay below
    /// each (a node already unavailable does not count against its own grant).
    pub fn admits(&self, view: &NodeView) -> Admission {
        let already = usize::from(self.already(view));
        let zone = view.zone.as_deref();
        if self.zone_budget.is_some() && zone.is_none() {
            return Admission::NoZone;
        }
        let pool_ok = self.in_use - already < self.budget;
        let zone_ok = self.zone_budget.is_none_or(|per_zone| {
            let size = self.zone_size.get(&zone).copied().unwrap_or(1);
            self.in_zone(zone) - already < per_zone.resolve(size)
        });
        match (pool_ok, zone_ok) {
            (true, true) => Admission::Granted,
            (true, false) => Admission::ZoneFull,
            (false, _) => Admission::PoolFull,
        }
    }

    /// Records a grant to `view`.
    pub fn take(&mut self, view: &'a NodeView) {
        if !self.already(view) {
            self.in_use += 1;
            *self.zone_in_use.entry(view.zone.as_deref()).or_default() += 1;
            self.unavailable.insert(view.name(), true);
        }
    }

    /// `candidates` (oldest first) reordered to alternate between zones, the zones with the
    /// fewest unavailable nodes first, so that one zone is not drained while others wait.
    pub fn spread<'v>(&self, candidates: Vec<&'v NodeView>) -> Vec<&'v NodeView> {
        let mut rank: BTreeMap<Zone<'_>, usize> = BTreeMap::new();
        let mut keyed: Vec<(usize, usize, &NodeView)> = candidates
            .into_iter()
            .enumerate()
            .map(|(order, view)| {
                let zone = view.zone.as_deref();
                let turn = rank.entry(zone).or_default();
                let key = self.zone_in_use.get(&zone).copied().unwrap_or(0) + *turn;
                *turn += 1;
                (key, order, view)
            })
            .collect();
        keyed.sort_by_key(|(key, order, _)| (*key, *order));
        keyed.into_iter().map(|(_, _, view)| view).collect()
    }
}
