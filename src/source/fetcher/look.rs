//! A lookup's side of the fetcher: which requests are due, and starting the one job
//! that fetches their remote (on a lookup, a refresh token or a push).

use std::time::{Duration, Instant};

use tracing::Instrument;

use super::{
    Asked, Fetcher, MAX_WANTED_TOKENS, PUSH_SPACING, RemoteEntry, SWEEP_EVERY, SnapshotEntry,
    State, lock,
};
use crate::source::fetcher::job::{InFlight, Job};
use crate::source::{FetchError, Location, SourceRequest, SourceState};

impl Fetcher {
    /// [`Sources::pushed`](crate::source::Sources::pushed): marks every remote of `repository` pushed and starts the
    /// fetch of each that is idle and past the push spacing (the others start at their
    /// next lookup, which the receivers' resync bound brings within seconds).
    pub(super) fn push(&self, repository: &str) -> usize {
        // (a request of the remote, its interval, how long until the spacing has passed;
        // None when a timer for the remote is already waiting)
        let wanted: Vec<(SourceRequest, Duration, Option<Duration>)> = {
            let mut state = lock(&self.inner.state);
            state
                .remotes
                .values_mut()
                .filter_map(|remote| {
                    let asked = remote.requests.values().next()?;
                    let url = asked.request.location.url();
                    if crate::source::repository::normalise(url).as_deref() != Some(repository) {
                        return None;
                    }
                    remote.pushed = true;
                    let wait = remote.started.map_or(Duration::ZERO, |started| {
                        PUSH_SPACING.saturating_sub(started.elapsed())
                    });
                    let timer = if remote.push_timer {
                        None
                    } else {
                        remote.push_timer = !wait.is_zero();
                        Some(wait)
                    };
                    Some((asked.request.clone(), asked.interval, timer))
                })
                .collect()
        };
        for (request, interval, wait) in &wanted {
            match wait {
                Some(wait) if wait.is_zero() => {
                    let _ = self.look(request, *interval, None, None);
                }
                // Within the spacing of the last fetch: one timer starts it when the
                // spacing has passed (or the job running then ends and a lookup does).
                Some(wait) => {
                    let (fetcher, request, interval, wait) =
                        (self.clone(), request.clone(), *interval, *wait);
                    self.inner.runtime.spawn(async move {
                        tokio::time::sleep(wait).await;
                        if let Some(remote) = lock(&fetcher.inner.state)
                            .remotes
                            .get_mut(&request.remote_key())
                        {
                            remote.push_timer = false;
                        }
                        let _ = fetcher.look(&request, interval, None, None);
                    });
                }
                None => {}
            }
        }
        wanted.len()
    }

    /// `lookup_holding`, and with `refresh` a "fetch now" token: the remote is fetched
    /// at once unless a job is running, in which case the next job covers the token.
    pub(super) fn look(
        &self,
        request: &SourceRequest,
        interval: Duration,
        running: Option<&str>,
        refresh: Option<&str>,
    ) -> SourceState {
        if let Some(refused) = refused(request) {
            return refused;
        }
        let key = request.key();
        let remote_key = request.remote_key();
        let now = Instant::now();
        let mut state = lock(&self.inner.state);
        if state
            .last_sweep
            .is_none_or(|last| now.saturating_duration_since(last) >= SWEEP_EVERY)
        {
            state.sweep(now, None);
        }
        let budget = self.inner.settings.snapshot_budget_bytes;
        let (known, let_go, delivered_now) = state.looked_up(&key, now, running, budget);
        self.inner.metrics.snapshot_evictions.inc_by(let_go);
        if delivered_now {
            // A delivered snapshot may be let go: a job waiting for room may fit now.
            self.inner.room_freed.notify_waiters();
        }
        let remote = state.remotes.entry(remote_key.clone()).or_default();
        remote.asked(key, request, now, interval, refresh);
        // Before any job this call starts, so that job counts as fetched after it.
        remote.heard_running(running, now);
        let stale = remote.is_stale(interval);
        let unknown = known.as_ref().is_none_or(SnapshotEntry::needs_reading);
        if !remote.in_flight && (stale || unknown) {
            self.start_job(&mut state, &remote_key, request, interval, stale);
        }
        // Pending: a running job may change this request's answer ([`SnapshotEntry::awaits`]:
        // not one that only reads another parent's new path, nor one that has already
        // stored this request's result; reporting those would make two identical calls
        // answer differently). Keys start with their remote's key, so only this request's
        // remote can hold it.
        let pending = state.remotes.get(&remote_key).is_some_and(|r| {
            SnapshotEntry::awaits(known.as_ref(), r) && r.requests.contains_key(&request.key())
        });
        let after_running =
            super::after_running(state.remotes.get(&remote_key), known.as_ref(), running);
        let known = known.unwrap_or_default();
        SourceState {
            snapshot: known.snapshot,
            error: known.error,
            pending,
            resync_within: self.inner.settings.push_resync_seconds,
            after_running,
        }
    }

