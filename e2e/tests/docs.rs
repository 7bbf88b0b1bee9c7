//! The docs (docs/ and README.md) against what they describe: the book builds with mdBook;
//! every internal link and anchor of the built book, and every link of the README, resolves;
//! every command in a code block that runs `reboot-controller` or `reboot-agent` names only
//! flags that program's `--help` lists, and every `--set` of a helm command names a chart
//! value; and the generated parts of the pages (the flags, the chart values, the alerts'
//! runbooks) and the chart's README are what the programs, the chart and the alert rules
//! say today.
//!
//! `make docs-reference` (DOCS_REFERENCE_WRITE=1) rewrites the generated parts and the
//! chart's README instead of comparing them; `make chart-readme` the README alone. mdBook comes from MDBOOK (`make docs` installs it and `make test` passes
//! it on), else from PATH.

use common::{AgentReason, ControllerReason};
use e2e::chart_readme::{self, README};
use e2e::chart_values::{cell, chart_schema, values_table};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace")
        .to_path_buf()
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

// ---------------------------------------------------------------------------------------
// The programs' flags, from their --help.

#[derive(Debug, Clone, PartialEq)]
struct Flag {
    name: String,
    value: Option<String>,
    env: Option<String>,
    default: Option<String>,
    possible: Vec<String>,
    help: String,
}

fn help_of(program: &str) -> String {
    let bin = nodesim::binaries::workspace_binary(program).unwrap_or_else(|e| panic!("{e}"));
    // A clean environment: clap shows the value of a flag's variable when it is set.
    let out = Command::new(&bin)
        .arg("--help")
        .env_clear()
        .output()
        .unwrap_or_else(|e| panic!("{}: {e}", bin.display()));
    assert!(out.status.success(), "{program} --help failed: {out:?}");
    String::from_utf8(out.stdout).expect("UTF-8 help")
}

/// The options of clap's long help (`--help`), in their order, without `--help` and
/// `--version`.
fn parse_help(help: &str) -> Vec<Flag> {
    let mut flags: Vec<Flag> = Vec::new();
    let mut in_options = false;
    let mut in_possible = false;
    for line in help.lines() {
        if line == "Options:" {
            in_options = true;
            continue;
        }
        if !in_options {
            continue;
        }
        let trimmed = line.trim();
        let indent = line.len() - line.trim_start().len();
        // A heading of a group of flags (`Health gates:`): not part of the flag before it.
        if indent == 0 && trimmed.ends_with(':') {
            in_possible = false;
            continue;
        }
        if (2..=6).contains(&indent) && trimmed.starts_with('-') {
            in_possible = false;
            let long = trimmed
                .split(", ")
                .find(|part| part.starts_with("--"))
                .unwrap_or(trimmed);
            let (name, value) = match long.split_once(' ') {
                Some((name, value)) => (name, Some(value.trim_matches(['<', '>']).to_string())),
                None => (long, None),
            };
            flags.push(Flag {
                name: name.to_string(),
                value,
                env: None,
                default: None,
                possible: Vec::new(),
                help: String::new(),
            });
            continue;
        }
        let Some(flag) = flags.last_mut() else {
            continue;
        };
        if trimmed.is_empty() {
            continue;
        } else if let Some(env) = trimmed.strip_prefix("[env: ") {
            flag.env = Some(env.trim_end_matches(']').trim_end_matches('=').to_string());
        } else if let Some(default) = trimmed.strip_prefix("[default: ") {
            flag.default = Some(default.trim_end_matches(']').to_string());
        } else if let Some(values) = trimmed.strip_prefix("[possible values: ") {
            flag.possible = values
                .trim_end_matches(']')
                .split(", ")
                .map(|v| format!("`{v}`"))
                .collect();
        } else if trimmed == "Possible values:" {
            in_possible = true;
        } else if in_possible && trimmed.starts_with("- ") {
            let item = &trimmed[2..];
            flag.possible.push(match item.split_once(": ") {
                Some((value, meaning)) => format!("`{value}`: {meaning}"),
                None => format!("`{item}`"),
            });
        } else {
            if !flag.help.is_empty() {
                flag.help.push(' ');
            }
            flag.help.push_str(trimmed);
        }
    }
    flags.retain(|f| f.name != "--help" && f.name != "--version");
    flags
}

