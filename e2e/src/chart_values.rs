//! The chart's values as the docs list them, from values.schema.json (each value's type) and
//! values.yaml (its default and the comment above it): the table of docs/src/reference.md
//! and the tables of the chart's README are made here, and nowhere else.

use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

pub fn chart_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../charts/node-reboot-operator")
}

pub fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

pub fn chart_schema() -> Value {
    serde_json::from_str(&read(&chart_dir().join("values.schema.json"))).expect("schema JSON")
}

/// Markdown table cell text: `|` escaped everywhere (GFM splits cells on it even in code),
/// `<` and `>` outside code spans so that `<node>` stays text.
pub fn cell(text: &str) -> String {
    let mut out = String::new();
    let mut code = false;
    for c in text.chars() {
        match c {
            '`' => {
                code = !code;
                out.push(c);
            }
            '|' => out.push_str("\\|"),
            '<' if !code => out.push_str("&lt;"),
            '>' if !code => out.push_str("&gt;"),
            _ => out.push(c),
        }
    }
    out
}

/// A key of values.yaml: the comment right above it, and its value: inline (`key: value`),
/// or the block under it written as one line of YAML flow (`{cpu: 50m, memory: 64Mi}`).
#[derive(Debug, Default, Clone)]
pub struct YamlKey {
    pub comment: Vec<String>,
    pub inline: Option<String>,
    pub block: Option<String>,
}

/// The lines of a block as (indent, text), comments and blank lines left out.
type BlockLines<'a> = Vec<(usize, &'a str)>;

/// The keys of values.yaml by dotted path, in file order. Enough for the chart's own
/// values.yaml: mappings, block lists and scalars, comments on lines of their own.
pub fn parse_values_yaml(text: &str) -> Vec<(String, YamlKey)> {
    let lines = text.lines().collect::<Vec<_>>();
    let mut out: Vec<(String, YamlKey)> = Vec::new();
    let mut stack: Vec<(usize, String)> = Vec::new();
    let mut comment: Vec<String> = Vec::new();
    let mut list_indent: Option<usize> = None;
    for (n, line) in lines.iter().enumerate() {
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        if trimmed.is_empty() {
            comment.clear();
            continue;
        }
        if let Some(li) = list_indent {
            if indent > li || (indent == li && trimmed.starts_with("- ")) {
                continue;
            }
            list_indent = None;
        }
        if let Some(c) = trimmed.strip_prefix('#') {
            comment.push(c.trim().to_string());
            continue;
        }
        if trimmed.starts_with("- ") {
            list_indent = Some(indent);
            continue;
        }
        let Some((key, rest)) = trimmed.split_once(':') else {
            continue;
        };
        while stack.last().is_some_and(|(i, _)| *i >= indent) {
            stack.pop();
        }
        let path = stack
            .iter()
            .map(|(_, k)| k.as_str())
            .chain([key])
            .collect::<Vec<_>>()
            .join(".");
        let rest = rest.trim();
        out.push((
            path,
            YamlKey {
                comment: std::mem::take(&mut comment),
                inline: (!rest.is_empty()).then(|| rest.to_string()),
                block: rest
                    .is_empty()
                    .then(|| flow(&block_under(&lines[n + 1..], indent))),
            },
        ));
        if rest.is_empty() {
            stack.push((indent, key.to_string()));
        }
    }
    out
}

/// The lines under a key at `indent`: those indented deeper, and a block list's `- ` items
/// at the key's own indentation (YAML allows both).
fn block_under<'a>(lines: &[&'a str], indent: usize) -> BlockLines<'a> {
    let mut out = Vec::new();
    for line in lines {
        let trimmed = line.trim_start();
        let at = line.len() - trimmed.len();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        if at < indent || (at == indent && !trimmed.starts_with("- ")) {
            break;
        }
        out.push((at, trimmed.trim_end()));
    }
    out
}

/// A block of the chart's values.yaml (mappings, lists, plain scalars) as one line of YAML
/// flow; e2e/tests/chart_package.rs checks each against kubectl's reading of values.yaml.
fn flow(lines: &BlockLines) -> String {
    let mut at = 0;
    let out = node(lines, &mut at);
    assert_eq!(
        at,
        lines.len(),
        "values.yaml: a block the docs cannot read: {lines:?}"
    );
    out
}

fn node(lines: &BlockLines, at: &mut usize) -> String {
    let Some(&(indent, first)) = lines.get(*at) else {
        return "{}".to_string();
    };
    let mut items = Vec::new();
    if first.starts_with("- ") {
        while let Some(&(i, text)) = lines.get(*at)
            && i == indent
            && let Some(item) = text.strip_prefix("- ")
        {
            if item.contains(": ") || item.ends_with(':') {
                // A map item: its first key on the dash's line, the others under it.
                let mut map = vec![(indent + 2, item)];
                *at += 1;
                while let Some(&(i, text)) = lines.get(*at)
                    && i > indent
                {
                    map.push((i, text));
                    *at += 1;
                }
                let mut inner = 0;
                items.push(node(&map, &mut inner));
            } else {
                items.push(item.to_string());
                *at += 1;
            }
        }
        return format!("[{}]", items.join(", "));
    }
    while let Some(&(i, text)) = lines.get(*at)
        && i == indent
        && !text.starts_with("- ")
    {
        let (key, rest) = text
            .split_once(':')
            .unwrap_or_else(|| panic!("values.yaml: not a key: {text:?}"));
        *at += 1;
        let value = match rest.trim() {
            "" => node(lines, at),
            scalar => scalar.to_string(),
        };
        items.push(format!("{key}: {value}"));
    }
    format!("{{{}}}", items.join(", "))
}

