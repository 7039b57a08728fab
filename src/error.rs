//! Why a controller could not produce a complete answer.
//!
//! Every variant becomes a non-200 reply (see `server::error`), because answering 200
//! with a partial desired set makes Metacontroller delete children. Problems with the
//! user's CR are *not* errors: controllers report them as status conditions. What can go
//! wrong on the way to a controller (size, time, credentials, load) is the server's own
//! `CallError`.

use thiserror::Error;

#[derive(Debug, Error)]
#[allow(missing_docs)] // each variant is described by its #[error] message
pub enum HookError {
    /// The body is not JSON, or is JSON that is not a hook request.
    #[error("{0}")]
    BadRequest(String),
    #[error("no hook at {path}; this server has {hooks}")]
    NotFound { path: String, hooks: String },
    /// Every slot for heavy work stayed busy until the call's deadline.
    #[error("{0}")]
    Saturated(String),
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
            HookError::Saturated(_) => "saturated",
            HookError::Internal(_) => "internal",
        }
    }
}

impl From<crate::protocol::StatusError> for HookError {
    fn from(error: crate::protocol::StatusError) -> HookError {
        HookError::Internal(error.to_string())
    }
}
