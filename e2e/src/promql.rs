//! The metric names that PromQL queries use, and whether a program's `/metrics` exports them:
//! for checking alert rules and dashboards (`monitoring/`) against the real programs.
//!
//! No PromQL parser is needed for that, only a tokenizer that knows what is not a metric name:
//! strings, durations and ranges (`[1h:1m]`), numbers, Grafana variables (`$job`), label
//! lists of `by`/`without`/`on`/`ignoring`/`group_left`/`group_right`, keywords, functions and
//! aggregations. Every other identifier is a metric name; the matchers in `{...}` after it are
//! kept, to check their label names and values too. Syntax is left to `promtool`.

use std::collections::{BTreeMap, BTreeSet};

/// One vector selector of a query: `name{label op "value", ...}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selector {
    pub name: String,
    pub matchers: Vec<Matcher>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Matcher {
    pub label: String,
    /// `=`, `!=`, `=~` or `!~`.
    pub op: String,
    pub value: String,
}

const AGGREGATIONS: &[&str] = &[
    "sum",
    "min",
    "max",
    "avg",
    "group",
    "stddev",
    "stdvar",
    "count",
    "count_values",
    "bottomk",
    "topk",
    "quantile",
    "limitk",
    "limit_ratio",
];

const FUNCTIONS: &[&str] = &[
    "abs",
    "absent",
    "absent_over_time",
    "acos",
    "acosh",
    "asin",
    "asinh",
    "atan",
    "atanh",
    "avg_over_time",
    "ceil",
    "changes",
    "clamp",
    "clamp_max",
    "clamp_min",
    "cos",
    "cosh",
    "count_over_time",
    "day_of_month",
    "day_of_week",
    "day_of_year",
    "days_in_month",
    "deg",
    "delta",
    "deriv",
    "double_exponential_smoothing",
    "end",
    "exp",
    "floor",
    "histogram_avg",
    "histogram_count",
    "histogram_fraction",
    "histogram_quantile",
    "histogram_stddev",
    "histogram_stdvar",
    "histogram_sum",
    "holt_winters",
    "hour",
    "idelta",
    "increase",
    "info",
    "irate",
    "label_join",
    "label_replace",
    "last_over_time",
    "ln",
    "log10",
    "log2",
    "mad_over_time",
    "max_over_time",
    "min_over_time",
    "minute",
    "month",
    "pi",
    "predict_linear",
    "present_over_time",
    "quantile_over_time",
    "rad",
    "rate",
    "resets",
    "round",
    "scalar",
    "sgn",
    "sin",
    "sinh",
    "sort",
    "sort_by_label",
    "sort_by_label_desc",
    "sort_desc",
    "sqrt",
    "start",
    "stddev_over_time",
    "stdvar_over_time",
    "sum_over_time",
    "tan",
    "tanh",
    "time",
    "timestamp",
    "vector",
    "year",
];

/// Keywords followed by a parenthesized list of label names (optional for the group
/// modifiers).
const LABEL_LIST_KEYWORDS: &[&str] = &[
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
];

const KEYWORDS: &[&str] = &["and", "or", "unless", "bool", "offset", "atan2"];

