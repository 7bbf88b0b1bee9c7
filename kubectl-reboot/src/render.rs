//! The status as text for people (a header and a table, like `kubectl get`) and as JSON for
//! scripts. Pure.

use crate::estimate::human;
use crate::status::{NodeStatus, State, Status};
use std::fmt::Write;

/// The text view: the pool, then each RebootPool the same way.
pub fn text(status: &Status) -> String {
    let mut out = one(status, !status.pools.is_empty());
    for pool in &status.pools {
        let _ = write!(out, "\n{}", one(pool, false));
    }
    out
}

/// One pool's text; `others`: RebootPools take some of the flags' pool's nodes.
fn one(status: &Status, others: bool) -> String {
    let mut out = String::new();
    let pool = &status.pool;
    let selector = match (&pool.name, pool.selector.is_empty()) {
        (Some(_), true) => "nodeSelector: every node".to_owned(),
        (Some(_), false) => format!("nodeSelector {}", pool.selector),
        (None, true) => "all nodes".to_owned(),
        (None, false) => format!("--node-selector {}", pool.selector),
    };
    let selector = if others {
        format!("{selector} that no RebootPool selects")
    } else {
        selector
    };
    let name = match &pool.name {
        Some(name) => format!("RebootPool {name}: "),
        None if others => "the flags' pool: ".to_owned(),
        None => String::new(),
    };
    let paused = if pool.paused { ", PAUSED" } else { "" };
    let _ = writeln!(
        out,
        "Pool:    {name}{} node{} ({selector}), ledger {}{paused}",
        pool.nodes,
        plural(pool.nodes),
        pool.ledger
    );
    let b = &status.budget;
    let slots = format!("{} slot{} in use", b.slots_in_use, plural(b.slots_in_use));
    let _ = match b.max_unavailable {
        Some(max) => writeln!(
            out,
            "Budget:  {} of {max} unavailable, {slots} (max-unavailable from {})",
            b.unavailable, b.source_detail
        ),
        None => writeln!(
            out,
            "Budget:  {} unavailable, {slots}; max-unavailable {}",
            b.unavailable, b.source_detail
        ),
    };
    if let Some(zones) = &b.per_zone {
        let each: Vec<String> = zones.iter().map(|(z, n)| format!("{z} {n}")).collect();
        let _ = writeln!(out, "         per zone: {}", each.join(", "));
    }
    if let Some(rollout) = &pool.rollout {
        let _ = writeln!(out, "Rollout: {}", rollout.summary);
    }
    let _ = writeln!(out, "Queue:   {}", status.estimate.summary);
    let _ = writeln!(out);
    let rows: Vec<[String; 5]> = status.nodes.iter().map(row).collect();
    let header = ["NODE", "STATE", "FOR", "STATUS", "DETAIL"].map(str::to_owned);
    let mut widths = header.clone().map(|h| h.len());
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    for row in std::iter::once(&header).chain(&rows) {
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            if i + 1 == row.len() {
                line.push_str(cell);
            } else {
                let _ = write!(line, "{cell:<width$}   ", width = widths[i]);
            }
        }
        let _ = writeln!(out, "{}", line.trim_end());
    }
    if status.nodes.is_empty() {
        let _ = writeln!(out, "(no node in the pool)");
    }
    for warning in &status.warnings {
        let _ = writeln!(out, "warning: {warning}");
    }
    out
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

fn row(node: &NodeStatus) -> [String; 5] {
    let name = if node.in_pool {
        node.name.clone()
    } else {
        format!("{} (left the pool)", node.name)
    };
    let state = match node.state {
        State::Idle if node.opted_out => "idle (opted out)".to_owned(),
        state => state.as_str().to_owned(),
    };
    let age = node.seconds.map(human).unwrap_or_default();
    let mut status = match node.ready {
        "True" => "Ready",
        "False" => "NotReady",
        other => other,
    }
    .to_owned();
    if node.cordoned {
        status.push_str(",Cordoned");
    }
    [name, state, age, status, node.detail.clone()]
}

/// The JSON view: one pretty document, or one compact line (for `--watch`).
pub fn json(status: &Status, compact: bool) -> String {
    let written = if compact {
        serde_json::to_string(status)
    } else {
        serde_json::to_string_pretty(status)
    };
    written.unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
}
