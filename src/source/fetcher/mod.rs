//! The source engine. Lookups never wait: they read what the engine holds. What calls,
//! push receivers and jobs ask for goes to one writer task as messages ([`writer`]),
//! which records interests and, when a remote has not been fetched within the asked
//! interval, starts one job for it. A job fetches the remote once (git: list refs,
//! download only a new commit; HTTP: one GET) and then refreshes every request that
//! shares it. A failed job records its error next to the last good snapshot, which
//! stays in use.

use crate::source::Revision;
use std::collections::{BTreeSet, HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::{Duration, Instant};

use super::policy::Policy;
use super::slots::FairSlots;
use super::{
    FetchError, Interest, Refresh, RemoteKey, SourceKey, SourceRequest, SourceState, SourceView,
    Sources, git, http,
};

mod budget;
mod cache_dir;
mod job;
mod look;
mod order;
mod settings;
mod writer;

use order::after_running;
pub use settings::{
    DEFAULT_CACHE_MAX_BYTES, DEFAULT_SNAPSHOT_BUDGET_BYTES, DEFAULT_WORKERS,
    DEFAULT_WORKERS_PER_NAMESPACE, FetcherSettings,
};

#[derive(Default)]
struct RemoteEntry {
    requests: HashMap<SourceKey, Asked>,
    started: Option<Instant>,
    in_flight: bool,
    /// The running job asks the remote (false: it only reads new paths of the commit
    /// already here, which changes nothing for requests that have their snapshot).
    in_flight_network: bool,
    /// The last commit fetched (git), so a new path can be read without the network.
    resolved: Option<git::Resolved>,
    /// "Fetch now" tokens ([`Sources::refresh`]).
    refresh: RefreshTokens,
    /// A push named this remote's repository since its last job started.
    pushed: bool,
    /// A timer waits to start the fetch a push asked for (see `PUSH_SPACING`).
    push_timer: bool,
    /// When the network job that brought `resolved` started.
    resolved_from: Option<Instant>,
    /// Revisions parents said they run, each with when the engine first heard of it
    /// (the newest few): a copy fetched after that is at least as new.
    heard: VecDeque<(Revision, Instant)>,
    /// The parents (`namespace/name`) that asked for the remote, and when each last did
    /// (those silent for a few intervals are let go): who waits on its next fetch.
    parents: HashMap<std::sync::Arc<str>, Instant>,
}

/// Most parents remembered per remote (for the log line of a failed fetch only).
const PARENTS_REMEMBERED: usize = 10_000;

impl RemoteEntry {
    /// `parent` asked for this remote at `now`, polling every `interval`.
    fn heard_from(&mut self, parent: &std::sync::Arc<str>, now: Instant, interval: Duration) {
        self.parents.insert(parent.clone(), now);
        if self.parents.len() > PARENTS_REMEMBERED {
            let silent_for = interval * FORGET_AFTER_INTERVALS;
            self.parents
                .retain(|_, last| now.saturating_duration_since(*last) < silent_for);
        }
    }

    /// How many parents have asked for the remote lately.
    pub(super) fn waiting_parents(&self, now: Instant, interval: Duration) -> usize {
        let silent_for = interval * FORGET_AFTER_INTERVALS;
        self.parents
            .values()
            .filter(|last| now.saturating_duration_since(**last) < silent_for)
            .count()
    }
}

/// Most handled "fetch now" tokens remembered per remote.
const HANDLED_TOKENS: usize = 32;
/// Most "fetch now" tokens waiting for a remote's next job (each parent asking again
/// re-adds its own, so none is lost for good).
const MAX_WANTED_TOKENS: usize = 256;

/// Where each "fetch now" token of a remote stands: asked for (the next job covers it),
/// covered by the running job, or handled (that job finished).
#[derive(Default)]
struct RefreshTokens {
    wanted: BTreeSet<String>,
    started: BTreeSet<String>,
    handled: VecDeque<String>,
}

impl RefreshTokens {
    /// A job starts: every token asked for so far is covered by it.
    fn job_started(&mut self) {
        self.started.append(&mut self.wanted);
    }

    /// The job ended (whatever its outcome: a failed fetch also answers "fetch now").
    fn job_ended(&mut self) {
        for token in std::mem::take(&mut self.started) {
            if self.handled.len() == HANDLED_TOKENS {
                self.handled.pop_front();
            }
            self.handled.push_back(token);
        }
    }
}

/// A request and when a parent last asked for it: requests nobody asks for any more
/// (their parents were deleted or changed source) are forgotten.
struct Asked {
    request: SourceRequest,
    last: Instant,
    interval: Duration,
}

/// How many intervals a request may go unasked before it is forgotten.
const FORGET_AFTER_INTERVALS: u32 = 3;
/// How often `lookup` sweeps for forgotten requests.
const SWEEP_EVERY: Duration = Duration::from_secs(30);

#[derive(Default, Clone)]
struct SnapshotEntry {
    snapshot: Option<Arc<super::Snapshot>>,
    error: Option<FetchError>,
    /// Bytes the snapshot holds (counted against the budget).
    bytes: u64,
    /// Bytes of what was made of the snapshot ([`super::derived`]) when last counted
    /// (counted against the budget too).
    derived: u64,
    last_used: Option<Instant>,
    /// The revision of a snapshot let go under the memory budget.
    let_go: Option<super::Revision>,
    /// The parent last said it runs `let_go` already (read back from its ConfigMap), so
    /// nothing needs reading again for it until the source changes.
    held: bool,
    /// When the network fetch that the latest good result reflects started.
    fetched_from: Option<Instant>,
    /// The start of the fetch whose job stored the latest result, good or failed: while
    /// that job still runs, its result for this request is already in, and nothing it
    /// does later changes this request's answer.
    answered_by: Option<Instant>,
    /// A lookup has returned the snapshot since it was fetched. One not yet delivered is
    /// never let go: under a working set larger than the budget, a parent would
    /// otherwise find its snapshot gone every time it came back for it.
    delivered: bool,
}

impl SnapshotEntry {
    /// What the entry weighs in the budget: the snapshot and what was made of it.
    fn weight(&self) -> u64 {
        self.bytes + self.derived
    }

    /// Whether a job that runs on `remote` may still change this request's answer: it
    /// asks the remote and has not stored this request's result yet, or it reads a path
    /// this request has no snapshot for.
    /// An answer stored by the running job counts, a failure as much as a snapshot: the
    /// job then only has to clear its mark, and two calls on either side of that must
    /// answer alike.
    fn awaits(entry: Option<&SnapshotEntry>, remote: &RemoteEntry) -> bool {
        let has_snapshot = entry.is_some_and(|e| e.snapshot.is_some());
        let answered = entry.is_some_and(|e| {
            remote.in_flight_network && e.answered_by.is_some() && e.answered_by == remote.started
        });
        remote.in_flight && !answered && (remote.in_flight_network || !has_snapshot)
    }

    /// Nothing to answer from: never read, or let go and the parent does not hold it.
    fn needs_reading(&self) -> bool {
        self.snapshot.is_none() && self.let_go.is_some() && !self.held
    }

    /// The revision the request already has, so a job need not read it again.
    fn current_revision(&self) -> Option<&super::Revision> {
        if self.error.is_some() {
            return None;
        }
        match (&self.snapshot, &self.let_go) {
            (Some(snapshot), _) => Some(&snapshot.revision),
            (None, Some(revision)) if self.held => Some(revision),
            _ => None,
        }
    }
}

#[derive(Default)]
struct State {
    remotes: HashMap<RemoteKey, RemoteEntry>,
    snapshots: HashMap<SourceKey, SnapshotEntry>,
    last_sweep: Option<Instant>,
    /// Bytes of every snapshot held.
    snapshot_bytes: u64,
    /// Bytes of the budget running jobs have reserved for what they bring ([`budget`]).
    reserved: u64,
    /// Jobs waiting for room in the budget.
    waiting_for_room: u64,
}

impl State {
    /// Drops requests not asked for within `FORGET_AFTER_INTERVALS` of their interval
    /// (or within `max_age` when given), their snapshots, and remotes left with none.
    fn sweep(&mut self, now: Instant, max_age: Option<Duration>) {
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
            .retain(|_, remote| remote.in_flight || !remote.requests.is_empty());
        for key in forgotten {
            let still_asked = self.remotes.values().any(|r| r.requests.contains_key(&key));
            if !still_asked && let Some(entry) = self.snapshots.remove(&key) {
                self.snapshot_bytes = self.snapshot_bytes.saturating_sub(entry.weight());
            }
        }
        self.last_sweep = Some(now);
    }
}

struct Inner {
    policy: Arc<Policy>,
    cache_dir: PathBuf,
    client: super::client::HttpClient,
    /// Written by the writer task alone ([`writer`]); read by lookups and gauges.
    state: RwLock<State>,
    /// What the writer task is asked to do.
    commands: tokio::sync::mpsc::UnboundedSender<writer::Command>,
    /// Names of rooms jobs reserve in the snapshot budget ([`budget`]).
    next_room: AtomicU64,
    /// Serialises git work per cache repository (libgit2 locks refs on disk).
    repo_locks: Mutex<HashMap<PathBuf, Arc<tokio::sync::Mutex<()>>>>,
    network_fetches: AtomicU64,
    runtime: tokio::runtime::Handle,
    /// The cache's size when last measured (after a download or an eviction).
    cache_bytes: AtomicU64,
    /// Git jobs that may download right now (each reserves disk space).
    downloads: AtomicU64,
    /// Held while a job checks and takes its disk reservation.
    reserving: Mutex<()>,
    settings: FetcherSettings,
    git_slots: Arc<FairSlots>,
    http_slots: Arc<FairSlots>,
    /// Keys the on-disk repositories by credential holder; kept in the cache directory
    /// so that a restarted server finds its repositories again.
    disk_key: [u8; 32],
    metrics: super::metrics::SourceMetrics,
}

/// The least time between two fetches of one remote that pushes start: a burst of pushes
/// becomes one fetch now and one when the spacing has passed.
const PUSH_SPACING: Duration = Duration::from_secs(2);

/// HTTP fetches at once, and for one namespace: each holds a socket and at most one
/// file's bytes, so they are bounded apart from the git workers.
const HTTP_FETCHES: usize = 32;
const HTTP_FETCHES_PER_NAMESPACE: usize = 8;

/// Cheap to clone; all clones share one cache.
#[derive(Clone)]
pub struct Fetcher {
    inner: Arc<Inner>,
}

impl Fetcher {
    /// Starts the engine: must be called inside a Tokio runtime, on which jobs are
    /// spawned. Git jobs run as `settings.isolation` says.
    ///
    /// # Errors
    /// No runtime runs, the cache directory's key cannot be read or written, or the HTTP
    /// client cannot be built from the policy.
    pub fn start(settings: FetcherSettings) -> Result<Fetcher, FetchError> {
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| {
            FetchError::Other("the source fetcher needs a Tokio runtime".to_owned())
        })?;
        let disk_key = super::disk::key(&settings.cache_dir)?;
        // What a restarted server's cache already holds (nothing is removed here).
        let (_, cached_bytes) =
            super::disk::enforce_cap(&settings.cache_dir.join("git"), u64::MAX, |_| None::<()>);
        let policy = Arc::new(settings.policy.clone());
        let (commands, received) = tokio::sync::mpsc::unbounded_channel();
        let inner = Arc::new(Inner {
            client: http::client(policy.clone(), None)?,
            policy,
            cache_dir: settings.cache_dir.clone(),
            state: RwLock::new(State::default()),
            commands,
            next_room: AtomicU64::new(0),
            repo_locks: Mutex::new(HashMap::new()),
            network_fetches: AtomicU64::new(0),
            runtime,
            cache_bytes: AtomicU64::new(cached_bytes),
            downloads: AtomicU64::new(0),
            reserving: Mutex::new(()),
            git_slots: FairSlots::new(settings.workers, settings.workers_per_namespace),
            http_slots: FairSlots::new(HTTP_FETCHES, HTTP_FETCHES_PER_NAMESPACE),
            disk_key,
            metrics: super::metrics::SourceMetrics::new(settings.max_remote_series),
            settings,
        });
        let writer = writer::Writer::new(Arc::downgrade(&inner), received);
        inner.runtime.spawn(writer.run());
        Ok(Fetcher { inner })
    }

    /// Waits until everything asked so far is applied and no job runs (for `render`,
    /// which prints the settled answer).
    pub async fn idle(&self) {
        self.ask(|done| writer::Command::Idle { done }).await;
    }

    /// Sends `command` to the writer and waits for its answer (at once when the writer
    /// has gone with the runtime).
    async fn ask(&self, command: impl FnOnce(tokio::sync::oneshot::Sender<()>) -> writer::Command) {
        let (done, answered) = tokio::sync::oneshot::channel();
        if self.inner.commands.send(command(done)).is_ok() {
            let _ = answered.await;
        }
    }

    /// Records that a parent asked for `request` (see [`writer::Wanted`]).
    fn ask_for(
        &self,
        request: &SourceRequest,
        interval: Duration,
        running: Option<&Revision>,
        fetch_now: Option<&str>,
        parent: Option<std::sync::Arc<str>>,
    ) {
        self.send(writer::Command::Want(Box::new(writer::Wanted {
            request: request.clone(),
            interval,
            running: running.cloned(),
            fetch_now: fetch_now.map(str::to_owned),
            parent,
        })));
    }

    fn send(&self, command: writer::Command) {
        // Fails only once the runtime that ran the writer has shut down.
        let _ = self.inner.commands.send(command);
    }
}

