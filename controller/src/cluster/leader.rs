//! Leader election on a `coordination.k8s.io/v1` Lease, as client-go does it: the leader
//! renews the Lease every `retry_period`; it stops acting when it has not renewed for
//! `renew_deadline`; another replica takes the Lease when it has seen no renewal for the
//! Lease's duration (by its own clock, never comparing clocks of different machines), or at
//! once when the Lease was released. On SIGTERM the leader releases the Lease, so that the
//! hand-over is immediate.
//!
//! Leadership only decides who acts: the budget does not rest on it. A deposed leader that
//! has not noticed yet still cannot exceed the budget, because every slot grant is a
//! compare-and-swap on the slot ledger (invariant 2 of docs/src/design.md).

use crate::metrics::Metrics;
use k8s_openapi::{
    api::coordination::v1::{Lease, LeaseSpec},
    apimachinery::pkg::apis::meta::v1::MicroTime,
    jiff::Timestamp,
};
use kube::{
    Api, Client,
    api::{ObjectMeta, PostParams},
};
use observability::ApiErrorKind;
use std::time::Duration;
use thiserror::Error;
use tokio::{
    sync::{oneshot, watch},
    task::JoinHandle,
    time::{Instant, sleep_until, timeout},
};

/// The timing of the election (the `--leader-election-*` flags).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    /// How long a Lease that is not renewed keeps other replicas waiting.
    pub lease_duration: Duration,
    /// The leader stops acting when it could not renew for this long.
    pub renew_deadline: Duration,
    /// How often the leader renews and the others check.
    pub retry_period: Duration,
}

impl Timing {
    /// Why this timing cannot work, if it cannot.
    pub fn check(&self) -> Result<(), String> {
        if self.lease_duration < Duration::from_secs(1) {
            return Err("--leader-election-lease-duration must be at least 1s".into());
        }
        if self.renew_deadline >= self.lease_duration {
            return Err(format!(
                "--leader-election-renew-deadline ({:?}) must be shorter than \
                 --leader-election-lease-duration ({:?}): the leader must stop acting before \
                 another replica may take over",
                self.renew_deadline, self.lease_duration
            ));
        }
        if self.retry_period.is_zero() || self.retry_period >= self.renew_deadline {
            return Err(format!(
                "--leader-election-retry-period ({:?}) must be above zero and shorter than \
                 --leader-election-renew-deadline ({:?}), so that the leader renews in time",
                self.retry_period, self.renew_deadline
            ));
        }
        Ok(())
    }

    /// `leaseDurationSeconds`: whole seconds, rounded up.
    fn lease_seconds(&self) -> i32 {
        let d = self.lease_duration;
        let secs = d.as_secs() + u64::from(d.subsec_nanos() > 0);
        i32::try_from(secs).unwrap_or(i32::MAX)
    }
}

/// The Lease as far as the election is concerned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// `None` when nobody holds it (never held, or released).
    pub holder: Option<String>,
    pub duration: Duration,
    /// `renewTime` as written: a new value means the holder is alive.
    pub renewed: Option<String>,
}

impl Record {
    pub fn of(lease: &Lease) -> Self {
        let spec = lease.spec.clone().unwrap_or_default();
        let seconds = spec.lease_duration_seconds.unwrap_or(0).max(0);
        Self {
            holder: spec.holder_identity.filter(|h| !h.is_empty()),
            duration: Duration::from_secs(u64::try_from(seconds).unwrap_or(0)),
            renewed: spec.renew_time.map(|t| t.0.to_string()),
        }
    }
}

/// The last version of the record this replica saw, and when it first saw it (by its own
/// clock: the holder's clock may differ).
#[derive(Debug, Clone, Default)]
pub struct Observer {
    last: Option<(Record, Instant)>,
}

impl Observer {
    /// Records `record` as seen `now`; returns since when it has been unchanged.
    pub fn observe(&mut self, record: &Record, now: Instant) -> Instant {
        match &self.last {
            Some((seen, since)) if seen == record => *since,
            _ => {
                self.last = Some((record.clone(), now));
                now
            }
        }
    }
}

