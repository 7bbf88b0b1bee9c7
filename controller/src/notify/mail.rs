//! Sends one e-mail of `--notify-url smtp://...` (see [`super::service::smtp`]) with lettre:
//! STARTTLS or TLS by rustls with the system's CAs (`SSL_CERT_FILE` names a bundle).

use super::service::smtp::{Auth, Encryption, Mail};
use lettre::message::{Mailbox, header::ContentType};
use lettre::transport::smtp::{
    AsyncSmtpTransport,
    authentication::{Credentials, Mechanism},
    client::{Tls, TlsParameters},
    extension::ClientId,
};
use lettre::{AsyncTransport, Message, Tokio1Executor};
use std::time::Duration;

/// Why a mail was not sent, and whether another attempt may succeed.
#[derive(Debug)]
pub(super) struct Failure {
    pub(super) why: String,
    pub(super) retry: bool,
}

/// Sends `mail`; a failure says whether another attempt may succeed (a transient SMTP error, a
/// connection that failed) or not (a permanent one, an address that is no address).
pub(super) async fn send(mail: &Mail, timeout: Duration) -> Result<(), Failure> {
    let message = message(mail).map_err(|why| Failure { why, retry: false })?;
    let transport = transport(mail, timeout).map_err(|e| Failure {
        why: format!("SMTP: {e}"),
        retry: false,
    })?;
    transport
        .send(message)
        .await
        .map(|_| ())
        .map_err(|e| Failure {
            why: format!("SMTP: {}", observability::error_chain(&e)),
            retry: !e.is_permanent(),
        })
}

/// The message: from, to each, subject, the text as text/plain.
fn message(mail: &Mail) -> Result<Message, String> {
    let mailbox = |address: &str| {
        address
            .parse::<Mailbox>()
            .map_err(|e| format!("{address:?} is no e-mail address ({e})"))
    };
    let mut builder = Message::builder()
        .from(mailbox(&mail.from)?)
        .subject(mail.subject.as_str())
        .header(ContentType::TEXT_PLAIN);
    for to in &mail.to {
        builder = builder.to(mailbox(to)?);
    }
    builder
        .body(mail.body.clone())
        .map_err(|e| format!("no e-mail: {e}"))
}

fn transport(
    mail: &Mail,
    timeout: Duration,
) -> Result<AsyncSmtpTransport<Tokio1Executor>, lettre::transport::smtp::Error> {
    let parameters = || TlsParameters::new(mail.host.clone());
    let tls = match mail.encryption {
        Encryption::None => Tls::None,
        Encryption::Opportunistic => Tls::Opportunistic(parameters()?),
        Encryption::StartTls => Tls::Required(parameters()?),
        Encryption::Tls => Tls::Wrapper(parameters()?),
    };
    let builder = AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous(mail.host.as_str())
        .port(mail.port)
        .tls(tls)
        .timeout(Some(timeout))
        .hello_name(ClientId::Domain(mail.client_host.clone()));
    let builder = match mail.auth {
        Auth::None => builder,
        Auth::Plain => builder
            .credentials(Credentials::new(mail.user.clone(), mail.password.clone()))
            .authentication(vec![Mechanism::Plain, Mechanism::Login]),
        Auth::OAuth2 => builder
            .credentials(Credentials::new(mail.user.clone(), mail.password.clone()))
            .authentication(vec![Mechanism::Xoauth2]),
    };
    Ok(builder.build())
}