/// Probes and clock shortcuts for tests: what the engine holds, and time passing on
/// demand instead of waiting through the minimum interval.
#[cfg(any(test, feature = "test-support"))]
impl Fetcher {
    /// Git jobs (running, waiting for a worker).
    pub fn git_load(&self) -> (usize, usize) {
        self.inner.git_slots.load()
    }

    /// Bytes of the snapshots held in memory now.
    pub fn snapshot_bytes(&self) -> u64 {
        read(&self.inner.state).snapshot_bytes
    }

    /// Jobs waiting for room in the snapshot budget before they fetch.
    pub fn jobs_waiting_for_room(&self) -> u64 {
        read(&self.inner.state).waiting_for_room
    }

    /// Remote fetches that went to the network so far (git ref listings and HTTP GETs).
    pub fn network_fetches(&self) -> u64 {
        self.inner.network_fetches.load(Ordering::SeqCst)
    }

    /// Treats every remote as due: the next lookup fetches again. What time passing does;
    /// tests use it instead of sleeping through the 10 s minimum interval.
    pub async fn expire(&self) {
        self.ask(|done| writer::Command::Expire { done }).await;
    }

    /// Forgets every request not asked for within `max_age`, as the periodic sweep does
    /// after a few intervals. Tests use it instead of waiting for the intervals to pass.
    pub async fn forget_unasked(&self, max_age: Duration) {
        self.ask(|done| writer::Command::Forget { max_age, done })
            .await;
    }

