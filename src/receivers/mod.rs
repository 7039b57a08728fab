//! Push receivers: a forge's webhook says "this repository changed", and every source
//! reading that repository is fetched at once instead of at its next interval.
//!
//! Served on a port of their own (`--receiver-listen`, off by default), so the hook port
//! stays reachable from Metacontroller only. A request is accepted only with the forge's
//! proof of the shared secret (`--receiver-secret-file`, [`verify`]); the payload is
//! then read for repository URLs only ([`repository`]), never for content: what is
//! fetched comes from the repository itself, under every rule of the source engine.
//! Pushes for one remote coalesce: at most one fetch runs per remote, and one started
//! by a push is not followed by another within the engine's spacing.

pub mod repository;
pub mod verify;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use serde_json::{Value, json};
use tokio::sync::Semaphore;

use crate::http_error::HttpError;
use crate::memo::Memo;
use crate::source::Sources;
use verify::Forge;

/// Largest payload read (GitHub caps deliveries at 25 MB; a push names its commits, and
/// one with thousands of them is still far below this).
pub const MAX_BODY_BYTES: usize = 2 * 1024 * 1024;
/// Verified pushes handled at once; more get 429.
const MAX_IN_FLIGHT: usize = 16;
/// How long a sender may take to send the body: a forge sends a delivery at once, and a
/// body is read before anything is held for it, so a slow one is cut off early.
const BODY_TIMEOUT: Duration = Duration::from_secs(5);
/// Connections to the receiver port: with the body limit, what bodies being read can
/// hold (64 × 2 MiB).
const RECEIVER_CONNECTIONS: crate::server::ConnectionLimits = crate::server::ConnectionLimits {
    max_connections: 64,
    // Forges deliver from many addresses; one that holds more than this competes with itself.
    max_per_peer: 16,
    first_request: Duration::from_secs(5),
    idle: Duration::from_secs(120),
    max_header_bytes: 16 * 1024,
};
/// How long a delivery ID is remembered: a replayed delivery within it is answered
/// without a fetch.
const REPLAY_WINDOW: Duration = Duration::from_secs(600);
/// Delivery IDs remembered at most.
const REMEMBERED_DELIVERIES: u64 = 4096;

/// Where receivers listen and the secret they verify against.
#[derive(Clone)]
pub struct ReceiverSettings {
    /// The receiver port's address.
    pub listen: SocketAddr,
    /// The shared secret (GitHub/Gitea/generic: the HMAC key; GitLab: the token).
    pub secret: Vec<u8>,
}

impl std::fmt::Debug for ReceiverSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ReceiverSettings({}, <secret>)", self.listen)
    }
}

struct Receiver {
    secret: Vec<u8>,
    sources: Arc<dyn Sources>,
    in_flight: Semaphore,
    /// Delivery IDs seen, and when.
    deliveries: Memo<String, Instant>,
}

/// The running receiver port.
pub struct Receivers {
    /// The bound address (port 0 resolved).
    pub addr: SocketAddr,
    /// Stops serving when dropped.
    _serving: crate::server::Serving,
}

/// Binds the receiver port and serves it until the value is dropped.
///
/// # Errors
/// The address cannot be bound.
pub async fn start(
    settings: ReceiverSettings,
    sources: Arc<dyn Sources>,
) -> Result<Receivers, std::io::Error> {
    let listener = std::net::TcpListener::bind(settings.listen)?;
    let addr = listener.local_addr()?;
    let state = Arc::new(Receiver {
        secret: settings.secret,
        sources,
        in_flight: Semaphore::new(MAX_IN_FLIGHT),
        deliveries: Memo::entries(REMEMBERED_DELIVERIES),
    });
    let app = router(state);
    let limits = RECEIVER_CONNECTIONS;
    let slots = crate::server::Slots::new(limits.max_connections, limits.max_per_peer);
    let serving =
        crate::server::serve(listener, None, limits, slots, app).map_err(|error| match error {
            crate::server::ServeError::Listener(error) => error,
            other => std::io::Error::other(other),
        })?;
    tracing::info!(%addr, "push receivers listening");
    Ok(Receivers {
        addr,
        _serving: serving,
    })
}

fn router(state: Arc<Receiver>) -> Router {
    // Every answer is `{"error", "reason"}`, as the receivers' own refusals are.
    let json = |status: StatusCode, reason: &str, error: &str| {
        (
            status,
            [(axum::http::header::CONTENT_TYPE, "application/json")],
            json!({"error": error, "reason": reason}).to_string(),
        )
    };
    Router::new()
        .route(
            "/receivers/{forge}",
            post(receive).fallback(move |method: axum::http::Method| async move {
                json(
                    StatusCode::METHOD_NOT_ALLOWED,
                    "MethodNotAllowed",
                    &format!("{method} is not supported: pushes are delivered with POST"),
                )
            }),
        )
        .fallback(move || async move {
            json(
                StatusCode::NOT_FOUND,
                "UnknownPath",
                "receivers are POST /receivers/github, /receivers/gitlab, /receivers/gitea and /receivers/generic",
            )
        })
        .with_state(state)
}

