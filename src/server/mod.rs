//! The HTTP edge: the hook port (controllers under `/<controller>/<hook>`) and the probe
//! port (`/healthz`, `/readyz`, `/metrics`). No controller logic lives here.
//!
//! [`hook_router`] answers the hook port and [`probe_router`] the probe port, both served
//! by [`Serving`] with the same per-connection bounds; [`Server::start`] binds both ports
//! and [`Server::run_until_signal`] handles SIGTERM:
//! readiness turns 503 at once, hooks keep answering for the drain delay, then in-flight
//! calls finish and the process exits.

mod admission;
mod answers;
mod auth;
mod budget;
mod compute;
mod error;
mod hooks;
mod metrics;
mod probes;
mod route;
mod serving;
mod slots;
mod tls;

pub use answers::DEFAULT_BYTES as DEFAULT_ANSWER_MEMO_BYTES;
pub use auth::Auth;
pub use compute::threads as compute_threads;
pub use metrics::{InUse, Metrics};
pub use probes::{ProbeState, probe_router};
pub use serving::{ConnectionLimits, Serving};
pub use slots::{Refused, Slots};
pub use tls::TlsFiles;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::Router;
use axum::http::{StatusCode, Uri, header};
use axum::response::IntoResponse;
use axum::routing::MethodRouter;
use tokio::sync::Semaphore;
use tower_http::catch_panic::CatchPanicLayer;

use crate::controllers::Registry;
use crate::error::HookError;

/// Bounds on what one hook call may cost.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Largest request body accepted, in bytes (413 above).
    pub body_bytes: usize,
    /// Hook calls answered at once; more are refused with 429.
    pub max_in_flight: usize,
    /// Bytes of request bodies being read or answered at once; a body that would take
    /// more is refused with 429. At least `body_bytes`.
    pub body_budget_bytes: usize,
    /// Of those, bytes the bodies of one client (peer address) may hold at once; a body
    /// that would take more is refused with 429. At least `body_bytes`.
    pub body_budget_per_client_bytes: usize,
    /// Below Metacontroller's default 10 s webhook timeout, so we answer before it gives up.
    pub deadline: Duration,
    /// The `Retry-After` of a 429, in seconds.
    pub retry_after_seconds: u64,
    /// How long a client may take to send a request's body once its headers are in.
    pub body_read_timeout: Duration,
    /// How long a new connection may take to send its first request's headers.
    pub header_read_timeout: Duration,
    /// How long a kept-alive connection may wait for its next request (and take to send
    /// that request's headers) before it is closed.
    pub idle_timeout: Duration,
    /// Open hook connections at most: a new one takes the slot of the connection idle
    /// the longest, and is closed unread only when every one is answering a call.
    pub max_connections: usize,
    /// Open hook connections from one peer address at most (the same rule within them).
    pub max_connections_per_peer: usize,
    /// Bytes of one request's head at most (request line and headers).
    pub max_header_bytes: usize,
    /// Bytes of answers remembered at most.
    pub answer_memo_bytes: u64,
    /// Threads hook answers are computed on; 0 chooses one per core.
    pub compute_threads: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            body_bytes: 32 * 1024 * 1024,
            max_in_flight: 64,
            body_budget_bytes: 128 * 1024 * 1024,
            // Half: one client holding bodies open leaves the other half to the rest.
            body_budget_per_client_bytes: 64 * 1024 * 1024,
            deadline: Duration::from_secs(8),
            retry_after_seconds: 1,
            body_read_timeout: Duration::from_secs(10),
            header_read_timeout: Duration::from_secs(10),
            // Longer than Go's default idle time for kept-alive client connections (90 s),
            // so Metacontroller closes idle connections before we do and never races us.
            idle_timeout: Duration::from_secs(120),
            max_connections: 1024,
            // Metacontroller's pool holds a few connections per worker; a quarter of the
            // slots leaves the rest to others whatever one address does.
            max_connections_per_peer: 256,
            // Go's client sends a few hundred bytes of headers; 1,024 connections × 64 KiB
            // bound what heads in flight can hold to 64 MiB.
            max_header_bytes: 64 * 1024,
            answer_memo_bytes: answers::DEFAULT_BYTES,
            compute_threads: 0,
        }
    }
}

