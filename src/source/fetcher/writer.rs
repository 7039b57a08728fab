//! The one writer of the engine's state: a task that takes what calls, push receivers
//! and jobs ask for as messages ([`Command`]) and applies them in order. Everyone else
//! only reads the state ([`super::Fetcher::read`]); the shape of kube-runtime's
//! reflector, whose one `Writer` feeds many `Store` readers.
//!
//! Since every change goes through here in order, a test or a tool that asks for
//! something and then waits for the engine to be idle ([`Command::Idle`]) sees what it
//! asked for done.

use crate::source::Revision;
use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot};
use tracing::Instrument;

use super::budget::snapshot_bytes;
use super::job::{InFlight, Job, Results};
use super::{Inner, PUSH_SPACING, SWEEP_EVERY, SnapshotEntry, State, look, read, write};
use crate::source::worker::Fetched;
use crate::source::{Location, RemoteKey, SourceRequest, git};

/// What may change the engine's state.
pub(super) enum Command {
    /// A parent asked for a source.
    Want(Box<Wanted>),
    /// A push receiver heard that `repository` changed.
    Push { repository: String },
    /// The push spacing of a remote a push named has passed.
    PushDue { remote_key: RemoteKey },
    /// A job brought these results for its requests.
    Stored {
        remote_key: RemoteKey,
        commit_from: Option<Instant>,
        results: Results,
    },
    /// A job ended.
    Finished(Ended),
    /// A job asks for room in the snapshot budget.
    Reserve(Waiter),
    /// The room named `room` is given back (or no longer wanted).
    GiveBack { room: u64 },
    /// Repositories removed from the disk cache: what was resolved in them is gone.
    Evicted { repo_dirs: Vec<PathBuf> },
    /// Every remote counts as due (tests, instead of waiting for an interval).
    #[cfg(any(test, feature = "test-support"))]
    Expire { done: oneshot::Sender<()> },
    /// Requests not asked for within `max_age` are forgotten (tests, instead of waiting
    /// for the sweep).
    #[cfg(any(test, feature = "test-support"))]
    Forget {
        max_age: Duration,
        done: oneshot::Sender<()>,
    },
    /// Answered once no job runs.
    Idle { done: oneshot::Sender<()> },
}

/// How often waiting jobs are looked at when nothing else happens (their deadline).
const WAITING_TICK: Duration = Duration::from_millis(200);

/// What a parent asked for: `request`, polled at `interval`, running `running`; with
/// `fetch_now`, a "fetch now" token.
pub(super) struct Wanted {
    pub(super) request: SourceRequest,
    pub(super) interval: Duration,
    pub(super) running: Option<Revision>,
    pub(super) fetch_now: Option<String>,
    pub(super) parent: Option<std::sync::Arc<str>>,
}

/// A job that ended on `remote_key`; `resolved` is the commit it fetched or read, if
/// any, and `network` whether it asked the remote (in a fetch started at `commit_from`).
pub(super) struct Ended {
    pub(super) remote_key: RemoteKey,
    pub(super) resolved: Option<git::Resolved>,
    pub(super) network: bool,
    pub(super) commit_from: Option<Instant>,
}

/// A job waiting for `bytes` of room, named `room`, until `give_up`.
pub(super) struct Waiter {
    pub(super) room: u64,
    pub(super) bytes: u64,
    pub(super) give_up: Instant,
    pub(super) granted: oneshot::Sender<()>,
}

/// The writer task's own state: what waits for it.
pub(super) struct Writer {
    inner: Weak<Inner>,
    commands: mpsc::UnboundedReceiver<Command>,
    waiting: VecDeque<Waiter>,
    /// Room granted, by name.
    rooms: HashMap<u64, u64>,
    idle: Vec<oneshot::Sender<()>>,
}

impl Writer {
    pub(super) fn new(inner: Weak<Inner>, commands: mpsc::UnboundedReceiver<Command>) -> Writer {
        Writer {
            inner,
            commands,
            waiting: VecDeque::new(),
            rooms: HashMap::new(),
            idle: Vec::new(),
        }
    }

    /// Applies commands until every sender is gone (the engine was dropped).
    pub(super) async fn run(mut self) {
        loop {
            // With jobs waiting for room, a tick: their deadlines pass without a command.
            let next = if self.waiting.is_empty() {
                self.commands.recv().await.map(Some)
            } else {
                match tokio::time::timeout(WAITING_TICK, self.commands.recv()).await {
                    Ok(received) => received.map(Some),
                    Err(_elapsed) => Some(None),
                }
            };
            let Some(next) = next else {
                return;
            };
            let Some(inner) = self.inner.upgrade() else {
                return;
            };
            if let Some(command) = next {
                self.apply(&inner, &mut write(&inner.state), command);
            }
            // Only with jobs waiting (or the gauge still counting some): it weighs
            // every snapshot.
            if !self.waiting.is_empty() || read(&inner.state).waiting_for_room != 0 {
                self.grant(&inner, &mut write(&inner.state));
            }
            if !self.idle.is_empty() {
                let busy = read(&inner.state)
                    .remotes
                    .values()
                    .any(|remote| remote.in_flight);
                if !busy {
                    for done in self.idle.drain(..) {
                        let _ = done.send(());
                    }
                }
            }
            drop(inner);
            // One command at a time, each under a hold of its own: a lookup waits for one
            // at most, and hook calls on this worker thread for none (a burst of
            // commands would otherwise run to its end before them).
            tokio::task::yield_now().await;
        }
    }

