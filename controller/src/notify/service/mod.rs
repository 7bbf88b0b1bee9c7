//! The services `--notify-url` reaches, each read from the URL shoutrrr (and so kured) users
//! write for it and turned into the HTTP requests its API expects. Pure: a service is parsed
//! once at start; each notification becomes requests that the sender only has to send.

mod chat;
mod generic;
mod parts;
mod push;
mod slack;
pub mod smtp;
mod teams;

use super::Notice;
use bytes::Bytes;
use parts::Parts;
use serde_json::Value;

/// The forms `--notify-url` accepts, for the message that refuses another one.
pub const ACCEPTED: &str = "http(s)://HOST/PATH (a JSON POST; Slack's and Teams' own \
    webhook URLs get their bodies), generic[+http]://HOST/PATH[?template=json&...], \
    slack://hook:TOKEN-A-TOKEN-B-TOKEN-C@webhook or slack://TOKEN-A/TOKEN-B/TOKEN-C, \
    teams://GROUP@TENANT/ALT-ID/GROUP-OWNER[/EXTRA-ID]?host=ORG.webhook.office.com, \
    discord://TOKEN@WEBHOOK-ID, telegram://BOT-TOKEN@telegram?chats=CHAT[,CHAT], \
    mattermost://[USER@]HOST/TOKEN[/CHANNEL], rocketchat://[USER@]HOST/TOKEN-A/TOKEN-B[/CHANNEL], \
    googlechat://chat.googleapis.com/v1/spaces/SPACE/messages?key=KEY&token=TOKEN, \
    ntfy://[USER:PASSWORD@]HOST/TOPIC, gotify://HOST[/PATH]/TOKEN, \
    pushover://shoutrrr:API-TOKEN@USER-KEY, zulip://BOT-MAIL:BOT-KEY@HOST?stream=STREAM, \
    matrix://:ACCESS-TOKEN@HOST?rooms=!ROOM-ID[,!ROOM-ID], opsgenie://HOST/API-KEY, \
    smtp://[USER:PASSWORD@]HOST[:PORT]/?from=ADDRESS&to=ADDRESS[,ADDRESS]";

/// One message on its way: an HTTP request or an e-mail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Delivery {
    Http(Request),
    Mail(smtp::Mail),
}

/// One HTTP request to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub method: http::Method,
    pub url: String,
    /// Content-Type and Authorization included.
    pub headers: Vec<(String, String)>,
    pub body: Bytes,
}

impl Request {
    /// A POST of `body` as JSON.
    fn json(url: String, body: &Value) -> Self {
        Self::post(url, "application/json", body.to_string())
    }

    /// A POST of `pairs` as a form.
    fn form(url: String, pairs: &[(&str, &str)]) -> Self {
        Self::post(url, "application/x-www-form-urlencoded", parts::form(pairs))
    }

    fn post(url: String, content_type: &str, body: String) -> Self {
        Self {
            method: http::Method::POST,
            url,
            headers: vec![("content-type".to_owned(), content_type.to_owned())],
            body: Bytes::from(body),
        }
    }

    /// The same request with one more header.
    fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.to_owned(), value.to_owned()));
        self
    }

    /// The same request with HTTP basic authentication.
    fn basic_auth(self, user: &str, password: &str) -> Self {
        use base64::Engine as _;
        let token = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        self.header("authorization", &format!("Basic {token}"))
    }
}

/// A service a notification goes to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Service {
    Generic(generic::Generic),
    Slack(slack::Slack),
    Mattermost(slack::Mattermost),
    RocketChat(slack::RocketChat),
    Teams(teams::Teams),
    GoogleChat(teams::GoogleChat),
    Discord(chat::Discord),
    Telegram(chat::Telegram),
    Zulip(chat::Zulip),
    Matrix(chat::Matrix),
    Ntfy(push::Ntfy),
    Gotify(push::Gotify),
    Pushover(push::Pushover),
    OpsGenie(push::OpsGenie),
    Smtp(smtp::Smtp),
}

impl Service {
    /// Reads the URL `scheme://rest`; `None` for a scheme that is not supported, an error
    /// (without secrets) for a malformed URL of a supported one.
    pub fn parse(scheme: &str, rest: &str) -> Option<Result<Self, String>> {
        let parts = Parts::of(rest);
        let service = match scheme {
            "http" | "https" => generic::Generic::plain(scheme, rest).map(Self::Generic),
            "generic" | "generic+https" => {
                generic::Generic::parse("https", &parts).map(Self::Generic)
            }
            "generic+http" => generic::Generic::parse("http", &parts).map(Self::Generic),
            "slack" => slack::Slack::parse(rest, &parts).map(Self::Slack),
            "mattermost" => slack::Mattermost::parse(&parts).map(Self::Mattermost),
            "rocketchat" => slack::RocketChat::parse(rest, &parts).map(Self::RocketChat),
            "teams" => teams::Teams::parse(&parts).map(Self::Teams),
            "googlechat" | "hangouts" => teams::GoogleChat::parse(&parts).map(Self::GoogleChat),
            "discord" => chat::Discord::parse(&parts).map(Self::Discord),
            "telegram" => chat::Telegram::parse(&parts).map(Self::Telegram),
            "zulip" => chat::Zulip::parse(&parts).map(Self::Zulip),
            "matrix" => chat::Matrix::parse(&parts).map(Self::Matrix),
            "ntfy" => push::Ntfy::parse(&parts).map(Self::Ntfy),
            "gotify" => push::Gotify::parse(&parts).map(Self::Gotify),
            "pushover" => push::Pushover::parse(&parts).map(Self::Pushover),
            "opsgenie" => push::OpsGenie::parse(&parts).map(Self::OpsGenie),
            "smtp" => smtp::Smtp::parse(&parts).map(Self::Smtp),
            _ => return None,
        };
        Some(service)
    }