impl Limits {
    /// What one hook connection may hold.
    pub fn connection_limits(&self) -> ConnectionLimits {
        ConnectionLimits {
            max_connections: self.max_connections,
            max_per_peer: self.max_connections_per_peer,
            first_request: self.header_read_timeout,
            idle: self.idle_timeout,
            max_header_bytes: self.max_header_bytes,
        }
    }
}

/// A duration in whole milliseconds, as logs, messages and deadlines count them.
fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// Where `now` comes from: the system clock, or a fixed instant for golden tests.
#[derive(Debug, Clone, Copy)]
pub enum Clock {
    /// The real clock.
    System,
    /// A fixed instant: golden answers and the emulator's simulated time.
    Fixed(jiff::Timestamp),
}

impl Clock {
    /// The time to stamp on conditions now.
    pub fn now(self) -> jiff::Timestamp {
        match self {
            Clock::System => jiff::Timestamp::now(),
            Clock::Fixed(at) => at,
        }
    }
}

/// Everything the hook endpoint needs, shared by all requests.
pub struct HookState {
    /// The controllers calls are routed to.
    pub registry: Arc<Registry>,
    /// Body, in-flight and time bounds.
    pub limits: Limits,
    /// Credentials callers must present, when authentication is on.
    pub auth: Option<Auth>,
    /// Where condition times come from.
    pub clock: Clock,
    /// Call counts and latencies for `/metrics`.
    pub metrics: Arc<Metrics>,
    in_flight: Arc<Semaphore>,
    /// Bytes of request bodies being read or answered, in all and per client.
    body_budget: budget::BodyBudget,
    connections: Slots,
    compute: compute::ComputePool,
    answers: answers::AnswerMemo,
    routes: Vec<route::HookRoute>,
}

impl HookState {
    /// State for serving hooks with `registry` under `limits`.
    fn new(
        registry: Registry,
        limits: Limits,
        auth: Option<Auth>,
        clock: Clock,
        compute: compute::ComputePool,
    ) -> HookState {
        let metrics = Metrics::new(Some(registry.sources().as_ref()));
        HookState {
            compute,
            routes: route::HookRoute::all(&registry),
            registry: Arc::new(registry),
            in_flight: Arc::new(Semaphore::new(limits.max_in_flight)),
            body_budget: budget::BodyBudget::new(
                limits.body_budget_bytes,
                limits.body_budget_per_client_bytes,
            ),
            connections: Slots::new(limits.max_connections, limits.max_connections_per_peer),
            answers: answers::AnswerMemo::with_bytes(limits.answer_memo_bytes),
            limits,
            auth,
            clock,
            metrics: Arc::new(metrics),
        }
    }

    /// What is in use now, for `/metrics`.
    fn in_use(&self) -> metrics::InUse {
        metrics::InUse {
            in_flight: self
                .limits
                .max_in_flight
                .saturating_sub(self.in_flight.available_permits()),
            connections: self.connections.open(),
            connections_evicted: self.connections.evicted(),
            answer_memo_bytes: self.answers.bytes(),
            step_memo_bytes: self.registry.steps().bytes(),
            body_bytes: self.body_budget.held(),
        }
    }
}

/// The hook routes (`POST /{controller}/{hook}`) over `state`: a path of its own for each
/// registered hook, and one for every other pair of segments (answered 404, or the hook
/// when its path came percent-escaped). Each passes the admission layers (see
/// `admission`) before the handler.
pub fn hook_router(state: Arc<HookState>) -> Router {
    let mut router = Router::new();
    for route in &state.routes {
        let admitted = admitted(&state, Some(*route));
        router = router.route(&route.path(), admitted.fallback(method_not_allowed));
    }
    let resolve = axum::middleware::from_fn_with_state(state.clone(), admission::resolve);
    router
        .route(
            "/{controller}/{hook}",
            admitted(&state, None)
                .layer(resolve)
                .fallback(method_not_allowed),
        )
        .fallback(not_found)
        .layer(CatchPanicLayer::custom(panic_response))
        .with_state(state)
}

/// `POST` to the hook handler through the admission layers (see `admission`), outermost
/// first: observe, admit, read the body, take an in-flight slot, keep the deadline.
/// `route` is the hook of a registered path (None: the path is resolved per call).
fn admitted(
    state: &Arc<HookState>,
    route: Option<route::HookRoute>,
) -> MethodRouter<Arc<HookState>> {
    use admission::{Admit, Observe, StepLayer, body::ReadBody, slot::Deadline, slot::InFlight};
    let observe = Observe {
        state: state.clone(),
        route,
    };
    let stack = tower::ServiceBuilder::new()
        .layer(observe)
        .layer(StepLayer(Admit))
        .layer(StepLayer(ReadBody))
        .layer(StepLayer(InFlight))
        .layer(StepLayer(Deadline))
        .service(hooks::Answer);
    axum::routing::post_service(stack)
}

