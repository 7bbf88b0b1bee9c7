//! kured's settings as this operator's chart values, as docs/src/migrating-from-kured.md maps
//! them, and what cannot be translated, each with why and what to do instead.

use super::flags::{IN_PROGRESS_ANNOTATION, LOCK_ANNOTATION, MOST_RECENT_ANNOTATION, Settings};
use super::window::{self, Translated};
use super::{HostMount, Kured};
use common::duration::duration_text;
use std::fmt::Write as _;

/// One chart value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    Text(String),
    Int(i64),
    Bool(bool),
    List(Vec<String>),
}

/// A chart value under `agent.flags` or `controller.flags`, with a comment to show above it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub program: Program,
    pub key: &'static str,
    pub value: Value,
    pub comment: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Program {
    Agent,
    Controller,
}

/// The values, and what was not translated: (the setting, why and what to do instead).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Translation {
    pub entries: Vec<Entry>,
    pub not_translated: Vec<(String, String)>,
    /// What to know that needs nothing set.
    pub notes: Vec<String>,
    /// The arguments of `--cleanup` for what this kured leaves on the nodes.
    pub cleanup_args: Vec<String>,
}

impl Translation {
    fn set(&mut self, program: Program, key: &'static str, value: Value) {
        self.entries.push(Entry {
            program,
            key,
            value,
            comment: None,
        });
    }

    fn set_with(&mut self, program: Program, key: &'static str, value: Value, comment: String) {
        self.entries.push(Entry {
            program,
            key,
            value,
            comment: Some(comment),
        });
    }

    fn not(&mut self, what: impl Into<String>, why: impl Into<String>) {
        self.not_translated.push((what.into(), why.into()));
    }

    /// The value of `key`, if set.
    pub fn get(&self, program: Program, key: &str) -> Option<&Value> {
        self.entries
            .iter()
            .find(|e| e.program == program && e.key == key)
            .map(|e| &e.value)
    }
}

/// A Go duration (`time.ParseDuration`: `1h30m`, `1.5h`, `300ms`, `2m0s`) as the operator's
/// (`1h30m`, `300ms`); `None` if Go would refuse it, or it is negative.
pub fn go_duration(text: &str) -> Option<std::time::Duration> {
    let text = text.trim();
    if text == "0" {
        return Some(std::time::Duration::ZERO);
    }
    let mut rest = text.strip_prefix('+').unwrap_or(text);
    if rest.is_empty() || rest.starts_with('-') {
        return None;
    }
    let mut nanos: f64 = 0.0;
    while !rest.is_empty() {
        let end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let number: f64 = rest[..end].parse().ok()?;
        rest = &rest[end..];
        let unit_end = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_end] {
            "ns" => 1.0,
            "us" | "µs" | "μs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            _ => return None,
        };
        rest = &rest[unit_end..];
        nanos += number * scale;
    }
    Some(std::time::Duration::from_nanos(nanos.round() as u64))
}

