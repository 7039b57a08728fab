//! The hook endpoint: authenticate, bound concurrency, read the body, dispatch to the
//! controller under a deadline, add the ETag, log one line and count it.

use std::sync::Arc;
use std::time::Instant;

use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, FailedToBufferBody};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::HookState;
use crate::controllers::{CallOutcome, Context, ParentRef};
use crate::error::HookError;
use crate::protocol::Hook;

/// Bodies above this size are parsed on the blocking pool so that one large definition
/// does not stall the async workers serving everyone else.
const INLINE_BODY_LIMIT: usize = 64 * 1024;

pub async fn handle(
    State(state): State<Arc<HookState>>,
    Path((controller, hook)): Path<(String, String)>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let started = Instant::now();
    let (parent, result) = answer(&state, &controller, &hook, &headers, body).await;
    let response = match result {
        Ok(response) => response,
        Err(error) => {
            if matches!(error, HookError::Internal(_)) {
                tracing::error!(controller, hook, error = %error, "hook call failed");
            }
            error.into_response()
        }
    };
    let code = response.status().as_u16();
    let elapsed = started.elapsed();
    let hook_label = Hook::from_segment(&hook).map_or("unknown", Hook::as_str);
    let controller_label = if state.registry.contains(&controller) {
        controller.as_str()
    } else {
        "unknown"
    };
    state
        .metrics
        .record(controller_label, hook_label, code, elapsed);
    tracing::info!(
        controller = controller_label,
        hook = hook_label,
        parent.namespace = parent.namespace,
        parent.name = parent.name,
        status = code,
        duration_ms = elapsed.as_secs_f64() * 1000.0,
        "hook call"
    );
    response
}

async fn answer(
    state: &Arc<HookState>,
    controller: &str,
    hook: &str,
    headers: &HeaderMap,
    body: Result<Bytes, BytesRejection>,
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
            Err(HookError::NotFound(format!("/{controller}/{hook}"))),
        );
    };
    let Ok(_permit) = state.in_flight.clone().try_acquire_owned() else {
        return (
            no_parent,
            Err(HookError::Overloaded {
                limit: state.limits.max_in_flight,
                retry_after_seconds: state.limits.retry_after_seconds,
            }),
        );
    };
    let body = match body {
        Ok(body) => body,
        Err(rejection) => {
            return (
                no_parent,
                Err(body_error(rejection, state.limits.body_bytes)),
            );
        }
    };
    let ctx = state.registry.context(state.clock.now());
    let outcome = match tokio::time::timeout(
        state.limits.deadline,
        run(state, controller, hook, body, ctx),
    )
    .await
    {
        Ok(outcome) => outcome,
        Err(_) => {
            return (
                no_parent,
                Err(HookError::DeadlineExceeded {
                    deadline_ms: u64::try_from(state.limits.deadline.as_millis())
                        .unwrap_or(u64::MAX),
                }),
            );
        }
    };
    let CallOutcome { parent, result } = outcome;
    (parent, result.map(|bytes| with_etag(bytes, headers)))
}

async fn run(
    state: &Arc<HookState>,
    controller: &str,
    hook: Hook,
    body: Bytes,
    ctx: Context,
) -> CallOutcome {
    if body.len() <= INLINE_BODY_LIMIT {
        return state.registry.call(controller, hook, &body, &ctx);
    }
    let registry = state.registry.clone();
    let controller_name = controller.to_owned();
    tokio::task::spawn_blocking(move || registry.call(&controller_name, hook, &body, &ctx))
        .await
        .unwrap_or_else(|join_error| CallOutcome {
            parent: ParentRef::default(),
            result: Err(HookError::Internal(format!(
                "hook computation aborted: {join_error}"
            ))),
        })
}

fn body_error(rejection: BytesRejection, limit: usize) -> HookError {
    match rejection {
        BytesRejection::FailedToBufferBody(FailedToBufferBody::LengthLimitError(_)) => {
            HookError::TooLarge { limit }
        }
        other => HookError::BadRequest(format!(
            "cannot read the request body: {}",
            other.body_text()
        )),
    }
}

/// A content hash of the response. Metacontroller keys its cache by the root object
/// only, so the tag must change whenever the bytes do — hence a hash, not a revision.
fn etag_of(bytes: &[u8]) -> String {
    let digest = crate::controllers::common::hash::sha256_hex(bytes);
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
