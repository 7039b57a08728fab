//! The CPU time a fetch spends in this process, counted poll by poll on the threads that
//! run it (the fetch's own future and its connection's task), so a remote that costs
//! more than the fetch's deadline in CPU is cut off as a git worker is by its limit.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use super::Meter;

/// CPU time this thread has used so far.
fn thread_cpu() -> Duration {
    let now = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    Duration::new(
        u64::try_from(now.tv_sec).unwrap_or(0),
        u32::try_from(now.tv_nsec).unwrap_or(0),
    )
}

pin_project_lite::pin_project! {
    /// `inner`, its polls counted against `meter`; `None` once the meter's CPU time is
    /// spent (the inner future is then no longer polled).
    pub(super) struct Metered<F> {
        #[pin]
        inner: F,
        meter: Arc<Meter>,
    }
}

impl<F> Metered<F> {
    pub(super) fn new(inner: F, meter: Arc<Meter>) -> Metered<F> {
        Metered { inner, meter }
    }
}

impl<F: Future> Future for Metered<F> {
    type Output = Option<F::Output>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        if this.meter.cpu_spent() {
            return Poll::Ready(None);
        }
        let started = thread_cpu();
        let polled = this.inner.poll(cx);
        this.meter.add_cpu(thread_cpu().saturating_sub(started));
        match polled {
            Poll::Ready(output) => Poll::Ready(Some(output)),
            Poll::Pending if this.meter.cpu_spent() => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }
}

/// Spawns a fetch's connection tasks with their CPU time counted: hyper-util's client
/// drives each connection on a task of its own.
#[derive(Clone)]
pub(super) struct MeteredExecutor {
    pub(super) meter: Arc<Meter>,
}

impl<F> hyper::rt::Executor<F> for MeteredExecutor
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    fn execute(&self, future: F) {
        // A connection whose fetch has spent its CPU time is dropped, and so closed.
        tokio::spawn(Metered::new(future, self.meter.clone()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_future_that_spends_its_cpu_time_is_stopped() {
        let meter = Meter::new("https://example.com/x", u64::MAX, Duration::from_millis(20));
        let spin = async {
            loop {
                // Busy work, yielding now and then so the meter sees each poll.
                let started = std::time::Instant::now();
                while started.elapsed() < Duration::from_millis(2) {
                    std::hint::spin_loop();
                }
                tokio::task::yield_now().await;
            }
        };
        let outcome: Option<()> = Metered::new(spin, meter.clone()).await;
        assert!(outcome.is_none());
        assert!(meter.cpu_spent());
        let finished = Metered::new(async { 7 }, Meter::new("x", 1, Duration::from_secs(1))).await;
        assert_eq!(finished, Some(7));
    }
}
