//! The probe port: `/healthz`, `/readyz` (503 once shutdown starts) and `/metrics`,
//! served on a thread and runtime of their own so the kubelet's probes never wait behind
//! hook work, with the small fixed bounds of [`ConnectionLimits::PROBES`].

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;

use super::{ConnectionLimits, HookState, Serving, Slots};

/// Readiness and liveness flags plus the metrics of the hook port.
pub struct ProbeState {
    /// False until both ports accept, and again once shutdown starts.
    pub ready: AtomicBool,
    /// The hook side, whose calls and connections `/metrics` reports.
    pub hooks: Arc<HookState>,
}

/// The probe routes: `/healthz`, `/readyz`, `/metrics`.
pub fn probe_router(state: Arc<ProbeState>) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics_text))
        .with_state(state)
}

/// Ready while the server runs and its hook port can take a new connection: a replica
/// whose every hook slot is answering a call leaves the Service's endpoints, so new
/// calls go to a replica that can answer them.
async fn readyz(State(state): State<Arc<ProbeState>>) -> (StatusCode, &'static str) {
    if !state.ready.load(Ordering::SeqCst) {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready")
    } else if !state.hooks.connections.can_admit() {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "not ready: every hook connection slot is answering a call",
        )
    } else {
        (StatusCode::OK, "ready")
    }
}

async fn metrics_text(State(state): State<Arc<ProbeState>>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            prometheus_client::encoding::prometheus_text::CONTENT_TYPE,
        )],
        state.hooks.metrics.render(&state.hooks.in_use()),
    )
}

/// The probe port being served on a thread and runtime of its own, so the kubelet's
/// probes never wait behind hook work on the async workers, however busy they are.
pub(super) struct ProbeServing {
    stop: tokio::sync::oneshot::Sender<()>,
    thread: std::thread::JoinHandle<std::io::Result<()>>,
}

impl ProbeServing {
    /// Stops serving and waits for the thread.
    pub(super) fn stop(self) -> std::io::Result<()> {
        let _ = self.stop.send(());
        self.thread
            .join()
            .unwrap_or_else(|_| Err(std::io::Error::other("the probe thread panicked")))
    }
}

/// Serves probes and metrics on `listener` with [`ConnectionLimits::PROBES`] until stopped.
pub(super) fn serve_probes(
    listener: std::net::TcpListener,
    probes: Arc<ProbeState>,
) -> std::io::Result<ProbeServing> {
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let limits = ConnectionLimits::PROBES;
    let serving = {
        // Entered, not blocked on: the caller may itself be running on a runtime.
        let _entered = runtime.enter();
        Serving::start(
            listener,
            None,
            limits,
            Slots::new(limits.max_connections, limits.max_per_peer),
            probe_router(probes),
        )?
    };
    let thread = std::thread::Builder::new()
        .name("metahooks-probes".to_owned())
        .spawn(move || {
            runtime.block_on(async move {
                let _ = stopped.await;
                serving
                    .stop(Duration::from_secs(1))
                    .await
                    .map_err(std::io::Error::other)
            })
        })?;
    Ok(ProbeServing { stop, thread })
}