/// Why a push was refused, answered with its status, a CamelCase reason and the message.
#[derive(Debug, thiserror::Error)]
enum Refused {
    #[error("no receiver for {0:?}: github, gitlab, gitea or generic")]
    UnknownForge(String),
    #[error("{MAX_IN_FLIGHT} pushes are being handled; retry")]
    Busy,
    #[error("the payload is not JSON: {0}")]
    NotJson(serde_json::Error),
    #[error("the payload names no repository URL")]
    NoRepository,
    #[error(transparent)]
    BadSignature(#[from] verify::Rejected),
    #[error("the payload is over {MAX_BODY_BYTES} bytes")]
    TooLarge,
    #[error("the payload took longer than {} s", BODY_TIMEOUT.as_secs())]
    Timeout,
}

impl HttpError for Refused {
    fn status(&self) -> StatusCode {
        match self {
            Refused::UnknownForge(_) => StatusCode::NOT_FOUND,
            Refused::Busy => StatusCode::TOO_MANY_REQUESTS,
            Refused::NotJson(_) | Refused::NoRepository => StatusCode::BAD_REQUEST,
            Refused::BadSignature(_) => StatusCode::UNAUTHORIZED,
            Refused::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            Refused::Timeout => StatusCode::REQUEST_TIMEOUT,
        }
    }

    fn reason(&self) -> &'static str {
        match self {
            Refused::UnknownForge(_) => "UnknownForge",
            Refused::Busy => "Busy",
            Refused::NotJson(_) => "NotJSON",
            Refused::NoRepository => "NoRepository",
            Refused::BadSignature(_) => "BadSignature",
            Refused::TooLarge => "TooLarge",
            Refused::Timeout => "Timeout",
        }
    }
}

impl IntoResponse for Refused {
    fn into_response(self) -> Response {
        let (status, reason, message) = (self.status(), self.reason(), self.to_string());
        tracing::warn!(status = status.as_u16(), reason, %message, "push refused");
        crate::http_error::answer(&self)
    }
}

async fn receive(
    State(receiver): State<Arc<Receiver>>,
    Path(forge): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    match push(&receiver, &forge, &headers, body).await {
        Ok(response) => response,
        Err(refused) => refused.into_response(),
    }
}

/// A forge's push: a signed payload naming repositories, whose remotes are fetched now.
async fn push(
    receiver: &Receiver,
    forge: &str,
    headers: &HeaderMap,
    body: Body,
) -> Result<Response, Refused> {
    let Some(forge) = Forge::from_segment(forge) else {
        return Err(Refused::UnknownForge(forge.to_owned()));
    };
    let body = authenticated(forge, headers, body, &receiver.secret).await?;
    let Ok(_permit) = receiver.in_flight.try_acquire() else {
        return Err(Refused::Busy);
    };
    if headers
        .get("x-github-event")
        .is_some_and(|event| event == "ping")
    {
        return Ok((StatusCode::OK, Json(json!({"pong": true}))).into_response());
    }
    if let Some(delivery) = delivery_id(headers)
        && receiver.replayed(delivery)
    {
        tracing::info!(delivery = %crate::telemetry::Escaped(delivery), "push replayed; nothing fetched");
        return Ok((
            StatusCode::ACCEPTED,
            Json(json!({"replayed": true, "remotes": 0})),
        )
            .into_response());
    }
    fetch_named(receiver, &body)
}

/// Fetches now every remote of the repositories a verified payload names.
fn fetch_named(receiver: &Receiver, body: &[u8]) -> Result<Response, Refused> {
    let payload: Value = serde_json::from_slice(body).map_err(Refused::NotJson)?;
    let repositories = repository::named_in(&payload);
    if repositories.is_empty() {
        return Err(Refused::NoRepository);
    }
    let remotes: usize = repositories
        .iter()
        .map(|repository| receiver.sources.pushed(repository))
        .sum();
    tracing::info!(?repositories, remotes, "push received");
    Ok((
        StatusCode::ACCEPTED,
        Json(json!({"repositories": repositories, "remotes": remotes})),
    )
        .into_response())
}

/// The body of a push that proves the secret. What the headers alone can tell is checked
/// before anything is read, then the body under a short deadline, then the signature: a
/// sender without the secret never takes a slot.
async fn authenticated(
    forge: Forge,
    headers: &HeaderMap,
    body: Body,
    secret: &[u8],
) -> Result<axum::body::Bytes, Refused> {
    verify::precheck(forge, headers, secret)?;
    let body = read_payload(body).await?;
    verify::verify(forge, headers, &body, secret)?;
    Ok(body)
}

/// The delivery's ID, as each forge names it (a replay of a signed delivery carries the
/// same one).
fn delivery_id(headers: &HeaderMap) -> Option<&str> {
    [
        "x-github-delivery",
        "x-gitea-delivery",
        "x-gitlab-event-uuid",
        "x-delivery-id",
    ]
    .iter()
    .find_map(|name| headers.get(*name)?.to_str().ok())
    .map(str::trim)
    .filter(|id| !id.is_empty() && id.len() <= 128)
}

impl Receiver {
    /// Whether `delivery` was seen within the replay window; notes it as seen now if not.
    fn replayed(&self, delivery: &str) -> bool {
        let now = Instant::now();
        if let Some(seen) = self.deliveries.get(&delivery.to_owned())
            && now.saturating_duration_since(seen) < REPLAY_WINDOW
        {
            return true;
        }
        self.deliveries.insert(delivery.to_owned(), now);
        false
    }
}

/// The payload, within its size limit and read timeout.
async fn read_payload(body: Body) -> Result<axum::body::Bytes, Refused> {
    match tokio::time::timeout(BODY_TIMEOUT, axum::body::to_bytes(body, MAX_BODY_BYTES)).await {
        Ok(Ok(bytes)) => Ok(bytes),
        Ok(Err(_)) => Err(Refused::TooLarge),
        Err(_) => Err(Refused::Timeout),
    }
}
