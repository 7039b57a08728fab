//! What one hook connection may hold: a slot of a fixed number, and time.
//!
//! Each accepted connection holds a slot for as long as it is open; a connection accepted
//! while every slot is taken is closed at once, before any byte of it is read, so idle or
//! slow connections cannot pile up without bound.
//!
//! Time is bounded between calls, where the client has nothing to wait for: a new
//! connection must have its first request's headers in within the header-read timeout
//! (a TLS handshake included), and a kept-alive one its next request's within the idle
//! timeout of the previous answer. While a call runs, the body-read timeout and the
//! call's deadline bound it instead.
//!
//! One task checks every connection's deadline a few times per timeout and cuts off
//! those past it, instead of a timer per request: hyper's header-read timer is armed and
//! disarmed on every request of a kept-alive connection, and on a resync load (memo hits,
//! `scripts/load.sh` at 12 KiB) that cost 10 % of the throughput. A deadline here is an
//! atomic store when a call starts and one when it ends.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum_server::accept::Accept;
use futures_util::task::AtomicWaker;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// How long a connection may go without a call running, at its start and between calls.
#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    /// From accepting the connection to its first request's headers.
    pub first_request: Duration,
    /// From one answer to the next request's headers.
    pub idle: Duration,
}

impl Timeouts {
    /// How often deadlines are checked: a tenth of the shorter timeout, so a connection
    /// is cut off at most 10 % late, within 10 ms and 1 s.
    fn check_every(&self) -> Duration {
        (self.first_request.min(self.idle) / 10)
            .clamp(Duration::from_millis(10), Duration::from_secs(1))
    }
}

/// Hands out connection slots and watches the time of the connections holding them (see
/// the module docs). Cheap to clone; every clone shares the same slots.
#[derive(Clone)]
pub struct Connections {
    slots: Arc<Semaphore>,
    max: usize,
    watched: Arc<Watched>,
}

/// The open connections whose deadlines are checked.
struct Watched {
    /// What deadlines count from.
    epoch: Instant,
    timeouts: Timeouts,
    open: Mutex<Vec<Arc<Liveness>>>,
}

impl Connections {
    /// At most `max` connections at once, each cut off by `timeouts`. Starts the task
    /// that checks deadlines (so it must be called within a Tokio runtime); the task ends
    /// once every clone is dropped.
    pub fn start(max: usize, timeouts: Timeouts) -> Connections {
        let watched = Arc::new(Watched {
            epoch: Instant::now(),
            timeouts,
            open: Mutex::new(Vec::new()),
        });
        tokio::spawn(check_deadlines(Arc::downgrade(&watched)));
        Connections {
            slots: Arc::new(Semaphore::new(max)),
            max,
            watched,
        }
    }

    /// Connections open right now.
    pub fn open(&self) -> usize {
        self.max.saturating_sub(self.slots.available_permits())
    }
}

impl Watched {
    /// Milliseconds from the epoch to `delay` from now.
    fn deadline_in(&self, delay: Duration) -> u64 {
        millis(self.epoch.elapsed().saturating_add(delay))
    }

    /// Cuts off the connections past their deadline and forgets those that are closed.
    fn check(&self) {
        let now = millis(self.epoch.elapsed());
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        // Only this list holds a closed connection's liveness.
        open.retain(|liveness| Arc::strong_count(liveness) > 1);
        for liveness in open.iter() {
            if liveness.deadline.load(Ordering::Acquire) <= now {
                liveness.cut_off();
            }
        }
    }
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

async fn check_deadlines(watched: Weak<Watched>) {
    let every = match watched.upgrade() {
        Some(watched) => watched.timeouts.check_every(),
        None => return,
    };
    let mut ticks = tokio::time::interval(every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        match watched.upgrade() {
            Some(watched) => watched.check(),
            None => return,
        }
    }
}

/// A deadline that is never reached: a call is running.
const NO_DEADLINE: u64 = u64::MAX;

/// One connection's time: when it is cut off unless a call starts, and the waker of the
/// task serving it (so cutting it off does not wait for the client to send a byte).
struct Liveness {
    deadline: AtomicU64,
    calls: AtomicUsize,
    cut: AtomicBool,
    waker: AtomicWaker,
    watched: Arc<Watched>,
}

impl Liveness {
    fn cut_off(&self) {
        self.cut.store(true, Ordering::Release);
        self.waker.wake();
    }

