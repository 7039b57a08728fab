//! The hook handler, behind the admission layers (`admission`: authenticated, body read
//! and hashed within the budget, in-flight slot, deadline): send the remembered answer
//! for the call's bytes, or compute one on a compute thread, remember it and send it,
//! with its ETag.

use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::Response;

use super::HookState;
use super::admission::slot::Slot;
use super::admission::{Call, Record, Rest, refuse};
use super::answers::{CallKey, Remembered};
use super::error::CallError;
use super::route::HookRoute;
use crate::controllers::CallOutcome;
use crate::error::{Fault, HookError};

/// The handler, as the innermost part of the admission stack.
#[derive(Debug, Clone, Copy)]
pub struct Answer;

impl Rest for Answer {
    fn run(self, call: &mut Call) -> impl Future<Output = Response> + Send + '_ {
        answer(call)
    }
}

/// A call the admission layers let in: the remembered answer for its bytes, or one
/// computed now, remembered and sent. What the call was about is left in the call's
/// record, for the observer.
pub async fn answer(call: &mut Call) -> Response {
    let route = call.route();
    let Call {
        request,
        state,
        received,
        slot,
        deadline,
        record,
        refusal,
        ..
    } = call;
    let (Some(route), Some(received), Some(slot), Some(deadline)) =
        (route, received.take(), slot.take(), *deadline)
    else {
        return refuse(refusal, HookError::Internal(Fault::NotAdmitted).into());
    };
    let headers = request.headers();
    if let Some(remembered) = remembered(state, &received.key) {
        record.parent = remembered.parent.clone();
        return send(&remembered, headers);
    }
    let outcome = match compute(state, route, received.body.joined(), slot, deadline).await {
        Ok(outcome) => outcome,
        Err(error) => return refuse(refusal, error),
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
            record.parent = parent;
            return refuse(refusal, error.into());
        }
    };
    state.registry.want(&sources);
    let answer = Arc::new(Remembered::new(parent.clone(), Bytes::from(bytes), sources));
    let response = send(&answer, headers);
    state.answers.insert(received.key, answer);
    *record = Record { parent, changes };
    response
}

/// The answer remembered for the call `key`, if it still holds: the engine holds what it
/// read of its sources. Its parent still wants them kept fresh, which the engine is told.
fn remembered(state: &HookState, key: &CallKey) -> Option<Arc<Remembered>> {
    let remembered = state
        .answers
        .holding(key, |sources| state.registry.still_holds(sources))?;
    state.registry.want(&remembered.sources);
    Some(remembered)
}

/// Runs the controller on a compute thread (see `compute.rs`: a hook computation is CPU
/// work only), so that slow work never holds up an async worker, which stays free to
/// answer 503 at the deadline (the deadline layer's). The in-flight slot travels with
/// the work: a call answered 503 at its deadline still counts until its computation
/// ends, and work that had not started by its deadline is skipped rather than done for
/// nobody.
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
    match state.compute.run(work).await {
        Ok(Some(outcome)) => Ok(outcome),
        Ok(None) => Err(CallError::DeadlineExceeded {
            deadline_ms: super::millis(state.limits.deadline),
        }),
        Err(_panicked) => Err(HookError::Internal(Fault::Panicked).into()),
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
