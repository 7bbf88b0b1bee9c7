//! Microsoft Teams' incoming webhooks and Google Chat's.

use super::{Parts, Request, written};
use serde_json::{Value, json};

/// A Teams incoming webhook: a MessageCard, with shoutrrr's `title` and `color`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Teams {
    url: String,
    title: String,
    color: String,
}

impl Teams {
    /// `teams://GROUP@TENANT/ALT-ID/GROUP-OWNER[/EXTRA-ID]?host=...` posts to
    /// `https://HOST/webhookb2/GROUP@TENANT/IncomingWebhook/ALT-ID/GROUP-OWNER[/EXTRA-ID]`.
    pub fn parse(parts: &Parts) -> Result<Self, String> {
        let form = "a Teams webhook is written \
            teams://GROUP@TENANT/ALT-ID/GROUP-OWNER?host=ORG.webhook.office.com";
        let host = parts.option(&["host"]).unwrap_or("outlook.office.com");
        let ids: Vec<&str> = parts.path.split('/').filter(|p| !p.is_empty()).collect();
        if parts.user.is_empty() || parts.password.is_some() || parts.host.is_empty() {
            return Err(form.to_owned());
        }
        if !(2..=3).contains(&ids.len()) || host.is_empty() {
            return Err(form.to_owned());
        }
        Ok(Self {
            url: format!(
                "https://{host}/webhookb2/{}@{}/IncomingWebhook/{}",
                super::parts::encode(&parts.user),
                parts.host,
                ids.join("/")
            ),
            title: parts.text(&["title"]),
            color: parts.text(&["color"]),
        })
    }

    /// A Teams webhook URL given as it is.
    pub fn plain(url: String) -> Self {
        Self {
            url,
            title: String::new(),
            color: String::new(),
        }
    }

    pub fn request(&self, text: &str) -> Request {
        let mut card = json!({
            "@type": "MessageCard",
            "@context": "http://schema.org/extensions",
            "summary": if self.title.is_empty() { text } else { &self.title },
            "text": text,
        });
        if let Some(fields) = card.as_object_mut() {
            for (key, value) in [("title", &self.title), ("themeColor", &self.color)] {
                if !value.is_empty() {
                    fields.insert(key.to_owned(), Value::from(value.as_str()));
                }
            }
        }
        Request::json(self.url.clone(), &card)
    }
}

/// `googlechat://HOST/v1/spaces/SPACE/messages?key=KEY&token=TOKEN`: `{"text": ...}` POSTed to
/// the same URL over https.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GoogleChat {
    url: String,
}

impl GoogleChat {
    pub fn parse(parts: &Parts) -> Result<Self, String> {
        let key = parts.text(&["key"]);
        let token = parts.text(&["token"]);
        if key.is_empty() || token.is_empty() || parts.host.is_empty() {
            return Err(written(
                "googlechat://chat.googleapis.com/v1/spaces/SPACE/messages?key=KEY&token=TOKEN",
            ));
        }
        Ok(Self {
            url: format!(
                "https://{}/{}?key={}&token={}",
                parts.host,
                parts.path,
                super::parts::encode(&key),
                super::parts::encode(&token)
            ),
        })
    }

    pub fn request(&self, text: &str) -> Request {
        Request::json(self.url.clone(), &json!({ "text": text }))
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_util::{json, refused, request};
    use serde_json::json;

    const TEXT: &str = "Node n1 rebooted and uncordoned";

    #[test]
    fn teams_posts_a_message_card_with_its_title_and_color() {
        let value =
            "teams://g1@t2/a3/o4/e5?host=acme.webhook.office.com&title=Reboots&color=FF0000";
        let (method, url, _, _) = request(value);
        assert_eq!(method, "POST");
        assert_eq!(
            url,
            "https://acme.webhook.office.com/webhookb2/g1@t2/IncomingWebhook/a3/o4/e5"
        );
        assert_eq!(
            json(value),
            json!({
                "@type": "MessageCard",
                "@context": "http://schema.org/extensions",
                "summary": "Reboots",
                "title": "Reboots",
                "themeColor": "FF0000",
                "text": TEXT,
            })
        );
        let (_, url, _, _) = request("teams://g1@t2/a3/o4");
        assert_eq!(
            url,
            "https://outlook.office.com/webhookb2/g1@t2/IncomingWebhook/a3/o4"
        );
        assert!(refused("teams://secret/a3/o4").contains("teams://GROUP@TENANT"));
    }

    #[test]
    fn google_chat_posts_text_to_its_space() {
        let value = "googlechat://chat.googleapis.com/v1/spaces/FOO/messages?key=k3y&token=t0k";
        let (_, url, _, _) = request(value);
        assert_eq!(
            url,
            "https://chat.googleapis.com/v1/spaces/FOO/messages?key=k3y&token=t0k"
        );
        assert_eq!(json(value), json!({ "text": TEXT }));
        assert!(
            refused("googlechat://chat.googleapis.com/v1/spaces/FOO/messages").contains("key=KEY")
        );
    }
}
