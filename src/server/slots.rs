//! The connection slots of one port: how many connections may be open, how many of them
//! one peer may hold, and which connection gives up its slot when a new one needs it.
//!
//! A slot is not first come, first kept: a connection that is not answering a call (it
//! has finished one and waits for the next, or has not sent a request yet) is idle, and
//! when every slot is taken the connection idle the longest is told to close so that the
//! new one can be served. Only connections with a call in flight keep their slot against
//! newcomers, and each of those is bounded in time by the server's read deadlines and the
//! hook deadline. So idle connections, whoever holds them, never lock a port up; and the
//! port reports it cannot take a connection ([`Slots::can_admit`]) only when every slot is
//! busy answering.
//!
//! hyper and tower have no such thing: tower's concurrency limits count requests, not
//! connections, and hyper serves one connection and knows nothing of the others.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use tokio::sync::Notify;

/// The connection slots of one port; clones share them.
#[derive(Clone)]
pub struct Slots {
    table: Arc<Mutex<Table>>,
    max: usize,
    max_per_peer: usize,
    /// What idle times are counted from.
    epoch: Instant,
}

struct Table {
    next_id: u64,
    open: HashMap<u64, Entry>,
    per_peer: HashMap<IpAddr, usize>,
    evicted: u64,
}

struct Entry {
    peer: IpAddr,
    signals: Arc<Signals>,
}

/// What the serving side of a connection is told, and what the table reads of it. A call
/// starting or ending touches only these atomics, never the table's lock: that happens
/// on every call, an eviction only when a port is full.
#[derive(Default)]
struct Signals {
    /// Its slot was given to a new connection: close now.
    evict: Notify,
    /// Its count of calls in flight changed (its idle timer starts or stops).
    activity: Notify,
    /// Calls being answered on the connection (HTTP/2 may have several).
    in_flight: AtomicUsize,
    /// Since when no call has been in flight (the accept, at first), in nanoseconds
    /// after the slots' epoch.
    idle_since: AtomicU64,
    /// Whether any call has started on it.
    started: AtomicBool,
}

impl Signals {
    fn busy(&self) -> bool {
        self.in_flight.load(Ordering::SeqCst) > 0
    }
}

/// Why a new connection got no slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// Every slot of the port is answering a call.
    Full,
    /// Every slot the peer may hold is answering a call.
    PeerFull,
}

impl Refused {
    /// A stable name for logs.
    pub fn reason(self) -> &'static str {
        match self {
            Refused::Full => "PortFull",
            Refused::PeerFull => "PeerShareFull",
        }
    }
}

impl Slots {
    /// `max` slots in all, `max_per_peer` of them for any one peer address, all free.
    pub fn new(max: usize, max_per_peer: usize) -> Slots {
        Slots {
            table: Arc::new(Mutex::new(Table {
                next_id: 0,
                open: HashMap::new(),
                per_peer: HashMap::new(),
                evicted: 0,
            })),
            max: max.max(1),
            max_per_peer: max_per_peer.clamp(1, max.max(1)),
            epoch: Instant::now(),
        }
    }

    fn nanos_since_epoch(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.epoch).as_nanos()).unwrap_or(u64::MAX)
    }

    /// Connections open right now.
    pub fn open(&self) -> usize {
        self.lock().open.len()
    }

    /// Connections closed so far to make room for new ones.
    pub fn evicted(&self) -> u64 {
        self.lock().evicted
    }

    /// Whether a new connection from a peer that holds none would get a slot now: a slot
    /// is free, or an idle connection would give up its own.
    pub fn can_admit(&self) -> bool {
        let table = self.lock();
        table.open.len() < self.max || table.open.values().any(|entry| !entry.signals.busy())
    }

    /// A slot for a new connection from `peer`, making room by closing the connection
    /// idle the longest (the peer's own when the peer is at its share).
    ///
    /// # Errors
    /// Every slot the connection could have is answering a call.
    pub fn take(&self, peer: IpAddr) -> Result<Slot, Refused> {
        let mut table = self.lock();
        if table.per_peer.get(&peer).copied().unwrap_or(0) >= self.max_per_peer {
            let victim = table.longest_idle(|entry| entry.peer == peer);
            table.evict(victim.ok_or(Refused::PeerFull)?);
        }
        if table.open.len() >= self.max {
            let victim = table.longest_idle(|_| true);
            table.evict(victim.ok_or(Refused::Full)?);
        }
        let id = table.next_id;
        table.next_id += 1;
        let signals = Arc::new(Signals::default());
        signals
            .idle_since
            .store(self.nanos_since_epoch(Instant::now()), Ordering::SeqCst);
        table.open.insert(
            id,
            Entry {
                peer,
                signals: signals.clone(),
            },
        );
        *table.per_peer.entry(peer).or_insert(0) += 1;
        Ok(Slot {
            slots: self.clone(),
            id,
            signals,
        })
    }

    fn lock(&self) -> MutexGuard<'_, Table> {
        // The table is consistent after every statement that changes it.
        self.table
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Table {
    /// The connection idle the longest among those `eligible`.
    fn longest_idle(&self, eligible: impl Fn(&Entry) -> bool) -> Option<u64> {
        self.open
            .iter()
            .filter(|(_, entry)| !entry.signals.busy() && eligible(entry))
            .min_by_key(|(id, entry)| (entry.signals.idle_since.load(Ordering::SeqCst), **id))
            .map(|(id, _)| *id)
    }

    fn evict(&mut self, id: u64) {
        if let Some(entry) = self.remove(id) {
            self.evicted += 1;
            entry.signals.evict.notify_one();
        }
    }

    fn remove(&mut self, id: u64) -> Option<Entry> {
        let entry = self.open.remove(&id)?;
        if let Some(count) = self.per_peer.get_mut(&entry.peer) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                self.per_peer.remove(&entry.peer);
            }
        }
        Some(entry)
    }
}