    /// The service an http(s) URL on `host` is: Slack's and Teams' own webhooks want their
    /// own bodies (kured's `--slack-hook-url`), others get the notification as JSON.
    pub fn plain(host: &str, url: String) -> Option<Self> {
        if host == "hooks.slack.com" {
            Some(Self::Slack(slack::Slack::plain(url)))
        } else if host.ends_with(".webhook.office.com") || host == "outlook.office.com" {
            Some(Self::Teams(teams::Teams::plain(url)))
        } else {
            None
        }
    }

    /// The URL the service posts to, secrets included: what a shown target is redacted from.
    pub fn endpoint(&self) -> String {
        match self.deliveries(&Notice::blank()).first() {
            Some(Delivery::Http(request)) => request.url.clone(),
            Some(Delivery::Mail(_)) | None => match self {
                Self::Smtp(smtp) => smtp.endpoint(),
                _ => String::new(),
            },
        }
    }

    /// What tells `notice`.
    pub fn deliveries(&self, notice: &Notice) -> Vec<Delivery> {
        if let Self::Smtp(smtp) = self {
            return vec![Delivery::Mail(smtp.mail(&notice.message))];
        }
        self.requests(notice)
            .into_iter()
            .map(Delivery::Http)
            .collect()
    }

    /// The HTTP requests that tell `notice` (none for an e-mail).
    fn requests(&self, notice: &Notice) -> Vec<Request> {
        let text = notice.message.as_str();
        match self {
            Self::Generic(s) => vec![s.request(notice)],
            Self::Slack(s) => vec![s.request(text)],
            Self::Mattermost(s) => vec![s.request(text)],
            Self::RocketChat(s) => vec![s.request(text)],
            Self::Teams(s) => vec![s.request(text)],
            Self::GoogleChat(s) => vec![s.request(text)],
            Self::Discord(s) => vec![s.request(text)],
            Self::Telegram(s) => s.requests(text),
            Self::Zulip(s) => vec![s.request(text)],
            Self::Matrix(s) => s.requests(text),
            Self::Ntfy(s) => vec![s.request(text)],
            Self::Gotify(s) => vec![s.request(text)],
            Self::Pushover(s) => vec![s.request(text)],
            Self::OpsGenie(s) => vec![s.request(text)],
            Self::Smtp(_) => Vec::new(),
        }
    }
}

/// The error for a URL that lacks what `form` shows.
fn written(form: &str) -> String {
    format!("it is written {form}")
}

#[cfg(test)]
pub(super) mod test_util {
    use super::*;

    /// The requests `url` makes of the example notice.
    pub fn requests(url: &str) -> Vec<Request> {
        let (scheme, rest) = url.split_once("://").expect("a URL");
        Service::parse(scheme, rest)
            .expect("a supported scheme")
            .unwrap_or_else(|e| panic!("{url}: {e}"))
            .deliveries(&notice())
            .into_iter()
            .filter_map(|delivery| match delivery {
                Delivery::Http(request) => Some(request),
                Delivery::Mail(_) => None,
            })
            .collect()
    }

    /// The notice the services' tests tell.
    pub fn notice() -> Notice {
        Notice {
            kind: crate::notify::Kind::NodeBack,
            node: Some("n1".into()),
            pool: "ns/slots".into(),
            message: "Node n1 rebooted and uncordoned".into(),
            time: "2026-01-02T03:04:05Z".parse().expect("a time"),
            details: serde_json::json!({"boot_id": "b2"}),
        }
    }

    /// The one request `url` makes: its method, URL, headers and body as text.
    pub fn request(url: &str) -> (String, String, Vec<(String, String)>, String) {
        let mut requests = requests(url);
        assert_eq!(requests.len(), 1, "{url}: {requests:?}");
        let r = requests.remove(0);
        let body = String::from_utf8_lossy(&r.body).into_owned();
        (r.method.to_string(), r.url, r.headers, body)
    }

    /// The body of `url`'s one request, as JSON.
    pub fn json(url: &str) -> Value {
        serde_json::from_str(&request(url).3).expect("a JSON body")
    }

    /// Why `url` is refused.
    pub fn refused(url: &str) -> String {
        let (scheme, rest) = url.split_once("://").expect("a URL");
        Service::parse(scheme, rest)
            .expect("a supported scheme")
            .expect_err(url)
    }

    pub fn headers(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }
}