    /// Requests and snapshots held in memory.
    pub fn tracked(&self) -> (usize, usize) {
        let state = read(&self.inner.state);
        let requests = state.remotes.values().map(|r| r.requests.len()).sum();
        (requests, state.snapshots.len())
    }
}

/// The engine's state as readers see it.
fn read(state: &RwLock<State>) -> RwLockReadGuard<'_, State> {
    state
        .read()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The engine's state as the writer changes it (nowhere else).
fn write(state: &RwLock<State>) -> RwLockWriteGuard<'_, State> {
    state
        .write()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl SourceView for Fetcher {
    fn state(
        &self,
        request: &SourceRequest,
        interval: Duration,
        running: Option<&Revision>,
    ) -> SourceState {
        self.read(request, interval, running)
    }

    fn token(&self, request: &SourceRequest, token: &str) -> Refresh {
        let state = read(&self.inner.state);
        if let Some(remote) = state.remotes.get(&request.remote_key()) {
            if remote.refresh.handled.iter().any(|t| t == token) {
                return Refresh::Handled;
            }
            if remote.refresh.started.contains(token) {
                return Refresh::Pending;
            }
        }
        // Refused before any job (credentials not allowed): nothing will run for it, and
        // the refusal itself is the answer.
        if look::binding_refusal(request).is_some() {
            return Refresh::Handled;
        }
        Refresh::Pending
    }
}