/// One connection's slot, given back when dropped.
pub struct Slot {
    slots: Slots,
    id: u64,
    signals: Arc<Signals>,
}

impl Slot {
    /// A call starts on the connection; it is busy until the returned guard is dropped.
    pub fn call(&self) -> Call {
        self.signals.started.store(true, Ordering::Relaxed);
        self.signals.in_flight.fetch_add(1, Ordering::SeqCst);
        self.signals.activity.notify_one();
        Call {
            epoch: self.slots.epoch,
            signals: self.signals.clone(),
        }
    }

    /// Completes once the slot has been given to a new connection.
    pub async fn evicted(&self) {
        self.signals.evict.notified().await;
    }

    /// Completes when the count of calls in flight next changes.
    pub async fn activity(&self) {
        self.signals.activity.notified().await;
    }

    /// Since when the connection has had no call in flight; `None` while it has one (or
    /// once its slot is gone).
    pub fn idle_since(&self) -> Option<Instant> {
        if self.signals.busy() || !self.slots.lock().open.contains_key(&self.id) {
            return None;
        }
        let nanos = self.signals.idle_since.load(Ordering::SeqCst);
        Some(self.slots.epoch + std::time::Duration::from_nanos(nanos))
    }

    /// Whether a call has started on the connection since it was accepted.
    pub fn calls_started(&self) -> bool {
        self.signals.started.load(Ordering::Relaxed)
    }

    /// Whether a call is in flight on the connection, whether or not it still has its slot.
    pub fn in_flight(&self) -> bool {
        self.signals.busy()
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.slots.lock().remove(self.id);
    }
}

/// A call in flight on a connection.
pub struct Call {
    epoch: Instant,
    signals: Arc<Signals>,
}

impl Drop for Call {
    fn drop(&mut self) {
        // The idle time first: a connection is never seen idle with an older time.
        let now = u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.signals.idle_since.store(now, Ordering::SeqCst);
        self.signals.in_flight.fetch_sub(1, Ordering::SeqCst);
        self.signals.activity.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    fn peer(last: u8) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(10, 0, 0, last))
    }

    #[test]
    fn a_full_port_closes_the_connection_idle_the_longest() {
        let slots = Slots::new(3, 3);
        let first = slots.take(peer(1)).unwrap();
        let second = slots.take(peer(2)).unwrap();
        let third = slots.take(peer(3)).unwrap();
        // The first is answering; of the other two, the second went idle first.
        let _busy = first.call();
        let call = third.call();
        drop(call);
        let _newcomer = slots.take(peer(4)).unwrap();
        assert_eq!(slots.open(), 3);
        assert_eq!(slots.evicted(), 1);
        assert!(second.idle_since().is_none(), "its slot is gone");
        assert!(third.idle_since().is_some(), "still open, idle");
        assert!(first.idle_since().is_none(), "busy");
        // The evicted connection's task is woken even though it was not waiting yet.
        let woken = futures_util::FutureExt::now_or_never(second.evicted());
        assert!(woken.is_some());
    }

    #[test]
    fn a_port_whose_every_connection_is_answering_refuses_and_says_so() {
        let slots = Slots::new(2, 2);
        let first = slots.take(peer(1)).unwrap();
        let second = slots.take(peer(2)).unwrap();
        assert!(slots.can_admit(), "both idle: either would make room");
        let _a = first.call();
        let _b = second.call();
        assert!(!slots.can_admit());
        assert_eq!(slots.take(peer(3)).err(), Some(Refused::Full));
        drop(_b);
        assert!(slots.can_admit());
        assert!(slots.take(peer(3)).is_ok());
        assert_eq!(slots.evicted(), 1);
    }

    #[test]
    fn a_peer_at_its_share_gives_up_its_own_idle_connection_not_anothers() {
        let slots = Slots::new(10, 2);
        let other = slots.take(peer(9)).unwrap();
        let own_busy = slots.take(peer(1)).unwrap();
        let own_idle = slots.take(peer(1)).unwrap();
        let _call = own_busy.call();
        let _third = slots.take(peer(1)).unwrap();
        assert!(own_idle.idle_since().is_none(), "the peer's idle one went");
        assert!(other.idle_since().is_some(), "the other peer's stays");
        // With both of its slots busy, the peer is refused though the port has room.
        let _second_call = _third.call();
        assert_eq!(slots.take(peer(1)).err(), Some(Refused::PeerFull));
        assert!(slots.take(peer(2)).is_ok());
    }

    #[test]
    fn a_slot_given_back_frees_its_peer_share() {
        let slots = Slots::new(2, 1);
        let slot = slots.take(peer(1)).unwrap();
        let _call = slot.call();
        assert_eq!(slots.take(peer(1)).err(), Some(Refused::PeerFull));
        drop(_call);
        drop(slot);
        assert_eq!(slots.open(), 0);
        assert!(slots.take(peer(1)).is_ok());
        assert_eq!(slots.evicted(), 0);
    }
}
