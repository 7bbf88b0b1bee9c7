//! Push and alerting services: ntfy, Gotify, Pushover and OpsGenie.

use super::{Parts, Request, parts::encode, written};
use serde_json::{Value, json};

/// `ntfy://[USER:PASSWORD@]HOST/TOPIC?scheme=http&title=...`: the message as the body, its
/// options as ntfy's headers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ntfy {
    url: String,
    auth: Option<(String, String)>,
    headers: Vec<(String, String)>,
}

/// shoutrrr's ntfy options and the header each becomes.
const NTFY_HEADERS: [(&str, &str); 9] = [
    ("title", "title"),
    ("priority", "priority"),
    ("tags", "tags"),
    ("delay", "delay"),
    ("actions", "actions"),
    ("click", "click"),
    ("attach", "attach"),
    ("icon", "x-icon"),
    ("email", "email"),
];

impl Ntfy {
    pub fn parse(parts: &Parts) -> Result<Self, String> {
        let topic = parts.path.trim_matches('/');
        if topic.is_empty() {
            return Err(written("ntfy://[USER:PASSWORD@]HOST/TOPIC"));
        }
        let host = if parts.host.is_empty() {
            "ntfy.sh"
        } else {
            &parts.host
        };
        let scheme = match parts.option(&["scheme"]) {
            None | Some("https") => "https",
            Some("http") => "http",
            Some(_) => return Err("scheme= is http or https".to_owned()),
        };
        let mut headers: Vec<(String, String)> = NTFY_HEADERS
            .iter()
            .filter_map(|(option, header)| {
                let value = parts.text(&[option]);
                (!value.is_empty()).then(|| ((*header).to_owned(), value))
            })
            .collect();
        for (option, header) in [("cache", "cache"), ("firebase", "firebase")] {
            if !parts.flag(&[option], true) {
                headers.push((header.to_owned(), "no".to_owned()));
            }
        }
        Ok(Self {
            url: format!("{scheme}://{host}/{topic}"),
            auth: parts
                .password
                .as_ref()
                .filter(|password| !password.is_empty())
                .map(|password| (parts.user.clone(), password.clone())),
            headers,
        })
    }

    pub fn request(&self, text: &str) -> Request {
        let request = Request::post(
            self.url.clone(),
            "text/plain; charset=utf-8",
            text.to_owned(),
        );
        let request = self.headers.iter().fold(request, |request, (name, value)| {
            request.header(name, value)
        });
        match &self.auth {
            Some((user, password)) => request.basic_auth(user, password),
            None => request,
        }
    }
}

/// `gotify://HOST[:PORT][/PATH]/TOKEN?title=...&priority=...&disabletls=yes`: a JSON message
/// POSTed to `/PATH/message?token=TOKEN`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gotify {
    url: String,
    title: String,
    priority: i64,
}

impl Gotify {
    pub fn parse(parts: &Parts) -> Result<Self, String> {
        let path = parts.path.trim_end_matches('/');
        let (prefix, token) = path.rsplit_once('/').unwrap_or(("", path));
        // Gotify's application tokens: 15 characters, starting with A.
        if token.len() != 15 || !token.starts_with('A') || parts.host.is_empty() {
            return Err(written(
                "gotify://HOST[/PATH]/TOKEN (a token of 15 characters, A...)",
            ));
        }
        let scheme = if parts.flag(&["disabletls"], false) {
            "http"
        } else {
            "https"
        };
        let prefix = if prefix.is_empty() {
            String::new()
        } else {
            format!("/{prefix}")
        };
        let priority = parts.option(&["priority"]).unwrap_or("0");
        Ok(Self {
            url: format!(
                "{scheme}://{}{prefix}/message?token={}",
                parts.host,
                encode(token)
            ),
            title: parts
                .option(&["title"])
                .unwrap_or("Shoutrrr notification")
                .to_owned(),
            priority: priority
                .parse()
                .map_err(|_| "priority= is a whole number".to_owned())?,
        })
    }

