//! JSON log lines, written straight into the line buffer.
//!
//! tracing-subscriber's own JSON format goes through serde_json over an `io::Write`
//! adaptor that checks every piece it is given for UTF-8, and it renders the timestamp
//! through a fresh `String` per line. On a memo-hit load (`scripts/load.sh`, 12 KiB) that
//! made the access line 18,400 instructions of a call's 91,800 (callgrind) — the largest
//! part of what a call cost beyond the floor. This format writes the same object (the
//! same keys, values and order: `timestamp`, `level`, the event's fields, `target`,
//! `span`) with a handful of appends; `tests` compares it with tracing-subscriber's.

use std::cell::RefCell;
use std::fmt::{self, Write};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields, FormattedFields};
use tracing_subscriber::registry::LookupSpan;

/// One JSON object per event: `timestamp` (RFC 3339, UTC, microseconds), `level`, the
/// event's fields flattened (`message` among them), `target`, and the current span's
/// fields with its `name` under `span` when there is one.
pub struct JsonLine;

impl<S, N> FormatEvent<S, N> for JsonLine
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'w> FormatFields<'w> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut out: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        // The line is built in a buffer of this thread's and handed over in one piece:
        // `Writer` is a `dyn fmt::Write`, a dynamic call per piece (callgrind: the
        // quotes, commas and colons alone cost 1,200 instructions a line that way).
        LINE.with(|buffer| match buffer.try_borrow_mut() {
            Ok(mut line) => {
                line.clear();
                build(&mut line, ctx, event);
                let written = out.write_str(&line);
                // One long line (a long error) must not stay allocated on every thread.
                if line.capacity() > LINE_KEPT_BYTES {
                    *line = String::new();
                }
                written
            }
            // Only when formatting a field logs a line of its own.
            Err(_) => {
                let mut line = String::new();
                build(&mut line, ctx, event);
                out.write_str(&line)
            }
        })
    }
}

thread_local! {
    static LINE: RefCell<String> = const { RefCell::new(String::new()) };
}

/// The access line of a hook call that was answered: the event
/// `info!(controller, hook, parent.namespace, parent.name, status, duration_ms, message)`
/// logged by `target` outside any span.
pub struct AccessLine<'a> {
    /// What every line of this hook says alike.
    pub fields: &'a AccessFields,
    /// The parent's namespace, as the request named it.
    pub namespace: &'a str,
    /// The parent's name, as the request named it.
    pub name: &'a str,
    /// The HTTP status of the answer.
    pub status: u16,
    /// How long the answer took.
    pub duration: Duration,
}

/// What every access line of one hook has in common, written once as the line has it: from
/// the end of the timestamp to the parent's namespace (level, message, controller, hook),
/// and from the target to the line's end. Escaping and copying those four strings on every
/// call cost a 12 KiB memo hit 700 of its 63,000 instructions (callgrind).
#[derive(Debug)]
pub struct AccessFields {
    head: String,
    tail: String,
}

impl AccessFields {
    /// The fields of the access lines `target` logs as `message` for `hook` of
    /// `controller`, kept for the life of the process: there is one per hook of each
    /// controller the code registers, so they cannot grow with what callers send.
    pub fn interned(
        target: &str,
        message: &str,
        controller: &str,
        hook: &str,
    ) -> &'static AccessFields {
        use std::collections::HashMap;
        use std::sync::{OnceLock, PoisonError, RwLock};
        type Names = (String, String, String, String);
        static KNOWN: OnceLock<RwLock<HashMap<Names, &'static AccessFields>>> = OnceLock::new();
        let known = KNOWN.get_or_init(RwLock::default);
        let names = (
            target.to_owned(),
            message.to_owned(),
            controller.to_owned(),
            hook.to_owned(),
        );
        if let Some(found) = known
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&names)
        {
            return found;
        }
        known
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(names)
            .or_insert_with(|| {
                Box::leak(Box::new(AccessFields::new(
                    target, message, controller, hook,
                )))
            })
    }

    fn new(target: &str, message: &str, controller: &str, hook: &str) -> AccessFields {
        let mut head = String::from("\",\"level\":\"INFO\",\"message\":");
        push_string(&mut head, message);
        head.push_str(",\"controller\":");
        push_string(&mut head, controller);
        head.push_str(",\"hook\":");
        push_string(&mut head, hook);
        head.push_str(",\"parent.namespace\":");
        let mut tail = String::from(",\"target\":");
        push_string(&mut tail, target);
        tail.push_str("}\n");
        AccessFields { head, tail }
    }
}

