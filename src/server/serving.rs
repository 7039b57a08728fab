//! Serving a router on a listener with hyper's connections and hyper-util's graceful
//! drain: HTTP/1.1, or HTTP/2 when a TLS client chooses `h2` by ALPN (as Go's client
//! does), TLS through tokio-rustls.
//!
//! What one connection may hold is bounded here, the same way on every port:
//! - a slot of [`Slots`]: a port has [`ConnectionLimits::max_connections`] of them and one
//!   peer address at most [`ConnectionLimits::max_per_peer`]; a new connection that finds
//!   them taken gets the slot of the connection idle the longest, and is closed unread
//!   only when every slot it could have is answering a call;
//! - memory for a request head: hyper's head limit ([`ConnectionLimits::max_header_bytes`],
//!   answered 431), HTTP/2's header list likewise; a connection's read buffer holds at
//!   most the larger of that and [`READ_BUFFER_BYTES`]. hyper-util's protocol-sniffing
//!   builder has no head limit apart from its read buffer, hence hyper's own builders
//!   (and no HTTP/2 without TLS, which no caller of ours speaks);
//! - time without a call: the TLS handshake and the first request within
//!   [`ConnectionLimits::first_request`], later [`ConnectionLimits::idle`] between calls,
//!   on HTTP/1.1 and HTTP/2 alike (hyper's HTTP/1 header-read timer covers a head sent
//!   slowly; its HTTP/2 side has keep-alive pings, which find dead peers, but no idle
//!   timeout at all, hence the timer here).
//!
//! The idle timeout stays above Go's 90 s client idle time so that Metacontroller, not
//! us, closes its idle connections and never races us for one.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::body::HttpBody;
use futures_util::TryFutureExt;

use hyper::server::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulConnection;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{oneshot, watch};
use tokio::task::{JoinHandle, JoinSet};
use tokio_rustls::TlsAcceptor;
use tower::ServiceExt;

use super::slots::{Call, Slot, Slots};

/// What one connection may hold (see the module docs).
#[derive(Debug, Clone, Copy)]
pub struct ConnectionLimits {
    /// Open connections at most; a new one takes an idle one's slot, or is closed unread
    /// when all are answering calls.
    pub max_connections: usize,
    /// Open connections from one peer address at most (the same rule within its share).
    pub max_per_peer: usize,
    /// From accepting a connection to its first request's headers (TLS included).
    pub first_request: Duration,
    /// From one answer to the next request's headers on a kept-alive connection.
    pub idle: Duration,
    /// Bytes of one request head at most (hyper's read buffer, HTTP/2's header list).
    pub max_header_bytes: usize,
}

impl ConnectionLimits {
    /// Small bounds for the probe port: a kubelet and a Prometheus scraper, nobody else.
    pub const PROBES: ConnectionLimits = ConnectionLimits {
        max_connections: 64,
        // A kubelet and a scraper each hold a few; a pool that holds more only competes
        // with itself.
        max_per_peer: 16,
        first_request: Duration::from_secs(5),
        idle: Duration::from_secs(120),
        max_header_bytes: 16 * 1024,
    };
}

/// A router being served; stops when [`Serving::stop`] is called or it is dropped.
pub struct Serving {
    stop: Option<oneshot::Sender<Duration>>,
    task: JoinHandle<()>,
}

impl Serving {
    /// Serves `app` on `listener` (over TLS with `tls`), each connection bounded by
    /// `limits` and holding one of `slots`. Must be called within a Tokio runtime.
    ///
    /// # Errors
    /// The listener cannot be handed to Tokio.
    pub fn start(
        listener: std::net::TcpListener,
        tls: Option<Arc<rustls::ServerConfig>>,
        limits: ConnectionLimits,
        slots: Slots,
        app: axum::Router,
    ) -> io::Result<Serving> {
        listener.set_nonblocking(true)?;
        let listener = TcpListener::from_std(listener)?;
        let (stop, stopped) = oneshot::channel();
        let accepting = Accepting {
            tls: tls.map(TlsAcceptor::from),
            http: Arc::new(Protocols::new(&limits)),
            limits,
            slots,
            app,
        };
        let task = tokio::spawn(accepting.run(listener, stopped));
        Ok(Serving {
            stop: Some(stop),
            task,
        })
    }

