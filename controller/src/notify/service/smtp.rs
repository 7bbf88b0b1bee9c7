//! `smtp://USER:PASSWORD@HOST:PORT/?from=...&to=a,b&subject=...&encryption=...&auth=...`: an
//! e-mail, read as shoutrrr reads the URL.

use super::{Parts, written};

/// How the connection is encrypted (shoutrrr's `encryption` and `starttls`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encryption {
    /// Plain text.
    None,
    /// STARTTLS when the server offers it (shoutrrr's `Auto` on a port other than 465).
    Opportunistic,
    /// STARTTLS, or no mail (`ExplicitTLS`).
    StartTls,
    /// TLS from the first byte (`ImplicitTLS`, or `Auto` on port 465).
    Tls,
}

/// How the client logs in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Auth {
    None,
    Plain,
    OAuth2,
}

/// One e-mail to send, and the server to send it through.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mail {
    pub host: String,
    pub port: u16,
    pub encryption: Encryption,
    pub auth: Auth,
    pub user: String,
    pub password: String,
    /// `Name <address>` or `address`.
    pub from: String,
    pub to: Vec<String>,
    pub subject: String,
    /// The name the client gives in its EHLO.
    pub client_host: String,
    pub body: String,
}

/// An SMTP server and the mail's envelope.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Smtp {
    template: Mail,
}

impl Smtp {
    pub fn parse(parts: &Parts) -> Result<Self, String> {
        let form = "smtp://[USER:PASSWORD@]HOST[:PORT]/?from=ADDRESS&to=ADDRESS[,ADDRESS]";
        let host = parts.hostname().to_owned();
        let port = match parts.host.rsplit_once(':') {
            Some((_, port)) => port.parse().map_err(|_| written(form))?,
            None => 25,
        };
        let address = parts.text(&["fromaddress", "from"]);
        let to = parts.list(&["toaddresses", "to"]);
        if host.is_empty() || address.is_empty() || to.is_empty() {
            return Err(written(form));
        }
        let encryption = match parts.text(&["encryption"]).to_ascii_lowercase().as_str() {
            "" | "auto" if port == 465 => Encryption::Tls,
            "" | "auto" if parts.flag(&["usestarttls", "starttls"], true) => {
                Encryption::Opportunistic
            }
            "" | "auto" | "none" => Encryption::None,
            "explicittls" => Encryption::StartTls,
            "implicittls" => Encryption::Tls,
            _ => return Err("encryption= is None, ExplicitTLS, ImplicitTLS or Auto".to_owned()),
        };
        let auth = match parts.text(&["auth"]).to_ascii_lowercase().as_str() {
            "" | "unknown" if parts.user.is_empty() => Auth::None,
            "" | "unknown" | "plain" => Auth::Plain,
            "none" => Auth::None,
            "oauth2" => Auth::OAuth2,
            _ => return Err("auth= is None, Plain, OAuth2 or Unknown (no CRAMMD5)".to_owned()),
        };
        let from = match parts.text(&["fromname"]) {
            name if name.is_empty() => address,
            name => format!("{name} <{address}>"),
        };
        Ok(Self {
            template: Mail {
                host,
                port,
                encryption,
                auth,
                user: parts.user.clone(),
                password: parts.password.clone().unwrap_or_default(),
                from,
                to,
                subject: parts
                    .option(&["subject", "title"])
                    .unwrap_or("Shoutrrr Notification")
                    .to_owned(),
                client_host: parts
                    .option(&["clienthost"])
                    .unwrap_or("localhost")
                    .to_owned(),
                body: String::new(),
            },
        })
    }

    /// `smtp://HOST:PORT`: what a target shows (redacted) and hides secrets by.
    pub fn endpoint(&self) -> String {
        format!("smtp://{}:{}", self.template.host, self.template.port)
    }

    pub fn mail(&self, text: &str) -> Mail {
        Mail {
            body: text.to_owned(),
            ..self.template.clone()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Delivery, Service, test_util::notice};
    use super::*;

    fn mail(url: &str) -> Result<Mail, String> {
        let rest = url.strip_prefix("smtp://").expect("an smtp URL");
        let service = Service::parse("smtp", rest).expect("supported")?;
        match service.deliveries(&notice()).pop() {
            Some(Delivery::Mail(mail)) => Ok(mail),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn an_smtp_url_becomes_its_mail_as_shoutrrr_reads_it() {
        let sent = mail(
            "smtp://bob:s3cret@mail.example:587/?from=kured@example.org&fromname=Kured\
             &to=a@example.org,b@example.org&subject=Reboots&encryption=ExplicitTLS",
        )
        .expect("valid");
        assert_eq!(
            sent,
            Mail {
                host: "mail.example".into(),
                port: 587,
                encryption: Encryption::StartTls,
                auth: Auth::Plain,
                user: "bob".into(),
                password: "s3cret".into(),
                from: "Kured <kured@example.org>".into(),
                to: vec!["a@example.org".into(), "b@example.org".into()],
                subject: "Reboots".into(),
                client_host: "localhost".into(),
                body: "Node n1 rebooted and uncordoned".into(),
            }
        );
        let plain = mail("smtp://mail.example/?from=k@x.org&to=a@x.org").expect("valid");
        assert_eq!(
            (plain.port, plain.encryption, plain.auth),
            (25, Encryption::Opportunistic, Auth::None)
        );
        assert_eq!(plain.subject, "Shoutrrr Notification");
        let tls = mail("smtp://u:p@mail.example:465/?from=k@x.org&to=a@x.org&starttls=no");
        assert_eq!(tls.map(|m| m.encryption), Ok(Encryption::Tls));
        let none = mail("smtp://mail.example:25/?from=k@x.org&to=a@x.org&usestarttls=no");
        assert_eq!(none.map(|m| m.encryption), Ok(Encryption::None));
        for (url, why) in [
            ("smtp://mail.example/?to=a@x.org", "from=ADDRESS"),
            ("smtp://mail.example/?from=k@x.org", "to=ADDRESS"),
            (
                "smtp://u:p@mail.example/?from=k@x.org&to=a@x.org&auth=CRAMMD5",
                "no CRAMMD5",
            ),
        ] {
            let error = mail(url).expect_err(url);
            assert!(error.contains(why), "{url}: {error}");
        }
    }
}
