//! The hook endpoint: authenticate, read the body (hashing it) within the body budget,
//! take an in-flight slot, send the remembered answer for those bytes or compute one
//! under a deadline, add the ETag, log and count the call.
//!
//! A body holds one permit of the byte budget (`--body-budget-bytes`) per byte as it
//! arrives, so a sender that trickles its body holds only what it has sent and never an
//! in-flight slot: the slot is taken once the whole body is in. Both are held together
//! by the computation and the response body: they are free again only when the work has
//! really stopped (a call answered 503 at its deadline keeps counting until its work
//! ends) and the answer has been sent or dropped (a client that does not read its
//! answers cannot pile them up). tower's concurrency layers free their permit when the
//! response future ends, before either, which is why they are held here.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use http_body_util::{BodyExt, LengthLimitError, Limited};
use tokio::sync::OwnedSemaphorePermit;
use tracing::Instrument;

use super::answers::{CallHasher, CallKey, Remembered, RouteKey, route_key};
use super::budget::OverBudget;
use super::error::CallError;
use super::{HookState, millis};
use crate::controllers::{CallOutcome, Changes, ParentRef, Registry};
use crate::error::{BadRequest, Fault, HookError};
use crate::protocol::Hook;

/// A hook this server has, resolved once when the router is built: each gets a path of
/// its own, so a call finds its controller, its labels and its memo key without parsing
/// the path.
#[derive(Debug, Clone, Copy)]
pub struct HookRoute {
    /// The controller's name, which is also its metrics label.
    pub controller: &'static str,
    /// The hook.
    pub hook: Hook,
    /// The key its calls are hashed under (answers are remembered by the request's bytes).
    key: RouteKey,
}

