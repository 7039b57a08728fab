//! What may change the engine's state: every message the writer takes
//! ([`super::writer`]), from calls, push receivers, jobs and timers.

use std::path::PathBuf;
#[cfg(any(test, feature = "test-support"))]
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

use super::state::{Ended, JobId, Pool, RepoWanted, RoomId, RoomWanted, TurnWanted, Wanted};
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
    /// A job asks for a turn at a git worker or an HTTP fetch.
    WantTurn(TurnWanted),
    /// A job's turn is over (or no longer wanted).
    TurnDone { pool: Pool, job: JobId },
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

impl Command {
    /// Whether a running job sent it: what it reports (results, the end) and what it
    /// holds (a turn, room, a repository, an eviction it waits for).
    fn sent_by_job(&self) -> bool {
        match self {
            Command::Stored { .. }
            | Command::Finished(_)
            | Command::WantTurn(_)
            | Command::TurnDone { .. }
            | Command::Reserve(_)
            | Command::GiveBack(_)
            | Command::TakeRepo(_)
            | Command::ReleaseRepo { .. }
            | Command::Evicted { .. } => true,
            Command::Want(_) | Command::Push { .. } | Command::PushDue { .. } => false,
            #[cfg(any(test, feature = "test-support"))]
            Command::Expire { .. } | Command::Forget { .. } => false,
            Command::Idle { .. } => false,
        }
    }
}

/// The writer's two inboxes, one for what running jobs send and one for everything
/// else. The writer empties the jobs' first: a turn given back, a result or room asked
/// for must not wait behind a burst of thousands of parents' asks, or every fetch under
/// load lasts as long as that queue and its parents answer "pending" for as long.
/// Order holds within each inbox, which is all that is relied on: one sender's
/// messages stay in order, and no message of a job can precede the ask that started it.
#[derive(Clone)]
pub(super) struct Commands {
    jobs: mpsc::UnboundedSender<Command>,
    others: mpsc::UnboundedSender<Command>,
}

/// The writer has stopped (the engine was dropped); the message was not taken.
#[derive(Debug)]
pub(super) struct WriterGone;

/// The receiving side of [`Commands`].
pub(super) struct Inbox {
    jobs: mpsc::UnboundedReceiver<Command>,
    others: mpsc::UnboundedReceiver<Command>,
}

/// A connected pair of [`Commands`] and [`Inbox`].
pub(super) fn channel() -> (Commands, Inbox) {
    let (jobs, from_jobs) = mpsc::unbounded_channel();
    let (others, from_others) = mpsc::unbounded_channel();
    (
        Commands { jobs, others },
        Inbox {
            jobs: from_jobs,
            others: from_others,
        },
    )
}

impl Commands {
    /// Sends `command` to the writer's inbox for it.
    ///
    /// # Errors
    /// The writer is gone (the engine was dropped).
    pub(super) fn send(&self, command: Command) -> Result<(), WriterGone> {
        let inbox = if command.sent_by_job() {
            &self.jobs
        } else {
            &self.others
        };
        inbox.send(command).map_err(|_| WriterGone)
    }
}

impl Inbox {
    /// The next command, a job's first; None once every sender is gone and both
    /// inboxes are empty.
    pub(super) async fn recv(&mut self) -> Option<Command> {
        tokio::select! {
            biased;
            Some(command) = self.jobs.recv() => Some(command),
            command = self.others.recv() => match command {
                Some(command) => Some(command),
                None => self.jobs.recv().await,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn push(repository: &str) -> Command {
        Command::Push {
            repository: repository.to_owned(),
        }
    }

    fn evicted(left: u64) -> Command {
        Command::Evicted {
            removed: Vec::new(),
            left: Some(left),
        }
    }

    /// What `recv` gave, as (inbox, tag) pairs.
    fn seen(command: Option<Command>) -> Option<(&'static str, String)> {
        match command? {
            Command::Push { repository } => Some(("others", repository)),
            Command::Evicted { left, .. } => Some(("jobs", format!("{left:?}"))),
            _ => Some(("other", String::new())),
        }
    }

    #[tokio::test]
    async fn a_jobs_message_is_taken_before_parents_asks_sent_earlier() {
        let (commands, mut inbox) = channel();
        for name in ["a", "b", "c"] {
            assert!(commands.send(push(name)).is_ok());
        }
        assert!(commands.send(evicted(1)).is_ok());
        assert!(commands.send(evicted(2)).is_ok());
        let mut order = Vec::new();
        drop(commands);
        while let Some(next) = seen(inbox.recv().await) {
            order.push(next);
        }
        let expected: Vec<(&str, String)> = vec![
            ("jobs", "Some(1)".into()),
            ("jobs", "Some(2)".into()),
            ("others", "a".into()),
            ("others", "b".into()),
            ("others", "c".into()),
        ];
        assert_eq!(order, expected, "jobs first, each inbox in its own order");
    }

    #[tokio::test]
    async fn messages_left_in_either_inbox_are_taken_after_the_senders_are_gone() {
        let (commands, mut inbox) = channel();
        assert!(commands.send(push("only")).is_ok());
        drop(commands);
        assert_eq!(seen(inbox.recv().await), Some(("others", "only".into())));
        assert!(inbox.recv().await.is_none());
    }

    #[test]
    fn a_jobs_report_goes_to_the_jobs_inbox_and_asks_and_idle_do_not() {
        assert!(evicted(0).sent_by_job());
        assert!(!push("r").sent_by_job());
        let (done, _) = oneshot::channel();
        assert!(!Command::Idle { done }.sent_by_job());
    }
}
