//! Where notifications go: `--notify-url` values as kured users write them (shoutrrr's URLs
//! for Slack, Teams and generic webhooks) or plain http(s) URLs, turned into the webhook to
//! POST to. Pure. A webhook URL is a secret (whoever has it may post to the channel), so a
//! target shows itself redacted, in logs and errors alike.

use std::fmt;

/// The forms `--notify-url` accepts, for the message that refuses another one.
pub const ACCEPTED: &str = "http(s)://HOST/PATH (a JSON POST; Slack's and Teams' own \
    webhook URLs get their bodies), generic://HOST/PATH or \
    generic+https://HOST/PATH (shoutrrr's generic webhook, https), generic+http://HOST/PATH, \
    slack://TOKEN-A/TOKEN-B/TOKEN-C or slack://hook:TOKEN-A-TOKEN-B-TOKEN-C@webhook (a Slack \
    incoming webhook), teams://GROUP@TENANT/ALT-ID/GROUP-OWNER[/EXTRA-ID]?host=ORG.webhook.office.com \
    (a Microsoft Teams incoming webhook)";

/// The body a target wants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// The notification as JSON: kind, node, pool, message, time, details.
    Json,
    /// A Slack incoming webhook's `{"text": ...}`.
    Slack,
    /// A Teams incoming webhook's MessageCard.
    Teams,
}

/// One webhook to POST to.
#[derive(Clone, PartialEq, Eq)]
pub struct Target {
    pub format: Format,
    /// The real URL, secret included: only ever sent to, never shown.
    pub url: String,
    /// What logs and errors say instead.
    pub shown: String,
}

impl fmt::Debug for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Target")
            .field("format", &self.format)
            .field("url", &self.shown)
            .finish()
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.shown)
    }
}

impl Target {
    /// `text` (a webhook's answer, an error) with every secret of the URL replaced by `***`:
    /// the URL, its path and query, each of their parts and the userinfo, as written and
    /// percent-decoded. Error pages echo what they were asked (Express's `Cannot POST /path`,
    /// Spring's `"path": ...`), and generic webhooks keep their token there.
    pub fn hide_secrets(&self, text: &str) -> String {
        let rest = self.url.split_once("://").map_or("", |(_, rest)| rest);
        let authority_len = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        let (authority, path_and_query) = rest.split_at(authority_len);
        let userinfo = authority.rsplit_once('@').map_or("", |(info, _)| info);
        let mut secrets: Vec<String> = [self.url.as_str(), path_and_query, userinfo]
            .into_iter()
            .chain(path_and_query.split(['/', '?', '&', '=', '#', ';']))
            .chain(userinfo.split(':'))
            .flat_map(|piece| {
                let decoded = percent_encoding::percent_decode_str(piece)
                    .decode_utf8_lossy()
                    .into_owned();
                [piece.to_owned(), decoded]
            })
            // Shorter pieces (`v1`, `api`) are no secret, and hiding them would garble the text.
            .filter(|piece| piece.len() >= SECRET_MIN_LEN)
            .collect();
        // The longest first, so that a part does not break up the whole it belongs to.
        secrets.sort_by_key(|piece| std::cmp::Reverse(piece.len()));
        secrets.dedup();
        secrets
            .iter()
            .fold(text.to_owned(), |text, secret| text.replace(secret, "***"))
    }
}

/// The shortest part of a URL's path, query or userinfo that is hidden from logs.
const SECRET_MIN_LEN: usize = 4;

/// `scheme://host[:port]/***`: the host tells which service it is; the path and query, where
/// webhooks keep their tokens, are left out. In shoutrrr's Slack and Teams forms even the host
/// is a token.
pub fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return "***".to_owned();
    };
    if ["slack", "teams"]
        .iter()
        .any(|s| scheme.eq_ignore_ascii_case(s))
    {
        return format!("{scheme}://***");
    }
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    // Userinfo (slack://hook:TOKEN@webhook) is a secret too.
    let host = authority.rsplit('@').next().unwrap_or_default();
    let hidden = if rest.len() > authority.len() || authority.contains('@') {
        "/***"
    } else {
        ""
    };
    format!("{scheme}://{host}{hidden}")
}

