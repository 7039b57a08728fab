//! The server side: start a worker for a job, feed it, read its outcome within bounds,
//! and kill it at the deadline. A worker that dies is a failed fetch with a reason
//! naming what ended it, never a failure of the server.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

use super::{GitJob, GitOutcome, SUBCOMMAND, child};
use crate::{FetchError, redact_url};

/// How git jobs run.
#[derive(Debug, Clone)]
pub enum Isolation {
    /// In a worker process: this program, run as `PROGRAM source-worker`. The server
    /// passes its own executable.
    Process(PathBuf),
    /// On a blocking thread of this process, with no memory or CPU bound: only for the
    /// engine's own unit tests, whose test binary cannot be re-executed as a worker.
    InProcess,
}

impl Isolation {
    /// Workers re-executing the running binary.
    ///
    /// # Errors
    /// The running executable cannot be found.
    pub fn current_exe() -> Result<Isolation, FetchError> {
        std::env::current_exe()
            .map(Isolation::Process)
            .map_err(|e| FetchError::EngineFailed {
                detail: format!("cannot find this program to run fetch workers: {e}"),
            })
    }
}

/// Time a worker gets past its job's deadline to write its answer before it is killed.
const GRACE: Duration = Duration::from_secs(2);
/// The end of stderr kept (a panic message, an allocation failure).
const STDERR_BYTES: usize = 8 * 1024;
/// Environment passed to workers; nothing else (proxies, git's config paths) is.
const PASSED_ENV: &[&str] = &["TMPDIR", "PATH"];

/// Runs `job` under `isolation` and returns its outcome, whatever the worker did.
pub async fn run(isolation: &Isolation, job: GitJob) -> GitOutcome {
    match isolation {
        Isolation::InProcess => {
            let limit = Duration::from_millis(job.limits.timeout_ms) + GRACE;
            let timeout = timeout_error(&job);
            let failed = GitOutcome::failed(&job, timeout.clone());
            let job_url = job.url.clone();
            let work = tokio::task::spawn_blocking(move || super::run(&job));
            match tokio::time::timeout(limit, work).await {
                Ok(Ok(outcome)) => outcome,
                Ok(Err(join)) => GitOutcome {
                    resolved: Err(FetchError::WorkerCrashed {
                        url: redact_url(&job_url),
                        detail: format!("the git fetch aborted: {join}"),
                    }),
                    ..failed
                },
                Err(_) => failed,
            }
        }
        Isolation::Process(program) => match in_worker(program, &job).await {
            Ok(outcome) => outcome,
            Err(error) => GitOutcome::failed(&job, error),
        },
    }
}

fn timeout_error(job: &GitJob) -> FetchError {
    FetchError::Timeout {
        url: redact_url(&job.url),
        seconds: job.limits.timeout_ms.div_ceil(1000),
    }
}

/// Most bytes an honest outcome can take: each read's files (base64 for binary) plus
/// room for the JSON around them.
fn output_cap(job: &GitJob) -> usize {
    let per_read = job.policy.limits.config_bytes.saturating_mul(4) / 3 + 64 * 1024;
    let total = per_read.saturating_mul(job.reads.len() as u64) + 1024 * 1024;
    usize::try_from(total).unwrap_or(usize::MAX)
}

enum Read {
    Whole(Vec<u8>),
    Overflow,
}

/// Reads to the end, or to one byte past `cap` (then it is an overflow).
async fn read_bounded(from: impl AsyncRead + Unpin, cap: usize) -> std::io::Result<Read> {
    let mut bytes = Vec::new();
    from.take(cap as u64 + 1).read_to_end(&mut bytes).await?;
    Ok(if bytes.len() > cap {
        Read::Overflow
    } else {
        Read::Whole(bytes)
    })
}

/// Keeps the last `STDERR_BYTES` of what the worker wrote to stderr.
async fn read_tail(mut from: impl AsyncRead + Unpin) -> Vec<u8> {
    let mut tail = Vec::new();
    let mut chunk = vec![0u8; 4096];
    while let Ok(read) = from.read(&mut chunk).await {
        if read == 0 {
            break;
        }
        tail.extend_from_slice(&chunk[..read]);
        if tail.len() > STDERR_BYTES {
            tail.drain(..tail.len() - STDERR_BYTES);
        }
    }
    tail
}