/// Translates kured's settings.
pub fn translate(kured: &Kured) -> Translation {
    let s = &kured.settings;
    let mut t = Translation::default();
    for (what, why) in &s.ignored {
        t.not(what.clone(), why.clone());
    }
    use Program::{Agent, Controller};

    sentinel(s, &kured.host_mounts, &mut t);
    if let Some(period) = s.one("period") {
        duration(&mut t, "period", period, Agent, "checkPeriod", false);
    }
    if let Some(command) = s
        .one("reboot-command")
        .filter(|c| *c != "/bin/systemctl reboot")
    {
        t.set(Agent, "rebootCommand", Value::Text(command.to_owned()));
    }
    if let Some(method) = s.one("reboot-method") {
        match method {
            "command" | "signal" => t.set(Agent, "rebootMethod", Value::Text(method.to_owned())),
            other => t.not(
                format!("--reboot-method={other}"),
                "kured knows only command and signal; agent.flags.rebootMethod is command, \
                 signal or syscall",
            ),
        }
    }
    if let Some(signal) = s.one("reboot-signal") {
        match signal.parse::<i64>() {
            Ok(n) if (1..=64).contains(&n) && n != 32 && n != 33 => {
                t.set(Agent, "rebootSignal", Value::Int(n))
            }
            _ => t.not(
                format!("--reboot-signal={signal}"),
                "not a signal number the agent sends (1 to 64, not 32 or 33); set \
                 agent.flags.rebootSignal",
            ),
        }
    }

    if let Some(concurrency) = s.one("concurrency") {
        match concurrency.parse::<i64>() {
            Ok(n) if n >= 1 => {
                t.set_with(
                    Controller,
                    "concurrency",
                    Value::Int(n),
                    format!("kured's concurrency: {n} of the operator's own reboots at once."),
                );
                t.set_with(
                    Controller,
                    "maxUnavailable",
                    Value::Int(2 * n),
                    format!(
                        "The capacity floor: at most {} nodes unavailable at once, NotReady and \
                         cordoned nodes counted too (kured counted only its own reboots), which \
                         leaves room for {n} cordoned for repair.",
                        2 * n
                    ),
                );
            }
            _ => t.not(
                format!("--concurrency={concurrency}"),
                "not a number of nodes of at least 1; set controller.flags.concurrency",
            ),
        }
    }
    if let Some(d) = s.one("drain-timeout") {
        duration(&mut t, "drain-timeout", d, Controller, "drainTimeout", true);
    }
    if let Some(seconds) = s.one("drain-grace-period") {
        match seconds.parse::<i64>() {
            Ok(n) if n < 0 => {}
            Ok(n) => t.set(Controller, "drainGracePeriod", Value::Text(format!("{n}s"))),
            Err(_) => t.not(
                format!("--drain-grace-period={seconds}"),
                "not a number of seconds; set controller.flags.drainGracePeriod (a duration)",
            ),
        }
    }
    if let Some(selector) = s.one("drain-pod-selector").filter(|v| !v.is_empty()) {
        t.set(
            Controller,
            "drainPodSelector",
            Value::Text(selector.to_owned()),
        );
    }
    if let Some(seconds) = s.one("skip-wait-for-delete-timeout") {
        match seconds.parse::<u64>() {
            Ok(0) => {}
            Ok(n) => t.set_with(
                Controller,
                "drainSkipWaitForDeleteMargin",
                Value::Text(duration_text(std::time::Duration::from_secs(n))),
                "kured's skip-wait-for-delete-timeout: here on NotReady nodes only, added to \
                 each pod's grace period."
                    .to_owned(),
            ),
            Err(_) => t.not(
                format!("--skip-wait-for-delete-timeout={seconds}"),
                "not a number of seconds; set controller.flags.drainSkipWaitForDeleteMargin",
            ),
        }
    }
    if s.on("force-reboot") {
        t.set_with(
            Controller,
            "forceReboot",
            Value::Bool(true),
            "DANGEROUS, as in kured: after drainTimeout the node is rebooted anyway.".to_owned(),
        );
    }
    if let Some(d) = s.one("drain-delay") {
        duration(&mut t, "drain-delay", d, Controller, "drainDelay", true);
    }
    if let Some(d) = s.one("reboot-delay") {
        duration(&mut t, "reboot-delay", d, Controller, "rebootDelay", true);
    }
    if let Some(d) = s.one("lock-release-delay") {
        match go_duration(d) {
            Some(d) if d.is_zero() => {}
            Some(d) => t.set_with(
                Controller,
                "minReadySeconds",
                Value::Int(
                    i64::try_from(d.as_secs() + u64::from(d.subsec_nanos() > 0))
                        .unwrap_or(i64::MAX),
                ),
                "kured's lock-release-delay: the slot is kept until the node has been Ready this \
                 long."
                    .to_owned(),
            ),
            None => t.not(
                format!("--lock-release-delay={d}"),
                "not a Go duration kured reads",
            ),
        }
    }
    if let Some(d) = s.one("lock-ttl") {
        match go_duration(d) {
            Some(d) if d.is_zero() => {}
            Some(d) => t.set_with(
                Controller,
                "giveUpAfter",
                Value::Text(duration_text(d)),
                "kured's lock-ttl: a NotReady node not completed within it is given up, and the \
                 rollout goes on."
                    .to_owned(),
            ),
            None => t.not(format!("--lock-ttl={d}"), "not a Go duration kured reads"),
        }
    }

    match window::translate(
        s.list("reboot-days"),
        s.one("start-time"),
        s.one("end-time"),
        s.one("time-zone"),
    ) {
        Translated::Always => {}
        Translated::Window { window, comment } => match comment {
            Some(c) => t.set_with(Controller, "rebootWindow", Value::List(vec![window]), c),
            None => t.set(Controller, "rebootWindow", Value::List(vec![window])),
        },
        Translated::Not(why) => t.not(
            "--reboot-days, --start-time, --end-time, --time-zone",
            format!(
                "{why}; set controller.flags.rebootWindow (`Mon-Fri 22:00-06:00 Europe/Berlin`)"
            ),
        ),
    }

    if let Some(url) = s.one("prometheus-url").filter(|v| !v.is_empty()) {
        if url.starts_with("http://") || url.starts_with("https://") {
            t.set(Controller, "prometheusUrl", Value::Text(url.to_owned()));
        } else {
            t.not(
                format!("--prometheus-url={url}"),
                "not an http(s) URL; set controller.flags.prometheusUrl",
            );
        }
    }
    if let Some(filter) = s.one("alert-filter-regexp").filter(|v| !v.is_empty()) {
        t.set(Controller, "alertFilter", Value::Text(filter.to_owned()));
    }
    if s.on("alert-filter-match-only") {
        t.set(
            Controller,
            "alertFilterMode",
            Value::Text("include".to_owned()),
        );
    }
    if s.on("alert-firing-only") {
        t.set(Controller, "alertFiringOnly", Value::Bool(true));
    }
    let blocking = s.list("blocking-pod-selector");
    if !blocking.is_empty() {
        t.set(
            Controller,
            "blockingPodSelector",
            Value::List(blocking.to_vec()),
        );
    }
    if let Some(taint) = s.one("prefer-no-schedule-taint").filter(|v| !v.is_empty()) {
        t.set(
            Controller,
            "preferNoScheduleTaint",
            Value::Text(taint.to_owned()),
        );
        t.cleanup_args
            .push(format!("--prefer-no-schedule-taint={taint}"));
    }
    labels(s, &mut t);
    notify(s, &mut t);
    for (flag, key) in [
        ("message-template-drain", "messageTemplateDrain"),
        ("message-template-reboot", "messageTemplateReboot"),
        ("message-template-uncordon", "messageTemplateUncordon"),
    ] {
        if let Some(text) = s.one(flag).filter(|v| !v.is_empty()) {
            t.set(Controller, key, Value::Text(text.to_owned()));
        }
    }
    if let Some(format) = s.one("log-format") {
        match format {
            "text" | "json" => {
                t.set(Agent, "logFormat", Value::Text(format.to_owned()));
                t.set(Controller, "logFormat", Value::Text(format.to_owned()));
            }
            other => t.not(format!("--log-format={other}"), "kured reads text or json"),
        }
    }
    metrics(s, &mut t);

    let lock = s
        .one("lock-annotation")
        .filter(|v| !v.is_empty())
        .unwrap_or(LOCK_ANNOTATION);
    t.notes.push(format!(
        "kured's lock ({lock} on DaemonSet {}/{}, --ds-namespace, --ds-name, --lock-annotation) \
         is the ledger Lease here: nothing to set.",
        kured.namespace, kured.name
    ));
    if let Some(holder) = &kured.lock_holder {
        t.notes.push(format!(
            "kured's lock is held now ({holder}): remove kured only once it is released."
        ));
    }
    if s.on("annotate-nodes") {
        t.notes.push(format!(
            "--annotate-nodes: the protocol is node annotations here, always; kured's \
             {IN_PROGRESS_ANNOTATION} and {MOST_RECENT_ANNOTATION} are removed by --cleanup."
        ));
        t.cleanup_args.push("--annotate-nodes".to_owned());
    }
    t
}

