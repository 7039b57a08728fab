//! The background writer of the source cache. `lookup` never waits: it answers from the
//! cache and, when a remote has not been fetched within the asked interval, starts one
//! job for it. A job fetches the remote once (git: list refs, download only a new
//! commit; HTTP: one GET) and then refreshes every request that shares it. A failed job
//! records its error next to the last good snapshot, which stays in use.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::policy::Policy;
use super::{FetchError, Location, SourceRequest, SourceState, Sources, git, http};

#[derive(Default)]
struct RemoteEntry {
    requests: HashMap<String, SourceRequest>,
    started: Option<Instant>,
    in_flight: bool,
    /// The last commit fetched (git), so a new path can be read without the network.
    resolved: Option<git::Resolved>,
}

#[derive(Default, Clone)]
struct SnapshotEntry {
    snapshot: Option<Arc<super::Snapshot>>,
    error: Option<FetchError>,
}

#[derive(Default)]
struct State {
    remotes: HashMap<String, RemoteEntry>,
    snapshots: HashMap<String, SnapshotEntry>,
}

struct Inner {
    policy: Arc<Policy>,
    cache_dir: PathBuf,
    client: reqwest::Client,
    state: Mutex<State>,
    /// Serialises git work per cache repository (libgit2 locks refs on disk).
    repo_locks: Mutex<HashMap<PathBuf, Arc<Mutex<()>>>>,
    network_fetches: AtomicU64,
    runtime: tokio::runtime::Handle,
}

/// Cheap to clone; all clones share one cache.
#[derive(Clone)]
pub struct Fetcher {
    inner: Arc<Inner>,
}