    fn apply(&mut self, inner: &Arc<Inner>, state: &mut State, command: Command) {
        match command {
            Command::Want(wanted) => {
                if let Some(parent) = &wanted.parent {
                    let remote = state
                        .remotes
                        .entry(wanted.request.key().remote)
                        .or_default();
                    remote.heard_from(parent, Instant::now(), wanted.interval);
                }
                want(
                    inner,
                    state,
                    &wanted.request,
                    wanted.interval,
                    wanted.running.as_ref(),
                    wanted.fetch_now.as_deref(),
                );
            }
            Command::Push { repository } => push(inner, state, &repository),
            Command::PushDue { remote_key } => push_due(inner, state, &remote_key),
            Command::Stored {
                remote_key,
                commit_from,
                results,
            } => store(inner, state, &remote_key, commit_from, results),
            Command::Finished(ended) => finished(state, ended),
            Command::Reserve(waiter) => self.waiting.push_back(waiter),
            Command::GiveBack { room } => {
                self.waiting.retain(|waiter| waiter.room != room);
                if let Some(bytes) = self.rooms.remove(&room) {
                    state.reserved = state.reserved.saturating_sub(bytes);
                }
            }
            Command::Evicted { repo_dirs } => {
                for remote in state.remotes.values_mut() {
                    let gone = remote.resolved.as_ref();
                    if gone.is_some_and(|r| repo_dirs.contains(&r.repo_dir)) {
                        remote.resolved = None;
                    }
                }
            }
            #[cfg(any(test, feature = "test-support"))]
            Command::Expire { done } => {
                for remote in state.remotes.values_mut() {
                    remote.started = None;
                }
                let _ = done.send(());
            }
            #[cfg(any(test, feature = "test-support"))]
            Command::Forget { max_age, done } => {
                state.sweep(Instant::now(), Some(max_age));
                let _ = done.send(());
            }
            Command::Idle { done } => self.idle.push(done),
        }
    }

    /// Grants room to the jobs waiting for it, in order, while undelivered snapshots
    /// plus reservations leave room (or nothing else is held or reserved, so one job
    /// always runs, or the job has waited long enough: its parents may never come for
    /// what is held, and the sweep will have forgotten them).
    fn grant(&mut self, inner: &Inner, state: &mut State) {
        let budget = inner.settings.snapshot_budget_bytes;
        let undelivered: u64 = state
            .snapshots
            .values()
            .filter(|entry| entry.snapshot.is_some() && !entry.delivered)
            .map(SnapshotEntry::weight)
            .sum();
        let now = Instant::now();
        let mut still = VecDeque::with_capacity(self.waiting.len());
        for waiter in self.waiting.drain(..) {
            let taken = undelivered.saturating_add(state.reserved);
            let fits = taken == 0 || taken.saturating_add(waiter.bytes) <= budget;
            if !fits && now < waiter.give_up && !waiter.granted.is_closed() {
                still.push_back(waiter);
                continue;
            }
            if waiter.granted.send(()).is_ok() {
                state.reserved = state.reserved.saturating_add(waiter.bytes);
                self.rooms.insert(waiter.room, waiter.bytes);
            }
        }
        self.waiting = still;
        state.waiting_for_room = self.waiting.len() as u64;
    }
}

/// A parent asked for `request`: it is recorded as asked, its snapshot as delivered,
/// and the one job of its remote starts when the remote is due or the request is new
/// (with `refresh`, a "fetch now" token the next job covers).
fn want(
    inner: &Arc<Inner>,
    state: &mut State,
    request: &SourceRequest,
    interval: Duration,
    running: Option<&Revision>,
    refresh: Option<&str>,
) {
    if look::binding_refusal(request).is_some() {
        return;
    }
    let key = request.key();
    let remote_key = key.remote.clone();
    let now = Instant::now();
    if state
        .last_sweep
        .is_none_or(|last| now.saturating_duration_since(last) >= SWEEP_EVERY)
    {
        state.sweep(now, None);
    }
    let budget = inner.settings.snapshot_budget_bytes;
    let (needs_reading, let_go) = state.looked_up(&key, now, running, budget);
    inner.metrics.snapshot_evictions.inc_by(let_go);
    let remote = state.remotes.entry(remote_key.clone()).or_default();
    remote.asked(key, request, now, interval, refresh);
    // Before any job this starts, so that job counts as fetched after it.
    remote.heard_running(running, now);
    let stale = remote.is_stale(interval);
    if !remote.in_flight && (stale || needs_reading) {
        start_job(inner, state, &remote_key, request, interval, stale);
    }
}