impl HookRoute {
    /// Every hook of every registered controller.
    pub fn all(registry: &Registry) -> Vec<HookRoute> {
        let mut routes = Vec::new();
        for name in registry.names() {
            for hook in Hook::ALL {
                routes.push(HookRoute {
                    controller: super::metrics::label(name),
                    hook,
                    key: route_key(name, hook),
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

/// How a call ended, for the response, the metrics and the log.
struct Answered {
    parent: ParentRef,
    result: Result<Response, CallError>,
    /// What a computed answer changes (None: remembered, refused or failed).
    changes: Option<Changes>,
    /// The in-flight slot and the body's bytes, held until the response body is gone.
    slot: Option<Slot>,
}

/// What a call holds while it is answered: its in-flight slot and its body's share of
/// the byte budget, shared by the call's work and its response.
type Slot = Arc<Held>;

/// Permits that are let go together when the last holder drops them.
struct Held {
    _call: OwnedSemaphorePermit,
    _body: super::budget::Held,
}

impl Answered {
    fn refused(error: impl Into<CallError>) -> Answered {
        Answered {
            parent: ParentRef::default(),
            result: Err(error.into()),
            changes: None,
            slot: None,
        }
    }
}

async fn called(
    state: Arc<HookState>,
    target: Target,
    request: axum::extract::Request,
) -> Response {
    let started = Instant::now();
    let (parts, body) = request.into_parts();
    let headers = parts.headers;
    // Calls that come in without a socket (tests through `oneshot`) share one client.
    let client = parts
        .extensions
        .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
        .map_or(std::net::IpAddr::from([0, 0, 0, 0]), |peer| peer.0.ip());
    let (controller_label, hook_label) = labels(&state, &target);
    let span = tracing::debug_span!(
        "hook",
        controller = controller_label,
        hook = hook_label,
        parent.namespace = tracing::field::Empty,
        parent.name = tracing::field::Empty,
    );
    let answered = answer(&state, target, &headers, (client, body), started)
        .instrument(span.clone())
        .await;
    span.record("parent.namespace", &*answered.parent.namespace);
    span.record("parent.name", &*answered.parent.name);
    let (response, refusal) = match answered.result {
        Ok(response) => (response, None),
        Err(error) => {
            let refusal = (error.reason(), error.to_string());
            (error.into_response(), Some(refusal))
        }
    };
    let code = response.status().as_u16();
    let elapsed = started.elapsed();
    state
        .metrics
        .record(controller_label, hook_label, code, elapsed);
    log_call(
        (controller_label, hook_label),
        &answered.parent,
        code,
        elapsed,
        answered.changes,
        refusal,
    );
    match answered.slot {
        Some(slot) => held_until_sent(response, slot),
        None => response,
    }
}

/// The response with `slot` held until hyper has sent its body or dropped it.
fn held_until_sent(response: Response, slot: Slot) -> Response {
    response.map(|body| {
        Body::new(body.map_frame(move |frame| {
            // The closure owns the slot, so it lives exactly as long as the body.
            let _held = &slot;
            frame
        }))
    })
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

/// Every call is logged at debug, as Kubernetes controllers log each sync; an answer
/// that creates or deletes children, or rolls a Deployment, is logged at info, a caller's
/// mistake (a bad body, a wrong path, overload) as a warning and a fault of ours as an
/// error. Each line names the call itself: the span is only entered at debug.
fn log_call(
    (controller, hook): (&'static str, &'static str),
    parent: &ParentRef,
    code: u16,
    elapsed: Duration,
    changes: Option<Changes>,
    refusal: Option<(&'static str, String)>,
) {
    // Milliseconds to the microsecond: a number, without float noise.
    let duration_ms = elapsed.as_micros() as f64 / 1000.0;
    // tracing's levels are fixed per call site, hence the macro.
    macro_rules! line {
        ($level:ident, $message:literal $(, $field:ident = $value:expr)*) => {
            tracing::$level!(
                controller,
                hook,
                parent.namespace = &*parent.namespace,
                parent.name = &*parent.name,
                status = code,
                duration_ms,
                $($field = $value,)*
                $message
            )
        };
    }
    match (refusal, changes) {
        (
            None,
            Some(Changes {
                rolled: Some(rolled),
                ..
            }),
        ) => line!(
            info,
            "hook answer rolls a Deployment",
            parent_kind = rolled.kind.as_str(),
            deployment = rolled.deployment.as_str(),
            revision = rolled.revision.as_str()
        ),
        (None, Some(changes)) if !changes.is_empty() => line!(
            info,
            "hook answer changes the children",
            created = changes.created,
            deleted = changes.deleted
        ),
        (None, _) => line!(debug, "hook call"),
        (Some((reason, error)), _) if code < 500 => line!(
            warn,
            "hook call refused",
            reason = reason,
            error = error.as_str()
        ),
        (Some((reason, error)), _) => line!(
            error,
            "hook call failed",
            reason = reason,
            error = error.as_str()
        ),
    }
}

async fn answer(
    state: &Arc<HookState>,
    target: Target,
    headers: &HeaderMap,
    body: (IpAddr, Body),
    started: Instant,
) -> Answered {
    let (route, body, key, slot) = match received(state, target, headers, body).await {
        Ok(received) => received,
        Err(error) => return Answered::refused(error),
    };
    if let Some(remembered) = remembered(state, &key) {
        return Answered {
            parent: remembered.parent.clone(),
            result: Ok(send(&remembered, headers)),
            changes: None,
            slot: Some(slot),
        };
    }
    let deadline = started + state.limits.deadline;
    let outcome = match compute(state, route, body.joined(), slot.clone(), deadline).await {
        Ok(outcome) => outcome,
        Err(error) => return Answered::refused(error),
    };
    let CallOutcome {
        parent,
        result,
        sources,
        changes,
    } = outcome;
    let bytes = match result {
        Ok(bytes) => bytes,
        Err(error) => {
            return Answered {
                parent,
                result: Err(error.into()),
                changes: None,
                slot: None,
            };
        }
    };
    state.registry.want(&sources);
    let answer = Arc::new(Remembered::new(parent.clone(), Bytes::from(bytes), sources));
    let response = send(&answer, headers);
    state.answers.insert(key, answer);
    Answered {
        parent,
        result: Ok(response),
        changes,
        slot: Some(slot),
    }
}

/// A call let in, its body read within the budget and hashed, and an in-flight slot
/// taken for it (the slot only once the whole body is in).
async fn received(
    state: &Arc<HookState>,
    target: Target,
    headers: &HeaderMap,
    body: (IpAddr, Body),
) -> Result<(HookRoute, ReadBody, CallKey, Slot), CallError> {
    let route = admit(state, target, headers)?;
    let mut hasher = CallHasher::new(&route.key);
    let (body, body_bytes) = read_body(state, headers, body, &mut hasher).await?;
    let Ok(call) = state.in_flight.clone().try_acquire_owned() else {
        return Err(CallError::Overloaded {
            limit: state.limits.max_in_flight,
            retry_after_seconds: state.limits.retry_after_seconds,
        });
    };
    let slot = Arc::new(Held {
        _call: call,
        _body: body_bytes,
    });
    Ok((route, body, hasher.finish(), slot))
}

/// The answer remembered for the call `key`, if it still holds: the engine holds what it
/// read of its sources. Its parent still wants them kept fresh, which the engine is told.
fn remembered(state: &HookState, key: &CallKey) -> Option<Arc<Remembered>> {
    let remembered = state.answers.get(key)?;
    if !state.registry.still_holds(&remembered.sources) {
        return None;
    }
    state.registry.want(&remembered.sources);
    Some(remembered)
}

/// Lets a call in: authenticated, to a hook this server has.
fn admit(
    state: &Arc<HookState>,
    target: Target,
    headers: &HeaderMap,
) -> Result<HookRoute, CallError> {
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
    Ok(route)
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

/// Reads the whole body within the size limit, the body-read timeout and the byte
/// budget (the total and the client's share), feeding each piece to `hasher` as it
/// arrives; returns it with what it holds of the budget. A declared length over the limit
/// is refused without reading a byte; a piece the budget cannot hold now is refused at
/// once (429) rather than waited for, so a stalled sender never delays anyone else.
async fn read_body(
    state: &HookState,
    headers: &HeaderMap,
    (client, body): (IpAddr, Body),
    hasher: &mut CallHasher,
) -> Result<(ReadBody, super::budget::Held), CallError> {
    let limit = state.limits.body_bytes;
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|length| length > limit as u64) {
        return Err(CallError::TooLarge { limit });
    }
    let over_budget = |which| match which {
        OverBudget::Total => CallError::BodiesOverBudget {
            budget: state.limits.body_budget_bytes,
            retry_after_seconds: state.limits.retry_after_seconds,
        },
        OverBudget::Client => CallError::ClientOverBudget {
            share: state.limits.body_budget_per_client_bytes,
            retry_after_seconds: state.limits.retry_after_seconds,
        },
    };
    if let Some(length) = declared {
        state
            .body_budget
            .fits(client, length)
            .map_err(over_budget)?;
    }
    let timeout = state.limits.body_read_timeout;
    let read = async {
        let mut body = Limited::new(body, limit);
        let mut pieces: Vec<Bytes> = Vec::new();
        let mut held = state.body_budget.start(client);
        while let Some(frame) = body.frame().await {
            if let Ok(piece) = frame?.into_data() {
                if let Err(which) = state.body_budget.take(&mut held, piece.len()) {
                    return Ok(Err(over_budget(which)));
                }
                hasher.update(&piece);
                pieces.push(piece);
            }
        }
        Ok::<_, Box<dyn std::error::Error + Send + Sync>>(Ok((ReadBody(pieces), held)))
    };
    match tokio::time::timeout(timeout, read).await {
        Ok(Ok(read)) => read,
        Ok(Err(error)) if error.downcast_ref::<LengthLimitError>().is_some() => {
            Err(CallError::TooLarge { limit })
        }
        Ok(Err(error)) => {
            Err(HookError::BadRequest(BadRequest::Unreadable(error.to_string())).into())
        }
        Err(_) => Err(CallError::SlowBody {
            timeout_ms: millis(timeout),
        }),
    }
}

/// Runs the controller on a compute thread under the call's deadline (see
/// `compute.rs`: a hook computation is CPU work only), so that slow work never holds up
/// an async worker, which stays free to answer 503 at the deadline.
/// The in-flight slot travels with the work: a call answered 503 at its deadline still
/// counts until its computation ends, and work that had not started by its deadline is
/// skipped rather than done for nobody.
async fn compute(
    state: &Arc<HookState>,
    route: HookRoute,
    body: Bytes,
    slot: Slot,
    deadline: Instant,
) -> Result<CallOutcome, CallError> {
    let registry = state.registry.clone();
    let mut ctx = state.registry.context(state.clock.now());
    ctx.deadline = Some(deadline);
    let span = tracing::Span::current();
    let work = move || {
        let _entered = span.enter();
        let _slot = slot;
        if Instant::now() >= deadline {
            return None;
        }
        Some(registry.answer(route.controller, route.hook, &body, &ctx))
    };
    let finished = tokio::time::timeout_at(deadline.into(), state.compute.run(work)).await;
    match finished {
        Ok(Ok(Some(outcome))) => Ok(outcome),
        Ok(Ok(None)) | Err(_) => Err(CallError::DeadlineExceeded {
            deadline_ms: millis(state.limits.deadline),
        }),
        Ok(Err(_panicked)) => Err(HookError::Internal(Fault::Panicked).into()),
    }
}

/// The answer as a response: 304 when the caller already holds these bytes.
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

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_slot_and_the_body_bytes_are_held_until_the_response_body_is_gone() {
        let slots = Arc::new(tokio::sync::Semaphore::new(1));
        let bytes = super::super::budget::BodyBudget::new(100, 100);
        let client = IpAddr::from([10, 0, 0, 1]);
        let held = |slots: &Arc<tokio::sync::Semaphore>| {
            let mut body = bytes.start(client);
            bytes.take(&mut body, 40).unwrap();
            Arc::new(Held {
                _call: slots.clone().try_acquire_owned().unwrap(),
                _body: body,
            })
        };
        let response = held_until_sent(Response::new(Body::from("answer")), held(&slots));
        assert_eq!(slots.available_permits(), 0, "taken while the body exists");
        assert_eq!(bytes.held(), 40);
        let body = response.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(&body[..], b"answer");
        assert_eq!(
            slots.available_permits(),
            1,
            "free once the body is consumed"
        );
        assert_eq!(bytes.held(), 0);

        let unsent = held_until_sent(Response::new(Body::from("never read")), held(&slots));
        assert_eq!(slots.available_permits(), 0);
        drop(unsent);
        assert_eq!(
            slots.available_permits(),
            1,
            "free once the body is dropped"
        );
        assert_eq!(bytes.held(), 0);
    }
}
