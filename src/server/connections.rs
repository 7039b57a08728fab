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
//! those past it (the task serving a connection stops at once, whatever it was waiting
//! on), instead of a timer per request: hyper's header-read timer is armed and
//! disarmed on every request of a kept-alive connection, and on a resync load (memo hits,
//! `scripts/load.sh` at 12 KiB) that cost 10 % of the throughput. A deadline here is an
//! atomic store when a call starts and one when it ends.

use std::pin::{Pin, pin};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use futures_util::task::AtomicWaker;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::millis;

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
        let mut open = self.open();
        // Only this list holds a closed connection's liveness.
        open.retain(|liveness| Arc::strong_count(liveness) > 1);
        for liveness in open.iter() {
            if liveness.deadline.load(Ordering::Acquire) <= now {
                liveness.cut_off();
            }
        }
    }
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
pub struct Liveness {
    deadline: AtomicU64,
    calls: AtomicUsize,
    cut: AtomicBool,
    draining: AtomicBool,
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

    fn drain(&self) {
        self.draining.store(true, Ordering::Release);
        self.waker.wake();
    }

    /// The server is stopping: the connection should close once its calls are answered.
    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::Acquire)
    }

    /// Runs `work` (everything a connection does) until it ends or the connection is cut
    /// off; then `work` is dropped, closing the connection.
    pub async fn until_cut_off<T>(&self, work: impl Future<Output = T>) -> Option<T> {
        let mut work = pin!(work);
        std::future::poll_fn(|cx| {
            // Registered before the check, so a cut-off from now on wakes this task.
            self.waker.register(cx.waker());
            if self.is_cut() {
                return Poll::Ready(None);
            }
            work.as_mut().poll(cx).map(Some)
        })
        .await
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

impl Connections {
    /// A slot and a clock for a connection just accepted, or None (and a warning) when
    /// every slot is taken: the caller closes it unread.
    pub fn admit(&self) -> Option<Admitted> {
        let Ok(slot) = self.slots.clone().try_acquire_owned() else {
            tracing::warn!(
                limit = self.max,
                "connection refused: too many open connections"
            );
            return None;
        };
        let watched = &self.watched;
        let liveness = Arc::new(Liveness {
            deadline: AtomicU64::new(watched.deadline_in(watched.timeouts.first_request)),
            calls: AtomicUsize::new(0),
            cut: AtomicBool::new(false),
            draining: AtomicBool::new(false),
            waker: AtomicWaker::new(),
            watched: watched.clone(),
        });
        watched.open().push(liveness.clone());
        Some(Admitted {
            liveness,
            _slot: slot,
        })
    }

    /// Asks every open connection to close once its calls are answered, waits up to
    /// `grace` for them to, then cuts off the rest and waits for them to go.
    pub async fn drain(&self, grace: Duration) {
        for liveness in self.watched.open().iter() {
            liveness.drain();
        }
        let all = u32::try_from(self.max).unwrap_or(u32::MAX);
        if tokio::time::timeout(grace, self.slots.acquire_many(all))
            .await
            .is_ok()
        {
            return;
        }
        for liveness in self.watched.open().iter() {
            liveness.cut_off();
        }
        let _ = self.slots.acquire_many(all).await;
    }
}

impl Watched {
    fn open(&self) -> std::sync::MutexGuard<'_, Vec<Arc<Liveness>>> {
        self.open.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// What an open connection holds: its slot (given back when this is dropped) and its
/// clock.
pub struct Admitted {
    /// The connection's deadlines and its cut-off.
    pub liveness: Arc<Liveness>,
    _slot: OwnedSemaphorePermit,
}

impl Admitted {
    /// `service` with this connection's clock stopped while each call runs.
    pub fn timed<S>(&self, service: S) -> Timed<S> {
        Timed {
            inner: service,
            liveness: self.liveness.clone(),
        }
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

    fn deadline(admitted: &Admitted) -> u64 {
        admitted.liveness.deadline.load(Ordering::Acquire)
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
    async fn a_connection_without_a_request_is_cut_off_and_its_task_woken() {
        let connections = Connections::start(4, timeouts(100, 60_000));
        let admitted = connections.admit().unwrap();
        assert_eq!(connections.open(), 1);
        // Work that never ends by itself: only the cut-off ends it.
        let cut = tokio::time::timeout(
            Duration::from_secs(60),
            admitted
                .liveness
                .until_cut_off(std::future::pending::<()>()),
        )
        .await;
        assert_eq!(cut, Ok(None), "cut off in time");
        drop(admitted);
        assert_eq!(connections.open(), 0);
    }

    #[tokio::test]
    async fn a_running_call_stops_the_clock_and_its_end_restarts_it() {
        let connections = Connections::start(4, timeouts(60_000, 60_000));
        let admitted = connections.admit().unwrap();
        let mut service = admitted.timed(Answers);
        let accepted_deadline = deadline(&admitted);
        assert!(accepted_deadline < NO_DEADLINE);
        let call = tower_service::Service::call(&mut service, ());
        let other = tower_service::Service::call(&mut service, ());
        assert_eq!(deadline(&admitted), NO_DEADLINE);
        drop(call);
        assert_eq!(deadline(&admitted), NO_DEADLINE, "another call still runs");
        let _ = other.await;
        let idle_deadline = deadline(&admitted);
        assert!((accepted_deadline..NO_DEADLINE).contains(&idle_deadline));
        // Past its deadline it is cut off: its work ends.
        admitted.liveness.deadline.store(0, Ordering::Release);
        connections.watched.check();
        assert_eq!(admitted.liveness.until_cut_off(async { 1 }).await, None);
        drop(service);
        drop(admitted);
        connections.watched.check();
        assert!(
            connections.watched.open().is_empty(),
            "a closed connection is forgotten"
        );
    }

    #[tokio::test]
    async fn a_connection_beyond_the_cap_is_refused() {
        let connections = Connections::start(1, timeouts(60_000, 60_000));
        let _admitted = connections.admit().unwrap();
        assert!(connections.admit().is_none());
        assert_eq!(connections.open(), 1);
    }

    #[tokio::test]
    async fn draining_asks_connections_to_close_then_cuts_off_what_stays() {
        let connections = Connections::start(4, timeouts(60_000, 60_000));
        // One closes when asked; the other ignores it and is cut off after the grace.
        let polite = connections.admit().unwrap();
        let stubborn = connections.admit().unwrap();
        let polite = tokio::spawn(async move {
            let liveness = polite.liveness.clone();
            let asked = std::future::poll_fn(|_| {
                if liveness.is_draining() {
                    Poll::Ready(())
                } else {
                    Poll::Pending
                }
            });
            let closed = liveness.until_cut_off(asked).await;
            drop(polite);
            closed
        });
        let stubborn = tokio::spawn(async move {
            let liveness = stubborn.liveness.clone();
            let cut = liveness.until_cut_off(std::future::pending::<()>()).await;
            drop(stubborn);
            cut
        });
        connections.drain(Duration::from_millis(50)).await;
        assert_eq!(connections.open(), 0);
        assert_eq!(polite.await.unwrap(), Some(()), "closed when asked");
        assert_eq!(stubborn.await.unwrap(), None, "cut off");
    }
}
