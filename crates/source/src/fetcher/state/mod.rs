//! The engine's state, owned by the writer ([`super::writer`]): one entry per remote
//! (where its one job stands: [`remote::Phase`]) and one per request's snapshot
//! ([`snapshot::Copy`]), the budget's rooms and the disk cache. Every change is a
//! `&mut self` method, one per [`super::command::Command`], given the time; readers get
//! `&State` through the store and answer from [`State::answer`]. Nothing here does I/O
//! or reads the clock: what must happen in the world (a job to start, a timer, an
//! eviction) comes back as [`Effects`] for the writer to carry out, so the whole machine
//! can be driven by a test.

mod disk;
mod remote;
mod rooms;
mod snapshot;
#[cfg(test)]
mod tests;
mod turns;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::worker::Fetched;
use crate::{FetchError, Refresh, RemoteKey, Revision, SourceKey, SourceRequest, SourceState, git};

pub(super) use disk::{Eviction, RepoWanted};
pub(super) use remote::PUSH_SPACING;
use remote::{FORGET_AFTER_INTERVALS, Phase, RemoteEntry};
pub(super) use rooms::{RoomId, RoomWanted};
use snapshot::SnapshotEntry;
pub(super) use turns::{Pool, TurnWanted};

/// How often a lookup's ask sweeps for forgotten requests.
const SWEEP_EVERY: Duration = Duration::from_secs(30);

/// A job's name, in the order jobs started.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(in crate::fetcher) struct JobId(pub(in crate::fetcher) u64);

/// What the state needs of the engine's settings.
#[derive(Debug, Clone, Copy)]
pub(super) struct Limits {
    pub(super) snapshot_budget_bytes: u64,
    pub(super) cache_max_bytes: u64,
    /// A download's most bytes (a reservation on disk is that and its index).
    pub(super) download_bytes: u64,
    pub(super) push_resync_seconds: Option<u64>,
    /// Git jobs at once, and for any one namespace.
    pub(super) workers: usize,
    pub(super) workers_per_namespace: usize,
}

/// HTTP fetches at once, and for one namespace: each holds a socket and at most one
/// file's bytes, so they are bounded apart from the git workers.
const HTTP_FETCHES: usize = 32;
const HTTP_FETCHES_PER_NAMESPACE: usize = 8;

/// A job to start: fetch `remote_key` (over the network when `use_network`, else read
/// the commit `resolved`) for `requests`.
pub(super) struct JobPlan {
    pub(super) job: JobId,
    pub(super) remote_key: RemoteKey,
    pub(super) requests: Vec<SourceRequest>,
    pub(super) use_network: bool,
    pub(super) resolved: Option<git::Resolved>,
    /// When the network fetch whose commit the job reads started.
    pub(super) commit_from: Option<Instant>,
    /// Revisions of the snapshots the requests already have.
    pub(super) current: HashMap<SourceKey, Revision>,
    /// The shortest poll period of the remote's requests.
    pub(super) interval: Duration,
}

/// What the writer must do after a change.
#[derive(Default)]
pub(super) struct Effects {
    pub(super) jobs: Vec<JobPlan>,
    /// Say [`super::command::Command::PushDue`] for the remote after the wait.
    pub(super) push_timers: Vec<(RemoteKey, Duration)>,
    pub(super) evictions: Vec<Eviction>,
    /// Snapshots let go under the budget.
    pub(super) let_go: u64,
}

/// What a parent asked for: `request`, polled at `interval`, running `running`; with
/// `fetch_now`, a "fetch now" token.
pub(in crate::fetcher) struct Wanted {
    pub(in crate::fetcher) request: SourceRequest,
    pub(in crate::fetcher) interval: Duration,
    pub(in crate::fetcher) running: Option<Revision>,
    pub(in crate::fetcher) fetch_now: Option<String>,
    pub(in crate::fetcher) parent: Option<Arc<str>>,
}

/// A job that ended: `resolved` is the commit it fetched or read, if any; `network`
/// whether it asked the remote (in a fetch started at `commit_from`), and
/// `went_to_network` whether it got that far.
pub(in crate::fetcher) struct Ended {
    pub(in crate::fetcher) remote_key: RemoteKey,
    pub(in crate::fetcher) job: JobId,
    pub(in crate::fetcher) resolved: Option<git::Resolved>,
    pub(in crate::fetcher) network: bool,
    pub(in crate::fetcher) commit_from: Option<Instant>,
    pub(in crate::fetcher) went_to_network: bool,
}

pub(super) struct State {
    settings: Limits,
    remotes: HashMap<RemoteKey, RemoteEntry>,
    snapshots: HashMap<SourceKey, SnapshotEntry>,
    last_sweep: Option<Instant>,
    /// Bytes of every snapshot held.
    snapshot_bytes: u64,
    rooms: rooms::Rooms,
    /// Turns at the git workers and the HTTP fetches, fair between namespaces.
    git_turns: turns::Turns,
    http_turns: turns::Turns,
    disk: disk::DiskCache,
    next_job: u64,
    /// Jobs that went to the network so far (git ref listings and HTTP GETs).
    network_fetches: u64,
}

