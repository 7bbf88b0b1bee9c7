//! A watch opened with a streaming list where the API server has one, else with a list and a
//! watch: what the agent's watch of its own Node and the controller's watch of every Node share.
//!
//! A streaming list (`sendInitialEvents=true`, the API server's WatchList feature, on by
//! default since Kubernetes 1.34) brings the current state and then the changes in ONE
//! request, served from the API server's watch cache, where a list and a watch take two (or,
//! paged, one per page, each read from etcd). For the agent that is one request less per
//! reboot. For the controller's watch of tens of thousands of nodes it is what lets the watch
//! start at all: a paged list takes minutes there, and the watch from its resourceVersion is
//! then older than the watch cache's history ("too old resource version"), so kube-runtime
//! lists again, for ever.
//!
//! An API server without the feature refuses the request (422: the WatchList feature gate is
//! off; before 1.27, `resourceVersionMatch` is forbidden on a watch) or, older still, ignores
//! the parameter and never sends the bookmark that ends the initial events: it sends every
//! object as a plain watch does, then their changes, so an object that comes twice (a busy
//! cluster) or a silence after the last one (a quiet one) tells. Either way the
//! watch falls back to a list and a watch for the rest of the process's life; its next start
//! tries the streaming list again, so an API server that gains the feature is used at once.
//! The decision is the pure [`StreamingListProbe`]; [`streaming_watch`] applies it.

use crate::watch_retry::{MAX_DELAY, retry_with_backoff};
use futures::{StreamExt, stream::BoxStream};
use k8s_openapi::serde::de::DeserializeOwned;
use kube::{Api, Resource, ResourceExt, runtime::watcher};
use std::{collections::HashSet, fmt, time::Duration};
use tokio::time::Instant;
use tracing::{info, warn};

pub use crate::watch_retry::WatchItem;

/// How long an accepted streaming watch may go without an initial event, before the bookmark
/// that ends them, until it is taken for one that will never end them. An API server that has
/// the feature sends its objects one after the other and the bookmark right after the last; one
/// that ignores the parameter never sends it. Falling back too early costs one request, never a
/// missed change: the events are acted on as they come, before and after the fallback.
pub const BOOKMARK_DEADLINE: Duration = Duration::from_secs(30);

/// Streaming watches in a row that end before their initial events do (a proxy that cuts
/// them, say) before the watch gives up on streaming lists.
pub const MAX_UNFINISHED_STARTS: u32 = 3;

/// Why the watch stops asking for a streaming list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fallback {
    /// The API server refused the streaming watch: it lacks the feature or has it off.
    Refused { code: u16, message: String },
    /// A streaming watch was accepted, but the bookmark that ends its initial events did not
    /// come within [`BOOKMARK_DEADLINE`] of the last of them: the API server ignores
    /// `sendInitialEvents`.
    NoBookmark { waited: Duration },
    /// [`MAX_UNFINISHED_STARTS`] streaming watches in a row ended before their initial events.
    Unfinished { starts: u32 },
    /// An object came twice before the bookmark: a streaming list sends each object once, so
    /// the API server ignores `sendInitialEvents` and streams changes that would, in a busy
    /// cluster, keep the deadline from ever passing (and the cache from ever being complete).
    Repeated { object: String },
}

impl fmt::Display for Fallback {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Refused { code, message } => {
                write!(
                    f,
                    "the API server refused the streaming list ({code}: {message})"
                )
            }
            Self::NoBookmark { waited } => write!(
                f,
                "the API server did not end the initial events of the streaming list within \
                 {waited:?} (it ignores sendInitialEvents)"
            ),
            Self::Unfinished { starts } => write!(
                f,
                "{starts} streaming lists in a row ended before their initial events did"
            ),
            Self::Repeated { object } => write!(
                f,
                "the API server sent {object} twice before ending the initial events of the \
                 streaming list (it ignores sendInitialEvents)"
            ),
        }
    }
}

/// Decides, from what the streaming watch delivers and when, whether to fall back to a list
/// and a watch. Pure: no I/O, time is an input.
#[derive(Debug, Default)]
pub struct StreamingListProbe {
    /// When the current streaming watch last showed it is alive before the end of its initial
    /// events: accepted (`Init`), or one of them (`InitApply`).
    awaiting_since: Option<Instant>,
    /// The objects of the current streaming watch's initial events so far.
    initial: HashSet<String>,
    /// Streaming watches in a row that ended before their initial events did.
    unfinished: u32,
}

