//! What a lookup reads of the engine's state, and the rules the writer applies when a
//! parent asks: which requests are due, delivered or held.

use crate::source::Revision;
use std::time::{Duration, Instant};

use super::{
    Asked, Fetcher, MAX_WANTED_TOKENS, PUSH_SPACING, RemoteEntry, SnapshotEntry, State, read,
};
use crate::source::{FetchError, SourceKey, SourceRequest, SourceState};

impl Fetcher {
    /// What the engine holds for `request`, without asking for anything: `pending` when a
    /// job that may change the answer runs, or when the next ask would start one (the
    /// remote is due, the request is new, or its snapshot was let go and the parent does
    /// not run it), so the parent asks again soon.
    pub(super) fn read(
        &self,
        request: &SourceRequest,
        interval: Duration,
        running: Option<&Revision>,
    ) -> SourceState {
        if let Some(refused) = refused(request) {
            return refused;
        }
        let key = request.key();
        let state = read(&self.inner.state);
        let known = state.snapshots.get(&key);
        let needs_reading = known.is_none_or(|entry| {
            entry.snapshot.is_none() && entry.let_go.is_some() && entry.let_go.as_ref() != running
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
    /// Returns whether the request has nothing to answer from (never read, or let go
    /// and not held), and how many snapshots were let go.
    pub(super) fn looked_up(
        &mut self,
        key: &SourceKey,
        now: Instant,
        running: Option<&Revision>,
        budget: u64,
    ) -> (bool, u64) {
        self.reweigh(key);
        let needs_reading = self
            .snapshots
            .get_mut(key)
            .is_none_or(|entry| entry.looked_up(now, running).needs_reading());
        let let_go = if self.snapshot_bytes > budget {
            self.fit(budget)
        } else {
            0
        };
        (needs_reading, let_go)
    }
}

impl SnapshotEntry {
    /// The entry as a lookup at `now` sees it, marking it used, delivered, and held while
    /// the parent still runs the snapshot it let go (`running`).
    fn looked_up(&mut self, now: Instant, running: Option<&Revision>) -> &SnapshotEntry {
        self.last_used = Some(now);
        self.held = self.let_go.is_some() && self.let_go.as_ref() == running;
        self.delivered |= self.snapshot.is_some();
        self
    }
}

impl RemoteEntry {
    /// Marks a job started (over the network when `stale` or nothing was fetched yet);
    /// returns whether it asks the remote, and when the fetch whose commit it will read
    /// started.
    pub(super) fn job_starts(&mut self, stale: bool) -> (bool, Option<Instant>) {
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
    pub(super) fn is_stale(&self, interval: Duration) -> bool {
        let since_start = |least: Duration| {
            self.started
                .is_none_or(|started| started.elapsed() >= least)
        };
        ((!self.refresh.wanted.is_empty() || self.pushed) && since_start(PUSH_SPACING))
            || since_start(interval)
    }

    /// One of its requests, if any (they all name the same remote).
    pub(super) fn any_request(&self) -> Option<&Asked> {
        self.requests.values().next()
    }

    /// Whether the remote is a copy of `repository` (as a push names it).
    pub(super) fn is_of(&self, repository: &str) -> bool {
        self.any_request().is_some_and(|asked| {
            crate::source::repository::normalise(asked.request.location.url()).as_deref()
                == Some(repository)
        })
    }

    /// Records that a parent asked for `request` now (and for a fetch now, with `refresh`).
    pub(super) fn asked(
        &mut self,
        key: SourceKey,
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
