//! What a hook call passes before its handler runs, as tower layers, outermost first:
//!
//! 1. [`Observe`]: the call's span, its metrics and its log line, whoever answered it;
//! 2. [`Admit`]: authenticated, to a hook this server has (401, 404);
//! 3. [`body::ReadBody`]: the whole body read within its size limit, its read timeout and
//!    the byte budget, hashed as it arrives (413, 408, 429);
//! 4. [`slot::InFlight`]: an in-flight slot, taken only once the whole body is in (429
//!    with `Retry-After`), held with the body's bytes until the answer has been sent;
//! 5. [`slot::Deadline`]: 503 when no answer is ready by the call's deadline.
//!
//! So the handler (`hooks::answer`) reads: hash, memo, compute, answer. What the layers
//! learn travels inward in one request extension ([`Call`]); what the handler tells the
//! observer, in the response's ([`Record`], [`Refusal`]).
//!
//! Each layer is a [`Step`]: an async function of the request and the rest of the stack.
//! The stack is generic over what it wraps, so a call costs one boxed future per layer
//! and no more (axum's `from_fn` boxes the rest of the stack, and its future, once more
//! per layer, which measured 25% more instructions per remembered answer). tower's own
//! concurrency and timeout layers are not used for the slot: their permit is let go when
//! the response future ends, before the body is sent, and a call answered 503 at its
//! deadline must keep counting until its work ends (see `slot`).

pub mod body;
mod observe;
pub mod slot;

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use axum::extract::{Path, Request, State};
use axum::response::{IntoResponse, Response};
use tower::{Layer, Service, ServiceExt};

pub use self::observe::Observe;
use super::HookState;
use super::error::CallError;
use super::route::HookRoute;
use crate::controllers::{Changes, ParentRef};
use crate::error::{Fault, HookError};

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

/// What the layers learned of a call, handed inward in the request's extensions: set by
/// [`Observe`], filled in by the layers after it, taken by the handler.
#[derive(Clone)]
pub struct Call {
    /// Everything the endpoint shares; the layers after the observer borrow it here.
    pub state: Arc<HookState>,
    /// The hook called.
    pub route: HookRoute,
    /// When the call came in: its deadline is counted from here.
    pub started: Instant,
    /// The body, read whole ([`body::ReadBody`]).
    pub received: Option<body::Received>,
    /// The in-flight slot ([`slot::InFlight`]).
    pub slot: Option<slot::Slot>,
    /// When the answer is due ([`slot::Deadline`]): work that would only start after
    /// it is not started.
    pub deadline: Option<Instant>,
}

/// A call on a path no hook of ours has, for [`Admit`] to answer 404 (after
/// authentication).
#[derive(Clone)]
pub struct Unknown {
    /// Everything the endpoint shares.
    pub state: Arc<HookState>,
    /// The path, as the 404 names it.
    pub path: String,
}

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

/// The refusal for a request that reached a layer without what the layers before it
/// hand inward (a stack built in another order).
fn not_admitted() -> Response {
    refused(HookError::Internal(Fault::NotAdmitted).into(), None)
}

/// The call's [`Call`], as the layers before this one left it.
fn call_of(request: &mut Request) -> Option<&mut Call> {
    request.extensions_mut().get_mut::<Call>()
}

/// One admission layer: what it does with a request before (and after) the rest of the
/// stack, `next`. The endpoint's state is borrowed from the request's [`Call`], so that
/// no layer but the observer holds a clone of it: a call clones it three times (the
/// route's copy of the stack, the observer's step, the `Call`), not once per layer and
/// service below (21 before; each clone is a write to a cache line every core reads).
pub trait Step: Clone + Send + Sync + 'static {
    /// Answers `request`, passing it on to `next` when it is let through.
    fn run<S: Inner>(
        self,
        request: Request,
        next: Next<S>,
    ) -> impl Future<Output = Response> + Send + 'static;
}

/// What a layer wraps: the rest of the stack.
pub trait Inner:
    Service<Request, Response = Response, Error = Infallible, Future: Send> + Clone + Send + 'static
{
}

impl<S> Inner for S where
    S: Service<Request, Response = Response, Error = Infallible, Future: Send>
        + Clone
        + Send
        + 'static
{
}

/// The rest of the stack, for one call.
pub struct Next<S>(S);

impl<S: Inner> Next<S> {
    /// Runs the rest of the stack on `request`. A plain future, not an `async fn`: one
    /// around it would hold the inner future twice and copy it on the first poll.
    pub fn run(self, request: Request) -> impl Future<Output = Response> + Send {
        futures_util::FutureExt::map(self.0.oneshot(request), |answered| match answered {
            Ok(response) => response,
            Err(never) => match never {},
        })
    }
}

/// A [`Step`] as a tower layer.
#[derive(Clone)]
pub struct StepLayer<T>(pub T);

impl<T: Clone, S> Layer<S> for StepLayer<T> {
    type Service = Stepping<T, S>;

    fn layer(&self, inner: S) -> Stepping<T, S> {
        Stepping {
            step: self.0.clone(),
            inner,
        }
    }
}

/// A [`Step`] in front of `inner`.
#[derive(Clone)]
pub struct Stepping<T, S> {
    step: T,
    inner: S,
}

/// A step's answer, boxed once. Named rather than an `async` block around the step's
/// future: awaiting a captured future moves it, so the block would hold it twice and
/// copy it (a few KiB for the outer layers) on every call.
pub struct Stepped(Pin<Box<dyn Future<Output = Response> + Send>>);

impl Future for Stepped {
    type Output = Result<Response, Infallible>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.0.as_mut().poll(cx).map(Ok)
    }
}

impl<T: Step, S: Inner> Service<Request> for Stepping<T, S> {
    type Response = Response;
    type Error = Infallible;
    type Future = Stepped;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        // Every layer and the handler are always ready; `oneshot` waits on the rest.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request) -> Self::Future {
        Stepped(Box::pin(
            self.step.clone().run(request, Next(self.inner.clone())),
        ))
    }
}

/// Lets a call in: authenticated, to a hook this server has. Nothing of the body is
/// read before.
#[derive(Debug, Clone, Copy)]
pub struct Admit;

impl Step for Admit {
    async fn run<S: Inner>(self, request: Request, next: Next<S>) -> Response {
        let extensions = request.extensions();
        let (state, unknown) = match (extensions.get::<Call>(), extensions.get::<Unknown>()) {
            (Some(call), _) => (&call.state, None),
            (None, Some(unknown)) => (&unknown.state, Some(&unknown.path)),
            (None, None) => return not_admitted(),
        };
        if let Some(auth) = &state.auth
            && !auth.allows(request.headers())
        {
            return refused(CallError::Unauthorized, None);
        }
        if let Some(path) = unknown {
            return refused(state.registry.not_found(path.clone()).into(), None);
        }
        next.run(request).await
    }
}

/// A call on any `/{controller}/{hook}` path that is not a registered hook's: a hook's
/// path written with percent-escapes still finds the hook; anything else is `Unknown`
/// (answered 404 by [`Admit`], after authentication). axum middleware, as it runs only
/// for paths no registered hook has.
pub async fn resolve(
    State(state): State<Arc<HookState>>,
    Path((controller, hook)): Path<(String, String)>,
    mut request: Request,
    next: axum::middleware::Next,
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
