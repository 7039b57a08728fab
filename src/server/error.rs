//! Why a hook call got no answer: its status, reason and headers, answered through
//! [`crate::http_error`] (`{"error": "<sentence>", ...}`, which Metacontroller copies
//! into the parent's Warning event).

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use thiserror::Error;

use crate::error::HookError;
use crate::http_error::HttpError;

/// What stopped a call: the controller's reason, or the server's bounds.
#[derive(Debug, Error)]
#[allow(missing_docs)] // each variant is described by its #[error] message
pub enum CallError {
    #[error(transparent)]
    Hook(#[from] HookError),
    #[error("request body is larger than the limit of {limit} bytes")]
    TooLarge { limit: usize },
    #[error("too many hook calls in flight (limit {limit}); retry after {retry_after_seconds}s")]
    Overloaded {
        limit: usize,
        retry_after_seconds: u64,
    },
    #[error(
        "request bodies being read or answered hold the budget of {budget} bytes; retry after {retry_after_seconds}s"
    )]
    BodiesOverBudget {
        budget: usize,
        retry_after_seconds: u64,
    },
    #[error(
        "request bodies from this client being read or answered hold its share of {share} bytes; retry after {retry_after_seconds}s"
    )]
    ClientOverBudget {
        share: usize,
        retry_after_seconds: u64,
    },
    #[error("missing or wrong credentials")]
    Unauthorized,
    #[error("hook call did not finish within {deadline_ms} ms")]
    DeadlineExceeded { deadline_ms: u64 },
    /// The client did not deliver its whole body in time (a stalled or trickling sender).
    #[error("the request body did not arrive within {timeout_ms} ms")]
    SlowBody { timeout_ms: u64 },
}

impl CallError {
    /// Stable, low-cardinality label for the access line.
    pub fn reason(&self) -> &'static str {
        match self {
            CallError::Hook(error) => error.reason(),
            CallError::TooLarge { .. } => "TooLarge",
            CallError::Overloaded { .. } => "Overloaded",
            CallError::BodiesOverBudget { .. } => "BodiesOverBudget",
            CallError::ClientOverBudget { .. } => "ClientOverBudget",
            CallError::Unauthorized => "Unauthorized",
            CallError::DeadlineExceeded { .. } => "DeadlineExceeded",
            CallError::SlowBody { .. } => "SlowBody",
        }
    }

    /// The HTTP status the call is answered with.
    pub fn status_code(&self) -> StatusCode {
        match self {
            CallError::Hook(error) => error.status_code(),
            CallError::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            CallError::Overloaded { .. }
            | CallError::BodiesOverBudget { .. }
            | CallError::ClientOverBudget { .. } => StatusCode::TOO_MANY_REQUESTS,
            CallError::Unauthorized => StatusCode::UNAUTHORIZED,
            CallError::DeadlineExceeded { .. } => StatusCode::SERVICE_UNAVAILABLE,
            CallError::SlowBody { .. } => StatusCode::REQUEST_TIMEOUT,
        }
    }
}

impl HookError {
    /// The HTTP status a controller's error is answered with.
    pub fn status_code(&self) -> StatusCode {
        match self {
            HookError::BadRequest(_) => StatusCode::BAD_REQUEST,
            HookError::NotFound { .. } => StatusCode::NOT_FOUND,
            HookError::Saturated => StatusCode::SERVICE_UNAVAILABLE,
            HookError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

impl HttpError for HookError {
    fn status(&self) -> StatusCode {
        self.status_code()
    }

    fn reason(&self) -> &'static str {
        HookError::reason(self)
    }
}

impl IntoResponse for HookError {
    fn into_response(self) -> Response {
        CallError::Hook(self).into_response()
    }
}

impl HttpError for CallError {
    fn status(&self) -> StatusCode {
        self.status_code()
    }

    fn reason(&self) -> &'static str {
        CallError::reason(self)
    }

    // Metacontroller re-queues after Retry-After; without it, it retries at once.
    fn retry_after_seconds(&self) -> Option<u64> {
        match self {
            CallError::Overloaded {
                retry_after_seconds,
                ..
            }
            | CallError::BodiesOverBudget {
                retry_after_seconds,
                ..
            }
            | CallError::ClientOverBudget {
                retry_after_seconds,
                ..
            } => Some(*retry_after_seconds),
            _ => None,
        }
    }

    fn challenge(&self) -> Option<&'static str> {
        matches!(self, CallError::Unauthorized).then_some("Bearer realm=\"metahooks\"")
    }
}

impl IntoResponse for CallError {
    fn into_response(self) -> Response {
        crate::http_error::answer(&self)
    }
}
