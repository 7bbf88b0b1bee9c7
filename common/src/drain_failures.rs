//! The value of `reboot-drain-failures`: how many drains of a node's standing request failed,
//! and what blocked the last one, as `3; blocked by shop/db-0: …`. The controller writes it
//! when it gives a failed drain's slot back; with `--drain-attempts`, a node that failed that
//! many times is set aside (never granted again) until an administrator removes the value.

/// What the controller recorded of a node's failed drains.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DrainFailures {
    /// How many drains of the standing request failed.
    pub count: u32,
    /// What blocked the last one (`shop/db-0: …; …`), empty when not known.
    pub blocking: String,
}

impl DrainFailures {
    /// Reads a value; `None` when it does not start with a count (edited by hand): the node is
    /// then read as set aside, which does less, and a Warning says so.
    pub fn read(value: &str) -> Option<Self> {
        let (count, blocking) = value.split_once(';').unwrap_or((value, ""));
        let count = count.trim().parse().ok()?;
        let blocking = blocking.trim();
        let blocking = blocking.strip_prefix("blocked by").unwrap_or(blocking);
        Some(Self {
            count,
            blocking: blocking.trim().to_owned(),
        })
    }

    /// The value after one more failed drain, blocked by `blocking` (each pod with why).
    pub fn next(recorded: Option<&str>, blocking: &[String]) -> Self {
        // A value that cannot be read already sets the node aside: the count starts over.
        let count = recorded.and_then(Self::read).map_or(0, |f| f.count);
        Self {
            count: count.saturating_add(1),
            blocking: blocking.join("; "),
        }
    }

    /// The annotation's value.
    pub fn to_value(&self) -> String {
        if self.blocking.is_empty() {
            self.count.to_string()
        } else {
            format!("{}; blocked by {}", self.count, self.blocking)
        }
    }

    /// Whether a node with this value is set aside under `--drain-attempts` (`attempts`).
    /// A value that cannot be read sets it aside: it does less.
    pub fn sets_aside(value: Option<&str>, attempts: Option<u32>) -> bool {
        match (value, attempts) {
            (Some(value), Some(attempts)) => Self::read(value).is_none_or(|f| f.count >= attempts),
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_round_trips_and_counts_up() {
        let pods = ["shop/db-0: PodDisruptionBudget shop/db allows no disruption".to_owned()];
        let first = DrainFailures::next(None, &pods);
        assert_eq!(first.count, 1);
        let value = first.to_value();
        assert_eq!(
            value,
            "1; blocked by shop/db-0: PodDisruptionBudget shop/db allows no disruption"
        );
        assert_eq!(DrainFailures::read(&value), Some(first));
        let second = DrainFailures::next(Some(&value), &[]);
        assert_eq!(second.to_value(), "2");
        assert_eq!(DrainFailures::read(" 2 ").map(|f| f.count), Some(2));
    }

    #[test]
    fn a_node_is_set_aside_at_the_attempts_and_a_value_typed_by_hand_sets_it_aside() {
        assert!(!DrainFailures::sets_aside(Some("1"), Some(2)));
        assert!(DrainFailures::sets_aside(Some("2; blocked by x"), Some(2)));
        assert!(DrainFailures::sets_aside(Some("3"), Some(2)));
        // Without --drain-attempts nothing is set aside, whatever the count.
        assert!(!DrainFailures::sets_aside(Some("9"), None));
        assert!(!DrainFailures::sets_aside(None, Some(1)));
        for typed in ["yes", "", "two", "-1"] {
            assert!(DrainFailures::sets_aside(Some(typed), Some(5)), "{typed}");
            assert_eq!(DrainFailures::read(typed), None, "{typed}");
        }
        // A count that could not be read starts over.
        assert_eq!(DrainFailures::next(Some("oops"), &[]).count, 1);
    }
}