/// Every vector selector in `expr`. Fails on a call of something that is not a PromQL
/// function, and on a selector without a metric name.
pub fn selectors(expr: &str) -> Result<Vec<Selector>, String> {
    let chars: Vec<char> = expr.chars().collect();
    let mut found = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            i += 1;
        } else if c == '#' {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if matches!(c, '"' | '\'' | '`') {
            i = skip_string(&chars, i)?;
        } else if c == '[' {
            i = skip_past(&chars, i, ']')?;
        } else if c == '$' {
            i = skip_variable(&chars, i);
        } else if c.is_ascii_digit()
            || (c == '.' && chars.get(i + 1).is_some_and(char::is_ascii_digit))
        {
            // A number or a duration (`0.9`, `1e3`, `5m`, `1h30m`).
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '.') {
                i += 1;
            }
        } else if c == '{' {
            let (matchers, end) = parse_matchers(&chars, i)?;
            i = end;
            match matchers
                .iter()
                .find(|m| m.label == "__name__" && m.op == "=")
            {
                Some(name) => found.push(Selector {
                    name: name.value.clone(),
                    matchers: matchers
                        .iter()
                        .filter(|m| m.label != "__name__")
                        .cloned()
                        .collect(),
                }),
                None => return Err(format!("a selector without a metric name in {expr}")),
            }
        } else if c.is_ascii_alphabetic() || c == '_' || c == ':' {
            let start = i;
            while i < chars.len()
                && (chars[i].is_ascii_alphanumeric() || matches!(chars[i], '_' | ':'))
            {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            let lower = word.to_ascii_lowercase();
            let next = next_non_space(&chars, i);
            if LABEL_LIST_KEYWORDS.contains(&word.as_str()) {
                if let Some(open) = next.filter(|&j| chars[j] == '(') {
                    i = skip_past(&chars, open, ')')?;
                }
            } else if KEYWORDS.contains(&word.as_str()) || lower == "inf" || lower == "nan" {
            } else if AGGREGATIONS.contains(&word.as_str()) || FUNCTIONS.contains(&word.as_str()) {
                if next.is_none_or(|j| chars[j] != '(' && !matches!(&chars[j..], ['b' | 'w', ..])) {
                    return Err(format!("`{word}` used as a metric name in {expr}"));
                }
            } else if next.is_some_and(|j| chars[j] == '(') {
                return Err(format!("`{word}` is not a PromQL function (in {expr})"));
            } else {
                let mut matchers = Vec::new();
                if let Some(open) = next.filter(|&j| chars[j] == '{') {
                    let (parsed, end) = parse_matchers(&chars, open)?;
                    matchers = parsed;
                    i = end;
                }
                found.push(Selector {
                    name: word,
                    matchers,
                });
            }
        } else {
            // Operators, parentheses, commas, `@`.
            i += 1;
        }
    }
    Ok(found)
}

fn next_non_space(chars: &[char], mut i: usize) -> Option<usize> {
    while i < chars.len() && chars[i].is_whitespace() {
        i += 1;
    }
    (i < chars.len()).then_some(i)
}

/// The index after the string starting at `i`.
fn skip_string(chars: &[char], i: usize) -> Result<usize, String> {
    let quote = chars[i];
    let mut j = i + 1;
    while j < chars.len() {
        match chars[j] {
            '\\' if quote != '`' => j += 2,
            c if c == quote => return Ok(j + 1),
            _ => j += 1,
        }
    }
    Err("an unterminated string".into())
}

/// The index after the first `close` from `i` on, strings skipped.
fn skip_past(chars: &[char], i: usize, close: char) -> Result<usize, String> {
    let mut j = i + 1;
    while j < chars.len() {
        match chars[j] {
            '"' | '\'' | '`' => j = skip_string(chars, j)?,
            c if c == close => return Ok(j + 1),
            _ => j += 1,
        }
    }
    Err(format!("no `{close}` after position {i}"))
}

/// The index after a Grafana variable: `$name`, `${name}`, `${name:format}`, `[[name]]`-less.
fn skip_variable(chars: &[char], i: usize) -> usize {
    let mut j = i + 1;
    if chars.get(j) == Some(&'{') {
        while j < chars.len() && chars[j] != '}' {
            j += 1;
        }
        return j + 1;
    }
    while j < chars.len() && (chars[j].is_ascii_alphanumeric() || chars[j] == '_') {
        j += 1;
    }
    j
}

