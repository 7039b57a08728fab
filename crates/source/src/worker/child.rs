//! The worker side: read the job, fence this process in, run the job, write the outcome.
//! Nothing is logged; the server reads stdout (the outcome as JSON) and the end of
//! stderr (a panic or an allocation failure names itself there).

use std::io::{Read, Write};
use std::time::Duration;

use rlimit::Resource;

use super::{Fetched, GitJob, GitOutcome, WorkerLimits, run};
use crate::FetchError;

/// Longest job description read from stdin (paths and credentials, never content).
const MAX_JOB_BYTES: u64 = 4 * 1024 * 1024;

/// Exit codes besides success, for the server's message.
pub const EXIT_BAD_JOB: i32 = 2;
/// The limits could not be set: the job is not run unfenced.
pub const EXIT_NO_LIMITS: i32 = 3;
/// The worker's own watchdog ended it (the server did not, having gone away).
pub const EXIT_WATCHDOG: i32 = 4;

/// `metahooks source-worker`: one job from stdin, its outcome on stdout.
pub fn main() -> i32 {
    let mut input = Vec::new();
    if let Err(error) = std::io::stdin().take(MAX_JOB_BYTES).read_to_end(&mut input) {
        eprintln!("cannot read the job: {error}");
        return EXIT_BAD_JOB;
    }
    let job: GitJob = match serde_json::from_slice(&input) {
        Ok(job) => job,
        Err(error) => {
            eprintln!("the job is not readable: {error}");
            return EXIT_BAD_JOB;
        }
    };
    drop(input);
    if let Err(error) = fence(&job) {
        eprintln!("cannot set the worker's limits: {error}");
        return EXIT_NO_LIMITS;
    }
    configure_libgit2();
    start_watchdog(job.limits);
    let outcome = name_memory_limit(run(&job), job.limits.memory_bytes);
    let mut stdout = std::io::stdout().lock();
    let written = serde_json::to_writer(&mut stdout, &outcome)
        .map_err(std::io::Error::other)
        .and_then(|()| stdout.flush());
    match written {
        Ok(()) => 0,
        Err(error) => {
            eprintln!("cannot write the outcome: {error}");
            EXIT_BAD_JOB
        }
    }
}

/// Address space, CPU seconds, file size and core dumps, set on this process before
/// libgit2 opens anything. A limit that cannot be set stops the job.
fn fence(job: &GitJob) -> std::io::Result<()> {
    let memory = job.limits.memory_bytes;
    Resource::AS.set(memory, memory)?;
    // CPU time cannot exceed wall-clock time in a single-threaded fetch by much; the
    // soft limit (SIGXCPU) catches a decompression loop even if the kill came late.
    let seconds = job.limits.timeout_ms.div_ceil(1000) + 1;
    Resource::CPU.set(seconds, seconds + 1)?;
    // No single file the job writes (a pack, its index) may outgrow the download limit.
    let file = job.policy.limits.download_bytes + 16 * 1024 * 1024;
    Resource::FSIZE.set(file, file)?;
    Resource::CORE.set(0, 0)?;
    // In a container the workers share the server's memory limit: when it is reached,
    // the kernel should end a worker (its fetch fails with MemoryLimit), not the server.
    // Raising one's own score needs no privilege; where /proc is not writable the
    // address-space limit above still holds.
    let _ = std::fs::write("/proc/self/oom_score_adj", "1000");
    Ok(())
}

/// Small mapped windows and object cache: libgit2's defaults (1 GiB windows, 8 GiB of
/// mappings, 256 MiB of cached objects) assume a trusted repository and would reach the
/// address-space limit on an honest large pack.
#[allow(unsafe_code)]
fn configure_libgit2() {
    // SAFETY: these write libgit2 process globals without synchronisation; this runs on
    // the worker's only thread before any libgit2 object exists, and the worker runs
    // exactly one job.
    unsafe {
        let _ = git2::opts::set_mwindow_size(4 * 1024 * 1024);
        let _ = git2::opts::set_mwindow_mapped_limit(32 * 1024 * 1024);
        let _ = git2::opts::set_cache_max_size(16 * 1024 * 1024);
    }
}

/// Ends the process a little after the job's deadline even if the server is gone and
/// cannot kill it (a tarpit would otherwise hold it forever).
fn start_watchdog(limits: WorkerLimits) {
    let after = Duration::from_millis(limits.timeout_ms) + Duration::from_secs(3);
    let _ = std::thread::Builder::new()
        .name("watchdog".to_owned())
        .spawn(move || {
            std::thread::sleep(after);
            std::process::exit(EXIT_WATCHDOG);
        });
}

/// libgit2 reports an allocation failure without knowing the limit; say which it was.
fn name_memory_limit(mut outcome: GitOutcome, memory_bytes: u64) -> GitOutcome {
    let fill = |error: &mut FetchError| {
        if let FetchError::MemoryLimit { limit_mib, .. } = error {
            *limit_mib = memory_bytes / (1024 * 1024);
        }
    };
    if let Err(error) = &mut outcome.resolved {
        fill(error);
    }
    for (_, fetched) in &mut outcome.results {
        if let Fetched::Failed(error) = fetched {
            fill(error);
        }
    }
    outcome
}
