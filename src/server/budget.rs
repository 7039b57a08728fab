//! The bytes of request bodies being read or answered: a budget for the whole port and a
//! share of it for each client (peer address), so that one client holding large bodies
//! open cannot turn everyone else's calls into 429s.
//!
//! tower-http's body limit bounds one body; nothing in tower counts bytes across calls,
//! and a semaphore (tokio's) does the total. The share is a count per client beside it,
//! looked up twice per call and hashed with foldhash: SipHash cost 549 instructions per
//! 12 KiB call there, and the call 550 more in all (callgrind, 71.7k against 71.2k). The
//! table holds only clients with a body being read or answered, so it stays small
//! whatever addresses callers come from.

use std::collections::hash_map::Entry;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Which budget a body did not fit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OverBudget {
    /// The port's, held by every client's bodies together.
    Total,
    /// The client's own share.
    Client,
}

/// The body budget of a port.
pub struct BodyBudget {
    total: Arc<Semaphore>,
    total_bytes: usize,
    per_client: usize,
    clients: Arc<Mutex<Clients>>,
}

/// Bytes held per client, for clients that hold any.
type Clients = foldhash::HashMap<IpAddr, usize>;

impl BodyBudget {
    /// `total_bytes` for every body at once, `per_client` of them for any one client.
    pub fn new(total_bytes: usize, per_client: usize) -> BodyBudget {
        let total_bytes = total_bytes.min(Semaphore::MAX_PERMITS);
        BodyBudget {
            total: Arc::new(Semaphore::new(total_bytes)),
            total_bytes,
            per_client: per_client.min(total_bytes),
            clients: Arc::default(),
        }
    }

    /// Bytes held now by every body together.
    pub fn held(&self) -> usize {
        self.total_bytes
            .saturating_sub(self.total.available_permits())
    }

    /// Whether `bytes` more would fit for `client` now (for a declared length).
    ///
    /// # Errors
    /// The budget they would not fit.
    pub fn fits(&self, client: IpAddr, bytes: u64) -> Result<(), OverBudget> {
        if bytes > self.total.available_permits() as u64 {
            return Err(OverBudget::Total);
        }
        let held = self.lock().get(&client).copied().unwrap_or(0);
        if held as u64 + bytes > self.per_client as u64 {
            return Err(OverBudget::Client);
        }
        Ok(())
    }

    /// Nothing held yet, for `client`.
    pub fn start(&self, client: IpAddr) -> Held {
        Held {
            permit: None,
            client,
            bytes: 0,
            clients: self.clients.clone(),
        }
    }

    /// Takes `bytes` more into `held`, from the total and from its client's share.
    ///
    /// # Errors
    /// Either cannot hold them now (nothing is taken then).
    pub fn take(&self, held: &mut Held, bytes: usize) -> Result<(), OverBudget> {
        let permit = u32::try_from(bytes)
            .ok()
            .and_then(|n| self.total.clone().try_acquire_many_owned(n).ok())
            .ok_or(OverBudget::Total)?;
        let mut clients = self.lock();
        let client = clients.entry(held.client).or_insert(0);
        if *client + bytes > self.per_client {
            // The permit goes back as it is dropped.
            if *client == 0 {
                clients.remove(&held.client);
            }
            return Err(OverBudget::Client);
        }
        *client += bytes;
        held.bytes += bytes;
        match &mut held.permit {
            Some(held) => held.merge(permit),
            None => held.permit = Some(permit),
        }
        Ok(())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Clients> {
        self.clients
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// What one body holds of the budget; given back when dropped.
pub struct Held {
    permit: Option<OwnedSemaphorePermit>,
    client: IpAddr,
    bytes: usize,
    clients: Arc<Mutex<Clients>>,
}

impl Drop for Held {
    fn drop(&mut self) {
        if self.bytes == 0 {
            return;
        }
        let mut clients = self
            .clients
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Entry::Occupied(mut held) = clients.entry(self.client) {
            *held.get_mut() = held.get().saturating_sub(self.bytes);
            if *held.get() == 0 {
                held.remove();
            }
        }
        drop(self.permit.take());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    fn client(last: u8) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(10, 0, 0, last))
    }

    #[test]
    fn one_client_holds_at_most_its_share_and_others_keep_the_rest() {
        let budget = BodyBudget::new(100, 50);
        let mut first = budget.start(client(1));
        budget.take(&mut first, 30).unwrap();
        let mut second = budget.start(client(1));
        assert_eq!(budget.take(&mut second, 30), Err(OverBudget::Client));
        assert_eq!(budget.fits(client(1), 21), Err(OverBudget::Client));
        budget.take(&mut second, 20).unwrap();
        assert_eq!(budget.held(), 50);
        let mut other = budget.start(client(2));
        budget.take(&mut other, 50).unwrap();
        assert_eq!(budget.fits(client(3), 1), Err(OverBudget::Total));
        drop(first);
        drop(second);
        assert_eq!(budget.held(), 50);
        assert!(budget.fits(client(1), 50).is_ok());
        drop(other);
        assert_eq!(budget.held(), 0);
        assert!(budget.lock().is_empty(), "no client entry is left behind");
    }
}