/// A kured duration flag as the chart value `key` (`0` is left out when `zero_is_default`).
fn duration(
    t: &mut Translation,
    flag: &str,
    text: &str,
    program: Program,
    key: &'static str,
    zero_is_default: bool,
) {
    match go_duration(text) {
        Some(d) if d.is_zero() && zero_is_default => {}
        Some(d) if d.is_zero() => t.not(
            format!("--{flag}={text}"),
            "zero is no period; leave the chart's default",
        ),
        Some(d) => t.set(program, key, Value::Text(duration_text(d))),
        None => t.not(
            format!("--{flag}={text}"),
            format!("not a Go duration kured reads; set {key}"),
        ),
    }
}

/// The sentinel: a command, or a file as seen through the container's host path mounts.
fn sentinel(s: &Settings, mounts: &[HostMount], t: &mut Translation) {
    use Program::Agent;
    if let Some(command) = s.one("reboot-sentinel-command").filter(|v| !v.is_empty()) {
        t.set_with(
            Agent,
            "rebootSentinelCommand",
            Value::Text(command.to_owned()),
            "kured's sentinel command, run in the host's mount namespace; exit 0 means a reboot \
             is needed, as in kured (rebootSentinelExitCode)."
                .to_owned(),
        );
        return;
    }
    let file = s
        .one("reboot-sentinel")
        .unwrap_or("/var/run/reboot-required");
    let on_host = mounts.iter().find_map(|m| {
        let inside = file.strip_prefix(m.mount_path.trim_end_matches('/'))?;
        (inside.is_empty() || inside.starts_with('/'))
            .then(|| format!("{}{inside}", m.host_path.trim_end_matches('/')))
    });
    let Some(host) = on_host else {
        t.not(
            format!("--reboot-sentinel={file}"),
            "no host path is mounted there in kured's container, so kured looked inside its own \
             container; set agent.flags.rebootSentinelFile to the host's file under \
             /host/var/run, or agent.flags.rebootSentinelCommand",
        );
        return;
    };
    if host.starts_with("/var/run/") || host.starts_with("/run/") {
        let under = host.strip_prefix("/var").unwrap_or(&host);
        let under = under.strip_prefix("/run").unwrap_or(under);
        t.set_with(
            Agent,
            "rebootSentinelFile",
            Value::Text(format!("/host/var/run{under}")),
            format!("kured's sentinel, the host's {host} (off by default here)."),
        );
    } else {
        t.set_with(
            Agent,
            "rebootSentinelCommand",
            Value::Text(format!("test -f {host}")),
            format!(
                "kured's sentinel, the host's {host}: the chart mounts only the host's /var/run, \
                 and the command runs in the host's mount namespace."
            ),
        );
    }
}

