//! How the fetcher keeps its on-disk cache to itself and in bounds: a `file://` URL may
//! not read it, and evictions remove what the writer says they may.

use std::path::PathBuf;

use super::Inner;
use super::state::Eviction;
use crate::FetchError;

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
}

/// Removes least recently used repositories under `git_dir` as `eviction` says, never
/// one it keeps; returns the removed ones and the bytes left. Runs apart from the
/// writer (it walks the disk), which hands out no repository meanwhile.
pub(super) fn evict(git_dir: &std::path::Path, eviction: &Eviction) -> (Vec<PathBuf>, u64) {
    crate::disk::enforce_cap(git_dir, eviction.max, |dir| {
        (!eviction.keep.contains(dir)).then_some(())
    })
}
