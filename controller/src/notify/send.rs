//! One service's sender: takes its queue in order and sends each notification (its HTTP
//! requests, or its e-mail), each attempt
//! bounded by `--notify-timeout`, retried with backoff when the webhook may answer later
//! (no answer, a connection error, 429 or 5xx). What it could not deliver is counted and
//! logged with the webhook's URL redacted.

use super::Target;
use super::service::{Delivery, Request};
use crate::metrics::Metrics;
use backon::{ExponentialBuilder, Retryable};
use http_body_util::Full;
use observability::http_get::{HttpClient, send};
use std::time::Duration;
use tokio::sync::mpsc;

/// Attempts after the first, and their backoff: 1 s doubling, with jitter. A webhook down for
/// longer loses the message rather than holding the ones behind it.
const RETRIES: usize = 3;
const FIRST_RETRY: Duration = Duration::from_secs(1);

/// Why one attempt failed, and whether another may succeed.
#[derive(Debug)]
struct Failure {
    why: String,
    retry: bool,
}

pub(super) fn spawn(
    client: HttpClient,
    target: Target,
    mut queue: mpsc::Receiver<Vec<Delivery>>,
    timeout: Duration,
    metrics: Metrics,
) {
    tokio::spawn(async move {
        while let Some(deliveries) = queue.recv().await {
            for delivery in deliveries {
                send_with_retries(&client, &target, &delivery, timeout, &metrics).await;
            }
        }
    });
}

/// Sends `delivery`, retried while the service may answer later; counts and logs how it ended.
async fn send_with_retries(
    client: &HttpClient,
    target: &Target,
    delivery: &Delivery,
    timeout: Duration,
    metrics: &Metrics,
) {
    let attempt = || async move {
        match delivery {
            Delivery::Http(request) => send_once(client, target, request, timeout).await,
            Delivery::Mail(mail) => {
                let sent = tokio::time::timeout(timeout, super::mail::send(mail, timeout)).await;
                match sent {
                    Err(_) => Err(Failure {
                        why: format!("no answer within --notify-timeout {timeout:?}"),
                        retry: true,
                    }),
                    Ok(Err(failure)) => Err(Failure {
                        why: target.hide_secrets(&failure.why),
                        retry: failure.retry,
                    }),
                    Ok(Ok(())) => Ok(()),
                }
            }
        }
    };
    let backoff = ExponentialBuilder::new()
        .with_min_delay(FIRST_RETRY)
        .with_max_times(RETRIES)
        .with_jitter();
    let sent = attempt
        .retry(backoff)
        .when(|failure| failure.retry)
        .notify(|failure, delay| {
            tracing::debug!(webhook = %target, why = %failure.why, ?delay, "notification not delivered; retrying");
        })
        .await;
    match sent {
        Ok(()) => metrics.notification("sent"),
        Err(failure) => {
            metrics.notification("failed");
            tracing::warn!(webhook = %target, why = %failure.why, "notification not delivered");
        }
    }
}

async fn send_once(
    client: &HttpClient,
    target: &Target,
    request: &Request,
    timeout: Duration,
) -> Result<(), Failure> {
    let built = request
        .headers
        .iter()
        .fold(
            http::Request::builder()
                .method(request.method.clone())
                .uri(&request.url),
            |built, (name, value)| built.header(name, value),
        )
        .body(Full::new(request.body.clone()))
        .map_err(|e| Failure {
            why: target.hide_secrets(&format!("not a request: {e}")),
            retry: false,
        })?;
    let sent = tokio::time::timeout(timeout, send(client, built));
    match sent.await {
        Err(_) => Err(Failure {
            why: format!("no answer within --notify-timeout {timeout:?}"),
            retry: true,
        }),
        Ok(Err(why)) => Err(Failure {
            // The client's errors do not name the URL; the redaction is for those that might.
            why: target.hide_secrets(&why),
            retry: true,
        }),
        Ok(Ok((status, _))) if status.is_success() => Ok(()),
        Ok(Ok((status, answer))) => Err(Failure {
            why: format!("HTTP {status}: {}", shown_answer(target, &answer)),
            retry: status.is_server_error() || status.as_u16() == 429,
        }),
    }
}

/// The start of a webhook's answer, as logged: its secrets hidden before it is cut short, so
/// that no part of one is left at the cut.
fn shown_answer(target: &Target, answer: &[u8]) -> String {
    let read = String::from_utf8_lossy(&answer[..answer.len().min(ANSWER_READ)]);
    let hidden = target.hide_secrets(&read);
    let shown: String = hidden.trim().chars().take(ANSWER_SHOWN).collect();
    shown
}

/// How much of an answer is searched for secrets, and how much of it is shown.
const ANSWER_READ: usize = 16 * 1024;
const ANSWER_SHOWN: usize = 200;

#[cfg(test)]
mod tests {
    use super::*;
    use observability::http_get::http_client;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    /// A webhook that refuses every request with an error page echoing what it was asked, as
    /// Express ("Cannot POST /path") and Spring (`"path": ...`) error pages do.
    async fn echoing_webhook() -> String {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let address = listener.local_addr().expect("address");
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let mut request = vec![0; 4096];
                let read = stream.read(&mut request).await.unwrap_or(0);
                let request = String::from_utf8_lossy(&request[..read]).into_owned();
                let target = request.split(' ').nth(1).unwrap_or_default().to_owned();
                let decoded = target.replace("%2F", "/");
                let body = format!(
                    "<pre>Cannot POST {target}</pre> {{\"path\":\"{decoded}\"}} {}",
                    "x".repeat(150)
                );
                let answer = format!(
                    "HTTP/1.1 404 Not Found\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = stream.write_all(answer.as_bytes()).await;
            }
        });
        format!("http://{address}")
    }

    #[tokio::test]
    async fn an_error_page_that_echoes_the_webhooks_path_is_logged_without_its_secrets() {
        let base = echoing_webhook().await;
        let target = super::super::target::parse(&format!(
            "{base}/hooks/T0KEN-in-the-path%2Fencoded?token=S3CRET-query&user=bob"
        ))
        .expect("a valid URL");
        let Some(Delivery::Http(request)) =
            target.deliveries(&crate::notify::Notice::blank()).pop()
        else {
            panic!("an http target sends HTTP requests");
        };
        let failure = send_once(&http_client(), &target, &request, Duration::from_secs(10))
            .await
            .expect_err("the webhook answers 404");
        assert!(!failure.retry, "a 404 is not retried: {failure:?}");
        assert!(failure.why.starts_with("HTTP 404"), "{}", failure.why);
        assert!(
            failure.why.contains("Cannot POST"),
            "the page is still shown: {}",
            failure.why
        );
        for secret in ["T0KEN", "S3CRET", "encoded", "hooks/"] {
            assert!(
                !failure.why.contains(secret),
                "{secret} is logged: {}",
                failure.why
            );
        }
    }
}