fn labels(s: &Settings, t: &mut Translation) {
    for (flag, key) in [
        ("pre-reboot-node-labels", "preRebootNodeLabels"),
        ("post-reboot-node-labels", "postRebootNodeLabels"),
    ] {
        let mut kept = Vec::new();
        for label in s.list(flag) {
            match label.split_once('=') {
                Some((k, v)) if !k.is_empty() && !v.contains('=') => {
                    kept.push(label.clone());
                    // A post-reboot label is a node's steady state, which the operator's own
                    // postRebootNodeLabels keeps: removing it is asked for by hand.
                    if flag == "pre-reboot-node-labels" {
                        t.cleanup_args.push(format!("--{flag}={label}"));
                    }
                }
                _ => t.not(
                    format!("--{flag}={label}"),
                    "not key=value: kured skipped it too",
                ),
            }
        }
        if !kept.is_empty() && flag == "post-reboot-node-labels" {
            t.notes.push(format!(
                "kured's post-reboot labels ({}) stay on the nodes after --cleanup: the operator \
                 sets them after each reboot too. To remove them, add \
                 --post-reboot-node-labels={} to --cleanup.",
                kept.join(", "),
                kept.join(",")
            ));
        }
        if !kept.is_empty() {
            t.set(Program::Controller, key, Value::List(kept));
        }
    }
}

