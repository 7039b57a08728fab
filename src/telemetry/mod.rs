//! Logging setup: one JSON object per line (or plain text), level from `RUST_LOG`.
//!
//! Lines go to stdout through a [`queue::LogQueue`]: a hook call formats its access line
//! and queues it, and one thread writes the queue out. When stdout cannot keep up (a
//! slow log pipeline, a full pipe), lines are dropped and counted
//! (`metahooks_log_lines_dropped_total`) instead of making hook calls wait on the pipe.

mod json;
mod queue;

use std::sync::OnceLock;

use tracing_subscriber::EnvFilter;

pub use json::{AccessFields, AccessLine};
pub use queue::Flush;
use queue::LogQueue;

static QUEUE: OnceLock<LogQueue> = OnceLock::new();

/// The queue when lines are JSON, for [`write_access_line`].
static JSON_QUEUE: OnceLock<LogQueue> = OnceLock::new();

/// How logs are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// One JSON object per line.
    Json,
    /// Human-readable lines.
    Text,
}

/// Installs the global log subscriber: JSON lines or text on stdout. Keep the returned
/// guard until the process ends: dropping it writes out the lines still queued.
///
/// # Errors
/// The log thread cannot be started.
pub fn init(format: LogFormat) -> std::io::Result<Flush> {
    let (writer, flush) = LogQueue::start(std::io::stdout(), queue::QUEUE_BYTES)?;
    let _ = QUEUE.set(writer.clone());
    let writer_for_access_lines = writer.clone();
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer);
    let result = match format {
        // A line logged inside a hook call or a fetch job names it under "span".
        LogFormat::Json => builder
            .fmt_fields(tracing_subscriber::fmt::format::JsonFields::new())
            .event_format(json::JsonLine)
            .try_init(),
        // Colours only for a person at a terminal, never into a file or a log pipeline.
        LogFormat::Text => builder
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stdout()))
            .try_init(),
    };
    match result {
        Ok(()) if format == LogFormat::Json => {
            let _ = JSON_QUEUE.set(writer_for_access_lines);
        }
        Ok(()) => {}
        Err(error) => eprintln!("metahooks: logging already initialised: {error}"),
    }
    Ok(flush)
}

/// Queues the access line of an answered hook call straight away, when logs are JSON
/// and were set up by [`init`]: the very line its `info!` event would write, for a
/// fraction of the cost (see [`json::with_access_line`]). False when nothing was
/// written, and the caller logs the event instead. The caller checks first that the
/// event is enabled at its own call site (`tracing::enabled!`), so `RUST_LOG` applies.
pub fn write_access_line(access: &AccessLine<'_>) -> bool {
    let Some(queue) = JSON_QUEUE.get() else {
        return false;
    };
    json::with_access_line(access, |line| queue.push(line));
    true
}

/// Log lines dropped so far because the queue was full (0 before [`init`]).
pub fn dropped_lines() -> u64 {
    QUEUE.get().map_or(0, LogQueue::dropped)
}