fn flags_table(flags: &[Flag]) -> String {
    let mut out =
        String::from("| flag | environment | default | what it does |\n|---|---|---|---|\n");
    for f in flags {
        let flag = match &f.value {
            Some(v) => format!("`{} <{v}>`", f.name),
            None => format!("`{}`", f.name),
        };
        let mut help = f.help.clone();
        // A boolean's `true, false` says nothing its default does not.
        let boolean = f.possible.len() == 2 && f.possible[0] == "`true`";
        if !f.possible.is_empty() && !boolean {
            help.push_str(&format!(" Values: {}.", f.possible.join("; ")));
        }
        out.push_str(&format!(
            "| {} | {} | {} | {} |\n",
            flag,
            f.env
                .as_deref()
                .map(|e| format!("`{e}`"))
                .unwrap_or_default(),
            match f.default.as_deref() {
                None => "none".to_string(),
                Some("") => "empty".to_string(),
                Some(d) => format!("`{d}`"),
            },
            cell(&help)
        ));
    }
    out
}

// ---------------------------------------------------------------------------------------
// The chart's values: their tables come from e2e::chart_values.

/// Whether `--set PATH=...` names a value of the chart: a path through the schema's
/// properties, or into a map or list value (labels, annotations, a list's items).
fn chart_has_value(schema: &Value, path: &str) -> bool {
    let mut node = schema;
    for part in path.split('.') {
        let part = part.split('[').next().unwrap_or(part);
        match node.get("properties").and_then(|p| p.get(part)) {
            Some(next) => node = next,
            None => {
                return node.get("additionalProperties").is_some_and(|a| a != false)
                    || node.get("type").is_some_and(|t| t == "array");
            }
        }
    }
    true
}

// ---------------------------------------------------------------------------------------
// The alerts' runbooks, from monitoring/prometheus-rules.yaml.

/// Each alert's name, summary and runbook, in file order.
fn alerts() -> Vec<(String, String, String)> {
    let text = read(&repo().join("monitoring/prometheus-rules.yaml"));
    let lines = text.lines().collect::<Vec<_>>();
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let Some(name) = line.trim().strip_prefix("- alert: ") else {
            continue;
        };
        let end = lines[i + 1..]
            .iter()
            .position(|l| l.trim().starts_with("- alert: "))
            .map_or(lines.len(), |p| i + 1 + p);
        let rule = &lines[i + 1..end];
        let folded = |key: &str| -> String {
            let Some(at) = rule.iter().position(|l| l.trim().starts_with(key)) else {
                panic!("alert {name} has no {key}");
            };
            let first = rule[at].trim()[key.len()..].trim();
            if first != ">-" && first != "|" {
                return first.trim_matches('"').to_string();
            }
            let indent = rule[at].len() - rule[at].trim_start().len();
            rule[at + 1..]
                .iter()
                .take_while(|l| l.trim().is_empty() || l.len() - l.trim_start().len() > indent)
                .map(|l| l.trim())
                .filter(|l| !l.is_empty())
                .collect::<Vec<_>>()
                .join(" ")
        };
        out.push((
            name.trim().to_string(),
            folded("summary:"),
            folded("runbook:"),
        ));
    }
    out
}

fn runbooks() -> String {
    let mut out = String::new();
    for (name, summary, runbook) in alerts() {
        out.push_str(&format!(
            "#### {name}\n\n{}\n\n{}\n\n",
            cell(&summary),
            cell(&runbook)
        ));
    }
    out
}

/// The Operating page's table: each alert with its summary, linked to its runbook.
fn alerts_table() -> String {
    let mut out = String::from("| alert | what it means |\n|---|---|\n");
    for (name, summary, _) in alerts() {
        out.push_str(&format!(
            "| [`{name}`](operations.md#{}) | {} |\n",
            name.to_lowercase(),
            cell(&summary)
        ));
    }
    out
}

// ---------------------------------------------------------------------------------------
// The generated parts of the pages.

/// `text` with the part between `<!-- generated:NAME...-->` and
/// `<!-- end generated:NAME -->` replaced by `content`.
fn with_generated(text: &str, name: &str, content: &str) -> String {
    let start = format!("<!-- generated:{name}");
    let end = format!("<!-- end generated:{name} -->");
    let s = text
        .find(&start)
        .unwrap_or_else(|| panic!("no `{start}` marker"));
    let s = s + text[s..].find("-->\n").expect("the marker's end") + 4;
    let e = text
        .find(&end)
        .unwrap_or_else(|| panic!("no `{end}` marker"));
    assert!(s <= e, "the markers of {name} are out of order");
    format!("{}\n{}\n\n{}", &text[..s], content.trim_end(), &text[e..])
}

