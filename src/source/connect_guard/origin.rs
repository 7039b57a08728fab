//! The guard's side towards the origin: the time left, connecting to a checked address
//! (TLS for https, with the source's CAs), and the connection that results.

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream, ToSocketAddrs};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::{Origin, Phase, Shared, lock};
use crate::source::FetchError;
use crate::source::policy::Policy;

/// How bytes go down to libgit2: as they come, or re-framed as chunks for an answer
/// whose body ends only when the origin closes (HTTP/1.0, or no length given), which
/// libgit2 reads as an unexpected end of stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Framing {
    AsIs,
    Chunked,
}

impl Framing {
    pub(super) fn write(self, client: &mut TcpStream, bytes: &[u8]) -> io::Result<()> {
        match self {
            Framing::AsIs => client.write_all(bytes),
            Framing::Chunked if bytes.is_empty() => Ok(()),
            Framing::Chunked => {
                client.write_all(format!("{:x}\r\n", bytes.len()).as_bytes())?;
                client.write_all(bytes)?;
                client.write_all(b"\r\n")
            }
        }
    }

    /// The origin closed: the body is complete.
    pub(super) fn end(self, client: &mut TcpStream) -> io::Result<()> {
        match self {
            Framing::AsIs => Ok(()),
            Framing::Chunked => client.write_all(b"0\r\n\r\n"),
        }
    }

    /// Writes the bytes read past the head.
    pub(super) fn first(self, client: &mut TcpStream, bytes: &[u8]) -> io::Result<()> {
        self.write(client, bytes)
    }
}

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
        framing: Framing,
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
                Ok(0) => return framing.end(client),
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
            framing.write(client, &buffer[..read])?;
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
        let mut socket = match self.proxy() {
            Some(proxy) => self.through(proxy, target)?,
            None => self.connect(target)?,
        };
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

    /// The egress proxy this fetch's http(s) requests go through, if any (git:// is
    /// relayed as bytes and never proxied).
    pub(super) fn proxy(&self) -> Option<&crate::source::proxy::ProxyUrl> {
        if self.mode != super::Mode::Stand {
            return None;
        }
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        self.policy
            .proxies
            .for_destination(scheme, &self.origin.host)
    }

    /// A connection to the proxy (its address checked like any other) that reaches
    /// `target`: for https a CONNECT tunnel, for http the proxy itself, which is sent
    /// absolute-form requests. The destination is named, not resolved, here; an address
    /// written as the host is still checked.
    fn through(
        &self,
        proxy: &crate::source::proxy::ProxyUrl,
        target: &Origin,
    ) -> Result<TcpStream, FetchError> {
        if let Ok(address) = target.host.parse::<std::net::IpAddr>() {
            self.policy.check_address(&target.host, address)?;
        }
        let mut socket = connect_checked(
            &self.policy,
            &proxy.host,
            proxy.port,
            self.remaining().min(Duration::from_secs(10)),
        )?;
        if self.tls.is_none() {
            return Ok(socket);
        }
        let failed = |detail: String| FetchError::Unreachable {
            url: self.shown.clone(),
            detail: format!("through the proxy {}: {detail}", proxy.shown()),
        };
        let _ = socket.set_read_timeout(Some(self.remaining()));
        let _ = socket.set_write_timeout(Some(self.remaining()));
        let request = format!(
            "CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n{}\r\n",
            proxy.authorization()
        );
        socket
            .write_all(request.as_bytes())
            .map_err(|e| failed(e.to_string()))?;
        let (head, rest) = super::exchange::read_head(&mut socket)
            .map_err(|e| failed(format!("no answer to CONNECT: {e}")))?;
        let mut headers = [httparse::EMPTY_HEADER; 32];
        let mut answer = httparse::Response::new(&mut headers);
        let code = match answer.parse(&head) {
            Ok(httparse::Status::Complete(_)) => answer.code.unwrap_or(0),
            _ => return Err(failed("its answer to CONNECT is not HTTP".to_owned())),
        };
        if !(200..300).contains(&code) || !rest.is_empty() {
            let reason = answer.reason.unwrap_or("");
            return Err(failed(format!(
                "CONNECT {target} was answered {code} {reason}"
            )));
        }
        Ok(socket)
    }

    /// The request target of a forwarded request: origin-form to the origin, and
    /// absolute-form to a proxy for an http destination (which then needs its
    /// credentials too, as a header line).
    pub(super) fn request_target(&self, path: &str) -> (String, String) {
        match self.proxy().filter(|_| self.tls.is_none()) {
            Some(proxy) => (
                format!("http://{}{path}", self.origin.host_header()),
                proxy.authorization(),
            ),
            None => (path.to_owned(), String::new()),
        }
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