/// Last line of defence: a panic in a controller is a 500 with a JSON body, never a
/// dropped connection and never a 200.
fn panic_response(_: Box<dyn std::any::Any + Send + 'static>) -> axum::response::Response {
    tracing::error!("hook computation panicked");
    HookError::Internal(crate::error::Fault::Panicked).into_response()
}

/// Hooks are POST only; anything else gets a JSON 405 that says so.
async fn method_not_allowed(method: axum::http::Method) -> axum::response::Response {
    let body = serde_json::json!({
        "error": format!("{method} is not supported: hooks are called with POST"),
        "reason": "method_not_allowed",
    });
    (
        StatusCode::METHOD_NOT_ALLOWED,
        [
            (header::ALLOW, "POST"),
            (header::CONTENT_TYPE, "application/json"),
        ],
        body.to_string(),
    )
        .into_response()
}

async fn not_found(
    axum::extract::State(state): axum::extract::State<Arc<HookState>>,
    uri: Uri,
) -> axum::response::Response {
    state
        .registry
        .not_found(uri.path().to_owned())
        .into_response()
}

/// What `serve` needs once its configuration has been read and checked.
#[derive(Debug, Clone)]
pub struct ServerSettings {
    /// Address of the hook port.
    pub listen: SocketAddr,
    /// Address of the probe port.
    pub probe_listen: SocketAddr,
    /// Bounds on hook calls.
    pub limits: Limits,
    /// Credentials hook callers must present (None: no authentication).
    pub auth: Option<Auth>,
    /// TLS for the hook port (None: plain HTTP).
    pub tls: Option<TlsFiles>,
    /// How long readiness reports 503 before the hook port stops accepting, so that
    /// Service endpoints are updated before connections are refused.
    pub shutdown_delay: Duration,
    /// How long in-flight calls may take to finish once shutdown starts.
    pub shutdown_grace: Duration,
}

/// A running server: both ports bound, serving.
pub struct Server {
    /// Where hooks are served (the bound address, so port 0 resolves).
    pub hook_addr: SocketAddr,
    /// Where probes are served.
    pub probe_addr: SocketAddr,
    probes: Arc<ProbeState>,
    hooks_serving: Serving,
    probes_serving: probes::ProbeServing,
    settings: ServerSettings,
}

/// Why the server could not start or stop cleanly.
#[derive(Debug, thiserror::Error)]
#[allow(missing_docs)] // each variant is described by its #[error] message
pub enum ServerError {
    #[error("cannot listen on {address} for {what}: {source}")]
    Listen {
        what: &'static str,
        address: SocketAddr,
        source: std::io::Error,
    },
    #[error("cannot serve TLS: {0}")]
    Tls(#[from] tls::TlsError),
    #[error("the {what} server failed: {source}")]
    Serve {
        what: &'static str,
        source: std::io::Error,
    },
    #[error("cannot start the threads hook answers are computed on: {0}")]
    ComputeThreads(std::io::Error),
    #[error("the {what} server task ended abnormally: {source}")]
    Task {
        what: &'static str,
        source: tokio::task::JoinError,
    },
}

impl Server {
    /// Binds both ports and starts serving; readiness is reported once both accept.
    ///
    /// # Errors
    /// A port cannot be bound, or the TLS files cannot serve.
    pub async fn start(
        settings: ServerSettings,
        registry: Registry,
        clock: Clock,
    ) -> Result<Server, ServerError> {
        let compute = compute::ComputePool::start(
            compute::threads(settings.limits.compute_threads),
            tokio::runtime::Handle::current(),
        )
        .map_err(ServerError::ComputeThreads)?;
        let hooks = Arc::new(HookState::new(
            registry,
            settings.limits.clone(),
            settings.auth.clone(),
            clock,
            compute,
        ));
        let probes = Arc::new(ProbeState {
            ready: AtomicBool::new(false),
            hooks: hooks.clone(),
        });

        let (hook_listener, hook_addr) = bind("hooks", settings.listen)?;
        let (probe_listener, probe_addr) = bind("probes", settings.probe_listen)?;

        let hooks_serving = serve(
            hook_listener,
            settings.tls.as_ref(),
            settings.limits.connection_limits(),
            hooks.connections.clone(),
            hook_router(hooks.clone()),
        )
        .map_err(|source| match source {
            ServeError::Tls(error) => ServerError::Tls(error),
            ServeError::Listener(source) => ServerError::Listen {
                what: "hooks",
                address: settings.listen,
                source,
            },
        })?;
        let probes_serving =
            probes::serve_probes(probe_listener, probes.clone()).map_err(|source| {
                ServerError::Listen {
                    what: "probes",
                    address: settings.probe_listen,
                    source,
                }
            })?;
        probes.ready.store(true, Ordering::SeqCst);
        log_listening(&settings, hook_addr, probe_addr);
        Ok(Server {
            hook_addr,
            probe_addr,
            probes,
            hooks_serving,
            probes_serving,
            settings,
        })
    }

