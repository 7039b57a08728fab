//! A log output that never makes the caller wait: lines are appended to a bounded
//! buffer and one thread writes the buffer out in batches.
//!
//! Measured on a memo-hit load (`scripts/load.sh`, 12 KiB): writing each access line
//! synchronously cost a `write` per call on the async workers, and tracing-appender's
//! channel (a wake-up of its writer thread per line, which then spins in `sched_yield`)
//! took 16 % of the process's CPU. Here a line costs a short lock and a copy; the writer
//! wakes once per batch, gathers for [`GATHER`] and writes everything in one call.

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

/// Bytes waiting at most; a line that does not fit is dropped and counted. At the ~300
/// bytes of an access line, about 14,000 lines: seconds of the heaviest load.
pub const QUEUE_BYTES: usize = 4 * 1024 * 1024;

/// How long the writer lets lines gather after the first of a batch arrives, so that
/// under load it writes a batch per interval rather than a line per call.
pub const GATHER: Duration = Duration::from_millis(20);

#[derive(Default)]
struct Shared {
    state: Mutex<State>,
    arrived: Condvar,
    dropped: AtomicU64,
}

#[derive(Default)]
struct State {
    pending: Vec<u8>,
    closed: bool,
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The writing side, cheap to clone; one per log subscriber.
#[derive(Clone)]
pub struct LogQueue {
    shared: Arc<Shared>,
    limit: usize,
}

/// Stops the writer when dropped, after it has written every queued line.
pub struct Flush {
    shared: Arc<Shared>,
    writer: Option<JoinHandle<()>>,
}

impl LogQueue {
    /// A queue of at most `limit` bytes written out to `output` by a thread of its own.
    ///
    /// # Errors
    /// The thread cannot be started.
    pub fn start(
        output: impl Write + Send + 'static,
        limit: usize,
    ) -> std::io::Result<(LogQueue, Flush)> {
        let shared = Arc::new(Shared::default());
        let writer = std::thread::Builder::new()
            .name("metahooks-log".to_owned())
            .spawn({
                let shared = shared.clone();
                move || write_out(&shared, output)
            })?;
        let flush = Flush {
            shared: shared.clone(),
            writer: Some(writer),
        };
        Ok((LogQueue { shared, limit }, flush))
    }

    /// Queues one line (or drops it, counted, when the queue is full).
    pub fn push(&self, line: &[u8]) {
        let mut state = self.shared.state();
        if state.pending.len() + line.len() > self.limit {
            drop(state);
            self.shared.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let first = state.pending.is_empty();
        state.pending.extend_from_slice(line);
        drop(state);
        if first {
            self.shared.arrived.notify_one();
        }
    }

    /// Lines dropped so far.
    pub fn dropped(&self) -> u64 {
        self.shared.dropped.load(Ordering::Relaxed)
    }
}

impl Write for &LogQueue {
    fn write(&mut self, line: &[u8]) -> std::io::Result<usize> {
        self.push(line);
        Ok(line.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for LogQueue {
    type Writer = &'a LogQueue;

    fn make_writer(&'a self) -> Self::Writer {
        self
    }
}

fn write_out(shared: &Shared, mut output: impl Write) {
    let mut batch = Vec::new();
    loop {
        let mut state = shared.state();
        while state.pending.is_empty() && !state.closed {
            state = shared
                .arrived
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner);
        }
        if !state.closed {
            drop(state);
            std::thread::sleep(GATHER);
            state = shared.state();
        }
        std::mem::swap(&mut state.pending, &mut batch);
        let closed = state.closed;
        drop(state);
        // Where the output is gone (a closed pipe) there is nobody to tell.
        let _ = output.write_all(&batch).and_then(|()| output.flush());
        batch.clear();
        if closed {
            return;
        }
    }
}

impl Drop for Flush {
    fn drop(&mut self) {
        self.shared.state().closed = true;
        self.shared.arrived.notify_one();
        if let Some(writer) = self.writer.take() {
            let _ = writer.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An output the test can read after the writer has finished.
    #[derive(Clone, Default)]
    struct Shared(Arc<Mutex<Vec<u8>>>);

    impl Write for Shared {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn every_queued_line_is_written_in_order_by_the_time_the_flush_guard_drops() {
        let output = Shared::default();
        let (queue, flush) = LogQueue::start(output.clone(), QUEUE_BYTES).unwrap();
        let lines: Vec<String> = (0..2000).map(|i| format!("line {i}\n")).collect();
        for line in &lines {
            queue.push(line.as_bytes());
        }
        drop(flush);
        assert_eq!(
            String::from_utf8(output.0.lock().unwrap().clone()).unwrap(),
            lines.concat()
        );
        assert_eq!(queue.dropped(), 0);
    }

    #[test]
    fn a_line_that_does_not_fit_is_dropped_whole_and_counted() {
        // No writer yet: the queue fills exactly as the test pushes.
        let queue = LogQueue {
            shared: Arc::new(super::Shared::default()),
            limit: 10,
        };
        queue.push(b"12345\n");
        queue.push(b"123456\n");
        queue.push(b"1234\n");
        queue.push(b"123\n");
        assert_eq!(queue.dropped(), 2);
        queue.shared.state().closed = true;
        let output = Shared::default();
        write_out(&queue.shared, output.clone());
        assert_eq!(output.0.lock().unwrap().as_slice(), b"12345\n123\n");
    }
}
