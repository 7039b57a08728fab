//! The hook endpoint: authenticate, take an in-flight slot, read the body (hashing it),
//! send the remembered answer for those bytes or compute one under a deadline, add the
//! ETag, log one line and count it.
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
use super::answers::{CallHasher, Remembered};
use super::error::CallError;
use crate::controllers::{CallOutcome, ParentRef};
use crate::error::HookError;
use crate::protocol::Hook;

pub async fn handle(
    State(state): State<Arc<HookState>>,
    Path((controller, hook)): Path<(String, String)>,
    request: axum::extract::Request,
) -> Response {
    let started = Instant::now();
    // Taken apart rather than extracted as `HeaderMap`, which would copy the headers.
    let (parts, body) = request.into_parts();
    let headers = parts.headers;
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
    span.record("parent.namespace", &*parent.namespace);
    span.record("parent.name", &*parent.name);
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
    log_call(
        controller_label,
        hook_label,
        &parent,
        code,
        elapsed,
        refusal,
    );
    response
}

/// One access line per call; its level says whose the problem is: none (info), the
/// caller's (a bad body, a wrong path, overload: a warning) or ours (an error).
fn log_call(
    controller_label: &str,
    hook_label: &str,
    parent: &ParentRef,
    code: u16,
    elapsed: Duration,
    refusal: Option<(&'static str, String)>,
) {
    // Milliseconds to the microsecond: a number, without float noise.
    let duration_ms = elapsed.as_micros() as f64 / 1000.0;
    // tracing's levels are fixed per call site, hence the macro.
    macro_rules! access_line {
        ($level:ident, $message:literal $(, $field:ident = $value:expr)*) => {
            tracing::$level!(
                controller = controller_label,
                hook = hook_label,
                parent.namespace = &*parent.namespace,
                parent.name = &*parent.name,
                status = code,
                duration_ms,
                $($field = $value,)*
                $message
            )
        };
    }
    match refusal {
        None => access_line!(info, "hook call"),
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
}

async fn answer(
    state: &Arc<HookState>,
    controller: &str,
    hook: &str,
    headers: &HeaderMap,
    body: Body,
    started: Instant,
) -> (ParentRef, Result<Response, CallError>) {
    let no_parent = ParentRef::default();
    let (hook, permit) = match admit(state, controller, hook, headers) {
        Ok(admitted) => admitted,
        Err(error) => return (no_parent, Err(error)),
    };
    // Only answers of a controller that may answer from the request alone are
    // remembered, so only its calls need the key.
    let mut hasher = state
        .registry
        .may_answer_from_request_alone(controller)
        .then(|| CallHasher::new(controller, hook));
    let body = match read_body(state, headers, body, hasher.as_mut()).await {
        Ok(body) => body,
        Err(error) => return (no_parent, Err(error)),
    };
    let key = hasher.map(|hasher| hasher.finish());
    if let Some(remembered) = key.as_ref().and_then(|key| state.answers.get(key)) {
        drop(permit);
        return (remembered.parent.clone(), Ok(send(&remembered, headers)));
    }
    let deadline = started + state.limits.deadline;
    let outcome = match compute(state, controller, hook, body, permit, deadline).await {
        Ok(outcome) => outcome,
        Err(error) => return (no_parent, Err(error)),
    };
    let CallOutcome {
        parent,
        result,
        from_request_alone,
    } = outcome;
    let bytes = match result {
        Ok(bytes) => bytes,
        Err(error) => return (parent, Err(error.into())),
    };
    let answer = Remembered::new(parent.clone(), Bytes::from(bytes));
    let response = send(&answer, headers);
    if let (Some(key), true) = (key, from_request_alone) {
        state.answers.insert(key, Arc::new(answer));
    }
    (parent, Ok(response))
}

/// Lets a call in: authenticated, to a hook this server has, with an in-flight slot
/// free (taken here, before a byte of the body is read).
fn admit(
    state: &Arc<HookState>,
    controller: &str,
    hook: &str,
    headers: &HeaderMap,
) -> Result<(Hook, OwnedSemaphorePermit), CallError> {
    if let Some(auth) = &state.auth
        && !auth.allows(headers)
    {
        return Err(CallError::Unauthorized);
    }
    let Some(hook) = Hook::from_segment(hook).filter(|_| state.registry.contains(controller))
    else {
        return Err(state
            .registry
            .not_found(format!("/{controller}/{hook}"))
            .into());
    };
    let Ok(permit) = state.in_flight.clone().try_acquire_owned() else {
        return Err(CallError::Overloaded {
            limit: state.limits.max_in_flight,
            retry_after_seconds: state.limits.retry_after_seconds,
        });
    };
    Ok((hook, permit))
}

/// Reads the whole body within the size limit and the body-read timeout, feeding each
/// piece to `hasher` as it arrives. A declared length over the limit is refused without
/// reading a byte.
async fn read_body(
    state: &HookState,
    headers: &HeaderMap,
    body: Body,
    mut hasher: Option<&mut CallHasher>,
) -> Result<Bytes, CallError> {
    let limit = state.limits.body_bytes;
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|length| length > limit as u64) {
        return Err(CallError::TooLarge { limit });
    }
    let timeout = state.limits.body_read_timeout;
    let read = async {
        let mut body = Limited::new(body, limit);
        let mut pieces: Vec<Bytes> = Vec::new();
        while let Some(frame) = body.frame().await {
            if let Ok(piece) = frame?.into_data() {
                if let Some(hasher) = hasher.as_deref_mut() {
                    hasher.update(&piece);
                }
                pieces.push(piece);
            }
        }
        Ok::<_, Box<dyn std::error::Error + Send + Sync>>(joined(pieces))
    };
    match tokio::time::timeout(timeout, read).await {
        Ok(Ok(body)) => Ok(body),
        Ok(Err(error)) if error.downcast_ref::<LengthLimitError>().is_some() => {
            Err(CallError::TooLarge { limit })
        }
        Ok(Err(error)) => {
            Err(HookError::BadRequest(format!("cannot read the request body: {error}")).into())
        }
        Err(_) => Err(CallError::SlowBody {
            timeout_ms: millis(timeout),
        }),
    }
}

/// The pieces of a body as one buffer (copied only when there are several).
fn joined(mut pieces: Vec<Bytes>) -> Bytes {
    if pieces.len() <= 1 {
        return pieces.pop().unwrap_or_default();
    }
    let mut whole = Vec::with_capacity(pieces.iter().map(Bytes::len).sum());
    for piece in &pieces {
        whole.extend_from_slice(piece);
    }
    Bytes::from(whole)
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
) -> Result<CallOutcome, CallError> {
    let registry = state.registry.clone();
    let mut ctx = state.registry.context(state.clock.now());
    ctx.deadline = Some(deadline);
    // The request is parsed once: a cheap attempt that needs slow work hands its parsed
    // request to a compute thread.
    let prepared = if body.len() <= CHEAP_ATTEMPT_BYTES {
        match state.registry.prepare(controller, hook, &body) {
            Err(answered) => return Ok(answered),
            Ok(prepared) => match prepared.try_cached(&ctx) {
                Some(outcome) => {
                    drop(permit);
                    return Ok(outcome);
                }
                None => Some(prepared),
            },
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
        Some(match prepared {
            Some(prepared) => prepared.run(&ctx),
            None => registry.call(&controller_name, hook, &body, &ctx),
        })
    });
    match tokio::time::timeout_at(deadline.into(), work).await {
        Ok(Ok(Some(outcome))) => Ok(outcome),
        Ok(Ok(None)) | Err(_) => Err(CallError::DeadlineExceeded { deadline_ms }),
        Ok(Err(_panicked)) => Err(HookError::Internal(
            "the hook server hit an internal fault while computing the answer".to_owned(),
        )
        .into()),
    }
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// The answer as a response: 304 when the caller already holds these bytes.
fn send(answer: &Remembered, request_headers: &HeaderMap) -> Response {
    let matches = request_headers
        .get(header::IF_NONE_MATCH)
        .is_some_and(|sent| sent == answer.etag);
    if matches {
        return (
            StatusCode::NOT_MODIFIED,
            [(header::ETAG, answer.etag.clone())],
        )
            .into_response();
    }
    (
        StatusCode::OK,
        [
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            ),
            (header::ETAG, answer.etag.clone()),
        ],
        answer.body.clone(),
    )
        .into_response()
}
