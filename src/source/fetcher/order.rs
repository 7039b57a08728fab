//! Which copy is newer: the engine remembers when it first heard that a parent runs a
//! revision and when the fetch behind each copy started, so a controller can tell
//! whether its copy is at least as new as what runs without comparing commit dates.

use crate::source::Revision;
use std::time::Instant;

use super::{RemoteEntry, SnapshotEntry};

/// Most running revisions remembered per remote (parents of one ref run one or two
/// revisions at a time; during a roll, a few). One forgotten costs a fetch, spaced like
/// pushes, before the copy counts as newer again.
const HEARD_REVISIONS: usize = 64;

impl RemoteEntry {
    /// A parent says it runs `running` now.
    pub(super) fn heard_running(&mut self, running: Option<&Revision>, now: Instant) {
        let Some(running) = running else { return };
        if self.heard.iter().any(|(revision, _)| revision == running) {
            return;
        }
        if self.heard.len() == HEARD_REVISIONS {
            self.heard.pop_front();
        }
        self.heard.push_back((running.clone(), now));
    }
}

/// Whether `entry`'s snapshot is at least as new as `running` on the same ref: it is
/// that revision, or it was fetched by a job that started after the engine first heard
/// of it. Order comes from when things were seen, never from the commits' own dates
/// (which anyone who can push, or a skewed clock, sets).
pub(super) fn after_running(
    remote: Option<&RemoteEntry>,
    entry: Option<&SnapshotEntry>,
    running: Option<&Revision>,
) -> bool {
    let Some(running) = running else { return true };
    let Some(entry) = entry else { return false };
    if entry
        .snapshot
        .as_ref()
        .is_some_and(|snapshot| &snapshot.revision == running)
    {
        return true;
    }
    let heard = remote.and_then(|remote| {
        remote
            .heard
            .iter()
            .find(|(revision, _)| revision == running)
            .map(|(_, at)| *at)
    });
    heard
        .zip(entry.fetched_from)
        .is_some_and(|(heard, fetched)| fetched >= heard)
}