    fn is_cut(&self) -> bool {
        self.cut.load(Ordering::Acquire)
    }

    fn call_started(self: &Arc<Self>) -> CallRunning {
        self.calls.fetch_add(1, Ordering::AcqRel);
        self.deadline.store(NO_DEADLINE, Ordering::Release);
        CallRunning(self.clone())
    }
}

/// Held while a call runs; the idle time starts when the last running call ends.
struct CallRunning(Arc<Liveness>);

impl Drop for CallRunning {
    fn drop(&mut self) {
        let liveness = &self.0;
        if liveness.calls.fetch_sub(1, Ordering::AcqRel) == 1 {
            let deadline = liveness.watched.deadline_in(liveness.watched.timeouts.idle);
            liveness.deadline.store(deadline, Ordering::Release);
        }
    }
}

impl<I, S> Accept<I, S> for Connections {
    type Stream = Counted<I>;
    type Service = Timed<S>;
    type Future = std::future::Ready<io::Result<(Counted<I>, Timed<S>)>>;

    fn accept(&self, stream: I, service: S) -> Self::Future {
        std::future::ready(match self.slots.clone().try_acquire_owned() {
            Ok(slot) => {
                let watched = &self.watched;
                let liveness = Arc::new(Liveness {
                    deadline: AtomicU64::new(watched.deadline_in(watched.timeouts.first_request)),
                    calls: AtomicUsize::new(0),
                    cut: AtomicBool::new(false),
                    waker: AtomicWaker::new(),
                    watched: watched.clone(),
                });
                watched
                    .open
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push(liveness.clone());
                Ok((
                    Counted {
                        inner: stream,
                        liveness: liveness.clone(),
                        _slot: slot,
                    },
                    Timed {
                        inner: service,
                        liveness,
                    },
                ))
            }
            Err(_) => {
                tracing::warn!(
                    limit = self.max,
                    "hook connection refused: too many open connections"
                );
                Err(io::Error::other(format!(
                    "more than {} open connections",
                    self.max
                )))
            }
        })
    }
}

/// A connection that gives its slot back when it is dropped, and fails every read and
/// write once it is cut off.
pub struct Counted<I> {
    inner: I,
    liveness: Arc<Liveness>,
    _slot: OwnedSemaphorePermit,
}

impl Liveness {
    /// `poll`'s result unless the connection is cut off. Pending leaves the waker behind
    /// first, so a cut-off that comes later still wakes the task.
    fn unless_cut<T>(
        &self,
        cx: &mut Context<'_>,
        poll: impl FnOnce(&mut Context<'_>) -> Poll<io::Result<T>>,
    ) -> Poll<io::Result<T>> {
        let cut = || {
            Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the connection sent no request within its time",
            )))
        };
        if self.is_cut() {
            return cut();
        }
        let polled = poll(cx);
        if polled.is_pending() {
            self.waker.register(cx.waker());
            if self.is_cut() {
                return cut();
            }
        }
        polled
    }
}

impl<I: AsyncRead + Unpin> AsyncRead for Counted<I> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let inner = Pin::new(&mut this.inner);
        this.liveness.unless_cut(cx, |cx| inner.poll_read(cx, buf))
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for Counted<I> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let inner = Pin::new(&mut this.inner);
        this.liveness.unless_cut(cx, |cx| inner.poll_write(cx, buf))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let inner = Pin::new(&mut this.inner);
        this.liveness.unless_cut(cx, |cx| inner.poll_flush(cx))
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let inner = Pin::new(&mut this.inner);
        this.liveness
            .unless_cut(cx, |cx| inner.poll_write_vectored(cx, bufs))
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

/// A connection's service: stops its connection's clock while a call runs.
#[derive(Clone)]
pub struct Timed<S> {
    inner: S,
    liveness: Arc<Liveness>,
}

impl<S, R> tower_service::Service<R> for Timed<S>
where
    S: tower_service::Service<R>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Running<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: R) -> Self::Future {
        let running = self.liveness.call_started();
        Running {
            inner: self.inner.call(request),
            _running: running,
        }
    }
}

pin_project_lite::pin_project! {
    /// A call's future, holding its connection's clock stopped until it ends (or is
    /// dropped).
    pub struct Running<F> {
        #[pin]
        inner: F,
        _running: CallRunning,
    }
}

