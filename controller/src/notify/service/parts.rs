//! A shoutrrr URL taken apart as Go's `net/url` does: `scheme://user:password@host:port/path?query`,
//! each part percent-decoded, the query's options found by name whatever their case.

use percent_encoding::percent_decode_str;

/// The parts of one `--notify-url` value.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Parts {
    pub user: String,
    pub password: Option<String>,
    /// `host` or `host:port`, as written.
    pub host: String,
    /// The path, without its leading `/`, as written (percent-encoded).
    pub path: String,
    /// The query's pairs, in order, decoded.
    pub query: Vec<(String, String)>,
}

impl Parts {
    /// Takes apart what follows `scheme://`.
    pub fn of(rest: &str) -> Self {
        let rest = rest.split('#').next().unwrap_or_default();
        let (place, query) = rest.split_once('?').unwrap_or((rest, ""));
        let authority_len = place.find('/').unwrap_or(place.len());
        let (authority, path) = place.split_at(authority_len);
        let (userinfo, host) = match authority.rsplit_once('@') {
            Some((info, host)) => (Some(info), host),
            None => (None, authority),
        };
        let (user, password) = match userinfo.map(|info| info.split_once(':')) {
            Some(Some((user, password))) => (decode(user), Some(decode(password))),
            Some(None) => (decode(userinfo.unwrap_or_default()), None),
            None => (String::new(), None),
        };
        Self {
            user,
            password,
            host: host.to_owned(),
            path: path.trim_start_matches('/').to_owned(),
            query: query
                .split('&')
                .filter(|pair| !pair.is_empty())
                .map(|pair| {
                    let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
                    (decode_form(key), decode_form(value))
                })
                .collect(),
        }
    }

    /// The value of the option `key` (any of its names), if given.
    pub fn option(&self, keys: &[&str]) -> Option<&str> {
        self.query
            .iter()
            .find(|(key, _)| keys.iter().any(|k| key.eq_ignore_ascii_case(k)))
            .map(|(_, value)| value.as_str())
    }

    /// The option `key`, or "" when it is not given.
    pub fn text(&self, keys: &[&str]) -> String {
        self.option(keys).unwrap_or_default().to_owned()
    }

    /// A yes/no option as shoutrrr reads one (`yes`, `true`, `1`), or `default` when absent.
    pub fn flag(&self, keys: &[&str], default: bool) -> bool {
        self.option(keys).map_or(default, |value| {
            matches!(value.to_ascii_lowercase().as_str(), "yes" | "true" | "1")
        })
    }

    /// A comma-separated list option.
    pub fn list(&self, keys: &[&str]) -> Vec<String> {
        self.option(keys)
            .unwrap_or_default()
            .split(',')
            .map(str::trim)
            .filter(|item| !item.is_empty())
            .map(str::to_owned)
            .collect()
    }

    /// The path's segments, decoded, empty ones left out.
    pub fn segments(&self) -> Vec<String> {
        self.path
            .split('/')
            .filter(|segment| !segment.is_empty())
            .map(decode)
            .collect()
    }

    /// The host without its port.
    pub fn hostname(&self) -> &str {
        match self.host.rsplit_once(':') {
            Some((name, port)) if port.chars().all(|c| c.is_ascii_digit()) => name,
            _ => &self.host,
        }
    }
}

/// `text` percent-decoded.
pub fn decode(text: &str) -> String {
    percent_decode_str(text).decode_utf8_lossy().into_owned()
}

/// A query's key or value decoded as a form is: `+` is a space.
fn decode_form(text: &str) -> String {
    decode(&text.replace('+', " "))
}

/// `text` percent-encoded for a URL's path segment or query value.
pub fn encode(text: &str) -> String {
    percent_encoding::utf8_percent_encode(text, COMPONENT).to_string()
}

/// What a path segment or query value keeps encoded: all but unreserved characters.
const COMPONENT: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// `pairs` as an `application/x-www-form-urlencoded` body.
pub fn form(pairs: &[(&str, &str)]) -> String {
    pairs
        .iter()
        .map(|(key, value)| format!("{}={}", encode(key), encode(value)))
        .collect::<Vec<_>>()
        .join("&")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_comes_apart_as_go_reads_it() {
        let parts = Parts::of("bot%40x.org:k%2Fey@host.example:8443/a/b%20c?Stream=ops&x=1+2#f");
        assert_eq!(parts.user, "bot@x.org");
        assert_eq!(parts.password.as_deref(), Some("k/ey"));
        assert_eq!(parts.host, "host.example:8443");
        assert_eq!(parts.hostname(), "host.example");
        assert_eq!(parts.segments(), ["a", "b c"]);
        assert_eq!(parts.option(&["stream"]), Some("ops"));
        assert_eq!(parts.text(&["x"]), "1 2");
        assert!(parts.flag(&["missing"], true));
        assert_eq!(form(&[("a b", "c&d")]), "a%20b=c%26d");
    }
}
