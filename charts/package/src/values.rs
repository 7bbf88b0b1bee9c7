//! Sets scalar values of the chart's values.yaml in place: each is one line `key: value`
//! found by its dotted path (the keys above it, by indentation), and only that line changes,
//! so that every comment and every other value stays as it is checked in (`helm show values`
//! of the package shows the same file). Enough for the chart's own values.yaml: mappings,
//! block lists and scalars, comments on lines of their own.

use crate::Error;
use std::path::Path;

/// `text` with the line of each `(path, value)` set to `key: "value"` (kept as it is when it
/// says that value already); an error when a path has no line of a scalar of its own.
pub fn set(text: &str, path: &Path, values: &[(String, String)]) -> Result<String, Error> {
    let mut found = vec![false; values.len()];
    let mut out = String::with_capacity(text.len() + 200);
    let mut keys: Vec<(usize, &str)> = Vec::new();
    let mut list: Option<usize> = None;
    for line in text.split_inclusive('\n') {
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        let content = trimmed.trim_end();
        let skip = content.is_empty()
            || content.starts_with('#')
            || list.is_some_and(|l| indent > l || (indent == l && content.starts_with("- ")));
        if skip {
            out.push_str(line);
            continue;
        }
        list = None;
        if content.starts_with("- ") {
            // A block list's items (and their maps) belong to the key above them.
            list = Some(indent);
            out.push_str(line);
            continue;
        }
        let Some((key, rest)) = content.split_once(':') else {
            out.push_str(line);
            continue;
        };
        while keys.last().is_some_and(|(i, _)| *i >= indent) {
            keys.pop();
        }
        let dotted = keys
            .iter()
            .map(|(_, k)| *k)
            .chain([key])
            .collect::<Vec<_>>()
            .join(".");
        let rest = rest.trim();
        if rest.is_empty() {
            keys.push((indent, key));
        }
        match values.iter().position(|(p, _)| *p == dotted) {
            Some(at) if !rest.is_empty() && !rest.starts_with('#') => {
                found[at] = true;
                let value = &values[at].1;
                if rest.trim_matches('"') == value {
                    // Already so: the line stays as it is written.
                    out.push_str(line);
                } else {
                    let eol = &line[line.trim_end().len()..];
                    out.push_str(&format!("{}{key}: \"{value}\"{eol}", &line[..indent]));
                }
            }
            _ => out.push_str(line),
        }
    }
    if let Some(at) = found.iter().position(|f| !f) {
        return Err(Error::NoValue {
            path: path.to_owned(),
            value: values[at].0.clone(),
        });
    }
    Ok(out)
}

/// Whether `value` can be written between double quotes as it is: an image registry or a
/// digest has no quote, backslash, space or control character.
pub fn plain(value: &str) -> bool {
    !value.is_empty()
        && value
            .chars()
            .all(|c| c.is_ascii_graphic() && !matches!(c, '"' | '\\' | '#'))
}

#[cfg(test)]
mod tests {
    use super::*;

    const VALUES: &str = "# top\nimage:\n  registry: ghcr.io/x\n  tag: \"\"\nlist:\n  - digest: \"\"\n    image:\n      digest: \"\"\ncontroller:\n  image:\n    # `sha256:...`; wins over the tag.\n    digest: \"\"\n  flags:\n    digest: \"\"\nagent:\n  image:\n    repository: reboot-agent\n    digest: \"\"\n";

    fn set_all(pairs: &[(&str, &str)]) -> Result<String, Error> {
        let values = pairs
            .iter()
            .map(|(p, v)| (p.to_string(), v.to_string()))
            .collect::<Vec<_>>();
        set(VALUES, Path::new("values.yaml"), &values)
    }

    #[test]
    fn only_the_lines_of_the_paths_change() {
        let out = set_all(&[
            ("controller.image.digest", "sha256:c"),
            ("agent.image.digest", "sha256:a"),
            ("image.registry", "r.example/x"),
        ])
        .expect("set");
        let expected = VALUES
            .replace("  registry: ghcr.io/x\n", "  registry: \"r.example/x\"\n")
            .replace(
                "wins over the tag.\n    digest: \"\"",
                "wins over the tag.\n    digest: \"sha256:c\"",
            )
            .replace(
                "reboot-agent\n    digest: \"\"",
                "reboot-agent\n    digest: \"sha256:a\"",
            );
        assert_eq!(out, expected);
    }

    #[test]
    fn a_line_that_says_the_value_already_stays_as_written() {
        let out = set_all(&[("image.registry", "ghcr.io/x"), ("image.tag", "")]).expect("set");
        assert_eq!(out, VALUES);
    }

    #[test]
    fn a_path_without_a_scalar_line_is_an_error() {
        let e = set_all(&[("agent.digest", "sha256:a")]).expect_err("no such line");
        assert!(e.to_string().contains("`agent.digest`"), "{e}");
        let e = set_all(&[("controller.image", "x")]).expect_err("a mapping");
        assert!(e.to_string().contains("`controller.image`"), "{e}");
    }

    #[test]
    fn only_plain_values_are_written() {
        assert!(plain("registry.example.com:5000/infra"));
        assert!(plain("sha256:0123"));
        assert!(!plain("a\"b") && !plain("a b") && !plain("") && !plain("a#b"));
    }
}