/// What to do about the Lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// We hold it: renew.
    Renew,
    /// Nobody holds it, or its holder stopped renewing: take it.
    Acquire,
    /// Another replica holds it; it expires at `expires` unless renewed.
    Follow { holder: String, expires: Instant },
}

/// Pure: the verdict on a record unchanged since `since`, for replica `me`, at `now`.
pub fn judge(record: &Record, me: &str, since: Instant, now: Instant) -> Verdict {
    match &record.holder {
        None => Verdict::Acquire,
        Some(holder) if holder == me => Verdict::Renew,
        Some(_) if now >= since + record.duration => Verdict::Acquire,
        Some(holder) => Verdict::Follow {
            holder: holder.clone(),
            expires: since + record.duration,
        },
    }
}

/// Whether this replica leads, as the rest of the controller sees it.
#[derive(Debug, Clone)]
pub struct Leadership {
    /// `Some(until)` while leading: acting is safe until then unless renewed.
    state: watch::Receiver<Option<Instant>>,
}

impl Leadership {
    /// Leader election off: this replica always leads.
    pub fn always() -> Self {
        let forever = Instant::now() + Duration::from_secs(100 * 365 * 24 * 3600);
        let (_, state) = watch::channel(Some(forever));
        Self { state }
    }

    pub fn is_leading(&self) -> bool {
        matches!(*self.state.borrow(), Some(until) if Instant::now() < until)
    }

    /// Returns once this replica leads.
    pub async fn acquired(&mut self) {
        loop {
            if self.is_leading() {
                return;
            }
            if self.state.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    }

    /// Returns once this replica no longer leads: it stepped down, was deposed, or its last
    /// renewal is older than the renew deadline.
    pub async fn lost(&mut self) {
        loop {
            let until = *self.state.borrow_and_update();
            let Some(until) = until else { return };
            if Instant::now() >= until {
                return;
            }
            tokio::select! {
                changed = self.state.changed() => {
                    if changed.is_err() {
                        sleep_until(until).await;
                        return;
                    }
                }
                () = sleep_until(until) => return,
            }
        }
    }
}

/// The election could not go on at all.
#[derive(Debug, Error)]
pub enum ElectionError {
    #[error(
        "cannot create the leader Lease {namespace}/{name}: {source}; does namespace \
         {namespace:?} exist (--namespace, env POD_NAMESPACE)?"
    )]
    NoNamespace {
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("the leader election stopped: {0}")]
    Ended(String),
}

/// The running election: stop it (releasing the Lease when held), or see it fail.
#[derive(Debug)]
pub struct Election {
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<Result<(), ElectionError>>,
    ended: bool,
}

impl Election {
    /// Resolves only if the election failed for good (it ends by itself only so).
    pub async fn failed(&mut self) -> ElectionError {
        if self.ended {
            return std::future::pending().await;
        }
        let outcome = (&mut self.task).await;
        self.ended = true;
        match outcome {
            Ok(Err(error)) => error,
            Ok(Ok(())) => ElectionError::Ended("stopped".into()),
            Err(join) => ElectionError::Ended(join.to_string()),
        }
    }

    /// Steps down: stops acting at once and releases the Lease when held (at most `grace`).
    pub async fn stop(mut self, grace: Duration) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if !self.ended && timeout(grace, &mut self.task).await.is_err() {
            self.task.abort();
        }
    }
}

/// One replica's side of the election.
#[derive(Debug)]
pub struct Elector {
    api: Api<Lease>,
    namespace: String,
    name: String,
    identity: String,
    timing: Timing,
    metrics: Metrics,
    observer: Observer,
    /// The Lease as we last wrote it while leading (its resourceVersion saves a read).
    ours: Option<Lease>,
    state: watch::Sender<Option<Instant>>,
}

/// The outcome of one attempt.
enum Attempt {
    Leading { until: Instant },
    Following { check_at: Instant },
}

