//! Logging setup: tracing-subscriber's JSON lines (or plain text) on stdout, written by
//! tracing-appender's non-blocking writer, at the level `--log-level` gives.
//!
//! A call that logs never waits on stdout: when the log pipeline cannot keep up, lines
//! are dropped and counted (`metahooks_log_lines_dropped_total`), not queued without
//! bound.

use std::sync::OnceLock;

use tracing_appender::non_blocking::{ErrorCounter, NonBlockingBuilder, WorkerGuard};
use tracing_subscriber::EnvFilter;

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

/// Text from a CR (a source URL) as a metric label or log field: whole when short, else a
/// prefix and a hash of the whole, so that two long values stay apart and neither a
/// scrape nor a log line grows with what a CR author wrote.
pub fn bounded(text: &str) -> std::borrow::Cow<'_, str> {
    const KEPT: usize = 120;
    if text.len() <= KEPT + 16 {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut end = KEPT;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let digest = crate::hash::digest_hex(text.as_bytes(), 12);
    std::borrow::Cow::Owned(format!("{}…#{digest}", &text[..end]))
}

/// Text from outside (a remote's error message, a URL from a CR) as a log field: written
/// whole, with control characters escaped (`\n`, `\u{1b}`), so that it cannot end the
/// line early, forge another line or drive the terminal of whoever reads text logs.
pub struct Escaped<'a, T: std::fmt::Display + ?Sized>(pub &'a T);

impl<T: std::fmt::Display + ?Sized> std::fmt::Display for Escaped<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        struct Escaping<'f, 'g>(&'f mut std::fmt::Formatter<'g>);
        impl std::fmt::Write for Escaping<'_, '_> {
            fn write_str(&mut self, text: &str) -> std::fmt::Result {
                for c in text.chars() {
                    if c.is_control() {
                        write!(self.0, "{}", c.escape_default())?;
                    } else {
                        self.0.write_char(c)?;
                    }
                }
                Ok(())
            }
        }
        std::fmt::Write::write_fmt(&mut Escaping(f), format_args!("{}", self.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_values_keep_a_prefix_and_a_hash() {
        assert_eq!(
            bounded("https://git.example/r.git"),
            "https://git.example/r.git"
        );
        let long = format!("https://git.example/{}", "é".repeat(200_000));
        let other = format!("{long}x");
        let (a, b) = (bounded(&long), bounded(&other));
        assert!(a.len() < 200, "{}", a.len());
        assert!(a.starts_with("https://git.example/é"));
        assert_ne!(a, b, "two long values stay apart");
    }

    #[test]
    fn control_characters_are_escaped_and_the_rest_kept() {
        let forged = "refused\n{\"level\":\"INFO\"} \u{1b}[31mred\u{7} ünïcode";
        assert_eq!(
            Escaped(forged).to_string(),
            "refused\\n{\"level\":\"INFO\"} \\u{1b}[31mred\\u{7} ünïcode"
        );
    }
}
