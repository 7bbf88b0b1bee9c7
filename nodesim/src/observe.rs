//! Watches for independent observers (the budget watcher, the e2e histories and the chaos
//! observer) that never go blind: they keep polling kube's watcher past errors (with its
//! default backoff), so after an API server restart the watch resumes from its last
//! resourceVersion or lists again, and they count what they could not see one by one.
//!
//! An observer that stopped at the first error would see nothing after a restart and pass
//! every check forever; here a watch that stopped, or kept failing for longer than
//! [`BLIND_LIMIT`], fails [`ResumingWatch::check`].

use futures::StreamExt;
use k8s_openapi::serde::de::DeserializeOwned;
use kube::{
    Api, Resource, ResourceExt,
    runtime::{WatchStreamExt, watcher},
};
use std::{
    collections::BTreeMap,
    fmt::Debug,
    sync::{Arc, Mutex, MutexGuard},
    time::{Duration, Instant},
};
use tokio::{sync::oneshot, task::JoinHandle};

/// How long a watch may keep failing, without one event in between, before the observer
/// admits it could not observe.
pub const BLIND_LIMIT: Duration = Duration::from_secs(60);

/// While a watch fails, kube's default backoff retries at most every 30 s, doubled by its
/// jitter; add the time of the failing request itself. Errors further apart than this had a
/// working watch between them (a quiet one: nothing changed), so they are separate outages.
const RETRY_CEILING: Duration = Duration::from_secs(70);

/// What an observer does with what its watch sees, in the order the API server sent it.
pub trait Observe<K>: Send + 'static {
    /// Every object, from a complete list; replaces everything known before (objects that
    /// are not in it were deleted while the watch was not looking).
    fn listed(&mut self, objects: &[K]);
    fn applied(&mut self, object: &K);
    /// The object as it was deleted (its resourceVersion is the deletion's).
    fn deleted(&mut self, object: &K);
}

/// What a watch could not see one by one.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Coverage {
    /// Errors of the watch, each followed by a retry.
    pub errors: u64,
    /// Complete lists after the first: the watch could not resume and started over.
    pub relists: u64,
    /// Objects that changed, appeared or vanished between the last event seen before a
    /// re-list and that re-list: at least this many changes were not seen one by one.
    pub unobserved_changes: u64,
    /// The longest time errors kept coming with no event in between.
    pub longest_outage: Duration,
}

impl std::fmt::Display for Coverage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} watch errors, {} re-lists, {} changes not seen one by one, longest outage {:.1?}",
            self.errors, self.relists, self.unobserved_changes, self.longest_outage
        )
    }
}

#[derive(Debug)]
struct Shared<O> {
    observer: O,
    coverage: Coverage,
    /// The first and the last error of the outage under way, if errors are coming.
    outage: Option<(Instant, Instant)>,
    /// `namespace/name` -> resourceVersion of every object as last seen.
    known: BTreeMap<String, String>,
}

impl<O> Shared<O> {
    fn saw_an_event(&mut self) {
        self.outage = None;
    }

    fn saw_an_error(&mut self, now: Instant) {
        self.coverage.errors += 1;
        let first = match self.outage {
            Some((first, last)) if now.duration_since(last) <= RETRY_CEILING => first,
            _ => now,
        };
        self.outage = Some((first, now));
        self.coverage.longest_outage = self.coverage.longest_outage.max(now - first);
    }

    /// Counts the objects a re-list shows different from what the watch saw last.
    fn count_unobserved(&mut self, listed: &BTreeMap<String, String>) {
        let changed_or_new = listed
            .iter()
            .filter(|(key, version)| self.known.get(*key) != Some(*version))
            .count();
        let vanished = self
            .known
            .keys()
            .filter(|key| !listed.contains_key(*key))
            .count();
        self.coverage.unobserved_changes += (changed_or_new + vanished) as u64;
    }
}

fn key<K: Resource>(object: &K) -> String {
    format!(
        "{}/{}",
        object.namespace().unwrap_or_default(),
        object.name_any()
    )
}

fn version<K: Resource>(object: &K) -> String {
    object.resource_version().unwrap_or_default()
}

/// The resourceVersion of an object as a number: an etcd revision, which orders the events of
/// different watches against each other.
pub fn revision<K: Resource>(object: &K) -> u64 {
    version(object).parse().unwrap_or(0)
}

fn lock<O>(shared: &Mutex<Shared<O>>) -> MutexGuard<'_, Shared<O>> {
    shared.lock().unwrap_or_else(|e| e.into_inner())
}

/// A watch feeding one observer, resuming after every error, until dropped.
#[derive(Debug)]
pub struct ResumingWatch<O> {
    shared: Arc<Mutex<Shared<O>>>,
    what: String,
    task: JoinHandle<()>,
}

impl<O> ResumingWatch<O> {
    /// Starts watching `what` (named in messages) and returns once the first complete list
    /// reached the observer, so that nothing a caller does afterwards can be missed.
    pub async fn start<K>(
        api: Api<K>,
        config: watcher::Config,
        what: impl Into<String>,
        observer: O,
    ) -> Result<Self, String>
    where
        K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
        O: Observe<K>,
    {
        let what = what.into();
        let shared = Arc::new(Mutex::new(Shared {
            observer,
            coverage: Coverage::default(),
            outage: None,
            known: BTreeMap::new(),
        }));
        let (listed, first_list) = oneshot::channel();
        let task = tokio::spawn(follow(api, config, shared.clone(), listed));
        let watch = Self { shared, what, task };
        match tokio::time::timeout(BLIND_LIMIT, first_list).await {
            Ok(Ok(())) => Ok(watch),
            Ok(Err(_)) => Err(format!(
                "the watch of {} stopped before it listed",
                watch.what
            )),
            Err(_) => Err(format!(
                "the watch of {} could not list within {BLIND_LIMIT:?} ({})",
                watch.what,
                watch.coverage()
            )),
        }
    }