impl StreamingListProbe {
    /// Takes in one item of the streaming watch, seen at `now`.
    pub fn observe<K: Resource>(&mut self, item: &WatchItem<K>, now: Instant) -> Option<Fallback> {
        match item {
            Ok(watcher::Event::Init) => {
                self.initial.clear();
                // kube-runtime starts over (a new `Init`) when a streaming watch ends before
                // its bookmark: that start did not finish.
                if self.awaiting_since.replace(now).is_some() {
                    return self.one_more_unfinished();
                }
                None
            }
            Ok(watcher::Event::InitApply(object)) => {
                // Tens of thousands of objects take a while: the clock runs from the last.
                if let Some(since) = self.awaiting_since.as_mut() {
                    *since = now;
                }
                let key = match object.meta().namespace.as_deref() {
                    Some(namespace) => format!("{namespace}/{}", object.name_any()),
                    None => object.name_any(),
                };
                if self.initial.contains(&key) {
                    return Some(Fallback::Repeated { object: key });
                }
                self.initial.insert(key);
                None
            }
            Ok(watcher::Event::InitDone) => {
                self.awaiting_since = None;
                self.initial = HashSet::new();
                self.unfinished = 0;
                None
            }
            Ok(_) => None,
            Err(error) => {
                if let Some(fallback) = refusal(error) {
                    return Some(fallback);
                }
                // No deadline while no watch is open: an API server that is down or restarting
                // says nothing about the feature. The watch it may have cut did not finish.
                self.initial.clear();
                if self.awaiting_since.take().is_some() {
                    return self.one_more_unfinished();
                }
                None
            }
        }
    }

    /// When the bookmark is overdue, if a streaming watch awaits it.
    pub fn deadline(&self) -> Option<Instant> {
        self.awaiting_since.map(|since| since + BOOKMARK_DEADLINE)
    }

    /// Nothing came from the watch until `now`.
    pub fn nothing_until(&self, now: Instant) -> Option<Fallback> {
        let since = self.awaiting_since?;
        let waited = now.saturating_duration_since(since);
        (waited >= BOOKMARK_DEADLINE).then_some(Fallback::NoBookmark { waited })
    }

    fn one_more_unfinished(&mut self) -> Option<Fallback> {
        self.unfinished += 1;
        (self.unfinished >= MAX_UNFINISHED_STARTS).then_some(Fallback::Unfinished {
            starts: self.unfinished,
        })
    }
}

/// The API server's refusal of the streaming watch itself. 422 (Invalid) is what a server
/// with the WatchList feature gate off answers ("sendInitialEvents is forbidden for watch
/// unless the WatchList feature gate is enabled"), and what one older than 1.27 answers
/// ("resourceVersionMatch is forbidden for watch"); 400 (BadRequest) is what a server or
/// proxy that cannot parse the parameters answers. Nothing else counts: 401/403 would refuse a
/// list and a watch as well, and 5xx, 429 or a lost connection pass (kube-runtime retries them
/// with backoff).
fn refusal(error: &watcher::Error) -> Option<Fallback> {
    let watcher::Error::WatchStartFailed(kube::Error::Api(status)) = error else {
        return None;
    };
    matches!(status.code, 400 | 422).then(|| Fallback::Refused {
        code: status.code,
        message: status.message.clone(),
    })
}

/// What a watch is of, for the two lines that say how it watches.
#[derive(Debug, Clone, Copy)]
pub struct Watched {
    /// What is watched, as in "the watch of {what} started with a streaming list".
    pub what: &'static str,
    /// What a list and a watch cost more, as in "falling back to a list and a watch of {what}:
    /// {costs}".
    pub costs: &'static str,
}

/// A watch with `config` (its selectors; its page size for a list): a streaming list first,
/// a list and a watch after a [`Fallback`] (logged once). Items pass as kube-runtime gives
/// them, except the refusal that causes a fallback: the watch starts over (`Init`) instead.
pub fn streaming_watch<K>(
    api: Api<K>,
    config: watcher::Config,
    watched: Watched,
) -> BoxStream<'static, WatchItem<K>>
where
    K: Resource + Clone + DeserializeOwned + fmt::Debug + Send + Sync + 'static,
{
    let watch = StreamingWatch {
        inner: open(&api, config.clone().streaming_lists()),
        probe: Some(StreamingListProbe::default()),
        streamed: false,
        api,
        config,
        watched,
    };
    // The state lives in the stream, not in the `next()` future: a caller's `select!` may drop
    // that future (another branch won) and poll again without losing anything.
    futures::stream::unfold(watch, |mut watch| async move {
        let item = watch.next().await?;
        Some((item, watch))
    })
    .boxed()
}