/// Where a request stands for a parent asking now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    /// Nothing runs or is due that could change the answer.
    Settled,
    /// A running job may still change the answer.
    Awaiting,
    /// The next ask starts a job (over the network when `stale`).
    Due { stale: bool },
}

impl State {
    /// An empty engine whose disk cache holds `cache_bytes` already.
    pub(super) fn new(settings: Limits, cache_bytes: u64) -> State {
        State {
            settings,
            remotes: HashMap::new(),
            snapshots: HashMap::new(),
            last_sweep: None,
            snapshot_bytes: 0,
            rooms: rooms::Rooms::default(),
            git_turns: turns::Turns::new(settings.workers, settings.workers_per_namespace),
            http_turns: turns::Turns::new(HTTP_FETCHES, HTTP_FETCHES_PER_NAMESPACE),
            disk: disk::DiskCache::measured(cache_bytes),
            next_job: 0,
            network_fetches: 0,
        }
    }

    // ---- what readers see ----

    /// Where `request` stands at `now` for a parent polling every `interval` and running
    /// `running`: the one rule both the read side and the writer's ask follow, so a
    /// call's answer and what its ask then does agree.
    fn verdict(
        &self,
        key: &SourceKey,
        now: Instant,
        interval: Duration,
        running: Option<&Revision>,
    ) -> Verdict {
        let entry = self.snapshots.get(key);
        let Some(remote) = self.remotes.get(&key.remote) else {
            return Verdict::Due { stale: true };
        };
        match remote.phase {
            Phase::Fetching(job) => {
                if entry.is_some_and(|e| e.answered_by == Some(job)) {
                    Verdict::Settled
                } else {
                    Verdict::Awaiting
                }
            }
            Phase::Reading(_) => {
                if entry.is_some_and(|e| e.snapshot().is_some()) {
                    Verdict::Settled
                } else {
                    Verdict::Awaiting
                }
            }
            Phase::Idle => {
                let stale = remote.is_stale(now, interval);
                if stale || SnapshotEntry::needs_reading(entry, running) {
                    Verdict::Due { stale }
                } else {
                    Verdict::Settled
                }
            }
        }
    }

    /// What the engine holds for `request` at `now`, without asking for anything:
    /// `pending` when a job that may change the answer runs, or when the next ask would
    /// start one (the remote is due, the request is new, or its snapshot was let go and
    /// the parent does not run it), so the parent asks again soon.
    pub(super) fn answer(
        &self,
        request: &SourceRequest,
        now: Instant,
        interval: Duration,
        running: Option<&Revision>,
    ) -> SourceState {
        if let Some(refusal) = binding_refusal(request) {
            return SourceState {
                error: Some(refusal),
                ..SourceState::default()
            };
        }
        let key = request.key();
        let known = self.snapshots.get(&key);
        SourceState {
            snapshot: known.and_then(|k| k.snapshot().cloned()),
            error: known.and_then(|k| k.error.clone()),
            pending: self.verdict(&key, now, interval, running) != Verdict::Settled,
            resync_within: self.settings.push_resync_seconds,
            after_running: self.after_running(&key, running),
        }
    }

    /// Whether `key`'s snapshot is at least as new as `running` on the same ref: it is
    /// that revision, or it was fetched by a job that started after the engine first
    /// heard of it. Order comes from when things were seen, never from the commits' own
    /// dates (which anyone who can push, or a skewed clock, sets).
    fn after_running(&self, key: &SourceKey, running: Option<&Revision>) -> bool {
        let Some(running) = running else { return true };
        let Some(entry) = self.snapshots.get(key) else {
            return false;
        };
        if entry.snapshot().is_some_and(|s| &s.revision == running) {
            return true;
        }
        let heard = self
            .remotes
            .get(&key.remote)
            .and_then(|remote| remote.first_heard(running));
        heard
            .zip(entry.fetched_from)
            .is_some_and(|(heard, fetched)| fetched >= heard)
    }

    /// Where the "fetch now" `token` of `request`'s remote stands.
    pub(super) fn token(&self, request: &SourceRequest, token: &str) -> Refresh {
        if let Some(remote) = self.remotes.get(&request.remote_key()) {
            if remote.refresh.is_handled(token) {
                return Refresh::Handled;
            }
            if remote.refresh.is_started(token) {
                return Refresh::Pending;
            }
        }
        // Refused before any job (credentials not allowed): nothing will run for it, and
        // the refusal itself is the answer.
        if binding_refusal(request).is_some() {
            return Refresh::Handled;
        }
        Refresh::Pending
    }

