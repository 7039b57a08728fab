//! Why a hook call could not produce a complete answer.
//!
//! Every variant becomes a non-200 reply (see `server::error`), because answering 200
//! with a partial desired set makes Metacontroller delete children. Problems with the
//! user's CR are *not* errors: controllers report them as status conditions.

use thiserror::Error;

#[derive(Debug, Error)]
#[allow(missing_docs)] // each variant is described by its #[error] message
pub enum HookError {
    /// The body is not JSON, or is JSON that is not a hook request.
    #[error("{0}")]
    BadRequest(String),
    #[error("no hook at {path}; this server has {hooks}")]
    NotFound { path: String, hooks: String },
    #[error("request body is larger than the limit of {limit} bytes")]
    TooLarge { limit: usize },
    #[error("too many hook calls in flight (limit {limit}); retry after {retry_after_seconds}s")]
    Overloaded {
        limit: usize,
        retry_after_seconds: u64,
    },
    #[error("missing or wrong credentials")]
    Unauthorized,
    #[error("hook call did not finish within {deadline_ms} ms")]
    DeadlineExceeded { deadline_ms: u64 },
    /// Every slot for heavy work stayed busy until the call's deadline.
    #[error("{0}")]
    Saturated(String),
    /// The client did not deliver its whole body in time (a stalled or trickling sender).
    #[error("the request body did not arrive within {timeout_ms} ms")]
    SlowBody { timeout_ms: u64 },
    /// The call ran with [`crate::controllers::Context::cheap_only`] and needs work that
    /// may be slow (a definition not validated yet): the server runs it again on a
    /// compute thread. Never sent to a client.
    #[error("this call needs work that may be slow and was asked to do only cheap work")]
    NeedsComputeThread,
    /// A fault on our side; the message says what could not be built.
    #[error("{0}")]
    Internal(String),
}

impl HookError {
    /// Stable, low-cardinality label for metrics and logs.
    pub fn reason(&self) -> &'static str {
        match self {
            HookError::BadRequest(_) => "bad_request",
            HookError::NotFound { .. } => "not_found",
            HookError::TooLarge { .. } => "too_large",
            HookError::Overloaded { .. } => "overloaded",
            HookError::Unauthorized => "unauthorized",
            HookError::DeadlineExceeded { .. } => "deadline_exceeded",
            HookError::SlowBody { .. } => "slow_body",
            HookError::Saturated(_) => "saturated",
            HookError::NeedsComputeThread => "needs_blocking_pool",
            HookError::Internal(_) => "internal",
        }
    }
}
