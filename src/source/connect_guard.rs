//! A loopback relay that every http(s) connection of one libgit2 fetch goes through, so
//! that the address checked is the address connected to.
//!
//! libgit2 resolves host names itself and follows redirects itself. Without this guard a
//! name could resolve to a public address when checked and to a private one when libgit2
//! connects (DNS rebinding), and a redirect could carry a user's token to another port or
//! host. The guard resolves each destination once, checks every address against the
//! policy, connects to the address it checked, and refuses redirects to another origin.
//! Environment proxies are never used.
//!
//! - http and https: the guard stands in for the origin itself (libgit2 is given the
//!   guard's address, over plain http on loopback); it forwards each request to the
//!   origin, speaking TLS to it for https (rustls, with the source's CAs and client
//!   certificate, [`super::tls`]), and reads each answer's head: a redirect within the
//!   origin is pointed back at the guard, a redirect to another origin is refused.
//! - git:// and ssh://: the guard stands in for the server and relays the bytes to the
//!   checked address of the origin (ssh is encrypted end to end; the host key is checked
//!   against the original host name, see [`super::known_hosts`]).
//!
//! Every byte the remote sends is counted against the current [`Phase`]'s cap (the ref
//! advertisement has its own, far below the pack's), and every connection is closed at
//! the cap or at the fetch's deadline, whatever the remote does: libgit2's own checks
//! only run while a pack is received, never while refs are listed.

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::FetchError;
use super::policy::Policy;

/// Longest request head the guard reads from libgit2.
const MAX_HEAD_BYTES: usize = 16 * 1024;

/// The running guard of one fetch; stops when dropped.
pub struct ConnectGuard {
    address: SocketAddr,
    shared: Arc<Shared>,
    accept: Option<JoinHandle<()>>,
}

/// Longest request body the guard reads from libgit2 before forwarding it (the
/// negotiation of a fetch: `want` and `have` lines).
const MAX_BODY_BYTES: usize = 16 * 1024 * 1024;

/// How libgit2 reaches the guard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// As the server itself (http, https): origin-form requests relayed to the origin.
    Stand,
    /// As the daemon itself (git://): bytes relayed to the origin as they are.
    Raw,
}

/// What the remote is sending now; each phase has its own byte cap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Listing refs (`SourceLimits::refs_bytes`).
    Refs = 0,
    /// Negotiating and sending the pack (`SourceLimits::download_bytes`).
    Pack = 1,
}

