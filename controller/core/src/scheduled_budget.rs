//! Budgets by schedule (`--scheduled-budget`): a budget that applies while its window is open,
//! such as `1 Mon-Fri 06:00-22:00 Europe/Berlin` (one node by day on weekdays) or
//! `0 2026-12-20..2027-01-03` (nothing during a freeze). `--max-unavailable` always applies;
//! of it and the scheduled budgets in force, the lowest applies. A budget that falls below
//! what is under way revokes nothing: it only keeps new reboots from starting until the pool
//! is under it. Pure: the time and the pool's size are arguments.

use crate::window::Period;
use common::MaxUnavailable;
use jiff::Timestamp;
use std::{fmt, str::FromStr};

/// The accepted syntax, shown with every parse error.
pub const SCHEDULED_BUDGET_SYNTAX: &str = "a scheduled budget is `BUDGET WHEN`: BUDGET is a \
    number of nodes (0 or more) or a percentage of the pool (`25%`), WHEN is anything \
    --reboot-window takes or a range of dates, such as `1 Mon-Fri 06:00-22:00 Europe/Berlin`, \
    `0 2026-12-20..2027-01-03 Europe/Berlin` (a freeze) or `0 0 0 20 12 * 336h` (from every \
    20 December, for two weeks)";

/// One `--scheduled-budget`.
#[derive(Debug, Clone, PartialEq)]
pub struct ScheduledBudget {
    /// `Count(0)` stops new reboots while it applies.
    pub max_unavailable: MaxUnavailable,
    pub when: Period,
}

impl fmt::Display for ScheduledBudget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.max_unavailable, self.when)
    }
}

impl FromStr for ScheduledBudget {
    type Err = String;

    fn from_str(text: &str) -> Result<ScheduledBudget, String> {
        let fail = |why: String| {
            format!("invalid scheduled budget `{text}`: {why}; {SCHEDULED_BUDGET_SYNTAX}")
        };
        let (budget, when) = text
            .trim()
            .split_once(char::is_whitespace)
            .ok_or_else(|| fail("expected a budget and when it applies".to_owned()))?;
        let max_unavailable = match budget.trim_end_matches('%').parse::<u32>() {
            Ok(0) => MaxUnavailable::Count(0),
            _ => budget.parse().map_err(|e: common::MaxUnavailableError| {
                fail(format!("`{budget}` is not a budget ({e})"))
            })?,
        };
        let when = when.parse().map_err(fail)?;
        Ok(ScheduledBudget {
            max_unavailable,
            when,
        })
    }
}

impl ScheduledBudget {
    /// The number of nodes it allows in a pool of `pool_size`: a percentage rounds down and
    /// allows at least 1, as `--max-unavailable` does; 0 is 0.
    pub fn resolve(&self, pool_size: usize) -> usize {
        self.max_unavailable.resolve(pool_size)
    }
}

/// `--max-unavailable` and the budgets by schedule.
#[derive(Debug, Clone, PartialEq)]
pub struct Budgets {
    pub base: MaxUnavailable,
    pub scheduled: Vec<ScheduledBudget>,
}

/// The budget in force at one instant.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct InForce<'a> {
    /// Nodes that may be unavailable.
    pub budget: usize,
    /// The scheduled budget that set it; `None`: `--max-unavailable`.
    pub scheduled: Option<&'a ScheduledBudget>,
}

impl Budgets {
    pub fn new(base: MaxUnavailable) -> Budgets {
        Budgets {
            base,
            scheduled: Vec::new(),
        }
    }