impl Elector {
    pub fn new(
        client: Client,
        namespace: &str,
        name: &str,
        identity: &str,
        timing: Timing,
        metrics: Metrics,
    ) -> Self {
        Self {
            api: Api::namespaced(client, namespace),
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            identity: identity.to_owned(),
            timing,
            metrics,
            observer: Observer::default(),
            ours: None,
            state: watch::channel(None).0,
        }
    }

    /// Runs the election in the background.
    pub fn spawn(self) -> (Leadership, Election) {
        let leadership = Leadership {
            state: self.state.subscribe(),
        };
        let (stop, stopped) = oneshot::channel();
        let task = tokio::spawn(self.run(stopped));
        let election = Election {
            stop: Some(stop),
            task,
            ended: false,
        };
        (leadership, election)
    }

    fn leading(&self) -> bool {
        matches!(*self.state.borrow(), Some(until) if Instant::now() < until)
    }

    async fn run(mut self, mut stop: oneshot::Receiver<()>) -> Result<(), ElectionError> {
        tracing::info!(identity = %self.identity, lease = %self.name, "leader election: started");
        let mut next = Instant::now();
        loop {
            tokio::select! {
                _ = &mut stop => break,
                () = sleep_until(next) => {}
            }
            let started = Instant::now();
            let attempt = tokio::select! {
                _ = &mut stop => break,
                attempt = timeout(self.attempt_timeout(), self.attempt(started)) => attempt,
            };
            next = match attempt {
                Ok(Ok(Attempt::Leading { until })) => {
                    if !self.leading() {
                        tracing::info!(identity = %self.identity, "leader election: this replica leads");
                    }
                    self.state.send_replace(Some(until));
                    started + self.timing.retry_period
                }
                Ok(Ok(Attempt::Following { check_at })) => {
                    if self.leading() {
                        tracing::warn!(identity = %self.identity, "leader election: another replica holds the Lease; stepping down");
                    }
                    self.step_down();
                    check_at
                }
                Ok(Err(failure)) => {
                    let kind = ApiErrorKind::of(&failure);
                    self.metrics.api_error("lease", kind);
                    if kind == ApiErrorKind::NotFound {
                        self.step_down();
                        return Err(ElectionError::NoNamespace {
                            namespace: self.namespace.clone(),
                            name: self.name.clone(),
                            source: failure,
                        });
                    }
                    if kind != ApiErrorKind::Conflict {
                        tracing::warn!(error = %failure, "leader election: cannot read or write the Lease; retrying");
                    }
                    self.after_failure(started)
                }
                Err(_) => {
                    self.metrics.api_error("lease", ApiErrorKind::Timeout);
                    tracing::warn!(
                        "leader election: the API server did not answer in time; retrying"
                    );
                    self.after_failure(started)
                }
            };
        }
        self.release().await;
        Ok(())
    }

    /// How long one read or write of the Lease may take: the renew deadline, as client-go
    /// allows. An API server that answers in seconds (more than the retry period, 2 s by
    /// default) must still let a replica lead; abandoning each attempt after the retry period
    /// meant that none ever did. Acting stays bounded all the same: the leader acts only until
    /// its last successful attempt's start plus the renew deadline, whatever is in flight.
    fn attempt_timeout(&self) -> Duration {
        self.timing.renew_deadline
    }

    /// A failed attempt: still leading until the renew deadline passes.
    fn after_failure(&mut self, started: Instant) -> Instant {
        self.ours = None;
        if !self.leading() && self.state.borrow().is_some() {
            tracing::warn!(identity = %self.identity, "leader election: could not renew the Lease in time; stopped acting");
            self.step_down();
        }
        started + self.timing.retry_period
    }

    fn step_down(&mut self) {
        self.ours = None;
        self.state.send_replace(None);
    }