    /// What the engine holds for `request`, without asking for anything: `pending` when a
    /// job that may change the answer runs, or when the next ask would start one (the
    /// remote is due, the request is new, or its snapshot was let go and the parent does
    /// not run it), so the parent asks again soon.
    pub(super) fn read(
        &self,
        request: &SourceRequest,
        interval: Duration,
        running: Option<&str>,
    ) -> SourceState {
        if let Some(refused) = refused(request) {
            return refused;
        }
        let key = request.key();
        let state = lock(&self.inner.state);
        let known = state.snapshots.get(&key);
        let needs_reading = known.is_none_or(|entry| {
            entry.snapshot.is_none() && entry.let_go.is_some() && entry.let_go.as_deref() != running
        });
        let remote = state.remotes.get(&request.remote_key());
        // The same verdict `look` reaches once it has started whatever job is due.
        let pending = match remote {
            None => true,
            Some(remote) if remote.in_flight => SnapshotEntry::awaits(known, remote),
            Some(remote) => remote.is_stale(interval) || needs_reading,
        };
        SourceState {
            snapshot: known.and_then(|k| k.snapshot.clone()),
            error: known.and_then(|k| k.error.clone()),
            pending,
            resync_within: self.inner.settings.push_resync_seconds,
            after_running: super::after_running(remote, known, running),
        }
    }

    /// Marks the remote in flight and spawns a job for every request it has: over the
    /// network when `stale` (or nothing was fetched yet), else only reading new paths of
    /// the commit already here.
    pub(super) fn start_job(
        &self,
        state: &mut State,
        remote_key: &str,
        request: &SourceRequest,
        interval: Duration,
        stale: bool,
    ) {
        let Some(remote) = state.remotes.get_mut(remote_key) else {
            return;
        };
        let (use_network, commit_from) = remote.job_starts(stale);
        let requests: Vec<SourceRequest> = remote
            .requests
            .values()
            .map(|a| a.request.clone())
            .collect();
        let shortest = remote
            .requests
            .values()
            .map(|asked| asked.interval)
            .min()
            .unwrap_or(interval);
        let resolved = remote.resolved.clone();
        let current = requests
            .iter()
            .filter_map(|r| {
                let entry = state.snapshots.get(&r.key())?;
                Some((r.key(), entry.current_revision()?.to_owned()))
            })
            .collect();
        let job = Job {
            inner: self.inner.clone(),
            guard: InFlight {
                inner: self.inner.clone(),
                remote_key: remote_key.to_owned(),
                armed: std::sync::atomic::AtomicBool::new(true),
            },
            interval: shortest,
            remote_key: remote_key.to_owned(),
            requests,
            use_network,
            resolved,
            commit_from,
            current,
        };
        self.inner
            .runtime
            .spawn(job.run().instrument(job_span(request)));
    }
}

/// The state of a request whose credentials may not be used for its URL: the refusal,
/// and nothing else (no job is ever scheduled for it).
fn refused(request: &SourceRequest) -> Option<SourceState> {
    binding_refusal(request).map(|refusal| SourceState {
        error: Some(refusal),
        ..SourceState::default()
    })
}

