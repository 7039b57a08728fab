//! Serving a router on a listener with hyper's connections and hyper-util's graceful
//! drain: HTTP/1.1, or HTTP/2 when a TLS client chooses `h2` by ALPN (as Go's client
//! does), TLS through tokio-rustls.
//!
//! What one connection may hold is bounded here, the same way on every port:
//! - a slot of [`ConnectionLimits::max_connections`]: a connection accepted while every
//!   slot is taken is closed before a byte of it is read;
//! - memory for a request head: hyper's head limit ([`ConnectionLimits::max_header_bytes`],
//!   answered 431), HTTP/2's header list likewise; a connection's read buffer holds at
//!   most the larger of that and [`READ_BUFFER_BYTES`]. hyper-util's protocol-sniffing
//!   builder has no head limit apart from its read buffer, hence hyper's own builders
//!   (and no HTTP/2 without TLS, which no caller of ours speaks);
//! - time: the TLS handshake and the first request's headers within
//!   [`ConnectionLimits::first_request`]; after that hyper's header-read timer, which it
//!   arms whenever a kept-alive connection waits for its next request, at
//!   [`ConnectionLimits::idle`].
//!
//! hyper has one timer for "waiting for a request head", so the first request's shorter
//! deadline is the one thing kept here: a connection that never sends anything would
//! otherwise hold its slot for the idle timeout, which must stay above Go's 90 s client
//! idle time so that Metacontroller, not us, closes idle connections.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use hyper::server::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::graceful::{GracefulConnection, GracefulShutdown, Watcher};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, oneshot};
use tokio::task::{JoinHandle, JoinSet};
use tokio_rustls::TlsAcceptor;
use tower::ServiceExt;

/// What one connection may hold (see the module docs).
#[derive(Debug, Clone, Copy)]
pub struct ConnectionLimits {
    /// Open connections at most; more are closed as soon as they are accepted.
    pub max_connections: usize,
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
        first_request: Duration::from_secs(5),
        idle: Duration::from_secs(120),
        max_header_bytes: 16 * 1024,
    };
}

/// The connection slots of one port; clones share them.
#[derive(Clone)]
pub struct Slots {
    semaphore: Arc<Semaphore>,
    max: usize,
}

impl Slots {
    /// `max` slots, all free.
    pub fn new(max: usize) -> Slots {
        Slots {
            semaphore: Arc::new(Semaphore::new(max)),
            max,
        }
    }

    /// Connections open right now.
    pub fn open(&self) -> usize {
        self.max.saturating_sub(self.semaphore.available_permits())
    }

    fn take(&self) -> Option<OwnedSemaphorePermit> {
        self.semaphore.clone().try_acquire_owned().ok()
    }
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
        let graceful = GracefulShutdown::new();
        let mut connections = JoinSet::new();
        let grace = loop {
            tokio::select! {
                grace = &mut stopped => break grace.unwrap_or(Duration::ZERO),
                accepted = listener.accept() => match accepted {
                    Ok((stream, _)) => self.admit(stream, graceful.watcher(), &mut connections),
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
        let _ = tokio::time::timeout(grace, graceful.shutdown()).await;
        connections.shutdown().await;
    }

    /// Serves `stream` on a task of its own, or closes it unread when no slot is free.
    fn admit(&self, stream: TcpStream, watcher: Watcher, connections: &mut JoinSet<()>) {
        let Some(slot) = self.slots.take() else {
            tracing::warn!(
                max_connections = self.limits.max_connections,
                "every connection slot is taken; closing a new connection"
            );
            return;
        };
        // Answers are written whole; a last small segment must not wait for an ACK.
        let _ = stream.set_nodelay(true);
        let connection = Connection {
            tls: self.tls.clone(),
            http: self.http.clone(),
            app: self.app.clone(),
            first_request: self.limits.first_request,
        };
        connections.spawn(async move {
            let _slot = slot;
            connection.serve(stream, watcher).await;
        });
    }
}

struct Connection {
    tls: Option<TlsAcceptor>,
    http: Arc<Protocols>,
    app: axum::Router,
    first_request: Duration,
}

impl Connection {
    async fn serve(self, stream: TcpStream, watcher: Watcher) {
        let deadline = tokio::time::Instant::now() + self.first_request;
        match self.tls.clone() {
            Some(tls) => match tokio::time::timeout_at(deadline, tls.accept(stream)).await {
                Ok(Ok(stream)) => {
                    let h2 = stream.get_ref().1.alpn_protocol() == Some(b"h2");
                    self.http(stream, h2, watcher, deadline).await;
                }
                Ok(Err(error)) => tracing::debug!(%error, "TLS handshake failed"),
                Err(_) => tracing::debug!("TLS handshake not finished in time"),
            },
            None => self.http(stream, false, watcher, deadline).await,
        }
    }

    /// Serves HTTP (version 2 when `h2`) until the connection closes; closes it at
    /// `deadline` unless a request has come in by then.
    async fn http<I>(self, io: I, h2: bool, watcher: Watcher, deadline: tokio::time::Instant)
    where
        I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let first = Arc::new(Notify::new());
        let service = {
            let first = first.clone();
            let app = self.app;
            hyper::service::service_fn(move |request| {
                first.notify_one();
                app.clone().oneshot(request)
            })
        };
        let io = TokioIo::new(io);
        if h2 {
            let connection = self.http.h2.serve_connection(io, service);
            until_closed(watcher, connection, &first, deadline).await;
        } else {
            let connection = self.http.h1.serve_connection(io, service);
            until_closed(watcher, connection, &first, deadline).await;
        }
    }
}

/// Drives `connection` to its end, or drops it at `deadline` if `first` has not been
/// told of a request by then.
async fn until_closed<C>(
    watcher: Watcher,
    connection: C,
    first: &Notify,
    deadline: tokio::time::Instant,
) where
    C: GracefulConnection,
    C::Error: std::fmt::Display,
{
    let mut connection = std::pin::pin!(watcher.watch(connection));
    tokio::select! {
        served = &mut connection => return log_end(served),
        () = first.notified() => {}
        () = tokio::time::sleep_until(deadline) => {
            tracing::debug!("no request in time; closing the connection");
            return;
        }
    }
    log_end(connection.await);
}

/// A client that goes away mid-call is its own business.
fn log_end(served: Result<(), impl std::fmt::Display>) {
    if let Err(error) = served {
        tracing::debug!(%error, "connection ended with an error");
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