/// The push spacing of `remote_key` has passed: its fetch starts unless one runs.
fn push_due(inner: &Arc<Inner>, state: &mut State, remote_key: &RemoteKey) {
    let Some(remote) = state.remotes.get_mut(remote_key) else {
        return;
    };
    remote.push_timer = false;
    let first = remote.any_request();
    if let Some((request, interval)) = first.map(|a| (a.request.clone(), a.interval)) {
        want(inner, state, &request, interval, None, None);
    }
}

/// A job ended: its remote may be fetched again, its "fetch now" tokens are handled,
/// and the commit it resolved is kept.
fn finished(state: &mut State, ended: Ended) {
    let Some(remote) = state.remotes.get_mut(&ended.remote_key) else {
        return;
    };
    remote.in_flight = false;
    remote.refresh.job_ended();
    if ended.resolved.is_some() {
        remote.resolved = ended.resolved;
        if ended.network {
            remote.resolved_from = ended.commit_from;
        }
    }
}

/// Marks every remote of `repository` pushed and starts the fetch of each that is idle
/// and past the push spacing; the others start when the spacing has passed (one timer
/// per remote) or at their next lookup.
fn push(inner: &Arc<Inner>, state: &mut State, repository: &str) {
    let mut due = Vec::new();
    for (remote_key, remote) in &mut state.remotes {
        if !remote.is_of(repository) {
            continue;
        }
        remote.pushed = true;
        if remote.push_timer {
            continue;
        }
        let wait = remote.started.map_or(Duration::ZERO, |started| {
            PUSH_SPACING.saturating_sub(started.elapsed())
        });
        if wait.is_zero() {
            if let Some(asked) = remote.any_request() {
                due.push((asked.request.clone(), asked.interval));
            }
            continue;
        }
        remote.push_timer = true;
        let (commands, remote_key) = (inner.commands.clone(), remote_key.clone());
        inner.runtime.spawn(async move {
            tokio::time::sleep(wait).await;
            let _ = commands.send(Command::PushDue { remote_key });
        });
    }
    for (request, interval) in due {
        want(inner, state, &request, interval, None, None);
    }
}

/// Marks the remote in flight and spawns a job for every request it has: over the
/// network when `stale` (or nothing was fetched yet), else only reading new paths of
/// the commit already here.
fn start_job(
    inner: &Arc<Inner>,
    state: &mut State,
    remote_key: &RemoteKey,
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
            Some((r.key(), entry.current_revision()?.clone()))
        })
        .collect();
    let job = Job {
        inner: inner.clone(),
        guard: InFlight::new(inner.clone(), remote_key),
        interval: shortest,
        remote_key: remote_key.to_owned(),
        requests,
        use_network,
        resolved,
        commit_from,
        current,
    };
    inner.runtime.spawn(job.run().instrument(job_span(request)));
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

/// Stores what a job brought for the requests still asked for, as it arrives (so a
/// parent can take its snapshot before the job ends, and the budget can let go of
/// delivered ones).
fn store(
    inner: &Inner,
    state: &mut State,
    remote_key: &RemoteKey,
    commit_from: Option<Instant>,
    results: Results,
) {
    for (key, result) in results {
        // A request forgotten while the job ran stays forgotten.
        let asked = state
            .remotes
            .get(remote_key)
            .is_some_and(|r| r.requests.contains_key(&key));
        if !asked {
            continue;
        }
        let entry = state.snapshots.entry(key).or_default();
        entry.answered_by = commit_from;
        match result {
            Fetched::Fresh(snapshot) => {
                let (old, new) = (entry.weight(), snapshot_bytes(&snapshot));
                (entry.bytes, entry.derived) = (new, 0);
                entry.snapshot = Some(Arc::new(snapshot));
                entry.error = None;
                entry.let_go = None;
                entry.delivered = false;
                entry.fetched_from = commit_from;
                entry.last_used.get_or_insert_with(Instant::now);
                state.snapshot_bytes = state.snapshot_bytes.saturating_sub(old) + new;
                let let_go = state.fit(inner.settings.snapshot_budget_bytes);
                inner.metrics.snapshot_evictions.inc_by(let_go);
            }
            Fetched::Unchanged => {
                entry.error = None;
                entry.fetched_from = commit_from;
            }
            Fetched::Failed(error) => entry.error = Some(error),
        }
    }
}