/// Reads one `--notify-url` value. The error names the problem and the accepted forms, and
/// shows the value redacted.
pub fn parse(value: &str) -> Result<Target, String> {
    let value = value.trim();
    let shown = redact(value);
    let refuse = |why: &str| format!("--notify-url {shown}: {why}; accepted forms: {ACCEPTED}");
    // http::Uri passes what follows a `#` unchecked, so a space or a line break there would
    // reach the webhook's URL (and make it differ from the value it came from).
    if value.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(refuse(
            "a URL holds no spaces, line breaks or control characters; percent-encode them \
             (a space is %20), or separate several URLs with commas",
        ));
    }
    let (scheme, rest) = value.split_once("://").ok_or_else(|| refuse("not a URL"))?;
    let (url, format) = match scheme.to_ascii_lowercase().as_str() {
        "http" | "https" => (value.to_owned(), Format::Json),
        "generic" | "generic+https" => (generic("https", rest), Format::Json),
        "generic+http" => (generic("http", rest), Format::Json),
        "slack" => (slack(rest).map_err(|why| refuse(&why))?, Format::Slack),
        "teams" => (teams(rest).map_err(|why| refuse(&why))?, Format::Teams),
        other => return Err(refuse(&format!("the scheme {other}:// is not supported"))),
    };
    let uri: http::Uri = url
        .parse()
        .map_err(|e| refuse(&format!("not a URL with a host ({e})")))?;
    let host = uri.host().unwrap_or_default().to_ascii_lowercase();
    if host.is_empty() {
        return Err(refuse("not a URL with a host"));
    }
    // A Slack or Teams webhook given as it is (kured's --slack-hook-url) wants its own body.
    let format = match format {
        Format::Json if host == "hooks.slack.com" => Format::Slack,
        Format::Json if host.ends_with(".webhook.office.com") || host == "outlook.office.com" => {
            Format::Teams
        }
        format => format,
    };
    Ok(Target {
        format,
        shown: redact(&url),
        url,
    })
}

/// shoutrrr's generic webhook: `generic://host/path?query` posts to `https://host/path`;
/// `disabletls=yes` means http, and shoutrrr's own options are not passed on.
fn generic(scheme: &str, rest: &str) -> String {
    let (place, query) = rest.split_once('?').unwrap_or((rest, ""));
    let mut scheme = scheme;
    let kept: Vec<&str> = query
        .split('&')
        .filter(|pair| !pair.is_empty())
        .filter(|pair| {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            match key.to_ascii_lowercase().as_str() {
                "disabletls" => {
                    if matches!(value, "yes" | "true" | "1") {
                        scheme = "http";
                    }
                    false
                }
                "template" | "contenttype" | "messagekey" | "titlekey" | "title"
                | "requestmethod" => false,
                _ => true,
            }
        })
        .collect();
    let query = if kept.is_empty() {
        String::new()
    } else {
        format!("?{}", kept.join("&"))
    };
    format!("{scheme}://{place}{query}")
}

/// shoutrrr's Slack webhook forms: `slack://[botname@]A/B/C` (before 0.5) and
/// `slack://hook:A-B-C@webhook` (0.5 on); both post to `https://hooks.slack.com/services/A/B/C`.
fn slack(rest: &str) -> Result<String, String> {
    let rest = rest.split(['?', '#']).next().unwrap_or_default();
    let tokens: Vec<&str> = match rest.split_once('@') {
        Some((userinfo, channel)) => match userinfo.split_once(':') {
            Some((kind, token)) if kind.eq_ignore_ascii_case("hook") => {
                if !channel
                    .trim_end_matches('/')
                    .eq_ignore_ascii_case("webhook")
                {
                    return Err(
                        "a Slack webhook token is written slack://hook:TOKEN@webhook".to_owned(),
                    );
                }
                token.split(['-', '/']).collect()
            }
            Some(_) => {
                return Err(
                    "only Slack incoming webhooks are supported (slack://hook:...@webhook), not \
                     bot API tokens"
                        .to_owned(),
                );
            }
            // An old-style bot name before the tokens: the webhook names its own sender.
            None => channel.split('/').collect(),
        },
        None => rest.split('/').collect(),
    };
    let tokens: Vec<&str> = tokens.into_iter().filter(|t| !t.is_empty()).collect();
    if tokens.len() != 3 || tokens.iter().any(|t| !t.chars().all(char::is_alphanumeric)) {
        return Err("a Slack webhook has three tokens (slack://A/B/C)".to_owned());
    }
    Ok(format!(
        "https://hooks.slack.com/services/{}/{}/{}",
        tokens[0], tokens[1], tokens[2]
    ))
}

