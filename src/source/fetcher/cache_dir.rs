//! How the fetcher keeps its on-disk cache in bounds: a `file://` URL may not read it,
//! and fetches reserve room before they write.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::Inner;
use crate::source::FetchError;
use crate::source::lock;

impl Inner {
    /// `file://` URLs may not read the cache itself (another tenant's repositories).
    pub(super) fn refuse_cache_url(&self, url: &str) -> Result<(), FetchError> {
        let Ok(parsed) = url::Url::parse(url) else {
            return Ok(());
        };
        if parsed.scheme() != "file" {
            return Ok(());
        }
        let Ok(path) = parsed.to_file_path() else {
            return Ok(());
        };
        let resolved = std::fs::canonicalize(&path).unwrap_or(path);
        let cache = std::fs::canonicalize(&self.cache_dir).unwrap_or(self.cache_dir.clone());
        if resolved.starts_with(&cache) {
            return Err(FetchError::PathRefused {
                path: resolved.display().to_string(),
                why: "it is inside the source cache".to_owned(),
            });
        }
        Ok(())
    }

    /// Disk kept free for each git job that may download: a pack at the download limit
    /// and its index.
    pub(super) fn reservation(&self) -> u64 {
        self.policy.limits.download_bytes + 16 * 1024 * 1024
    }

    /// Before a job that may download: its reservation and every running download's,
    /// plus the cache as last measured, must fit under the cap. Least recently used
    /// repositories are evicted to make room; when the rest are in use, the job waits for
    /// running downloads to end (up to a deadline; a lone download always starts), so the
    /// cache overshoots the cap by at most one reservation.
    pub(super) async fn reserve_disk(&self, current: &std::path::Path) {
        let give_up = Instant::now() + Duration::from_secs(self.policy.limits.timeout_seconds);
        loop {
            {
                let _reserving = lock(&self.reserving);
                let running = self.downloads.load(Ordering::SeqCst);
                let reserved = (running + 1).saturating_mul(self.reservation());
                let max = self.settings.cache_max_bytes;
                if self.cache_bytes.load(Ordering::SeqCst) + reserved > max {
                    self.enforce_cache_cap(current, max.saturating_sub(reserved));
                }
                let fits = self.cache_bytes.load(Ordering::SeqCst) + reserved <= max;
                if fits || running == 0 || Instant::now() >= give_up {
                    self.downloads.fetch_add(1, Ordering::SeqCst);
                    return;
                }
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// The lock of the cache repository at `dir`: git work on it is serialised
    /// (libgit2 locks refs on disk), and it is never evicted while held.
    pub(super) fn repo_lock(&self, dir: &std::path::Path) -> Arc<tokio::sync::Mutex<()>> {
        lock(&self.repo_locks)
            .entry(dir.to_owned())
            .or_default()
            .clone()
    }

    /// Evicts least recently used repositories beyond `max`, never `current` or one
    /// whose lock is held, and forgets what was resolved in the evicted ones.
    pub(super) fn enforce_cache_cap(&self, current: &std::path::Path, max: u64) {
        let git_dir = self.cache_dir.join("git");
        let (removed, left) = {
            let locks = lock(&self.repo_locks);
            // A repository is removed only while its lock is held here (or when no job
            // ever locked it); the map lock keeps new jobs from taking one meanwhile.
            crate::source::disk::enforce_cap(&git_dir, max, |dir| {
                if dir == current {
                    return None;
                }
                match locks.get(dir) {
                    None => Some(None),
                    Some(repo) => repo.try_lock().ok().map(Some),
                }
            })
        };
        self.cache_bytes.store(left, Ordering::SeqCst);
        if removed.is_empty() {
            return;
        }
        self.metrics.cache_evictions.inc_by(removed.len() as u64);
        let _ = self
            .commands
            .send(super::writer::Command::Evicted { repo_dirs: removed });
    }
}