struct Shared {
    policy: Policy,
    mode: Mode,
    /// TLS to the origin (https).
    tls: Option<Arc<rustls::ClientConfig>>,
    /// The guard's own address (where redirects within the origin are pointed).
    address: SocketAddr,
    origin: Origin,
    deadline: Instant,
    stop: AtomicBool,
    refusal: Mutex<Option<FetchError>>,
    phase: AtomicU8,
    /// Bytes received from the remote in each phase.
    received: [AtomicU64; 2],
    /// The URL as people see it, for refusals.
    shown: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Origin {
    host: String,
    port: u16,
}

impl Origin {
    /// The origin as a Host header names it.
    fn host_header(&self) -> String {
        self.to_string()
    }
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

impl ConnectGuard {
    /// Starts a guard for a fetch of `url` (http, https, git or ssh) that must end by
    /// `deadline`; `tls` is how it speaks to an https origin.
    ///
    /// # Errors
    /// [`FetchError::Other`] when no loopback port can be had, or an https URL comes
    /// without TLS settings.
    pub fn start(
        policy: &Policy,
        url: &url::Url,
        deadline: Instant,
        tls: Option<Arc<rustls::ClientConfig>>,
    ) -> Result<ConnectGuard, FetchError> {
        let tls = match url.scheme() {
            "https" => Some(tls.ok_or_else(|| {
                FetchError::Other("an https fetch needs TLS settings".to_owned())
            })?),
            _ => None,
        };
        let origin = Origin {
            host: bare_host(url.host_str().unwrap_or_default()).to_owned(),
            port: url.port_or_known_default().unwrap_or(match url.scheme() {
                "git" => 9418,
                "ssh" => 22,
                _ => 443,
            }),
        };
        let listener = TcpListener::bind(("127.0.0.1", 0))
            .map_err(|e| FetchError::Other(format!("cannot start the connection guard: {e}")))?;
        let address = listener
            .local_addr()
            .map_err(|e| FetchError::Other(format!("cannot start the connection guard: {e}")))?;
        let mode = match url.scheme() {
            "git" | "ssh" => Mode::Raw,
            _ => Mode::Stand,
        };
        let shared = Arc::new(Shared {
            policy: policy.clone(),
            mode,
            tls,
            address,
            origin,
            deadline,
            stop: AtomicBool::new(false),
            refusal: Mutex::new(None),
            phase: AtomicU8::new(Phase::Refs as u8),
            received: [AtomicU64::new(0), AtomicU64::new(0)],
            shown: super::redact_url(url.as_str()),
        });
        let accept_shared = shared.clone();
        let accept = std::thread::Builder::new()
            .name("connect-guard".to_owned())
            .spawn(move || accept_loop(&listener, &accept_shared))
            .map_err(|e| FetchError::Other(format!("cannot start the connection guard: {e}")))?;
        Ok(ConnectGuard {
            address,
            shared,
            accept: Some(accept),
        })
    }

    /// Where libgit2 reaches the guard.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// The URL libgit2 should fetch from: the same path on the guard's address (plain
    /// http for an https origin: the guard speaks TLS). An scp-like address (`raw`)
    /// keeps its relative path in libgit2's bracketed form, `[user@127.0.0.1:port]:path`.
    pub fn remote_url(&self, url: &url::Url, raw: &str) -> String {
        if let Some(scp) = super::policy::ScpUrl::parse(raw) {
            let user = scp.user.map(|u| format!("{u}@")).unwrap_or_default();
            return format!("[{user}{}]:{}", self.address, scp.path);
        }
        let mut local = url.clone();
        if local.scheme() == "https" {
            let _ = local.set_scheme("http");
        }
        let _ = local.set_ip_host(self.address.ip());
        let _ = local.set_port(Some(self.address.port()));
        local.to_string()
    }

    /// Why the guard refused or cut a connection, if it did (the first refusal).
    pub fn refusal(&self) -> Option<FetchError> {
        lock(&self.shared.refusal).clone()
    }

    /// What the remote sends from now on counts against `phase`'s cap.
    pub fn enter(&self, phase: Phase) {
        self.shared.phase.store(phase as u8, Ordering::SeqCst);
    }

