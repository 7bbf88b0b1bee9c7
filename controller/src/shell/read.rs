//! The round's read step: what it takes in before it decides, such as the drains that ended
//! since the last round.

use super::Shell;
use crate::{cluster::events::Reason, drain::DrainOutcome, drain::tracker::Finished, notify::Kind};
use std::collections::BTreeMap;

impl Shell {
    /// Takes in the drains that ended since the last round: each one's metric, log, Event and
    /// notification, and the Event of the delay before its reboot.
    pub(super) fn collect_drain_outcomes(&mut self) {
        let now = self.wall_ms();
        for (finished, ended) in self.drains.finished(now) {
            let Finished {
                grant,
                node,
                outcome,
                took,
            } = finished;
            let name = node.metadata.name.clone().unwrap_or_default();
            match outcome {
                DrainOutcome::Drained { evicted, .. } => {
                    self.metrics.drain_finished("drained", took);
                    tracing::info!(node = %name, %grant, evicted, took = ?took, "drained");
                    let details = serde_json::json!({
                        "evicted": evicted,
                        "seconds": took.as_secs_f64(),
                    });
                    self.notify_node(Kind::NodeDrained, &name, details);
                }
                DrainOutcome::Superseded => {
                    tracing::info!(node = %name, %grant, "drain stopped: the node no longer holds its grant");
                }
                DrainOutcome::TimedOut { blocking, .. } if ended.forced => {
                    self.metrics.drain_finished("timed_out", took);
                    self.metrics.reboots_forced.inc();
                    let pods = blocking_list(&blocking);
                    tracing::warn!(node = %name, blocking = ?pods, "drain timed out; rebooting anyway (--force-reboot)");
                    let note = format!(
                        "drain timed out after --drain-timeout ({}); --force-reboot: rebooting \
                         anyway with {} pod(s) still on the node: {}",
                        crate::drain::humantime(took),
                        blocking.len(),
                        pods.join("; ")
                    );
                    self.events.publish(&node, Reason::RebootForced, note);
                }
                DrainOutcome::TimedOut { blocking, .. } => {
                    let pods = blocking_list(&blocking);
                    self.metrics.drain_finished("timed_out", took);
                    self.metrics.drain_timeouts.inc();
                    self.metrics.reboot_failed("drain_timeout");
                    tracing::warn!(node = %name, blocking = ?pods, "drain timed out; giving the slot back");
                    let note = format!(
                        "drain timed out; node uncordoned and slot released, retried later; blocked by {}",
                        pods.join("; ")
                    );
                    self.events.publish(&node, Reason::DrainBlocked, note);
                }
            }
            let delay = self.schedule.reboot_delay;
            if ended.first && !delay.is_zero() {
                let note = format!(
                    "drained; reboot-now in {} (--reboot-delay)",
                    crate::drain::humantime(delay)
                );
                tracing::info!(node = %name, %grant, "{note}");
                self.events
                    .publish_action(&node, Reason::Draining, "RebootDelayed", note);
            }
        }
    }
}

/// Each pod still on a node whose drain timed out, with why.
fn blocking_list(blocking: &BTreeMap<String, String>) -> Vec<String> {
    blocking
        .iter()
        .map(|(pod, why)| format!("{pod}: {why}"))
        .collect()
}
