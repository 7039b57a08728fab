//! A loopback relay that every http(s) connection of one libgit2 fetch goes through, so
//! that the address checked is the address connected to.
//!
//! libgit2 resolves host names itself and follows redirects itself. Without this guard a
//! name could resolve to a public address when checked and to a private one when libgit2
//! connects (DNS rebinding), and a redirect could carry a user's token to another port or
//! host. The guard resolves each destination once, checks every address against the
//! policy, connects to the address it checked, and refuses another origin when
//! credentials are in play. Environment proxies are never used.
//!
//! - https: libgit2 is told to use the guard as its proxy, so every connection, a
//!   redirected one included, starts with `CONNECT host:port`.
//! - http: libgit2 ignores proxies for plain http, so the guard stands in for the origin
//!   itself (libgit2 is given the guard's address); it forwards each request to the
//!   origin and reads each answer's head: a redirect within the origin is pointed back
//!   at the guard, a redirect to another origin is refused.
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

/// How libgit2 reaches the guard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// As its proxy (https): `CONNECT host:port`, then TLS end to end.
    Tunnel,
    /// As the server itself (http): origin-form requests relayed to the origin.
    Stand,
    /// As the daemon itself (git://): bytes relayed to the origin as they are.
    Raw,
}

/// What the remote is sending now; each phase has its own byte cap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Listing refs (`Limits::refs_bytes`).
    Refs = 0,
    /// Negotiating and sending the pack (`Limits::download_bytes`).
    Pack = 1,
}

