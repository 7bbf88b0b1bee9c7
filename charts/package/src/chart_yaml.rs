//! The fields of Chart.yaml the packager reads: top-level scalars.

/// The value of the top-level `key: value` line, unquoted.
pub fn field(text: &str, key: &str) -> Option<String> {
    text.lines().find_map(|line| {
        let rest = line.strip_prefix(key)?.strip_prefix(':')?;
        let value = rest.trim();
        let unquoted = value
            .strip_prefix('"')
            .and_then(|v| v.strip_suffix('"'))
            .or_else(|| value.strip_prefix('\'').and_then(|v| v.strip_suffix('\'')))
            .unwrap_or(value);
        Some(unquoted.to_owned())
    })
}

#[cfg(test)]
mod tests {
    use super::field;

    #[test]
    fn top_level_fields_unquoted() {
        let chart = "apiVersion: v2\nname: x\n# version: 9\nversion: 0.1.0\nappVersion: \"0.1.0\"\nkeywords:\n  version: 2\n";
        assert_eq!(field(chart, "version").as_deref(), Some("0.1.0"));
        assert_eq!(field(chart, "appVersion").as_deref(), Some("0.1.0"));
        assert_eq!(field(chart, "name").as_deref(), Some("x"));
        assert_eq!(field(chart, "kubeVersion"), None);
    }
}
