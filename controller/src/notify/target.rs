//! Where notifications go: `--notify-url` values as kured users write them (shoutrrr's URLs,
//! see [`super::service`]) or plain http(s) URLs, each turned into the service it names. Pure.
//! A webhook URL is a secret (whoever has it may post to the channel), so a target shows
//! itself redacted, in logs and errors alike.

use super::Notice;
use super::service::{Delivery, Service};
use std::fmt;

pub use super::service::ACCEPTED;

/// One service to tell.
#[derive(Clone, PartialEq, Eq)]
pub struct Target {
    pub service: Service,
    /// The value it was read from, secrets included: never shown.
    pub source: String,
    /// The URL it posts to, secrets included: only ever sent to, never shown.
    pub url: String,
    /// What logs and errors say instead.
    pub shown: String,
}

impl fmt::Debug for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Target").field("url", &self.shown).finish()
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.shown)
    }
}

impl Target {
    /// What tells `notice`.
    pub fn deliveries(&self, notice: &Notice) -> Vec<Delivery> {
        self.service.deliveries(notice)
    }

    /// `text` (a webhook's answer, an error) with every secret of the URL replaced by `***`:
    /// the URL, its path and query, each of their parts and the userinfo, as written and
    /// percent-decoded. Error pages echo what they were asked (Express's `Cannot POST /path`,
    /// Spring's `"path": ...`), and generic webhooks keep their token there.
    pub fn hide_secrets(&self, text: &str) -> String {
        [self.source.as_str(), self.url.as_str()]
            .into_iter()
            .fold(text.to_owned(), |text, url| hide_secrets_of(url, &text))
    }
}

/// `text` with the secrets of `url` hidden (see [`Target::hide_secrets`]).
fn hide_secrets_of(url: &str, text: &str) -> String {
    let rest = url.split_once("://").map_or("", |(_, rest)| rest);
    let authority_len = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, path_and_query) = rest.split_at(authority_len);
    let (userinfo, host) = authority.rsplit_once('@').unwrap_or(("", authority));
    let scheme = url.split_once("://").map_or("", |(scheme, _)| scheme);
    let host = if SECRET_HOSTS.iter().any(|s| scheme.eq_ignore_ascii_case(s)) {
        host
    } else {
        ""
    };
    let mut secrets: Vec<String> = [url, path_and_query, userinfo, host]
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

/// The shortest part of a URL's path, query or userinfo that is hidden from logs.
const SECRET_MIN_LEN: usize = 4;

/// The schemes whose host is a token (a tenant, a webhook's ID, a user's key).
const SECRET_HOSTS: [&str; 5] = ["slack", "teams", "discord", "pushover", "telegram"];

/// `scheme://host[:port]/***`: the host tells which service it is; the userinfo, path and
/// query, where services keep their tokens, are left out. In shoutrrr's Slack, Teams, Discord,
/// Pushover and Telegram forms even the host is a token.
pub fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return "***".to_owned();
    };
    if SECRET_HOSTS.iter().any(|s| scheme.eq_ignore_ascii_case(s)) {
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
    let scheme = scheme.to_ascii_lowercase();
    let service = Service::parse(&scheme, rest)
        .ok_or_else(|| refuse(&format!("the scheme {scheme}:// is not supported")))?
        .map_err(|why| refuse(&why))?;
    let url = service.endpoint();
    let uri: http::Uri = url
        .parse()
        .map_err(|e| refuse(&format!("not a URL with a host ({e})")))?;
    let host = uri.host().unwrap_or_default().to_ascii_lowercase();
    if host.is_empty() {
        return Err(refuse("not a URL with a host"));
    }
    // A Slack or Teams webhook given as it is (kured's --slack-hook-url) wants its own body.
    let service = match service {
        Service::Generic(_) if matches!(scheme.as_str(), "http" | "https") => {
            Service::plain(&host, url.clone()).unwrap_or(service)
        }
        service => service,
    };
    Ok(Target {
        service,
        source: value.to_owned(),
        shown: redact(&url),
        url,
    })
}

/// Every target of the `--notify-url` values: each value may hold several, separated by spaces,
/// or by commas where a URL follows (as `NOTIFY_URL` does); a comma inside a URL
/// (`to=a@x.org,b@x.org`, `chats=@a,@b`) belongs to its list.
pub fn parse_all(values: &[String]) -> Result<Vec<Target>, String> {
    values
        .iter()
        .flat_map(|v| v.split([' ', '\t', '\n']))
        .flat_map(split_commas)
        .filter(|v| !v.trim().is_empty())
        .map(|v| parse(&v))
        .collect()
}