    /// How many remotes are copies of `repository`.
    pub(super) fn remotes_of(&self, repository: &str) -> usize {
        self.remotes
            .values()
            .filter(|r| r.is_of(repository))
            .count()
    }

    /// How many parents have asked for `remote_key` lately.
    pub(super) fn waiting_parents(
        &self,
        remote_key: &RemoteKey,
        now: Instant,
        interval: Duration,
    ) -> usize {
        self.remotes
            .get(remote_key)
            .map_or(0, |remote| remote.waiting_parents(now, interval))
    }

    /// Whether any job runs.
    pub(super) fn busy(&self) -> bool {
        self.remotes.values().any(|r| r.phase != Phase::Idle)
    }

    /// Whether jobs wait for room or a repository (the writer then ticks, so their
    /// deadlines pass without a command).
    pub(super) fn has_waiters(&self) -> bool {
        self.rooms.waiting() != 0 || self.disk.waiting() != 0
    }

    /// The gauges: snapshot bytes, room reserved, jobs waiting for room, cache bytes.
    pub(super) fn gauges(&self) -> (u64, u64, u64, u64) {
        (
            self.snapshot_bytes,
            self.rooms.reserved,
            self.rooms.waiting() as u64,
            self.disk.bytes,
        )
    }

    /// Requests and snapshots held in memory.
    #[cfg(any(test, feature = "test-support"))]
    pub(super) fn tracked(&self) -> (usize, usize) {
        let requests = self.remotes.values().map(|r| r.requests.len()).sum();
        (requests, self.snapshots.len())
    }

    #[cfg(any(test, feature = "test-support"))]
    pub(super) fn network_fetches(&self) -> u64 {
        self.network_fetches
    }

    // ---- what the writer changes, one method per command ----

    /// A parent asked for a source at `now`: it is recorded as asked, its snapshot as
    /// delivered, and the one job of its remote starts when the remote is due or the
    /// request is new (with a "fetch now" token, the next fetch covers it).
    pub(super) fn want(&mut self, wanted: &Wanted, now: Instant, effects: &mut Effects) {
        let request = &wanted.request;
        if binding_refusal(request).is_some() {
            return;
        }
        let key = request.key();
        let remote = self.remotes.entry(key.remote.clone()).or_default();
        if let Some(parent) = &wanted.parent {
            remote.heard_from(parent, now, wanted.interval);
        }
        remote.asked(request, now, wanted.interval, wanted.fetch_now.as_deref());
        // Before any job this starts, so that job counts as fetched after it.
        remote.heard_running(wanted.running.as_ref(), now);
        // After the ask is recorded, so the sweep never forgets what is asked now.
        if self
            .last_sweep
            .is_none_or(|last| now.saturating_duration_since(last) >= SWEEP_EVERY)
        {
            self.sweep(now, None);
        }
        effects.let_go += self.looked_up(&key, now, wanted.running.as_ref());
        let verdict = self.verdict(&key, now, wanted.interval, wanted.running.as_ref());
        if let Verdict::Due { stale } = verdict {
            self.start_job(&key.remote, now, stale, effects);
        }
    }

    /// A push receiver heard that `repository` changed at `now`: every remote of it is
    /// marked pushed, and the fetch of each that is idle and past the push spacing
    /// starts; the others start when the spacing has passed (one timer per remote) or
    /// at their next ask.
    pub(super) fn push(&mut self, repository: &str, now: Instant, effects: &mut Effects) {
        let mut due = Vec::new();
        for (remote_key, remote) in &mut self.remotes {
            if !remote.is_of(repository) {
                continue;
            }
            remote.pushed = true;
            if remote.push_timer {
                continue;
            }
            let wait = remote.push_wait(now);
            if wait.is_zero() {
                due.push(remote_key.clone());
            } else {
                remote.push_timer = true;
                effects.push_timers.push((remote_key.clone(), wait));
            }
        }
        for remote_key in due {
            self.ask_again(&remote_key, now, effects);
        }
    }

    /// The push spacing of `remote_key` has passed: its fetch starts unless one runs.
    pub(super) fn push_due(&mut self, remote_key: &RemoteKey, now: Instant, effects: &mut Effects) {
        if let Some(remote) = self.remotes.get_mut(remote_key) {
            remote.push_timer = false;
            self.ask_again(remote_key, now, effects);
        }
    }

    /// Asks for one of the remote's requests as its parent last did (any will do: they
    /// share the fetch).
    fn ask_again(&mut self, remote_key: &RemoteKey, now: Instant, effects: &mut Effects) {
        let asked = self.remotes.get(remote_key).and_then(|r| r.any_request());
        if let Some(asked) = asked {
            let wanted = Wanted {
                request: asked.request.clone(),
                interval: asked.interval,
                running: None,
                fetch_now: None,
                parent: None,
            };
            self.want(&wanted, now, effects);
        }
    }