/// Why the request's credentials may not be used for its URL: credentials the Secret's
/// owner did not allow for a URL are never used, so no job is scheduled and no request
/// is made at all.
pub(super) fn binding_refusal(request: &SourceRequest) -> Option<FetchError> {
    let url = request.location.url();
    request
        .credentials
        .as_ref()
        .and_then(|c| c.check_url(url).err())
        .or_else(|| request.tls.as_ref().and_then(|t| t.check_url(url).err()))
}

impl State {
    /// `key`'s entry as a lookup at `now` sees it ([`SnapshotEntry::looked_up`]), weighed
    /// with what the last call made of its snapshot, and the budget kept with that weight
    /// (this entry was asked just now, so it goes last; the call has its copy anyway).
    /// Also how many snapshots were let go, and whether this delivered the snapshot.
    fn looked_up(
        &mut self,
        key: &str,
        now: Instant,
        running: Option<&str>,
        budget: u64,
    ) -> (Option<SnapshotEntry>, u64, bool) {
        self.reweigh(key);
        let mut delivered_now = false;
        let known = self.snapshots.get_mut(key).map(|entry| {
            delivered_now = entry.snapshot.is_some() && !entry.delivered;
            entry.looked_up(now, running)
        });
        let let_go = if self.snapshot_bytes > budget {
            self.fit(budget)
        } else {
            0
        };
        (known, let_go, delivered_now)
    }
}

impl SnapshotEntry {
    /// The entry as a lookup at `now` sees it, marking it used, delivered, and held while
    /// the parent still runs the snapshot it let go (`running`).
    fn looked_up(&mut self, now: Instant, running: Option<&str>) -> SnapshotEntry {
        self.last_used = Some(now);
        self.held = self.let_go.is_some() && self.let_go.as_deref() == running;
        self.delivered |= self.snapshot.is_some();
        self.clone()
    }
}

impl RemoteEntry {
    /// Marks a job started (over the network when `stale` or nothing was fetched yet);
    /// returns whether it asks the remote, and when the fetch whose commit it will read
    /// started.
    fn job_starts(&mut self, stale: bool) -> (bool, Option<Instant>) {
        self.in_flight = true;
        if stale {
            self.refresh.job_started();
            self.pushed = false;
        }
        // A fresh remote with a new path only needs reading, not another fetch.
        let use_network = stale || self.resolved.is_none();
        if use_network {
            self.started = Some(Instant::now());
        }
        self.in_flight_network = use_network;
        let commit_from = if use_network {
            self.started
        } else {
            self.resolved_from
        };
        (use_network, commit_from)
    }

    /// Whether the remote is due a fetch: its interval has passed since the last one
    /// started, or a "fetch now" or a push asks and the push spacing has passed ("fetch
    /// now" and pushes are spaced like each other: however often a CR's annotation is
    /// edited or a forge calls, a remote is fetched at most once per spacing for them).
    fn is_stale(&self, interval: Duration) -> bool {
        let since_start = |least: Duration| {
            self.started
                .is_none_or(|started| started.elapsed() >= least)
        };
        ((!self.refresh.wanted.is_empty() || self.pushed) && since_start(PUSH_SPACING))
            || since_start(interval)
    }

    /// Records that a parent asked for `request` now (and for a fetch now, with `refresh`).
    fn asked(
        &mut self,
        key: String,
        request: &SourceRequest,
        now: Instant,
        interval: Duration,
        refresh: Option<&str>,
    ) {
        let asked = Asked {
            request: request.clone(),
            last: now,
            interval,
        };
        self.requests.insert(key, asked);
        if let Some(token) = refresh
            && self.refresh.wanted.len() < MAX_WANTED_TOKENS
        {
            self.refresh.wanted.insert(token.to_owned());
        }
    }
}

/// The span a job runs in: everything it logs (failures, the fetch summary) carries its
/// remote.
fn job_span(request: &SourceRequest) -> tracing::Span {
    let (url, reference) = match &request.location {
        Location::Git { url, reference, .. } => (url.as_str(), reference.as_deref()),
        Location::Http { url } => (url.as_str(), None),
    };
    tracing::info_span!(
        "fetch",
        remote = %crate::telemetry::Escaped(&crate::telemetry::bounded(&crate::source::redact_url(url))),
        r#ref = reference.unwrap_or(""),
        credentials = request.credentials.is_some() || request.tls.is_some(),
    )
}