    async fn attempt(&mut self, started: Instant) -> Result<Attempt, kube::Error> {
        let leading_until = started + self.timing.renew_deadline;
        // Leading: renew what we wrote last; a conflict means someone else wrote since.
        if self.leading()
            && let Some(ours) = self.ours.take()
        {
            match self.write(self.renewed(ours)).await {
                Ok(()) => {
                    return Ok(Attempt::Leading {
                        until: leading_until,
                    });
                }
                Err(e) if ApiErrorKind::of(&e) == ApiErrorKind::Conflict => {}
                Err(e) => return Err(e),
            }
        }
        let Some(lease) = self.api.get_opt(&self.name).await? else {
            let created = self
                .api
                .create(&PostParams::default(), &self.new_lease())
                .await;
            return match created {
                Ok(lease) => {
                    self.ours = Some(lease);
                    Ok(Attempt::Leading {
                        until: leading_until,
                    })
                }
                Err(e) if ApiErrorKind::of(&e) == ApiErrorKind::AlreadyExists => {
                    Ok(Attempt::Following {
                        check_at: Instant::now(),
                    })
                }
                Err(e) => Err(e),
            };
        };
        let record = Record::of(&lease);
        let now = Instant::now();
        let since = self.observer.observe(&record, now);
        let lease = match judge(&record, &self.identity, since, now) {
            Verdict::Follow { expires, .. } => {
                let check_at = (now + self.timing.retry_period).min(expires);
                return Ok(Attempt::Following { check_at });
            }
            Verdict::Renew => self.renewed(lease),
            Verdict::Acquire => self.acquired(lease),
        };
        match self.write(lease).await {
            Ok(()) => Ok(Attempt::Leading {
                until: leading_until,
            }),
            // Another replica took it first.
            Err(e) if ApiErrorKind::of(&e) == ApiErrorKind::Conflict => Ok(Attempt::Following {
                check_at: Instant::now() + self.timing.retry_period,
            }),
            Err(e) => Err(e),
        }
    }

    /// Replaces the Lease (its resourceVersion is the precondition).
    async fn write(&mut self, lease: Lease) -> Result<(), kube::Error> {
        let written = self
            .api
            .replace(&self.name, &PostParams::default(), &lease)
            .await?;
        self.ours = Some(written);
        Ok(())
    }

    fn new_lease(&self) -> Lease {
        let now = MicroTime(Timestamp::now());
        Lease {
            metadata: ObjectMeta {
                name: Some(self.name.clone()),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(self.identity.clone()),
                lease_duration_seconds: Some(self.timing.lease_seconds()),
                acquire_time: Some(now.clone()),
                renew_time: Some(now),
                lease_transitions: Some(0),
                ..LeaseSpec::default()
            }),
        }
    }

    fn renewed(&self, mut lease: Lease) -> Lease {
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        spec.renew_time = Some(MicroTime(Timestamp::now()));
        spec.lease_duration_seconds = Some(self.timing.lease_seconds());
        lease
    }

    fn acquired(&self, mut lease: Lease) -> Lease {
        let now = MicroTime(Timestamp::now());
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        spec.holder_identity = Some(self.identity.clone());
        spec.lease_duration_seconds = Some(self.timing.lease_seconds());
        spec.acquire_time = Some(now.clone());
        spec.renew_time = Some(now);
        spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0).saturating_add(1));
        lease
    }

    /// Gives the Lease up if we hold it, so that another replica takes over at once (as
    /// client-go's ReleaseOnCancel: no holder, a duration of one second).
    async fn release(&mut self) {
        let was_leading = self.state.borrow().is_some();
        self.step_down();
        if !was_leading {
            return;
        }
        for _ in 0..2 {
            let lease = match self.api.get_opt(&self.name).await {
                Ok(Some(lease)) => lease,
                Ok(None) => return,
                Err(error) => {
                    self.metrics.api_error("lease", ApiErrorKind::of(&error));
                    tracing::warn!(%error, "leader election: cannot read the Lease to release it");
                    return;
                }
            };
            if Record::of(&lease).holder.as_deref() != Some(self.identity.as_str()) {
                return;
            }
            let mut released = lease;
            let spec = released.spec.get_or_insert_with(LeaseSpec::default);
            spec.holder_identity = None;
            spec.lease_duration_seconds = Some(1);
            spec.renew_time = Some(MicroTime(Timestamp::now()));
            match self
                .api
                .replace(&self.name, &PostParams::default(), &released)
                .await
            {
                Ok(_) => {
                    tracing::info!(identity = %self.identity, "leader election: released the Lease");
                    return;
                }
                Err(error) => {
                    self.metrics.api_error("lease", ApiErrorKind::of(&error));
                    tracing::warn!(%error, "leader election: cannot release the Lease");
                }
            }
        }
    }
}