impl Sources for Fetcher {
    fn want(&self, interest: &Interest) {
        self.ask_for(
            &interest.request,
            interest.interval,
            interest.running.as_ref(),
            interest.fetch_now.as_deref(),
            interest.parent.clone(),
        );
        if interest.behind {
            // Another replica may run a newer copy: this one's is refreshed now, as
            // often as pushes are at most.
            self.ask_for(&interest.request, PUSH_SPACING, None, None, None);
        }
    }

    /// Marks every remote of `repository` pushed: each idle one past the push spacing
    /// is fetched now, the others when the spacing has passed.
    fn pushed(&self, repository: &str) -> usize {
        let remotes = read(&self.inner.state)
            .remotes
            .values()
            .filter(|remote| remote.is_of(repository))
            .count();
        self.send(writer::Command::Push {
            repository: repository.to_owned(),
        });
        remotes
    }

    fn register_metrics(&self, registry: &mut prometheus_client::registry::Registry) {
        self.inner.metrics.register(registry);
        let inner = self.inner.clone();
        registry.register_collector(Box::new(super::metrics::EngineGaugesFn(move || {
            let (snapshot_bytes, reserved, waiting) = {
                let state = read(&inner.state);
                (state.snapshot_bytes, state.reserved, state.waiting_for_room)
            };
            super::metrics::Gauges {
                cache_bytes: inner.cache_bytes.load(Ordering::SeqCst),
                snapshot_bytes,
                snapshot_room: (reserved, waiting),
                git_jobs: inner.git_slots.load(),
                remote_series: inner.metrics.remote_series(),
            }
        })));
    }
}