/// The schema's leaves (a value without `properties` of its own) by dotted path.
pub fn schema_leaves(schema: &Value, prefix: &str, out: &mut BTreeMap<String, Value>) {
    match schema.get("properties").and_then(Value::as_object) {
        Some(props) => {
            for (key, sub) in props {
                let path = if prefix.is_empty() {
                    key.clone()
                } else {
                    format!("{prefix}.{key}")
                };
                schema_leaves(sub, &path, out);
            }
        }
        None => {
            out.insert(prefix.to_string(), schema.clone());
        }
    }
}

fn schema_type(schema: &Value) -> String {
    if let Some(values) = schema.get("enum").and_then(Value::as_array) {
        let values = values
            .iter()
            .map(|v| match v.as_str() {
                Some("") => "empty".to_string(),
                Some(s) => format!("`{s}`"),
                None => format!("`{v}`"),
            })
            .collect::<Vec<_>>();
        return format!("one of {}", values.join(", "));
    }
    if let Some(any) = schema.get("anyOf").and_then(Value::as_array) {
        let mut types = any.iter().map(schema_type).collect::<Vec<_>>();
        types.dedup();
        return types.join(" or ");
    }
    if schema.get("const").is_some_and(|c| c == "") {
        return "empty".to_string();
    }
    match schema.get("type") {
        Some(Value::String(t)) => t.clone(),
        Some(Value::Array(ts)) => ts
            .iter()
            .filter_map(Value::as_str)
            .collect::<Vec<_>>()
            .join(" or "),
        _ => "any".to_string(),
    }
}

/// A value of the chart as a row of the docs' tables.
#[derive(Debug, Clone)]
pub struct Row {
    pub path: String,
    pub kind: String,
    /// YAML: the inline value or the block as flow; `None` for a value values.yaml lacks.
    pub default: Option<String>,
    pub what: String,
}

impl Row {
    pub fn markdown(&self) -> String {
        let default = match &self.default {
            Some(d) => format!("`{d}`"),
            None => "none".to_string(),
        };
        format!(
            "| `{}` | {} | {} | {} |\n",
            self.path,
            cell(&self.kind),
            cell(&default),
            cell(&self.what)
        )
    }
}

pub const TABLE_HEAD: &str = "| value | type | default | what it does |\n|---|---|---|---|\n";

/// Every value of the chart (a leaf of the schema): those of values.yaml in its order, then
/// those only the schema has.
pub fn rows() -> Vec<Row> {
    let mut leaves = BTreeMap::new();
    schema_leaves(&chart_schema(), "", &mut leaves);
    let yaml = parse_values_yaml(&read(&chart_dir().join("values.yaml")));
    let row = |path: &str, schema: &Value, key: Option<&YamlKey>| {
        let mut what = key.map(|k| k.comment.join(" ")).unwrap_or_default();
        if let Some(d) = schema.get("description").and_then(Value::as_str) {
            what = if what.is_empty() {
                d.to_string()
            } else {
                format!("{what} (schema: {d})")
            };
        }
        Row {
            path: path.to_string(),
            kind: schema_type(schema),
            default: key.and_then(|k| k.inline.clone().or_else(|| k.block.clone())),
            what,
        }
    };
    let mut out = Vec::new();
    let mut seen = BTreeSet::new();
    for (path, key) in &yaml {
        if let Some(schema) = leaves.get(path) {
            out.push(row(path, schema, Some(key)));
            seen.insert(path.clone());
        }
    }
    for (path, schema) in &leaves {
        if !seen.contains(path) {
            out.push(row(path, schema, None));
        }
    }
    out
}

/// The table of docs/src/reference.md: every value in one table.
pub fn values_table() -> String {
    let mut out = String::from(TABLE_HEAD);
    for row in rows() {
        out.push_str(&row.markdown());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_are_written_as_flow() {
        let yaml = "a:\n  b:\n    c: 1\n    # x\n    d: \"\"\n  l:\n    - x: 1\n      y:\n        z: 2\n    - w: 3\n  m:\n  - 1\n  - 2\ne: []\n";
        let keys = parse_values_yaml(yaml);
        let block = |path: &str| {
            keys.iter()
                .find(|(p, _)| p == path)
                .and_then(|(_, k)| k.block.clone())
        };
        assert_eq!(block("a.b").as_deref(), Some("{c: 1, d: \"\"}"));
        assert_eq!(block("a.l").as_deref(), Some("[{x: 1, y: {z: 2}}, {w: 3}]"));
        assert_eq!(block("a.m").as_deref(), Some("[1, 2]"));
        assert_eq!(
            block("a").as_deref(),
            Some("{b: {c: 1, d: \"\"}, l: [{x: 1, y: {z: 2}}, {w: 3}], m: [1, 2]}")
        );
        let e = keys.iter().find(|(p, _)| p == "e").expect("e");
        assert_eq!(e.1.inline.as_deref(), Some("[]"));
    }
}
