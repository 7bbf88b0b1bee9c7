//! One webhook's sender: takes its queue in order and POSTs each notification, each attempt
//! bounded by `--notify-timeout`, retried with backoff when the webhook may answer later
//! (no answer, a connection error, 429 or 5xx). What it could not deliver is counted and
//! logged with the webhook's URL redacted.

use super::Target;
use crate::metrics::Metrics;
use backon::{ExponentialBuilder, Retryable};
use bytes::Bytes;
use observability::http_get::{HttpClient, post};
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
    mut queue: mpsc::Receiver<Bytes>,
    timeout: Duration,
    metrics: Metrics,
) {
    tokio::spawn(async move {
        while let Some(body) = queue.recv().await {
            let attempt = || post_once(&client, &target, body.clone(), timeout);
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
    });
}

async fn post_once(
    client: &HttpClient,
    target: &Target,
    body: Bytes,
    timeout: Duration,
) -> Result<(), Failure> {
    let sent = tokio::time::timeout(timeout, post(client, &target.url, "application/json", body));
    match sent.await {
        Err(_) => Err(Failure {
            why: format!("no answer within --notify-timeout {timeout:?}"),
            retry: true,
        }),
        Ok(Err(why)) => Err(Failure {
            // The client's errors do not name the URL; the redaction is for those that might.
            why: why.replace(&target.url, &target.shown),
            retry: true,
        }),
        Ok(Ok((status, _))) if status.is_success() => Ok(()),
        Ok(Ok((status, answer))) => Err(Failure {
            why: format!(
                "HTTP {status}: {}",
                String::from_utf8_lossy(&answer[..answer.len().min(200)]).trim()
            ),
            retry: status.is_server_error() || status.as_u16() == 429,
        }),
    }
}
