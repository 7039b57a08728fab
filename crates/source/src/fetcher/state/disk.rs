//! The on-disk git cache as the writer keeps it: which repositories jobs hold (git work
//! on one is serialised, since libgit2 locks refs on disk, and a held one is never
//! evicted), how many jobs may download, and the cache's size when last measured.
//!
//! Before a job that may download, its reservation and every running download's, plus
//! the cache as last measured, must fit under the cap. Least recently used repositories
//! are evicted to make room; when the rest are in use, the job waits for running
//! downloads to end (up to a deadline; a lone download always starts), so the cache
//! overshoots the cap by at most one reservation. While an eviction runs no repository is
//! handed out, so none is removed under a job.

use std::collections::{HashMap, HashSet, VecDeque};
use std::path::PathBuf;
use std::time::Instant;

use tokio::sync::oneshot;

use super::{JobId, State};

/// A job asks for the cache repository `dir` (and, with `download`, for disk to
/// download into), until `give_up` for the disk.
pub(in crate::fetcher) struct RepoWanted {
    pub(in crate::fetcher) job: JobId,
    pub(in crate::fetcher) dir: PathBuf,
    pub(in crate::fetcher) download: bool,
    pub(in crate::fetcher) give_up: Instant,
    pub(in crate::fetcher) granted: oneshot::Sender<()>,
}

/// Repositories to remove, least recently used first, until the cache is within `max`
/// bytes, never one in `keep`.
#[derive(Debug)]
pub(in crate::fetcher) struct Eviction {
    pub(in crate::fetcher) max: u64,
    pub(in crate::fetcher) keep: HashSet<PathBuf>,
}

struct Waiter {
    wanted: RepoWanted,
    /// An eviction already ran to make room for this job.
    evicted_for: bool,
}

#[derive(Default)]
pub(super) struct DiskCache {
    /// Each repository held, and the job holding it.
    held: HashMap<PathBuf, JobId>,
    /// Jobs holding a download reservation.
    downloads: HashSet<JobId>,
    /// The cache's size when last measured.
    pub(super) bytes: u64,
    waiting: VecDeque<Waiter>,
    evicting: bool,
    /// An eviction asked for while another ran (the lowest cap asked).
    evict_next: Option<u64>,
}

impl DiskCache {
    pub(super) fn measured(bytes: u64) -> DiskCache {
        DiskCache {
            bytes,
            ..DiskCache::default()
        }
    }

    pub(super) fn waiting(&self) -> usize {
        self.waiting.len()
    }

    /// What an eviction to `max` must leave: held repositories, and those jobs wait for.
    fn eviction(&mut self, max: u64) -> Eviction {
        self.evicting = true;
        let mut keep: HashSet<PathBuf> = self.held.keys().cloned().collect();
        keep.extend(self.waiting.iter().map(|w| w.wanted.dir.clone()));
        Eviction { max, keep }
    }
}

impl State {
    /// Disk kept free for each git job that may download: a pack at the download limit
    /// and its index.
    pub(super) fn reservation(&self) -> u64 {
        self.settings.download_bytes + 16 * 1024 * 1024
    }

    /// A job asks for a repository.
    pub(in crate::fetcher) fn want_repo(&mut self, wanted: RepoWanted) {
        self.disk.waiting.push_back(Waiter {
            wanted,
            evicted_for: false,
        });
    }

    /// Hands repositories to the jobs waiting for them, in order; returns an eviction to
    /// run first when a download does not fit.
    pub(in crate::fetcher) fn grant_repos(&mut self, now: Instant) -> Option<Eviction> {
        if self.disk.evicting {
            return None;
        }
        let (reservation, max) = (self.reservation(), self.settings.cache_max_bytes);
        let disk = &mut self.disk;
        let mut still = VecDeque::with_capacity(disk.waiting.len());
        let mut eviction = None;
        while let Some(mut waiter) = disk.waiting.pop_front() {
            let wanted = &waiter.wanted;
            if wanted.granted.is_closed() {
                continue;
            }
            if eviction.is_some() || disk.held.contains_key(&wanted.dir) {
                still.push_back(waiter);
                continue;
            }
            if wanted.download {
                let running = disk.downloads.len() as u64;
                let reserved = (running + 1).saturating_mul(reservation);
                let over = disk.bytes.saturating_add(reserved) > max;
                if over && !waiter.evicted_for {
                    waiter.evicted_for = true;
                    still.push_back(waiter);
                    eviction = Some(max.saturating_sub(reserved));
                    continue;
                }
                if over && running > 0 && now < wanted.give_up {
                    still.push_back(waiter);
                    continue;
                }
            }
            let RepoWanted {
                job,
                dir,
                download,
                granted,
                ..
            } = waiter.wanted;
            if granted.send(()).is_ok() {
                disk.held.insert(dir, job);
                if download {
                    disk.downloads.insert(job);
                }
            }
        }
        disk.waiting = still;
        eviction.map(|max| disk.eviction(max))
    }

    /// Job `job` lets its repository go, or no longer wants it (having downloaded into
    /// it when `downloaded`): after a download, the cache is brought back under its cap,
    /// leaving room for the downloads still running.
    pub(in crate::fetcher) fn repo_released(
        &mut self,
        job: JobId,
        dir: &PathBuf,
        downloaded: bool,
    ) -> Option<Eviction> {
        let reservation = self.reservation();
        let disk = &mut self.disk;
        if disk.held.get(dir) == Some(&job) {
            disk.held.remove(dir);
        }
        disk.waiting.retain(|w| w.wanted.job != job);
        disk.downloads.remove(&job);
        if !downloaded {
            return None;
        }
        let running = disk.downloads.len() as u64;
        let max = self
            .settings
            .cache_max_bytes
            .saturating_sub(running.saturating_mul(reservation));
        if disk.evicting {
            disk.evict_next = Some(disk.evict_next.map_or(max, |next| next.min(max)));
            return None;
        }
        let mut eviction = disk.eviction(max);
        eviction.keep.insert(dir.clone());
        Some(eviction)
    }

    /// An eviction removed `removed` and left `left` bytes: what was resolved in the
    /// removed repositories is gone (`left`: None when it ended unmeasured). Returns the eviction asked for meanwhile, if any.
    pub(in crate::fetcher) fn evicted(
        &mut self,
        removed: &[PathBuf],
        left: Option<u64>,
    ) -> Option<Eviction> {
        if let Some(left) = left {
            self.disk.bytes = left;
        }
        self.disk.evicting = false;
        for remote in self.remotes.values_mut() {
            let gone = remote.commit.as_ref();
            if gone.is_some_and(|c| removed.contains(&c.resolved.repo_dir)) {
                remote.commit = None;
            }
        }
        let next = self.disk.evict_next.take()?;
        Some(self.disk.eviction(next))
    }
}
