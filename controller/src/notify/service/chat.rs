//! Chats with a bot API of their own: Discord, Telegram, Zulip and Matrix.

use super::{Parts, Request, parts::encode, written};
use serde_json::{Value, json};

/// `discord://TOKEN@WEBHOOK-ID`: an embed POSTed to Discord's webhook, as shoutrrr sends it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Discord {
    url: String,
    title: String,
    username: String,
    avatar: String,
    /// The embed's left border (shoutrrr's default 0x50D9FF).
    color: u32,
}

impl Discord {
    pub fn parse(parts: &Parts) -> Result<Self, String> {
        if parts.user.is_empty() || parts.host.is_empty() {
            return Err(written("discord://TOKEN@WEBHOOK-ID"));
        }
        if !parts.path.is_empty() {
            return Err("discord:// takes no path (its /raw form sends no text)".to_owned());
        }
        let color = parts.option(&["color"]).unwrap_or("0x50D9FF");
        let color = u32::from_str_radix(color.trim_start_matches("0x"), 16)
            .map_err(|_| "color= is a hexadecimal number (0x50D9FF)".to_owned())?;
        Ok(Self {
            url: format!(
                "https://discord.com/api/webhooks/{}/{}",
                parts.host,
                encode(&parts.user)
            ),
            title: parts.text(&["title"]),
            username: parts.text(&["username"]),
            avatar: parts.text(&["avatar", "avatarurl"]),
            color,
        })
    }

    pub fn request(&self, text: &str) -> Request {
        let mut embed = json!({ "description": text, "color": self.color });
        if !self.title.is_empty() {
            embed["title"] = Value::from(self.title.as_str());
        }
        let mut body = json!({});
        for (key, value) in [("username", &self.username), ("avatar_url", &self.avatar)] {
            if !value.is_empty() {
                body[key] = Value::from(value.as_str());
            }
        }
        body["embeds"] = json!([embed]);
        Request::json(self.url.clone(), &body)
    }
}

/// `telegram://BOT-TOKEN@telegram?chats=CHAT[,CHAT]`: one `sendMessage` per chat (a chat
/// `ID:THREAD` posts to that thread).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Telegram {
    url: String,
    chats: Vec<String>,
    notification: bool,
    preview: bool,
    title: String,
}

impl Telegram {
    pub fn parse(parts: &Parts) -> Result<Self, String> {
        let token = format!(
            "{}:{}",
            parts.user,
            parts.password.as_deref().unwrap_or_default()
        );
        let chats = parts.list(&["chats", "channels"]);
        let valid = token.split_once(':').is_some_and(|(id, key)| {
            !id.is_empty() && id.chars().all(|c| c.is_ascii_digit()) && !key.is_empty()
        });
        if !valid || chats.is_empty() {
            return Err(written(
                "telegram://BOT-ID:BOT-KEY@telegram?chats=CHAT[,CHAT]",
            ));
        }
        Ok(Self {
            url: format!("https://api.telegram.org/bot{token}/sendMessage"),
            chats,
            notification: parts.flag(&["notification"], true),
            preview: parts.flag(&["preview"], true),
            title: parts.text(&["title"]),
        })
    }

    pub fn requests(&self, text: &str) -> Vec<Request> {
        self.chats
            .iter()
            .map(|chat| {
                let mut body = json!({
                    "chat_id": chat,
                    "text": text,
                    "disable_notification": !self.notification,
                    "disable_web_page_preview": !self.preview,
                });
                if let Some((id, thread)) = chat.split_once(':')
                    && let Ok(thread) = thread.parse::<i64>()
                {
                    body["chat_id"] = Value::from(id);
                    body["message_thread_id"] = Value::from(thread);
                }
                // As shoutrrr: a title makes the message HTML, the title bold above it.
                if !self.title.is_empty() {
                    body["parse_mode"] = Value::from("HTML");
                    body["text"] = Value::from(format!(
                        "<b>{}</b>\n{}",
                        html_escape(&self.title),
                        html_escape(text)
                    ));
                }
                Request::json(self.url.clone(), &body)
            })
            .collect()
    }
}

fn html_escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&#34;")
        .replace('\'', "&#39;")
}

/// `zulip://BOT-MAIL:BOT-KEY@HOST?stream=STREAM&topic=TOPIC`: a stream message as a form, the
/// bot's mail and key as basic authentication.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Zulip {
    url: String,
    mail: String,
    key: String,
    stream: String,
    topic: String,
}

impl Zulip {
    pub fn parse(parts: &Parts) -> Result<Self, String> {
        let key = parts.password.clone().unwrap_or_default();
        if parts.user.is_empty() || key.is_empty() || parts.host.is_empty() {
            return Err(written(
                "zulip://BOT-MAIL:BOT-KEY@HOST?stream=STREAM&topic=TOPIC",
            ));
        }
        Ok(Self {
            url: format!("https://{}/api/v1/messages", parts.host),
            mail: parts.user.clone(),
            key,
            stream: parts.text(&["stream"]),
            topic: parts.text(&["topic", "title"]),
        })
    }

    pub fn request(&self, text: &str) -> Request {
        let mut fields = vec![
            ("type", "stream"),
            ("to", self.stream.as_str()),
            ("content", text),
        ];
        if !self.topic.is_empty() {
            fields.push(("topic", &self.topic));
        }
        Request::form(self.url.clone(), &fields).basic_auth(&self.mail, &self.key)
    }
}

/// `matrix://:ACCESS-TOKEN@HOST?rooms=!ROOM-ID[,!ROOM-ID]`: an `m.text` message sent to each
/// room, with the access token shoutrrr uses; `disabletls=yes` means http.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Matrix {
    base: String,
    token: String,
    rooms: Vec<String>,
}

