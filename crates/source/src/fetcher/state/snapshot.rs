//! One request's snapshot as the writer keeps it ([`Copy`]: never read, held, or let go
//! under the memory budget), and the budget itself (`--snapshot-memory-bytes`): what a
//! snapshot weighs, and letting the least recently asked go.
//!
//! A snapshot not yet delivered to its parent is never let go: under a working set
//! larger than the budget, a parent would otherwise find its snapshot gone every time it
//! came back for it. Jobs reserve room before they fetch ([`super::rooms`]) so that what
//! is held stays within the budget all the same.

use std::sync::Arc;
use std::time::Instant;

use crate::{FetchError, Revision, Snapshot, SourceKey};

use super::{JobId, State};

/// What a request has to answer from.
#[derive(Default, Clone)]
pub(super) enum Copy {
    /// Nothing read yet (or only errors).
    #[default]
    Never,
    /// A snapshot in memory; `delivered` once a lookup returned it.
    Held {
        snapshot: Arc<Snapshot>,
        delivered: bool,
    },
    /// The snapshot at `revision` was let go under the budget; `by_parent` while the
    /// parent said, when it last asked, that it runs that revision already (read back
    /// from its ConfigMap), so nothing needs reading again for it.
    LetGo { revision: Revision, by_parent: bool },
}

#[derive(Default, Clone)]
pub(super) struct SnapshotEntry {
    pub(super) copy: Copy,
    pub(super) error: Option<FetchError>,
    /// Bytes the snapshot holds (counted against the budget).
    bytes: u64,
    /// Bytes of what was made of the snapshot ([`crate::derived`]) when last
    /// counted (counted against the budget too).
    derived: u64,
    last_used: Option<Instant>,
    /// When the network fetch that the latest good result reflects started.
    pub(super) fetched_from: Option<Instant>,
    /// The job that stored the latest result, good or failed: while that job still runs,
    /// this request's answer is in, and nothing the job does later changes it.
    pub(super) answered_by: Option<JobId>,
}

/// What a snapshot costs to hold: its files' bytes and names, and some bookkeeping.
pub(super) fn snapshot_bytes(snapshot: &Snapshot) -> u64 {
    let files: usize = snapshot
        .files
        .iter()
        .map(|(name, content)| name.len() + content.len() + 64)
        .sum();
    (files + snapshot.revision.as_str().len() + 128) as u64
}

impl SnapshotEntry {
    pub(super) fn snapshot(&self) -> Option<&Arc<Snapshot>> {
        match &self.copy {
            Copy::Held { snapshot, .. } => Some(snapshot),
            Copy::Never | Copy::LetGo { .. } => None,
        }
    }

    /// What the entry weighs in the budget: the snapshot and what was made of it.
    pub(super) fn weight(&self) -> u64 {
        self.bytes + self.derived
    }

    /// Nothing to answer from for a parent running `running`: let go, and the parent
    /// does not run it. (An entry never read has no job's answer yet; whether it needs
    /// one is the remote's matter.)
    pub(super) fn needs_reading(entry: Option<&SnapshotEntry>, running: Option<&Revision>) -> bool {
        match entry.map(|e| &e.copy) {
            None => true,
            Some(Copy::Never | Copy::Held { .. }) => false,
            Some(Copy::LetGo { revision, .. }) => Some(revision) != running,
        }
    }

    /// The revision the request already has, so a job need not read it again.
    pub(super) fn current_revision(&self) -> Option<&Revision> {
        if self.error.is_some() {
            return None;
        }
        match &self.copy {
            Copy::Held { snapshot, .. } => Some(&snapshot.revision),
            Copy::LetGo {
                revision,
                by_parent: true,
            } => Some(revision),
            Copy::Never | Copy::LetGo { .. } => None,
        }
    }

    /// The entry as a lookup at `now` sees it: used, delivered, and held by the parent
    /// while it runs the snapshot that was let go (`running`).
    fn looked_up(&mut self, now: Instant, running: Option<&Revision>) {
        self.last_used = Some(now);
        match &mut self.copy {
            Copy::Held { delivered, .. } => *delivered = true,
            Copy::LetGo {
                revision,
                by_parent,
            } => *by_parent = Some(&*revision) == running,
            Copy::Never => {}
        }
    }