/// Whether DOCS_REFERENCE_WRITE asks to rewrite the generated parts rather than compare them.
fn writing() -> bool {
    std::env::var_os("DOCS_REFERENCE_WRITE").is_some()
}

/// `page` (relative to the repository) compared with what it should say, or rewritten to it
/// when [`writing`]; where it differs first, when it does and is not rewritten.
fn stale_or_rewrite(page: &str, expected: &str) -> Option<String> {
    let path = repo().join(page);
    let text = std::fs::read_to_string(&path).unwrap_or_default();
    if expected == text {
        return None;
    }
    if writing() {
        std::fs::write(&path, expected).expect("write the page");
        eprintln!("docs: rewrote {page}");
        return None;
    }
    let line = text
        .lines()
        .zip(expected.lines())
        .position(|(a, b)| a != b)
        .map_or(text.lines().count().min(expected.lines().count()), |l| l);
    Some(format!(
        "{page} line {}:\n  page:      {}\n  generated: {}",
        line + 1,
        text.lines().nth(line).unwrap_or("(end)"),
        expected.lines().nth(line).unwrap_or("(end)")
    ))
}

#[test]
fn the_generated_parts_of_the_docs_say_what_the_programs_the_chart_and_the_rules_say() {
    let pages = [
        (
            "docs/src/reference.md",
            vec![
                (
                    "reboot-controller",
                    flags_table(&parse_help(&help_of("reboot-controller"))),
                ),
                (
                    "reboot-agent",
                    flags_table(&parse_help(&help_of("reboot-agent"))),
                ),
                ("chart-values", values_table()),
            ],
        ),
        ("docs/src/operations.md", vec![("runbooks", runbooks())]),
        ("docs/src/operating.md", vec![("alerts", alerts_table())]),
    ];
    let mut stale = Vec::new();
    for (page, parts) in pages {
        let mut expected = read(&repo().join(page));
        for (name, content) in parts {
            expected = with_generated(&expected, name, &content);
        }
        stale.extend(stale_or_rewrite(page, &expected));
    }
    assert!(
        stale.is_empty(),
        "the docs disagree with the programs, the chart or the alert rules; run \
         `make docs-reference` and commit the result:\n{}",
        stale.join("\n")
    );
}

/// The chart's README is generated whole (`helm show readme` shows it, so it goes into the
/// package); `make chart-readme` rewrites it without the programs' builds.
#[test]
fn the_generated_parts_of_the_chart_readme_say_what_chart_yaml_and_values_yaml_say() {
    if let Some(stale) = stale_or_rewrite(README, &chart_readme::readme()) {
        panic!(
            "{README} is not what Chart.yaml, values.yaml and values.schema.json say; run \
             `make chart-readme` and commit the result:\n{stale}"
        );
    }
}

#[test]
fn every_alert_in_the_operations_table_links_to_its_runbook() {
    let page = read(&repo().join("docs/src/operations.md"));
    let missing = alerts()
        .into_iter()
        .map(|(name, _, _)| name)
        .filter(|name| !page.contains(&format!("[`{name}`](#{})", name.to_lowercase())))
        .collect::<Vec<_>>();
    assert!(
        missing.is_empty(),
        "docs/src/operations.md: the alerts table must link each alert to its runbook, as \
         [`Name`](#name); missing: {missing:?}"
    );
}

/// The rows of the Events table of operations.md: reason, type, the programs that write it.
fn events_table(page: &str) -> BTreeMap<String, (String, String)> {
    let table = page
        .split("## Events")
        .nth(1)
        .expect("docs/src/operations.md has a section ## Events");
    table
        .lines()
        .skip_while(|l| !l.starts_with("| reason"))
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .map(|row| {
            let cells: Vec<&str> = row.split('|').map(str::trim).collect();
            let reason = cells[1].trim_matches('`').to_owned();
            (reason, (cells[2].to_owned(), cells[3].to_owned()))
        })
        .collect()
}

