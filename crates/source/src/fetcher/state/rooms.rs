//! Room in the snapshot budget for what jobs are about to bring.
//!
//! A job reserves room for the largest snapshots its reads can make (a ConfigMap's
//! worth each) before it fetches, and gives it back once it has stored them: what is
//! held, delivered or not, plus what is on its way stays within the budget. A job that
//! finds no room waits for parents to come for what is held (or for other jobs to end);
//! should they never come, it goes ahead after a bounded while, when the sweep will have
//! forgotten them.
//!
//! A job reserves once it has its turn at a worker or an HTTP slot, never before: those
//! turns are fair between namespaces, so a namespace whose fetches stall (tarpits) holds
//! no more room than it holds turns, and cannot keep another namespace's fetch waiting.

use std::collections::{HashMap, VecDeque};
use std::time::Instant;

use tokio::sync::oneshot;

use super::{JobId, State};

/// A room's name: the job that asked, and which of its rooms it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(in crate::fetcher) struct RoomId {
    pub(in crate::fetcher) job: JobId,
    pub(in crate::fetcher) seq: u32,
}

/// A job waiting for `bytes` of room, named `room`, until `give_up`.
pub(in crate::fetcher) struct RoomWanted {
    pub(in crate::fetcher) room: RoomId,
    pub(in crate::fetcher) bytes: u64,
    pub(in crate::fetcher) give_up: Instant,
    pub(in crate::fetcher) granted: oneshot::Sender<()>,
}

#[derive(Default)]
pub(super) struct Rooms {
    waiting: VecDeque<RoomWanted>,
    /// Room granted, by name.
    granted: HashMap<RoomId, u64>,
    /// Bytes of every room granted.
    pub(super) reserved: u64,
}

impl Rooms {
    pub(super) fn waiting(&self) -> usize {
        self.waiting.len()
    }
}

impl State {
    /// A job asks for room.
    pub(in crate::fetcher) fn reserve(&mut self, wanted: RoomWanted) {
        self.rooms.waiting.push_back(wanted);
    }

    /// The room `room` is given back (or no longer wanted).
    pub(in crate::fetcher) fn give_back(&mut self, room: RoomId) {
        let rooms = &mut self.rooms;
        rooms.waiting.retain(|waiter| waiter.room != room);
        if let Some(bytes) = rooms.granted.remove(&room) {
            rooms.reserved = rooms.reserved.saturating_sub(bytes);
        }
    }

    /// Grants room to the jobs waiting for it, in order, while undelivered snapshots
    /// plus reservations leave room (or nothing else is held or reserved, so one job
    /// always runs, or the job has waited long enough: its parents may never come for
    /// what is held, and the sweep will have forgotten them).
    pub(in crate::fetcher) fn grant_rooms(&mut self, now: Instant) {
        if self.rooms.waiting.is_empty() {
            return;
        }
        let budget = self.settings.snapshot_budget_bytes;
        let undelivered = self.undelivered_bytes();
        let rooms = &mut self.rooms;
        let mut still = VecDeque::with_capacity(rooms.waiting.len());
        for waiter in rooms.waiting.drain(..) {
            let taken = undelivered.saturating_add(rooms.reserved);
            let fits = taken == 0 || taken.saturating_add(waiter.bytes) <= budget;
            if !fits && now < waiter.give_up && !waiter.granted.is_closed() {
                still.push_back(waiter);
                continue;
            }
            if waiter.granted.send(()).is_ok() {
                rooms.reserved = rooms.reserved.saturating_add(waiter.bytes);
                rooms.granted.insert(waiter.room, waiter.bytes);
            }
        }
        rooms.waiting = still;
    }
}
