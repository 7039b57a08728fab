//! The hook endpoint: authenticate, take an in-flight slot, read the body, compute the
//! answer on a compute thread under a deadline, add the ETag, log one line and count it.
//!
//! Order matters for what an attacker can cost us: the slot is taken *before* the body is
//! read (so memory follows `--max-in-flight` × body limit, not the number of connections),
//! and the slot is moved into the computation (so a call that timed out keeps counting
//! against the limit until its work really stops). tower's concurrency layers release
//! their permit when the response future ends, which is exactly what must not happen
//! here, so the slot is held by hand.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use http_body_util::{BodyExt, LengthLimitError, Limited};
use tokio::sync::OwnedSemaphorePermit;
use tracing::Instrument;

use super::HookState;
use crate::controllers::{CallOutcome, Cheap, ParentRef};
use crate::error::HookError;
use crate::protocol::Hook;

pub async fn handle(
    State(state): State<Arc<HookState>>,
    Path((controller, hook)): Path<(String, String)>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let started = Instant::now();
    let hook_label = Hook::from_segment(&hook).map_or("unknown", Hook::as_str);
    // Only registered names become labels: a caller cannot grow the series.
    let controller_label = if state.registry.contains(&controller) {
        super::metrics::label(&controller)
    } else {
        "unknown"
    };
    // Everything logged while answering carries the call. Debug level: at info, making
    // the span (its fields formatted for the JSON layer) cost 13 % of steady-state
    // throughput (scripts/load.sh, 12 KiB), so info-level lines name the call themselves.
    let span = tracing::debug_span!(
        "hook",
        controller = controller_label,
        hook = hook_label,
        parent.namespace = tracing::field::Empty,
        parent.name = tracing::field::Empty,
    );
    let (parent, result) = answer(&state, &controller, &hook, &headers, body, started)
        .instrument(span.clone())
        .await;
    span.record("parent.namespace", parent.namespace.as_str());
    span.record("parent.name", parent.name.as_str());
    // Why the call was refused, for the access line (Metacontroller only logs a status).
    let mut refusal: Option<(&'static str, String)> = None;
    let response = match result {
        Ok(response) => response,
        Err(error) => {
            refusal = Some((error.reason(), error.to_string()));
            error.into_response()
        }
    };
    let code = response.status().as_u16();
    let elapsed = started.elapsed();
    state
        .metrics
        .record(controller_label, hook_label, code, elapsed);
    // Milliseconds to the microsecond: a number, without float noise.
    let duration_ms = elapsed.as_micros() as f64 / 1000.0;
    // One access line per call; its level says whose the problem is (tracing's levels
    // are fixed per call site, hence the macro).
    macro_rules! access_line {
        ($level:ident, $message:literal $(, $field:ident = $value:expr)*) => {
            tracing::$level!(
                controller = controller_label,
                hook = hook_label,
                parent.namespace = parent.namespace,
                parent.name = parent.name,
                status = code,
                duration_ms,
                $($field = $value,)*
                $message
            )
        };
    }
    match refusal {
        None => access_line!(info, "hook call"),
        // The caller's mistake (a bad body, a wrong path, overload): a warning.
        Some((reason, message)) if code < 500 => {
            access_line!(
                warn,
                "hook call refused",
                reason = reason,
                error = message.as_str()
            )
        }
        Some((reason, message)) => {
            access_line!(
                error,
                "hook call failed",
                reason = reason,
                error = message.as_str()
            )
        }
    }
    response
}

async fn answer(
    state: &Arc<HookState>,
    controller: &str,
    hook: &str,
    headers: &HeaderMap,
    body: Body,
    started: Instant,
) -> (ParentRef, Result<Response, HookError>) {
    let no_parent = ParentRef::default();
    if let Some(auth) = &state.auth
        && !auth.allows(headers)
    {
        return (no_parent, Err(HookError::Unauthorized));
    }
    let Some(hook) = Hook::from_segment(hook).filter(|_| state.registry.contains(controller))
    else {
        return (
            no_parent,
            Err(state.registry.not_found(format!("/{controller}/{hook}"))),
        );
    };
    let Ok(permit) = state.in_flight.clone().try_acquire_owned() else {
        return (
            no_parent,
            Err(HookError::Overloaded {
                limit: state.limits.max_in_flight,
                retry_after_seconds: state.limits.retry_after_seconds,
            }),
        );
    };
    let body = match read_body(state, headers, body).await {
        Ok(body) => body,
        Err(error) => return (no_parent, Err(error)),
    };
    let deadline = started + state.limits.deadline;
    let outcome = match compute(state, controller, hook, body, permit, deadline).await {
        Ok(outcome) => outcome,
        Err(error) => return (no_parent, Err(error)),
    };
    let CallOutcome { parent, result } = outcome;
    (parent, result.map(|bytes| with_etag(bytes, headers)))
}

/// Reads the whole body within the size limit and the body-read timeout. A declared
/// length over the limit is refused without reading a byte.
async fn read_body(state: &HookState, headers: &HeaderMap, body: Body) -> Result<Bytes, HookError> {
    let limit = state.limits.body_bytes;
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|length| length > limit as u64) {
        return Err(HookError::TooLarge { limit });
    }
    let timeout = state.limits.body_read_timeout;
    match tokio::time::timeout(timeout, Limited::new(body, limit).collect()).await {
        Ok(Ok(collected)) => Ok(collected.to_bytes()),
        Ok(Err(error)) if error.downcast_ref::<LengthLimitError>().is_some() => {
            Err(HookError::TooLarge { limit })
        }
        Ok(Err(error)) => Err(HookError::BadRequest(format!(
            "cannot read the request body: {error}"
        ))),
        Err(_) => Err(HookError::SlowBody {
            timeout_ms: millis(timeout),
        }),
    }
}