    /// Bytes received from the remote so far, all phases together.
    pub fn received(&self) -> u64 {
        self.shared
            .received
            .iter()
            .map(|r| r.load(Ordering::SeqCst))
            .sum()
    }
}

impl Drop for ConnectGuard {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        // Wake the accept loop so it sees the flag.
        let _ = TcpStream::connect_timeout(&self.address, Duration::from_secs(1));
        if let Some(accept) = self.accept.take() {
            let _ = accept.join();
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn bare_host(host: &str) -> &str {
    host.trim_start_matches('[').trim_end_matches(']')
}

fn accept_loop(listener: &TcpListener, shared: &Arc<Shared>) {
    for stream in listener.incoming() {
        if shared.stop.load(Ordering::SeqCst) {
            return;
        }
        let Ok(stream) = stream else { continue };
        let shared = shared.clone();
        let _ = std::thread::Builder::new()
            .name("connect-guard-conn".to_owned())
            .spawn(move || {
                let _ = serve(stream, &shared);
            });
    }
}

impl Shared {
    fn remaining(&self) -> Duration {
        self.deadline
            .saturating_duration_since(Instant::now())
            .max(Duration::from_millis(100))
    }

    fn record(&self, refusal: FetchError) {
        let mut first = lock(&self.refusal);
        if first.is_none() {
            *first = Some(refusal);
        }
    }

    /// Counts `bytes` from the remote; the refusal when the phase's cap or the deadline
    /// is passed (the caller then closes the connection).
    fn count(&self, bytes: usize) -> Option<FetchError> {
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
    fn copy_down(&self, upstream: &mut Upstream, client: &mut TcpStream) -> io::Result<()> {
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

    fn refuse(&self, client: &mut TcpStream, refusal: FetchError) -> io::Result<()> {
        self.record(refusal);
        client
            .write_all(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
    }

    /// Resolves once, checks every address, and connects to the first one.
    fn connect(&self, target: &Origin) -> Result<TcpStream, FetchError> {
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
    fn open(&self, target: &Origin) -> Result<Upstream, FetchError> {
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
    fn transport_error(&self, error: &io::Error) -> FetchError {
        if let Some(detail) = super::tls::certificate_problem(error) {
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
enum Upstream {
    Plain(TcpStream),
    Tls(Box<rustls::StreamOwned<rustls::ClientConnection, TcpStream>>),
}

impl Upstream {
    fn socket(&self) -> &TcpStream {
        match self {
            Upstream::Plain(socket) => socket,
            Upstream::Tls(stream) => &stream.sock,
        }
    }

    fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        self.socket().set_read_timeout(timeout)
    }

    fn close(&mut self) {
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

/// One connection from libgit2: read the request head, decide, connect, relay.
fn serve(mut client: TcpStream, shared: &Shared) -> io::Result<()> {
    client.set_read_timeout(Some(shared.remaining()))?;
    if shared.mode == Mode::Raw {
        let upstream = match shared.connect(&shared.origin) {
            Ok(upstream) => upstream,
            Err(refusal) => {
                shared.record(refusal);
                return Ok(());
            }
        };
        return relay(client, upstream, shared);
    }
    let (head, rest) = read_head(&mut client)?;
    let mut slots = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut request = httparse::Request::new(&mut slots);
    let (Ok(httparse::Status::Complete(_)), Some(method), Some(target)) =
        (request.parse(&head), request.method, request.path)
    else {
        return client.write_all(b"HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\n");
    };
    let headers = owned(request.headers);
    let (method, target) = (method.to_owned(), target.to_owned());
    stand_in(client, shared, &method, &target, &headers, rest)
}

/// Headers as read: name, and value bytes (which need not be text).
type Headers = Vec<(String, Vec<u8>)>;

/// Headers a request or response head may carry at most (more is refused as malformed).
const MAX_HEADERS: usize = 64;

fn owned(headers: &[httparse::Header<'_>]) -> Headers {
    headers
        .iter()
        .map(|header| (header.name.to_owned(), header.value.to_vec()))
        .collect()
}

/// The value of the first header called `wanted` (any case), trimmed and lower-cased.
fn header_value(headers: &Headers, wanted: &str) -> Option<String> {
    headers
        .iter()
        .find(|(name, _)| name.eq_ignore_ascii_case(wanted))
        .map(|(_, value)| String::from_utf8_lossy(value).trim().to_ascii_lowercase())
}

/// http and https: the whole request is read from libgit2, then sent to the origin's
/// checked address (over TLS for https), one request per connection; the answer's head
/// is read so that no redirect leads libgit2 away from the guard.
fn stand_in(
    mut client: TcpStream,
    shared: &Shared,
    method: &str,
    target: &str,
    headers: &Headers,
    rest: Vec<u8>,
) -> io::Result<()> {
    if !target.starts_with('/') {
        return client.write_all(b"HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\n");
    }
    let body = read_body(&mut client, headers, rest)?;
    let mut upstream = match shared.open(&shared.origin) {
        Ok(upstream) => upstream,
        Err(refusal) => return shared.refuse(&mut client, refusal),
    };
    let mut forwarded = format!("{method} {target} HTTP/1.1\r\n").into_bytes();
    for (name, value) in headers {
        if !matches!(
            name.to_ascii_lowercase().as_str(),
            "host" | "proxy-connection" | "proxy-authorization" | "connection" | "keep-alive"
        ) {
            forwarded.extend_from_slice(name.as_bytes());
            forwarded.extend_from_slice(b": ");
            forwarded.extend_from_slice(value);
            forwarded.extend_from_slice(b"\r\n");
        }
    }
    forwarded.extend_from_slice(
        format!(
            "Host: {}\r\nConnection: close\r\n\r\n",
            shared.origin.host_header()
        )
        .as_bytes(),
    );
    let sent = upstream
        .write_all(&forwarded)
        .and_then(|()| upstream.write_all(&body))
        .and_then(|()| upstream.flush());
    if let Err(error) = sent {
        return shared.refuse(&mut client, shared.transport_error(&error));
    }
    let outcome = answer_back(&mut client, &mut upstream, shared);
    let _ = client.shutdown(Shutdown::Both);
    upstream.close();
    outcome
}

/// The request body libgit2 sends after the head: `Content-Length` bytes, or chunks up
/// to the last one (kept as they are: the head still says chunked). Bounded.
fn read_body(client: &mut TcpStream, headers: &Headers, mut body: Vec<u8>) -> io::Result<Vec<u8>> {
    let header = |wanted: &str| header_value(headers, wanted);
    let too_long = || io::Error::other("request body too long");
    if header("transfer-encoding").is_some_and(|v| v.contains("chunked")) {
        let mut chunk = [0u8; 16 * 1024];
        while !chunked_complete(&body) {
            if body.len() > MAX_BODY_BYTES {
                return Err(too_long());
            }
            let read = client.read(&mut chunk)?;
            if read == 0 {
                return Err(io::Error::other("connection closed inside a chunked body"));
            }
            body.extend_from_slice(&chunk[..read]);
        }
        return Ok(body);
    }
    let length: usize = header("content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    if length > MAX_BODY_BYTES {
        return Err(too_long());
    }
    if body.len() < length {
        let mut remaining = vec![0u8; length - body.len()];
        client.read_exact(&mut remaining)?;
        body.extend_from_slice(&remaining);
    }
    body.truncate(length);
    Ok(body)
}

/// Whether `body` holds a whole chunked body: sizes walked to the zero-size chunk and
/// the blank line after its (empty) trailer.
fn chunked_complete(body: &[u8]) -> bool {
    let mut at = 0;
    loop {
        let Some(line_end) = body[at..].windows(2).position(|w| w == b"\r\n") else {
            return false;
        };
        let size_text = String::from_utf8_lossy(&body[at..at + line_end]).into_owned();
        let size_text = size_text.split(';').next().unwrap_or("").trim().to_owned();
        let Ok(size) = usize::from_str_radix(&size_text, 16) else {
            return false;
        };
        at += line_end + 2;
        if size == 0 {
            // Trailer lines, then an empty line.
            return body[at..].windows(2).any(|w| w == b"\r\n")
                && (body[at..].starts_with(b"\r\n")
                    || body[at..].windows(4).any(|w| w == b"\r\n\r\n"));
        }
        at = match at.checked_add(size + 2) {
            Some(next) if next <= body.len() => next,
            _ => return false,
        };
    }
}

/// Passes the origin's answer back, pointing redirects within the origin at the guard
/// and refusing redirects that leave it.
fn answer_back(client: &mut TcpStream, upstream: &mut Upstream, shared: &Shared) -> io::Result<()> {
    let (head, rest) = match read_head(upstream) {
        Ok(read) => read,
        Err(error) => return shared.refuse(client, shared.transport_error(&error)),
    };
    if let Some(refusal) = shared.count(head.len() + rest.len()) {
        return shared.refuse(client, refusal);
    }
    let scheme = if shared.tls.is_some() {
        "https"
    } else {
        "http"
    };
    let mut slots = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut response = httparse::Response::new(&mut slots);
    let (Ok(httparse::Status::Complete(_)), Some(status)) = (response.parse(&head), response.code)
    else {
        return shared.refuse(
            client,
            FetchError::Other(format!(
                "{} answered with a malformed HTTP head",
                shared.origin
            )),
        );
    };
    let reason = response.reason.unwrap_or_default().to_owned();
    let headers = owned(response.headers);
    let mut out = format!("HTTP/1.1 {status} {reason}\r\n").into_bytes();
    for (name, value) in &headers {
        if (300..400).contains(&status) && name.eq_ignore_ascii_case("location") {
            let value = String::from_utf8_lossy(value);
            let base = format!("{scheme}://{}/", shared.origin.host_header());
            let target = url::Url::parse(&base).and_then(|b| b.join(value.trim()));
            let Ok(target) = target else {
                return shared.refuse(
                    client,
                    FetchError::Other(format!(
                        "{} answered a redirect that is not a URL",
                        shared.origin
                    )),
                );
            };
            let destination = Origin {
                host: bare_host(target.host_str().unwrap_or_default()).to_owned(),
                port: target.port_or_known_default().unwrap_or(80),
            };
            if target.scheme() != scheme || destination != shared.origin {
                let refusal = FetchError::RedirectRefused {
                    from: format!("{scheme}://{}", shared.origin),
                    to: format!("{}://{destination}", target.scheme()),
                };
                return shared.refuse(client, refusal);
            }
            let mut path = target.path().to_owned();
            if let Some(query) = target.query() {
                path.push('?');
                path.push_str(query);
            }
            out.extend_from_slice(
                format!("Location: http://{}{path}\r\n", shared.address).as_bytes(),
            );
        } else {
            out.extend_from_slice(name.as_bytes());
            out.extend_from_slice(b": ");
            out.extend_from_slice(value);
            out.extend_from_slice(b"\r\n");
        }
    }
    out.extend_from_slice(b"\r\n");
    client.write_all(&out)?;
    client.write_all(&rest)?;
    shared.copy_down(upstream, client)
}

/// Reads up to the blank line that ends a head; returns the head (blank line included,
/// as httparse wants it) and any bytes read past it.
fn read_head(client: &mut impl Read) -> io::Result<(Vec<u8>, Vec<u8>)> {
    let mut buffer = Vec::with_capacity(1024);
    let mut chunk = [0u8; 2048];
    loop {
        if let Some(end) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
            let rest = buffer.split_off(end + 4);
            return Ok((buffer, rest));
        }
        if buffer.len() > MAX_HEAD_BYTES {
            return Err(io::Error::other("request head too long"));
        }
        let read = client.read(&mut chunk)?;
        if read == 0 {
            return Err(io::Error::other(
                "connection closed before the request head",
            ));
        }
        buffer.extend_from_slice(&chunk[..read]);
    }
}

/// Copies both ways until either side closes, the remote passes a cap or the fetch's
/// time is up; then both connections are closed.
fn relay(client: TcpStream, upstream: TcpStream, shared: &Shared) -> io::Result<()> {
    client.set_read_timeout(Some(shared.remaining()))?;
    let (mut client_in, mut upstream_out) = (client.try_clone()?, upstream.try_clone()?);
    let upward = std::thread::Builder::new()
        .name("connect-guard-relay".to_owned())
        .spawn(move || {
            let _ = io::copy(&mut client_in, &mut upstream_out);
            let _ = upstream_out.shutdown(Shutdown::Write);
        })?;
    let (mut upstream_in, mut client_out) = (Upstream::Plain(upstream), client);
    let _ = shared.copy_down(&mut upstream_in, &mut client_out);
    let _ = client_out.shutdown(Shutdown::Both);
    upstream_in.close();
    let _ = upward.join();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn guard(policy: &Policy, url: &str) -> ConnectGuard {
        guard_with(policy, url, None)
    }

    fn guard_with(
        policy: &Policy,
        url: &str,
        material: Option<&crate::source::tls::TlsMaterial>,
    ) -> ConnectGuard {
        let url = url::Url::parse(url).unwrap_or_else(|e| panic!("{e}"));
        let tls =
            crate::source::tls::client_config(None, material).unwrap_or_else(|e| panic!("{e}"));
        ConnectGuard::start(
            policy,
            &url,
            Instant::now() + Duration::from_secs(30),
            Some(tls),
        )
        .unwrap_or_else(|e| panic!("{e}"))
    }

    fn ask(guard: &ConnectGuard, request: &str) -> String {
        let mut stream = TcpStream::connect(guard.address).unwrap_or_else(|e| panic!("{e}"));
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap_or_else(|e| panic!("{e}"));
        stream
            .write_all(request.as_bytes())
            .unwrap_or_else(|e| panic!("{e}"));
        let mut answer = [0u8; 64];
        let read = stream.read(&mut answer).unwrap_or(0);
        String::from_utf8_lossy(&answer[..read]).into_owned()
    }

    fn loose() -> Policy {
        Policy {
            allow_private_addresses: true,
            ..Policy::default()
        }
    }

    #[test]
    fn a_private_destination_is_refused_at_connect_time() {
        let strict = Policy::default();
        let g = guard(&strict, "https://127.0.0.1/repo.git");
        let answer = ask(&g, "GET /repo.git/info/refs HTTP/1.1\r\nHost: x\r\n\r\n");
        assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
        assert_eq!(g.refusal().map(|r| r.reason()), Some("HostRefused"));
    }

    /// A CA, a server certificate for `localhost` it signed, and a client certificate it
    /// signed; all PEM.
    struct Pki {
        ca: String,
        server: (String, String),
        client: (String, String),
    }

    fn pki() -> Pki {
        use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
        let ca_key = KeyPair::generate().unwrap_or_else(|e| panic!("{e}"));
        let mut ca_params = CertificateParams::new(Vec::new()).unwrap_or_else(|e| panic!("{e}"));
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca = ca_params
            .self_signed(&ca_key)
            .unwrap_or_else(|e| panic!("{e}"));
        let issuer = rcgen::Issuer::from_params(&ca_params, &ca_key);
        let leaf = |name: &str| {
            let key = KeyPair::generate().unwrap_or_else(|e| panic!("{e}"));
            let cert = CertificateParams::new(vec![name.to_owned()])
                .and_then(|p| p.signed_by(&key, &issuer))
                .unwrap_or_else(|e| panic!("{e}"));
            (cert.pem(), key.serialize_pem())
        };
        Pki {
            ca: ca.pem(),
            server: leaf("localhost"),
            client: leaf("client"),
        }
    }

    /// A TLS origin answering one request with 204; it asks for a client certificate
    /// signed by `client_ca` when given one.
    fn tls_origin(pki: &Pki, client_ca: Option<&str>) -> u16 {
        use rustls_pki_types::pem::PemObject;
        let certs: Vec<_> =
            rustls_pki_types::CertificateDer::pem_slice_iter(pki.server.0.as_bytes())
                .map(|c| c.unwrap_or_else(|e| panic!("{e}")))
                .collect();
        let key = rustls_pki_types::PrivateKeyDer::from_pem_slice(pki.server.1.as_bytes())
            .unwrap_or_else(|e| panic!("{e}"));
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .unwrap_or_else(|e| panic!("{e}"));
        let config = match client_ca {
            Some(ca) => {
                let mut roots = rustls::RootCertStore::empty();
                for cert in crate::source::tls::certificates(ca).unwrap_or_else(|e| panic!("{e}")) {
                    roots.add(cert).unwrap_or_else(|e| panic!("{e}"));
                }
                let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                    Arc::new(roots),
                    provider,
                )
                .build()
                .unwrap_or_else(|e| panic!("{e}"));
                builder.with_client_cert_verifier(verifier)
            }
            None => builder.with_no_client_auth(),
        }
        .with_single_cert(certs, key)
        .unwrap_or_else(|e| panic!("{e}"));
        let listener = TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("{e}"));
        let port = listener.local_addr().map(|a| a.port()).unwrap_or(0);
        let config = Arc::new(config);
        std::thread::spawn(move || {
            let Ok((socket, _)) = listener.accept() else {
                return;
            };
            let Ok(connection) = rustls::ServerConnection::new(config) else {
                return;
            };
            let mut stream = rustls::StreamOwned::new(connection, socket);
            if read_head(&mut stream).is_ok() {
                let _ = stream.write_all(b"HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n");
                stream.conn.send_close_notify();
                let _ = stream.flush();
            }
        });
        port
    }

    fn material(
        ca: Option<&str>,
        client: Option<&(String, String)>,
    ) -> crate::source::tls::TlsMaterial {
        crate::source::tls::TlsMaterial {
            secret: "tls".to_owned(),
            binding: crate::source::binding::Binding::Refused(String::new()),
            ca_pem: ca.map(str::to_owned),
            cert_pem: client.map(|c| c.0.clone()),
            key_pem: client.map(|c| c.1.clone()),
        }
    }

    const GET: &str = "GET /repo.git/info/refs HTTP/1.1\r\nHost: x\r\n\r\n";

    #[test]
    fn https_origins_are_checked_against_the_sources_ca() {
        let pki = pki();
        let port = tls_origin(&pki, None);
        let url = format!("https://localhost:{port}/repo.git");
        let trusted = guard_with(&loose(), &url, Some(&material(Some(&pki.ca), None)));
        let answer = ask(&trusted, GET);
        assert!(answer.starts_with("HTTP/1.1 204"), "{answer}");

        let port = tls_origin(&pki, None);
        let url = format!("https://localhost:{port}/repo.git");
        let untrusted = guard(&loose(), &url);
        let answer = ask(&untrusted, GET);
        assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
        let refusal = untrusted.refusal().unwrap_or_else(|| panic!("refused"));
        assert_eq!(refusal.reason(), "CertificateInvalid", "{refusal}");
        assert!(refusal.to_string().contains("UnknownIssuer"), "{refusal}");
    }

    #[test]
    fn a_probe_hears_a_server_refuse_a_missing_client_certificate() {
        let pki = pki();
        let port = tls_origin(&pki, Some(&pki.ca));
        let url = format!("https://localhost:{port}/app.env");
        let heard = crate::source::tls::probe(&loose(), &url, Some(&material(Some(&pki.ca), None)));
        let heard = heard.unwrap_or_else(|| panic!("the refusal is heard"));
        assert!(
            heard.contains("CertificateRequired") || heard.contains("certificate"),
            "{heard}"
        );
        // A server that accepts the connection is no certificate problem.
        let port = tls_origin(&pki, Some(&pki.ca));
        let url = format!("https://localhost:{port}/app.env");
        let fine = crate::source::tls::probe(
            &loose(),
            &url,
            Some(&material(Some(&pki.ca), Some(&pki.client))),
        );
        assert_eq!(fine, None);
        // Nor is a private address the policy refuses probed at all.
        assert_eq!(
            crate::source::tls::probe(&Policy::default(), &url, None),
            None
        );
    }

    #[test]
    fn a_client_certificate_is_presented_when_the_source_has_one() {
        let pki = pki();
        let port = tls_origin(&pki, Some(&pki.ca));
        let url = format!("https://localhost:{port}/repo.git");
        let with_cert = guard_with(
            &loose(),
            &url,
            Some(&material(Some(&pki.ca), Some(&pki.client))),
        );
        let answer = ask(&with_cert, GET);
        assert!(answer.starts_with("HTTP/1.1 204"), "{answer}");

        let port = tls_origin(&pki, Some(&pki.ca));
        let url = format!("https://localhost:{port}/repo.git");
        let without = guard_with(&loose(), &url, Some(&material(Some(&pki.ca), None)));
        let answer = ask(&without, GET);
        assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
        let refusal = without.refusal().unwrap_or_else(|| panic!("refused"));
        assert_eq!(refusal.reason(), "CertificateInvalid", "{refusal}");
    }

    /// An origin that answers one request with `answer` and returns the head it got.
    fn one_shot_origin(answer: &'static str) -> (u16, std::thread::JoinHandle<String>) {
        let upstream = TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("{e}"));
        let port = upstream.local_addr().map(|a| a.port()).unwrap_or(0);
        let server = std::thread::spawn(move || {
            let (mut conn, _) = upstream.accept().unwrap_or_else(|e| panic!("{e}"));
            let mut head = Vec::new();
            let mut byte = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") && conn.read(&mut byte).unwrap_or(0) == 1 {
                head.push(byte[0]);
            }
            conn.write_all(answer.as_bytes())
                .unwrap_or_else(|e| panic!("{e}"));
            String::from_utf8_lossy(&head).into_owned()
        });
        (port, server)
    }

    #[test]
    fn plain_http_is_relayed_to_the_origin_one_request_per_connection() {
        let loose = Policy {
            allow_private_addresses: true,
            ..Policy::default()
        };
        let (port, server) =
            one_shot_origin("HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n");
        let g = guard(&loose, &format!("http://127.0.0.1:{port}/repo.git"));
        let answer = ask(
            &g,
            "GET /repo.git/info/refs?service=git-upload-pack HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: keep-alive\r\n\r\n",
        );
        assert!(answer.starts_with("HTTP/1.1 204"), "{answer}");
        let seen = server.join().unwrap_or_default();
        assert!(
            seen.starts_with("GET /repo.git/info/refs?service=git-upload-pack HTTP/1.1\r\n"),
            "{seen}"
        );
        assert!(seen.contains(&format!("Host: 127.0.0.1:{port}")), "{seen}");
        assert!(
            seen.contains("Connection: close") && !seen.contains("keep-alive"),
            "{seen}"
        );
    }

    #[test]
    fn plain_http_redirects_stay_at_the_guard_or_are_refused() {
        let loose = Policy {
            allow_private_addresses: true,
            ..Policy::default()
        };
        let (port, server) = one_shot_origin(
            "HTTP/1.1 301 Moved\r\nLocation: /other.git/info/refs\r\nContent-Length: 0\r\n\r\n",
        );
        let g = guard(&loose, &format!("http://127.0.0.1:{port}/repo.git"));
        let mut stream = TcpStream::connect(g.address).unwrap_or_else(|e| panic!("{e}"));
        stream
            .write_all(b"GET /repo.git/info/refs HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap_or_else(|e| panic!("{e}"));
        let mut answer = String::new();
        let _ = stream.read_to_string(&mut answer);
        assert!(
            answer.contains(&format!(
                "Location: http://{}/other.git/info/refs",
                g.address
            )),
            "{answer}"
        );
        let _ = server.join();
        let (port, server) = one_shot_origin(
            "HTTP/1.1 302 Found\r\nLocation: http://127.0.0.1:1/elsewhere\r\nContent-Length: 0\r\n\r\n",
        );
        let g = guard(&loose, &format!("http://127.0.0.1:{port}/repo.git"));
        let answer = ask(&g, "GET /repo.git/info/refs HTTP/1.1\r\nHost: x\r\n\r\n");
        assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
        assert_eq!(g.refusal().map(|r| r.reason()), Some("RedirectRefused"));
        let _ = server.join();
    }
}