    /// The lowest of `--max-unavailable` and the scheduled budgets in force at `now`, in a
    /// pool of `pool_size`; the first given wins a tie.
    pub fn at(&self, pool_size: usize, now: Timestamp) -> InForce<'_> {
        let base = InForce {
            budget: self.base.resolve(pool_size),
            scheduled: None,
        };
        self.scheduled
            .iter()
            .filter(|s| s.when.is_active(now))
            .map(|s| InForce {
                budget: s.resolve(pool_size),
                scheduled: Some(s),
            })
            .fold(
                base,
                |lowest, b| if b.budget < lowest.budget { b } else { lowest },
            )
    }

    /// After `now`, the first moment a scheduled budget starts or stops applying.
    pub fn next_change(&self, now: Timestamp) -> Option<Timestamp> {
        self.scheduled
            .iter()
            .filter_map(|s| s.when.next_change(now))
            .min()
    }
}

impl fmt::Display for InForce<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.scheduled {
            Some(s) => write!(f, "{}, the scheduled budget `{s}`,", self.budget),
            None => write!(f, "{}", self.budget),
        }
    }
}

impl fmt::Display for Budgets {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.base)?;
        for s in &self.scheduled {
            write!(f, ", {} during {}", s.max_unavailable, s.when)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(utc: &str) -> Timestamp {
        utc.parse().expect("an RFC 3339 instant")
    }

    fn budgets(base: &str, scheduled: &[&str]) -> Budgets {
        Budgets {
            base: base.parse().unwrap(),
            scheduled: scheduled.iter().map(|s| s.parse().unwrap()).collect(),
        }
    }

    #[test]
    fn the_lowest_budget_in_force_applies() {
        // 25% at night, 1 by day on weekdays, nothing during the freeze.
        let b = budgets(
            "25%",
            &["1 Mon-Fri 06:00-22:00", "0 2026-12-20..2027-01-03"],
        );
        // 2026-11-23 is a Monday.
        assert_eq!(b.at(40, at("2026-11-23T23:00:00Z")).budget, 10, "night");
        let day = b.at(40, at("2026-11-23T12:00:00Z"));
        assert_eq!(day.budget, 1, "day");
        assert_eq!(day.scheduled, Some(&b.scheduled[0]));
        assert_eq!(b.at(40, at("2026-11-28T12:00:00Z")).budget, 10, "Saturday");
        assert_eq!(b.at(40, at("2026-12-24T23:00:00Z")).budget, 0, "the freeze");
        assert_eq!(b.at(40, at("2027-01-04T00:00:00Z")).budget, 10, "after it");
    }

    #[test]
    fn a_scheduled_budget_never_raises_the_base() {
        let b = budgets("2", &["50% daily 00:00-24:00"]);
        assert_eq!(b.at(40, at("2026-11-23T12:00:00Z")).budget, 2);
        assert_eq!(b.at(40, at("2026-11-23T12:00:00Z")).scheduled, None);
    }

    #[test]
    fn its_changes_are_the_windows_changes() {
        let b = budgets("3", &["1 Mon-Fri 06:00-22:00"]);
        assert_eq!(
            b.next_change(at("2026-11-23T12:00:00Z")),
            Some(at("2026-11-23T22:00:00Z"))
        );
        assert_eq!(
            Budgets::new(MaxUnavailable::Count(3)).next_change(at("2026-11-23T12:00:00Z")),
            None
        );
    }

    #[test]
    fn bad_scheduled_budgets_name_the_problem_and_the_syntax() {
        for (bad, why) in [
            ("1", "expected a budget and when"),
            ("-1 daily 01:00-02:00", "negative"),
            ("many daily 01:00-02:00", "not a number"),
            ("2 sometimes", "not a range of dates"),
            ("150% daily 01:00-02:00", "exceed 100%"),
        ] {
            let err = bad.parse::<ScheduledBudget>().unwrap_err();
            assert!(err.contains(why), "{bad}: {err}");
            assert!(err.contains("BUDGET WHEN"), "{bad}: {err}");
        }
        let zero: ScheduledBudget = "0% daily 01:00-02:00".parse().unwrap();
        assert_eq!(zero.resolve(100), 0);
        assert_eq!(zero.to_string(), "0 daily 01:00-02:00");
    }
}
