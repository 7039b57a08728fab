//! The threads hook answers are computed on: a fixed set fed through one queue.
//!
//! A hook computation is CPU work only (sources are fetched in the background). Tokio's
//! blocking pool ran each call on whichever of its threads was idle, and with four calls
//! in flight on two cores the calls hopped between threads and cores: 0.18 migrations
//! and 3.3 context switches per call (`perf stat`, edited 12 KiB definitions), against
//! one switch per call for a server doing the same work inline. Here a thread that is
//! busy takes the next job straight from the queue, and the threads stay on their cores.
//! One thread per core by default: twice as many gave 9 % more throughput on edited
//! 12 KiB definitions (a thread being woken overlaps with one computing) but a p99 of
//! 3.3× the limit server's instead of 1.3× (`scripts/load.sh`), as the extra threads
//! preempt each other mid-call.
//!
//! The hop still costs: `scripts/switches.sh 12 edited` (a later, noisier host than the
//! figures above) counts about 4.5 context switches per call here against 1.07 for the
//! same work done inline on an async worker. Running the work as a task of its own under
//! `tokio::task::block_in_place`, which hands the worker's scheduler to another thread
//! for the call, did not win it back: 3.8–4.4 switches and 380–470 migrations per 1,000
//! calls against 16–63 here. Done inline without a hand-off, a computation would hold a
//! worker, and the deadline's timer with it. What that would win was measured twice with
//! trial builds that computed inline on the async worker:
//! - edited 12 KiB definitions (`perf stat`): 1.0–1.1 switches per call instead of
//!   4.2–4.5, but 556–621 µs of CPU per call against 511–581 µs here, and no more calls
//!   a second;
//! - edited 31 KiB definitions (one build switching between the two ways, alternated,
//!   user and system time read from `/proc`): the same user time per call, 45–47 µs of
//!   system time against 66–68 here, and 3,100–3,191 calls a second against
//!   2,908–3,034, about 6 % more.
//!
//! So the hand-off costs a few percent of throughput on two cores, in the kernel; that
//! is the price of answering at the deadline. The rest of the gap to the inline limit
//! server is work it does not do: in one thread, without serving, this server's
//! computation of an edited definition takes about 1.2× the limit server's JSON and
//! YAML reads (`cargo bench --bench apimock_sync`, "edited" against "json + yaml":
//! 1.22× for a 10 KB definition, 1.19× for 900 KB), mostly validation and hashing.
//!
//! The queue is bounded by the in-flight slots (a job is only queued while its caller
//! holds one), and a job whose caller has given up is skipped by the caller's closure.
//! Peak memory of large validations is bounded separately (one heavy slot per core).

use std::any::Any;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::thread;

use crossbeam_channel::{Receiver, Sender};
use tokio::sync::oneshot;

type Job = Box<dyn FnOnce() + Send + 'static>;

/// A job's closure panicked; the thread that ran it lives on.
#[derive(Debug)]
pub struct Panicked;

/// A fixed pool of compute threads. Dropping it lets the threads finish their current
/// job and end.
pub struct ComputePool {
    jobs: Sender<Job>,
}

impl ComputePool {
    /// Starts `threads` threads (at least one) that enter `runtime` so Tokio-aware code
    /// (timers, spawning) works on them as on the runtime's own blocking threads.
    ///
    /// # Errors
    /// The operating system refused to start a thread.
    pub fn start(threads: usize, runtime: tokio::runtime::Handle) -> std::io::Result<ComputePool> {
        let (jobs, queue) = crossbeam_channel::unbounded::<Job>();
        for index in 0..threads.max(1) {
            let queue = queue.clone();
            let runtime = runtime.clone();
            thread::Builder::new()
                .name(format!("metahooks-compute-{index}"))
                .spawn(move || work(&queue, &runtime))?;
        }
        Ok(ComputePool { jobs })
    }

    /// Runs `job` on a compute thread and waits (asynchronously) for its result.
    ///
    /// # Errors
    /// [`Panicked`] when the job panicked, or when the pool's threads are gone.
    pub async fn run<T, F>(&self, job: F) -> Result<T, Panicked>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        let (answer, answered) = oneshot::channel();
        let boxed: Job = Box::new(move || {
            let result =
                catch_unwind(AssertUnwindSafe(job)).map_err(|payload: Box<dyn Any + Send>| {
                    drop(payload);
                    Panicked
                });
            // The caller may have stopped waiting (its deadline passed): nothing to do.
            let _ = answer.send(result);
        });
        if self.jobs.send(boxed).is_err() {
            return Err(Panicked);
        }
        answered.await.unwrap_or(Err(Panicked))
    }
}

/// `configured` threads, or for 0 one per core this process may use (its CPU quota
/// included; two assumed when that cannot be told).
pub fn threads(configured: usize) -> usize {
    if configured > 0 {
        return configured;
    }
    thread::available_parallelism().map_or(2, |n| n.get())
}

fn work(queue: &Receiver<Job>, runtime: &tokio::runtime::Handle) {
    let _runtime = runtime.enter();
    while let Ok(job) = queue.recv() {
        job();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn runs_jobs_off_the_async_workers_and_survives_a_panic() {
        let pool = ComputePool::start(2, tokio::runtime::Handle::current()).unwrap();
        let name = pool
            .run(|| thread::current().name().map(str::to_owned))
            .await
            .unwrap();
        assert!(name.is_some_and(|n| n.starts_with("metahooks-compute-")));
        assert!(pool.run(|| -> u8 { panic!("boom") }).await.is_err());
        // Both threads still answer after the panic.
        let (a, b) = tokio::join!(pool.run(|| 1), pool.run(|| 2));
        assert_eq!((a.unwrap(), b.unwrap()), (1, 2));
    }

    #[test]
    fn a_configured_count_wins_and_zero_means_at_most_one_per_core() {
        assert_eq!(threads(3), 3);
        // Counted apart from the code under test: the processors the kernel lists. A
        // CPU quota or affinity may allow fewer, never more, and never none.
        let listed = std::fs::read_to_string("/proc/cpuinfo")
            .unwrap()
            .lines()
            .filter(|line| line.starts_with("processor"))
            .count();
        let chosen = threads(0);
        assert!(chosen >= 1 && chosen <= listed, "{chosen} of {listed}");
    }
}
