//! The guard's side towards the origin: the time left, connecting to a checked address,
//! and copying what the origin sends, counted.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::{Phase, Shared};
use crate::FetchError;
use crate::lock;
use crate::policy::Policy;

impl Shared {
    pub(super) fn remaining(&self) -> Duration {
        self.deadline
            .saturating_duration_since(Instant::now())
            .max(Duration::from_millis(100))
    }

    pub(super) fn record(&self, refusal: FetchError) {
        let mut first = lock(&self.refusal);
        if first.is_none() {
            *first = Some(refusal);
        }
    }

    /// Counts `bytes` from the remote; the refusal when the phase's cap or the deadline
    /// is passed (the caller then closes the connection).
    pub(super) fn count(&self, bytes: usize) -> Option<FetchError> {
        let phase = self.phase.load(Ordering::SeqCst);
        let (index, cap, what) = if phase == Phase::Refs as u8 {
            (0, self.policy.limits.refs_bytes, "the ref advertisement of")
        } else {
            (1, self.policy.limits.download_bytes, "the download from")
        };
        let total = self.received[index].fetch_add(bytes as u64, Ordering::SeqCst) + bytes as u64;
        if total > cap {
            return Some(FetchError::TooLarge {
                what: format!("{what} {}", self.shown),
                limit: cap,
            });
        }
        if Instant::now() > self.deadline {
            return Some(FetchError::Timeout {
                url: self.shown.clone(),
                seconds: self.policy.limits.timeout_seconds,
            });
        }
        None
    }

    /// Copies what the remote sends to libgit2, counted, until either side closes, a cap
    /// is passed or the deadline comes. A read waits at most until the deadline, so a
    /// remote that trickles a byte at a time cannot stretch it.
    pub(super) fn copy_down(
        &self,
        upstream: &mut TcpStream,
        client: &mut TcpStream,
    ) -> io::Result<()> {
        let mut buffer = vec![0u8; 16 * 1024];
        loop {
            let left = self.deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                self.record(FetchError::Timeout {
                    url: self.shown.clone(),
                    seconds: self.policy.limits.timeout_seconds,
                });
                return Ok(());
            }
            upstream.set_read_timeout(Some(left))?;
            let read = match upstream.read(&mut buffer) {
                Ok(0) => return Ok(()),
                Ok(read) => read,
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) =>
                {
                    continue;
                }
                Err(e) => return Err(e),
            };
            if let Some(refusal) = self.count(read) {
                self.record(refusal);
                return Ok(());
            }
            client.write_all(&buffer[..read])?;
        }
    }

    /// Resolves once, checks every address, and connects to the first one.
    pub(super) fn connect(&self) -> Result<TcpStream, FetchError> {
        connect_checked(
            &self.policy,
            &self.host,
            self.port,
            self.remaining().min(Duration::from_secs(10)),
        )
    }
}

/// Resolves `host` once, checks every address against `policy`, and connects to the
/// checked addresses in turn (`localhost` is ::1 and 127.0.0.1; a server may listen on
/// one), each within `timeout`: the address checked is the address connected to.
///
/// # Errors
/// A refused address (`HostRefused`), or none that resolves or connects (`Unreachable`).
pub fn connect_checked(
    policy: &Policy,
    host: &str,
    port: u16,
    timeout: Duration,
) -> Result<TcpStream, FetchError> {
    let shown = if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    };
    let addresses: Vec<SocketAddr> = match host.parse::<std::net::IpAddr>() {
        Ok(ip) => vec![SocketAddr::new(ip, port)],
        Err(_) => (host, port)
            .to_socket_addrs()
            .map_err(|e| FetchError::Unreachable {
                url: shown.clone(),
                detail: format!("cannot resolve {host}: {e}"),
            })?
            .collect(),
    };
    for address in &addresses {
        policy.check_address(host, address.ip())?;
    }
    let mut last = format!("{host} has no addresses");
    for address in &addresses {
        match TcpStream::connect_timeout(address, timeout) {
            Ok(stream) => return Ok(stream),
            Err(error) => last = format!("{address}: {error}"),
        }
    }
    Err(FetchError::Unreachable {
        url: shown,
        detail: last,
    })
}
