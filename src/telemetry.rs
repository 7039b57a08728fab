//! Logging setup: one JSON object per line (or plain text), level from `RUST_LOG`.

use tracing_subscriber::EnvFilter;

use crate::cli::LogFormat;

/// Installs the global log subscriber: JSON lines or text on stdout.
pub fn init(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stdout);
    let result = match format {
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            // A line logged inside a hook call or a fetch job names it under "span".
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
}
