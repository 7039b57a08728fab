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
    /// The body is not JSON, or is JSON that is not this hook's request.
    #[error(transparent)]
    BadRequest(#[from] BadRequest),
    #[error("no hook at {path}; this server has {hooks}")]
    NotFound { path: String, hooks: String },
    /// Every slot for heavy work stayed busy until the call's deadline.
    #[error(
        "every slot for validating large definitions stayed busy until the deadline; retry later"
    )]
    Saturated,
    /// A fault on our side.
    #[error(transparent)]
    Internal(#[from] Fault),
}

/// Why a body is not this hook's request.
#[derive(Debug, Error)]
pub enum BadRequest {
    /// The body could not be read.
    #[error("cannot read the request body: {0}")]
    Unreadable(String),
    /// JSON, but not a hook request; `at` is the JSON path of the problem, if known.
    #[error("request body is not a hook request{}", at_path(.at.as_deref(), .problem.as_deref()))]
    NotAHookRequest {
        /// Where (serde's path), when known.
        at: Option<String>,
        /// What is wrong there, in plain words.
        problem: Option<String>,
    },
    /// The request names no parent.
    #[error("request has no parent object: this does not look like a Metacontroller hook call")]
    NoParent,
    /// The parent is of a kind this hook does not serve.
    #[error(
        "/{controller}/{hook} answers for {} parents, and this call is for a {kind}: the controller registration points at the wrong hook URL",
        .expected.join(" or ")
    )]
    WrongParentKind {
        /// The controller called.
        controller: String,
        /// The hook called.
        hook: String,
        /// The kinds it serves.
        expected: Vec<&'static str>,
        /// The kind the call is for.
        kind: String,
    },
}

fn at_path(at: Option<&str>, problem: Option<&str>) -> String {
    match (at, problem) {
        (_, None) => String::new(),
        (Some(at), Some(problem)) => format!(": at {at}: {problem}"),
        (None, Some(problem)) => format!(": {problem}"),
    }
}

/// A fault on our side: what could not be built.
#[derive(Debug, Error)]
pub enum Fault {
    /// An object of ours did not serialise.
    #[error("cannot serialise {what}: {source}")]
    Serialise {
        /// What it was.
        what: &'static str,
        /// serde's error.
        source: serde_json::Error,
    },
    /// A status could not be written.
    #[error(transparent)]
    Status(#[from] crate::protocol::StatusError),
    /// A controller was handed another controller's request.
    #[error("a request was parsed for another kind of controller")]
    WrongController,
    /// The computation panicked (caught).
    #[error("the hook server hit an internal fault while computing the answer")]
    Panicked,
    /// A call reached the hook handler without what admission hands it (a router built
    /// without its layers).
    #[error("the hook server answered a call it had not admitted")]
    NotAdmitted,
}

impl Fault {
    /// `what` did not serialise.
    pub fn serialise(what: &'static str) -> impl FnOnce(serde_json::Error) -> HookError {
        move |source| HookError::Internal(Fault::Serialise { what, source })
    }
}

impl HookError {
    /// Stable, low-cardinality label for metrics and logs.
    pub fn reason(&self) -> &'static str {
        match self {
            HookError::BadRequest(_) => "BadRequest",
            HookError::NotFound { .. } => "NotFound",
            HookError::Saturated => "Saturated",
            HookError::Internal(_) => "Internal",
        }
    }
}

impl From<crate::protocol::StatusError> for HookError {
    fn from(error: crate::protocol::StatusError) -> HookError {
        HookError::Internal(Fault::Status(error))
    }
}
