//! Logging setup: tracing-subscriber's JSON lines (or plain text) on stdout, written by
//! tracing-appender's non-blocking writer, at the level `--log-level` gives.
//!
//! A call that logs never waits on stdout: when the log pipeline cannot keep up, lines
//! are dropped and counted (`metahooks_log_lines_dropped_total`), not queued without
//! bound.

use std::sync::OnceLock;

use tracing_appender::non_blocking::{ErrorCounter, NonBlockingBuilder, WorkerGuard};
use tracing_subscriber::EnvFilter;

pub use metahooks_source::log_text::{Escaped, bounded};

/// Lines the writer holds before it drops new ones.
const BUFFERED_LINES: usize = 16 * 1024;

/// The dropped-line count of the writer [`init`] installed.
static DROPPED: OnceLock<ErrorCounter> = OnceLock::new();

/// How logs are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// One JSON object per line: `timestamp`, `level`, the event's fields (`message`
    /// among them), `target`, and the enclosing span's fields under `span`.
    Json,
    /// Human-readable lines.
    Text,
}

/// Why logging could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    /// The level is not a tracing filter directive.
    #[error(
        "--log-level {level:?} is not a log level or filter (try info, debug or metahooks=debug,warn): {source}"
    )]
    Level {
        /// The level as given.
        level: String,
        /// What the filter parser said.
        source: tracing_subscriber::filter::ParseError,
    },
}

/// Installs the global log subscriber at `level` (a level or `EnvFilter` directives, such
/// as `info` or `metahooks=debug,warn`). Keep the returned guard until the process ends:
/// dropping it writes out the lines still buffered.
///
/// # Errors
/// `level` does not parse.
pub fn init(format: LogFormat, level: &str) -> Result<WorkerGuard, LogError> {
    let filter = EnvFilter::try_new(level).map_err(|source| LogError::Level {
        level: level.to_owned(),
        source,
    })?;
    let (writer, guard) = NonBlockingBuilder::default()
        .buffered_lines_limit(BUFFERED_LINES)
        .lossy(true)
        .finish(std::io::stdout());
    let _ = DROPPED.set(writer.error_counter());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer);
    let result = match format {
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .with_span_list(false)
            .try_init(),
        // Colours only for a person at a terminal, never into a file or a log pipeline.
        LogFormat::Text => builder
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stdout()))
            .try_init(),
    };
    if let Err(error) = result {
        eprintln!("metahooks: logging already initialised: {error}");
    }
    Ok(guard)
}

/// Log lines dropped so far because the writer was full (0 before [`init`]).
pub fn dropped_lines() -> u64 {
    DROPPED
        .get()
        .map_or(0, |counter| counter.dropped_lines() as u64)
}