impl Matrix {
    pub fn parse(parts: &Parts) -> Result<Self, String> {
        let form = "matrix://:ACCESS-TOKEN@HOST?rooms=!ROOM-ID[,!ROOM-ID]";
        let token = parts.password.clone().unwrap_or_default();
        if !parts.user.is_empty() {
            return Err(format!(
                "a Matrix user and password (which take a login first) are not supported; \
                 give an access token: {form}"
            ));
        }
        let rooms = parts.list(&["rooms", "room"]);
        if token.is_empty() || rooms.is_empty() || parts.host.is_empty() {
            return Err(written(form));
        }
        if rooms.iter().any(|room| !room.starts_with('!')) {
            return Err(format!(
                "Matrix rooms are given by their IDs (!ID), not aliases: {form}"
            ));
        }
        let scheme = if parts.flag(&["disabletls"], false) {
            "http"
        } else {
            "https"
        };
        Ok(Self {
            base: format!("{scheme}://{}", parts.host),
            token,
            rooms,
        })
    }

    pub fn requests(&self, text: &str) -> Vec<Request> {
        self.rooms
            .iter()
            .map(|room| {
                let url = format!(
                    "{}/_matrix/client/r0/rooms/{}/send/m.room.message?access_token={}",
                    self.base,
                    encode(room),
                    encode(&self.token)
                );
                Request::json(url, &json!({ "msgtype": "m.text", "body": text }))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_util::{headers, json, refused, request, requests};
    use serde_json::json;

    const TEXT: &str = "Node n1 rebooted and uncordoned";

    #[test]
    fn discord_posts_an_embed_to_its_webhook() {
        let value = "discord://t0ken@12345?title=Reboots&username=kured&avatar=https://x.org/a.png&color=0xff0000";
        let (method, url, _, _) = request(value);
        assert_eq!(
            (method.as_str(), url.as_str()),
            ("POST", "https://discord.com/api/webhooks/12345/t0ken")
        );
        assert_eq!(
            json(value),
            json!({
                "embeds": [{"description": TEXT, "color": 0xff0000, "title": "Reboots"}],
                "username": "kured",
                "avatar_url": "https://x.org/a.png",
            })
        );
        assert_eq!(
            json("discord://t0ken@12345"),
            json!({"embeds": [{"description": TEXT, "color": 0x50d9ff}]})
        );
        assert!(refused("discord://12345").contains("TOKEN@WEBHOOK-ID"));
    }

    #[test]
    fn telegram_sends_one_message_per_chat() {
        let sent = requests(
            "telegram://110201543:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw@telegram?chats=@ops,-100123:7&notification=no",
        );
        let url =
            "https://api.telegram.org/bot110201543:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw/sendMessage";
        assert!(sent.iter().all(|r| r.url == url), "{sent:?}");
        let bodies: Vec<serde_json::Value> = sent
            .iter()
            .map(|r| serde_json::from_slice(&r.body).expect("JSON"))
            .collect();
        assert_eq!(
            bodies,
            [
                json!({"chat_id": "@ops", "text": TEXT, "disable_notification": true, "disable_web_page_preview": false}),
                json!({"chat_id": "-100123", "message_thread_id": 7, "text": TEXT, "disable_notification": true, "disable_web_page_preview": false}),
            ]
        );
        let titled = json("telegram://1:K@telegram?chats=@ops&title=<Reboots>");
        assert_eq!(titled["parse_mode"], "HTML");
        assert_eq!(titled["text"], format!("<b>&lt;Reboots&gt;</b>\n{TEXT}"));
        assert!(refused("telegram://secret@telegram?chats=@ops").contains("BOT-ID:BOT-KEY"));
        assert!(refused("telegram://1:K@telegram").contains("chats="));
    }

    #[test]
    fn zulip_posts_a_stream_message_as_a_form_with_basic_auth() {
        let (method, url, sent, body) =
            request("zulip://bot%40example.org:k3y@zulip.example:8443?stream=ops&topic=Reboots");
        assert_eq!(
            (method.as_str(), url.as_str()),
            ("POST", "https://zulip.example:8443/api/v1/messages")
        );
        assert_eq!(
            sent,
            headers(&[
                ("content-type", "application/x-www-form-urlencoded"),
                // base64 of bot@example.org:k3y
                ("authorization", "Basic Ym90QGV4YW1wbGUub3JnOmszeQ=="),
            ])
        );
        assert_eq!(
            body,
            "type=stream&to=ops&content=Node%20n1%20rebooted%20and%20uncordoned&topic=Reboots"
        );
        assert!(refused("zulip://bot@zulip.example").contains("BOT-KEY"));
    }

    #[test]
    fn matrix_sends_a_text_message_to_each_room_with_its_access_token() {
        let sent = requests("matrix://:t0ken@matrix.example:8448?rooms=!abc:example,!def:example");
        let urls: Vec<&str> = sent.iter().map(|r| r.url.as_str()).collect();
        assert_eq!(
            urls,
            [
                "https://matrix.example:8448/_matrix/client/r0/rooms/%21abc%3Aexample/send/m.room.message?access_token=t0ken",
                "https://matrix.example:8448/_matrix/client/r0/rooms/%21def%3Aexample/send/m.room.message?access_token=t0ken",
            ]
        );
        let body: serde_json::Value = serde_json::from_slice(&sent[0].body).expect("JSON");
        assert_eq!(body, json!({"msgtype": "m.text", "body": TEXT}));
        assert!(refused("matrix://user:pass@matrix.example?rooms=!a").contains("access token"));
        assert!(refused("matrix://:t@matrix.example?rooms=%23alias").contains("not aliases"));
    }
}
