//! Slack's incoming webhooks and the two chats that copied them: Mattermost and Rocket.Chat.

use super::{Parts, Request, written};
use serde_json::{Map, Value, json};

/// A Slack incoming webhook with shoutrrr's options.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Slack {
    url: String,
    username: String,
    channel: String,
    icon: String,
    color: String,
    title: String,
}

impl Slack {
    /// shoutrrr's forms `slack://hook:A-B-C@webhook` (0.5 on) and `slack://[botname@]A/B/C`
    /// (before), both posting to `https://hooks.slack.com/services/A/B/C`.
    pub fn parse(rest: &str, parts: &Parts) -> Result<Self, String> {
        let rest = rest.split(['?', '#']).next().unwrap_or_default();
        let mut username = parts.text(&["botname", "username"]);
        let tokens: Vec<&str> = match rest.split_once('@') {
            Some((userinfo, channel)) => match userinfo.split_once(':') {
                Some((kind, token)) if kind.eq_ignore_ascii_case("hook") => {
                    if !channel
                        .trim_end_matches('/')
                        .eq_ignore_ascii_case("webhook")
                    {
                        return Err(
                            "a Slack webhook token is written slack://hook:TOKEN@webhook"
                                .to_owned(),
                        );
                    }
                    token.split(['-', '/']).collect()
                }
                Some(_) => {
                    return Err("only Slack incoming webhooks are supported \
                         (slack://hook:...@webhook), not bot API tokens"
                        .to_owned());
                }
                None => {
                    if username.is_empty() {
                        username = super::parts::decode(userinfo);
                    }
                    channel.split('/').collect()
                }
            },
            None => rest.split('/').collect(),
        };
        let tokens: Vec<&str> = tokens.into_iter().filter(|t| !t.is_empty()).collect();
        if tokens.len() != 3 || tokens.iter().any(|t| !t.chars().all(char::is_alphanumeric)) {
            return Err("a Slack webhook has three tokens (slack://A/B/C)".to_owned());
        }
        Ok(Self {
            url: format!("https://hooks.slack.com/services/{}", tokens.join("/")),
            username,
            channel: parts.text(&["channel"]),
            icon: parts.text(&["icon", "icon_emoji", "icon_url"]),
            color: parts.text(&["color"]),
            title: parts.text(&["title"]),
        })
    }

    /// A Slack (or Slack-compatible) webhook URL given as it is: the message as `text`.
    pub fn plain(url: String) -> Self {
        Self {
            url,
            username: String::new(),
            channel: String::new(),
            icon: String::new(),
            color: String::new(),
            title: String::new(),
        }
    }

    /// `{"text": message}`; with a color or title, shoutrrr's form: the title as `text`, the
    /// message as an attachment of that color.
    pub fn request(&self, text: &str) -> Request {
        let mut body = if self.color.is_empty() && self.title.is_empty() {
            json!({ "text": text })
        } else {
            let mut attachment = json!({ "text": text });
            put(&mut attachment, "color", &self.color);
            json!({ "text": self.title, "attachments": [attachment] })
        };
        put(&mut body, "username", &self.username);
        if !self.channel.eq_ignore_ascii_case("webhook") {
            put(&mut body, "channel", &self.channel);
        }
        set_icon(&mut body, &self.icon);
        Request::json(self.url.clone(), &body)
    }
}

/// Sets `key` in the object `body` unless `value` is empty.
fn put(body: &mut Value, key: &str, value: &str) {
    if let (Some(fields), false) = (body.as_object_mut(), value.is_empty()) {
        fields.insert(key.to_owned(), Value::from(value));
    }
}

/// An icon as Slack and Mattermost take it: a URL as `icon_url`, anything else as `icon_emoji`.
fn set_icon(body: &mut Value, icon: &str) {
    let key = if icon.starts_with("http://") || icon.starts_with("https://") {
        "icon_url"
    } else {
        "icon_emoji"
    };
    put(body, key, icon);
}

/// `mattermost://[USER@]HOST[:PORT]/TOKEN[/CHANNEL]?icon=...`: POST to `https://HOST/hooks/TOKEN`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mattermost {
    url: String,
    fields: Map<String, Value>,
    icon: String,
}

impl Mattermost {
    pub fn parse(parts: &Parts) -> Result<Self, String> {
        let segments = parts.segments();
        let Some(token) = segments.first() else {
            return Err(written("mattermost://[USER@]HOST/TOKEN[/CHANNEL]"));
        };
        let mut fields = Map::new();
        let username = parts.option(&["username"]).unwrap_or(&parts.user);
        for (key, value) in [
            ("username", username),
            ("channel", segments.get(1).map_or("", |c| c)),
        ] {
            if !value.is_empty() {
                fields.insert(key.to_owned(), Value::from(value));
            }
        }
        Ok(Self {
            url: format!(
                "https://{}/hooks/{}",
                parts.host,
                super::parts::encode(token)
            ),
            fields,
            icon: parts.text(&["icon", "icon_emoji", "icon_url"]),
        })
    }

