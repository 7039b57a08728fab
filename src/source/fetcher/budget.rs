//! The snapshot budget (`--snapshot-memory-bytes`): what a snapshot weighs, letting the
//! least recently asked go, and room for what a job is about to bring.
//!
//! A snapshot not yet delivered to its parent is never let go, so the budget can only
//! hold if jobs do not bring more than it has room for. A job therefore reserves room
//! for the largest snapshots its reads can make (a ConfigMap's worth each) before it
//! fetches, and gives it back once it has stored them: what is held, delivered or not,
//! plus what is on its way stays within the budget. A job that finds no room waits for
//! parents to come for what is held (or for other jobs to end); should they never come,
//! it goes ahead after a bounded while, when the sweep will have forgotten them.
//!
//! A job reserves once it has its turn at a worker or an HTTP slot, never before: those
//! turns are fair between namespaces, so a namespace whose fetches stall (tarpits) holds
//! no more room than it holds turns, and cannot keep another namespace's fetch waiting.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::writer::{Command, Waiter};
use super::{Inner, SnapshotEntry, SourceKey, State};

/// What a snapshot costs to hold: its files' bytes and names, and some bookkeeping.
pub(super) fn snapshot_bytes(snapshot: &crate::source::Snapshot) -> u64 {
    let files: usize = snapshot
        .files
        .iter()
        .map(|(name, content)| name.len() + content.len() + 64)
        .sum();
    (files + snapshot.revision.as_str().len() + 128) as u64
}

impl State {
    /// Lets the least recently asked snapshots go until those held fit `budget`, never
    /// one not yet delivered to a parent (those exceed the budget by at most what the
    /// running jobs fetched since their parents last asked). A parent whose snapshot went
    /// keeps running what its ConfigMap holds, and a parent that does not hold it gets it
    /// read again at its next lookup.
    pub(super) fn fit(&mut self, budget: u64) -> u64 {
        let (mut before, mut now) = (0u64, 0u64);
        for entry in self.snapshots.values_mut() {
            let (was, is) = entry.reweigh();
            (before, now) = (before + was, now + is);
        }
        self.snapshot_bytes = self.snapshot_bytes.saturating_sub(before) + now;
        let mut let_go = 0;
        while self.snapshot_bytes > budget {
            let oldest = self
                .snapshots
                .iter()
                .filter(|(_, entry)| entry.snapshot.is_some() && entry.delivered)
                .min_by_key(|(_, entry)| entry.last_used)
                .map(|(key, _)| key.clone());
            let Some(entry) = oldest.and_then(|key| self.snapshots.get_mut(&key)) else {
                return let_go;
            };
            entry.let_go = entry.snapshot.take().map(|s| s.revision.clone());
            entry.held = false;
            self.snapshot_bytes = self.snapshot_bytes.saturating_sub(entry.weight());
            (entry.bytes, entry.derived) = (0, 0);
            let_go += 1;
        }
        let_go
    }

    /// Counts what has been made of `key`'s snapshot since it was last counted.
    pub(super) fn reweigh(&mut self, key: &SourceKey) {
        if let Some((before, now)) = self.snapshots.get_mut(key).map(SnapshotEntry::reweigh) {
            self.snapshot_bytes = self.snapshot_bytes.saturating_sub(before) + now;
        }
    }
}

impl SnapshotEntry {
    /// Counts what has been made of the snapshot since it was last counted: the bytes
    /// counted before, and now.
    fn reweigh(&mut self) -> (u64, u64) {
        let now = self.snapshot.as_ref().map_or(0, |s| s.derived.bytes());
        (std::mem::replace(&mut self.derived, now), now)
    }
}

/// Room reserved in the snapshot budget (or asked for); given back when dropped.
pub(super) struct Room {
    inner: Arc<Inner>,
    name: u64,
}

impl Drop for Room {
    fn drop(&mut self) {
        let _ = self
            .inner
            .commands
            .send(Command::GiveBack { room: self.name });
    }
}

/// The most one read can add to the snapshot budget: a snapshot is refused beyond
/// what a ConfigMap can hold (and beyond the download cap).
pub(super) fn bytes_per_read(inner: &Inner) -> u64 {
    let limits = &inner.policy.limits;
    limits.config_bytes.min(limits.download_bytes)
}

/// Waits until `reads` snapshots fit beside what is held undelivered and what other
/// jobs have reserved (the writer grants room in order: [`super::writer`]), and holds
/// their room until dropped.
pub(super) async fn reserve(inner: &Arc<Inner>, reads: usize) -> Room {
    let bytes = bytes_per_read(inner).saturating_mul(reads as u64);
    let give_up = Instant::now() + Duration::from_secs(2 * inner.policy.limits.timeout_seconds);
    let room = Room {
        inner: inner.clone(),
        name: inner.next_room.fetch_add(1, Ordering::SeqCst),
    };
    let (granted, answer) = tokio::sync::oneshot::channel();
    let asked = inner.commands.send(Command::Reserve(Waiter {
        room: room.name,
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
