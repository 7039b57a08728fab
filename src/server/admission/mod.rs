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
//! So the handler (`hooks::answer`) reads: hash, memo, compute, answer.
//!
//! The observer is the tower `Service` axum routes to, and it owns the call. Behind it,
//! each layer is a [`Step`] (an async function of the [`Call`] and the rest of the
//! stack) and what the layers build is a [`Rest`], not a `Service`: the call travels
//! inward by reference, not in the request's extensions, and what the handler and the
//! layers tell the observer (the [`Record`], a [`Refusal`]) is left in it. So the whole
//! stack is one future, boxed once by the observer, whose layers hold a reference each.
//! A `Service` per layer needs a future boxed per layer (stable Rust cannot name one
//! unboxed) and an extension a boxed value per insert; handing the call inward by value
//! copies it at every layer (`scripts/instructions.sh`, per remembered 12 KiB answer:
//! 73.6k instructions with a service per layer, 72.9k with one future and the call by
//! value, 69.5k by reference).
//!
//! tower's own concurrency and timeout layers are not used for the slot: their permit is
//! let go when the response future ends, before the body is sent, and a call answered
//! 503 at its deadline must keep counting until its work ends (see `slot`).

pub mod body;
mod observe;
pub mod slot;

use std::future::Future;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Instant;

use axum::extract::{Path, Request, State};
use axum::response::{IntoResponse, Response};
use tower::Layer;

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

/// A call on its way in: the request, and what the layers learned of it (made by
/// [`Observe`], filled in by the layers after it, taken apart by the handler).
pub struct Call {
    /// The request; its body is taken by [`body::ReadBody`].
    pub request: Request,
    /// Everything the endpoint shares.
    pub state: Arc<HookState>,
    /// What the path names.
    pub target: Target,
    /// Who is calling (the peer address): the body budget is shared per client.
    pub client: IpAddr,
    /// When the call came in: its deadline is counted from here.
    pub started: Instant,
    /// The body, read whole ([`body::ReadBody`]).
    pub received: Option<body::Received>,
    /// The body's bytes in the budget ([`body::ReadBody`]), until the slot holds them.
    pub bytes: Option<crate::server::budget::Held>,
    /// The in-flight slot ([`slot::InFlight`]), which holds the body's bytes too.
    pub slot: Option<slot::Slot>,
    /// When the answer is due ([`slot::Deadline`]): work that would only start after
    /// it is not started.
    pub deadline: Option<Instant>,
    /// What the call was about and what its answer changes (the handler's), for the
    /// observer.
    pub record: Record,
    /// Why the call was refused, for the observer.
    pub refusal: Option<Refusal>,
}

impl Call {
    /// The hook called, once [`Admit`] has let the call in.
    pub fn route(&self) -> Option<HookRoute> {
        match self.target {
            Target::Hook(route) => Some(route),
            Target::Unknown { .. } => None,
        }
    }

    /// The response refusing the call for `error`, which the observer logs.
    pub fn refuse(&mut self, error: CallError) -> Response {
        refuse(&mut self.refusal, error)
    }

    /// The refusal for a call that reached a layer without what the layers before it
    /// hand inward (a stack built in another order).
    fn not_admitted(&mut self) -> Response {
        self.refuse(HookError::Internal(Fault::NotAdmitted).into())
    }
}

/// The response for `error`, with why it was refused left in `refusal` for the observer.
pub fn refuse(refusal: &mut Option<Refusal>, error: CallError) -> Response {
    *refusal = Some(Refusal {
        reason: error.reason(),
        message: error.to_string(),
    });
    error.into_response()
}

/// What a call was about and what its answer changes, for the observer (the default
/// until the handler knows).
#[derive(Debug, Clone, Default)]
pub struct Record {
    /// The parent the call named.
    pub parent: ParentRef,
    /// What a computed answer changes (None: remembered, refused or failed).
    pub changes: Option<Changes>,
}

/// Why a call was refused, for the observer.
#[derive(Debug, Clone)]
pub struct Refusal {
    /// The reason, as in the body.
    pub reason: &'static str,
    /// The message, as in the body.
    pub message: String,
}

/// One admission layer: what it does with a call before (and after) the rest of the
/// stack, `next`.
pub trait Step: Clone + Send + Sync + 'static {
    /// Answers `call`, passing it on to `next` when it is let through.
    fn run<N: Rest>(self, call: &mut Call, next: N) -> impl Future<Output = Response> + Send + '_;
}

/// What a layer wraps: the layers after it and the handler.
pub trait Rest: Clone + Send + Sync + 'static {
    /// Answers `call`.
    fn run(self, call: &mut Call) -> impl Future<Output = Response> + Send + '_;
}

/// A [`Step`] as a tower layer: in front of the rest of the stack, it is the rest of
/// the stack for the layer before it.
#[derive(Debug, Clone, Copy)]
pub struct StepLayer<T>(pub T);

impl<T: Clone, N> Layer<N> for StepLayer<T> {
    type Service = Then<T, N>;

    fn layer(&self, next: N) -> Then<T, N> {
        Then {
            step: self.0.clone(),
            next,
        }
    }
}

/// A [`Step`] in front of `next`.
#[derive(Debug, Clone)]
pub struct Then<T, N> {
    step: T,
    next: N,
}

impl<T: Step, N: Rest> Rest for Then<T, N> {
    fn run(self, call: &mut Call) -> impl Future<Output = Response> + Send + '_ {
        self.step.run(call, self.next)
    }
}

/// Lets a call in: authenticated, to a hook this server has. Nothing of the body is
/// read before.
#[derive(Debug, Clone, Copy)]
pub struct Admit;

impl Step for Admit {
    async fn run<N: Rest>(self, call: &mut Call, next: N) -> Response {
        if let Some(auth) = &call.state.auth
            && !auth.allows(call.request.headers())
        {
            return call.refuse(CallError::Unauthorized);
        }
        if let Target::Unknown { controller, hook } = &call.target {
            let path = format!("/{controller}/{hook}");
            let error = call.state.registry.not_found(path);
            return call.refuse(error.into());
        }
        next.run(call).await
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
