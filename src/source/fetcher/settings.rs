//! What the source engine starts with: every setting in one value, with defaults, so
//! nothing is changed once jobs run.

use std::path::PathBuf;

use crate::source::policy::Policy;
use crate::source::worker::WorkerLimits;
use crate::source::worker::spawn::Isolation;

/// Default cap of the on-disk git cache.
pub const DEFAULT_CACHE_MAX_BYTES: u64 = 1024 * 1024 * 1024;
/// Default bytes of fetched snapshots held in memory.
pub const DEFAULT_SNAPSHOT_BUDGET_BYTES: u64 = 96 * 1024 * 1024;
/// Default number of git fetch workers running at once.
pub const DEFAULT_WORKERS: usize = 8;
/// Default number of those one namespace may use.
pub const DEFAULT_WORKERS_PER_NAMESPACE: usize = 2;

/// The engine's settings; [`FetcherSettings::new`] gives the defaults, and a struct
/// update changes any of them. Checks that need the machine (the cache directory, a
/// runtime) happen when the engine starts ([`super::Fetcher::start`]).
#[derive(Debug, Clone)]
pub struct FetcherSettings {
    /// What may be fetched, from where and how much.
    pub policy: Policy,
    /// Where git repositories are kept between fetches (and across restarts).
    pub cache_dir: PathBuf,
    /// How git jobs run: worker processes (or, in the engine's unit tests, threads).
    pub isolation: Isolation,
    /// Git workers at once.
    pub workers: usize,
    /// Git workers one namespace may use at once.
    pub workers_per_namespace: usize,
    /// Address-space limit of each worker.
    pub worker_memory_bytes: u64,
    /// Bytes the git cache may hold on disk.
    pub cache_max_bytes: u64,
    /// Bytes the snapshots held in memory may take together.
    pub snapshot_budget_bytes: u64,
    /// Push receivers listen: parents are asked to sync again within this many seconds,
    /// so a push is seen then whatever their interval.
    pub push_resync_seconds: Option<u64>,
    /// Remotes with their own metric series at most.
    pub max_remote_series: usize,
}

impl FetcherSettings {
    /// The defaults, with git jobs run as `isolation` says.
    pub fn new(policy: Policy, cache_dir: PathBuf, isolation: Isolation) -> FetcherSettings {
        FetcherSettings {
            policy,
            cache_dir,
            isolation,
            workers: DEFAULT_WORKERS,
            workers_per_namespace: DEFAULT_WORKERS_PER_NAMESPACE,
            worker_memory_bytes: WorkerLimits::DEFAULT_MEMORY_BYTES,
            cache_max_bytes: DEFAULT_CACHE_MAX_BYTES,
            snapshot_budget_bytes: DEFAULT_SNAPSHOT_BUDGET_BYTES,
            push_resync_seconds: None,
            max_remote_series: crate::source::metrics::MAX_REMOTE_SERIES,
        }
    }
}