impl Fetcher {
    /// Asks for `request` as a parent running `running` does, and reads it.
    #[cfg(test)]
    pub fn lookup_holding(
        &self,
        request: &SourceRequest,
        interval: Duration,
        running: Option<&Revision>,
    ) -> SourceState {
        self.ask_for(request, interval, running, None, None);
        self.read(request, interval, running)
    }

    /// Asks for a fetch now for `token` and tells where it stands.
    pub fn refresh(&self, request: &SourceRequest, interval: Duration, token: &str) -> Refresh {
        if self.token(request, token) == Refresh::Handled {
            return Refresh::Handled;
        }
        self.ask_for(request, interval, None, Some(token), None);
        self.token(request, token)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::path::Path;

    use super::*;

    #[test]
    fn the_parents_that_wait_on_a_remote_are_those_that_asked_lately() {
        let mut remote = RemoteEntry::default();
        let start = Instant::now();
        let minute = Duration::from_secs(60);
        let (a, b): (std::sync::Arc<str>, std::sync::Arc<str>) =
            ("team-a/web".into(), "team-b/api".into());
        remote.heard_from(&a, start, minute);
        remote.heard_from(&b, start, minute);
        remote.heard_from(&a, start + minute, minute);
        assert_eq!(remote.waiting_parents(start + minute, minute), 2);
        // b has been silent for three intervals; a asked again since.
        let later = start + minute * 3 + Duration::from_secs(1);
        assert_eq!(remote.waiting_parents(later, minute), 1);
    }
    use crate::source::{Credentials, Location};

    /// A repository on disk with one commit per call, read through `file://`.
    struct Repo {
        dir: tempfile::TempDir,
    }

    impl Repo {
        fn new() -> Repo {
            let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("temp dir: {e}"));
            git2::Repository::init(dir.path()).unwrap_or_else(|e| panic!("init: {e}"));
            Repo { dir }
        }

        fn url(&self) -> String {
            format!("file://{}", self.dir.path().display())
        }

        fn commit(&self, path: &str, text: &str) {
            let repo = git2::Repository::open(self.dir.path()).unwrap_or_else(|e| panic!("{e}"));
            let file = self.dir.path().join(path);
            std::fs::create_dir_all(file.parent().unwrap_or(Path::new(".")))
                .unwrap_or_else(|e| panic!("{e}"));
            std::fs::write(&file, text).unwrap_or_else(|e| panic!("{e}"));
            let mut index = repo.index().unwrap_or_else(|e| panic!("{e}"));
            index
                .add_path(Path::new(path))
                .unwrap_or_else(|e| panic!("{e}"));
            index.write().unwrap_or_else(|e| panic!("{e}"));
            let tree = repo
                .find_tree(index.write_tree().unwrap_or_else(|e| panic!("{e}")))
                .unwrap_or_else(|e| panic!("{e}"));
            let who = git2::Signature::now("t", "t@example.com").unwrap_or_else(|e| panic!("{e}"));
            let parent = repo.head().ok().and_then(|h| h.peel_to_commit().ok());
            let parents: Vec<&git2::Commit<'_>> = parent.iter().collect();
            repo.commit(Some("HEAD"), &who, &who, "c", &tree, &parents)
                .unwrap_or_else(|e| panic!("{e}"));
        }
    }

