//! Serving a router on a listener: each connection takes a slot and is watched by its
//! deadlines ([`Connections`]), speaks TLS when configured, and is served by hyper
//! (HTTP/1.1, or HTTP/2 when the client opens with its preface, as Go's client does
//! after choosing `h2` by ALPN). Stopping drains: no new connections, open ones close
//! once their calls are answered, and whatever is still open after the grace period is
//! cut off.
//!
//! Written on hyper directly rather than through a server crate: axum-server's
//! connection loop and service wrappers polled three shutdown futures and allocated a
//! request extension map on every call, 2,500 of the 68,400 instructions a memo hit
//! cost (callgrind, 12 KiB); here a call costs what hyper and the router cost.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use axum::response::Response;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto::Builder;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;

use super::connections::{Admitted, Connections};

/// What can be served: a router, or the hook port's [`super::HookService`].
pub trait App:
    tower_service::Service<
        axum::http::Request<Incoming>,
        Response = Response,
        Error = std::convert::Infallible,
        Future: Send + 'static,
    > + Clone
    + Send
    + Sync
    + 'static
{
}

impl<T> App for T where
    T: tower_service::Service<
            axum::http::Request<Incoming>,
            Response = Response,
            Error = std::convert::Infallible,
            Future: Send + 'static,
        > + Clone
        + Send
        + Sync
        + 'static
{
}

/// A router being served; stops when [`Serving::stop`] is called or it is dropped.
pub struct Serving {
    stop: Option<oneshot::Sender<Duration>>,
    task: JoinHandle<()>,
}

impl Serving {
    /// Serves `app` on `listener` (over TLS with `tls`), each connection admitted by
    /// `connections`.
    ///
    /// # Errors
    /// The listener cannot be handed to Tokio.
    pub fn start(
        listener: std::net::TcpListener,
        tls: Option<Arc<rustls::ServerConfig>>,
        connections: Connections,
        app: impl App,
    ) -> io::Result<Serving> {
        listener.set_nonblocking(true)?;
        let listener = TcpListener::from_std(listener)?;
        let (stop, stopped) = oneshot::channel();
        let accepting = Accepting {
            tls: tls.map(TlsAcceptor::from),
            connections,
            app,
            http: Arc::new(http_builder()),
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

/// hyper's server half: HTTP/1.1 and HTTP/2, no timers of its own (time is bounded per
/// connection by [`Connections`]).
fn http_builder() -> Builder<TokioExecutor> {
    let mut builder = Builder::new(TokioExecutor::new());
    builder.http1().header_read_timeout(None);
    builder
}

struct Accepting<A> {
    tls: Option<TlsAcceptor>,
    connections: Connections,
    app: A,
    http: Arc<Builder<TokioExecutor>>,
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

impl<A: App> Accepting<A> {
    async fn run(self, listener: TcpListener, mut stopped: oneshot::Receiver<Duration>) {
        let grace = loop {
            tokio::select! {
                grace = &mut stopped => break grace.unwrap_or(Duration::ZERO),
                accepted = listener.accept() => match accepted {
                    Ok((stream, _)) => self.admit(stream),
                    Err(error) if out_of_resources(&error) => {
                        tracing::warn!(%error, "cannot accept a connection");
                        tokio::time::sleep(ACCEPT_RETRY).await;
                    }
                    Err(error) => tracing::debug!(%error, "a connection went away before it was accepted"),
                },
            }
        };
        drop(listener);
        self.connections.drain(grace).await;
    }

    /// Serves `stream` on a task of its own, or closes it unread when no slot is free.
    fn admit(&self, stream: TcpStream) {
        let Some(admitted) = self.connections.admit() else {
            return;
        };
        // Answers are written whole; a last small segment must not wait for an ACK.
        let _ = stream.set_nodelay(true);
        let tls = self.tls.clone();
        let service = admitted.timed(self.app.clone());
        let http = self.http.clone();
        tokio::spawn(async move {
            let liveness = admitted.liveness.clone();
            let connection = async {
                match tls {
                    Some(tls) => match tls.accept(stream).await {
                        Ok(stream) => serve(&http, stream, service, &admitted).await,
                        Err(error) => tracing::debug!(%error, "TLS handshake failed"),
                    },
                    None => serve(&http, stream, service, &admitted).await,
                }
            };
            liveness.until_cut_off(connection).await;
        });
    }
}

/// Serves HTTP on one connection until it closes; asked to drain, it closes once its
/// calls are answered.
async fn serve<I, A>(
    http: &Builder<TokioExecutor>,
    io: I,
    service: super::connections::Timed<A>,
    admitted: &Admitted,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    A: App,
{
    let connection = http.serve_connection(TokioIo::new(io), TowerToHyperService::new(service));
    let mut connection = std::pin::pin!(connection);
    let mut draining = false;
    let served = std::future::poll_fn(|cx| {
        if !draining && admitted.liveness.is_draining() {
            draining = true;
            connection.as_mut().graceful_shutdown();
        }
        connection.as_mut().poll(cx)
    })
    .await;
    // A client that goes away mid-call is its own business.
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