impl Fetcher {
    /// Must be called inside a Tokio runtime: jobs are spawned on it.
    pub fn new(policy: Policy, cache_dir: PathBuf) -> Result<Fetcher, FetchError> {
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| {
            FetchError::Other("the source fetcher needs a Tokio runtime".to_owned())
        })?;
        let policy = Arc::new(policy);
        Ok(Fetcher {
            inner: Arc::new(Inner {
                client: http::client(policy.clone())?,
                policy,
                cache_dir,
                state: Mutex::new(State::default()),
                repo_locks: Mutex::new(HashMap::new()),
                network_fetches: AtomicU64::new(0),
                runtime,
            }),
        })
    }

    /// Remote fetches that went to the network so far (git ref listings and HTTP GETs).
    pub fn network_fetches(&self) -> u64 {
        self.inner.network_fetches.load(Ordering::SeqCst)
    }

    /// Treats every remote as due: the next lookup fetches again. What time passing does;
    /// tests use it instead of sleeping through the 10 s minimum interval.
    pub fn expire(&self) {
        for remote in lock(&self.inner.state).remotes.values_mut() {
            remote.started = None;
        }
    }

    /// Waits until no job is running (for `render`, which prints the settled answer).
    pub async fn idle(&self) {
        loop {
            let busy = lock(&self.inner.state)
                .remotes
                .values()
                .any(|r| r.in_flight);
            if !busy {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Sources for Fetcher {
    fn lookup(&self, request: &SourceRequest, interval: Duration) -> SourceState {
        let key = request.key();
        let remote_key = request.remote_key();
        let mut state = lock(&self.inner.state);
        let known = state.snapshots.get(&key).cloned();
        let remote = state.remotes.entry(remote_key.clone()).or_default();
        remote.requests.insert(key, request.clone());
        let stale = remote
            .started
            .is_none_or(|started| started.elapsed() >= interval);
        let unknown = known.is_none();
        if !remote.in_flight && (stale || unknown) {
            remote.in_flight = true;
            // A fresh remote with a new path only needs reading, not another fetch.
            let use_network = stale || remote.resolved.is_none();
            if use_network {
                remote.started = Some(Instant::now());
            }
            let job = Job {
                inner: self.inner.clone(),
                remote_key,
                requests: remote.requests.values().cloned().collect(),
                use_network,
                resolved: remote.resolved.clone(),
            };
            self.inner.runtime.spawn(job.run());
        }
        let pending = state
            .remotes
            .values()
            .any(|r| r.in_flight && r.requests.contains_key(&request.key()));
        let known = known.unwrap_or_default();
        SourceState {
            snapshot: known.snapshot,
            error: known.error,
            pending,
        }
    }
}

struct Job {
    inner: Arc<Inner>,
    remote_key: String,
    requests: Vec<SourceRequest>,
    use_network: bool,
    resolved: Option<git::Resolved>,
}

type Results = Vec<(String, Result<super::Snapshot, FetchError>)>;

impl Job {
    async fn run(self) {
        let started = Instant::now();
        let (results, resolved) = match self.requests.first().map(|r| r.location.clone()) {
            Some(Location::Git { url, reference, .. }) => self.run_git(url, reference).await,
            Some(Location::Http { url }) => (self.run_http(&url).await, None),
            None => (Vec::new(), None),
        };
        let failures = results.iter().filter(|(_, r)| r.is_err()).count();
        tracing::info!(remote = %redact(&self.remote_key), network = self.use_network, requests = results.len(), failures, duration_ms = started.elapsed().as_millis() as u64, "source fetched");
        let mut state = lock(&self.inner.state);
        for (key, result) in results {
            let entry = state.snapshots.entry(key).or_default();
            match result {
                Ok(snapshot) => {
                    entry.snapshot = Some(Arc::new(snapshot));
                    entry.error = None;
                }
                Err(error) => entry.error = Some(error),
            }
        }
        if let Some(remote) = state.remotes.get_mut(&self.remote_key) {
            remote.in_flight = false;
            if resolved.is_some() {
                remote.resolved = resolved;
            }
        }
    }

    async fn run_git(
        &self,
        url: String,
        reference: Option<String>,
    ) -> (Results, Option<git::Resolved>) {
        let inner = self.inner.clone();
        let requests = self.requests.clone();
        let use_network = self.use_network;
        let known = self.resolved.clone();
        let credentials = requests.iter().find_map(|r| r.credentials.clone());
        let work = move || {
            let dir = git::repo_dir(&inner.cache_dir, &url);
            let repo_lock = lock(&inner.repo_locks).entry(dir).or_default().clone();
            let _guard = lock(&repo_lock);
            let resolved = match known.filter(|_| !use_network) {
                Some(resolved) => Ok(resolved),
                None => {
                    inner.network_fetches.fetch_add(1, Ordering::SeqCst);
                    git::fetch(
                        &inner.cache_dir,
                        &url,
                        reference.as_deref(),
                        credentials.as_ref(),
                        &inner.policy,
                    )
                }
            };
            let results = requests
                .iter()
                .map(|request| {
                    let path = match &request.location {
                        Location::Git { path, .. } => path.as_str(),
                        Location::Http { .. } => "",
                    };
                    let snapshot = resolved
                        .clone()
                        .and_then(|r| git::extract(&r, path, &inner.policy));
                    (request.key(), snapshot)
                })
                .collect::<Results>();
            (results, resolved.ok())
        };
        match tokio::task::spawn_blocking(work).await {
            Ok(done) => done,
            Err(join_error) => {
                let error = FetchError::Other(format!("the git fetch aborted: {join_error}"));
                (
                    self.requests
                        .iter()
                        .map(|r| (r.key(), Err(error.clone())))
                        .collect(),
                    None,
                )
            }
        }
    }

    async fn run_http(&self, url: &str) -> Results {
        self.inner.network_fetches.fetch_add(1, Ordering::SeqCst);
        let credentials = self.requests.iter().find_map(|r| r.credentials.clone());
        let result = http::fetch(
            &self.inner.client,
            &self.inner.policy,
            url,
            credentials.as_ref(),
        )
        .await;
        self.requests
            .iter()
            .map(|r| (r.key(), result.clone()))
            .collect()
    }
}

/// Remote keys hold URLs, which may embed user:password; logs get them without.
fn redact(remote_key: &str) -> String {
    remote_key
        .split('|')
        .map(|part| match url::Url::parse(part) {
            Ok(mut url) if url.password().is_some() || !url.username().is_empty() => {
                let _ = url.set_password(None);
                let _ = url.set_username("");
                url.to_string()
            }
            _ => part.to_owned(),
        })
        .collect::<Vec<_>>()
        .join("|")
}
