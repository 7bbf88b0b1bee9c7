//! Asks Prometheus (and Alertmanager, for silences) whether alerts hold new reboots. It asks
//! only while requests wait for a slot, once per `--alert-check-period`: a pool with nothing
//! to do costs Prometheus nothing. An answer that did not come, or came wrong, holds the
//! gate closed: no new reboot while the cluster's health is unknown.

use controller_core::alerts::{AlertFilter, AlertsResponse, Silence};
use serde::de::DeserializeOwned;
use std::{
    sync::Arc,
    time::{Duration, Instant},
};
use tokio::sync::{Notify, watch};

/// What the last check found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AlertGate {
    /// Not asked yet, or the last answer is too old to act on.
    Unchecked,
    /// No alert that counts is active.
    Clear,
    /// These alerts hold new reboots (names, sorted).
    Firing(Vec<String>),
    /// Prometheus did not answer, or not as its API documents: held, fail-safe.
    Unreachable(String),
}

/// A check's result and when it was taken.
#[derive(Debug, Clone)]
pub struct AlertReading {
    pub gate: AlertGate,
    pub at: Option<Instant>,
}

impl AlertReading {
    /// The gate as a decision may use it: an answer older than two periods is no answer.
    pub fn current(&self, period: Duration) -> AlertGate {
        match self.at {
            Some(at) if at.elapsed() <= period * 2 => self.gate.clone(),
            _ => AlertGate::Unchecked,
        }
    }
}

/// Where and how to ask.
#[derive(Debug, Clone)]
pub struct AlertSettings {
    pub prometheus: String,
    pub alertmanager: Option<String>,
    pub filter: AlertFilter,
    pub timeout: Duration,
    pub period: Duration,
}

struct AlertSource {
    settings: AlertSettings,
    client: observability::http_get::HttpClient,
}

/// Starts the checks; `wanted` says whether requests are waiting (set by the leader's rounds),
/// and `changed` wakes the rounds after each check.
pub fn spawn(
    settings: AlertSettings,
    mut wanted: watch::Receiver<bool>,
    changed: Arc<Notify>,
) -> watch::Receiver<AlertReading> {
    let (tx, rx) = watch::channel(AlertReading {
        gate: AlertGate::Unchecked,
        at: None,
    });
    let source = AlertSource {
        client: observability::http_get::http_client(),
        settings,
    };
    tokio::spawn(async move {
        loop {
            if wanted.wait_for(|w| *w).await.is_err() {
                return;
            }
            let gate = source.check().await;
            let at = Some(Instant::now());
            if tx.send(AlertReading { gate, at }).is_err() {
                return;
            }
            changed.notify_one();
            tokio::time::sleep(source.settings.period).await;
        }
    });
    rx
}

impl AlertSource {
    async fn check(&self) -> AlertGate {
        let s = &self.settings;
        let alerts = match self
            .get::<AlertsResponse>(&s.prometheus, "/api/v1/alerts")
            .await
        {
            Ok(answer) => answer.data.alerts,
            Err(why) => return AlertGate::Unreachable(why),
        };
        let silences = match &s.alertmanager {
            None => Vec::new(),
            Some(url) => match self.get::<Vec<Silence>>(url, "/api/v2/silences").await {
                Ok(silences) => silences,
                Err(why) => {
                    // Without the silences every alert counts: the safe side.
                    tracing::warn!(%why, "cannot read Alertmanager's silences; every alert counts");
                    Vec::new()
                }
            },
        };
        let holding = s.filter.holding(&alerts, &silences);
        if holding.is_empty() {
            AlertGate::Clear
        } else {
            AlertGate::Firing(holding)
        }
    }

    /// GETs `base` + `path` and reads its JSON; the error names the URL and what went wrong.
    async fn get<T: DeserializeOwned>(&self, base: &str, path: &str) -> Result<T, String> {
        let url = format!("{}{path}", base.trim_end_matches('/'));
        let ask = async {
            let (status, body) = observability::http_get::get(&self.client, &url).await?;
            if !status.is_success() {
                let text = String::from_utf8_lossy(&body);
                return Err(format!("HTTP {status}: {}", text.trim()));
            }
            serde_json::from_slice(&body).map_err(|e| format!("unexpected answer: {e}"))
        };
        match tokio::time::timeout(self.settings.timeout, ask).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(why)) => Err(format!("{url}: {why}")),
            Err(_) => Err(format!(
                "{url}: no answer within --prometheus-timeout {:?}",
                self.settings.timeout
            )),
        }
    }
}