    /// Serves until SIGTERM or Ctrl-C, then shuts down gracefully.
    ///
    /// # Errors
    /// As [`Server::shutdown`].
    pub async fn run_until_signal(self) -> Result<(), ServerError> {
        wait_for_signal().await;
        self.shutdown().await
    }

    /// Readiness 503 now; hooks keep answering for the drain delay; then stop accepting
    /// and let in-flight calls finish within the grace period.
    ///
    /// # Errors
    /// A server task failed or ended abnormally.
    pub async fn shutdown(self) -> Result<(), ServerError> {
        self.probes.ready.store(false, Ordering::SeqCst);
        tracing::info!(
            delay_ms = self.settings.shutdown_delay.as_millis() as u64,
            "shutdown started"
        );
        tokio::time::sleep(self.settings.shutdown_delay).await;
        self.hooks_serving
            .stop(self.settings.shutdown_grace)
            .await
            .map_err(|source| ServerError::Task {
                what: "hook",
                source,
            })?;
        self.probes_serving
            .stop()
            .map_err(|source| ServerError::Serve {
                what: "probe",
                source,
            })?;
        tracing::info!("shutdown complete");
        Ok(())
    }
}

/// Why a router cannot be served.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The TLS files cannot serve.
    #[error("cannot serve TLS: {0}")]
    Tls(#[from] tls::TlsError),
    /// The listener cannot be handed to Tokio.
    #[error("cannot serve on the listener: {0}")]
    Listener(#[from] std::io::Error),
}

/// Serves `app` on `listener`, over TLS with `tls`, each connection bounded by `limits`
/// and holding one of `slots`.
///
/// # Errors
/// The TLS files cannot serve, or the listener cannot be used.
pub fn serve(
    listener: std::net::TcpListener,
    tls: Option<&TlsFiles>,
    limits: ConnectionLimits,
    slots: Slots,
    app: Router,
) -> Result<Serving, ServeError> {
    let tls = tls.map(TlsFiles::server_config).transpose()?;
    Ok(Serving::start(listener, tls, limits, slots, app)?)
}

/// A listener on `address`, and the address it is bound to (port 0 resolved).
fn bind(
    what: &'static str,
    address: SocketAddr,
) -> Result<(std::net::TcpListener, SocketAddr), ServerError> {
    let failed = |source| ServerError::Listen {
        what,
        address,
        source,
    };
    let listener = std::net::TcpListener::bind(address).map_err(failed)?;
    let bound = listener.local_addr().map_err(failed)?;
    Ok((listener, bound))
}

/// The start-up line: where the server listens and the limits it enforces.
fn log_listening(settings: &ServerSettings, hook_addr: SocketAddr, probe_addr: SocketAddr) {
    let limits = &settings.limits;
    tracing::info!(
        version = env!("CARGO_PKG_VERSION"),
        hooks = %hook_addr,
        probes = %probe_addr,
        tls = settings.tls.is_some(),
        auth = settings.auth.is_some(),
        body_limit_bytes = limits.body_bytes,
        max_in_flight = limits.max_in_flight,
        deadline_ms = millis(limits.deadline),
        max_connections = limits.max_connections,
        max_connections_per_peer = limits.max_connections_per_peer,
        compute_threads = compute::threads(limits.compute_threads),
        "listening"
    );
}

async fn wait_for_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(error) => {
                tracing::warn!(%error, "cannot listen for SIGTERM; only Ctrl-C stops the server");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = terminate => {},
    }
}
