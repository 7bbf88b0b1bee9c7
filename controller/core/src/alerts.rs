//! Which Prometheus alerts hold new reboots (`--prometheus-url`, `--alert-filter`,
//! `--alert-firing-only`, `--alertmanager-url`). Pure: it reads the JSON that Prometheus'
//! `/api/v1/alerts` and Alertmanager's `/api/v2/silences` return.

use regex::Regex;
use serde::Deserialize;
use std::collections::{BTreeMap, BTreeSet};

/// Prometheus' answer to `GET /api/v1/alerts`.
#[derive(Debug, Deserialize)]
pub struct AlertsResponse {
    pub data: AlertsData,
}

#[derive(Debug, Deserialize)]
pub struct AlertsData {
    pub alerts: Vec<Alert>,
}

/// One active alert: `pending` (its `for` has not passed yet) or `firing`.
#[derive(Debug, Clone, Deserialize)]
pub struct Alert {
    pub labels: BTreeMap<String, String>,
    pub state: String,
}

impl Alert {
    pub fn name(&self) -> &str {
        self.labels.get("alertname").map_or("", String::as_str)
    }
}

/// One silence of Alertmanager's `GET /api/v2/silences` (expired and pending ones included).
#[derive(Debug, Clone, Deserialize)]
pub struct Silence {
    pub status: SilenceStatus,
    pub matchers: Vec<Matcher>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct SilenceStatus {
    pub state: String,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Matcher {
    pub name: String,
    pub value: String,
    #[serde(default)]
    pub is_regex: bool,
    #[serde(default = "yes")]
    pub is_equal: bool,
}

fn yes() -> bool {
    true
}

impl Silence {
    /// Whether this silence is in force and mutes an alert with these labels: every matcher
    /// must match, as Alertmanager decides it (regexes anchored at both ends; a missing label
    /// is the empty string).
    pub fn mutes(&self, labels: &BTreeMap<String, String>) -> bool {
        self.status.state == "active"
            && !self.matchers.is_empty()
            && self.matchers.iter().all(|m| m.matches(labels))
    }
}

impl Matcher {
    fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        let value = labels.get(&self.name).map_or("", String::as_str);
        let equal = if self.is_regex {
            // A regex Alertmanager accepted that this one cannot read mutes nothing.
            Regex::new(&format!("^(?:{})$", self.value)).is_ok_and(|re| re.is_match(value))
        } else {
            value == self.value
        };
        equal == self.is_equal
    }
}

/// How `--alert-filter` is applied to alert names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum FilterMode {
    /// Alerts whose names match do NOT hold reboots (kured's `--alert-filter-regexp`).
    #[default]
    Exclude,
    /// Only alerts whose names match hold reboots (kured's `--alert-filter-match-only`).
    Include,
}

/// Which alerts count.
#[derive(Debug, Clone, Default)]
pub struct AlertFilter {
    pub names: Option<Regex>,
    pub mode: FilterMode,
    /// Pending alerts (their `for` has not passed) count too unless this is set.
    pub firing_only: bool,
}

impl AlertFilter {
    /// The names of the alerts that hold new reboots, sorted and without repeats.
    pub fn holding(&self, alerts: &[Alert], silences: &[Silence]) -> Vec<String> {
        let names: BTreeSet<&str> = alerts
            .iter()
            .filter(|a| a.state == "firing" || (!self.firing_only && a.state == "pending"))
            .filter(|a| self.counts(a.name()))
            .filter(|a| !silences.iter().any(|s| s.mutes(&a.labels)))
            .map(Alert::name)
            .collect();
        names.into_iter().map(str::to_owned).collect()
    }