/// This replica's name in the Lease: `POD_NAME` in a pod, else `<hostname>_<pid>`.
pub fn default_identity() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "reboot-controller".to_owned());
    format!("{host}_{}", std::process::id())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(holder: Option<&str>, renewed: &str) -> Record {
        Record {
            holder: holder.map(str::to_owned),
            duration: Duration::from_secs(15),
            renewed: Some(renewed.to_owned()),
        }
    }

    #[test]
    fn free_or_released_leases_are_taken_at_once() {
        let now = Instant::now();
        assert_eq!(judge(&record(None, "t1"), "me", now, now), Verdict::Acquire);
    }

    #[test]
    fn our_own_lease_is_renewed() {
        let now = Instant::now();
        assert_eq!(
            judge(&record(Some("me"), "t1"), "me", now, now),
            Verdict::Renew
        );
    }

    #[test]
    fn another_holder_is_followed_until_it_stops_renewing_for_the_duration() {
        let start = Instant::now();
        let mut observer = Observer::default();
        let held = record(Some("other"), "t1");
        let since = observer.observe(&held, start);
        let expires = start + Duration::from_secs(15);
        assert_eq!(
            judge(&held, "me", since, start + Duration::from_secs(14)),
            Verdict::Follow {
                holder: "other".into(),
                expires
            }
        );
        // A renewal seen at 10 s restarts the wait from then.
        let renewed = record(Some("other"), "t2");
        let at = start + Duration::from_secs(10);
        let since = observer.observe(&renewed, at);
        assert_eq!(since, at);
        assert!(matches!(
            judge(&renewed, "me", since, start + Duration::from_secs(20)),
            Verdict::Follow { .. }
        ));
        // Unchanged for the whole duration: expired.
        let later = start + Duration::from_secs(25);
        let since = observer.observe(&renewed, later);
        assert_eq!(since, at, "an unchanged record keeps its first sighting");
        assert_eq!(judge(&renewed, "me", since, later), Verdict::Acquire);
    }

    #[test]
    fn timings_that_cannot_work_are_refused() {
        let good = Timing {
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        };
        assert!(good.check().is_ok());
        let bad = [
            Timing {
                renew_deadline: Duration::from_secs(15),
                ..good
            },
            Timing {
                retry_period: Duration::from_secs(10),
                ..good
            },
            Timing {
                retry_period: Duration::ZERO,
                ..good
            },
            Timing {
                lease_duration: Duration::from_millis(500),
                renew_deadline: Duration::from_millis(400),
                retry_period: Duration::from_millis(100),
            },
        ];
        for timing in bad {
            assert!(timing.check().is_err(), "{timing:?}");
        }
        assert_eq!(
            Timing {
                lease_duration: Duration::from_millis(4500),
                ..good
            }
            .lease_seconds(),
            5
        );
    }

    #[tokio::test]
    async fn always_leads_without_election() {
        let mut leadership = Leadership::always();
        assert!(leadership.is_leading());
        tokio::time::timeout(Duration::from_millis(100), leadership.acquired())
            .await
            .unwrap();
        assert!(
            tokio::time::timeout(Duration::from_millis(100), leadership.lost())
                .await
                .is_err()
        );
    }

    #[tokio::test]
    async fn leadership_is_lost_when_its_deadline_passes_unrenewed() {
        let (tx, rx) = watch::channel(Some(Instant::now() + Duration::from_millis(100)));
        let mut leadership = Leadership { state: rx };
        assert!(leadership.is_leading());
        tokio::time::timeout(Duration::from_secs(1), leadership.lost())
            .await
            .unwrap();
        assert!(!leadership.is_leading());
        tx.send_replace(None);
        assert!(!leadership.is_leading());
    }
}