    /// A job brought a new snapshot; returns the weight it had and has.
    fn fresh(&mut self, snapshot: Snapshot, now: Instant) -> (u64, u64) {
        let old = self.weight();
        (self.bytes, self.derived) = (snapshot_bytes(&snapshot), 0);
        self.copy = Copy::Held {
            snapshot: Arc::new(snapshot),
            delivered: false,
        };
        self.last_used.get_or_insert(now);
        (old, self.bytes)
    }

    /// Counts what has been made of the snapshot since it was last counted: the bytes
    /// counted before, and now.
    fn reweigh(&mut self) -> (u64, u64) {
        let now = self.snapshot().map_or(0, |s| s.derived.bytes());
        (std::mem::replace(&mut self.derived, now), now)
    }

    /// Lets the snapshot go; returns its weight.
    fn let_go(&mut self) -> u64 {
        let weight = self.weight();
        if let Copy::Held { snapshot, .. } = &self.copy {
            self.copy = Copy::LetGo {
                revision: snapshot.revision.clone(),
                by_parent: false,
            };
        }
        (self.bytes, self.derived) = (0, 0);
        weight
    }

    fn is_undelivered(&self) -> bool {
        matches!(
            self.copy,
            Copy::Held {
                delivered: false,
                ..
            }
        )
    }
}

impl State {
    /// `key` was looked up at `now` by a parent running `running`: it is marked used,
    /// delivered or held, weighed with what the last call made of its snapshot, and the
    /// budget kept with that weight (this entry was asked just now, so it goes last).
    /// Returns how many snapshots were let go.
    pub(super) fn looked_up(
        &mut self,
        key: &SourceKey,
        now: Instant,
        running: Option<&Revision>,
    ) -> u64 {
        if let Some(entry) = self.snapshots.get_mut(key) {
            entry.looked_up(now, running);
            let (before, after) = entry.reweigh();
            self.snapshot_bytes = self.snapshot_bytes.saturating_sub(before) + after;
        }
        if self.snapshot_bytes > self.settings.snapshot_budget_bytes {
            self.fit()
        } else {
            0
        }
    }

    /// Stores a job's new snapshot for `key`; returns how many snapshots were let go to
    /// make room for it.
    pub(super) fn store_fresh(&mut self, key: SourceKey, snapshot: Snapshot, now: Instant) -> u64 {
        let entry = self.snapshots.entry(key).or_default();
        let (old, new) = entry.fresh(snapshot, now);
        self.snapshot_bytes = self.snapshot_bytes.saturating_sub(old) + new;
        self.fit()
    }

    /// Lets the least recently asked snapshots go until those held fit the budget, never
    /// one not yet delivered to a parent (those exceed the budget by at most what the
    /// running jobs fetched since their parents last asked). A parent whose snapshot went
    /// keeps running what its ConfigMap holds, and a parent that does not hold it gets it
    /// read again at its next lookup.
    fn fit(&mut self) -> u64 {
        let budget = self.settings.snapshot_budget_bytes;
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
                .filter(|(_, entry)| {
                    matches!(
                        entry.copy,
                        Copy::Held {
                            delivered: true,
                            ..
                        }
                    )
                })
                .min_by_key(|(_, entry)| entry.last_used)
                .map(|(key, _)| key.clone());
            let Some(entry) = oldest.and_then(|key| self.snapshots.get_mut(&key)) else {
                return let_go;
            };
            self.snapshot_bytes = self.snapshot_bytes.saturating_sub(entry.let_go());
            let_go += 1;
        }
        let_go
    }

    /// Bytes of the snapshots held and not yet delivered (room they take from jobs).
    pub(super) fn undelivered_bytes(&self) -> u64 {
        self.snapshots
            .values()
            .filter(|entry| entry.is_undelivered())
            .map(SnapshotEntry::weight)
            .sum()
    }
}
