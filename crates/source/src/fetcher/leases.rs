//! What a job holds while it runs, each asked of the writer and given back by message
//! when dropped (a panicking job included): a turn at a git worker or an HTTP fetch,
//! room in the snapshot budget, and a cache repository with, for a download, disk to
//! download into.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::Inner;
use super::command::Command;
use super::state::{JobId, Pool, RepoWanted, RoomId, RoomWanted, TurnWanted};

/// A turn at a git worker or an HTTP fetch (fair between namespaces: see the state's
/// `turns`); given back when dropped, granted or not.
pub(super) struct Turn {
    inner: Arc<Inner>,
    pool: Pool,
    job: JobId,
}

impl Turn {
    /// Waits for a turn in `pool` under one of `namespaces`.
    pub(super) async fn take(
        inner: &Arc<Inner>,
        pool: Pool,
        job: JobId,
        namespaces: Vec<String>,
    ) -> Turn {
        let turn = Turn {
            inner: inner.clone(),
            pool,
            job,
        };
        let (granted, answer) = tokio::sync::oneshot::channel();
        let asked = inner.commands.send(Command::WantTurn(TurnWanted {
            job,
            pool,
            namespaces,
            granted,
        }));
        if asked.is_ok() {
            // A writer gone with its runtime answers nothing; the job goes on then.
            let _ = answer.await;
        }
        turn
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        let _ = self.inner.commands.send(Command::TurnDone {
            pool: self.pool,
            job: self.job,
        });
    }
}

/// Room reserved in the snapshot budget (or asked for); given back when dropped.
pub(super) struct Room {
    inner: Arc<Inner>,
    name: RoomId,
}

impl Drop for Room {
    fn drop(&mut self) {
        let _ = self.inner.commands.send(Command::GiveBack(self.name));
    }
}

/// The most one read can add to the snapshot budget: a snapshot is refused beyond
/// what a ConfigMap can hold (and beyond the download cap).
fn bytes_per_read(inner: &Inner) -> u64 {
    let limits = &inner.policy.limits;
    limits.config_bytes.min(limits.download_bytes)
}

/// Names a job's rooms.
pub(super) struct Rooms {
    job: JobId,
    next: u32,
}

impl Rooms {
    pub(super) fn of(job: JobId) -> Rooms {
        Rooms { job, next: 0 }
    }

    /// Waits until `reads` snapshots fit beside what is held undelivered and what other
    /// jobs have reserved (the writer grants room in order), and holds their room until
    /// dropped.
    pub(super) async fn reserve(&mut self, inner: &Arc<Inner>, reads: usize) -> Room {
        let name = RoomId {
            job: self.job,
            seq: self.next,
        };
        self.next += 1;
        let bytes = bytes_per_read(inner).saturating_mul(reads as u64);
        let give_up = Instant::now() + Duration::from_secs(2 * inner.policy.limits.timeout_seconds);
        let room = Room {
            inner: inner.clone(),
            name,
        };
        let (granted, answer) = tokio::sync::oneshot::channel();
        let asked = inner.commands.send(Command::Reserve(RoomWanted {
            room: name,
            bytes,
            give_up,
            granted,
        }));
        if asked.is_ok() {
            // A writer gone with its runtime answers nothing; the job goes on then.
            let _ = answer.await;
        }
        room
    }
}

/// A cache repository held by a job: git work on it is serialised and it is never
/// evicted meanwhile. Let go when dropped, even before it was granted (the job's task
/// went away while waiting).
pub(super) struct Repo {
    inner: Arc<Inner>,
    job: JobId,
    dir: PathBuf,
    downloaded: bool,
}

impl Repo {
    /// Waits for the repository at `dir` (and, with `download`, for disk to download
    /// into: see [`super::state`]'s disk cache).
    pub(super) async fn take(inner: &Arc<Inner>, job: JobId, dir: PathBuf, download: bool) -> Repo {
        let give_up = Instant::now() + Duration::from_secs(inner.policy.limits.timeout_seconds);
        let repo = Repo {
            inner: inner.clone(),
            job,
            dir: dir.clone(),
            downloaded: false,
        };
        let (granted, answer) = tokio::sync::oneshot::channel();
        let asked = inner.commands.send(Command::TakeRepo(RepoWanted {
            job,
            dir,
            download,
            give_up,
            granted,
        }));
        if asked.is_ok() {
            // A writer gone with its runtime answers nothing; the job goes on then.
            let _ = answer.await;
        }
        repo
    }

    /// A pack was downloaded into it: the cache is brought back under its cap when the
    /// repository is let go.
    pub(super) fn downloaded(&mut self) {
        self.downloaded = true;
    }
}

impl Drop for Repo {
    fn drop(&mut self) {
        let _ = self.inner.commands.send(Command::ReleaseRepo {
            job: self.job,
            dir: std::mem::take(&mut self.dir),
            downloaded: self.downloaded,
        });
    }
}