/// The worker's command: a clean environment (only [`PASSED_ENV`]), a home of the
/// repository's own, pipes for the job and its outcome, killed if dropped.
fn worker_command(program: &PathBuf, job: &GitJob) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(program);
    command
        .arg(SUBCOMMAND)
        .env_clear()
        // libgit2 reads ~/.gitconfig (proxies, URL rewrites) and ~/.ssh: give it a home
        // of the repository's own, holding nothing but what the job writes there.
        .env("HOME", crate::git::worker_home(&job.repo_dir))
        // mimalloc reserves 1 GiB of address space up front by default, which would
        // leave nothing of the address-space limit; allocate from the OS as needed.
        .env("MIMALLOC_ARENA_RESERVE", "0")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    for key in PASSED_ENV {
        if let Some(value) = std::env::var_os(key) {
            command.env(key, value);
        }
    }
    command
}

async fn in_worker(program: &PathBuf, job: &GitJob) -> Result<GitOutcome, FetchError> {
    let shown = redact_url(&job.url);
    let crashed = |detail: String| FetchError::WorkerCrashed {
        url: shown.clone(),
        detail,
    };
    let input =
        serde_json::to_vec(job).map_err(|e| crashed(format!("cannot write the job: {e}")))?;
    let mut worker = worker_command(program, job)
        .spawn()
        .map_err(|e| crashed(format!("cannot start a fetch worker: {e}")))?;
    let (Some(mut stdin), Some(stdout), Some(stderr)) = (
        worker.stdin.take(),
        worker.stdout.take(),
        worker.stderr.take(),
    ) else {
        return Err(crashed("the fetch worker has no pipes".to_owned()));
    };
    let cap = output_cap(job);
    let talk = async {
        let write = async move {
            let _ = stdin.write_all(&input).await;
            // Dropping stdin closes it: the worker reads to the end.
        };
        // An outcome past its cap drops the pipe, so the worker's next write fails and it
        // ends instead of blocking.
        let (_, out, err) = tokio::join!(write, read_bounded(stdout, cap), read_tail(stderr));
        let status = worker.wait().await;
        (out, err, status)
    };
    let limit = Duration::from_millis(job.limits.timeout_ms) + GRACE;
    let (out, err, status) = match tokio::time::timeout(limit, talk).await {
        Ok(done) => done,
        Err(_) => {
            let _ = worker.start_kill();
            let _ = worker.wait().await;
            return Err(timeout_error(job));
        }
    };
    let status = status.map_err(|e| crashed(format!("cannot wait for the fetch worker: {e}")))?;
    let stderr = String::from_utf8_lossy(&err).into_owned();
    match out {
        Ok(Read::Whole(bytes)) if status.success() => serde_json::from_slice(&bytes)
            .map_err(|e| crashed(format!("its answer is not readable: {e}"))),
        Ok(Read::Overflow) => Err(FetchError::TooLarge {
            what: format!("the files read from {shown}"),
            limit: job.policy.limits.config_bytes,
        }),
        _ => Err(death(status, &stderr, job, &shown)),
    }
}

/// What ended a worker that gave no outcome, as the reason a parent shows.
fn death(status: std::process::ExitStatus, stderr: &str, job: &GitJob, shown: &str) -> FetchError {
    use std::os::unix::process::ExitStatusExt;
    let memory = || FetchError::MemoryLimit {
        url: shown.to_owned(),
        limit_mib: job.limits.memory_bytes / (1024 * 1024),
    };
    // Rust's allocation-failure handler and libgit2's both say so before aborting.
    if stderr.contains("memory allocation of") || stderr.contains("out of memory") {
        return memory();
    }
    let last_line = stderr
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("");
    match (status.signal(), status.code()) {
        // The kernel's OOM killer (a cgroup limit below the worker's own) sends SIGKILL.
        (Some(9), _) => memory(),
        (Some(24), _) => FetchError::CpuLimit {
            url: shown.to_owned(),
            seconds: job.limits.timeout_ms.div_ceil(1000) + 1,
        },
        (Some(25), _) => FetchError::TooLarge {
            what: format!("a file the fetch of {shown} wrote"),
            limit: job.policy.limits.download_bytes,
        },
        (_, Some(child::EXIT_WATCHDOG)) => timeout_error(job),
        (Some(signal), _) => FetchError::WorkerCrashed {
            url: shown.to_owned(),
            detail: format!("ended by signal {signal}{}", tail(last_line)),
        },
        (None, code) => FetchError::WorkerCrashed {
            url: shown.to_owned(),
            detail: format!("exit status {}{}", code.unwrap_or(-1), tail(last_line)),
        },
    }
}

fn tail(line: &str) -> String {
    if line.is_empty() {
        String::new()
    } else {
        let cut: String = line.chars().take(300).collect();
        format!(": {cut}")
    }
}
