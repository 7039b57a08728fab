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

use super::answers::{CallHasher, Remembered, RouteKey, route_key};
use super::error::CallError;
use super::{HookState, millis};
use crate::controllers::{CallOutcome, ParentRef, Registry};
use crate::error::HookError;
use crate::protocol::Hook;
use crate::telemetry::{AccessFields, AccessLine};

/// What the access line of an answered call says.
const ACCESS_MESSAGE: &str = "hook call";

/// A hook this server has, resolved once when the router is built: each gets a path of
/// its own, so a call finds its controller, its labels and its memo key without parsing
/// the path (axum's path parameters cost a call ~3,000 instructions, callgrind).
#[derive(Debug, Clone, Copy)]
pub struct HookRoute {
    /// The controller's name, which is also its metrics label.
    pub controller: &'static str,
    /// The hook.
    pub hook: Hook,
    /// The key its calls are hashed under, for a controller whose answers are
    /// remembered by the request's bytes.
    memo: Option<RouteKey>,
    /// What its access lines have in common.
    access: &'static AccessFields,
}

impl HookRoute {
    /// Every hook of every registered controller.
    pub fn all(registry: &Registry) -> Vec<HookRoute> {
        let mut routes = Vec::new();
        for name in registry.names() {
            let memo = registry.may_answer_from_request_alone(name);
            for hook in Hook::ALL {
                let controller = super::metrics::label(name);
                routes.push(HookRoute {
                    controller,
                    hook,
                    memo: memo.then(|| route_key(name, hook)),
                    access: AccessFields::interned(
                        module_path!(),
                        ACCESS_MESSAGE,
                        controller,
                        hook.as_str(),
                    ),
                });
            }
        }
        routes
    }

    /// The path it is served on.
    pub fn path(&self) -> String {
        format!("/{}/{}", self.controller, self.hook.as_str())
    }
}

/// What a call's path names: a hook of ours, or nothing we have.
enum Target {
    Hook(HookRoute),
    Unknown { controller: String, hook: String },
}

/// A call on a registered hook's path.
pub async fn handle(
    state: Arc<HookState>,
    route: HookRoute,
    request: axum::extract::Request,
) -> Response {
    called(state, Target::Hook(route), request).await
}

/// A call on any other `/{controller}/{hook}` path: a hook's path written with
/// percent-escapes still finds the hook; anything else is answered 404.
pub async fn handle_other(
    State(state): State<Arc<HookState>>,
    Path((controller, hook)): Path<(String, String)>,
    request: axum::extract::Request,
) -> Response {
    let found = state
        .routes
        .iter()
        .find(|route| route.controller == controller && route.hook.as_str() == hook);
    let target = match found {
        Some(route) => Target::Hook(*route),
        None => Target::Unknown { controller, hook },
    };
    called(state, target, request).await
}

async fn called(
    state: Arc<HookState>,
    target: Target,
    request: axum::extract::Request,
) -> Response {
    let started = Instant::now();
    // Taken apart rather than extracted as `HeaderMap`, which would copy the headers;
    // the rest of the head is dropped here rather than carried through the call.
    let (parts, body) = request.into_parts();
    let headers = { parts }.headers;
    let (controller_label, hook_label) = labels(&state, &target);
    let access = match &target {
        Target::Hook(route) => Some(route.access),
        Target::Unknown { .. } => None,
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
    let (parent, result) = answer(&state, target, &headers, body, started)
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
        access,
        &parent,
        code,
        elapsed,
        refusal,
    );
    response
}

/// The metrics labels of a call. Only registered names become labels: a caller cannot
/// grow the series.
fn labels(state: &HookState, target: &Target) -> (&'static str, &'static str) {
    match target {
        Target::Hook(route) => (route.controller, route.hook.as_str()),
        Target::Unknown { controller, hook } => {
            let controller = if state.registry.contains(controller) {
                super::metrics::label(controller)
            } else {
                "unknown"
            };
            (
                controller,
                Hook::from_segment(hook).map_or("unknown", Hook::as_str),
            )
        }
    }
}

