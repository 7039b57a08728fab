//! The outermost layer: each call's span, metrics and log line, whether a layer refused
//! it or the handler answered.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::Request;
use axum::response::Response;
use tracing::Instrument;

use super::{Call, Inner, Next, Record, Refusal, Step, Target, Unknown};
use crate::controllers::{Changes, ParentRef};
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

impl Step for Observe {
    async fn run<S: Inner>(self, mut request: Request, next: Next<S>) -> Response {
        let Observe { state, route } = self;
        let started = Instant::now();
        let target = match route {
            Some(route) => Some(Target::Hook(route)),
            None => request.extensions_mut().remove::<Target>(),
        };
        let (controller, hook) = target
            .as_ref()
            .map_or(("unknown", "unknown"), |target| labels(&state, target));
        match target {
            Some(Target::Hook(route)) => {
                request.extensions_mut().insert(Call {
                    state: state.clone(),
                    route,
                    started,
                    received: None,
                    slot: None,
                    deadline: None,
                });
            }
            // Admit answers 404, naming the path.
            Some(Target::Unknown { controller, hook }) => {
                request.extensions_mut().insert(Unknown {
                    state: state.clone(),
                    path: format!("/{controller}/{hook}"),
                });
            }
            None => {}
        }
        let span = tracing::debug_span!(
            "hook",
            controller,
            hook,
            parent.namespace = tracing::field::Empty,
            parent.name = tracing::field::Empty,
        );
        let mut response = next.run(request).instrument(span.clone()).await;
        let record = response
            .extensions_mut()
            .remove::<Record>()
            .unwrap_or_default();
        let refusal = response.extensions_mut().remove::<Refusal>();
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
