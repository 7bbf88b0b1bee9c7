//! kured's settings as its container gives them: the flags of kured 1.23.0 read from the
//! container's command and args as pflag reads them, then from its environment as kured's
//! `LoadFromEnv` reads `KURED_<FLAG>` (after the args, so a variable wins over an arg; a list
//! variable adds to the list; `--blocking-pod-selector` has no variable).

use std::collections::BTreeMap;

/// How pflag reads a flag's values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `--flag` alone is true.
    Bool,
    /// One value; the last one wins.
    One,
    /// A list split at commas (`StringSlice`); each occurrence adds.
    Slice,
    /// A list, one value an occurrence (`StringArray`); no environment variable.
    Array,
}

/// Every flag of kured 1.23.0 (cmd/kured/main.go) and how it is read.
pub const FLAGS: &[(&str, Kind)] = &[
    ("alert-filter-match-only", Kind::Bool),
    ("alert-filter-regexp", Kind::One),
    ("alert-firing-only", Kind::Bool),
    ("annotate-nodes", Kind::Bool),
    ("blocking-pod-selector", Kind::Array),
    ("concurrency", Kind::One),
    ("drain-delay", Kind::One),
    ("drain-grace-period", Kind::One),
    ("drain-pod-selector", Kind::One),
    ("drain-timeout", Kind::One),
    ("ds-name", Kind::One),
    ("ds-namespace", Kind::One),
    ("end-time", Kind::One),
    ("force-reboot", Kind::Bool),
    ("lock-annotation", Kind::One),
    ("lock-release-delay", Kind::One),
    ("lock-ttl", Kind::One),
    ("log-format", Kind::One),
    ("message-template-drain", Kind::One),
    ("message-template-reboot", Kind::One),
    ("message-template-uncordon", Kind::One),
    ("metrics-host", Kind::One),
    ("metrics-port", Kind::One),
    ("node-id", Kind::One),
    ("notify-url", Kind::One),
    ("period", Kind::One),
    ("post-reboot-node-labels", Kind::Slice),
    ("pre-reboot-node-labels", Kind::Slice),
    ("prefer-no-schedule-taint", Kind::One),
    ("prometheus-url", Kind::One),
    ("reboot-command", Kind::One),
    ("reboot-days", Kind::Slice),
    ("reboot-delay", Kind::One),
    ("reboot-method", Kind::One),
    ("reboot-sentinel", Kind::One),
    ("reboot-sentinel-command", Kind::One),
    ("reboot-signal", Kind::One),
    ("skip-wait-for-delete-timeout", Kind::One),
    ("slack-channel", Kind::One),
    ("slack-hook-url", Kind::One),
    ("slack-username", Kind::One),
    ("start-time", Kind::One),
    ("time-zone", Kind::One),
];

/// kured's lock annotation on its own DaemonSet, unless `--lock-annotation` names another.
pub const LOCK_ANNOTATION: &str = "weave.works/kured-node-lock";
/// Set on a node kured reboots, with `--annotate-nodes`.
pub const IN_PROGRESS_ANNOTATION: &str = "weave.works/kured-reboot-in-progress";
/// Set on a node kured reboots, with `--annotate-nodes`.
pub const MOST_RECENT_ANNOTATION: &str = "weave.works/kured-most-recent-reboot-needed";

/// One environment variable of the container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Env {
    pub name: String,
    /// `None` for a `valueFrom` (a Secret, a ConfigMap, a field), which is not read.
    pub value: Option<String>,
}

/// kured's settings: each flag given, with its values in order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Settings {
    given: BTreeMap<&'static str, Vec<String>>,
    /// What kured would not read, or this command cannot: each with why.
    pub ignored: Vec<(String, String)>,
}

impl Settings {
    /// The flag's value: the last one given.
    pub fn one(&self, flag: &str) -> Option<&str> {
        self.given
            .get(flag)
            .and_then(|v| v.last())
            .map(String::as_str)
    }

    /// The flag's values, in order (a list's items).
    pub fn list(&self, flag: &str) -> &[String] {
        self.given.get(flag).map(Vec::as_slice).unwrap_or_default()
    }

    /// Whether a bool flag is on (pflag's and Go's `strconv.ParseBool`).
    pub fn on(&self, flag: &str) -> bool {
        self.one(flag)
            .is_some_and(|v| matches!(v, "1" | "t" | "T" | "true" | "TRUE" | "True"))
    }

    fn set(&mut self, flag: &'static str, kind: Kind, value: &str) {
        let values = self.given.entry(flag).or_default();
        match kind {
            Kind::Bool | Kind::One => *values = vec![value.to_owned()],
            Kind::Array => values.push(value.to_owned()),
            Kind::Slice => values.extend(
                value
                    .split(',')
                    .map(str::trim)
                    .filter(|v| !v.is_empty())
                    .map(str::to_owned),
            ),
        }
    }
}