/// What the Events table should say of each reason, from the programs' own vocabulary.
fn events_expected() -> BTreeMap<String, (String, String)> {
    let mut expected: BTreeMap<String, (String, Vec<&str>)> = BTreeMap::new();
    let kind = |warning: bool| if warning { "Warning" } else { "Normal" }.to_owned();
    for r in ControllerReason::ALL {
        expected.insert(r.to_string(), (kind(r.is_warning()), vec!["controller"]));
    }
    for r in AgentReason::ALL {
        let row = expected
            .entry(r.to_string())
            .or_insert((kind(r.is_warning()), vec![]));
        row.1.push("agent");
    }
    expected
        .into_iter()
        .map(|(reason, (kind, from))| (reason, (kind, from.join(", "))))
        .collect()
}

#[test]
fn the_events_table_names_every_reason_of_both_programs_with_its_type() {
    let table = events_table(&read(&repo().join("docs/src/operations.md")));
    let expected = events_expected();
    let wrong: Vec<_> = expected
        .iter()
        .filter(|(reason, row)| table.get(*reason) != Some(row))
        .map(|(reason, row)| format!("{reason}: {row:?}, the table says {:?}", table.get(reason)))
        .chain(
            table
                .keys()
                .filter(|r| !expected.contains_key(*r))
                .map(|r| format!("{r}: no program writes it")),
        )
        .collect();
    assert!(
        wrong.is_empty(),
        "docs/src/operations.md, the Events table (reason | type | from) against \
         common::events: {wrong:#?}"
    );
}

// ---------------------------------------------------------------------------------------
// Commands in code blocks.

/// The code blocks of a markdown text, each as its lines with `\` continuations joined.
fn code_block_commands(markdown: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut fence: Option<String> = None;
    let mut pending = String::new();
    for line in markdown.lines() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("```") {
            fence = match fence {
                None => Some(trimmed.to_string()),
                Some(_) => None,
            };
            pending.clear();
            continue;
        }
        if fence.is_none() {
            continue;
        }
        if let Some(start) = trimmed.strip_suffix('\\') {
            pending.push_str(start);
            pending.push(' ');
            continue;
        }
        pending.push_str(trimmed);
        out.push(std::mem::take(&mut pending));
    }
    out
}

/// The shell words of a command line, up to a comment; quotes removed (no escapes inside).
fn words(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut word = String::new();
    let mut quote: Option<char> = None;
    let mut started = false;
    for c in line.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => word.push(c),
            (None, '\'' | '"') => {
                quote = Some(c);
                started = true;
            }
            (None, '#') if !started => break,
            (None, c) if c.is_whitespace() => {
                if started {
                    out.push(std::mem::take(&mut word));
                    started = false;
                }
            }
            (None, c) => {
                word.push(c);
                started = true;
            }
        }
    }
    if started {
        out.push(word);
    }
    out
}

const SEPARATORS: [&str; 6] = ["|", "||", "&&", ";", "&", "$("];

/// Each `(program, flag)` of a command line that runs `reboot-controller` or
/// `reboot-agent`, and each `(helm, value path)` of `--set`.
fn flags_used(line: &str) -> Vec<(String, String)> {
    let words = words(line);
    let mut out = Vec::new();
    let mut at_command = true;
    let mut program: Option<String> = None;
    let mut iter = words.iter().peekable();
    while let Some(word) = iter.next() {
        if SEPARATORS.contains(&word.as_str()) {
            at_command = true;
            program = None;
            continue;
        }
        if at_command {
            if word.contains('=') && !word.starts_with('-') {
                continue; // VAR=value before the command
            }
            let base = word.rsplit('/').next().unwrap_or(word);
            program = matches!(base, "reboot-controller" | "reboot-agent" | "helm")
                .then(|| base.to_string());
            at_command = false;
            continue;
        }
        let Some(program) = &program else { continue };
        if program == "helm" {
            if matches!(word.as_str(), "--set" | "--set-string")
                && let Some(value) = iter.next()
            {
                for assignment in value.split(',') {
                    let path = assignment.split('=').next().unwrap_or(assignment);
                    out.push(("helm".to_string(), path.to_string()));
                }
            }
        } else if word.starts_with("--") {
            let flag = word.split('=').next().unwrap_or(word);
            out.push((program.clone(), flag.to_string()));
        }
    }
    out
}