/// shoutrrr's Teams form `teams://group@tenant/altId/groupOwner[/extraId]?host=...` posts to
/// `https://HOST/webhookb2/group@tenant/IncomingWebhook/altId/groupOwner[/extraId]`.
fn teams(rest: &str) -> Result<String, String> {
    let form = "a Teams webhook is written teams://GROUP@TENANT/ALT-ID/GROUP-OWNER?host=ORG.webhook.office.com";
    let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
    let host = query
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .find(|(key, _)| key.eq_ignore_ascii_case("host"))
        .map_or("outlook.office.com", |(_, host)| host);
    let (group, path) = path.split_once('@').ok_or_else(|| form.to_owned())?;
    let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
    let (tenant, ids) = parts.split_first().ok_or_else(|| form.to_owned())?;
    if group.is_empty() || !(2..=3).contains(&ids.len()) || host.is_empty() {
        return Err(form.to_owned());
    }
    Ok(format!(
        "https://{host}/webhookb2/{group}@{tenant}/IncomingWebhook/{}",
        ids.join("/")
    ))
}

/// Every target of the `--notify-url` values: each value may hold several, separated by commas
/// or spaces (as `NOTIFY_URL` does).
pub fn parse_all(values: &[String]) -> Result<Vec<Target>, String> {
    values
        .iter()
        .flat_map(|v| v.split([',', ' ', '\t', '\n']))
        .filter(|v| !v.trim().is_empty())
        .map(parse)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(value: &str) -> (Format, String) {
        let target = parse(value).unwrap_or_else(|e| panic!("{value}: {e}"));
        (target.format, target.url)
    }

    #[test]
    fn the_secrets_of_a_url_are_hidden_wherever_a_text_repeats_them() {
        let target = parse("https://bob:PASSW0RD@example.com/hooks/T0KEN%2Dx?key=S3CRET&v=1")
            .expect("a valid URL");
        let text = "denied bob:PASSW0RD at /hooks/T0KEN-x (key S3CRET, v=1) on example.com";
        let hidden = target.hide_secrets(text);
        for secret in ["PASSW0RD", "T0KEN", "S3CRET"] {
            assert!(!hidden.contains(secret), "{secret} shown: {hidden}");
        }
        assert!(
            hidden.contains("example.com"),
            "the host is no secret: {hidden}"
        );
    }

    #[test]
    fn every_accepted_form_becomes_its_webhook() {
        let slack = "https://hooks.slack.com/services/T0001/B0002/XXXX3";
        for (value, want) in [
            (
                "http://127.0.0.1:8000/hook",
                (Format::Json, "http://127.0.0.1:8000/hook"),
            ),
            (
                "https://example.com/a?b=c",
                (Format::Json, "https://example.com/a?b=c"),
            ),
            (
                "generic://example.com/hook",
                (Format::Json, "https://example.com/hook"),
            ),
            (
                "generic+https://example.com/hook?template=json",
                (Format::Json, "https://example.com/hook"),
            ),
            (
                "generic+http://10.0.0.1:9000/x?template=json&k=v",
                (Format::Json, "http://10.0.0.1:9000/x?k=v"),
            ),
            (
                "generic://example.com/hook?disabletls=yes",
                (Format::Json, "http://example.com/hook"),
            ),
            ("slack://T0001/B0002/XXXX3", (Format::Slack, slack)),
            (slack, (Format::Slack, slack)),
            (
                "https://acme.webhook.office.com/webhookb2/g@t/IncomingWebhook/a/o",
                (
                    Format::Teams,
                    "https://acme.webhook.office.com/webhookb2/g@t/IncomingWebhook/a/o",
                ),
            ),
            ("slack://kured@T0001/B0002/XXXX3", (Format::Slack, slack)),
            (
                "slack://hook:T0001-B0002-XXXX3@webhook",
                (Format::Slack, slack),
            ),
            (
                "slack://hook:T0001-B0002-XXXX3@webhook/?color=good",
                (Format::Slack, slack),
            ),
            (
                "teams://g1@t2/a3/o4?host=acme.webhook.office.com",
                (
                    Format::Teams,
                    "https://acme.webhook.office.com/webhookb2/g1@t2/IncomingWebhook/a3/o4",
                ),
            ),
            (
                "teams://g1@t2/a3/o4/e5?host=acme.webhook.office.com",
                (
                    Format::Teams,
                    "https://acme.webhook.office.com/webhookb2/g1@t2/IncomingWebhook/a3/o4/e5",
                ),
            ),
            (
                "teams://g1@t2/a3/o4",
                (
                    Format::Teams,
                    "https://outlook.office.com/webhookb2/g1@t2/IncomingWebhook/a3/o4",
                ),
            ),
        ] {
            assert_eq!(url(value), (want.0, want.1.to_owned()), "{value}");
        }
    }

    #[test]
    fn other_forms_are_refused_with_the_accepted_ones_and_without_the_secret() {
        for (value, why) in [
            (
                "smtp://user:secret@mail.example.com:25/?to=a@b",
                "smtp:// is not supported",
            ),
            (
                "telegram://token-secret@telegram?chats=1",
                "telegram:// is not supported",
            ),
            ("hooks.slack.com/services/A/B/secret", "not a URL"),
            ("slack://xoxb:secret-token@C001", "not bot API tokens"),
            ("slack://T0001/secret", "three tokens"),
            (
                "slack://hook:T0001-B0002-secret@C001",
                "slack://hook:TOKEN@webhook",
            ),
            ("teams://secret/a3/o4", "teams://GROUP@TENANT"),
            ("http:///secret", "not a URL with a host"),
            ("https://", "not a URL with a host"),
            // Found by fuzzing: taken with the space, after a `#` that http::Uri skips.
            ("generic://example.com/hook#x?a=b secret", "no spaces"),
            ("https://example.com/secret\rhook", "control characters"),
        ] {
            let error = parse(value).expect_err(value);
            assert!(error.contains(why), "{value}: {error}");
            assert!(error.contains("accepted forms: http(s)://"), "{error}");
            assert!(
                !error.contains("secret"),
                "{value}: the secret shows in {error}"
            );
        }
    }

    #[test]
    fn a_target_shows_its_host_only() {
        let target = parse("slack://hook:T0001-B0002-secret@webhook").unwrap();
        assert_eq!(target.to_string(), "https://hooks.slack.com/***");
        assert!(!format!("{target:?}").contains("secret"));
        assert_eq!(redact("http://127.0.0.1:80"), "http://127.0.0.1:80");
        assert_eq!(redact("http://u:secret@h/x"), "http://h/***");
        assert_eq!(redact("slack://T1/B2/C3"), "slack://***");
        assert_eq!(redact("teams://g@t/a/o?host=x"), "teams://***");
    }

    #[test]
    fn several_targets_come_in_one_value_separated_by_commas_or_spaces() {
        let values = vec![
            "http://a/1, http://b/2".to_owned(),
            "http://c/3 slack://T1/B2/C3".to_owned(),
        ];
        let shown: Vec<String> = parse_all(&values)
            .unwrap()
            .iter()
            .map(|t| t.url.clone())
            .collect();
        assert_eq!(
            shown,
            [
                "http://a/1",
                "http://b/2",
                "http://c/3",
                "https://hooks.slack.com/services/T1/B2/C3"
            ]
        );
        assert!(parse_all(&[" ,".to_owned()]).unwrap().is_empty());
    }
}
