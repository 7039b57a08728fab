//! The outermost layer: each call's span, metrics and log line, whether a layer refused
//! it or the handler answered.

use std::convert::Infallible;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::extract::{ConnectInfo, Request};
use axum::response::Response;
use tower::{Layer, Service};
use tracing::Instrument;

use super::{Call, Record, Refusal, Rest, Target, refuse};
use crate::controllers::{Changes, ParentRef};
use crate::error::{Fault, HookError};
use crate::protocol::Hook;
use crate::server::HookState;

/// Times the call, runs it in a span named after its hook, then counts and logs it with
/// what the handler recorded (the parent, the changes) or why it was refused. On a
/// registered hook's path, `route` is that hook; elsewhere the path was resolved before
/// (a [`Target`] extension).
#[derive(Clone)]
pub struct Observe {
    /// Everything the endpoint shares.
    pub state: Arc<HookState>,
    /// The hook of the path this layer serves, if it is a registered hook's.
    pub route: Option<super::HookRoute>,
}

impl<N> Layer<N> for Observe {
    type Service = Observing<N>;

    fn layer(&self, rest: N) -> Observing<N> {
        Observing {
            observe: self.clone(),
            rest,
        }
    }
}

/// The admission stack as the tower service axum routes to: [`Observe`] in front of
/// the rest.
#[derive(Clone)]
pub struct Observing<N> {
    observe: Observe,
    rest: N,
}

impl<N: Rest> Service<Request> for Observing<N> {
    type Response = Response;
    type Error = Infallible;
    type Future = Observed;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        // The layers and the handler are always ready: each call runs them on its own.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request) -> Observed {
        Observed(Box::pin(
            self.observe.clone().run(request, self.rest.clone()),
        ))
    }
}

/// A call through the whole stack, boxed once. Named rather than an `async` block
/// around the observer's future: awaiting a captured future moves it, so the block would
/// hold it twice and copy it on every call.
pub struct Observed(Pin<Box<dyn Future<Output = Response> + Send>>);

impl Future for Observed {
    type Output = Result<Response, Infallible>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.0.as_mut().poll(cx).map(Ok)
    }
}

impl Observe {
    async fn run<N: Rest>(self, mut request: Request, rest: N) -> Response {
        let Observe { state, route } = self;
        let started = Instant::now();
        let target = match route {
            Some(route) => Some(Target::Hook(route)),
            None => request.extensions_mut().remove::<Target>(),
        };
        let (controller, hook) = target
            .as_ref()
            .map_or(("unknown", "unknown"), |target| labels(&state, target));
        let span = tracing::debug_span!(
            "hook",
            controller,
            hook,
            parent.namespace = tracing::field::Empty,
            parent.name = tracing::field::Empty,
        );
        // The call takes the observer's handle on the endpoint's state and gives it back
        // for the metrics: one clone of it per call (in `Observing::call`), not two.
        let (response, record, refusal, state) = match target {
            Some(target) => {
                // Calls that come in without a socket (tests through `oneshot`) share one
                // client.
                let client = request
                    .extensions()
                    .get::<ConnectInfo<SocketAddr>>()
                    .map_or(IpAddr::from([0, 0, 0, 0]), |peer| peer.0.ip());
                let mut call = Call {
                    request,
                    state,
                    target,
                    client,
                    started,
                    received: None,
                    bytes: None,
                    slot: None,
                    deadline: None,
                    record: Record::default(),
                    refusal: None,
                };
                let response = rest.run(&mut call).instrument(span.clone()).await;
                (response, call.record, call.refusal, call.state)
            }
            None => {
                let mut refusal = None;
                let error = HookError::Internal(Fault::NotAdmitted).into();
                let response = refuse(&mut refusal, error);
                (response, Record::default(), refusal, state)
            }
        };
        span.record("parent.namespace", &*record.parent.namespace);
        span.record("parent.name", &*record.parent.name);
        let code = response.status().as_u16();
        let elapsed = started.elapsed();
        state.metrics.record(controller, hook, code, elapsed);
        log_call(
            (controller, hook),
            &record.parent,
            code,
            elapsed,
            record.changes,
            refusal,
        );
        response
    }
}

/// The metrics labels of a call. Only registered names become labels: a caller cannot
/// grow the series.
fn labels(state: &HookState, target: &Target) -> (&'static str, &'static str) {
    match target {
        Target::Hook(route) => (route.controller, route.hook.as_str()),
        Target::Unknown { controller, hook } => {
            let controller = if state.registry.contains(controller) {
                crate::server::metrics::label(controller)
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
    refusal: Option<Refusal>,
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
        (Some(refusal), _) if code < 500 => line!(
            warn,
            "hook call refused",
            reason = refusal.reason,
            error = refusal.message.as_str()
        ),
        (Some(refusal), _) => line!(
            error,
            "hook call failed",
            reason = refusal.reason,
            error = refusal.message.as_str()
        ),
    }
}
