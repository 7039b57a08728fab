//! One job: fetch a remote once (git in a worker, or one HTTP GET), then refresh every
//! request that shares it and account for what it brought.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::Inner;
use super::budget;
use super::writer::{Command, Ended};
use crate::source::worker::{Fetched, GitJob, Read, WorkerLimits, failed_reads};
use crate::source::{FetchError, Location, RemoteKey, SourceKey, SourceRequest, git, http};

pub(super) struct Job {
    pub(super) inner: Arc<Inner>,
    /// Clears the remote's in-flight mark however the job ends (a panic included), so a
    /// remote can never be stuck "in flight" with no job behind it.
    pub(super) guard: InFlight,
    pub(super) remote_key: RemoteKey,
    pub(super) requests: Vec<SourceRequest>,
    pub(super) use_network: bool,
    pub(super) resolved: Option<git::Resolved>,
    /// When the network fetch whose commit this job reads started (this job's own start
    /// when it asks the remote).
    pub(super) commit_from: Option<Instant>,
    /// Revisions of the snapshots the requests already have (key → revision).
    pub(super) current: HashMap<SourceKey, crate::source::Revision>,
    /// The shortest poll period of the remote's requests (for the metrics' alerting).
    pub(super) interval: Duration,
}

pub(super) struct InFlight {
    inner: Arc<Inner>,
    remote_key: RemoteKey,
    /// Cleared when the job ends normally and says so itself.
    armed: bool,
}

impl InFlight {
    pub(super) fn new(inner: Arc<Inner>, remote_key: &RemoteKey) -> InFlight {
        InFlight {
            inner,
            remote_key: remote_key.clone(),
            armed: true,
        }
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if self.armed {
            let _ = self.inner.commands.send(Command::Finished(Ended {
                remote_key: self.remote_key.clone(),
                resolved: None,
                network: false,
                commit_from: None,
            }));
        }
    }
}

pub(super) type Results = Vec<(SourceKey, Fetched)>;

/// Paths one worker reads at most (each within the config size limit): a worker's memory
/// follows one batch, however many paths parents name on one remote. Further paths are
/// read from the commit already fetched, by further workers, without the network.
const READS_PER_WORKER: usize = 8;

/// Reads `batch` from the `resolved` commit in a worker of its own. A batch that ends the
/// worker (its memory limit) is read again path by path, so one parent's oversized path
/// fails that parent alone.
async fn read_known(
    isolation: &crate::source::worker::spawn::Isolation,
    template: &GitJob,
    resolved: &git::Resolved,
    batch: &[Read],
) -> Results {
    let run = |reads: Vec<Read>| {
        let job = GitJob {
            known: Some(resolved.clone()),
            reads,
            ..template.clone()
        };
        crate::source::worker::spawn::run(isolation, job)
    };
    let outcome = run(batch.to_vec()).await;
    let ended_worker = matches!(outcome.resolved, Err(FetchError::MemoryLimit { .. }));
    if !ended_worker || batch.len() == 1 {
        return outcome.results;
    }
    let mut results = Results::with_capacity(batch.len());
    for read in batch {
        results.extend(run(vec![read.clone()]).await.results);
    }
    results
}

impl Job {
    pub(super) async fn run(self) {
        let started = Instant::now();
        let (outcomes, resolved) = match self.requests.first().map(|r| r.location.clone()) {
            Some(Location::Git { url, reference, .. }) => self.run_git(url, reference).await,
            Some(Location::Http { url }) => {
                let (results, room) = self.run_http(&url).await;
                let stored = self.store(results);
                drop(room);
                (stored, None)
            }
            None => (Vec::new(), None),
        };
        self.report(&outcomes, started);
        self.finish(resolved);
    }