/// Builds `access`'s line as [`JsonLine`] writes that event (`tests` compares the two)
/// and hands it to `write`. Every answered call logs one, and through an event it cost
/// 4,000 instructions of a memo hit's 70,600 (callgrind, 12 KiB): the event's fields go
/// through dynamic visitor calls, each key and value is checked for escapes and the
/// duration is printed by ryu; here only the parent's names are escaped per call.
pub fn with_access_line(access: &AccessLine<'_>, write: impl FnOnce(&[u8])) {
    LINE.with(|buffer| match buffer.try_borrow_mut() {
        Ok(mut line) => {
            line.clear();
            push_access_line(&mut line, SystemTime::now(), access);
            write(line.as_bytes());
        }
        Err(_) => {
            let mut line = String::new();
            push_access_line(&mut line, SystemTime::now(), access);
            write(line.as_bytes());
        }
    });
}

fn push_access_line(line: &mut String, at: SystemTime, access: &AccessLine<'_>) {
    line.push_str("{\"timestamp\":\"");
    push_timestamp(line, at);
    line.push_str(&access.fields.head);
    push_string(line, access.namespace);
    line.push_str(",\"parent.name\":");
    push_string(line, access.name);
    line.push_str(",\"status\":");
    line.push_str(itoa::Buffer::new().format(access.status));
    line.push_str(",\"duration_ms\":");
    push_millis(line, access.duration);
    line.push_str(&access.fields.tail);
}

/// `duration` in milliseconds to the microsecond, as ryu writes the `f64` of
/// microseconds / 1000 (the shortest decimal that reads back as that number, which for
/// a whole number of microseconds is the exact one): `0.057`, `1.5`, `2.0`.
fn push_millis(line: &mut String, duration: Duration) {
    let micros = u64::try_from(duration.as_micros()).unwrap_or(u64::MAX);
    line.push_str(itoa::Buffer::new().format(micros / 1000));
    line.push('.');
    let mut fraction = micros % 1000;
    if fraction == 0 {
        line.push('0');
        return;
    }
    let mut digits = 3;
    while fraction % 10 == 0 {
        fraction /= 10;
        digits -= 1;
    }
    let written = itoa::Buffer::new().format(fraction).len();
    for _ in written..digits {
        line.push('0');
    }
    line.push_str(itoa::Buffer::new().format(fraction));
}

/// The most a thread's line buffer keeps between lines.
const LINE_KEPT_BYTES: usize = 16 * 1024;

fn build<S, N>(line: &mut String, ctx: &FmtContext<'_, S, N>, event: &Event<'_>)
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'w> FormatFields<'w> + 'static,
{
    let meta = event.metadata();
    line.push_str("{\"timestamp\":\"");
    push_timestamp(line, SystemTime::now());
    line.push_str("\",\"level\":\"");
    line.push_str(meta.level().as_str());
    line.push('"');
    event.record(&mut FieldsVisitor(line));
    line.push_str(",\"target\":");
    push_string(line, meta.target());
    let span = event
        .parent()
        .and_then(|id| ctx.span(id))
        .or_else(|| ctx.lookup_current());
    if let Some(span) = span {
        line.push_str(",\"span\":{");
        let extensions = span.extensions();
        // The span's fields as the JSON field formatter wrote them: an object whose
        // members go in as they are.
        let members = extensions
            .get::<FormattedFields<N>>()
            .and_then(|formatted| object_members(&formatted.fields));
        if let Some(members) = members {
            line.push_str(members);
            line.push(',');
        }
        line.push_str("\"name\":");
        push_string(line, span.metadata().name());
        line.push('}');
    }
    line.push_str("}\n");
}

/// What is between the braces of a JSON object's text, when there is anything.
fn object_members(object: &str) -> Option<&str> {
    let members = object.trim().strip_prefix('{')?.strip_suffix('}')?.trim();
    (!members.is_empty()).then_some(members)
}

/// Writes each field as `,"name":value`.
struct FieldsVisitor<'a>(&'a mut String);

impl FieldsVisitor<'_> {
    /// Starts a field; false for a field that is not written.
    fn key(&mut self, field: &Field) -> bool {
        let name = field.name();
        // As tracing-subscriber: fields the `log` bridge adds are not the event's, and a
        // raw identifier is named without its `r#`.
        if name.starts_with("log.") {
            return false;
        }
        let name = name.strip_prefix("r#").unwrap_or(name);
        self.0.push(',');
        push_string(self.0, name);
        self.0.push(':');
        true
    }
}