    /// Stops accepting, lets open connections finish their calls for up to `grace`, cuts
    /// off the rest, and returns once every connection is closed.
    ///
    /// # Errors
    /// The accept loop panicked.
    pub async fn stop(mut self, grace: Duration) -> Result<(), tokio::task::JoinError> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(grace);
        }
        (&mut self.task).await
    }
}

impl Drop for Serving {
    fn drop(&mut self) {
        // Dropping the sender stops the loop with no grace period.
        self.stop.take();
    }
}

/// The most one read from a connection brings in (hyper's buffer grows to it only while
/// reads fill it, as a large body's do): a buffer as small as a head limit costs a large
/// body many more receives. Sized by `scripts/load.sh`'s 2000 KiB case; a larger one
/// gained nothing measurable there.
const READ_BUFFER_BYTES: usize = 128 * 1024;

/// How often an HTTP/2 connection is pinged while it is open, and how long an answer may
/// take: a peer that has gone away without closing is found and its slot freed (Go's
/// client answers pings itself).
const H2_KEEP_ALIVE_INTERVAL: Duration = Duration::from_secs(30);
const H2_KEEP_ALIVE_TIMEOUT: Duration = Duration::from_secs(20);

/// How long a connection told to close (its slot given away, or idle too long) may take
/// to do so over HTTP/2, where closing is a GOAWAY and the peer's acknowledgement.
const CLOSE_GRACE: Duration = Duration::from_secs(5);

/// How connections speak HTTP: one builder for each version, set up once per port.
struct Protocols {
    h1: http1::Builder,
    h2: http2::Builder<TokioExecutor>,
}

impl Protocols {
    fn new(limits: &ConnectionLimits) -> Protocols {
        let mut h1 = http1::Builder::new();
        h1.timer(TokioTimer::new())
            .header_read_timeout(limits.idle)
            .max_header_size(limits.max_header_bytes)
            .max_buf_size(limits.max_header_bytes.max(READ_BUFFER_BYTES));
        let mut h2 = http2::Builder::new(TokioExecutor::new());
        h2.timer(TokioTimer::new())
            .keep_alive_interval(H2_KEEP_ALIVE_INTERVAL)
            .keep_alive_timeout(H2_KEEP_ALIVE_TIMEOUT)
            .max_header_list_size(u32::try_from(limits.max_header_bytes).unwrap_or(u32::MAX));
        Protocols { h1, h2 }
    }
}

struct Accepting {
    tls: Option<TlsAcceptor>,
    http: Arc<Protocols>,
    limits: ConnectionLimits,
    slots: Slots,
    app: axum::Router,
}

/// After an accept that failed for want of resources (file descriptors, memory), the loop
/// waits this long before the next, rather than spinning on the same error.
const ACCEPT_RETRY: Duration = Duration::from_millis(50);

/// Whether a failed accept says the process is out of something (worth a warning and a
/// pause), rather than that one client went away before it was accepted (which a client
/// can cause at will, so it must cost neither a pause nor a log line above debug).
fn out_of_resources(error: &io::Error) -> bool {
    matches!(
        error.raw_os_error(),
        Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM)
    )
}

