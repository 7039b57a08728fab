//! What a hook call passes before its handler runs, as tower layers (axum's `from_fn`
//! middleware), outermost first:
//!
//! 1. [`observe`]: the call's span, its metrics and its log line, whoever answered it;
//! 2. [`admit`]: authenticated, to a hook this server has (401, 404);
//! 3. [`body::read`]: the whole body read within its size limit, its read timeout and
//!    the byte budget, hashed as it arrives (413, 408, 429);
//! 4. [`slot::in_flight`]: an in-flight slot, taken only once the whole body is in (429
//!    with `Retry-After`), held with the body's bytes until the answer has been sent;
//! 5. [`slot::deadline`]: 503 when no answer is ready by the call's deadline.
//!
//! So the handler (`hooks::answer`) reads: hash, memo, compute, answer. What a layer
//! hands inward travels in the request's extensions ([`Target`], [`Started`],
//! `body::Received`, [`slot::Slot`], [`slot::Deadline`]); what the handler tells the
//! observer, in the response's ([`Record`]).
//!
//! tower's own concurrency and timeout layers are not used for the slot: their permit is
//! let go when the response future ends, before the body is sent, and a call answered
//! 503 at its deadline must keep counting until its work ends (see `slot`).

pub mod body;
mod observe;
pub mod slot;

use std::sync::Arc;
use std::time::Instant;

use axum::extract::{Path, Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

pub use self::observe::observe;
use super::HookState;
use super::error::CallError;
use super::hooks::HookRoute;
use crate::controllers::{Changes, ParentRef};

/// What a call's path names: a hook of ours, or nothing we have.
#[derive(Debug, Clone)]
pub enum Target {
    /// A registered hook.
    Hook(HookRoute),
    /// Any other `/{controller}/{hook}`.
    Unknown {
        /// The first segment, percent-decoded.
        controller: String,
        /// The second segment, percent-decoded.
        hook: String,
    },
}

/// When the call came in: its deadline is counted from here.
#[derive(Debug, Clone, Copy)]
pub struct Started(pub Instant);

/// What a call was about and what its answer changes, for the observer (a response
/// extension; absent when the call was refused before the handler).
#[derive(Debug, Clone, Default)]
pub struct Record {
    /// The parent the call named.
    pub parent: ParentRef,
    /// What a computed answer changes (None: remembered, refused or failed).
    pub changes: Option<Changes>,
}

/// Why a call was refused, for the observer (a response extension).
#[derive(Debug, Clone)]
pub struct Refusal {
    /// The reason, as in the body.
    pub reason: &'static str,
    /// The message, as in the body.
    pub message: String,
}

/// The response for `error`, carrying what the observer logs of it.
pub fn refused(error: CallError, record: Option<Record>) -> Response {
    let refusal = Refusal {
        reason: error.reason(),
        message: error.to_string(),
    };
    let mut response = error.into_response();
    response.extensions_mut().insert(refusal);
    if let Some(record) = record {
        response.extensions_mut().insert(record);
    }
    response
}

/// A call on any `/{controller}/{hook}` path that is not a registered hook's: a hook's
/// path written with percent-escapes still finds the hook; anything else is `Unknown`
/// (answered 404 by [`admit`], after authentication).
pub async fn resolve(
    State(state): State<Arc<HookState>>,
    Path((controller, hook)): Path<(String, String)>,
    mut request: Request,
    next: Next,
) -> Response {
    let found = state
        .routes
        .iter()
        .find(|route| route.controller == controller && route.hook.as_str() == hook);
    let target = match found {
        Some(route) => Target::Hook(*route),
        None => Target::Unknown { controller, hook },
    };
    request.extensions_mut().insert(target);
    next.run(request).await
}

/// Lets a call in: authenticated, to a hook this server has. Nothing of the body is
/// read before.
pub async fn admit(State(state): State<Arc<HookState>>, request: Request, next: Next) -> Response {
    if let Some(auth) = &state.auth
        && !auth.allows(request.headers())
    {
        return refused(CallError::Unauthorized, None);
    }
    if let Some(Target::Unknown { controller, hook }) = request.extensions().get::<Target>() {
        let error = state.registry.not_found(format!("/{controller}/{hook}"));
        return refused(error.into(), None);
    }
    next.run(request).await
}

/// The route a call was admitted to (set by the layers before the handler).
pub fn route_of(request: &Request) -> Option<HookRoute> {
    match request.extensions().get::<Target>()? {
        Target::Hook(route) => Some(*route),
        Target::Unknown { .. } => None,
    }
}
