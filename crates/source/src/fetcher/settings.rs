//! What the source engine starts with: every setting in one value, with defaults, so
//! nothing is changed once jobs run.

use std::path::PathBuf;

use crate::policy::Policy;
use crate::worker::WorkerLimits;
use crate::worker::spawn::Isolation;

/// Default cap of the on-disk git cache.
pub const DEFAULT_CACHE_MAX_BYTES: u64 = 1024 * 1024 * 1024;
/// Default bytes of fetched snapshots held in memory.
pub const DEFAULT_SNAPSHOT_BUDGET_BYTES: u64 = 96 * 1024 * 1024;
/// Default number of git fetch workers running at once.
pub const DEFAULT_WORKERS: usize = 8;
/// Default number of those one namespace may use.
pub const DEFAULT_WORKERS_PER_NAMESPACE: usize = 2;

/// The engine's settings, made by [`FetcherSettings::builder`]: every value is in range
/// once built, so nothing is checked, or changed, once jobs run. Checks that need the
/// machine (the cache directory, a runtime) happen when the engine starts
/// ([`super::Fetcher::start`]).
#[derive(Debug, Clone)]
pub struct FetcherSettings {
    /// What may be fetched, from where and how much.
    pub(super) policy: Policy,
    /// Where git repositories are kept between fetches (and across restarts).
    pub(super) cache_dir: PathBuf,
    /// How git jobs run: worker processes (or, in the engine's unit tests, threads).
    pub(super) isolation: Isolation,
    /// Git workers at once (at least one).
    pub(super) workers: usize,
    /// Git workers one namespace may use at once (at least one, at most `workers`).
    pub(super) workers_per_namespace: usize,
    /// Address-space limit of each worker.
    pub(super) worker_memory_bytes: u64,
    /// Bytes the git cache may hold on disk.
    pub(super) cache_max_bytes: u64,
    /// Bytes the snapshots held in memory may take together.
    pub(super) snapshot_budget_bytes: u64,
    /// Push receivers listen: parents are asked to sync again within this many seconds,
    /// so a push is seen then whatever their interval.
    pub(super) push_resync_seconds: Option<u64>,
    /// Remotes with their own metric series at most.
    pub(super) max_remote_series: usize,
}

/// Builds [`FetcherSettings`] from the defaults; [`SettingsBuilder::build`] brings every
/// value into range, so it cannot fail.
#[derive(Debug, Clone)]
#[must_use]
pub struct SettingsBuilder(FetcherSettings);

impl FetcherSettings {
    /// The defaults, with git jobs run as `isolation` says; change any with the builder's
    /// methods.
    pub fn builder(policy: Policy, cache_dir: PathBuf, isolation: Isolation) -> SettingsBuilder {
        SettingsBuilder(FetcherSettings {
            policy,
            cache_dir,
            isolation,
            workers: DEFAULT_WORKERS,
            workers_per_namespace: DEFAULT_WORKERS_PER_NAMESPACE,
            worker_memory_bytes: WorkerLimits::DEFAULT_MEMORY_BYTES,
            cache_max_bytes: DEFAULT_CACHE_MAX_BYTES,
            snapshot_budget_bytes: DEFAULT_SNAPSHOT_BUDGET_BYTES,
            push_resync_seconds: None,
            max_remote_series: crate::metrics::MAX_REMOTE_SERIES,
        })
    }

    /// What may be fetched, from where and how much.
    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// Git workers at once.
    pub fn workers(&self) -> usize {
        self.workers
    }

    /// Git workers one namespace may use at once.
    pub fn workers_per_namespace(&self) -> usize {
        self.workers_per_namespace
    }
}

impl SettingsBuilder {
    /// Git workers at once (0 counts as 1).
    pub fn workers(mut self, workers: usize) -> SettingsBuilder {
        self.0.workers = workers;
        self
    }

    /// Git workers one namespace may use at once (brought between 1 and `workers`).
    pub fn workers_per_namespace(mut self, workers: usize) -> SettingsBuilder {
        self.0.workers_per_namespace = workers;
        self
    }

    /// Address-space limit of each worker.
    pub fn worker_memory_bytes(mut self, bytes: u64) -> SettingsBuilder {
        self.0.worker_memory_bytes = bytes;
        self
    }

    /// Bytes the git cache may hold on disk.
    pub fn cache_max_bytes(mut self, bytes: u64) -> SettingsBuilder {
        self.0.cache_max_bytes = bytes;
        self
    }

    /// Bytes the snapshots held in memory may take together.
    pub fn snapshot_budget_bytes(mut self, bytes: u64) -> SettingsBuilder {
        self.0.snapshot_budget_bytes = bytes;
        self
    }

    /// Push receivers listen: parents sync again within `seconds` (none: they do not).
    pub fn push_resync_seconds(mut self, seconds: Option<u64>) -> SettingsBuilder {
        self.0.push_resync_seconds = seconds;
        self
    }

    /// Remotes with their own metric series at most.
    pub fn max_remote_series(mut self, remotes: usize) -> SettingsBuilder {
        self.0.max_remote_series = remotes;
        self
    }

    /// The settings, every count in range.
    pub fn build(self) -> FetcherSettings {
        let mut settings = self.0;
        settings.workers = settings.workers.max(1);
        settings.workers_per_namespace = settings.workers_per_namespace.clamp(1, settings.workers);
        settings
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_out_of_range_are_brought_into_it() {
        let builder = || {
            FetcherSettings::builder(
                Policy::default(),
                PathBuf::from("/cache"),
                Isolation::InProcess,
            )
        };
        let none = builder().workers(0).workers_per_namespace(0).build();
        assert_eq!((none.workers(), none.workers_per_namespace()), (1, 1));
        let more = builder().workers(3).workers_per_namespace(5).build();
        assert_eq!((more.workers(), more.workers_per_namespace()), (3, 3));
        let defaults = builder().build();
        assert_eq!(
            (defaults.workers(), defaults.workers_per_namespace()),
            (DEFAULT_WORKERS, DEFAULT_WORKERS_PER_NAMESPACE)
        );
    }
}