struct Shared {
    policy: Policy,
    mode: Mode,
    /// The guard's own address (where redirects within the origin are pointed).
    address: SocketAddr,
    origin: Origin,
    /// Credentials are offered on this fetch: no connection may leave the origin.
    credentials: bool,
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
    /// Starts a guard for a fetch of `url` (http, https or git) that must end by
    /// `deadline`.
    ///
    /// # Errors
    /// [`FetchError::Other`] when no loopback port can be had.
    pub fn start(
        policy: &Policy,
        url: &url::Url,
        credentials: bool,
        deadline: Instant,
    ) -> Result<ConnectGuard, FetchError> {
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
            "http" => Mode::Stand,
            "git" | "ssh" => Mode::Raw,
            _ => Mode::Tunnel,
        };
        let shared = Arc::new(Shared {
            policy: policy.clone(),
            mode,
            address,
            origin,
            credentials,
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

    /// The proxy URL to hand libgit2 (https fetches).
    pub fn proxy_url(&self) -> Option<String> {
        (self.shared.mode == Mode::Tunnel).then(|| format!("http://{}", self.address))
    }

    /// The URL libgit2 should fetch from: `url` itself for https, the same path on the
    /// guard's address for the others. An scp-like address (`raw`) keeps its relative
    /// path in libgit2's bracketed form, `[user@127.0.0.1:port]:path`.
    pub fn remote_url(&self, url: &url::Url, raw: &str) -> String {
        if self.shared.mode == Mode::Tunnel {
            return url.to_string();
        }
        if let Some(scp) = super::policy::ScpUrl::parse(raw) {
            let user = scp.user.map(|u| format!("{u}@")).unwrap_or_default();
            return format!("[{user}{}]:{}", self.address, scp.path);
        }
        let mut local = url.clone();
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
    fn copy_down(&self, upstream: &mut TcpStream, client: &mut TcpStream) -> io::Result<()> {
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
        let addresses: Vec<SocketAddr> = match target.host.parse::<std::net::IpAddr>() {
            Ok(ip) => vec![SocketAddr::new(ip, target.port)],
            Err(_) => (target.host.as_str(), target.port)
                .to_socket_addrs()
                .map_err(|e| FetchError::Unreachable {
                    url: target.to_string(),
                    detail: format!("cannot resolve {}: {e}", target.host),
                })?
                .collect(),
        };
        for address in &addresses {
            self.policy.check_address(&target.host, address.ip())?;
        }
        let first = addresses.first().ok_or_else(|| FetchError::Unreachable {
            url: target.to_string(),
            detail: format!("{} has no addresses", target.host),
        })?;
        let timeout = self.remaining().min(Duration::from_secs(10));
        TcpStream::connect_timeout(first, timeout).map_err(|e| FetchError::Unreachable {
            url: target.to_string(),
            detail: e.to_string(),
        })
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
    let text = String::from_utf8_lossy(&head).into_owned();
    let mut lines = text.split("\r\n");
    let request_line = lines.next().unwrap_or_default().to_owned();
    let headers: Vec<&str> = lines.filter(|l| !l.is_empty()).collect();
    let mut parts = request_line.split(' ');
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    match shared.mode {
        Mode::Tunnel => tunnel(client, shared, method, target, &rest),
        Mode::Stand => stand_in(client, shared, method, target, &headers, &rest),
        Mode::Raw => Ok(()),
    }
}

/// https: `CONNECT host:port`, checked, then bytes both ways (TLS is end to end).
fn tunnel(
    mut client: TcpStream,
    shared: &Shared,
    method: &str,
    target: &str,
    rest: &[u8],
) -> io::Result<()> {
    let destination = match parse_authority(target) {
        Some(origin) if method.eq_ignore_ascii_case("CONNECT") => origin,
        _ => return client.write_all(b"HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\n"),
    };
    if shared.credentials && destination != shared.origin {
        let refusal = FetchError::RedirectRefused {
            from: shared.origin.to_string(),
            to: destination.to_string(),
        };
        return shared.refuse(&mut client, refusal);
    }
    let mut upstream = match shared.connect(&destination) {
        Ok(upstream) => upstream,
        Err(refusal) => return shared.refuse(&mut client, refusal),
    };
    client.write_all(b"HTTP/1.1 200 Connection Established\r\n\r\n")?;
    upstream.write_all(rest)?;
    relay(client, upstream, shared)
}

/// http: the request goes to the origin's checked address, one request per connection;
/// the answer's head is read so that no redirect leads libgit2 away from the guard.
fn stand_in(
    mut client: TcpStream,
    shared: &Shared,
    method: &str,
    target: &str,
    headers: &[&str],
    rest: &[u8],
) -> io::Result<()> {
    if !target.starts_with('/') {
        return client.write_all(b"HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\n");
    }
    let mut upstream = match shared.connect(&shared.origin) {
        Ok(upstream) => upstream,
        Err(refusal) => return shared.refuse(&mut client, refusal),
    };
    let mut forwarded = format!("{method} {target} HTTP/1.1\r\n");
    for line in headers {
        let name = line
            .split(':')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase();
        if !matches!(
            name.as_str(),
            "host" | "proxy-connection" | "proxy-authorization" | "connection" | "keep-alive"
        ) {
            forwarded.push_str(line);
            forwarded.push_str("\r\n");
        }
    }
    forwarded.push_str(&format!(
        "Host: {}\r\nConnection: close\r\n\r\n",
        shared.origin.host_header()
    ));
    upstream.write_all(forwarded.as_bytes())?;
    upstream.write_all(rest)?;
    // The request body (if any) flows up while the answer's head is read.
    upstream.set_read_timeout(Some(shared.remaining()))?;
    let (mut client_in, mut upstream_out) = (client.try_clone()?, upstream.try_clone()?);
    let upward = std::thread::Builder::new()
        .name("connect-guard-relay".to_owned())
        .spawn(move || {
            let _ = io::copy(&mut client_in, &mut upstream_out);
        })?;
    let outcome = answer_back(&mut client, &mut upstream, shared);
    let _ = client.shutdown(Shutdown::Both);
    let _ = upstream.shutdown(Shutdown::Both);
    let _ = upward.join();
    outcome
}

/// Passes the origin's answer back, pointing redirects within the origin at the guard
/// and refusing redirects that leave it.
fn answer_back(
    client: &mut TcpStream,
    upstream: &mut TcpStream,
    shared: &Shared,
) -> io::Result<()> {
    let (head, rest) = read_head(upstream)?;
    if let Some(refusal) = shared.count(head.len() + rest.len()) {
        return shared.refuse(client, refusal);
    }
    let text = String::from_utf8_lossy(&head).into_owned();
    let mut lines = text.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let status: u16 = status_line
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or(0);
    let mut out = format!("{status_line}\r\n");
    for line in lines.filter(|l| !l.is_empty()) {
        let (name, value) = line.split_once(':').unwrap_or((line, ""));
        if (300..400).contains(&status) && name.trim().eq_ignore_ascii_case("location") {
            let base = format!("http://{}/", shared.origin.host_header());
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
            if target.scheme() != "http" || destination != shared.origin {
                let refusal = FetchError::RedirectRefused {
                    from: shared.origin.to_string(),
                    to: format!("{}://{destination}", target.scheme()),
                };
                return shared.refuse(client, refusal);
            }
            let mut path = target.path().to_owned();
            if let Some(query) = target.query() {
                path.push('?');
                path.push_str(query);
            }
            out.push_str(&format!("Location: http://{}{path}\r\n", shared.address));
        } else {
            out.push_str(line);
            out.push_str("\r\n");
        }
    }
    out.push_str("\r\n");
    client.write_all(out.as_bytes())?;
    client.write_all(&rest)?;
    shared.copy_down(upstream, client)
}

/// `host:port` of a CONNECT request (IPv6 in brackets).
fn parse_authority(target: &str) -> Option<Origin> {
    let (host, port) = target.rsplit_once(':')?;
    Some(Origin {
        host: bare_host(host).to_owned(),
        port: port.parse().ok()?,
    })
}

/// Reads up to the blank line that ends a request head; returns the head and any bytes
/// read past it.
fn read_head(client: &mut TcpStream) -> io::Result<(Vec<u8>, Vec<u8>)> {
    let mut buffer = Vec::with_capacity(1024);
    let mut chunk = [0u8; 2048];
    loop {
        if let Some(end) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
            let rest = buffer.split_off(end + 4);
            buffer.truncate(end);
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
    let (mut upstream_in, mut client_out) = (upstream, client);
    let _ = shared.copy_down(&mut upstream_in, &mut client_out);
    let _ = client_out.shutdown(Shutdown::Both);
    let _ = upstream_in.shutdown(Shutdown::Both);
    let _ = upward.join();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn guard(policy: &Policy, url: &str, credentials: bool) -> ConnectGuard {
        let url = url::Url::parse(url).unwrap_or_else(|e| panic!("{e}"));
        ConnectGuard::start(
            policy,
            &url,
            credentials,
            Instant::now() + Duration::from_secs(30),
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

    #[test]
    fn a_private_destination_is_refused_at_connect_time() {
        let strict = Policy::default();
        let g = guard(&strict, "https://example.com/repo.git", false);
        let answer = ask(
            &g,
            "CONNECT 127.0.0.1:443 HTTP/1.1\r\nHost: 127.0.0.1:443\r\n\r\n",
        );
        assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
        assert_eq!(g.refusal().map(|r| r.reason()), Some("HostRefused"));
    }

    #[test]
    fn credentials_never_leave_the_origin() {
        let loose = Policy {
            allow_private_addresses: true,
            ..Policy::default()
        };
        let g = guard(&loose, "https://127.0.0.1:8443/repo.git", true);
        let answer = ask(
            &g,
            "CONNECT 127.0.0.1:9443 HTTP/1.1\r\nHost: 127.0.0.1:9443\r\n\r\n",
        );
        assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
        let refusal = g.refusal().map(|r| r.to_string()).unwrap_or_default();
        assert!(refusal.contains("127.0.0.1:9443"), "{refusal}");
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
        let g = guard(&loose, &format!("http://127.0.0.1:{port}/repo.git"), true);
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
        let g = guard(&loose, &format!("http://127.0.0.1:{port}/repo.git"), false);
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
        let g = guard(&loose, &format!("http://127.0.0.1:{port}/repo.git"), false);
        let answer = ask(&g, "GET /repo.git/info/refs HTTP/1.1\r\nHost: x\r\n\r\n");
        assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
        assert_eq!(g.refusal().map(|r| r.reason()), Some("RedirectRefused"));
        let _ = server.join();
    }
}
