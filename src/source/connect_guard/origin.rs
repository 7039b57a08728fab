//! The guard's side towards the origin: the time left, connecting to a checked address
//! (TLS for https, with the source's CAs), and the connection that results.

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream, ToSocketAddrs};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::{Origin, Phase, Shared, lock};
use crate::source::FetchError;
use crate::source::policy::Policy;

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
        upstream: &mut Upstream,
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

    pub(super) fn refuse(&self, client: &mut TcpStream, refusal: FetchError) -> io::Result<()> {
        self.record(refusal);
        client
            .write_all(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
    }

    /// Resolves once, checks every address, and connects to the first one.
    pub(super) fn connect(&self, target: &Origin) -> Result<TcpStream, FetchError> {
        connect_checked(
            &self.policy,
            &target.host,
            target.port,
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
    let shown = Origin {
        host: host.to_owned(),
        port,
    };
    let addresses: Vec<SocketAddr> = match host.parse::<std::net::IpAddr>() {
        Ok(ip) => vec![SocketAddr::new(ip, port)],
        Err(_) => (host, port)
            .to_socket_addrs()
            .map_err(|e| FetchError::Unreachable {
                url: shown.to_string(),
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
        url: shown.to_string(),
        detail: last,
    })
}

impl Shared {
    /// Connects to `target`'s checked address and, for https, completes the TLS
    /// handshake (the server's certificate checked against the roots and the source's
    /// CAs, for the origin's host name).
    pub(super) fn open(&self, target: &Origin) -> Result<Upstream, FetchError> {
        let mut socket = self.connect(target)?;
        let Some(config) = &self.tls else {
            return Ok(Upstream::Plain(socket));
        };
        let name = rustls_pki_types::ServerName::try_from(target.host.clone()).map_err(|e| {
            FetchError::InvalidUrl {
                url: self.shown.clone(),
                problem: format!("{} is not a TLS server name: {e}", target.host),
            }
        })?;
        let mut connection = rustls::ClientConnection::new(config.clone(), name)
            .map_err(|e| FetchError::Other(format!("cannot start TLS: {e}")))?;
        let _ = socket.set_read_timeout(Some(self.remaining()));
        let _ = socket.set_write_timeout(Some(self.remaining()));
        while connection.is_handshaking() {
            connection
                .complete_io(&mut socket)
                .map_err(|error| self.transport_error(&error))?;
        }
        Ok(Upstream::Tls(Box::new(rustls::StreamOwned::new(
            connection, socket,
        ))))
    }

    /// What a failed exchange with the origin was: a certificate problem in rustls'
    /// words, the deadline, or the origin unreachable.
    pub(super) fn transport_error(&self, error: &io::Error) -> FetchError {
        if let Some(detail) = crate::source::tls::certificate_problem(error) {
            return FetchError::CertificateInvalid {
                url: self.shown.clone(),
                detail,
            };
        }
        if matches!(
            error.kind(),
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
        ) {
            return FetchError::Timeout {
                url: self.shown.clone(),
                seconds: self.policy.limits.timeout_seconds,
            };
        }
        FetchError::Unreachable {
            url: self.shown.clone(),
            detail: error.to_string(),
        }
    }
}

/// The connection to the origin: a socket, or TLS over one.
pub(super) enum Upstream {
    Plain(TcpStream),
    Tls(Box<rustls::StreamOwned<rustls::ClientConnection, TcpStream>>),
}

impl Upstream {
    pub(super) fn socket(&self) -> &TcpStream {
        match self {
            Upstream::Plain(socket) => socket,
            Upstream::Tls(stream) => &stream.sock,
        }
    }

    pub(super) fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        self.socket().set_read_timeout(timeout)
    }

    pub(super) fn close(&mut self) {
        if let Upstream::Tls(stream) = self {
            stream.conn.send_close_notify();
            let _ = stream.flush();
        }
        let _ = self.socket().shutdown(Shutdown::Both);
    }
}

impl Read for Upstream {
    fn read(&mut self, buffer: &mut [u8]) -> io::Result<usize> {
        match self {
            Upstream::Plain(socket) => socket.read(buffer),
            // A peer that closes without close_notify ends the answer all the same
            // (HTTP framing, not TLS, says where it ends).
            Upstream::Tls(stream) => match stream.read(buffer) {
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Ok(0),
                other => other,
            },
        }
    }
}

impl Write for Upstream {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        match self {
            Upstream::Plain(socket) => socket.write(bytes),
            Upstream::Tls(stream) => stream.write(bytes),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Upstream::Plain(socket) => socket.flush(),
            Upstream::Tls(stream) => stream.flush(),
        }
    }
}
