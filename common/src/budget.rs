//! `--max-unavailable`: how many nodes of the pool may be unavailable at once, as a count
//! (`3`) or a percentage of the pool (`25%`), like a Deployment's `maxUnavailable`. `0` (or
//! `0%`) holds every new reboot, as a PodDisruptionBudget's or a MachineConfigPool's does: the
//! reboots under way finish.

use std::{fmt, str::FromStr};
use thiserror::Error;

/// A budget of unavailable nodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MaxUnavailable {
    Count(u32),
    /// Percent of the pool, 0 to 100.
    Percent(u32),
}

/// A `--max-unavailable` value that is not a budget.
#[derive(Debug, Error, PartialEq, Eq)]
#[error(
    "invalid --max-unavailable {value:?}: {why}; use a whole number of nodes (for example `2`) \
     or a percentage of the pool up to 100% (for example `25%`); 0 holds every new reboot"
)]
pub struct MaxUnavailableError {
    value: String,
    why: &'static str,
}

/// A whole number or a percentage (`3`, `25%`, blanks around ignored): the number and whether
/// it is a percentage, or why it is neither.
pub(crate) fn count_or_percent(value: &str) -> Result<(u32, bool), &'static str> {
    let trimmed = value.trim();
    let (digits, percent) = match trimmed.strip_suffix('%') {
        Some(digits) => (digits, true),
        None => (trimmed, false),
    };
    if digits.starts_with('-') {
        return Err("it is negative");
    }
    if digits.is_empty() || !digits.chars().all(|c| c.is_ascii_digit()) {
        return Err("it is not a number");
    }
    let number = digits.parse().map_err(|_| "it is too large")?;
    Ok((number, percent))
}

impl FromStr for MaxUnavailable {
    type Err = MaxUnavailableError;

    fn from_str(value: &str) -> Result<Self, Self::Err> {
        let fail = |why| MaxUnavailableError {
            value: value.to_owned(),
            why,
        };
        match count_or_percent(value).map_err(fail)? {
            (101.., true) => Err(fail("a percentage cannot exceed 100%")),
            (n, true) => Ok(Self::Percent(n)),
            (n, false) => Ok(Self::Count(n)),
        }
    }
}

impl fmt::Display for MaxUnavailable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Count(n) => write!(f, "{n}"),
            Self::Percent(p) => write!(f, "{p}%"),
        }
    }
}

impl MaxUnavailable {
    /// A RebootPool's budget field as its spec gives it (`2`, `"25%"`): read as the flag
    /// reads its value, so that the controller and the plugin agree on every value.
    pub fn from_spec(
        value: &k8s_openapi::apimachinery::pkg::util::intstr::IntOrString,
    ) -> Result<Self, MaxUnavailableError> {
        use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
        match value {
            IntOrString::Int(n) => n.to_string().parse(),
            // As a Deployment's: a string is a percentage, written without blanks.
            IntOrString::String(text) if text.trim() != text || !text.ends_with('%') => {
                Err(MaxUnavailableError {
                    value: text.clone(),
                    why: "a string must be a percentage such as \"25%\" (a number of nodes is \
                          written as a number)",
                })
            }
            IntOrString::String(text) => text.parse(),
        }
    }

    /// The number of nodes that may be unavailable in a pool of `pool_size` nodes. A
    /// percentage rounds down, as a Deployment's does, but never below 1 so that a small pool
    /// still makes progress; `0%` is 0, as `0` is: no new reboot.
    pub fn resolve(self, pool_size: usize) -> usize {
        match self {
            Self::Count(n) => n as usize,
            Self::Percent(0) => 0,
            Self::Percent(p) => (pool_size * p as usize / 100).max(1),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_percentages_parse() {
        assert_eq!("3".parse(), Ok(MaxUnavailable::Count(3)));
        assert_eq!("25%".parse(), Ok(MaxUnavailable::Percent(25)));
        assert_eq!("100%".parse(), Ok(MaxUnavailable::Percent(100)));
    }

    #[test]
    fn a_specs_string_is_a_percentage() {
        use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
        let read = |v| MaxUnavailable::from_spec(&v);
        assert_eq!(read(IntOrString::Int(2)), Ok(MaxUnavailable::Count(2)));
        assert_eq!(
            read(IntOrString::String("25%".into())),
            Ok(MaxUnavailable::Percent(25))
        );
        for bad in ["25", " 25%", "25% "] {
            let err = read(IntOrString::String(bad.into())).unwrap_err();
            assert!(err.to_string().contains("a percentage"), "{bad}: {err}");
        }
    }

    #[test]
    fn zero_holds_every_new_reboot() {
        assert_eq!("0".parse(), Ok(MaxUnavailable::Count(0)));
        assert_eq!("0%".parse(), Ok(MaxUnavailable::Percent(0)));
        assert_eq!(MaxUnavailable::Count(0).resolve(10), 0);
        assert_eq!(MaxUnavailable::Percent(0).resolve(10), 0);
    }

    #[test]
    fn bad_values_name_the_problem_and_the_fix() {
        for (bad, why) in [
            ("-1", "negative"),
            ("abc", "not a number"),
            ("150%", "exceed 100%"),
            ("", "not a number"),
            ("99999999999", "too large"),
        ] {
            let err = bad.parse::<MaxUnavailable>().unwrap_err().to_string();
            assert!(err.contains(why), "{bad}: {err}");
            assert!(err.contains("for example `25%`"), "{bad}: {err}");
        }
    }

    #[test]
    fn percentages_round_down_but_allow_one() {
        assert_eq!(MaxUnavailable::Percent(25).resolve(12), 3);
        assert_eq!(MaxUnavailable::Percent(25).resolve(10), 2);
        assert_eq!(MaxUnavailable::Percent(10).resolve(3), 1);
        assert_eq!(MaxUnavailable::Count(3).resolve(1), 3);
    }
}