fn markdown_files() -> Vec<PathBuf> {
    let mut files = vec![repo().join("README.md"), repo().join(README)];
    let mut pages = std::fs::read_dir(repo().join("docs/src"))
        .expect("docs/src")
        .map(|e| e.expect("a page").path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect::<Vec<_>>();
    pages.sort();
    files.extend(pages);
    files
}

#[test]
fn commands_in_the_docs_name_only_real_flags_and_chart_values() {
    let known: BTreeMap<&str, BTreeSet<String>> = ["reboot-controller", "reboot-agent"]
        .into_iter()
        .map(|p| {
            let mut names = parse_help(&help_of(p))
                .into_iter()
                .map(|f| f.name)
                .collect::<BTreeSet<_>>();
            names.extend(["--help".to_string(), "--version".to_string()]);
            (p, names)
        })
        .collect();
    let schema = chart_schema();
    let mut wrong = Vec::new();
    let mut checked = 0;
    for file in markdown_files() {
        for command in code_block_commands(&read(&file)) {
            for (program, name) in flags_used(&command) {
                checked += 1;
                let ok = match program.as_str() {
                    "helm" => chart_has_value(&schema, &name),
                    p => known[p].contains(&name),
                };
                if !ok {
                    wrong.push(format!(
                        "{}: `{program}` has no {} `{name}`: {command}",
                        file.strip_prefix(repo()).unwrap_or(&file).display(),
                        if program == "helm" {
                            "chart value"
                        } else {
                            "flag"
                        },
                    ));
                }
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "commands in the docs name flags or values that do not exist:\n{}",
        wrong.join("\n")
    );
    assert!(
        checked > 10,
        "only {checked} flags and values found in the docs' commands: is the parser broken?"
    );
}

#[test]
fn the_command_parser_finds_a_wrong_flag() {
    let md = "text\n```sh\nFOO=1 reboot-controller --max-unavailable 2 \\\n  --no-such-flag=3 # --ignored\nkubectl rollout status deployment/reboot-controller --timeout 1m\nhelm install x charts/x --set controller.flags.drain=false,image.tag=1\n```\n";
    let used = code_block_commands(md)
        .iter()
        .flat_map(|c| flags_used(c))
        .collect::<Vec<_>>();
    let pairs = used
        .iter()
        .map(|(p, f)| format!("{p} {f}"))
        .collect::<Vec<_>>();
    assert_eq!(
        pairs,
        [
            "reboot-controller --max-unavailable",
            "reboot-controller --no-such-flag",
            "helm controller.flags.drain",
            "helm image.tag"
        ]
    );
    let schema = chart_schema();
    assert!(chart_has_value(&schema, "controller.flags.drain"));
    assert!(chart_has_value(&schema, "namespace.labels.team"));
    assert!(!chart_has_value(&schema, "controller.flags.noSuchValue"));
}

// ---------------------------------------------------------------------------------------
// The book: it builds, and its links resolve.

fn mdbook() -> PathBuf {
    if let Some(path) = std::env::var_os("MDBOOK") {
        return PathBuf::from(path);
    }
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|dir| dir.join("mdbook"))
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!(
                "mdbook is not installed: `make docs` installs it (into the cache) and \
                 `make test` passes it on; or set MDBOOK to its path"
            )
        })
}

/// Every `href` and `src` of the HTML files under `dir` that stays inside it, checked: the
/// file exists and, with a `#fragment`, has an element with that id. The print page is left
/// out (it repeats every page's links).
fn broken_links(dir: &Path) -> Vec<String> {
    let mut files = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for entry in std::fs::read_dir(&d).expect("the book's directory") {
            let path = entry.expect("an entry").path();
            if path.is_dir() {
                todo.push(path);
            } else if path.extension().is_some_and(|e| e == "html") {
                files.push(path);
            }
        }
    }
    files.sort();
    let ids =
        |path: &Path| -> BTreeSet<String> { attributes(&read(path), "id").into_iter().collect() };
    let mut broken = Vec::new();
    for file in &files {
        if file.file_name().is_some_and(|n| n == "print.html") {
            continue;
        }
        let html = read(file);
        let mut links = attributes(&html, "href");
        links.extend(attributes(&html, "src"));
        for link in links {
            if link.contains("://") || link.starts_with("mailto:") || link.starts_with("data:") {
                continue;
            }
            let (target, fragment) = match link.split_once('#') {
                Some((t, f)) => (t, Some(f)),
                None => (link.as_str(), None),
            };
            let target = target.split('?').next().unwrap_or(target);
            let path = if target.is_empty() {
                file.clone()
            } else {
                file.parent().expect("a directory").join(target)
            };
            let name = file.strip_prefix(dir).unwrap_or(file).display().to_string();
            if !path.exists() {
                broken.push(format!("{name}: `{link}`: no such file"));
            } else if let Some(fragment) = fragment.filter(|f| !f.is_empty())
                && path.is_file()
                && !ids(&path).contains(fragment)
            {
                broken.push(format!("{name}: `{link}`: no such anchor"));
            }
        }
    }
    broken
}