/// The matchers of the `{...}` at `open`, and the index after it.
fn parse_matchers(chars: &[char], open: usize) -> Result<(Vec<Matcher>, usize), String> {
    let mut matchers = Vec::new();
    let mut i = open + 1;
    loop {
        i = next_non_space(chars, i).ok_or("an unterminated `{`")?;
        match chars[i] {
            '}' => return Ok((matchers, i + 1)),
            ',' => {
                i += 1;
                continue;
            }
            _ => {}
        }
        let start = i;
        if chars[i] == '"' {
            // A quoted label or metric name (UTF-8 names).
            i = skip_string(chars, i)?;
        } else {
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
        }
        let label: String = chars[start..i].iter().filter(|c| **c != '"').collect();
        i = next_non_space(chars, i).ok_or("a matcher without operator")?;
        let op: String = match (chars[i], chars.get(i + 1)) {
            ('=', Some('~')) | ('!', Some('=')) | ('!', Some('~')) => {
                chars[i..i + 2].iter().collect()
            }
            ('=', _) => "=".into(),
            // A bare quoted name: `{"metric.name"}`.
            (',' | '}', _) => {
                matchers.push(Matcher {
                    label: "__name__".into(),
                    op: "=".into(),
                    value: label,
                });
                continue;
            }
            (other, _) => return Err(format!("unexpected `{other}` in a selector")),
        };
        i = next_non_space(chars, i + op.len()).ok_or("a matcher without value")?;
        let end = skip_string(chars, i)?;
        let value = unescape(&chars[i + 1..end - 1]);
        matchers.push(Matcher { label, op, value });
        i = end;
    }
}

fn unescape(chars: &[char]) -> String {
    let mut out = String::new();
    let mut escaped = false;
    for &c in chars {
        if escaped || c != '\\' {
            out.push(c);
            escaped = false;
        } else {
            escaped = true;
        }
    }
    out
}

/// The `expr:` of each rule of a Prometheus rule file, as `(rule name, expression)`. Reads the
/// YAML line by line: `expr:` with the expression on the same line, or a block scalar (`|`,
/// `>`) on the lines indented below it.
pub fn rule_expressions(yaml: &str) -> Vec<(String, String)> {
    let lines: Vec<&str> = yaml.lines().collect();
    let mut found = Vec::new();
    let mut name = String::new();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        let trimmed = line.trim_start().trim_start_matches("- ");
        if let Some(rest) = trimmed
            .strip_prefix("alert:")
            .or_else(|| trimmed.strip_prefix("record:"))
        {
            name = rest.trim().to_owned();
        }
        if let Some(rest) = trimmed.strip_prefix("expr:") {
            let indent = line.len() - line.trim_start().len();
            let rest = rest.trim();
            if rest.starts_with('|') || rest.starts_with('>') {
                let mut block = Vec::new();
                while i + 1 < lines.len() {
                    let next = lines[i + 1];
                    let next_indent = next.len() - next.trim_start().len();
                    if !next.trim().is_empty() && next_indent <= indent {
                        break;
                    }
                    block.push(next.trim());
                    i += 1;
                }
                found.push((name.clone(), block.join("\n").trim().to_owned()));
            } else {
                let unquoted = rest
                    .strip_prefix('"')
                    .and_then(|r| r.strip_suffix('"'))
                    .or_else(|| rest.strip_prefix('\'').and_then(|r| r.strip_suffix('\'')))
                    .unwrap_or(rest);
                found.push((name.clone(), unquoted.to_owned()));
            }
        }
        i += 1;
    }
    found
}

/// Every PromQL query of a Grafana dashboard, as `(where, expression)`: the `expr` of each
/// panel's targets (rows' nested panels included) and the metric of each `label_values(...)`
/// variable.
pub fn dashboard_expressions(dashboard: &serde_json::Value) -> Vec<(String, String)> {
    let mut found = Vec::new();
    fn panels(list: &serde_json::Value, found: &mut Vec<(String, String)>) {
        for panel in list.as_array().into_iter().flatten() {
            let title = panel["title"].as_str().unwrap_or("?");
            for target in panel["targets"].as_array().into_iter().flatten() {
                if let Some(expr) = target["expr"].as_str() {
                    found.push((format!("panel {title:?}"), expr.to_owned()));
                }
            }
            panels(&panel["panels"], found);
        }
    }
    panels(&dashboard["panels"], &mut found);
    for variable in dashboard["templating"]["list"]
        .as_array()
        .into_iter()
        .flatten()
    {
        if variable["type"] != "query" {
            continue;
        }
        let query = variable["query"]["query"]
            .as_str()
            .or_else(|| variable["query"].as_str())
            .unwrap_or_default();
        let name = variable["name"].as_str().unwrap_or("?");
        let expr = match query
            .trim()
            .strip_prefix("label_values(")
            .and_then(|q| q.strip_suffix(')'))
        {
            // label_values(metric, label): the metric selector is all but the last argument.
            Some(args) => args.rsplit_once(',').map_or(args, |(m, _)| m).to_owned(),
            None => query.to_owned(),
        };
        found.push((format!("variable ${name}"), expr));
    }
    found
}