    /// Marks the remote's job started and plans it for every request the remote has.
    fn start_job(
        &mut self,
        remote_key: &RemoteKey,
        now: Instant,
        stale: bool,
        effects: &mut Effects,
    ) {
        let job = JobId(self.next_job);
        let Some(remote) = self.remotes.get_mut(remote_key) else {
            return;
        };
        self.next_job += 1;
        let (use_network, commit_from) = remote.job_starts(job, now, stale);
        let requests: Vec<SourceRequest> = remote
            .requests
            .values()
            .map(|a| a.request.clone())
            .collect();
        let current = requests
            .iter()
            .filter_map(|r| {
                let key = r.key();
                let revision = self.snapshots.get(&key)?.current_revision()?.clone();
                Some((key, revision))
            })
            .collect();
        effects.jobs.push(JobPlan {
            job,
            remote_key: remote_key.clone(),
            requests,
            use_network,
            resolved: remote.commit.as_ref().map(|c| c.resolved.clone()),
            commit_from,
            current,
            interval: remote.shortest_interval().unwrap_or(SWEEP_EVERY),
        });
    }

    /// Stores what job `job` brought for the requests still asked for, as it arrives (so
    /// a parent can take its snapshot before the job ends, and the budget can let go of
    /// delivered ones).
    pub(super) fn stored(
        &mut self,
        remote_key: &RemoteKey,
        job: JobId,
        commit_from: Option<Instant>,
        results: Vec<(SourceKey, Fetched)>,
        now: Instant,
        effects: &mut Effects,
    ) {
        for (key, result) in results {
            // A request forgotten while the job ran stays forgotten.
            let asked = self
                .remotes
                .get(remote_key)
                .is_some_and(|r| r.requests.contains_key(&key));
            if !asked {
                continue;
            }
            let entry = self.snapshots.entry(key.clone()).or_default();
            entry.answered_by = Some(job);
            match result {
                Fetched::Fresh(snapshot) => {
                    entry.error = None;
                    entry.fetched_from = commit_from;
                    effects.let_go += self.store_fresh(key, snapshot, now);
                }
                Fetched::Unchanged => {
                    entry.error = None;
                    entry.fetched_from = commit_from;
                }
                Fetched::Failed(error) => entry.error = Some(error),
            }
        }
    }

    /// A job ended: its remote may be fetched again, its "fetch now" tokens are handled,
    /// and the commit it resolved is kept.
    pub(super) fn finished(&mut self, ended: Ended) {
        self.network_fetches += u64::from(ended.went_to_network);
        let Some(remote) = self.remotes.get_mut(&ended.remote_key) else {
            return;
        };
        remote.job_ended(ended.job, ended.resolved, ended.network, ended.commit_from);
        if remote.requests.is_empty() && remote.phase == Phase::Idle {
            self.remotes.remove(&ended.remote_key);
        }
    }

    /// Drops requests not asked for within `FORGET_AFTER_INTERVALS` of their interval
    /// (or within `max_age` when given), their snapshots, and remotes left with none
    /// and no job.
    pub(super) fn sweep(&mut self, now: Instant, max_age: Option<Duration>) {
        let mut forgotten = Vec::new();
        for remote in self.remotes.values_mut() {
            remote.requests.retain(|key, asked| {
                let age = max_age.unwrap_or(asked.interval * FORGET_AFTER_INTERVALS);
                let keep = now.saturating_duration_since(asked.last) <= age;
                if !keep {
                    forgotten.push(key.clone());
                }
                keep
            });
        }
        self.remotes
            .retain(|_, remote| remote.phase != Phase::Idle || !remote.requests.is_empty());
        for key in forgotten {
            let still_asked = self
                .remotes
                .get(&key.remote)
                .is_some_and(|r| r.requests.contains_key(&key));
            if !still_asked && let Some(entry) = self.snapshots.remove(&key) {
                self.snapshot_bytes = self.snapshot_bytes.saturating_sub(entry.weight());
            }
        }
        self.last_sweep = Some(now);
    }

    /// Every remote counts as due (tests, instead of waiting for an interval).
    #[cfg(any(test, feature = "test-support"))]
    pub(super) fn expire(&mut self) {
        for remote in self.remotes.values_mut() {
            remote.last_fetch = None;
        }
    }
}

/// Why the request's credentials may not be used for its URL: credentials the Secret's
/// owner did not allow for a URL are never used, so no job is scheduled and no request
/// is made at all.
fn binding_refusal(request: &SourceRequest) -> Option<FetchError> {
    let url = request.location.url();
    request
        .credentials
        .as_ref()
        .and_then(|c| c.check_url(url).err())
        .or_else(|| request.tls.as_ref().and_then(|t| t.check_url(url).err()))
}