    fn counts(&self, name: &str) -> bool {
        match (&self.names, self.mode) {
            (None, _) => true,
            (Some(re), FilterMode::Exclude) => !re.is_match(name),
            (Some(re), FilterMode::Include) => re.is_match(name),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn alerts() -> Vec<Alert> {
        let body = json!({"status": "success", "data": {"alerts": [
            {"labels": {"alertname": "NodeDown", "severity": "critical", "instance": "n1"},
             "annotations": {}, "state": "firing", "activeAt": "2026-11-23T10:00:00Z", "value": "1e+00"},
            {"labels": {"alertname": "NodeDown", "severity": "critical", "instance": "n2"},
             "annotations": {}, "state": "firing", "activeAt": "2026-11-23T10:00:00Z", "value": "1e+00"},
            {"labels": {"alertname": "DiskFilling", "severity": "warning"},
             "annotations": {}, "state": "pending", "activeAt": "2026-11-23T10:00:00Z", "value": "1e+00"},
            {"labels": {"alertname": "Watchdog", "severity": "none"},
             "annotations": {}, "state": "firing", "activeAt": "2026-11-23T10:00:00Z", "value": "1e+00"}
        ]}});
        serde_json::from_value::<AlertsResponse>(body)
            .unwrap()
            .data
            .alerts
    }

    fn silence(state: &str, matchers: serde_json::Value) -> Silence {
        serde_json::from_value(json!({
            "id": "s1", "status": {"state": state}, "matchers": matchers,
            "startsAt": "2026-11-23T10:00:00Z", "endsAt": "2026-11-23T12:00:00Z",
            "createdBy": "admin", "comment": "known"
        }))
        .unwrap()
    }

    #[test]
    fn every_active_alert_holds_by_default_once_per_name() {
        let filter = AlertFilter::default();
        assert_eq!(
            filter.holding(&alerts(), &[]),
            ["DiskFilling", "NodeDown", "Watchdog"]
        );
        let firing_only = AlertFilter {
            firing_only: true,
            ..AlertFilter::default()
        };
        assert_eq!(
            firing_only.holding(&alerts(), &[]),
            ["NodeDown", "Watchdog"]
        );
    }

    #[test]
    fn the_filter_excludes_or_includes_by_name() {
        let exclude = AlertFilter {
            names: Some(Regex::new("^(Watchdog|Disk.*)$").unwrap()),
            ..AlertFilter::default()
        };
        assert_eq!(exclude.holding(&alerts(), &[]), ["NodeDown"]);
        let include = AlertFilter {
            mode: FilterMode::Include,
            ..exclude
        };
        assert_eq!(include.holding(&alerts(), &[]), ["DiskFilling", "Watchdog"]);
    }

    #[test]
    fn an_active_silence_mutes_the_alerts_all_its_matchers_match() {
        let filter = AlertFilter::default();
        let n1 = silence(
            "active",
            json!([{"name": "alertname", "value": "NodeDown", "isRegex": false, "isEqual": true},
                   {"name": "instance", "value": "n1", "isRegex": false}]),
        );
        assert_eq!(
            filter.holding(&alerts(), std::slice::from_ref(&n1)),
            ["DiskFilling", "NodeDown", "Watchdog"],
            "n2's NodeDown still fires"
        );
        let all_but_critical = silence(
            "active",
            json!([{"name": "severity", "value": "crit.*", "isRegex": true, "isEqual": false}]),
        );
        assert_eq!(filter.holding(&alerts(), &[all_but_critical]), ["NodeDown"]);
        let anchored = silence(
            "active",
            json!([{"name": "alertname", "value": "Node", "isRegex": true}]),
        );
        assert_eq!(
            filter.holding(&alerts(), &[anchored]).len(),
            3,
            "no partial match"
        );
        let expired = silence(
            "expired",
            json!([{"name": "alertname", "value": ".+", "isRegex": true}]),
        );
        assert_eq!(filter.holding(&alerts(), &[expired]).len(), 3);
        let missing_label = silence(
            "active",
            json!([{"name": "team", "value": "", "isRegex": false}]),
        );
        assert!(
            filter.holding(&alerts(), &[missing_label]).is_empty(),
            "a missing label equals the empty string, as in Alertmanager"
        );
    }
}