/// kured's notify URL (which wins over the Slack hook) or its Slack hook.
fn notify(s: &Settings, t: &mut Translation) {
    let strip = |v: &str| {
        let b = v.as_bytes();
        if b.len() > 2 && b[0] == b[b.len() - 1] && matches!(b[0], b'"' | b'\'') {
            v[1..v.len() - 1].to_owned()
        } else {
            v.to_owned()
        }
    };
    let url = s.one("notify-url").filter(|v| !v.is_empty()).map(strip);
    let hook = s.one("slack-hook-url").filter(|v| !v.is_empty()).map(strip);
    if let (Some(_), Some(hook)) = (&url, &hook) {
        t.not(
            format!("--slack-hook-url={}", redact(hook)),
            "kured used --notify-url instead, as here",
        );
    }
    if let Some(url) = url.or(hook) {
        let scheme = url.split_once("://").map(|(s, _)| s.to_ascii_lowercase());
        match scheme.as_deref() {
            Some(
                "http" | "https" | "generic" | "generic+https" | "generic+http" | "slack"
                | "mattermost" | "rocketchat" | "teams" | "googlechat" | "hangouts" | "discord"
                | "telegram" | "zulip" | "matrix" | "ntfy" | "gotify" | "pushover" | "opsgenie"
                | "smtp",
            ) => {
                t.set_with(
                    Program::Controller,
                    "notifyUrl",
                    Value::List(vec![url]),
                    "A webhook's secret: keep it in a Secret instead (controller.notify.existingSecret)."
                        .to_owned(),
                );
            }
            _ => t.not(
                format!("--notify-url={}", redact(&url)),
                "the controller reaches the shoutrrr services that are an HTTP request (Slack, \
                 Teams, Discord, Telegram, Mattermost, Rocket.Chat, Google Chat, ntfy, Gotify, \
                 Pushover, Zulip, Matrix, OpsGenie, generic webhooks) and e-mail (smtp://), not \
                 this one; point an http(s) webhook or a generic:// URL at a relay instead",
            ),
        }
    }
    for flag in ["slack-channel", "slack-username"] {
        if let Some(v) = s
            .one(flag)
            .filter(|v| !(v.is_empty() || flag == "slack-username" && *v == "kured"))
        {
            t.not(
                format!("--{flag}={v}"),
                "kured 1.23 ignores it (its hook posts as and where it was set up in Slack); to \
                 name them, write the URL as slack://hook:A-B-C@webhook?username=NAME&channel=%23NAME",
            );
        }
    }
}

fn metrics(s: &Settings, t: &mut Translation) {
    let host = s.one("metrics-host").unwrap_or_default();
    let port = s.one("metrics-port").unwrap_or("8080");
    if host.is_empty() && port == "8080" {
        return;
    }
    match port.parse::<u16>() {
        Ok(port) => {
            let host = if host.is_empty() { "0.0.0.0" } else { host };
            t.set_with(
                Program::Agent,
                "metricsBindAddress",
                Value::Text(format!("{host}:{port}")),
                "kured's metrics-host and metrics-port.".to_owned(),
            );
        }
        Err(_) => t.not(
            format!("--metrics-port={port}"),
            "not a port; set agent.flags.metricsBindAddress",
        ),
    }
}

/// A URL with its path and user left out: webhooks keep their tokens there.
fn redact(url: &str) -> String {
    match url.split_once("://") {
        Some((scheme, rest)) => {
            let host = rest.split(['/', '?', '#']).next().unwrap_or_default();
            let host = host.rsplit('@').next().unwrap_or_default();
            format!("{scheme}://{host}/***")
        }
        None => "***".to_owned(),
    }
}

