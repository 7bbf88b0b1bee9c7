//! Plain http(s) webhooks and shoutrrr's generic webhook (`generic://HOST/PATH?OPTIONS`).

use super::{Notice, Parts, Request};
use serde_json::{Map, Value};

/// A webhook: our notification as JSON, or with `template=json` shoutrrr's
/// `{"title": ..., "message": ...}` and its extra data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Generic {
    url: String,
    method: http::Method,
    content_type: String,
    /// `@Name=value` options: headers sent as they are.
    headers: Vec<(String, String)>,
    body: Body,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Body {
    /// The notification's own JSON (kind, node, pool, message, time, details).
    Notice,
    /// `template=json`: the message and title under their keys, with the `$key=value` data.
    Shoutrrr {
        message_key: String,
        title_key: String,
        title: String,
        extra: Vec<(String, String)>,
    },
}

/// The options shoutrrr reads itself and does not pass on to the webhook.
const OWN: [&str; 8] = [
    "template",
    "contenttype",
    "messagekey",
    "titlekey",
    "title",
    "method",
    "requestmethod",
    "disabletls",
];

impl Generic {
    /// An http(s) URL as it is, given our notification as JSON.
    pub fn plain(scheme: &str, rest: &str) -> Result<Self, String> {
        Ok(Self {
            url: format!("{scheme}://{rest}"),
            method: http::Method::POST,
            content_type: "application/json".to_owned(),
            headers: Vec::new(),
            body: Body::Notice,
        })
    }

    /// `generic://HOST/PATH?query`: https (http with `disabletls=yes` or `generic+http`), the
    /// query's other options passed on to the webhook.
    pub fn parse(scheme: &str, parts: &Parts) -> Result<Self, String> {
        let scheme = if parts.flag(&["disabletls"], false) {
            "http"
        } else {
            scheme
        };
        let mut kept = Vec::new();
        let mut headers = Vec::new();
        let mut extra = Vec::new();
        for (key, value) in &parts.query {
            if let Some(name) = key.strip_prefix('@') {
                headers.push((name.to_ascii_lowercase(), value.clone()));
            } else if let Some(name) = key.strip_prefix('$') {
                extra.push((name.to_owned(), value.clone()));
            } else if !OWN.iter().any(|own| key.eq_ignore_ascii_case(own)) {
                kept.push(format!(
                    "{}={}",
                    super::parts::encode(key),
                    super::parts::encode(value)
                ));
            }
        }
        let query = if kept.is_empty() {
            String::new()
        } else {
            format!("?{}", kept.join("&"))
        };
        let method = parts
            .text(&["method", "requestmethod"])
            .to_ascii_uppercase();
        let method = if method.is_empty() {
            http::Method::POST
        } else {
            method
                .parse()
                .map_err(|_| "method= names no HTTP method".to_owned())?
        };
        let body = match parts.option(&["template"]) {
            None | Some("") => Body::Notice,
            Some(json) if json.eq_ignore_ascii_case("json") => Body::Shoutrrr {
                message_key: parts
                    .option(&["messagekey"])
                    .unwrap_or("message")
                    .to_owned(),
                title_key: parts.option(&["titlekey"]).unwrap_or("title").to_owned(),
                title: parts.text(&["title"]),
                extra,
            },
            Some(_) => {
                return Err("only template=json is supported (no named Go templates)".to_owned());
            }
        };
        Ok(Self {
            url: format!("{scheme}://{}/{}{query}", parts.host, parts.path),
            method,
            content_type: parts
                .option(&["contenttype"])
                .unwrap_or("application/json")
                .to_owned(),
            headers,
            body,
        })
    }

    pub fn request(&self, notice: &Notice) -> Request {
        let body = match &self.body {
            Body::Notice => notice.json(),
            Body::Shoutrrr {
                message_key,
                title_key,
                title,
                extra,
            } => {
                let mut fields = Map::new();
                if !title.is_empty() {
                    fields.insert(title_key.clone(), Value::from(title.as_str()));
                }
                fields.insert(message_key.clone(), Value::from(notice.message.as_str()));
                for (key, value) in extra {
                    fields.insert(key.clone(), Value::from(value.as_str()));
                }
                Value::Object(fields)
            }
        };
        let mut request = Request::post(self.url.clone(), &self.content_type, body.to_string());
        request.method = self.method.clone();
        self.headers.iter().fold(request, |request, (name, value)| {
            request.header(name, value)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_util::{headers, json, refused, request};
    use serde_json::json;

    #[test]
    fn a_plain_url_gets_the_notification_as_json() {
        let (method, url, sent, _) = request("http://127.0.0.1:8000/hook?a=b");
        assert_eq!(
            (method.as_str(), url.as_str()),
            ("POST", "http://127.0.0.1:8000/hook?a=b")
        );
        assert_eq!(sent, headers(&[("content-type", "application/json")]));
        let body = json("https://example.com/hook");
        assert_eq!(body["kind"], "node_back");
        assert_eq!(body["message"], "Node n1 rebooted and uncordoned");
    }

    #[test]
    fn generic_reads_shoutrrrs_options_and_passes_the_rest_on() {
        let (method, url, sent, body) = request(
            "generic://example.com/a/hook?template=json&title=Kured&messagekey=text&titlekey=subject\
             &@X-Api-Key=k3y&$team=ops&keep=1&method=PUT&contenttype=application/vnd.x%2Bjson",
        );
        assert_eq!(
            (method.as_str(), url.as_str()),
            ("PUT", "https://example.com/a/hook?keep=1")
        );
        assert_eq!(
            sent,
            headers(&[
                ("content-type", "application/vnd.x+json"),
                ("x-api-key", "k3y")
            ])
        );
        let body: serde_json::Value = serde_json::from_str(&body).expect("JSON");
        assert_eq!(
            body,
            json!({"subject": "Kured", "text": "Node n1 rebooted and uncordoned", "team": "ops"})
        );
        assert_eq!(
            json("generic+http://10.0.0.1:9000/x?template=json"),
            json!({"message": "Node n1 rebooted and uncordoned"})
        );
        let (_, url, _, _) = request("generic://example.com/hook?disabletls=yes");
        assert_eq!(url, "http://example.com/hook");
        assert!(refused("generic://example.com/hook?template=mine").contains("template=json"));
    }
}