impl Accepting {
    async fn run(self, listener: TcpListener, mut stopped: oneshot::Receiver<Duration>) {
        // hyper-util's GracefulShutdown hides each connection inside its own future, and a
        // connection here has other reasons to close gracefully (its slot given away, idle
        // too long), so the drain is one more thing each connection watches for.
        let (drain, draining) = watch::channel(false);
        let mut connections = JoinSet::new();
        let grace = loop {
            tokio::select! {
                grace = &mut stopped => break grace.unwrap_or(Duration::ZERO),
                accepted = listener.accept() => match accepted {
                    Ok((stream, peer)) => self.admit(stream, peer, draining.clone(), &mut connections),
                    Err(error) if out_of_resources(&error) => {
                        tracing::warn!(%error, "cannot accept a connection");
                        tokio::time::sleep(ACCEPT_RETRY).await;
                    }
                    Err(error) => tracing::debug!(%error, "a connection went away before it was accepted"),
                },
                // Finished connections are reaped as they end, so the set stays small.
                Some(_) = connections.join_next(), if !connections.is_empty() => {}
            }
        };
        drop(listener);
        // Open connections close once their calls are answered; after the grace period
        // the rest are cut off (dropping the set aborts their tasks).
        let _ = drain.send(true);
        let all_closed = async { while connections.join_next().await.is_some() {} };
        let _ = tokio::time::timeout(grace, all_closed).await;
        connections.shutdown().await;
    }

    /// Serves `stream` on a task of its own, or closes it unread when every slot it
    /// could have is answering a call.
    fn admit(
        &self,
        stream: TcpStream,
        peer: SocketAddr,
        draining: Draining,
        connections: &mut JoinSet<()>,
    ) {
        let slot = match self.slots.take(peer.ip()) {
            Ok(slot) => slot,
            Err(refused) => {
                // Warned once per burst would be nicer, but a refusal here means every slot
                // is answering a call: the port is at capacity, which an operator must see.
                tracing::warn!(
                    max_connections = self.limits.max_connections,
                    max_per_peer = self.limits.max_per_peer,
                    %peer,
                    reason = refused.reason(),
                    "every connection slot is answering a call; closing a new connection"
                );
                return;
            }
        };
        // Answers are written whole; a last small segment must not wait for an ACK.
        let _ = stream.set_nodelay(true);
        let connection = Connection {
            tls: self.tls.clone(),
            http: self.http.clone(),
            app: self.app.clone(),
            limits: self.limits,
            slot: Arc::new(slot),
            peer,
        };
        connections.spawn(connection.serve(stream, draining));
    }
}

struct Connection {
    tls: Option<TlsAcceptor>,
    http: Arc<Protocols>,
    app: axum::Router,
    limits: ConnectionLimits,
    slot: Arc<Slot>,
    peer: SocketAddr,
}

impl Connection {
    async fn serve(self, stream: TcpStream, draining: Draining) {
        let deadline = tokio::time::Instant::now() + self.limits.first_request;
        match self.tls.clone() {
            Some(tls) => match tokio::time::timeout_at(deadline, tls.accept(stream)).await {
                Ok(Ok(stream)) => {
                    let h2 = stream.get_ref().1.alpn_protocol() == Some(b"h2");
                    self.http(stream, h2, draining).await;
                }
                Ok(Err(error)) => tracing::debug!(%error, "TLS handshake failed"),
                Err(_) => tracing::debug!("TLS handshake not finished in time"),
            },
            None => self.http(stream, false, draining).await,
        }
    }

    /// Serves HTTP (version 2 when `h2`) until the connection closes, or until it is told
    /// to close (its slot given away, or no call for too long).
    async fn http<I>(self, io: I, h2: bool, draining: Draining)
    where
        I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let service = {
            let slot = self.slot.clone();
            let app = self.app;
            let peer = axum::extract::ConnectInfo(self.peer);
            hyper::service::service_fn(move |mut request: hyper::Request<hyper::body::Incoming>| {
                // Who is calling, as axum's `ConnectInfo` has it: shares are per client.
                request.extensions_mut().insert(peer);
                // The call lasts until its answer's body has been written or dropped.
                let call = slot.call();
                app.clone().oneshot(request).map_ok(move |response| {
                    response.map(|body| axum::body::Body::new(WithCall { body, _call: call }))
                })
            })
        };
        let io = TokioIo::new(io);
        let watch = Watch {
            slot: &self.slot,
            limits: &self.limits,
            h2,
        };
        if h2 {
            let connection = self.http.h2.serve_connection(io, service);
            watch.until_closed(draining, connection).await;
        } else {
            let connection = self.http.h1.serve_connection(io, service);
            watch.until_closed(draining, connection).await;
        }
    }
}

