//! The health gates: what holds new reboots besides the schedule. Alerts (Prometheus, with
//! Alertmanager's silences) and cluster-scoped blocking pods hold the whole pool; a blocking
//! pod on a node holds that node. Reboots under way always finish.

pub mod alert_watch;
pub mod blocking_pods;
pub mod preflight;
pub mod refusal;

use crate::{
    cluster::events::Reason,
    gates::{
        alert_watch::{AlertGate, AlertReading},
        blocking_pods::{Blocking, BlockingPods},
    },
    metrics::Metrics,
};
use common::events::NOTE_REQUESTED;
use std::{collections::BTreeSet, time::Duration};
use tokio::sync::watch;

/// The alert checks: their results, how old a result may be, and the "requests wait" signal
/// that starts and stops them.
#[derive(Debug)]
pub struct AlertChecks {
    pub readings: watch::Receiver<AlertReading>,
    pub period: Duration,
    pub prometheus: String,
    pub wanted: watch::Sender<bool>,
}

/// Why the pool holds: the Event its waiting nodes get, if it is worth one (a check that is
/// merely under way is not).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolHold {
    pub gate: &'static str,
    pub event: Option<(Reason, String)>,
}

/// What the gates say in one round.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GateReading {
    /// Why the whole pool holds, if it does.
    pub pool: Option<PoolHold>,
    /// The blocking pods, by node (node scope).
    pub blocking: Blocking,
}

impl GateReading {
    pub fn blocked_nodes(&self) -> BTreeSet<String> {
        self.blocking.node_names()
    }

    /// The Event of a node a blocking pod holds.
    pub fn blocked_event(&self, node: &str) -> (Reason, String) {
        let pods = self.blocking.nodes.get(node).map(|p| p.join(", "));
        let note = format!(
            "{NOTE_REQUESTED}waiting while a blocking pod runs on the node ({}; \
             --blocking-pod-selector)",
            pods.unwrap_or_default()
        );
        (Reason::BlockingPod, note)
    }
}

/// The gates of a leading controller.
#[derive(Debug, Default)]
pub struct Gates {
    pods: Option<BlockingPods>,
    alerts: Option<AlertChecks>,
    /// Per gate, the last state logged (None: open), to log only when it changes.
    logged: [Option<String>; 2],
}

const ALERTS: usize = 0;
const PODS: usize = 1;
const NAMES: [&str; 2] = ["alerts", "blocking_pods"];

impl Gates {
    pub fn new(pods: Option<BlockingPods>, alerts: Option<AlertChecks>) -> Self {
        Self {
            pods,
            alerts,
            logged: [None, None],
        }
    }

    /// Reads every gate; logs and sets the metric of each one whose state changed.
    pub fn read(&mut self, metrics: &Metrics) -> GateReading {
        let alerts = self.alerts.as_ref().map_or(Ok(()), alert_hold);
        // The gauge and the log follow Prometheus' last answer: an idle pool asks nothing,
        // and its gate is not "closed" for that (decisions do not use an old answer).
        let alerts_shown = self
            .alerts
            .as_ref()
            .map(|c| shown(&c.readings.borrow().gate));
        let (pods, blocking) = match self.pods.as_ref().map(BlockingPods::now) {
            None => (Ok(()), Blocking::default()),
            Some(Err(unlisted)) => (Err(unlisted_hold(&unlisted)), Blocking::default()),
            Some(Ok(blocking)) if blocking.anywhere.is_empty() => (Ok(()), blocking),
            Some(Ok(blocking)) => (Err(anywhere_hold(&blocking.anywhere)), blocking),
        };
        let pods_shown = self.pods.as_ref().map(|_| match &pods {
            Err(PoolHold { event: None, .. }) => Shown::Checking,
            Err(PoolHold {
                event: Some((_, why)),
                ..
            }) => Shown::Closed(why.clone()),
            Ok(()) => Shown::Open,
        });
        for (i, state) in [alerts_shown, pods_shown].into_iter().enumerate() {
            if let Some(state) = state {
                self.log_change(i, state, metrics);
            }
        }
        metrics.blocked_nodes.set(blocking.nodes.len() as i64);
        let pool = [alerts, pods].into_iter().find_map(Result::err);
        GateReading { pool, blocking }
    }

    /// Starts or stops the alert checks: they run only while requests wait for them.
    pub fn want_checks(&self, waiting: bool) {
        if let Some(alerts) = &self.alerts {
            alerts
                .wanted
                .send_if_modified(|w| std::mem::replace(w, waiting) != waiting);
        }
    }

