//! The plan as text for people: a header, then each wave with its nodes, then the nodes no
//! wave reaches and why. Pure.

use crate::estimate::human;
use crate::plan::{Plan, WavePlan};
use k8s_openapi::jiff::Timestamp;
use std::fmt::Write;

/// The text view.
pub fn text(plan: &Plan) -> String {
    let mut out = String::new();
    let s = &plan.settings;
    let selector = if plan.selector.is_empty() {
        "all nodes".to_owned()
    } else {
        format!("--node-selector {}", plan.selector)
    };
    let _ = writeln!(out, "Pool:     {selector}, ledger {}", plan.ledger);
    let budget = s.max_unavailable.map_or("?".to_owned(), |m| m.to_string());
    let zone = s
        .max_unavailable_per_zone
        .as_deref()
        .map(|z| format!(", {z} per zone ({})", s.zone_label))
        .unwrap_or_default();
    let _ = writeln!(
        out,
        "Budget:   {budget} at a time{zone} (from {})",
        s.budget_from
    );
    let windows = if s.windows.is_empty() {
        "always (no --reboot-window given)".to_owned()
    } else {
        s.windows.join(" or ")
    };
    let _ = writeln!(out, "Windows:  {windows}");
    if !s.scheduled_budgets.is_empty() {
        let _ = writeln!(
            out,
            "Budgets:  {} while under way (the lowest applies)",
            s.scheduled_budgets.join("; ")
        );
    }
    if !s.blackouts.is_empty() {
        let _ = writeln!(
            out,
            "Blackout: {} (nothing new starts)",
            s.blackouts.join("; ")
        );
    }
    let reboot = match (s.reboot_seconds, s.reboot_from) {
        (Some(r), "flag") => format!("{} (--reboot-duration)", human(r.round() as i64)),
        (Some(r), from) => format!("{} (from the {from})", human(r.round() as i64)),
        (None, _) => "unknown".to_owned(),
    };
    let soak = if s.min_ready_seconds > 0 {
        format!(
            ", then {} Ready (--min-ready-seconds)",
            human(s.min_ready_seconds as i64)
        )
    } else {
        String::new()
    };
    let _ = writeln!(out, "Reboot:   {reboot}{soak}");
    if let Some(rollout) = rollout(plan) {
        let _ = writeln!(out, "Rollout:  {rollout}");
    }
    let _ = writeln!(out, "Order:    {}", plan.order);
    if let Some(held) = plan.held_by {
        let _ = writeln!(out, "Held:     {held}: no wave starts until that changes");
    }
    let _ = writeln!(out, "Plan:     {}", plan.summary);
    let now: Option<Timestamp> = plan.time.parse().ok();
    if !plan.under_way.is_empty() {
        let _ = writeln!(out);
        let _ = writeln!(out, "Under way (holding a slot):");
        for node in &plan.under_way {
            let _ = writeln!(
                out,
                "  {}  slot free {}",
                node.name,
                when(node.frees_at.as_deref(), now)
            );
        }
    }
    for wave in &plan.waves {
        let _ = writeln!(out);
        let _ = writeln!(out, "{}", wave_line(wave, now));
        let width = wave.nodes.iter().map(|n| n.name.len()).max().unwrap_or(0);
        for node in &wave.nodes {
            let mut line = format!("  {:<width$}", node.name);
            if let Some(zone) = &node.zone {
                let _ = write!(line, "  zone {zone}");
            }
            if !node.waited_for.is_empty() {
                let _ = write!(line, "  waited: {}", node.waited_for.join(", "));
            }
            let _ = writeln!(out, "{}", line.trim_end());
        }
    }
    if !plan.left.is_empty() {
        let _ = writeln!(out);
        let _ = writeln!(out, "Not planned:");
        let width = plan.left.iter().map(|n| n.name.len()).max().unwrap_or(0);
        for node in &plan.left {
            let _ = writeln!(
                out,
                "  {:<width$}  {}: {}",
                node.name, node.reason, node.detail
            );
        }
    }
    let _ = writeln!(out);
    for note in &plan.notes {
        let _ = writeln!(out, "note: {note}");
    }
    for warning in &plan.warnings {
        let _ = writeln!(out, "warning: {warning}");
    }
    out
}

/// The rollout's rules and where the rollout under way stands, if either.
fn rollout(plan: &Plan) -> Option<String> {
    let s = &plan.settings;
    let mut rules = Vec::new();
    if s.canary > 0 {
        let soak = match s.canary_soak_seconds {
            0 => String::new(),
            soak => format!(", soaked {} (canarySoak)", human(soak as i64)),
        };
        rules.push(format!("the first {} alone (canary){soak}", s.canary));
    }
    if s.waves {
        rules.push("waves that double (waves)".to_owned());
    }
    if let Some(most) = &s.max_failures {
        rules.push(format!("stalls past {most} failed (maxFailures)"));
    }
    if let Some(now) = &plan.rollout {
        rules.push(format!("under way: {now}"));
    }
    (!rules.is_empty()).then(|| rules.join("; "))
}

fn wave_line(wave: &WavePlan, now: Option<Timestamp>) -> String {
    let mut line = format!(
        "Wave {} ({} node{}): starts {}",
        wave.wave,
        wave.nodes.len(),
        if wave.nodes.len() == 1 { "" } else { "s" },
        when(wave.start.as_deref(), now)
    );
    if wave.end.is_some() {
        let _ = write!(line, ", slots free {}", when(wave.end.as_deref(), now));
    }
    if wave.window_opening.is_some() {
        line.push_str(", in the next window opening");
    }
    line
}

/// `now`, `in 1h20m (Tue 2026-11-24 22:20:00Z)`, or `after the wave before` when unknown.
fn when(at: Option<&str>, now: Option<Timestamp>) -> String {
    let Some(at) = at.and_then(|t| t.parse::<Timestamp>().ok()) else {
        return "after the one before (time unknown)".to_owned();
    };
    let stamp = at.strftime("%a %Y-%m-%d %H:%M:%SZ");
    match now.map(|n| at.duration_since(n).as_secs()) {
        Some(0) => format!("now ({stamp})"),
        Some(s) if s > 0 => format!("in {} ({stamp})", human(s)),
        _ => stamp.to_string(),
    }
}

/// The JSON view: one pretty document.
pub fn json(plan: &Plan) -> String {
    serde_json::to_string_pretty(plan).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
}