/// Bodies up to this size may be answered on the async worker when the controller can do
/// it without slow work (a memo hit): parsing and serialising 64 KiB takes well under a
/// millisecond, and handing a call to a compute thread costs two thread wake-ups, which
/// is most of the price of a steady-state sync.
const CHEAP_ATTEMPT_BYTES: usize = 64 * 1024;

/// Runs the controller: first, for a small body, on this async worker restricted to
/// cheap work; otherwise (or when it turns out to need slow work) on a compute thread,
/// never on the async workers (which must stay free for probes and other connections).
/// The in-flight slot travels with the work: a call answered 503 at its deadline still
/// counts until its computation ends, and work that had not started by its deadline is
/// skipped rather than done for nobody.
async fn compute(
    state: &Arc<HookState>,
    controller: &str,
    hook: Hook,
    body: Bytes,
    permit: OwnedSemaphorePermit,
    deadline: Instant,
) -> Result<CallOutcome, HookError> {
    let registry = state.registry.clone();
    let mut ctx = state.registry.context(state.clock.now());
    ctx.deadline = Some(deadline);
    // The request is parsed once: a cheap attempt that needs slow work hands its parsed
    // request to a compute thread.
    let deferred = if body.len() <= CHEAP_ATTEMPT_BYTES {
        match state.registry.call_cheap(controller, hook, &body, &ctx) {
            Cheap::Answered(outcome) => {
                drop(permit);
                return Ok(outcome);
            }
            Cheap::Deferred(prepared) => Some(prepared),
            Cheap::NotCheap => None,
        }
    } else {
        None
    };
    let deadline_ms = millis(state.limits.deadline);
    let controller_name = controller.to_owned();
    let span = tracing::Span::current();
    let work = state.compute.run(move || {
        let _entered = span.enter();
        let _permit = permit;
        if Instant::now() >= deadline {
            return None;
        }
        Some(match deferred {
            Some(prepared) => registry.run(&prepared, &ctx),
            None => registry.call(&controller_name, hook, &body, &ctx),
        })
    });
    match tokio::time::timeout_at(deadline.into(), work).await {
        Ok(Ok(Some(outcome))) => Ok(outcome),
        Ok(Ok(None)) | Err(_) => Err(HookError::DeadlineExceeded { deadline_ms }),
        Ok(Err(_panicked)) => Err(HookError::Internal(
            "the hook server hit an internal fault while computing the answer".to_owned(),
        )),
    }
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// A content hash of the response. Metacontroller keys its cache by the root object
/// only, so the tag must change whenever the bytes do — hence a hash, not a revision.
/// BLAKE3 because it runs on every answer and is several times faster than SHA-256.
fn etag_of(bytes: &[u8]) -> String {
    let digest = blake3::hash(bytes).to_hex();
    format!("\"{}\"", &digest[..32])
}

fn with_etag(bytes: Vec<u8>, request_headers: &HeaderMap) -> Response {
    let etag = etag_of(&bytes);
    let matches = request_headers
        .get(header::IF_NONE_MATCH)
        .is_some_and(|sent| sent.as_bytes() == etag.as_bytes());
    let etag_value =
        HeaderValue::from_str(&etag).unwrap_or_else(|_| HeaderValue::from_static("\"\""));
    if matches {
        return (StatusCode::NOT_MODIFIED, [(header::ETAG, etag_value)]).into_response();
    }
    (
        StatusCode::OK,
        [
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            ),
            (header::ETAG, etag_value),
        ],
        bytes,
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn etag_is_a_quoted_content_hash() {
        let a = etag_of(b"{\"status\":{}}");
        assert!(a.starts_with('"') && a.ends_with('"') && a.len() == 34);
        assert_ne!(a, etag_of(b"{\"status\":{\"x\":1}}"));
        assert_eq!(a, etag_of(b"{\"status\":{}}"));
    }
}
