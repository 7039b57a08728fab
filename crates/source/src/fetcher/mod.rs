//! The source engine. Lookups never wait: they read what the engine holds. What calls,
//! push receivers and jobs ask for goes to one writer task as messages ([`command`]),
//! which alone changes the state ([`state`]): it records interests and, when a remote
//! has not been fetched within the asked interval, starts one job for it. A job fetches
//! the remote once (git: list refs, download only a new commit; HTTP: one GET) and then
//! refreshes every request that shares it. A failed job records its error next to the
//! last good snapshot, which stays in use.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::policy::Policy;
use super::{
    FetchError, Interest, Refresh, Revision, SourceRequest, SourceState, SourceView, Sources, http,
};

mod cache_dir;
mod command;
mod job;
mod leases;
mod settings;
mod state;
mod store;
mod writer;

use command::Command;
pub use settings::{
    DEFAULT_CACHE_MAX_BYTES, DEFAULT_SNAPSHOT_BUDGET_BYTES, DEFAULT_WORKERS,
    DEFAULT_WORKERS_PER_NAMESPACE, FetcherSettings, SettingsBuilder,
};
use state::{PUSH_SPACING, State, Wanted};

/// What every job and the writer share, none of it changed once the engine runs: the
/// engine's state is reached through `store` (read-only) and changed by messages to
/// the writer (`commands`).
struct Inner {
    policy: Arc<Policy>,
    cache_dir: std::path::PathBuf,
    client: super::client::HttpClient,
    store: store::Store,
    commands: command::Commands,
    runtime: tokio::runtime::Handle,
    settings: FetcherSettings,
    /// Keys the on-disk repositories by credential holder; kept in the cache directory
    /// so that a restarted server finds its repositories again.
    disk_key: [u8; 32],
    metrics: super::metrics::SourceMetrics,
}

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
        let runtime =
            tokio::runtime::Handle::try_current().map_err(|_| FetchError::EngineFailed {
                detail: "it was started outside a Tokio runtime".to_owned(),
            })?;
        let disk_key = super::disk::key(&settings.cache_dir)?;
        // What a restarted server's cache already holds (nothing is removed here).
        let (_, cached_bytes) =
            super::disk::enforce_cap(&settings.cache_dir.join("git"), u64::MAX, |_| None::<()>);
        let policy = Arc::new(settings.policy.clone());
        let limits = state::Limits {
            snapshot_budget_bytes: settings.snapshot_budget_bytes,
            cache_max_bytes: settings.cache_max_bytes,
            download_bytes: policy.limits.download_bytes,
            push_resync_seconds: settings.push_resync_seconds,
            workers: settings.workers,
            workers_per_namespace: settings.workers_per_namespace,
        };
        let (writes, store) = store::split(State::new(limits, cached_bytes));
        let (commands, received) = command::channel();
        let inner = Arc::new(Inner {
            client: http::client(policy.clone(), None)?,
            policy,
            cache_dir: settings.cache_dir.clone(),
            store,
            commands,
            runtime,
            disk_key,
            metrics: super::metrics::SourceMetrics::new(settings.max_remote_series),
            settings,
        });
        let writer = writer::Writer::new(Arc::downgrade(&inner), writes, received);
        inner.runtime.spawn(writer.run());
        Ok(Fetcher { inner })
    }

    /// Waits until everything asked so far is applied and no job runs (for `render`,
    /// which prints the settled answer).
    pub async fn idle(&self) {
        self.ask(|done| Command::Idle { done }).await;
    }

    /// Sends `command` to the writer and waits for its answer (at once when the writer
    /// has gone with the runtime).
    async fn ask(&self, command: impl FnOnce(tokio::sync::oneshot::Sender<()>) -> Command) {
        let (done, answered) = tokio::sync::oneshot::channel();
        if self.inner.commands.send(command(done)).is_ok() {
            let _ = answered.await;
        }
    }

    /// Records that a parent asked for `request` (see [`state::Wanted`]).
    fn ask_for(
        &self,
        request: &SourceRequest,
        interval: Duration,
        running: Option<&Revision>,
        fetch_now: Option<&str>,
        parent: Option<Arc<str>>,
    ) {
        self.send(Command::Want(Box::new(Wanted {
            request: request.clone(),
            interval,
            running: running.cloned(),
            fetch_now: fetch_now.map(str::to_owned),
            parent,
        })));
    }

    fn send(&self, command: Command) {
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
        self.inner.store.read().git_load()
    }

    /// Bytes of the snapshots held in memory now.
    pub fn snapshot_bytes(&self) -> u64 {
        self.inner.store.read().gauges().0
    }

    /// Jobs waiting for room in the snapshot budget before they fetch.
    pub fn jobs_waiting_for_room(&self) -> u64 {
        self.inner.store.read().gauges().2
    }

    /// Remote fetches that went to the network so far (git ref listings and HTTP GETs),
    /// counted as their jobs end.
    pub fn network_fetches(&self) -> u64 {
        self.inner.store.read().network_fetches()
    }

    /// Treats every remote as due: the next lookup fetches again. What time passing does;
    /// tests use it instead of sleeping through the 10 s minimum interval.
    pub async fn expire(&self) {
        self.ask(|done| Command::Expire { done }).await;
    }

    /// Forgets every request not asked for within `max_age`, as the periodic sweep does
    /// after a few intervals. Tests use it instead of waiting for the intervals to pass.
    pub async fn forget_unasked(&self, max_age: Duration) {
        self.ask(|done| Command::Forget { max_age, done }).await;
    }

    /// Requests and snapshots held in memory.
    pub fn tracked(&self) -> (usize, usize) {
        self.inner.store.read().tracked()
    }
}