    pub fn request(&self, text: &str) -> Request {
        let mut body = Value::Object(self.fields.clone());
        put(&mut body, "text", text);
        set_icon(&mut body, &self.icon);
        Request::json(self.url.clone(), &body)
    }
}

/// `rocketchat://[USER@]HOST[:PORT]/TOKEN-A/TOKEN-B[/CHANNEL]`: POST to
/// `https://HOST/hooks/TOKEN-A/TOKEN-B`; a channel without `@` gets its `#`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RocketChat {
    url: String,
    username: String,
    channel: String,
}

impl RocketChat {
    pub fn parse(rest: &str, parts: &Parts) -> Result<Self, String> {
        let segments = parts.segments();
        let [token_a, token_b, more @ ..] = segments.as_slice() else {
            return Err(written(
                "rocketchat://[USER@]HOST/TOKEN-A/TOKEN-B[/CHANNEL]",
            ));
        };
        // A channel written `.../#ops` arrives as the URL's fragment, as Go reads it.
        let fragment = rest.split_once('#').map(|(_, f)| f).unwrap_or_default();
        let channel = match (fragment, more.first()) {
            ("", None) => String::new(),
            ("", Some(c)) if c.starts_with('@') => c.clone(),
            ("", Some(c)) => format!("#{c}"),
            (fragment, _) => format!("#{}", super::parts::decode(fragment)),
        };
        Ok(Self {
            url: format!(
                "https://{}/hooks/{}/{}",
                parts.host,
                super::parts::encode(token_a),
                super::parts::encode(token_b)
            ),
            username: parts.user.clone(),
            channel,
        })
    }

    pub fn request(&self, text: &str) -> Request {
        let mut body = json!({ "text": text });
        put(&mut body, "username", &self.username);
        put(&mut body, "channel", &self.channel);
        Request::json(self.url.clone(), &body)
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_util::{json, refused, request};
    use serde_json::json;

    const TEXT: &str = "Node n1 rebooted and uncordoned";

    #[test]
    fn slack_posts_text_to_its_webhook_with_shoutrrrs_options() {
        let hook = "https://hooks.slack.com/services/T0001/B0002/XXXX3";
        for value in [
            "slack://hook:T0001-B0002-XXXX3@webhook",
            "slack://T0001/B0002/XXXX3",
        ] {
            let (method, url, _, _) = request(value);
            assert_eq!((method.as_str(), url.as_str()), ("POST", hook), "{value}");
            assert_eq!(json(value), json!({ "text": TEXT }), "{value}");
        }
        assert_eq!(
            json(
                "slack://hook:T0001-B0002-XXXX3@webhook?channel=%23ops&username=kured&icon=:robot:&color=good&title=Reboots"
            ),
            json!({
                "text": "Reboots",
                "attachments": [{"text": TEXT, "color": "good"}],
                "username": "kured",
                "channel": "#ops",
                "icon_emoji": ":robot:",
            })
        );
        assert_eq!(
            json("slack://kured@T0001/B0002/XXXX3?icon=https://x.org/i.png"),
            json!({ "text": TEXT, "username": "kured", "icon_url": "https://x.org/i.png" })
        );
        assert!(refused("slack://xoxb:secret@C001").contains("bot API tokens"));
    }

    #[test]
    fn mattermost_and_rocketchat_post_to_their_hooks() {
        let (_, url, _, _) = request("mattermost://bot@chat.example:8065/t0ken/ops?icon=:bell:");
        assert_eq!(url, "https://chat.example:8065/hooks/t0ken");
        assert_eq!(
            json("mattermost://bot@chat.example:8065/t0ken/ops?icon=:bell:"),
            json!({"text": TEXT, "username": "bot", "channel": "ops", "icon_emoji": ":bell:"})
        );
        assert_eq!(
            json("mattermost://chat.example/t0ken"),
            json!({ "text": TEXT })
        );
        assert!(refused("mattermost://chat.example").contains("TOKEN"));
        let (_, url, _, _) = request("rocketchat://bot@rc.example/tokA/tokB/ops");
        assert_eq!(url, "https://rc.example/hooks/tokA/tokB");
        assert_eq!(
            json("rocketchat://bot@rc.example/tokA/tokB/ops"),
            json!({"text": TEXT, "username": "bot", "channel": "#ops"})
        );
        assert_eq!(
            json("rocketchat://rc.example/tokA/tokB/@alice")["channel"],
            "@alice"
        );
        assert!(refused("rocketchat://rc.example/tokA").contains("TOKEN-B"));
    }
}