fn yaml_value(value: &Value) -> String {
    let quote = |s: &str| serde_json::Value::String(s.to_owned()).to_string();
    match value {
        Value::Text(s) => quote(s),
        Value::Int(n) => n.to_string(),
        Value::Bool(b) => b.to_string(),
        Value::List(items) => format!(
            "[{}]",
            items
                .iter()
                .map(|i| quote(i))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// `text` as comment lines of at most about 100 columns; a line that starts with two spaces
/// (a value to copy) is kept as it is.
fn comment_lines(out: &mut String, indent: &str, text: &str) {
    for paragraph in text.lines() {
        if paragraph.starts_with("  ") {
            let _ = writeln!(out, "{indent}#{paragraph}");
            continue;
        }
        let mut line = String::new();
        for word in paragraph.split_whitespace() {
            if !line.trim().is_empty() && indent.len() + 2 + line.len() + 1 + word.len() > 100 {
                let _ = writeln!(out, "{indent}# {line}");
                line = "  ".to_owned();
            } else if !line.trim().is_empty() {
                line.push(' ');
            }
            line.push_str(word);
        }
        if !line.trim().is_empty() {
            let _ = writeln!(out, "{indent}# {line}");
        }
    }
}

/// The values file: the notes and what was not translated as comments at the top, then the
/// values, each with its comment.
pub fn render(kured: &Kured, t: &Translation) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# node-reboot-operator chart values translated from kured's DaemonSet {}/{} ({}) by\n\
         # kubectl reboot migrate-from-kured; see docs/src/migrating-from-kured.md.",
        kured.namespace, kured.name, kured.image
    );
    if !t.not_translated.is_empty() {
        let _ = writeln!(out, "#\n# Not translated:");
        for (what, why) in &t.not_translated {
            comment_lines(&mut out, "", &format!("- {what}: {why}"));
        }
    }
    for note in &t.notes {
        comment_lines(&mut out, "", &format!("Note: {note}"));
    }
    let _ = writeln!(
        out,
        "# Once kured is removed: kubectl reboot migrate-from-kured --cleanup{}",
        t.cleanup_args
            .iter()
            .map(|a| format!(" {}", shell_word(a)))
            .collect::<String>()
    );
    for (program, name) in [
        (Program::Agent, "agent"),
        (Program::Controller, "controller"),
    ] {
        let entries: Vec<&Entry> = t.entries.iter().filter(|e| e.program == program).collect();
        if entries.is_empty() {
            continue;
        }
        let _ = writeln!(out, "{name}:\n  flags:");
        for entry in entries {
            if let Some(comment) = &entry.comment {
                comment_lines(&mut out, "    ", comment);
            }
            let _ = writeln!(out, "    {}: {}", entry.key, yaml_value(&entry.value));
        }
    }
    out
}

/// A word as a shell reads it back.
pub fn shell_word(word: &str) -> String {
    if word
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"-_=./:,@%+".contains(&b))
    {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kured::flags::{Env, read};

    fn kured(args: &[&str], env: &[(&str, &str)]) -> Kured {
        let args: Vec<String> = args.iter().map(|s| (*s).to_owned()).collect();
        let env: Vec<Env> = env
            .iter()
            .map(|(n, v)| Env {
                name: (*n).to_owned(),
                value: Some((*v).to_owned()),
            })
            .collect();
        Kured {
            namespace: "kube-system".into(),
            name: "kured".into(),
            image: "ghcr.io/kubereboot/kured:1.23.0".into(),
            settings: read(&args, &env),
            host_mounts: vec![HostMount {
                mount_path: "/sentinel".into(),
                host_path: "/var/run".into(),
            }],
            lock_holder: None,
        }
    }

    #[test]
    fn go_durations_become_the_charts() {
        let d = |s| go_duration(s).map(duration_text);
        assert_eq!(d("1h0m0s").as_deref(), Some("1h"));
        assert_eq!(d("1.5h").as_deref(), Some("1h30m"));
        assert_eq!(d("90s").as_deref(), Some("1m30s"));
        assert_eq!(d("250ms").as_deref(), Some("250ms"));
        assert_eq!(d("0").as_deref(), Some("0s"));
        assert_eq!(d("-1s"), None);
        assert_eq!(d("5 minutes"), None);
    }

    #[test]
    fn the_charts_defaults_translate_to_the_sentinel_alone() {
        let k = kured(
            &[
                "--ds-name=kured",
                "--ds-namespace=kube-system",
                "--metrics-port=8080",
                "--reboot-sentinel=/sentinel/reboot-required",
                "--reboot-command=/bin/systemctl reboot",
                "--log-format=text",
                "--concurrency=1",
            ],
            &[],
        );
        let t = translate(&k);
        assert_eq!(
            t.get(Program::Agent, "rebootSentinelFile"),
            Some(&Value::Text("/host/var/run/reboot-required".into()))
        );
        assert_eq!(t.get(Program::Agent, "rebootCommand"), None);
        assert_eq!(
            t.get(Program::Controller, "concurrency"),
            Some(&Value::Int(1))
        );
        assert_eq!(
            t.get(Program::Controller, "maxUnavailable"),
            Some(&Value::Int(2))
        );
        assert!(t.not_translated.is_empty(), "{:?}", t.not_translated);
        let yaml = render(&k, &t);
        assert!(
            yaml.contains("    rebootSentinelFile: \"/host/var/run/reboot-required\"\n"),
            "{yaml}"
        );
    }

    #[test]
    fn every_setting_reaches_its_value() {
        let k = kured(
            &[
                "--period=30m",
                "--reboot-sentinel-command=sh -c '! needs-restarting -r'",
                "--reboot-method=signal",
                "--reboot-signal=40",
                "--drain-timeout=30m",
                "--drain-grace-period=60",
                "--skip-wait-for-delete-timeout=300",
                "--drain-pod-selector=app!=x",
                "--force-reboot",
                "--drain-delay=1m",
                "--reboot-delay=90s",
                "--lock-release-delay=5m",
                "--lock-ttl=2h",
                "--prometheus-url=http://p:9090",
                "--alert-filter-regexp=^Watchdog$",
                "--alert-filter-match-only=true",
                "--alert-firing-only=true",
                "--blocking-pod-selector=app=backup",
                "--prefer-no-schedule-taint=weave.works/kured-node-reboot",
                "--pre-reboot-node-labels=lb=out",
                "--post-reboot-node-labels=lb=in",
                "--notify-url=smtp://u:p@h:25/?to=a@b",
                "--slack-channel=ops",
                "--message-template-drain=Draining %s",
                "--metrics-port=9000",
                "--annotate-nodes=true",
                "--time-zone=Europe/Berlin",
                "--start-time=9pm",
                "--end-time=5am",
                "--reboot-days=sa,su",
            ],
            &[("KURED_CONCURRENCY", "3"), ("KURED_LOG_FORMAT", "json")],
        );
        let t = translate(&k);
        let c = |key| t.get(Program::Controller, key).cloned();
        let a = |key| t.get(Program::Agent, key).cloned();
        let text = |s: &str| Some(Value::Text(s.to_owned()));
        assert_eq!(a("checkPeriod"), text("30m"));
        assert_eq!(
            a("rebootSentinelCommand"),
            text("sh -c '! needs-restarting -r'")
        );
        assert_eq!(a("rebootSentinelFile"), None);
        assert_eq!(a("rebootMethod"), text("signal"));
        assert_eq!(a("rebootSignal"), Some(Value::Int(40)));
        assert_eq!(a("metricsBindAddress"), text("0.0.0.0:9000"));
        assert_eq!(c("concurrency"), Some(Value::Int(3)));
        assert_eq!(c("maxUnavailable"), Some(Value::Int(6)));
        assert_eq!(c("drainTimeout"), text("30m"));
        assert_eq!(c("drainGracePeriod"), text("60s"));
        assert_eq!(c("drainSkipWaitForDeleteMargin"), text("5m"));
        assert_eq!(c("drainPodSelector"), text("app!=x"));
        assert_eq!(c("forceReboot"), Some(Value::Bool(true)));
        assert_eq!(c("drainDelay"), text("1m"));
        assert_eq!(c("rebootDelay"), text("1m30s"));
        assert_eq!(c("minReadySeconds"), Some(Value::Int(300)));
        assert_eq!(c("giveUpAfter"), text("2h"));
        assert_eq!(c("prometheusUrl"), text("http://p:9090"));
        assert_eq!(c("alertFilter"), text("^Watchdog$"));
        assert_eq!(c("alertFilterMode"), text("include"));
        assert_eq!(c("alertFiringOnly"), Some(Value::Bool(true)));
        assert_eq!(
            c("blockingPodSelector"),
            Some(Value::List(vec!["app=backup".into()]))
        );
        assert_eq!(
            c("preferNoScheduleTaint"),
            text("weave.works/kured-node-reboot")
        );
        assert_eq!(
            c("preRebootNodeLabels"),
            Some(Value::List(vec!["lb=out".into()]))
        );
        assert_eq!(
            c("postRebootNodeLabels"),
            Some(Value::List(vec!["lb=in".into()]))
        );
        assert_eq!(c("messageTemplateDrain"), text("Draining %s"));
        assert_eq!(c("logFormat"), text("json"));
        assert_eq!(
            c("rebootWindow"),
            Some(Value::List(vec![
                "Sat,Sun 21:00-05:00 Europe/Berlin".into()
            ]))
        );
        assert_eq!(
            c("notifyUrl"),
            Some(Value::List(vec!["smtp://u:p@h:25/?to=a@b".into()]))
        );
        let refused: Vec<&str> = t.not_translated.iter().map(|(w, _)| w.as_str()).collect();
        assert_eq!(refused, ["--slack-channel=ops"]);
        assert_eq!(
            t.cleanup_args,
            [
                "--prefer-no-schedule-taint=weave.works/kured-node-reboot",
                "--pre-reboot-node-labels=lb=out",
                "--annotate-nodes"
            ]
        );
    }

    #[test]
    fn a_slack_hook_is_kept_as_it_is_and_loses_to_a_notify_url() {
        let t = translate(&kured(
            &["--slack-hook-url=https://hooks.slack.com/services/A/B/C"],
            &[],
        ));
        assert_eq!(
            t.get(Program::Controller, "notifyUrl"),
            Some(&Value::List(vec![
                "https://hooks.slack.com/services/A/B/C".into()
            ]))
        );
        let t = translate(&kured(
            &[
                "--slack-hook-url=https://hooks.slack.com/services/A/B/C",
                "--notify-url=teams://x@y/z",
            ],
            &[],
        ));
        assert_eq!(
            t.get(Program::Controller, "notifyUrl"),
            Some(&Value::List(vec!["teams://x@y/z".into()]))
        );
        assert!(
            t.not_translated
                .iter()
                .any(|(what, _)| what.starts_with("--slack-hook-url=https://hooks.slack.com/***")),
            "{:?}",
            t.not_translated
        );
    }

    #[test]
    fn a_sentinel_outside_var_run_is_a_command_and_one_not_mounted_is_not_translated() {
        let mut k = kured(&["--reboot-sentinel=/sentinel/needs-reboot"], &[]);
        k.host_mounts[0].host_path = "/etc/flags".into();
        let t = translate(&k);
        assert_eq!(
            t.get(Program::Agent, "rebootSentinelCommand"),
            Some(&Value::Text("test -f /etc/flags/needs-reboot".into()))
        );
        k.host_mounts.clear();
        let t = translate(&k);
        assert_eq!(t.get(Program::Agent, "rebootSentinelFile"), None);
        assert_eq!(t.not_translated.len(), 1);
    }
}