/// One access line per call; its level says whose the problem is: none (info), the
/// caller's (a bad body, a wrong path, overload: a warning) or ours (an error).
fn log_call(
    controller_label: &str,
    hook_label: &str,
    access: Option<&AccessFields>,
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
        None => {
            let written = tracing::enabled!(tracing::Level::INFO)
                && access.is_some_and(|fields| {
                    crate::telemetry::write_access_line(&AccessLine {
                        fields,
                        namespace: &parent.namespace,
                        name: &parent.name,
                        status: code,
                        duration: elapsed,
                    })
                });
            if !written {
                access_line!(info, "hook call");
            }
        }
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
    target: Target,
    headers: &HeaderMap,
    body: Body,
    started: Instant,
) -> (ParentRef, Result<Response, CallError>) {
    let no_parent = ParentRef::default();
    let (route, permit) = match admit(state, target, headers) {
        Ok(admitted) => admitted,
        Err(error) => return (no_parent, Err(error)),
    };
    // Only answers of a controller that may answer from the request alone are
    // remembered, so only its calls need the key.
    let mut hasher = route.memo.as_ref().map(CallHasher::new);
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
    // Boxed: the computation's future is most of what a call would otherwise carry (and
    // copy at every move) although a memo hit never starts it.
    let computed = Box::pin(compute(state, route, body.joined(), permit, deadline));
    let outcome = match computed.await {
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
    target: Target,
    headers: &HeaderMap,
) -> Result<(HookRoute, OwnedSemaphorePermit), CallError> {
    if let Some(auth) = &state.auth
        && !auth.allows(headers)
    {
        return Err(CallError::Unauthorized);
    }
    let route = match target {
        Target::Hook(route) => route,
        Target::Unknown { controller, hook } => {
            return Err(state
                .registry
                .not_found(format!("/{controller}/{hook}"))
                .into());
        }
    };
    let Ok(permit) = state.in_flight.clone().try_acquire_owned() else {
        return Err(CallError::Overloaded {
            limit: state.limits.max_in_flight,
            retry_after_seconds: state.limits.retry_after_seconds,
        });
    };
    Ok((route, permit))
}

/// A request body as it arrived, in the pieces it was read in. A remembered answer only
/// needs its hash, so the pieces are joined only when the body is to be parsed (at 2 MiB,
/// a copy that costs more than the hash).
struct ReadBody(Vec<Bytes>);

impl ReadBody {
    /// The pieces as one buffer (copied only when there are several).
    fn joined(mut self) -> Bytes {
        if self.0.len() <= 1 {
            return self.0.pop().unwrap_or_default();
        }
        let mut whole = Vec::with_capacity(self.0.iter().map(Bytes::len).sum());
        for piece in &self.0 {
            whole.extend_from_slice(piece);
        }
        Bytes::from(whole)
    }
}

/// Reads the whole body within the size limit and the body-read timeout, feeding each
/// piece to `hasher` as it arrives. A declared length over the limit is refused without
/// reading a byte.
async fn read_body(
    state: &HookState,
    headers: &HeaderMap,
    body: Body,
    mut hasher: Option<&mut CallHasher>,
) -> Result<ReadBody, CallError> {
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
        Ok::<_, Box<dyn std::error::Error + Send + Sync>>(ReadBody(pieces))
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

/// Bodies up to this size are answered on the async workers: first from what the controller
/// already worked out (a memo hit: parsing and serialising 64 KiB takes well under a
/// millisecond), and when that needs slow work that depends on the request alone (an
/// inline APIMock definition to validate), as a task of its own. Handing a call to a
/// compute thread costs two thread wake-ups, most of the price of a steady-state sync and
/// a fifth of an edited 31 KiB definition's; work bounded by 64 KiB of request is short:
/// the most costly hostile 64 KiB definitions we know (alias expansion, `$ref` chains)
/// take 3–5 ms to refuse or validate, an honest one about 3 ms.
const ON_WORKER_BYTES: usize = 64 * 1024;

/// Runs the controller: for a body of at most [`ON_WORKER_BYTES`], first on this async
/// worker restricted to cheap work and, when that needs slow work bounded by the request,
/// as a task of its own on the async workers; any other work (slow work that reads a
/// source, a larger body) on a compute thread. Slow work never runs in this task, which
/// stays free to answer 503 at the deadline.
/// The in-flight slot travels with the work: a call answered 503 at its deadline still
/// counts until its computation ends, and work that had not started by its deadline is
/// skipped rather than done for nobody.
async fn compute(
    state: &Arc<HookState>,
    route: HookRoute,
    body: Bytes,
    permit: OwnedSemaphorePermit,
    deadline: Instant,
) -> Result<CallOutcome, CallError> {
    let registry = state.registry.clone();
    let mut ctx = state.registry.context(state.clock.now());
    ctx.deadline = Some(deadline);
    // The request is parsed once: a cheap attempt that needs slow work hands its parsed
    // request to the work below, which stays on the async workers when its cost is
    // bounded by this small body.
    let (prepared, on_worker) = if body.len() <= ON_WORKER_BYTES {
        match state.registry.prepare(route.controller, route.hook, &body) {
            Err(answered) => return Ok(answered),
            Ok(prepared) => match prepared.attempt(&ctx) {
                Ok(outcome) => {
                    drop(permit);
                    return Ok(outcome);
                }
                Err(slow) => (Some(prepared), slow.bounded_by_request),
            },
        }
    } else {
        (None, false)
    };
    let span = tracing::Span::current();
    let work = move || {
        let _entered = span.enter();
        let _permit = permit;
        if Instant::now() >= deadline {
            return None;
        }
        Some(match prepared {
            Some(prepared) => prepared.run(&ctx),
            None => registry.call(route.controller, route.hook, &body, &ctx),
        })
    };
    // Spawned from this worker, the task usually runs next on the same thread.
    let finished = if on_worker {
        let task = tokio::spawn(async move { work() });
        tokio::time::timeout_at(deadline.into(), task)
            .await
            .map(|joined| joined.map_err(drop))
    } else {
        tokio::time::timeout_at(deadline.into(), state.compute.run(work))
            .await
            .map(|ran| ran.map_err(drop))
    };
    match finished {
        Ok(Ok(Some(outcome))) => Ok(outcome),
        Ok(Ok(None)) | Err(_) => Err(CallError::DeadlineExceeded {
            deadline_ms: millis(state.limits.deadline),
        }),
        Ok(Err(())) => Err(HookError::Internal(
            "the hook server hit an internal fault while computing the answer".to_owned(),
        )
        .into()),
    }
}

/// The answer as a response: 304 when the caller already holds these bytes.
///
/// Built field by field: axum's tuple of status, headers and `Bytes` first gives the
/// response `application/octet-stream` and then replaces it, which cost a memo hit 860
/// instructions where this costs under half (callgrind, 12 KiB).
fn send(answer: &Remembered, request_headers: &HeaderMap) -> Response {
    let matches = request_headers
        .get(header::IF_NONE_MATCH)
        .is_some_and(|sent| sent == answer.etag);
    let mut response = if matches {
        let mut response = Response::new(Body::empty());
        *response.status_mut() = StatusCode::NOT_MODIFIED;
        response
    } else {
        let mut response = Response::new(Body::from(answer.body.clone()));
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        response
    };
    response
        .headers_mut()
        .insert(header::ETAG, answer.etag.clone());
    response
}
