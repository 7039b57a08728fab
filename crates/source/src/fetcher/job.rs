//! One job: fetch a remote once (git in a worker, or one HTTP GET), then refresh every
//! request that shares it and account for what it brought.

use std::sync::Arc;
use std::time::Instant;

use super::Inner;
use super::command::{Command, Results};
use super::leases::{Repo, Rooms, Turn};
use super::state::{Ended, JobPlan, Pool};
use crate::worker::{Fetched, GitJob, Read, WorkerLimits, failed_reads};
use crate::{FetchError, Location, SourceRequest, git, http};

pub(super) struct Job {
    inner: Arc<Inner>,
    plan: JobPlan,
    rooms: Rooms,
    /// Tells the writer the job ended however it ends (a panic included), so a remote
    /// can never be stuck with a job that no longer runs.
    guard: EndGuard,
}

struct EndGuard {
    inner: Arc<Inner>,
    ended: Option<Ended>,
}

impl Drop for EndGuard {
    fn drop(&mut self) {
        if let Some(ended) = self.ended.take() {
            let _ = self.inner.commands.send(Command::Finished(ended));
        }
    }
}

/// Paths one worker reads at most (each within the config size limit): a worker's memory
/// follows one batch, however many paths parents name on one remote. Further paths are
/// read from the commit already fetched, by further workers, without the network.
const READS_PER_WORKER: usize = 8;