impl Visit for FieldsVisitor<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        if self.key(field) {
            push_string(self.0, value);
        }
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        if self.key(field) {
            self.0.push_str(itoa::Buffer::new().format(value));
        }
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        if self.key(field) {
            self.0.push_str(itoa::Buffer::new().format(value));
        }
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        if self.key(field) {
            self.0.push_str(if value { "true" } else { "false" });
        }
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        if self.key(field) {
            // JSON has no NaN or infinity; serde_json writes null for them too.
            if value.is_finite() {
                self.0.push_str(ryu::Buffer::new().format_finite(value));
            } else {
                self.0.push_str("null");
            }
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if self.key(field) {
            self.0.push('"');
            // Writing into a String cannot fail; a Debug impl that reports an error
            // leaves what it wrote so far.
            let _ = write!(Escaping(self.0), "{value:?}");
            self.0.push('"');
        }
    }
}

/// `text` as a JSON string.
fn push_string(line: &mut String, text: &str) {
    line.push('"');
    push_escaped(line, text);
    line.push('"');
}

/// `text` escaped for the inside of a JSON string, in runs: the plain stretches in one
/// piece, each character that needs it as its escape.
fn push_escaped(line: &mut String, text: &str) {
    let bytes = text.as_bytes();
    // Most text needs nothing: one pass without early exit (which the compiler can
    // vectorise), then one copy.
    if !bytes
        .iter()
        .fold(false, |any, &byte| any | needs_escape(byte))
    {
        line.push_str(text);
        return;
    }
    let mut plain_from = 0;
    for (at, &byte) in bytes.iter().enumerate() {
        if !needs_escape(byte) {
            continue;
        }
        line.push_str(&text[plain_from..at]);
        match byte {
            b'"' => line.push_str("\\\""),
            b'\\' => line.push_str("\\\\"),
            b'\n' => line.push_str("\\n"),
            b'\r' => line.push_str("\\r"),
            b'\t' => line.push_str("\\t"),
            0x08 => line.push_str("\\b"),
            0x0c => line.push_str("\\f"),
            _ => {
                const HEX: &[u8; 16] = b"0123456789abcdef";
                line.push_str("\\u00");
                line.push(char::from(HEX[usize::from(byte >> 4)]));
                line.push(char::from(HEX[usize::from(byte & 0xf)]));
            }
        }
        plain_from = at + 1;
    }
    line.push_str(&text[plain_from..]);
}

/// Bytes that cannot stand for themselves inside a JSON string (every other byte of
/// UTF-8 text can, multi-byte characters included).
fn needs_escape(byte: u8) -> bool {
    byte < 0x20 || byte == b'"' || byte == b'\\'
}

/// A `fmt::Write` that escapes what it is given into a line.
struct Escaping<'a>(&'a mut String);

impl Write for Escaping<'_> {
    fn write_str(&mut self, text: &str) -> fmt::Result {
        push_escaped(self.0, text);
        Ok(())
    }
}

thread_local! {
    /// The whole second last written on this thread, as `YYYY-MM-DDTHH:MM:SS`: a line
    /// only formats the date when the second has changed.
    static SECOND: RefCell<(u64, String)> = const { RefCell::new((u64::MAX, String::new())) };
}

/// `at` as RFC 3339 in UTC with microseconds, as tracing-subscriber's default timer
/// writes it (`2026-12-01T23:54:27.123456Z`).
fn push_timestamp(line: &mut String, at: SystemTime) {
    let since_epoch = at.duration_since(UNIX_EPOCH).unwrap_or_default();
    let second = since_epoch.as_secs();
    SECOND.with_borrow_mut(|(cached, text)| {
        if *cached != second {
            text.clear();
            // Writing into a String cannot fail.
            let _ = write_second(text, second);
            *cached = second;
        }
        line.push_str(text);
    });
    let micros = since_epoch.subsec_micros();
    line.push('.');
    for place in [100_000, 10_000, 1_000, 100, 10, 1] {
        line.push(char::from(b'0' + (micros / place % 10) as u8));
    }
    line.push('Z');
}

