//! The on-disk git cache stays under a size cap: after a download, the least recently
//! used repositories are removed until the cache fits. A repository in use (its lock is
//! held by a running job) is never removed; a removed one is simply fetched again the
//! next time a parent asks for it.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// Touched on every use of a cached repository; its modification time orders eviction.
const USED_MARKER: &str = "metahooks-last-used";

/// The file under the cache directory holding the key of its repository names.
const KEY_FILE: &str = "repository-key";

/// The cache's key for naming repositories by credential holder: read from the cache
/// directory, or drawn and written there (readable by this user only) the first time.
///
/// # Errors
/// The directory or the key file cannot be created or read.
pub fn key(cache_dir: &Path) -> Result<[u8; 32], super::FetchError> {
    let file = cache_dir.join(KEY_FILE);
    let problem = |e: std::io::Error| super::FetchError::CacheUnreadable {
        detail: format!("cannot keep the cache key {}: {e}", file.display()),
    };
    if let Ok(bytes) = std::fs::read(&file)
        && let Ok(key) = <[u8; 32]>::try_from(bytes.as_slice())
    {
        return Ok(key);
    }
    std::fs::create_dir_all(cache_dir).map_err(problem)?;
    let key = super::random_key();
    let temporary = cache_dir.join(format!("{KEY_FILE}.new"));
    {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let mut out = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&temporary)
            .map_err(problem)?;
        out.write_all(&key).map_err(problem)?;
    }
    std::fs::rename(&temporary, &file).map_err(problem)?;
    Ok(key)
}

/// Records that the repository at `dir` was just used.
pub fn touch(dir: &Path) {
    let _ = std::fs::write(dir.join(USED_MARKER), b"");
}

/// Removes least recently used repositories under `git_dir` until the total size is at
/// most `max_bytes`. `claim(dir)` returns a claim held while the directory is removed,
/// or `None` when the repository is in use and must stay. Returns the removed
/// directories and the bytes left.
pub fn enforce_cap<C>(
    git_dir: &Path,
    max_bytes: u64,
    claim: impl Fn(&Path) -> Option<C>,
) -> (Vec<PathBuf>, u64) {
    let Ok(entries) = std::fs::read_dir(git_dir) else {
        return (Vec::new(), 0);
    };
    let mut repos: Vec<(PathBuf, u64, SystemTime)> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .map(|dir| {
            let used = std::fs::metadata(dir.join(USED_MARKER))
                .or_else(|_| std::fs::metadata(&dir))
                .and_then(|m| m.modified())
                .unwrap_or(SystemTime::UNIX_EPOCH);
            let size = size_of(&dir);
            (dir, size, used)
        })
        .collect();
    let mut total: u64 = repos.iter().map(|(_, size, _)| size).sum();
    repos.sort_by_key(|(_, _, used)| *used);
    let mut removed = Vec::new();
    for (dir, size, _) in repos {
        if total <= max_bytes {
            break;
        }
        let Some(_claim) = claim(&dir) else {
            continue;
        };
        if std::fs::remove_dir_all(&dir).is_ok() {
            total = total.saturating_sub(size);
            tracing::info!(dir = %dir.display(), bytes = size, "git cache entry evicted");
            removed.push(dir);
        }
    }
    (removed, total)
}

/// Bytes of the files under `dir` (symbolic links not followed).
fn size_of(dir: &Path) -> u64 {
    let mut total = 0;
    let mut pending = vec![dir.to_owned()];
    while let Some(current) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&current) else {
            continue;
        };
        for entry in entries.filter_map(Result::ok) {
            match entry.file_type() {
                Ok(kind) if kind.is_dir() => pending.push(entry.path()),
                Ok(kind) if kind.is_file() => {
                    total += entry.metadata().map(|m| m.len()).unwrap_or(0);
                }
                _ => {}
            }
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn oldest_unused_repositories_go_first() {
        let root = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let make = |name: &str, bytes: usize| {
            let dir = root.path().join(name);
            std::fs::create_dir_all(dir.join("objects")).unwrap_or_else(|e| panic!("{e}"));
            std::fs::write(dir.join("objects/pack"), vec![0u8; bytes])
                .unwrap_or_else(|e| panic!("{e}"));
            dir
        };
        let old = make("old", 1000);
        let busy = make("busy", 1000);
        let new = make("new", 1000);
        // Order by use: busy and old first, new last (times set, not waited for).
        for (second, dir) in [(10, &busy), (20, &old), (30, &new)] {
            touch(dir);
            let at = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(second);
            std::fs::File::options()
                .write(true)
                .open(dir.join(USED_MARKER))
                .and_then(|f| f.set_modified(at))
                .unwrap_or_else(|e| panic!("{e}"));
        }
        let (removed, left) = enforce_cap(root.path(), 2100, |dir| (dir != busy).then_some(()));
        assert!(left <= 2100, "{left}");
        assert_eq!(removed, vec![old.clone()]);
        assert!(!old.exists() && busy.exists() && new.exists());
        assert!(enforce_cap(root.path(), 10_000, |_| Some(())).0.is_empty());
    }
}