/// `word` cut at each comma that a `scheme://` follows.
fn split_commas(word: &str) -> Vec<String> {
    let mut urls: Vec<String> = Vec::new();
    for piece in word.split(',') {
        let starts_url = piece
            .split_once("://")
            .is_some_and(|(scheme, _)| !scheme.is_empty() && scheme.chars().all(is_scheme_char));
        match urls.last_mut() {
            Some(last) if !starts_url => {
                last.push(',');
                last.push_str(piece);
            }
            _ => urls.push(piece.to_owned()),
        }
    }
    // A comma before or after the URLs separates nothing.
    urls.iter()
        .map(|url| url.trim_matches(',').to_owned())
        .collect()
}

fn is_scheme_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.')
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The service's kind (the name of its variant) and the URL it posts to.
    fn url(value: &str) -> (&'static str, String) {
        let target = parse(value).unwrap_or_else(|e| panic!("{value}: {e}"));
        let kind = match target.service {
            Service::Slack(_) => "slack",
            Service::Teams(_) => "teams",
            Service::Generic(_) => "json",
            _ => "other",
        };
        (kind, target.url)
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
                ("json", "http://127.0.0.1:8000/hook"),
            ),
            (
                "https://example.com/a?b=c",
                ("json", "https://example.com/a?b=c"),
            ),
            (
                "generic://example.com/hook",
                ("json", "https://example.com/hook"),
            ),
            (
                "generic+https://example.com/hook?template=json",
                ("json", "https://example.com/hook"),
            ),
            (
                "generic+http://10.0.0.1:9000/x?template=json&k=v",
                ("json", "http://10.0.0.1:9000/x?k=v"),
            ),
            (
                "generic://example.com/hook?disabletls=yes",
                ("json", "http://example.com/hook"),
            ),
            ("slack://T0001/B0002/XXXX3", ("slack", slack)),
            (slack, ("slack", slack)),
            (
                "https://acme.webhook.office.com/webhookb2/g@t/IncomingWebhook/a/o",
                (
                    "teams",
                    "https://acme.webhook.office.com/webhookb2/g@t/IncomingWebhook/a/o",
                ),
            ),
            ("slack://kured@T0001/B0002/XXXX3", ("slack", slack)),
            ("slack://hook:T0001-B0002-XXXX3@webhook", ("slack", slack)),
            (
                "slack://hook:T0001-B0002-XXXX3@webhook/?color=good",
                ("slack", slack),
            ),
            (
                "teams://g1@t2/a3/o4?host=acme.webhook.office.com",
                (
                    "teams",
                    "https://acme.webhook.office.com/webhookb2/g1@t2/IncomingWebhook/a3/o4",
                ),
            ),
            (
                "teams://g1@t2/a3/o4/e5?host=acme.webhook.office.com",
                (
                    "teams",
                    "https://acme.webhook.office.com/webhookb2/g1@t2/IncomingWebhook/a3/o4/e5",
                ),
            ),
            (
                "teams://g1@t2/a3/o4",
                (
                    "teams",
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
                "from=ADDRESS",
            ),
            (
                "irc://user:secret@irc.example.com/ops",
                "irc:// is not supported",
            ),
            ("telegram://secret@telegram?chats=1", "BOT-ID:BOT-KEY"),
            ("pushover://shoutrrr:secret@", "USER-KEY"),
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
        assert_eq!(redact("discord://t0ken@12345"), "discord://***");
        assert_eq!(
            redact("ntfy://u:secret@ntfy.sh/topic"),
            "ntfy://ntfy.sh/***"
        );
        let target = parse("pushover://shoutrrr:t0ken@us3rkey").unwrap();
        assert_eq!(target.to_string(), "https://api.pushover.net/***");
        let hidden = target.hide_secrets("bad token t0ken for user us3rkey");
        assert_eq!(hidden, "bad token *** for user ***");
    }

    #[test]
    fn several_targets_come_in_one_value_separated_by_commas_or_spaces() {
        let values = vec![
            "http://a/1, http://b/2".to_owned(),
            "http://c/3 slack://T1/B2/C3".to_owned(),
            "telegram://1:K@telegram?chats=@a,@b,,generic://d/4?$to=x,y".to_owned(),
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
                "https://hooks.slack.com/services/T1/B2/C3",
                "https://api.telegram.org/bot1:K/sendMessage",
                "https://d/4",
            ]
        );
        assert!(parse_all(&[" ,".to_owned()]).unwrap().is_empty());
        let telegram = parse_all(&["telegram://1:K@telegram?chats=@a,@b".to_owned()]).unwrap();
        assert_eq!(telegram[0].deliveries(&Notice::blank()).len(), 2);
    }
}