/// Set once the server stops accepting: open connections finish their calls and close.
type Draining = watch::Receiver<bool>;

/// What closes a connection apart from its peer.
struct Watch<'a> {
    slot: &'a Slot,
    limits: &'a ConnectionLimits,
    h2: bool,
}

impl Watch<'_> {
    /// Drives `connection` to its end; closes it when its slot is given away or it has
    /// been idle past its limit ([`ConnectionLimits::first_request`] before its first
    /// call, [`ConnectionLimits::idle`] after).
    async fn until_closed<C>(&self, mut draining: Draining, connection: C)
    where
        C: GracefulConnection,
        C::Error: std::fmt::Display,
    {
        let mut connection = std::pin::pin!(connection);
        let why = loop {
            // An HTTP/1.1 connection that has had a call is closed when idle by hyper's
            // header-read timer: only HTTP/2 and a first request are timed here, so a
            // call on a kept-alive HTTP/1.1 connection costs this task no wake-up.
            let timed = self.h2 || !self.slot.calls_started();
            let idle_until = self.slot.idle_since().filter(|_| timed).map(|since| {
                let limit = if self.slot.calls_started() {
                    self.limits.idle
                } else {
                    self.limits.first_request
                };
                tokio::time::Instant::from_std(since + limit)
            });
            tokio::select! {
                served = &mut connection => return log_end(served),
                () = self.slot.evicted() => break "its slot went to a new connection",
                () = self.slot.activity(), if timed => {}
                () = sleep_until(idle_until) => break "idle past its limit",
                _ = draining.wait_for(|drain| *drain) => break "the server is stopping",
            }
        };
        tracing::debug!(reason = why, "closing a connection");
        // An HTTP/1.1 connection's calls run inside its own future, so with none in flight
        // it is simply dropped (hyper's graceful close would wait for a request that has
        // not started). HTTP/2 says GOAWAY and lets any stream that just started finish.
        if !self.h2 && !self.slot.in_flight() {
            return;
        }
        connection.as_mut().graceful_shutdown();
        // Draining, the server's own grace period bounds the wait instead.
        let grace = if *draining.borrow() {
            Duration::MAX
        } else {
            CLOSE_GRACE
        };
        if let Ok(served) = tokio::time::timeout(grace, connection).await {
            log_end(served);
        }
    }
}

/// Completes at `until`, or never.
async fn sleep_until(until: Option<tokio::time::Instant>) {
    match until {
        Some(until) => tokio::time::sleep_until(until).await,
        None => std::future::pending().await,
    }
}

/// A client that goes away mid-call is its own business.
fn log_end(served: Result<(), impl std::fmt::Display>) {
    if let Err(error) = served {
        tracing::debug!(%error, "connection ended with an error");
    }
}

pin_project_lite::pin_project! {
    /// An answer's body that keeps its connection busy (not idle, so not given away)
    /// until the body has been written or dropped.
    struct WithCall<B> {
        #[pin]
        body: B,
        _call: Call,
    }
}

impl<B: HttpBody> HttpBody for WithCall<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        self.project().body.poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_running_out_of_resources_pauses_accepting() {
        // As the OS words them, so a wrong number would show.
        for (errno, says) in [
            (libc::EMFILE, "Too many open files"),
            (libc::ENFILE, "Too many open files in system"),
            (libc::ENOBUFS, "No buffer space available"),
            (libc::ENOMEM, "Cannot allocate memory"),
        ] {
            let error = io::Error::from_raw_os_error(errno);
            assert!(error.to_string().starts_with(says), "{error}");
            assert!(out_of_resources(&error), "{error}");
        }
        for errno in [libc::ECONNABORTED, libc::ECONNRESET, libc::EPROTO] {
            assert!(!out_of_resources(&io::Error::from_raw_os_error(errno)));
        }
    }
}