fn open<K>(api: &Api<K>, config: watcher::Config) -> BoxStream<'static, WatchItem<K>>
where
    K: Resource + Clone + DeserializeOwned + fmt::Debug + Send + Sync + 'static,
{
    retry_with_backoff(watcher(api.clone(), config).boxed(), MAX_DELAY)
}

struct StreamingWatch<K> {
    api: Api<K>,
    /// The list-and-watch configuration, the streaming one's base.
    config: watcher::Config,
    watched: Watched,
    inner: BoxStream<'static, WatchItem<K>>,
    /// `None` once fallen back to a list and a watch.
    probe: Option<StreamingListProbe>,
    /// A streaming list has ended its initial events (said once: the log tells which way it
    /// watches, and the tests read it).
    streamed: bool,
}

impl<K> StreamingWatch<K>
where
    K: Resource + Clone + DeserializeOwned + fmt::Debug + Send + Sync + 'static,
{
    async fn next(&mut self) -> Option<WatchItem<K>> {
        loop {
            let Some(probe) = self.probe.as_mut() else {
                return self.inner.next().await;
            };
            let polled = match probe.deadline() {
                None => Some(self.inner.next().await),
                Some(deadline) => tokio::time::timeout_at(deadline, self.inner.next())
                    .await
                    .ok(),
            };
            let now = Instant::now();
            let (item, fallback) = match polled {
                // The watcher never ends by itself; if it did, the caller reports it.
                Some(None) => return None,
                Some(Some(item)) => {
                    let fallback = probe.observe(&item, now);
                    (Some(item), fallback)
                }
                None => (None, probe.nothing_until(now)),
            };
            if let Some(why) = fallback {
                self.fall_back(&why);
                continue;
            }
            if let Some(item) = item {
                if !self.streamed && matches!(item, Ok(watcher::Event::InitDone)) {
                    self.streamed = true;
                    info!(
                        "the watch of {} started with a streaming list (one request)",
                        self.watched.what
                    );
                }
                return Some(item);
            }
        }
    }

    fn fall_back(&mut self, why: &Fallback) {
        warn!(
            %why,
            "falling back to a list and a watch of {}: {} (the API server's WatchList feature, \
             on by default since Kubernetes 1.34, saves it)",
            self.watched.what,
            self.watched.costs,
        );
        // Dropping the streaming watch closes its connection.
        self.inner = open(&self.api, self.config.clone());
        self.probe = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Node;
    use kube::core::Status;

    fn event(event: watcher::Event<Node>) -> WatchItem<Node> {
        Ok(event)
    }

    fn start_failed(code: u16, message: &str) -> WatchItem<Node> {
        let mut status = Status::failure(message, "Reason");
        status.code = code;
        Err(watcher::Error::WatchStartFailed(kube::Error::Api(
            Box::new(status),
        )))
    }

    /// An error without an HTTP status: the API server is not reachable.
    fn unreachable() -> WatchItem<Node> {
        let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        Err(watcher::Error::WatchStartFailed(kube::Error::Service(
            Box::new(refused),
        )))
    }

    fn named(name: &str) -> Node {
        let mut node = Node::default();
        node.metadata.name = Some(name.to_owned());
        node
    }

    fn at(t0: Instant, secs: u64) -> Instant {
        t0 + Duration::from_secs(secs)
    }

    #[test]
    fn a_streaming_list_that_ends_its_initial_events_is_kept() {
        let t0 = Instant::now();
        let mut probe = StreamingListProbe::default();
        assert_eq!(probe.deadline(), None, "no deadline before a watch runs");
        assert_eq!(probe.observe(&event(watcher::Event::Init), t0), None);
        assert_eq!(probe.deadline(), Some(at(t0, 30)));
        let node = event(watcher::Event::InitApply(Node::default()));
        assert_eq!(probe.observe(&node, at(t0, 1)), None);
        assert_eq!(
            probe.observe(&event(watcher::Event::InitDone), at(t0, 1)),
            None
        );
        assert_eq!(probe.deadline(), None, "the bookmark came");
        // Changes for hours, and the watch's renewals: nothing to decide.
        let change = event(watcher::Event::Apply(Node::default()));
        assert_eq!(probe.observe(&change, at(t0, 3600)), None);
        assert_eq!(probe.nothing_until(at(t0, 7200)), None);
    }

    #[test]
    fn a_refused_streaming_list_falls_back_at_once() {
        let gate_off = "ListOptions.meta.k8s.io \"\" is invalid: sendInitialEvents: Forbidden: \
                        sendInitialEvents is forbidden for watch unless the WatchList feature \
                        gate is enabled";
        for (code, message) in [(422, gate_off), (400, "unknown parameter")] {
            let mut probe = StreamingListProbe::default();
            assert_eq!(
                probe.observe(&start_failed(code, message), Instant::now()),
                Some(Fallback::Refused {
                    code,
                    message: message.to_owned()
                })
            );
        }
    }

    #[test]
    fn errors_that_would_hit_a_list_too_do_not_fall_back() {
        // Unauthorized, forbidden, gone, too many requests, server errors, no connection: a
        // list and a watch would meet them too; kube-runtime retries them with backoff.
        let t0 = Instant::now();
        let mut probe = StreamingListProbe::default();
        for code in [401, 403, 404, 410, 429, 500, 503, 504] {
            assert_eq!(probe.observe(&start_failed(code, "no"), t0), None, "{code}");
        }
        assert_eq!(probe.observe(&unreachable(), t0), None);
        assert_eq!(probe.nothing_until(at(t0, 3600)), None, "no watch ran");
    }

    #[test]
    fn a_streaming_watch_without_its_bookmark_falls_back_after_the_deadline() {
        // An API server that ignores sendInitialEvents: the node comes as a plain ADDED event,
        // the bookmark never.
        let t0 = Instant::now();
        let mut probe = StreamingListProbe::default();
        probe.observe(&event(watcher::Event::Init), t0);
        let node = event(watcher::Event::InitApply(Node::default()));
        assert_eq!(probe.observe(&node, at(t0, 1)), None);
        assert_eq!(
            probe.nothing_until(at(t0, 30)),
            None,
            "not yet: 29 s since the node"
        );
        assert_eq!(
            probe.nothing_until(at(t0, 31)),
            Some(Fallback::NoBookmark {
                waited: BOOKMARK_DEADLINE
            })
        );
    }

    #[test]
    fn a_long_initial_list_is_not_taken_for_a_missing_bookmark() {
        // Tens of thousands of nodes, a few a millisecond for minutes: the clock runs from
        // the last of them, not from the start.
        let t0 = Instant::now();
        let mut probe = StreamingListProbe::default();
        probe.observe(&event(watcher::Event::Init), t0);
        for second in 1..=300 {
            let node = event(watcher::Event::InitApply(named(&format!("node-{second}"))));
            assert_eq!(probe.observe(&node, at(t0, second)), None);
            assert_eq!(probe.nothing_until(at(t0, second)), None);
        }
        assert_eq!(probe.deadline(), Some(at(t0, 330)));
        assert_eq!(
            probe.observe(&event(watcher::Event::InitDone), at(t0, 301)),
            None
        );
        assert_eq!(probe.deadline(), None);
    }

    #[test]
    fn an_object_twice_before_the_bookmark_falls_back_at_once() {
        // A server that ignores sendInitialEvents in a busy cluster: every node, then their
        // changes, each well within the deadline of the one before, and never a bookmark.
        let t0 = Instant::now();
        let mut probe = StreamingListProbe::default();
        probe.observe(&event(watcher::Event::Init), t0);
        for name in ["a", "b", "c"] {
            let node = event(watcher::Event::InitApply(named(name)));
            assert_eq!(probe.observe(&node, at(t0, 1)), None);
        }
        let change = event(watcher::Event::InitApply(named("b")));
        assert_eq!(
            probe.observe(&change, at(t0, 2)),
            Some(Fallback::Repeated { object: "b".into() })
        );
    }

    #[test]
    fn each_start_of_a_streaming_list_may_send_every_object_again() {
        // A start cut before its bookmark, then a complete one, then a relist: the same
        // objects each time is what a streaming list does.
        let t0 = Instant::now();
        let mut probe = StreamingListProbe::default();
        let a = || event(watcher::Event::InitApply(named("a")));
        probe.observe(&event(watcher::Event::Init), t0);
        assert_eq!(probe.observe(&a(), t0), None);
        assert_eq!(probe.observe(&unreachable(), at(t0, 1)), None);
        probe.observe(&event(watcher::Event::Init), at(t0, 2));
        assert_eq!(probe.observe(&a(), at(t0, 2)), None);
        probe.observe(&event(watcher::Event::InitDone), at(t0, 2));
        probe.observe(&event(watcher::Event::Init), at(t0, 3));
        assert_eq!(probe.observe(&a(), at(t0, 3)), None);
    }

    #[test]
    fn an_api_server_that_goes_away_stops_the_clock() {
        // Accepted, then cut before the bookmark, then unreachable for long: an outage, not a
        // missing feature. Once back, the streaming list works.
        let t0 = Instant::now();
        let mut probe = StreamingListProbe::default();
        probe.observe(&event(watcher::Event::Init), t0);
        assert_eq!(probe.observe(&unreachable(), at(t0, 1)), None);
        assert_eq!(probe.deadline(), None);
        assert_eq!(probe.nothing_until(at(t0, 600)), None);
        assert_eq!(
            probe.observe(&event(watcher::Event::Init), at(t0, 600)),
            None
        );
        assert_eq!(
            probe.observe(&event(watcher::Event::InitDone), at(t0, 600)),
            None
        );
        assert_eq!(probe.deadline(), None);
    }

    #[test]
    fn streaming_watches_cut_before_their_bookmark_again_and_again_fall_back() {
        let t0 = Instant::now();
        let mut probe = StreamingListProbe::default();
        // The first start, then two starts over without an end of the initial events.
        assert_eq!(probe.observe(&event(watcher::Event::Init), t0), None);
        assert_eq!(probe.observe(&event(watcher::Event::Init), at(t0, 1)), None);
        assert_eq!(probe.observe(&unreachable(), at(t0, 2)), None);
        assert_eq!(
            probe.observe(&event(watcher::Event::Init), at(t0, 3)),
            None,
            "a start after an error is no second count of the same watch"
        );
        assert_eq!(
            probe.observe(&event(watcher::Event::Init), at(t0, 4)),
            Some(Fallback::Unfinished {
                starts: MAX_UNFINISHED_STARTS
            })
        );
    }

    #[test]
    fn a_finished_start_forgets_earlier_unfinished_ones() {
        let t0 = Instant::now();
        let mut probe = StreamingListProbe::default();
        for round in 0..10 {
            let t = at(t0, round * 10);
            assert_eq!(probe.observe(&event(watcher::Event::Init), t), None);
            assert_eq!(probe.observe(&event(watcher::Event::Init), t), None);
            assert_eq!(probe.observe(&event(watcher::Event::InitDone), t), None);
        }
    }

    #[test]
    fn a_refusal_later_in_life_falls_back_too() {
        // The API server lost the feature while the agent ran (a downgrade, the gate turned
        // off): the next full start of the watch is refused, and must not loop on it.
        let t0 = Instant::now();
        let mut probe = StreamingListProbe::default();
        probe.observe(&event(watcher::Event::Init), t0);
        probe.observe(&event(watcher::Event::InitDone), t0);
        assert!(matches!(
            probe.observe(&start_failed(422, "forbidden"), at(t0, 3600)),
            Some(Fallback::Refused { code: 422, .. })
        ));
    }

    #[test]
    fn each_reason_says_what_happened() {
        let refused = Fallback::Refused {
            code: 422,
            message: "sendInitialEvents is forbidden".into(),
        };
        assert_eq!(
            refused.to_string(),
            "the API server refused the streaming list (422: sendInitialEvents is forbidden)"
        );
        let late = Fallback::NoBookmark {
            waited: BOOKMARK_DEADLINE,
        };
        assert!(
            late.to_string().contains("ignores sendInitialEvents"),
            "{late}"
        );
        let cut = Fallback::Unfinished { starts: 3 };
        assert!(
            cut.to_string().starts_with("3 streaming lists in a row"),
            "{cut}"
        );
        let twice = Fallback::Repeated {
            object: "node-7".into(),
        };
        assert!(twice.to_string().contains("sent node-7 twice"), "{twice}");
    }
}