    fn fetcher(cache: &Path) -> Fetcher {
        fetcher_within(cache, super::DEFAULT_SNAPSHOT_BUDGET_BYTES)
    }

    /// An engine reading `file://` remotes, holding snapshots within `budget` bytes.
    fn fetcher_within(cache: &Path, budget: u64) -> Fetcher {
        let policy = Policy {
            extra_schemes: BTreeSet::from(["file".to_owned()]),
            allow_private_addresses: true,
            ..Policy::default()
        };
        start(FetcherSettings {
            snapshot_budget_bytes: budget,
            ..settings(policy, cache)
        })
    }

    /// The test binary cannot be re-executed as a worker; the integration tests run
    /// real workers.
    fn settings(policy: Policy, cache: &Path) -> FetcherSettings {
        FetcherSettings::new(
            policy,
            cache.to_owned(),
            crate::source::worker::spawn::Isolation::InProcess,
        )
    }

    fn start(settings: FetcherSettings) -> Fetcher {
        Fetcher::start(settings).unwrap_or_else(|e| panic!("fetcher: {e}"))
    }

    fn request(url: &str, path: &str) -> SourceRequest {
        SourceRequest {
            tls: None,
            location: Location::Git {
                url: url.to_owned(),
                reference: None,
                path: path.to_owned(),
            },
            namespace: "team-a".to_owned(),
            credentials: None,
        }
    }

    const HOUR: Duration = Duration::from_secs(3600);

    #[tokio::test]
    async fn one_fetch_serves_every_path_of_a_remote_and_waits_for_its_interval() {
        let repo = Repo::new();
        repo.commit("a.env", "A=1\n");
        repo.commit("b.env", "B=1\n");
        let cache = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let sources = fetcher(cache.path());
        let (a, b) = (request(&repo.url(), "a.env"), request(&repo.url(), "b.env"));
        assert!(
            sources.lookup(&a, HOUR).pending,
            "the first lookup starts a fetch"
        );
        assert!(sources.lookup(&b, HOUR).pending);
        sources.idle().await;
        assert!(sources.lookup(&a, HOUR).snapshot.is_some());
        // A path asked for while the remote was being fetched is read from the cached
        // repository on its next lookup, without going to the network again.
        let _ = sources.lookup(&b, HOUR);
        sources.idle().await;
        assert!(sources.lookup(&b, HOUR).snapshot.is_some());
        assert_eq!(sources.network_fetches(), 1);
        let before = sources.network_fetches();
        // Within the interval nothing is fetched; once it has passed, the remote is.
        repo.commit("a.env", "A=2\n");
        assert!(!sources.lookup(&a, HOUR).pending);
        assert_eq!(sources.network_fetches(), before);
        sources.expire().await;
        let _ = sources.lookup(&a, HOUR);
        sources.idle().await;
        let fresh = sources.lookup(&a, HOUR);
        let text = fresh
            .snapshot
            .as_ref()
            .and_then(|s| s.files.get("a.env").cloned());
        assert_eq!(text, Some(crate::source::Content::Text("A=2\n".to_owned())));
        assert_eq!(sources.network_fetches(), before + 1);
    }

    #[tokio::test]
    async fn a_copy_counts_as_newer_than_what_runs_only_once_fetched_after_hearing_of_it() {
        let repo = Repo::new();
        repo.commit("a.env", "A=1\n");
        let cache = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let sources = fetcher(cache.path());
        let a = request(&repo.url(), "a.env");
        let _ = sources.lookup(&a, HOUR);
        sources.idle().await;
        let held = sources.lookup(&a, HOUR);
        let revision = held
            .snapshot
            .map(|s| s.revision.clone())
            .unwrap_or_default();
        assert!(sources.state(&a, HOUR, Some(&revision)).after_running);
        // A parent runs a revision this engine never fetched (another replica did):
        // the copy here was fetched before the engine heard of it.
        let elsewhere = &Revision::new("HEAD@sha1:0123456789abcdef0123456789abcdef01234567");
        assert!(
            !sources
                .lookup_holding(&a, HOUR, Some(elsewhere))
                .after_running
        );
        assert!(!sources.state(&a, HOUR, Some(elsewhere)).after_running);
        // The next fetch started after that: its copy is at least as new.
        sources.expire().await;
        let _ = sources.lookup_holding(&a, HOUR, Some(elsewhere));
        sources.idle().await;
        assert!(sources.state(&a, HOUR, Some(elsewhere)).after_running);
    }

