//! Retries of a watch that grow while it makes no progress. kube-runtime's `default_backoff`
//! is reset by every `Ok` item, and each new list starts with an `Init` item, so a watch whose
//! list keeps failing (the API server overloaded or down, the RBAC refusing, a CRD not
//! installed, a relist too old for the watch cache) asked again about once a second for good,
//! every watcher of every replica and agent at once. Here only progress resets the delay: an
//! object, a deletion, or the end of a list.

use backon::{BackoffBuilder, ExponentialBackoff, ExponentialBuilder};
use futures::{StreamExt, stream::BoxStream};
use kube::runtime::watcher;
use std::time::Duration;

/// One item of a watch, as kube-runtime's watcher gives it.
pub type WatchItem<K> = Result<watcher::Event<K>, watcher::Error>;

/// The first wait after an error.
pub const FIRST_DELAY: Duration = Duration::from_secs(1);

/// The longest wait of a watch the programs need to work (kube-runtime's too): once the
/// API server is back, they see it within this.
pub const MAX_DELAY: Duration = Duration::from_secs(30);

/// How long to wait before the next attempt, from the items a watch gives. Pure: the caller
/// sleeps.
#[derive(Debug)]
pub struct RetryDelays {
    max: Duration,
    delays: ExponentialBackoff,
}

impl RetryDelays {
    /// From [`FIRST_DELAY`], doubling (with jitter, so that many watchers that failed together
    /// do not retry together) up to `max`.
    pub fn new(max: Duration) -> Self {
        Self {
            max,
            delays: Self::fresh(max),
        }
    }

    fn fresh(max: Duration) -> ExponentialBackoff {
        ExponentialBuilder::new()
            .with_min_delay(FIRST_DELAY)
            .with_max_delay(max)
            .with_jitter()
            .without_max_times()
            .build()
    }

    /// The wait before the watch is polled again after `item`, if any.
    pub fn after<K>(&mut self, item: &WatchItem<K>) -> Option<Duration> {
        match item {
            Err(_) => Some(self.delays.next().unwrap_or(self.max).min(self.max)),
            // A new start of the list is no progress: it comes before every retry.
            Ok(watcher::Event::Init) => None,
            Ok(_) => {
                self.delays = Self::fresh(self.max);
                None
            }
        }
    }
}

/// `stream` with a wait after each error that doubles up to `max` until the watch makes
/// progress. Items pass unchanged; an error is given at once, and the wait comes before the
/// next item is asked for.
pub fn retry_with_backoff<K: Send + 'static>(
    stream: BoxStream<'static, WatchItem<K>>,
    max: Duration,
) -> BoxStream<'static, WatchItem<K>> {
    let state = (stream, RetryDelays::new(max), None::<Duration>);
    // The state lives in the stream, not in the `next()` future: a caller's `select!` may drop
    // that future and poll again without losing the wait.
    futures::stream::unfold(state, |(mut stream, mut delays, wait)| async move {
        if let Some(wait) = wait {
            tokio::time::sleep(wait).await;
        }
        let item = stream.next().await?;
        let wait = delays.after(&item);
        Some((item, (stream, delays, wait)))
    })
    .boxed()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Node;

    fn failed() -> WatchItem<Node> {
        Err(watcher::Error::NoResourceVersion)
    }

    fn init() -> WatchItem<Node> {
        Ok(watcher::Event::Init)
    }

    #[test]
    fn a_list_that_keeps_failing_waits_longer_and_longer_up_to_the_maximum() {
        let max = Duration::from_secs(60);
        let mut delays = RetryDelays::new(max);
        let mut waits = Vec::new();
        for _ in 0..12 {
            // Each retry starts with an `Init`, as kube-runtime's list does.
            assert_eq!(delays.after(&init()), None);
            waits.push(delays.after(&failed()).expect("a wait after an error"));
        }
        assert!(
            waits[0] >= FIRST_DELAY && waits[0] < 2 * FIRST_DELAY,
            "{waits:?}"
        );
        assert!(waits[5] >= Duration::from_secs(32), "{waits:?}");
        assert!(waits.iter().all(|w| *w <= max), "{waits:?}");
        assert_eq!(waits[11], max, "{waits:?}");
    }

    #[test]
    fn progress_starts_the_waits_over() {
        for progress in [
            watcher::Event::InitApply(Node::default()),
            watcher::Event::InitDone,
            watcher::Event::Apply(Node::default()),
            watcher::Event::Delete(Node::default()),
        ] {
            let mut delays = RetryDelays::new(Duration::from_secs(60));
            for _ in 0..6 {
                delays.after(&failed());
            }
            assert_eq!(delays.after(&Ok(progress)), None);
            let wait = delays.after(&failed()).expect("a wait");
            assert!(wait < 2 * FIRST_DELAY, "{wait:?}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn the_stream_waits_before_asking_again_after_an_error() {
        let items: Vec<WatchItem<Node>> = vec![init(), failed(), init(), failed(), init()];
        let mut stream = retry_with_backoff(
            futures::stream::iter(items).boxed(),
            Duration::from_secs(60),
        );
        let t0 = tokio::time::Instant::now();
        let mut seen = Vec::new();
        while let Some(item) = stream.next().await {
            seen.push((item.is_ok(), t0.elapsed()));
        }
        assert_eq!(seen.len(), 5);
        assert_eq!(
            seen[1].1,
            Duration::ZERO,
            "the error itself is given at once"
        );
        assert!(seen[2].1 >= FIRST_DELAY, "{seen:?}");
        assert!(
            seen[4].1 >= seen[2].1 + 2 * FIRST_DELAY,
            "the second wait is longer: {seen:?}"
        );
    }
}
