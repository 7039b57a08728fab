//! Git work in a process of its own. libgit2 does what a remote makes it do: inflate a
//! gigabyte blob, resolve a delta chain, hold a connection that trickles a byte every
//! two seconds. None of that can be bounded from inside the server, so every git job
//! runs in a worker: the server re-executes its own binary as `metahooks source-worker`,
//! hands it the job on stdin and reads the outcome from stdout. The worker caps its own
//! address space, CPU time and file sizes before it touches the repository ([`child`]),
//! and the server kills it at the job's deadline ([`spawn`]). Whatever the remote does,
//! the server's memory, threads and sockets are back where they were when the job ends.

pub mod child;
pub mod spawn;

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::git::Pick;
use super::policy::Policy;
use super::{Credentials, FetchError, Snapshot, git};

/// The hidden subcommand that runs one job.
pub const SUBCOMMAND: &str = "source-worker";

/// One git job: list the remote (or reuse a known commit) and read every asked path.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GitJob {
    /// The cache repository (already keyed by URL and credentials).
    pub repo_dir: PathBuf,
    /// The repository URL.
    pub url: String,
    /// Branch, tag or commit (None: the remote's HEAD).
    pub reference: Option<String>,
    /// A semver range: its highest tag is fetched instead of `reference`.
    #[serde(default)]
    pub semver: Option<String>,
    /// Credentials, already checked against the URL by the fetcher.
    pub credentials: Option<Credentials>,
    /// CA and client certificate of the source, already checked against the URL.
    #[serde(default)]
    pub tls: Option<super::tls::TlsMaterial>,
    /// The fetch policy (schemes, addresses, limits).
    pub policy: Policy,
    /// Read from this commit without the network (a new path of a fresh remote).
    pub known: Option<git::Resolved>,
    /// The paths to read.
    pub reads: Vec<Read>,
    /// What the worker may use.
    pub limits: WorkerLimits,
}

/// One path to read for one cache key.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Read {
    /// The request's cache key.
    pub key: crate::SourceKey,
    /// File or directory in the repository.
    pub path: String,
    /// The revision the request already has (nothing is read again for it).
    pub current: Option<crate::Revision>,
    /// The keys the commit's (or tag's) signature must verify with, if any.
    #[serde(default)]
    pub verify: Option<crate::signature::TrustedKeys>,
}

/// What one worker may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerLimits {
    /// Address space (RLIMIT_AS), which bounds its resident memory too.
    pub memory_bytes: u64,
    /// Wall-clock time of the job; the worker is killed at it.
    pub timeout_ms: u64,
}

impl WorkerLimits {
    /// The default address-space limit of a worker: what an honest fetch at the default
    /// download limit needs (measured: a 64 MiB pack peaks near 40 MiB resident with the
    /// mapped-window limits the worker sets), with room to spare.
    pub const DEFAULT_MEMORY_BYTES: u64 = 160 * 1024 * 1024;
}

/// What the job learnt for one read.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum Fetched {
    /// New content.
    Fresh(Snapshot),
    /// The same commit as the snapshot already held: nothing was read again.
    Unchanged,
    /// Why this read failed.
    Failed(FetchError),
}

/// The job's result: the commit (or why none), and each read's outcome by key.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GitOutcome {
    /// The resolved commit.
    pub resolved: Result<git::Resolved, FetchError>,
    /// Each read's outcome, by cache key.
    pub results: Vec<(crate::SourceKey, Fetched)>,
}

impl GitOutcome {
    /// Every read failed with `error`.
    pub fn failed(job: &GitJob, error: FetchError) -> GitOutcome {
        GitOutcome {
            results: failed_reads(&job.reads, &error),
            resolved: Err(error),
        }
    }
}

/// Every one of `reads` failed with `error`.
pub fn failed_reads(reads: &[Read], error: &FetchError) -> Vec<(crate::SourceKey, Fetched)> {
    reads
        .iter()
        .map(|read| (read.key.clone(), Fetched::Failed(error.clone())))
        .collect()
}

/// Runs the job here, blocking: what the worker process does, and what the in-process
/// mode of the engine's own unit tests does.
pub fn run(job: &GitJob) -> GitOutcome {
    let deadline =
        std::time::Instant::now() + std::time::Duration::from_millis(job.limits.timeout_ms);
    let resolved = match &job.known {
        Some(known) => Ok(known.clone()),
        None => git::fetch(
            &job.repo_dir,
            &job.url,
            Pick::from_job(job.reference.as_deref(), job.semver.as_deref()),
            job.credentials.as_ref(),
            job.tls.as_ref(),
            &job.policy,
            deadline,
        ),
    };
    let results = job
        .reads
        .iter()
        .map(|read| {
            let outcome = match &resolved {
                Err(error) => Fetched::Failed(error.clone()),
                Ok(r) if read.current.as_deref() == Some(r.revision().as_str()) => {
                    Fetched::Unchanged
                }
                Ok(r) => match read_checked(r, read, &job.policy, deadline) {
                    Ok(snapshot) => Fetched::Fresh(snapshot),
                    Err(error) => Fetched::Failed(error),
                },
            };
            (read.key.clone(), outcome)
        })
        .collect();
    GitOutcome { resolved, results }
}

/// Reads one path of the resolved commit, after checking its signatures when the read
/// asks for it: nothing of a commit that fails is read.
fn read_checked(
    resolved: &git::Resolved,
    read: &Read,
    policy: &Policy,
    deadline: std::time::Instant,
) -> Result<Snapshot, FetchError> {
    let signed_by = match &read.verify {
        Some(keys) => git::verify(resolved, keys)?,
        None => Vec::new(),
    };
    let mut snapshot = git::extract(resolved, &read.path, policy, deadline)?;
    snapshot.signed_by = signed_by;
    Ok(snapshot)
}