    #[test]
    fn a_running_job_is_awaited_until_it_has_stored_this_requests_result() {
        let started = Some(Instant::now());
        let network = RemoteEntry {
            started,
            in_flight: true,
            in_flight_network: true,
            ..RemoteEntry::default()
        };
        let failed = SnapshotEntry {
            error: Some(FetchError::HostRefused {
                host: "127.0.0.1".into(),
                why: "loopback".into(),
            }),
            answered_by: started,
            ..SnapshotEntry::default()
        };
        let earlier = SnapshotEntry {
            answered_by: started.map(|s| s - Duration::from_secs(1)),
            ..failed.clone()
        };
        assert!(SnapshotEntry::awaits(None, &network));
        assert!(SnapshotEntry::awaits(Some(&earlier), &network));
        // The failure is in; the job has yet to clear its mark.
        assert!(!SnapshotEntry::awaits(Some(&failed), &network));
        let reading = RemoteEntry {
            in_flight_network: false,
            ..network
        };
        // A job that reads new paths only changes requests with nothing to show.
        assert!(SnapshotEntry::awaits(Some(&earlier), &reading));
        assert!(!SnapshotEntry::awaits(None, &RemoteEntry::default()));
    }

    #[tokio::test]
    async fn a_failed_fetch_keeps_the_last_snapshot_and_says_why() {
        let repo = Repo::new();
        repo.commit("a.env", "A=1\n");
        let cache = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let sources = fetcher(cache.path());
        let wanted = request(&repo.url(), "a.env");
        let _ = sources.lookup(&wanted, HOUR);
        sources.idle().await;
        let good = sources.lookup(&wanted, HOUR).snapshot;
        assert!(good.is_some());
        // The repository goes away: the next fetch fails, the snapshot stays.
        let moved = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        std::fs::rename(repo.dir.path(), moved.path().join("gone"))
            .unwrap_or_else(|e| panic!("{e}"));
        sources.expire().await;
        let _ = sources.lookup(&wanted, HOUR);
        sources.idle().await;
        let after = sources.lookup(&wanted, HOUR);
        assert_eq!(after.snapshot, good);
        assert!(after.error.is_some(), "{after:?}");
    }

    #[tokio::test]
    async fn different_credentials_never_share_a_snapshot() {
        let repo = Repo::new();
        repo.commit("a.env", "A=1\n");
        let cache = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let sources = fetcher(cache.path());
        let anonymous = request(&repo.url(), "a.env");
        let _ = sources.lookup(&anonymous, HOUR);
        sources.idle().await;
        assert!(sources.lookup(&anonymous, HOUR).snapshot.is_some());
        let with_token = SourceRequest {
            credentials: Some(Credentials {
                token: Some("other tenant".to_owned()),
                binding: crate::source::binding::Binding::read("t", None, Some(&repo.url())),
                ..Credentials::default()
            }),
            ..anonymous.clone()
        };
        let theirs = sources.lookup(&with_token, HOUR);
        assert!(theirs.snapshot.is_none() && theirs.pending, "{theirs:?}");
    }

    /// A repository with three ~100 KiB files, a cache directory, and a request for each.
    fn three_100k_files() -> (Repo, tempfile::TempDir, Vec<SourceRequest>) {
        let repo = Repo::new();
        let big = "X=".to_owned() + &"y".repeat(100 * 1024) + "\n";
        for name in ["a.env", "b.env", "c.env"] {
            repo.commit(name, &big);
        }
        let cache = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let wanted = ["a.env", "b.env", "c.env"]
            .iter()
            .map(|path| request(&repo.url(), path))
            .collect();
        (repo, cache, wanted)
    }