    /// The job's metrics and its log line (each failure logged with its reason).
    fn report(&self, outcomes: &[Option<FetchError>], started: Instant) {
        let mut failures = 0;
        let mut reasons: Vec<&'static str> = Vec::new();
        // Who waits on the fetch: the parents that asked for the remote lately, and their
        // namespaces.
        let waiting_parents = super::read(&self.inner.state)
            .remotes
            .get(&self.remote_key)
            .map_or(0, |remote| {
                remote.waiting_parents(Instant::now(), self.interval)
            });
        let waiting_namespaces = self.namespaces().len();
        for error in outcomes.iter().flatten() {
            failures += 1;
            reasons.push(error.reason());
            // The message quotes the remote; it goes into the log escaped.
            let error = crate::telemetry::Escaped(error);
            tracing::warn!(
                reason = error.0.reason(),
                error = %error,
                waiting_parents,
                waiting_namespaces,
                "source fetch failed"
            );
        }
        reasons.sort_unstable();
        reasons.dedup();
        let requests = outcomes.len();
        let outcomes: Vec<Option<&FetchError>> = outcomes.iter().map(Option::as_ref).collect();
        if let Some(request) = self.requests.first() {
            let kind = match request.location {
                Location::Git { .. } => "git",
                Location::Http { .. } => "http",
            };
            let remote = crate::source::remote_label(request.location.url());
            let remote = crate::telemetry::bounded(&remote);
            self.inner.metrics.job(
                kind,
                &remote,
                started.elapsed().as_secs_f64(),
                self.interval.as_secs(),
                &outcomes,
            );
        }
        let duration_ms = started.elapsed().as_millis() as u64;
        if failures == 0 {
            tracing::info!(
                network = self.use_network,
                requests,
                duration_ms,
                "source fetched"
            );
        } else {
            tracing::warn!(
                network = self.use_network,
                requests,
                failures,
                reasons = reasons.join(","),
                duration_ms,
                "source fetch failed for some requests"
            );
        }
    }

    /// Hands what the job brought to the writer, as it arrives (so a parent can take
    /// its snapshot before the job ends, and the budget can let go of delivered ones);
    /// returns each read's outcome (None: fine).
    fn store(&self, results: Results) -> Vec<Option<FetchError>> {
        let outcomes = results
            .iter()
            .map(|(_, result)| match result {
                Fetched::Failed(error) => Some(error.clone()),
                Fetched::Fresh(_) | Fetched::Unchanged => None,
            })
            .collect();
        let _ = self.inner.commands.send(Command::Stored {
            remote_key: self.remote_key.clone(),
            commit_from: self.commit_from,
            results,
        });
        outcomes
    }

    /// Tells the writer the job ended, with the commit it resolved.
    fn finish(mut self, resolved: Option<git::Resolved>) {
        self.guard.armed = false;
        let _ = self.inner.commands.send(Command::Finished(Ended {
            remote_key: self.remote_key.clone(),
            resolved,
            network: self.use_network,
            commit_from: self.commit_from,
        }));
    }

    async fn run_git(
        &self,
        url: String,
        reference: Option<String>,
    ) -> (Vec<Option<FetchError>>, Option<git::Resolved>) {
        let inner = &self.inner;
        let credentials = self.requests.iter().find_map(|r| r.credentials.clone());
        let tls = self.requests.iter().find_map(|r| r.tls.clone());
        let reads = self.reads();
        if let Err(refusal) = inner.refuse_cache_url(&url) {
            return (self.store(failed_reads(&reads, &refusal)), None);
        }
        let fingerprint = holder_fingerprint(credentials.as_ref(), tls.as_ref(), &inner.disk_key);
        let dir = git::repo_dir(&inner.cache_dir, &url, &fingerprint);
        let settings = &inner.settings;
        // A turn at a worker first (fair between namespaces), then the repository.
        let _slot = inner.git_slots.acquire(self.namespaces()).await;
        let room = budget::reserve(&self.inner, reads.len().min(READS_PER_WORKER)).await;
        let repo_guard = inner.repo_lock(&dir).lock_owned().await;
        let known = self.resolved.clone().filter(|_| !self.use_network);
        let downloading = known.is_none();
        if downloading {
            inner.network_fetches.fetch_add(1, Ordering::SeqCst);
            inner.reserve_disk(&dir).await;
        }
        let mut first = reads;
        let rest = first.split_off(READS_PER_WORKER.min(first.len()));
        let job = GitJob {
            repo_dir: dir.clone(),
            url,
            reference,
            credentials,
            tls,
            policy: (*inner.policy).clone(),
            known,
            reads: first,
            limits: self.worker_limits(settings.worker_memory_bytes),
        };
        let isolation = &settings.isolation;
        let outcome = crate::source::worker::spawn::run(isolation, job.clone()).await;
        if downloading {
            inner.downloads.fetch_sub(1, Ordering::SeqCst);
        }
        let mut outcomes = self.store(outcome.results);
        drop(room);
        outcomes.extend(
            self.read_rest(isolation, &job, &outcome.resolved, &rest)
                .await,
        );
        drop(repo_guard);
        if let Ok(resolved) = &outcome.resolved {
            self.account_for(resolved, &dir);
        }
        (outcomes, outcome.resolved.ok())
    }