    pub fn request(&self, text: &str) -> Request {
        let body = json!({ "message": text, "title": self.title, "priority": self.priority });
        Request::json(self.url.clone(), &body)
    }
}

/// `pushover://shoutrrr:API-TOKEN@USER-KEY?devices=...&priority=...&title=...`: a form POSTed
/// to Pushover's messages API.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pushover {
    token: String,
    user: String,
    devices: String,
    priority: Option<String>,
    title: String,
}

impl Pushover {
    pub fn parse(parts: &Parts) -> Result<Self, String> {
        let token = parts.password.clone().unwrap_or_default();
        if token.is_empty() || parts.host.is_empty() {
            return Err(written("pushover://shoutrrr:API-TOKEN@USER-KEY"));
        }
        let priority: i8 = parts
            .option(&["priority"])
            .unwrap_or("0")
            .parse()
            .map_err(|_| "priority= is a whole number".to_owned())?;
        Ok(Self {
            token,
            user: parts.host.clone(),
            devices: parts.list(&["devices"]).join(","),
            // As shoutrrr: an emergency priority (2) is not sent, it needs more fields.
            priority: (-2..=1).contains(&priority).then(|| priority.to_string()),
            title: parts.text(&["title"]),
        })
    }

    pub fn request(&self, text: &str) -> Request {
        let mut fields = vec![
            ("device", self.devices.as_str()),
            ("user", &self.user),
            ("token", &self.token),
            ("message", text),
        ];
        if !self.title.is_empty() {
            fields.push(("title", &self.title));
        }
        if let Some(priority) = &self.priority {
            fields.push(("priority", priority));
        }
        Request::form(
            "https://api.pushover.net/1/messages.json".to_owned(),
            &fields,
        )
    }
}

/// `opsgenie://[HOST[:PORT]]/API-KEY?...`: an alert POSTed to `/v2/alerts` with the key as
/// `GenieKey`; a message longer than 130 characters (or one with a title) goes to the
/// description.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpsGenie {
    url: String,
    key: String,
    title: String,
    description: String,
    /// The alert's other fields shoutrrr sets from the query.
    fields: Vec<(&'static str, Value)>,
}

impl OpsGenie {
    pub fn parse(parts: &Parts) -> Result<Self, String> {
        let key = super::parts::decode(parts.path.trim_matches('/'));
        if key.is_empty() {
            return Err(written("opsgenie://api.opsgenie.com/API-KEY"));
        }
        let host = if parts.host.is_empty() {
            "api.opsgenie.com"
        } else {
            &parts.host
        };
        let port = if host.contains(':') { "" } else { ":443" };
        let mut fields = Vec::new();
        for key in ["alias", "entity", "source", "priority", "note", "user"] {
            let value = parts.text(&[key]);
            if !value.is_empty() {
                fields.push((key, Value::from(value)));
            }
        }
        for key in ["tags", "actions"] {
            let values = parts.list(&[key]);
            if !values.is_empty() {
                fields.push((key, Value::from(values)));
            }
        }
        Ok(Self {
            url: format!("https://{host}{port}/v2/alerts"),
            key,
            title: parts.text(&["title"]),
            description: parts.text(&["description"]),
            fields,
        })
    }