    /// Reads the observer's state.
    pub fn with<R>(&self, read: impl FnOnce(&O) -> R) -> R {
        read(&lock(&self.shared).observer)
    }

    /// Changes the observer's state (for what the test tells it, such as an administrator's
    /// cordon).
    pub fn with_mut<R>(&self, change: impl FnOnce(&mut O) -> R) -> R {
        change(&mut lock(&self.shared).observer)
    }

    pub fn coverage(&self) -> Coverage {
        lock(&self.shared).coverage
    }

    /// The resourceVersion of every object as the watch last saw it, by `namespace/name`.
    pub fn known_versions(&self) -> BTreeMap<String, String> {
        lock(&self.shared).known.clone()
    }

    /// Fails when the watch stopped or was blind for longer than [`BLIND_LIMIT`]: then the
    /// observer could not observe, and a test must not pass on its word.
    pub fn check(&self) -> Result<(), String> {
        if self.task.is_finished() {
            return Err(format!(
                "the watch of {} stopped: nothing after that was observed",
                self.what
            ));
        }
        let coverage = self.coverage();
        if coverage.longest_outage > BLIND_LIMIT {
            return Err(format!(
                "the watch of {} failed for {:.0?} without a successful re-list (limit \
                 {BLIND_LIMIT:?}): it could not observe ({coverage})",
                self.what, coverage.longest_outage
            ));
        }
        Ok(())
    }
}

impl<O> Drop for ResumingWatch<O> {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Feeds the observer from kube's watcher until aborted. A re-list is buffered until it is
/// complete (InitDone) and then replaces the state at once, as a reflector's store does.
async fn follow<K, O>(
    api: Api<K>,
    config: watcher::Config,
    shared: Arc<Mutex<Shared<O>>>,
    listed: oneshot::Sender<()>,
) where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
    O: Observe<K>,
{
    let stream = watcher(api, config).default_backoff();
    futures::pin_mut!(stream);
    let mut listing: Vec<K> = Vec::new();
    let mut first_list = Some(listed);
    while let Some(event) = stream.next().await {
        match event {
            Ok(watcher::Event::Init) => listing.clear(),
            Ok(watcher::Event::InitApply(object)) => listing.push(object),
            Ok(watcher::Event::InitDone) => {
                let objects = std::mem::take(&mut listing);
                let versions: BTreeMap<String, String> =
                    objects.iter().map(|o| (key(o), version(o))).collect();
                let mut shared = lock(&shared);
                if first_list.is_none() {
                    shared.coverage.relists += 1;
                    shared.count_unobserved(&versions);
                }
                shared.known = versions;
                shared.observer.listed(&objects);
                shared.saw_an_event();
                drop(shared);
                if let Some(listed) = first_list.take() {
                    let _ = listed.send(());
                }
            }
            Ok(watcher::Event::Apply(object)) => {
                let mut shared = lock(&shared);
                shared.known.insert(key(&object), version(&object));
                shared.observer.applied(&object);
                shared.saw_an_event();
            }
            Ok(watcher::Event::Delete(object)) => {
                let mut shared = lock(&shared);
                shared.known.remove(&key(&object));
                shared.observer.deleted(&object);
                shared.saw_an_event();
            }
            Err(error) => {
                tracing::debug!(%error, "observer's watch failed; retrying after a backoff");
                lock(&shared).saw_an_error(Instant::now());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shared() -> Shared<()> {
        Shared {
            observer: (),
            coverage: Coverage::default(),
            outage: None,
            known: BTreeMap::new(),
        }
    }

    #[test]
    fn errors_without_an_event_between_them_make_one_outage() {
        let mut s = shared();
        let t0 = Instant::now();
        s.saw_an_error(t0);
        s.saw_an_error(t0 + Duration::from_secs(30));
        s.saw_an_error(t0 + Duration::from_secs(61));
        assert_eq!(s.coverage.errors, 3);
        assert_eq!(s.coverage.longest_outage, Duration::from_secs(61));
    }

    #[test]
    fn an_event_or_a_long_quiet_ends_an_outage() {
        let mut s = shared();
        let t0 = Instant::now();
        s.saw_an_error(t0);
        s.saw_an_event();
        s.saw_an_error(t0 + Duration::from_secs(50));
        // Quiet for longer than the backoff allows while failing: the watch worked between.
        s.saw_an_error(t0 + Duration::from_secs(50) + RETRY_CEILING * 2);
        assert_eq!(s.coverage.longest_outage, Duration::ZERO);
    }

    #[test]
    fn a_relist_counts_what_changed_appeared_or_vanished_unseen() {
        let mut s = shared();
        s.known = [("/a", "1"), ("/b", "2"), ("/c", "3")]
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .into();
        let listed = [("/a", "1"), ("/b", "7"), ("/d", "8")]
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .into();
        s.count_unobserved(&listed);
        assert_eq!(
            s.coverage.unobserved_changes, 3,
            "b changed, d appeared, c vanished"
        );
    }
}