    /// The paths beyond the first worker's, read batch by batch from the commit it
    /// resolved (or failed as it failed), each batch stored as it comes once what the
    /// last ones brought has been delivered or let go.
    async fn read_rest(
        &self,
        isolation: &crate::source::worker::spawn::Isolation,
        template: &GitJob,
        resolved: &Result<git::Resolved, FetchError>,
        rest: &[Read],
    ) -> Vec<Option<FetchError>> {
        let resolved = match resolved {
            Ok(resolved) => resolved,
            Err(error) => return self.store(failed_reads(rest, error)),
        };
        let mut outcomes = Vec::with_capacity(rest.len());
        for batch in rest.chunks(READS_PER_WORKER) {
            let room = budget::reserve(&self.inner, batch.len()).await;
            let results = read_known(isolation, template, resolved, batch).await;
            outcomes.extend(self.store(results));
            drop(room);
        }
        outcomes
    }

    /// What one worker of this job may use.
    fn worker_limits(&self, memory_bytes: u64) -> WorkerLimits {
        WorkerLimits {
            memory_bytes,
            timeout_ms: self
                .inner
                .policy
                .limits
                .timeout_seconds
                .saturating_mul(1000),
        }
    }

    /// What the worker reads for each request: its path, and the revision it has.
    fn reads(&self) -> Vec<Read> {
        self.requests
            .iter()
            .map(|request| Read {
                key: request.key(),
                path: match &request.location {
                    Location::Git { path, .. } => path.clone(),
                    Location::Http { .. } => String::new(),
                },
                current: self.current.get(&request.key()).cloned(),
            })
            .collect()
    }

    /// Marks the repository used and, after a download, brings the cache back under its
    /// cap (leaving room for the downloads still running).
    fn account_for(&self, resolved: &git::Resolved, dir: &std::path::Path) {
        let inner = &self.inner;
        crate::source::disk::touch(&resolved.repo_dir);
        if resolved.downloaded {
            let max = inner.settings.cache_max_bytes;
            let reserved = inner
                .downloads
                .load(Ordering::SeqCst)
                .saturating_mul(inner.reservation());
            inner.enforce_cache_cap(dir, max.saturating_sub(reserved));
        }
    }

    /// The namespaces of the parents sharing this job: it may run under any of them.
    fn namespaces(&self) -> Vec<String> {
        let mut namespaces: Vec<String> =
            self.requests.iter().map(|r| r.namespace.clone()).collect();
        namespaces.sort();
        namespaces.dedup();
        namespaces
    }

    /// The results, and the room they take in the snapshot budget until they are stored.
    async fn run_http(&self, url: &str) -> (Results, budget::Room) {
        let _slot = self.inner.http_slots.acquire(self.namespaces()).await;
        let room = budget::reserve(&self.inner, 1).await;
        self.inner.network_fetches.fetch_add(1, Ordering::SeqCst);
        let credentials = self.requests.iter().find_map(|r| r.credentials.clone());
        let tls = self.requests.iter().find_map(|r| r.tls.clone());
        // A source with certificates of its own gets a client of its own; the rest share one.
        let own_client = tls
            .as_ref()
            .map(|tls| http::client(self.inner.policy.clone(), Some(tls)));
        let (inner, credentials) = (&self.inner, credentials.as_ref());
        let result = match own_client {
            Some(Err(error)) => Err(error),
            Some(Ok(client)) => {
                http::fetch(&client, &inner.policy, url, credentials, tls.as_ref()).await
            }
            None => http::fetch(&inner.client, &inner.policy, url, credentials, None).await,
        };
        let results = self
            .requests
            .iter()
            .map(|r| {
                let outcome = match &result {
                    Ok(snapshot) if self.current.get(&r.key()) == Some(&snapshot.revision) => {
                        Fetched::Unchanged
                    }
                    Ok(snapshot) => Fetched::Fresh(snapshot.clone()),
                    Err(error) => Fetched::Failed(error.clone()),
                };
                (r.key(), outcome)
            })
            .collect();
        (results, room)
    }
}

/// Whose repository a fetch uses: each credential holder (and client certificate) has
/// its own, so objects one's access brought in are never served to another.
fn holder_fingerprint(
    credentials: Option<&crate::source::Credentials>,
    tls: Option<&crate::source::tls::TlsMaterial>,
    disk_key: &[u8; 32],
) -> String {
    let mut fingerprint = credentials
        .map(|c| c.fingerprint_with(disk_key))
        .unwrap_or_default();
    if let Some(tls) = tls {
        fingerprint.push('+');
        fingerprint.push_str(&tls.fingerprint());
    }
    fingerprint
}
