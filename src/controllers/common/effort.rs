//! How much work a sync may do, for a controller that implements
//! [`crate::controllers::CompositeHooks::try_cached`]: the same answer code runs with
//! [`Effort::CachedOnly`] on an async worker and stops ([`Stop::NeedsSlowWork`]) where it
//! would have to do slow work, or with [`Effort::Full`] on a compute thread.

use crate::error::HookError;
use crate::protocol::CompositeResponse;

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

/// A full sync's answer: with [`Effort::Full`] nothing stops for slow work, so a
/// `NeedsSlowWork` here is a bug, reported as an internal error rather than a panic.
pub fn full(answered: Result<CompositeResponse, Stop>) -> Result<CompositeResponse, HookError> {
    answered.map_err(|stop| match stop {
        Stop::Failed(error) => error,
        Stop::NeedsSlowWork => HookError::Internal(
            "a full sync stopped for slow work; this is a bug in metahooks".to_owned(),
        ),
    })
}

/// A cached-only attempt's answer: None when it stopped for slow work.
pub fn cached(
    answered: Result<CompositeResponse, Stop>,
) -> Option<Result<CompositeResponse, HookError>> {
    match answered {
        Ok(response) => Some(Ok(response)),
        Err(Stop::NeedsSlowWork) => None,
        Err(Stop::Failed(error)) => Some(Err(error)),
    }
}