/// Reads `batch` from the `resolved` commit in a worker of its own. A batch that ends the
/// worker (its memory limit) is read again path by path, so one parent's oversized path
/// fails that parent alone.
async fn read_known(
    isolation: &crate::worker::spawn::Isolation,
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
        crate::worker::spawn::run(isolation, job)
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
    pub(super) fn new(inner: Arc<Inner>, plan: JobPlan) -> Job {
        let ended = Ended {
            remote_key: plan.remote_key.clone(),
            job: plan.job,
            resolved: None,
            network: false,
            commit_from: None,
            went_to_network: false,
        };
        Job {
            rooms: Rooms::of(plan.job),
            guard: EndGuard {
                inner: inner.clone(),
                ended: Some(ended),
            },
            inner,
            plan,
        }
    }

    pub(super) async fn run(mut self) {
        let started = Instant::now();
        let (outcomes, resolved) = match self.plan.requests.first().map(|r| r.location.clone()) {
            Some(Location::Git {
                url,
                reference,
                semver,
                ..
            }) => self.run_git(url, reference, semver).await,
            Some(Location::Http { url }) => {
                let results = self.run_http(&url).await;
                (results, None)
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
        let waiting_parents = self.inner.store.read().waiting_parents(
            &self.plan.remote_key,
            Instant::now(),
            self.plan.interval,
        );
        let waiting_namespaces = self.namespaces().len();
        for error in outcomes.iter().flatten() {
            failures += 1;
            reasons.push(error.reason());
            // The message quotes the remote; it goes into the log escaped.
            let error = crate::log_text::Escaped(error);
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
        if let Some(request) = self.plan.requests.first() {
            let kind = match request.location {
                Location::Git { .. } => "git",
                Location::Http { .. } => "http",
            };
            let remote = crate::remote_label(request.location.url());
            let remote = crate::log_text::bounded(&remote);
            self.inner.metrics.job(
                kind,
                &remote,
                started.elapsed().as_secs_f64(),
                self.plan.interval.as_secs(),
                &outcomes,
            );
        }
        let duration_ms = started.elapsed().as_millis() as u64;
        if failures == 0 {
            tracing::info!(
                network = self.plan.use_network,
                requests,
                duration_ms,
                "source fetched"
            );
        } else {
            tracing::warn!(
                network = self.plan.use_network,
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
            remote_key: self.plan.remote_key.clone(),
            job: self.plan.job,
            commit_from: self.plan.commit_from,
            results,
        });
        outcomes
    }

    /// Tells the writer the job ended, with the commit it resolved.
    fn finish(mut self, resolved: Option<git::Resolved>) {
        if let Some(ended) = &mut self.guard.ended {
            ended.resolved = resolved;
            ended.network = self.plan.use_network;
            ended.commit_from = self.plan.commit_from;
        }
    }

    /// The job asks the remote now.
    fn went_to_network(&mut self) {
        if let Some(ended) = &mut self.guard.ended {
            ended.went_to_network = true;
        }
    }

    async fn run_git(
        &mut self,
        url: String,
        reference: Option<String>,
        semver: Option<String>,
    ) -> (Vec<Option<FetchError>>, Option<git::Resolved>) {
        let inner = self.inner.clone();
        let requests = &self.plan.requests;
        let credentials = requests.iter().find_map(|r| r.credentials.clone());
        let tls = requests.iter().find_map(|r| r.tls.clone());
        let reads = self.reads();
        if let Err(refusal) = inner.refuse_cache_url(&url) {
            return (self.store(failed_reads(&reads, &refusal)), None);
        }
        let dir = git::repo_dir(
            &inner.cache_dir,
            &url,
            credentials.as_ref(),
            tls.as_ref(),
            &inner.disk_key,
        );
        let settings = &inner.settings;
        // A turn at a worker first (fair between namespaces), then the repository.
        let _turn = Turn::take(&inner, Pool::Git, self.plan.job, self.namespaces()).await;
        let room = self
            .rooms
            .reserve(&inner, reads.len().min(READS_PER_WORKER))
            .await;
        let known = self
            .plan
            .resolved
            .clone()
            .filter(|_| !self.plan.use_network);
        let downloading = known.is_none();
        let mut repo = Repo::take(&inner, self.plan.job, dir.clone(), downloading).await;
        if downloading {
            self.went_to_network();
        }
        let mut first = reads;
        let rest = first.split_off(READS_PER_WORKER.min(first.len()));
        let job = GitJob {
            repo_dir: dir.clone(),
            url,
            reference,
            semver,
            credentials,
            tls,
            policy: (*inner.policy).clone(),
            known,
            reads: first,
            limits: self.worker_limits(settings.worker_memory_bytes),
        };
        let isolation = &settings.isolation;
        let outcome = crate::worker::spawn::run(isolation, job.clone()).await;
        let mut outcomes = self.store(outcome.results);
        drop(room);
        outcomes.extend(
            self.read_rest(isolation, &job, &outcome.resolved, &rest)
                .await,
        );
        if let Ok(resolved) = &outcome.resolved {
            crate::disk::touch(&resolved.repo_dir);
            if resolved.downloaded {
                repo.downloaded();
            }
        }
        drop(repo);
        (outcomes, outcome.resolved.ok())
    }

    /// The paths beyond the first worker's, read batch by batch from the commit it
    /// resolved (or failed as it failed), each batch stored as it comes once what the
    /// last ones brought has been delivered or let go.
    async fn read_rest(
        &mut self,
        isolation: &crate::worker::spawn::Isolation,
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
            let room = self.rooms.reserve(&self.inner, batch.len()).await;
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
        self.plan
            .requests
            .iter()
            .map(|request| Read {
                key: request.key(),
                path: match &request.location {
                    Location::Git { path, .. } => path.clone(),
                    Location::Http { .. } => String::new(),
                },
                current: self.plan.current.get(&request.key()).cloned(),
                verify: match &request.location {
                    Location::Git { verify, .. } => verify.clone(),
                    Location::Http { .. } => None,
                },
            })
            .collect()
    }

    /// The namespaces of the parents sharing this job: it may run under any of them.
    fn namespaces(&self) -> Vec<String> {
        let mut namespaces: Vec<String> = self
            .plan
            .requests
            .iter()
            .map(|r| r.namespace.clone())
            .collect();
        namespaces.sort();
        namespaces.dedup();
        namespaces
    }

    /// Fetches the one file and stores what it brought for each request, within room
    /// reserved for it until stored.
    async fn run_http(&mut self, url: &str) -> Vec<Option<FetchError>> {
        let inner = self.inner.clone();
        let _turn = Turn::take(&inner, Pool::Http, self.plan.job, self.namespaces()).await;
        let room = self.rooms.reserve(&inner, 1).await;
        self.went_to_network();
        let requests = &self.plan.requests;
        let credentials = requests.iter().find_map(|r| r.credentials.clone());
        let tls = requests.iter().find_map(|r| r.tls.clone());
        // A source with certificates of its own gets a client of its own; the rest share one.
        let own_client = tls
            .as_ref()
            .map(|tls| http::client(inner.policy.clone(), Some(tls)));
        let credentials = credentials.as_ref();
        let result = match own_client {
            Some(Err(error)) => Err(error),
            Some(Ok(client)) => {
                http::fetch(&client, &inner.policy, url, credentials, tls.as_ref()).await
            }
            None => http::fetch(&inner.client, &inner.policy, url, credentials, None).await,
        };
        let results = requests
            .iter()
            .map(|r| {
                let outcome = match &result {
                    Ok(snapshot) if self.plan.current.get(&r.key()) == Some(&snapshot.revision) => {
                        Fetched::Unchanged
                    }
                    Ok(snapshot) => Fetched::Fresh(snapshot.clone()),
                    Err(error) => Fetched::Failed(error.clone()),
                };
                (r.key(), outcome)
            })
            .collect();
        let stored = self.store(results);
        drop(room);
        stored
    }
}

/// The span a job runs in: everything it logs (failures, the fetch summary) carries its
/// remote.
pub(super) fn span(request: &SourceRequest) -> tracing::Span {
    let (url, reference) = match &request.location {
        Location::Git {
            url,
            reference,
            semver,
            ..
        } => (
            url.as_str(),
            semver
                .as_deref()
                .map(|range| format!("semver {range}"))
                .or_else(|| reference.clone()),
        ),
        Location::Http { url } => (url.as_str(), None),
    };
    tracing::info_span!(
        "fetch",
        remote = %crate::log_text::Escaped(&crate::log_text::bounded(&crate::redact_url(url))),
        r#ref = reference.as_deref().unwrap_or(""),
        credentials = request.credentials.is_some() || request.tls.is_some(),
    )
}