/// The flag names as `'static` strings of [`FLAGS`].
fn known(flag: &str) -> Option<(&'static str, Kind)> {
    FLAGS.iter().find(|(f, _)| *f == flag).copied()
}

/// Reads kured's settings from its container's arguments (the command's after the program, then
/// the args) and environment.
pub fn read(args: &[String], env: &[Env]) -> Settings {
    let mut settings = Settings::default();
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        if arg == "--" {
            break;
        }
        let Some(body) = arg.strip_prefix("--") else {
            settings.ignored.push((
                arg.clone(),
                "not a flag: kured takes no other arguments".to_owned(),
            ));
            continue;
        };
        let (name, inline) = match body.split_once('=') {
            Some((name, value)) => (name, Some(value.to_owned())),
            None => (body, None),
        };
        let Some((flag, kind)) = known(name) else {
            settings.ignored.push((
                arg.clone(),
                "not a flag of kured 1.23.0: kured would refuse to start with it".to_owned(),
            ));
            continue;
        };
        let value = match (inline, kind) {
            // `--flag=""` in a manifest (kured's own writes so) is the flag left empty.
            (Some(value), _) if value == "\"\"" || value == "''" => String::new(),
            (Some(value), _) => value,
            (None, Kind::Bool) => "true".to_owned(),
            (None, _) => rest.next().cloned().unwrap_or_default(),
        };
        settings.set(flag, kind, &value);
    }
    for var in env {
        let Some(name) = var.name.strip_prefix("KURED_") else {
            continue;
        };
        let flag_name = name.to_ascii_lowercase().replace('_', "-");
        // kured looks up exactly KURED_ and the flag in capitals.
        let Some((flag, kind)) = known(&flag_name).filter(|_| name == name.to_ascii_uppercase())
        else {
            settings.ignored.push((
                var.name.clone(),
                "no flag of kured 1.23.0 has this variable: kured ignored it".to_owned(),
            ));
            continue;
        };
        if flag == "node-id" {
            continue;
        }
        if kind == Kind::Array {
            settings.ignored.push((
                var.name.clone(),
                "kured 1.23.0 does not read this flag from the environment: it ignored it"
                    .to_owned(),
            ));
            continue;
        }
        match &var.value {
            Some(value) => settings.set(flag, kind, value),
            None => settings.ignored.push((
                var.name.clone(),
                format!(
                    "set from a Secret, ConfigMap or field (valueFrom), which is not read here: \
                     translate --{flag} by hand (see docs/src/migrating-from-kured.md)"
                ),
            )),
        }
    }
    settings
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    fn env(name: &str, value: &str) -> Env {
        Env {
            name: name.to_owned(),
            value: Some(value.to_owned()),
        }
    }

    #[test]
    fn args_are_read_as_pflag_reads_them() {
        let s = read(
            &args(&[
                "--period=2h",
                "--force-reboot",
                "--reboot-days",
                "mo,tu",
                "--reboot-days=we",
                "--blocking-pod-selector=a=b,c=d",
                "--blocking-pod-selector=e=f",
                "--period=3h",
                "--no-such-flag=1",
                "--drain-pod-selector=\"\"",
            ]),
            &[],
        );
        assert_eq!(s.one("period"), Some("3h"));
        assert!(s.on("force-reboot"));
        assert_eq!(s.list("reboot-days"), ["mo", "tu", "we"]);
        assert_eq!(s.list("blocking-pod-selector"), ["a=b,c=d", "e=f"]);
        assert_eq!(s.one("drain-pod-selector"), Some(""));
        assert_eq!(s.ignored.len(), 1);
        assert!(s.ignored[0].0.contains("no-such-flag"));
    }

    #[test]
    fn the_environment_wins_over_the_args_and_blocking_pods_have_no_variable() {
        let s = read(
            &args(&["--period=2h", "--pre-reboot-node-labels=a=1"]),
            &[
                env("KURED_PERIOD", "4h"),
                env("KURED_PRE_REBOOT_NODE_LABELS", "b=2,c=3"),
                env("KURED_BLOCKING_POD_SELECTOR", "app=x"),
                env("KURED_NODE_ID", "n1"),
                env("OTHER", "x"),
                Env {
                    name: "KURED_SLACK_HOOK_URL".into(),
                    value: None,
                },
            ],
        );
        assert_eq!(s.one("period"), Some("4h"));
        assert_eq!(s.list("pre-reboot-node-labels"), ["a=1", "b=2", "c=3"]);
        assert!(s.list("blocking-pod-selector").is_empty());
        let ignored: Vec<&str> = s.ignored.iter().map(|(what, _)| what.as_str()).collect();
        assert_eq!(
            ignored,
            ["KURED_BLOCKING_POD_SELECTOR", "KURED_SLACK_HOOK_URL"]
        );
    }
}