    pub fn request(&self, text: &str) -> Request {
        let (message, description) = match (self.title.as_str(), text.chars().count() > 130) {
            ("", false) => (text.to_owned(), String::new()),
            ("", true) => (text.chars().take(130).collect(), text.to_owned()),
            (title, _) => (title.to_owned(), text.to_owned()),
        };
        let description = [description.as_str(), self.description.as_str()]
            .into_iter()
            .filter(|part| !part.is_empty())
            .collect::<Vec<_>>()
            .join("\n");
        let mut body = json!({ "message": message });
        if !description.is_empty() {
            body["description"] = Value::from(description);
        }
        for (key, value) in &self.fields {
            body[*key] = value.clone();
        }
        Request::json(self.url.clone(), &body)
            .header("authorization", &format!("GenieKey {}", self.key))
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_util::{headers, json, refused, request};
    use serde_json::json;

    const TEXT: &str = "Node n1 rebooted and uncordoned";

    #[test]
    fn ntfy_posts_the_text_with_its_options_as_headers() {
        let (method, url, sent, body) = request(
            "ntfy://alice:pw@ntfy.example:8080/reboots?scheme=http&title=Reboots&priority=high&tags=warning,node&cache=no",
        );
        assert_eq!(
            (method.as_str(), url.as_str()),
            ("POST", "http://ntfy.example:8080/reboots")
        );
        assert_eq!(
            sent,
            headers(&[
                ("content-type", "text/plain; charset=utf-8"),
                ("title", "Reboots"),
                ("priority", "high"),
                ("tags", "warning,node"),
                ("cache", "no"),
                ("authorization", "Basic YWxpY2U6cHc="),
            ])
        );
        assert_eq!(body, TEXT);
        let (_, url, _, _) = request("ntfy:///reboots");
        assert_eq!(url, "https://ntfy.sh/reboots");
        assert!(refused("ntfy://ntfy.example").contains("TOPIC"));
    }

    #[test]
    fn gotify_posts_a_json_message_with_its_token_in_the_query() {
        let value = "gotify://gotify.example:8080/sub/AbCdEfGhIjKlMnO?title=Reboots&priority=5&disabletls=yes";
        let (method, url, _, _) = request(value);
        assert_eq!(
            (method.as_str(), url.as_str()),
            (
                "POST",
                "http://gotify.example:8080/sub/message?token=AbCdEfGhIjKlMnO"
            )
        );
        assert_eq!(
            json(value),
            json!({"message": TEXT, "title": "Reboots", "priority": 5})
        );
        assert_eq!(
            json("gotify://gotify.example/AbCdEfGhIjKlMnO"),
            json!({"message": TEXT, "title": "Shoutrrr notification", "priority": 0})
        );
        assert!(refused("gotify://gotify.example/short").contains("15 characters"));
    }

    #[test]
    fn pushover_posts_a_form_to_its_api() {
        let (method, url, sent, body) =
            request("pushover://shoutrrr:t0ken@us3r?devices=a,b&priority=1&title=Reboots");
        assert_eq!(
            (method.as_str(), url.as_str()),
            ("POST", "https://api.pushover.net/1/messages.json")
        );
        assert_eq!(
            sent,
            headers(&[("content-type", "application/x-www-form-urlencoded")])
        );
        assert_eq!(
            body,
            "device=a%2Cb&user=us3r&token=t0ken&message=Node%20n1%20rebooted%20and%20uncordoned&title=Reboots&priority=1"
        );
        assert!(refused("pushover://us3r").contains("API-TOKEN"));
    }

    #[test]
    fn opsgenie_posts_an_alert_with_its_genie_key() {
        let value =
            "opsgenie://api.eu.opsgenie.com/k3y?alias=reboots&tags=a,b&priority=P3&title=Reboots";
        let (method, url, sent, _) = request(value);
        assert_eq!(
            (method.as_str(), url.as_str()),
            ("POST", "https://api.eu.opsgenie.com:443/v2/alerts")
        );
        assert_eq!(
            sent,
            headers(&[
                ("content-type", "application/json"),
                ("authorization", "GenieKey k3y")
            ])
        );
        assert_eq!(
            json(value),
            json!({"message": "Reboots", "description": TEXT, "alias": "reboots", "priority": "P3", "tags": ["a", "b"]})
        );
        assert_eq!(
            json("opsgenie://api.opsgenie.com/k3y"),
            json!({"message": TEXT})
        );
        assert!(refused("opsgenie://api.opsgenie.com").contains("API-KEY"));
    }
}
