//! What may change the engine's state: every message the writer takes
//! ([`super::writer`]), from calls, push receivers, jobs and timers.

use std::path::PathBuf;
#[cfg(any(test, feature = "test-support"))]
use std::time::Duration;

use tokio::sync::oneshot;

use super::state::{Ended, JobId, RepoWanted, RoomId, RoomWanted, Wanted};
use crate::worker::Fetched;
use crate::{RemoteKey, SourceKey};

/// What a job brought, request by request.
pub(super) type Results = Vec<(SourceKey, Fetched)>;

pub(super) enum Command {
    /// A parent asked for a source.
    Want(Box<Wanted>),
    /// A push receiver heard that `repository` changed.
    Push { repository: String },
    /// The push spacing of a remote a push named has passed.
    PushDue { remote_key: RemoteKey },
    /// Job `job` brought these results for its requests.
    Stored {
        remote_key: RemoteKey,
        job: JobId,
        commit_from: Option<std::time::Instant>,
        results: Results,
    },
    /// A job ended.
    Finished(Ended),
    /// A job asks for room in the snapshot budget.
    Reserve(RoomWanted),
    /// The room is given back (or no longer wanted).
    GiveBack(RoomId),
    /// A job asks for a cache repository (and disk to download into).
    TakeRepo(RepoWanted),
    /// A job lets its cache repository go (or no longer wants it).
    ReleaseRepo {
        job: JobId,
        dir: PathBuf,
        downloaded: bool,
    },
    /// An eviction removed these repositories and left the cache at `left` bytes (None:
    /// it ended without measuring).
    Evicted {
        removed: Vec<PathBuf>,
        left: Option<u64>,
    },
    /// Every remote counts as due (tests, instead of waiting for an interval).
    #[cfg(any(test, feature = "test-support"))]
    Expire { done: oneshot::Sender<()> },
    /// Requests not asked for within `max_age` are forgotten (tests, instead of waiting
    /// for the sweep).
    #[cfg(any(test, feature = "test-support"))]
    Forget {
        max_age: Duration,
        done: oneshot::Sender<()>,
    },
    /// Answered once no job runs.
    Idle { done: oneshot::Sender<()> },
}