/// The values of an HTML attribute, entities `&amp;` and `&quot;` decoded.
fn attributes(html: &str, attribute: &str) -> Vec<String> {
    let needle = format!(" {attribute}=\"");
    let mut out = Vec::new();
    let mut rest = html;
    while let Some(at) = rest.find(&needle) {
        rest = &rest[at + needle.len()..];
        let Some(end) = rest.find('"') else { break };
        out.push(rest[..end].replace("&amp;", "&").replace("&quot;", "\""));
        rest = &rest[end..];
    }
    out
}

/// The README's relative links: each file exists and, into the book's pages
/// (`docs/src/<page>.md#anchor`), each anchor is one of the built page's.
fn broken_readme_links(book: &Path) -> Vec<String> {
    let readme = read(&repo().join("README.md"));
    let mut broken = Vec::new();
    let mut rest = readme.as_str();
    while let Some(at) = rest.find("](") {
        rest = &rest[at + 2..];
        let Some(end) = rest.find(')') else { break };
        let link = &rest[..end];
        rest = &rest[end..];
        if link.contains("://") || link.starts_with("mailto:") || link.starts_with('#') {
            continue;
        }
        let (target, fragment) = match link.split_once('#') {
            Some((t, f)) => (t, Some(f)),
            None => (link, None),
        };
        if !repo().join(target).exists() {
            broken.push(format!("README.md: `{link}`: no such file"));
            continue;
        }
        let Some(fragment) = fragment else { continue };
        let Some(page) = target
            .strip_prefix("docs/src/")
            .and_then(|p| p.strip_suffix(".md"))
        else {
            broken.push(format!("README.md: `{link}`: an anchor outside the book"));
            continue;
        };
        let html = book.join(format!("{page}.html"));
        if !attributes(&read(&html), "id")
            .iter()
            .any(|id| id == fragment)
        {
            broken.push(format!("README.md: `{link}`: no such anchor"));
        }
    }
    broken
}

#[test]
fn the_book_builds_and_every_internal_link_resolves() {
    let out = tempfile::tempdir().expect("a temporary directory");
    let book = out.path().join("book");
    let build = Command::new(mdbook())
        .arg("build")
        .arg(repo().join("docs"))
        .arg("--dest-dir")
        .arg(&book)
        .output()
        .expect("run mdbook");
    assert!(
        build.status.success(),
        "mdbook build docs failed:\n{}",
        String::from_utf8_lossy(&build.stderr)
    );
    let stderr = String::from_utf8_lossy(&build.stderr);
    assert!(
        !stderr.contains("WARN") && !stderr.contains("ERROR"),
        "mdbook build docs warned:\n{stderr}"
    );
    let mut broken = broken_links(&book);
    broken.extend(broken_readme_links(&book));
    assert!(
        broken.is_empty(),
        "broken links in the docs:\n{}",
        broken.join("\n")
    );
    assert!(
        book.join("migrating-from-kured.html").is_file(),
        "the book has no kured migration page"
    );
}

#[test]
fn the_link_checker_finds_a_broken_link_and_a_broken_anchor() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    std::fs::write(
        dir.path().join("a.html"),
        r##"<h2 id="here">x</h2><a href="b.html#there">ok</a> <a href="b.html#nowhere">x</a>
        <a href="c.html">x</a> <a href="#here">ok</a> <a href="https://example.com/x">ok</a>"##,
    )
    .expect("write");
    std::fs::write(dir.path().join("b.html"), r#"<p id="there">y</p>"#).expect("write");
    assert_eq!(
        broken_links(dir.path()),
        [
            "a.html: `b.html#nowhere`: no such anchor",
            "a.html: `c.html`: no such file"
        ]
    );
}
