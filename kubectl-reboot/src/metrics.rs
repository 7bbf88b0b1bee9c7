//! The controller's `/metrics`, when reachable: the budget as the controller resolved it
//! (`node_reboot_max_unavailable`), and the reboot durations it measured. Reading the text is
//! pure; fetching it is a plain GET (http or https, the system's CAs).

use crate::error::Error;
use serde::Serialize;
use std::time::Duration;

/// What the plugin uses of the controller's metrics.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Reading {
    pub max_unavailable: Option<usize>,
    pub slots_in_use: Option<usize>,
    pub paused: Option<bool>,
    pub leader: Option<bool>,
    pub reboot_duration_sum: Option<f64>,
    pub reboot_duration_count: Option<f64>,
    /// The health gates that hold new reboots now (`node_reboot_gate_open{gate} 0`).
    pub gates_closed: Vec<String>,
}

impl Reading {
    /// The mean of the reboots this controller process completed.
    pub fn mean_reboot_seconds(&self) -> Option<f64> {
        match (self.reboot_duration_sum, self.reboot_duration_count) {
            (Some(sum), Some(count)) if count > 0.0 => Some(sum / count),
            _ => None,
        }
    }
}

/// The value of one series without labels in OpenMetrics text.
fn value(text: &str, name: &str) -> Option<f64> {
    text.lines().find_map(|line| {
        let rest = line.strip_prefix(name)?.strip_prefix(' ')?;
        rest.split_whitespace().next()?.parse().ok()
    })
}

/// The gates of `node_reboot_gate_open{gate="..."}` whose value is 0.
fn gates_closed(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|line| {
            let labels = line.strip_prefix("node_reboot_gate_open{")?;
            let (labels, value) = labels.split_once('}')?;
            let value: f64 = value.split_whitespace().next()?.parse().ok()?;
            let gate = labels.split_once("gate=\"")?.1.split_once('"')?.0;
            (value == 0.0).then(|| gate.to_owned())
        })
        .collect()
}

/// Reads the controller's metrics text; an error when it is not the controller's.
pub fn parse(text: &str) -> Result<Reading, String> {
    let count = |name| value(text, name).map(|v| v.max(0.0) as usize);
    let flag = |name| value(text, name).map(|v| v > 0.0);
    let reading = Reading {
        max_unavailable: count("node_reboot_max_unavailable"),
        slots_in_use: count("node_reboot_slots_in_use"),
        paused: flag("node_reboot_paused"),
        leader: flag("node_reboot_leader"),
        reboot_duration_sum: value(text, "node_reboot_reboot_duration_seconds_sum"),
        reboot_duration_count: value(text, "node_reboot_reboot_duration_seconds_count"),
        gates_closed: gates_closed(text),
    };
    if reading.max_unavailable.is_none() {
        return Err(
            "no node_reboot_max_unavailable in the answer: not the controller's /metrics"
                .to_owned(),
        );
    }
    Ok(reading)
}

/// `url` as given, with `/metrics` added when it names no path.
pub fn metrics_url(url: &str) -> String {
    let trimmed = url.trim_end_matches('/');
    let without_scheme = trimmed.split_once("://").map_or(trimmed, |(_, rest)| rest);
    if without_scheme.contains('/') {
        trimmed.to_owned()
    } else {
        format!("{trimmed}/metrics")
    }
}

/// GETs the controller's metrics, within `timeout`.
pub async fn fetch(url: &str, timeout: Duration) -> Result<Reading, Error> {
    let fail = |why: String| Error::Metrics(why);
    let client = observability::http_get::http_client();
    let ask = async {
        let (status, body) = observability::http_get::get(&client, url).await?;
        if !status.is_success() {
            return Err(format!("HTTP {status}"));
        }
        parse(&String::from_utf8_lossy(&body))
    };
    match tokio::time::timeout(timeout, ask).await {
        Ok(result) => result.map_err(fail),
        Err(_) => Err(fail(format!("no answer within {timeout:?}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_controllers_gauges_are_read() {
        let text = "# TYPE node_reboot_max_unavailable gauge\n\
                    node_reboot_max_unavailable 2\n\
                    node_reboot_max_unavailable_per_zone 1\n\
                    node_reboot_slots_in_use 1\n\
                    node_reboot_paused 1\n\
                    node_reboot_leader 0\n\
                    node_reboot_reboot_duration_seconds_sum 30.5\n\
                    node_reboot_reboot_duration_seconds_count 2\n\
                    node_reboot_gate_open{gate=\"alerts\"} 0\n\
                    node_reboot_gate_open{gate=\"blocking_pods\"} 1\n\
                    # EOF\n";
        let reading = parse(text).unwrap();
        assert_eq!(reading.max_unavailable, Some(2));
        assert_eq!(reading.slots_in_use, Some(1));
        assert_eq!(reading.paused, Some(true));
        assert_eq!(reading.leader, Some(false));
        assert_eq!(reading.mean_reboot_seconds(), Some(15.25));
        assert_eq!(reading.gates_closed, ["alerts"]);
        assert!(
            parse("up 1\n")
                .unwrap_err()
                .contains("not the controller's")
        );
    }

    #[test]
    fn a_bare_address_gets_the_metrics_path() {
        assert_eq!(
            metrics_url("http://127.0.0.1:8080"),
            "http://127.0.0.1:8080/metrics"
        );
        assert_eq!(
            metrics_url("http://127.0.0.1:8080/"),
            "http://127.0.0.1:8080/metrics"
        );
        assert_eq!(
            metrics_url("http://h:8080/metrics"),
            "http://h:8080/metrics"
        );
        assert_eq!(metrics_url("https://h/x/metrics"), "https://h/x/metrics");
    }
}
