//! The one writer of the engine's state: a task that takes what calls, push receivers,
//! jobs and timers ask for as messages ([`Command`]), applies each to the state it alone
//! may change ([`StoreWriter`]), and carries out what the state says must happen (jobs
//! to start, timers, evictions). Everyone else reads ([`super::store::Store`]); the shape
//! of kube-runtime's reflector, whose one `Writer` feeds many `Store` readers.
//!
//! Since every change goes through here in order, a test or a tool that asks for
//! something and then waits for the engine to be idle ([`Command::Idle`]) sees what it
//! asked for done.

use std::sync::Weak;
use std::time::{Duration, Instant};

use tokio::sync::oneshot;
use tracing::Instrument;

use super::Inner;
use super::command::{Command, Commands, Inbox};
use super::job::Job;
use super::state::{Effects, State};
use super::store::StoreWriter;

/// How often waiting jobs are looked at when nothing else happens (their deadline).
const WAITING_TICK: Duration = Duration::from_millis(200);

pub(super) struct Writer {
    inner: Weak<Inner>,
    store: StoreWriter,
    commands: Inbox,
    idle: Vec<oneshot::Sender<()>>,
}

impl Writer {
    pub(super) fn new(inner: Weak<Inner>, store: StoreWriter, commands: Inbox) -> Writer {
        Writer {
            inner,
            store,
            commands,
            idle: Vec::new(),
        }
    }

    /// Applies commands until every sender is gone (the engine was dropped).
    pub(super) async fn run(mut self) {
        loop {
            // With jobs waiting, a tick: their deadlines pass without a command.
            let next = if self.store.read().has_waiters() {
                match tokio::time::timeout(WAITING_TICK, self.commands.recv()).await {
                    Ok(received) => received.map(Some),
                    Err(_elapsed) => Some(None),
                }
            } else {
                self.commands.recv().await.map(Some)
            };
            let Some(next) = next else {
                return;
            };
            let Some(inner) = self.inner.upgrade() else {
                return;
            };
            let now = Instant::now();
            let mut effects = Effects::default();
            {
                let mut state = self.store.write();
                if let Some(command) = next {
                    apply(
                        &mut state,
                        command,
                        now,
                        &inner,
                        &mut self.idle,
                        &mut effects,
                    );
                }
                state.grant_rooms(now);
                effects.evictions.extend(state.grant_repos(now));
            }
            carry_out(&inner, effects);
            if !self.idle.is_empty() && !self.store.read().busy() {
                for done in self.idle.drain(..) {
                    let _ = done.send(());
                }
            }
            drop(inner);
            // One command at a time, each under a hold of its own: a lookup waits for one
            // at most, and hook calls on this worker thread for none (a burst of
            // commands would otherwise run to its end before them).
            tokio::task::yield_now().await;
        }
    }
}

/// Changes the state as `command` asks.
fn apply(
    state: &mut State,
    command: Command,
    now: Instant,
    inner: &Inner,
    idle: &mut Vec<oneshot::Sender<()>>,
    effects: &mut Effects,
) {
    match command {
        Command::Want(wanted) => state.want(&wanted, now, effects),
        Command::Push { repository } => state.push(&repository, now, effects),
        Command::PushDue { remote_key } => state.push_due(&remote_key, now, effects),
        Command::Stored {
            remote_key,
            job,
            commit_from,
            results,
        } => state.stored(&remote_key, job, commit_from, results, now, effects),
        Command::Finished(ended) => state.finished(ended),
        Command::WantTurn(wanted) => state.want_turn(wanted),
        Command::TurnDone { pool, job } => state.turn_done(pool, job),
        Command::Reserve(wanted) => state.reserve(wanted),
        Command::GiveBack(room) => state.give_back(room),
        Command::TakeRepo(wanted) => state.want_repo(wanted),
        Command::ReleaseRepo {
            job,
            dir,
            downloaded,
        } => effects
            .evictions
            .extend(state.repo_released(job, &dir, downloaded)),
        Command::Evicted { removed, left } => {
            inner.metrics.cache_evictions.inc_by(removed.len() as u64);
            effects.evictions.extend(state.evicted(&removed, left));
        }
        #[cfg(any(test, feature = "test-support"))]
        Command::Expire { done } => {
            state.expire();
            let _ = done.send(());
        }
        #[cfg(any(test, feature = "test-support"))]
        Command::Forget { max_age, done } => {
            state.sweep(now, Some(max_age));
            let _ = done.send(());
        }
        Command::Idle { done } => idle.push(done),
    }
}

/// Does in the world what a change of state asked for.
fn carry_out(inner: &std::sync::Arc<Inner>, effects: Effects) {
    inner.metrics.snapshot_evictions.inc_by(effects.let_go);
    for plan in effects.jobs {
        let span = plan
            .requests
            .first()
            .map_or_else(tracing::Span::none, super::job::span);
        inner
            .runtime
            .spawn(Job::new(inner.clone(), plan).run().instrument(span));
    }
    for (remote_key, wait) in effects.push_timers {
        let commands = inner.commands.clone();
        inner.runtime.spawn(async move {
            tokio::time::sleep(wait).await;
            let _ = commands.send(Command::PushDue { remote_key });
        });
    }
    for eviction in effects.evictions {
        let (commands, git_dir) = (inner.commands.clone(), inner.cache_dir.join("git"));
        let reply = EvictionReply(Some(commands));
        inner.runtime.spawn_blocking(move || {
            let (removed, left) = super::cache_dir::evict(&git_dir, &eviction);
            reply.send(removed, Some(left));
        });
    }
}

/// Tells the writer an eviction ended, however it ends: while one runs no repository
/// is handed out, so an eviction that never answered would stop every git job.
struct EvictionReply(Option<Commands>);

impl EvictionReply {
    fn send(mut self, removed: Vec<std::path::PathBuf>, left: Option<u64>) {
        if let Some(commands) = self.0.take() {
            let _ = commands.send(Command::Evicted { removed, left });
        }
    }
}

impl Drop for EvictionReply {
    fn drop(&mut self) {
        if let Some(commands) = self.0.take() {
            // Nothing is known to be removed, nor the size measured.
            let _ = commands.send(Command::Evicted {
                removed: Vec::new(),
                left: None,
            });
        }
    }
}
