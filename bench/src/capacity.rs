//! Whether the machine can hold the next fleet size: the scale scenario stops at the first size
//! it cannot, with the reason, instead of pushing the machine (which may be shared) into the
//! OOM killer or waiting for hours. Judged from what the control plane took so far: its memory
//! per node, projected to the next size, against the memory the machine has available; and the
//! rate nodes were created at, against a time limit.

use crate::scenarios::ControlPlaneMemory;
use serde::Serialize;
use std::time::Duration;

/// The growth of the API server's and etcd's memory is projected with this much to spare: the
/// watch cache's history and the garbage collector's headroom grow with the rate of status
/// reports, which grows with the fleet.
const MARGIN: f64 = 1.25;

/// The control plane after a fleet size was measured.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Observed {
    pub nodes: usize,
    pub memory: ControlPlaneMemory,
    /// Nodes created per second for this size.
    pub created_per_second: f64,
}

/// What the machine has now.
#[derive(Debug, Clone, Copy)]
pub struct Machine {
    pub available_gib: f64,
    pub reserve_gib: f64,
    pub create_limit: Duration,
}

/// The control plane's memory per node in MiB: the growth between the last two sizes, or the
/// whole of the only one (which overstates it: the API server's own start is in it; the scale
/// scenario starts its history with the control plane before its nodes).
fn mib_per_node(history: &[Observed]) -> Option<f64> {
    match history {
        [.., a, b] if b.nodes > a.nodes => {
            let grew = b.memory.rss_mib() - a.memory.rss_mib();
            Some((grew / (b.nodes - a.nodes) as f64).max(0.0))
        }
        [.., b] if b.nodes > 0 => Some(b.memory.rss_mib() / b.nodes as f64),
        _ => None,
    }
}

/// Why the machine cannot hold `next` nodes, if it cannot.
pub fn refuse(history: &[Observed], next: usize, machine: Machine) -> Option<String> {
    let last = history.last()?;
    let more = next.saturating_sub(last.nodes);
    let per_node = mib_per_node(history)?;
    let needed_gib = per_node * more as f64 * MARGIN / 1024.0;
    if machine.available_gib - needed_gib < machine.reserve_gib {
        return Some(format!(
            "memory: the API server and etcd took {:.0} KiB per node so far ({:.0} + {:.0} MiB \
             at {} nodes), so {more} more nodes would need about {needed_gib:.1} GiB; the \
             machine has {:.1} GiB available and keeps {:.1} GiB free",
            per_node * 1024.0,
            last.memory.apiserver_rss_mib,
            last.memory.etcd_rss_mib,
            last.nodes,
            machine.available_gib,
            machine.reserve_gib
        ));
    }
    if last.created_per_second > 0.0 {
        let seconds = more as f64 / last.created_per_second;
        if seconds > machine.create_limit.as_secs_f64() {
            return Some(format!(
                "creation time: {more} more nodes at the {:.0} per second measured would take \
                 {:.0} min, more than the {:.0} min allowed",
                last.created_per_second,
                seconds / 60.0,
                machine.create_limit.as_secs_f64() / 60.0
            ));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn observed(nodes: usize, apiserver: f64, etcd: f64) -> Observed {
        Observed {
            nodes,
            memory: ControlPlaneMemory {
                apiserver_rss_mib: apiserver,
                etcd_rss_mib: etcd,
                etcd_db_mib: 0.0,
            },
            created_per_second: 250.0,
        }
    }

    fn machine(available_gib: f64) -> Machine {
        Machine {
            available_gib,
            reserve_gib: 3.0,
            create_limit: Duration::from_secs(1200),
        }
    }

    #[test]
    fn the_growth_between_sizes_is_projected() {
        // 0.1 MiB per node between 1,000 and 5,000: 60,000 more need 7.3 GiB with the margin.
        let history = [observed(1_000, 500.0, 100.0), observed(5_000, 800.0, 200.0)];
        assert_eq!(refuse(&history, 65_000, machine(12.0)), None);
        let refused = refuse(&history, 65_000, machine(10.0)).expect("refused");
        assert!(refused.starts_with("memory:"), "{refused}");
        assert!(refused.contains("102 KiB per node"), "{refused}");
    }

    #[test]
    fn one_size_counts_all_its_memory_and_slow_creation_refuses() {
        assert_eq!(refuse(&[], 1_000, machine(1.0)), None, "nothing known yet");
        let one = [observed(1_000, 400.0, 112.0)];
        assert!(refuse(&one, 5_000, machine(4.0)).is_some());
        let refused = refuse(&one, 400_000, machine(1000.0)).expect("refused");
        assert!(refused.starts_with("creation time:"), "{refused}");
    }
}