    fn log_change(&mut self, i: usize, state: Shown, metrics: &Metrics) {
        let now = match state {
            Shown::Checking => return,
            Shown::Open => None,
            Shown::Closed(why) => Some(why),
        };
        metrics.gate_open(NAMES[i], now.is_none());
        if now == self.logged[i] {
            return;
        }
        match &now {
            Some(why) => tracing::warn!(gate = NAMES[i], "health gate closed: {why}"),
            None => tracing::info!(gate = NAMES[i], "health gate open"),
        }
        self.logged[i] = now;
    }
}

/// A gate's state as the gauge and the log show it.
enum Shown {
    /// No answer yet: neither open nor closed is known.
    Checking,
    Open,
    Closed(String),
}

fn shown(gate: &AlertGate) -> Shown {
    match gate {
        AlertGate::Unchecked => Shown::Checking,
        AlertGate::Clear => Shown::Open,
        AlertGate::Firing(names) => Shown::Closed(format!("alerts active: {}", names.join(", "))),
        AlertGate::Unreachable(why) => Shown::Closed(format!("cannot ask Prometheus: {why}")),
    }
}

fn alert_hold(checks: &AlertChecks) -> Result<(), PoolHold> {
    let gate = checks.readings.borrow().current(checks.period);
    let event = match gate {
        AlertGate::Clear => return Ok(()),
        AlertGate::Unchecked => None,
        AlertGate::Firing(names) => Some((
            Reason::AlertsFiring,
            format!(
                "{NOTE_REQUESTED}waiting while alerts are active: {} (Prometheus {})",
                names.join(", "),
                checks.prometheus
            ),
        )),
        AlertGate::Unreachable(why) => Some((
            Reason::PrometheusUnreachable,
            format!(
                "{NOTE_REQUESTED}waiting: cannot ask Prometheus whether alerts are active, so \
                 no new reboot starts until it answers ({why})"
            ),
        )),
    };
    Err(PoolHold {
        gate: NAMES[ALERTS],
        event,
    })
}

fn unlisted_hold(selectors: &[String]) -> PoolHold {
    tracing::debug!(?selectors, "blocking pods not listed yet");
    PoolHold {
        gate: NAMES[PODS],
        event: None,
    }
}

fn anywhere_hold(pods: &[String]) -> PoolHold {
    let note = format!(
        "{NOTE_REQUESTED}waiting while blocking pods run in the cluster: {} \
         (--blocking-pod-selector-scope=cluster)",
        pods.join(", ")
    );
    PoolHold {
        gate: NAMES[PODS],
        event: Some((Reason::BlockingPod, note)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    fn gates(gate: AlertGate, at: Option<Instant>) -> Gates {
        let (_tx, readings) = watch::channel(AlertReading { gate, at });
        let (wanted, _) = watch::channel(false);
        let checks = AlertChecks {
            readings,
            period: Duration::from_secs(30),
            prometheus: "http://prometheus:9090".into(),
            wanted,
        };
        Gates::new(None, Some(checks))
    }

    fn reason(reading: &GateReading) -> Option<Option<Reason>> {
        let pool = reading.pool.as_ref()?;
        Some(pool.event.as_ref().map(|(reason, _)| *reason))
    }

    #[test]
    fn only_a_fresh_clear_answer_opens_the_alert_gate() {
        let (metrics, _) = Metrics::new();
        let now = Some(Instant::now());
        let clear = gates(AlertGate::Clear, now).read(&metrics);
        assert_eq!(reason(&clear), None);
        let firing = gates(AlertGate::Firing(vec!["NodeDown".into()]), now).read(&metrics);
        assert_eq!(reason(&firing), Some(Some(Reason::AlertsFiring)));
        let note = &firing.pool.unwrap().event.unwrap().1;
        assert!(
            note.contains("NodeDown") && note.contains("http://prometheus:9090"),
            "{note}"
        );
        let down = gates(AlertGate::Unreachable("refused".into()), now).read(&metrics);
        assert_eq!(reason(&down), Some(Some(Reason::PrometheusUnreachable)));
        // Not asked yet, or asked too long ago: held, without an Event (a check is coming).
        let unasked = gates(AlertGate::Unchecked, None).read(&metrics);
        assert_eq!(reason(&unasked), Some(None));
        let old = Instant::now().checked_sub(Duration::from_secs(61));
        let stale = gates(AlertGate::Clear, old).read(&metrics);
        assert_eq!(reason(&stale), Some(None));
    }
}
