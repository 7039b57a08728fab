//! How much work a sync may do, for a controller that implements
//! [`crate::controllers::CompositeHooks::try_cached`]: the same answer code runs with
//! [`Effort::CachedOnly`] on an async worker and stops ([`Stop::NeedsSlowWork`]) where it
//! would have to do slow work, or with [`Effort::Full`] where slow work may run (a
//! compute thread, or a task of its own when the work depends on a small request alone).

use serde_json::Value;

use super::refresh;
use crate::error::HookError;
use crate::protocol::CompositeResponse;

/// What a controller's answer function looks like: the effort allowed, and the
/// "fetch now" value it handled.
pub trait Answer: FnOnce(Effort, &mut refresh::Outcome) -> Result<CompositeResponse, Stop> {}

impl<F> Answer for F where
    F: FnOnce(Effort, &mut refresh::Outcome) -> Result<CompositeResponse, Stop>
{
}

/// `answer` at full effort, with the handled "fetch now" value recorded: a sync.
///
/// # Errors
/// As `answer`.
pub fn full_sync(parent: &Value, answer: impl Answer) -> Result<CompositeResponse, HookError> {
    full(refresh::recording(parent, |asked| {
        answer(Effort::Full, asked)
    }))
}

/// `answer` from what is remembered only, with the handled "fetch now" value recorded:
/// a `try_cached`.
pub fn cached_sync(
    parent: &Value,
    answer: impl Answer,
) -> Option<Result<CompositeResponse, HookError>> {
    cached(refresh::recording(parent, |asked| {
        answer(Effort::CachedOnly, asked)
    }))
}

/// How much work a call may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effort {
    /// Only what is remembered: the call is tried on an async worker.
    CachedOnly,
    /// Whatever the answer takes (on a compute thread, or outside a server).
    Full,
}

/// Why no answer was made.
#[derive(Debug)]
pub enum Stop {
    /// The call may only use what is remembered, and something is not worked out yet
    /// (a definition not validated, a snapshot not converted).
    NeedsSlowWork,
    /// No complete answer can be built.
    Failed(HookError),
}

impl From<HookError> for Stop {
    fn from(error: HookError) -> Stop {
        Stop::Failed(error)
    }
}

impl From<crate::protocol::StatusError> for Stop {
    fn from(error: crate::protocol::StatusError) -> Stop {
        Stop::Failed(error.into())
    }
}

/// A full sync's answer: with [`Effort::Full`] nothing stops for slow work, so a
/// `NeedsSlowWork` here is a bug, reported as an internal error rather than a panic.
fn full(answered: Result<CompositeResponse, Stop>) -> Result<CompositeResponse, HookError> {
    answered.map_err(|stop| match stop {
        Stop::Failed(error) => error,
        Stop::NeedsSlowWork => HookError::Internal(
            "a full sync stopped for slow work; this is a bug in metahooks".to_owned(),
        ),
    })
}

/// A cached-only attempt's answer: None when it stopped for slow work.
fn cached(
    answered: Result<CompositeResponse, Stop>,
) -> Option<Result<CompositeResponse, HookError>> {
    match answered {
        Ok(response) => Some(Ok(response)),
        Err(Stop::NeedsSlowWork) => None,
        Err(Stop::Failed(error)) => Some(Err(error)),
    }
}