impl<F: Future> Future for Running<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        self.project().inner.poll(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn timeouts(first_request_ms: u64, idle_ms: u64) -> Timeouts {
        Timeouts {
            first_request: Duration::from_millis(first_request_ms),
            idle: Duration::from_millis(idle_ms),
        }
    }

    /// A service whose calls end as soon as they are polled.
    #[derive(Clone)]
    struct Answers;

    impl tower_service::Service<()> for Answers {
        type Response = ();
        type Error = std::convert::Infallible;
        type Future = std::future::Ready<Result<(), Self::Error>>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, (): ()) -> Self::Future {
            std::future::ready(Ok(()))
        }
    }

    /// A connection accepted by `connections` (its stream and service), and the client's
    /// end.
    async fn accepted(
        connections: &Connections,
    ) -> (
        Counted<tokio::io::DuplexStream>,
        Timed<Answers>,
        tokio::io::DuplexStream,
    ) {
        let (server, client) = tokio::io::duplex(64);
        let (stream, service) = connections.accept(server, Answers).await.unwrap();
        (stream, service, client)
    }

    #[test]
    fn deadlines_are_checked_ten_times_per_timeout_within_bounds() {
        assert_eq!(
            timeouts(10_000, 120_000).check_every(),
            Duration::from_secs(1)
        );
        assert_eq!(
            timeouts(300, 120_000).check_every(),
            Duration::from_millis(30)
        );
        assert_eq!(timeouts(50, 50).check_every(), Duration::from_millis(10));
    }

    #[tokio::test]
    async fn a_connection_without_a_request_is_cut_off_and_its_reader_woken() {
        let connections = Connections::start(4, timeouts(100, 60_000));
        let (mut stream, _service, _client) = accepted(&connections).await;
        assert_eq!(connections.open(), 1);
        // Waits on the read until the deadline task cuts the connection off.
        let mut byte = [0u8; 1];
        let read = tokio::time::timeout(Duration::from_secs(60), stream.read(&mut byte)).await;
        let error = read.expect("cut off in time").unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::TimedOut);
        drop(stream);
        drop(_service);
        assert_eq!(connections.open(), 0);
    }

    #[tokio::test]
    async fn a_running_call_stops_the_clock_and_its_end_restarts_it() {
        let connections = Connections::start(4, timeouts(60_000, 60_000));
        let (mut stream, mut service, mut client) = accepted(&connections).await;
        let liveness = stream.liveness.clone();
        let accepted_deadline = liveness.deadline.load(Ordering::Acquire);
        assert!(accepted_deadline < NO_DEADLINE);
        let call = tower_service::Service::call(&mut service, ());
        let other = tower_service::Service::call(&mut service, ());
        assert_eq!(liveness.deadline.load(Ordering::Acquire), NO_DEADLINE);
        drop(call);
        assert_eq!(
            liveness.deadline.load(Ordering::Acquire),
            NO_DEADLINE,
            "another call still runs"
        );
        let _ = other.await;
        let idle_deadline = liveness.deadline.load(Ordering::Acquire);
        assert!((accepted_deadline..NO_DEADLINE).contains(&idle_deadline));
        // Past its deadline it is cut off; reads and writes fail from then on.
        liveness.deadline.store(0, Ordering::Release);
        connections.watched.check();
        assert!(stream.write_all(b"x").await.is_err());
        let mut byte = [0u8; 1];
        assert!(stream.read(&mut byte).await.is_err());
        // The client sees the connection end once the server side is dropped.
        drop(stream);
        drop(service);
        assert_eq!(client.read(&mut byte).await.unwrap(), 0);
        drop(liveness);
        connections.watched.check();
        assert!(
            connections.watched.open.lock().unwrap().is_empty(),
            "a closed connection is forgotten"
        );
    }

    #[tokio::test]
    async fn a_connection_beyond_the_cap_is_refused() {
        let connections = Connections::start(1, timeouts(60_000, 60_000));
        let (_stream, _service, _client) = accepted(&connections).await;
        let (server, _client) = tokio::io::duplex(64);
        let refused = connections.accept(server, Answers).await;
        assert!(refused.is_err());
        assert_eq!(connections.open(), 1);
    }
}