impl SourceView for Fetcher {
    fn state(
        &self,
        request: &SourceRequest,
        interval: Duration,
        running: Option<&Revision>,
    ) -> SourceState {
        self.inner
            .store
            .read()
            .answer(request, Instant::now(), interval, running)
    }

    fn token(&self, request: &SourceRequest, token: &str) -> Refresh {
        self.inner.store.read().token(request, token)
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
        let remotes = self.inner.store.read().remotes_of(repository);
        self.send(Command::Push {
            repository: repository.to_owned(),
        });
        remotes
    }

    fn register_metrics(&self, registry: &mut prometheus_client::registry::Registry) {
        self.inner.metrics.register(registry);
        let inner = self.inner.clone();
        registry.register_collector(Box::new(super::metrics::EngineGaugesFn(move || {
            let (snapshot_bytes, reserved, waiting, cache_bytes) = inner.store.read().gauges();
            super::metrics::Gauges {
                cache_bytes,
                snapshot_bytes,
                snapshot_room: (reserved, waiting),
                git_jobs: inner.store.read().git_load(),
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
        self.state(request, interval, running)
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

    use crate::{Credentials, Location};

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
        start(
            settings(policy, cache)
                .snapshot_budget_bytes(budget)
                .build(),
        )
    }

    /// The test binary cannot be re-executed as a worker; the integration tests run
    /// real workers.
    fn settings(policy: Policy, cache: &Path) -> SettingsBuilder {
        FetcherSettings::builder(
            policy,
            cache.to_owned(),
            crate::worker::spawn::Isolation::InProcess,
        )
    }

    fn start(settings: FetcherSettings) -> Fetcher {
        Fetcher::start(settings).unwrap_or_else(|e| panic!("fetcher: {e}"))
    }

    pub(super) fn request(url: &str, path: &str) -> SourceRequest {
        SourceRequest {
            tls: None,
            location: Location::Git {
                url: url.to_owned(),
                reference: None,
                semver: None,
                verify: None,
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
        assert_eq!(text, Some(crate::Content::Text("A=2\n".to_owned())));
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
                binding: crate::binding::Binding::read("t", None, Some(&repo.url())),
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
        let key = crate::derived::DerivedKey {
            step: "conversion",
            inputs: [0; 32],
        };
        let weigh = |s: &String| s.len() as u64;
        let _ = a.derived.keep(key, "c".repeat(100 * 1024), weigh);
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
            limits: crate::policy::SourceLimits {
                config_bytes: 110 * 1024,
                ..Default::default()
            },
            ..Policy::default()
        };
        let budget = 150 * 1024;
        let sources = start(
            settings(policy, cache.path())
                .snapshot_budget_bytes(budget)
                .build(),
        );
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