/// `YYYY-MM-DDTHH:MM:SS` of a second since the epoch.
fn write_second(out: &mut String, second: u64) -> fmt::Result {
    let civil = i64::try_from(second)
        .ok()
        .and_then(|second| jiff::Timestamp::from_second(second).ok())
        .unwrap_or(jiff::Timestamp::MAX)
        .to_zoned(jiff::tz::TimeZone::UTC)
        .datetime();
    write!(
        out,
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}",
        civil.year(),
        civil.month(),
        civil.day(),
        civil.hour(),
        civil.minute(),
        civil.second()
    )
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use serde_json::Value;
    use tracing_subscriber::fmt::MakeWriter;
    use tracing_subscriber::fmt::format::JsonFields;

    use super::*;

    /// Lines written by a subscriber, for the test to read.
    #[derive(Clone, Default)]
    struct Lines(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Lines {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl<'a> MakeWriter<'a> for Lines {
        type Writer = Lines;
        fn make_writer(&'a self) -> Lines {
            self.clone()
        }
    }

    impl Lines {
        fn parsed(&self) -> Vec<Value> {
            let text = String::from_utf8(self.0.lock().unwrap().clone()).unwrap();
            assert!(text.ends_with('\n'), "every line ends: {text:?}");
            text.lines()
                .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}")))
                .collect()
        }
    }

    /// Events of every field type, in and out of spans, with text that needs escaping.
    fn log_a_variety() {
        tracing::info!(
            controller = "apimock",
            parent.name = "quote\" back\\slash\nnew\r\t\u{8}\u{c}\u{1}line\u{7f}é",
            status = 200_u64,
            delta = -3_i64,
            duration_ms = 6.013,
            ratio = f64::NAN,
            ok = true,
            r#type = "raw",
            "hook call"
        );
        let error = std::io::Error::other("refused: \"no\"");
        tracing::warn!(error = %error, debugged = ?vec!["a\tb"], "with {} args", 2);
        let fetch = tracing::info_span!("fetch", remote = "http://h/x", credentials = false);
        fetch.in_scope(|| tracing::error!(reason = "timeout", "source fetch failed"));
        let empty = tracing::info_span!("empty");
        empty.in_scope(|| tracing::info!("inside a span without fields"));
    }

    /// A subscriber that writes [`JsonLine`]s into `lines`.
    fn json_lines_into(lines: &Lines) -> impl tracing::Subscriber + use<> {
        tracing_subscriber::fmt()
            .with_writer(lines.clone())
            .fmt_fields(JsonFields::new())
            .event_format(JsonLine)
            .finish()
    }

    fn ours() -> Vec<Value> {
        let lines = Lines::default();
        let subscriber = json_lines_into(&lines);
        tracing::subscriber::with_default(subscriber, log_a_variety);
        lines.parsed()
    }

    fn tracing_subscribers() -> Vec<Value> {
        let lines = Lines::default();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(lines.clone())
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .with_span_list(false)
            .finish();
        tracing::subscriber::with_default(subscriber, log_a_variety);
        lines.parsed()
    }

    #[test]
    fn lines_carry_what_tracing_subscribers_json_format_writes() {
        let (mut ours, mut theirs) = (ours(), tracing_subscribers());
        assert_eq!(ours.len(), 4);
        for (ours, theirs) in ours.iter_mut().zip(theirs.iter_mut()) {
            // Written a moment apart: compare the format, then the rest exactly.
            for line in [&mut *ours, &mut *theirs] {
                let stamp = line["timestamp"].as_str().unwrap().to_owned();
                let parsed: jiff::Timestamp = stamp.parse().unwrap();
                assert_eq!(stamp.len(), "2026-12-01T23:54:27.123456Z".len(), "{stamp}");
                assert!(stamp.ends_with('Z'), "{stamp}");
                assert!((jiff::Timestamp::now() - parsed).get_seconds().abs() < 3600);
                line["timestamp"] = Value::Null;
            }
            assert_eq!(ours, theirs);
        }
        assert_eq!(
            ours[0]["parent.name"],
            "quote\" back\\slash\nnew\r\t\u{8}\u{c}\u{1}line\u{7f}é"
        );
        assert_eq!(ours[2]["span"]["remote"], "http://h/x");
        assert_eq!(ours[3]["span"]["name"], "empty");
    }

    #[test]
    fn keys_come_in_the_order_tracing_subscriber_writes_them() {
        let lines = Lines::default();
        let subscriber = json_lines_into(&lines);
        tracing::subscriber::with_default(subscriber, || {
            tracing::info!(controller = "c", status = 1_u64, "hook call");
        });
        let text = String::from_utf8(lines.0.lock().unwrap().clone()).unwrap();
        let keys: Vec<&str> = [
            "timestamp",
            "level",
            "message",
            "controller",
            "status",
            "target",
        ]
        .into_iter()
        .map(|key| {
            let at = text.find(&format!("\"{key}\":")).unwrap();
            (at, key)
        })
        .collect::<std::collections::BTreeMap<_, _>>()
        .into_values()
        .collect();
        assert_eq!(
            keys,
            [
                "timestamp",
                "level",
                "message",
                "controller",
                "status",
                "target"
            ]
        );
    }

    #[test]
    fn an_access_line_is_the_line_its_event_would_write() {
        let (controller, hook, namespace, status) = ("apimock", "sync", "team-a", 200);
        let name = "quote\" back\\slash\nnew\u{1}é";
        let duration = Duration::from_micros(1_057);
        let lines = Lines::default();
        let subscriber = json_lines_into(&lines);
        tracing::subscriber::with_default(subscriber, || {
            tracing::info!(
                controller,
                hook,
                parent.namespace = namespace,
                parent.name = name,
                status,
                duration_ms = duration.as_micros() as f64 / 1000.0,
                "hook call"
            );
        });
        let event = String::from_utf8(lines.0.lock().unwrap().clone()).unwrap();
        let access = AccessLine {
            fields: AccessFields::interned(module_path!(), "hook call", controller, hook),
            namespace,
            name,
            status,
            duration,
        };
        let mut direct = Vec::new();
        with_access_line(&access, |line| direct.extend_from_slice(line));
        let direct = String::from_utf8(direct).unwrap();
        // Byte for byte after the timestamp (written a moment apart).
        let after_stamp = |line: &str| line[line.find("\",\"level\"").unwrap()..].to_owned();
        assert_eq!(after_stamp(&direct), after_stamp(&event));
        assert_eq!(direct.len(), event.len());
        let parsed: Value = serde_json::from_str(&direct).unwrap();
        assert_eq!(parsed["parent.name"], name);
        assert_eq!(parsed["duration_ms"], 1.057);
    }

    #[test]
    fn a_hook_s_fields_are_written_once_and_escaped_like_the_rest() {
        let first = AccessFields::interned("t", "m", "odd\"name", "sync");
        let again = AccessFields::interned("t", "m", "odd\"name", "sync");
        assert!(std::ptr::eq(first, again));
        assert!(!std::ptr::eq(
            first,
            AccessFields::interned("t", "m", "odd\"name", "finalize")
        ));
        let mut line = Vec::new();
        with_access_line(
            &AccessLine {
                fields: first,
                namespace: "n",
                name: "p",
                status: 200,
                duration: Duration::ZERO,
            },
            |written| line.extend_from_slice(written),
        );
        let parsed: Value = serde_json::from_slice(&line).unwrap();
        assert_eq!(parsed["controller"], "odd\"name");
        assert_eq!(parsed["target"], "t");
    }

    #[test]
    fn milliseconds_are_written_as_ryu_writes_them() {
        let mut micros: Vec<u64> = (0..=20_000).collect();
        micros.extend([99_999, 100_000, 123_456_789, 9_007_199_254_740_000]);
        for micros in micros {
            let mut ours = String::new();
            push_millis(&mut ours, Duration::from_micros(micros));
            let ryu = ryu::Buffer::new()
                .format_finite(micros as f64 / 1000.0)
                .to_owned();
            assert_eq!(ours, ryu, "{micros} µs");
        }
    }

    #[test]
    fn timestamps_are_rfc3339_utc_to_the_microsecond() {
        let at = |text: &str| -> SystemTime {
            let timestamp: jiff::Timestamp = text.parse().unwrap();
            SystemTime::from(timestamp)
        };
        for (instant, written) in [
            ("1970-01-01T00:00:00Z", "1970-01-01T00:00:00.000000Z"),
            (
                "2026-12-01T23:54:27.123456789Z",
                "2026-12-01T23:54:27.123456Z",
            ),
            ("2028-02-29T12:00:59.000001Z", "2028-02-29T12:00:59.000001Z"),
            ("2026-12-01T23:54:28.5Z", "2026-12-01T23:54:28.500000Z"),
        ] {
            let mut out = String::new();
            push_timestamp(&mut out, at(instant));
            assert_eq!(out, written);
        }
    }
}