    #[tokio::test]
    async fn snapshots_stay_within_their_budget_and_are_read_again_only_when_needed() {
        let (_repo, cache, wanted) = three_100k_files();
        let sources = fetcher_within(cache.path(), 250 * 1024);
        let mut revisions = Vec::new();
        for one in &wanted {
            let _ = sources.lookup(one, HOUR);
            sources.idle().await;
            let state = sources.lookup(one, HOUR);
            let snapshot = state
                .snapshot
                .unwrap_or_else(|| panic!("{:?}", state.error));
            revisions.push(snapshot.revision.clone());
            assert!(
                sources.snapshot_bytes() <= 250 * 1024,
                "{}",
                sources.snapshot_bytes()
            );
        }
        // "a" was asked for least recently and went.
        let fetches = sources.network_fetches();
        let holding = sources.lookup_holding(&wanted[0], HOUR, Some(&revisions[0]));
        assert!(
            holding.snapshot.is_none() && holding.error.is_none() && !holding.pending,
            "a parent that runs the revision is answered without reading it again: {holding:?}"
        );
        // A parent that does not hold it gets it read again (from the cached repository).
        assert!(sources.lookup(&wanted[0], HOUR).pending);
        sources.idle().await;
        assert!(sources.lookup(&wanted[0], HOUR).snapshot.is_some());
        assert_eq!(
            sources.network_fetches(),
            fetches,
            "read from the cache, not fetched"
        );
        assert!(sources.snapshot_bytes() <= 250 * 1024);
    }

    #[tokio::test]
    async fn what_is_made_of_a_snapshot_weighs_in_the_budget() {
        let (_repo, cache, wanted) = three_100k_files();
        let budget = 250 * 1024;
        let sources = fetcher_within(cache.path(), budget);
        let _ = sources.lookup(&wanted[0], HOUR);
        sources.idle().await;
        let a = sources.lookup(&wanted[0], HOUR).snapshot;
        let a = a.unwrap_or_else(|| panic!("a was not fetched"));
        let alone = sources.snapshot_bytes();
        let key = crate::source::derived::DerivedKey {
            step: "conversion",
            inputs: [0; 32],
        };
        let weigh = |s: &String| s.len() as u64;
        let _ = a.derived.remember(key, weigh, || "c".repeat(100 * 1024));
        drop(a);
        // Counted from a's next lookup on, once the writer has applied it.
        let _ = sources.lookup(&wanted[0], HOUR);
        sources.idle().await;
        assert_eq!(sources.snapshot_bytes(), alone + 100 * 1024 + 128);
        // b does not fit beside a and its conversion (200 KiB and more): a, delivered and
        // least recently asked, is let go with what was made of it.
        let _ = sources.lookup(&wanted[1], HOUR);
        sources.idle().await;
        let b = sources.lookup(&wanted[1], HOUR);
        assert!(b.snapshot.is_some(), "{:?}", b.error);
        let held = sources.snapshot_bytes();
        assert!(
            held < 200 * 1024,
            "a and its conversion are still held: {held}"
        );
    }

    #[tokio::test]
    async fn a_job_waits_for_room_until_parents_take_what_is_held() {
        let (_repo, cache, wanted) = three_100k_files();
        let policy = Policy {
            extra_schemes: BTreeSet::from(["file".to_owned()]),
            allow_private_addresses: true,
            limits: crate::source::policy::SourceLimits {
                config_bytes: 110 * 1024,
                ..Default::default()
            },
            ..Policy::default()
        };
        let budget = 150 * 1024;
        let sources = start(FetcherSettings {
            snapshot_budget_bytes: budget,
            ..settings(policy, cache.path())
        });
        let _ = sources.lookup(&wanted[0], HOUR);
        sources.idle().await;
        assert!(sources.snapshot_bytes() > 100 * 1024, "a is held");
        // a is held and not yet delivered: b's read (up to 110 KiB) would not fit.
        let _ = sources.lookup(&wanted[1], HOUR);
        let deadline = Instant::now() + Duration::from_secs(60);
        while sources.jobs_waiting_for_room() == 0 {
            assert!(Instant::now() < deadline, "b's job never waited for room");
            tokio::task::yield_now().await;
        }
        assert!(sources.snapshot_bytes() <= budget);
        // a's parent takes it; b's job goes ahead, and a (delivered) is let go for b.
        let a = sources.lookup(&wanted[0], HOUR);
        assert!(a.snapshot.is_some(), "a was let go before it was delivered");
        sources.idle().await;
        assert_eq!(sources.jobs_waiting_for_room(), 0);
        assert!(
            sources.snapshot_bytes() <= budget,
            "{}",
            sources.snapshot_bytes()
        );
        let b = sources.lookup(&wanted[1], HOUR);
        assert!(b.snapshot.is_some(), "{:?}", b.error);
    }
}