/// One metric family of a `/metrics` scrape.
#[derive(Debug, Default, Clone)]
pub struct Family {
    /// `counter`, `gauge`, `histogram`, ... as its `# TYPE` line says.
    pub kind: String,
    /// The values seen for each label of its samples.
    pub labels: BTreeMap<String, BTreeSet<String>>,
    pub samples: usize,
}

/// The families of one or more scrapes (OpenMetrics or Prometheus text).
#[derive(Debug, Default, Clone)]
pub struct Exposition {
    pub families: BTreeMap<String, Family>,
    /// Each sample name (`x_total`, `x_bucket`, ...) and its family.
    pub samples: BTreeMap<String, String>,
}

/// Labels that Prometheus adds to every series of a target (`job`, `instance`) or that
/// Kubernetes service discovery usually adds (prometheus-operator's `namespace`, `pod`, ...):
/// never in a scrape, always fine in a query.
pub const TARGET_LABELS: &[&str] = &[
    "job",
    "instance",
    "namespace",
    "pod",
    "container",
    "service",
    "endpoint",
];

/// Series that Prometheus makes itself for each target.
pub const SYNTHETIC_SERIES: &[&str] = &["up"];

impl Exposition {
    /// Adds the families and samples of one scrape.
    pub fn add(&mut self, text: &str) {
        let mut current = String::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let mut parts = rest.split_whitespace();
                current = parts.next().unwrap_or_default().to_owned();
                let kind = parts.next().unwrap_or("unknown").to_owned();
                self.families.entry(current.clone()).or_default().kind = kind;
                continue;
            }
            if line.starts_with('#') || line.trim().is_empty() {
                continue;
            }
            let name_end = line.find(['{', ' ']).unwrap_or(line.len());
            let name = &line[..name_end];
            let family_name = if name.starts_with(current.as_str()) && !current.is_empty() {
                current.clone()
            } else {
                name.to_owned()
            };
            self.samples.insert(name.to_owned(), family_name.clone());
            let family = self.families.entry(family_name).or_default();
            family.samples += 1;
            if line[name_end..].starts_with('{')
                && let Ok((matchers, _)) =
                    parse_matchers(&line.chars().collect::<Vec<_>>(), name_end)
            {
                for m in matchers {
                    if m.label != "le" && m.label != "quantile" {
                        family.labels.entry(m.label).or_default().insert(m.value);
                    }
                }
            }
        }
    }

    /// The family a query's metric name stands for: a sample name of the scrape, or a name its
    /// family's type implies (`_total` of a counter, `_bucket`/`_sum`/`_count` of a histogram,
    /// the gauge itself) also when the family has no sample yet.
    pub fn family_of(&self, name: &str) -> Option<&str> {
        if let Some(family) = self.samples.get(name) {
            return Some(family);
        }
        self.families.iter().find_map(|(family, f)| {
            let suffixes: &[&str] = match f.kind.as_str() {
                "counter" => &["_total"],
                "histogram" | "gaugehistogram" => &["_bucket", "_sum", "_count"],
                "summary" => &["", "_sum", "_count"],
                _ => &[""],
            };
            suffixes
                .iter()
                .any(|s| name.strip_suffix(s) == Some(family.as_str()))
                .then_some(family.as_str())
        })
    }

    /// Whether the scrape has what `selector` asks for: the metric, each matcher's label, and
    /// the values an equality or an alternation of plain words names. Labels of a family
    /// without samples cannot be checked: `Ok(Some(note))` says so.
    pub fn check(&self, selector: &Selector) -> Result<Option<String>, String> {
        if SYNTHETIC_SERIES.contains(&selector.name.as_str()) {
            return Ok(None);
        }
        let Some(family_name) = self.family_of(&selector.name) else {
            return Err(format!(
                "`{}` is not exported (no such sample or family in the scrape)",
                selector.name
            ));
        };
        let family = &self.families[family_name];
        let mut unchecked = Vec::new();
        for m in &selector.matchers {
            if TARGET_LABELS.contains(&m.label.as_str())
                || (m.label == "le" && selector.name.ends_with("_bucket"))
            {
                continue;
            }
            if family.samples == 0 {
                unchecked.push(m.label.clone());
                continue;
            }
            let Some(values) = family.labels.get(&m.label) else {
                return Err(format!(
                    "`{}` has no label `{}` (its labels: {:?})",
                    selector.name,
                    m.label,
                    family.labels.keys().collect::<Vec<_>>()
                ));
            };
            let plain = |v: &str| {
                !v.is_empty()
                    && v.chars()
                        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
            };
            let named: Vec<&str> = match m.op.as_str() {
                "=" | "!=" if plain(&m.value) => vec![m.value.as_str()],
                "=~" | "!~" if m.value.split('|').all(plain) => m.value.split('|').collect(),
                _ => Vec::new(),
            };
            for value in named {
                if !values.contains(value) {
                    return Err(format!(
                        "`{}{{{}{}\"{}\"}}`: the value `{value}` was not seen (seen: {values:?})",
                        selector.name, m.label, m.op, m.value
                    ));
                }
            }
        }
        Ok((!unchecked.is_empty()).then(|| {
            format!(
                "`{}` has no sample yet: its labels {unchecked:?} are unchecked",
                selector.name
            )
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(expr: &str) -> Vec<String> {
        selectors(expr)
            .unwrap()
            .into_iter()
            .map(|s| s.name)
            .collect()
    }

    #[test]
    fn functions_keywords_labels_strings_and_durations_are_not_metric_names() {
        assert_eq!(
            names(
                r#"histogram_quantile(0.9, sum by (le, outcome) (rate(a_bucket{job=~"$job"}[$window])))
                   / on (namespace) group_left(pod) b offset 1h
                   unless sum(increase(c_total[1h:1m])) by (job) > bool 0
                   or label_replace(d, "dst", "$1", "src", "(.*)") or max without(x) (e) * 1e3
                   or min_over_time((sum(f))[1h:1m]) and absent(g) or vector(1) @ end()"#
            ),
            ["a_bucket", "b", "c_total", "d", "e", "f", "g"]
        );
    }

    #[test]
    fn matchers_are_kept_and_unknown_functions_fail() {
        let s = selectors(r#"x{state=~"a|b", reason!="c\"d", job=~"$job"}"#).unwrap();
        assert_eq!(s[0].matchers.len(), 3);
        assert_eq!(s[0].matchers[1].value, "c\"d");
        assert!(selectors("rat(x[5m])").is_err());
        assert!(selectors("sum").is_err());
        assert_eq!(names(r#"{__name__="y", a="b"}"#), ["y"]);
    }

    #[test]
    fn names_resolve_to_families_by_type() {
        let mut e = Exposition::default();
        e.add(
            "# TYPE h histogram\nh_bucket{le=\"1.0\",outcome=\"drained\"} 1\nh_sum{outcome=\"drained\"} 1\n\
             # TYPE c counter\nc_total{reason=\"x\"} 1\n# TYPE g gauge\n# EOF\n",
        );
        let sel = |q: &str| selectors(q).unwrap().remove(0);
        assert!(e.check(&sel("h_count")).is_ok());
        assert!(e.check(&sel("h")).is_err());
        assert!(e.check(&sel("c_total{reason=\"x\"}")).is_ok());
        assert!(e.check(&sel("c_total{reason=\"y\"}")).is_err());
        assert!(e.check(&sel("c_total{kind=\"x\"}")).is_err());
        assert!(e.check(&sel("c")).is_err());
        assert!(e.check(&sel("g{gate=\"alerts\"}")).unwrap().is_some());
        assert!(e.check(&sel("up{job=\"x\"}")).is_ok());
    }
}
