//! How often sources are polled, and the `Fetched` condition: one rule for every
//! controller that reads a source. (When to sync again is `Requeue`'s.)

use super::conditions::{ConditionType, Decided};
use super::reading::Reads;
use crate::controllers::common::reason::Reason;
use crate::source::Revision;
use crate::source::{Location, SourceRequest, SourceState};

/// Poll period when none is given, in seconds.
pub const DEFAULT_INTERVAL_SECONDS: u64 = 60;
/// The shortest poll period allowed: faster polling costs remotes more than it gains.
pub const MIN_INTERVAL_SECONDS: u64 = 10;
/// The poll period a spec asks for, within the allowed range.
pub fn interval_seconds(asked: Option<u64>) -> u64 {
    asked
        .unwrap_or(DEFAULT_INTERVAL_SECONDS)
        .max(MIN_INTERVAL_SECONDS)
}

/// The `Fetched` condition for the engine's state of a source of `what` ("source",
/// "definition"); `running` names the revision still served when the latest fetch failed.
pub fn fetched_condition(state: &SourceState, what: &str, running: Option<&Revision>) -> Decided {
    match (&state.snapshot, &state.error) {
        (_, Some(error)) => {
            let message = match running {
                Some(revision) => format!("{error}; still running {revision}"),
                None => error.to_string(),
            };
            Decided::new(
                ConditionType::Fetched,
                false,
                Reason::Fetch(error.reason()),
                message,
            )
        }
        (Some(snapshot), None) => Decided::new(
            ConditionType::Fetched,
            true,
            Reason::Fetched,
            format!("fetched {}", snapshot.revision),
        ),
        // This server has no copy yet (it restarted, or let its copy go under the
        // snapshot budget) while what runs came from the source: nothing failed.
        (None, None) => match running {
            Some(revision) => Decided::new(
                ConditionType::Fetched,
                true,
                Reason::Fetched,
                format!("running {revision}; this server is reading its own copy of the {what}"),
            ),
            None => Decided::new(
                ConditionType::Fetched,
                false,
                Reason::FetchPending,
                format!("the first fetch of the {what} is in progress"),
            ),
        },
    }
}

/// The `Verified` condition of a source whose request asks for signatures (None when it
/// does not, or before anything was verified): false with the signature's reason while
/// the newest commit is refused (what runs keeps running), true naming who signed what
/// is served.
pub fn verified_condition(
    request: &SourceRequest,
    state: &SourceState,
    running: Option<&Revision>,
) -> Option<Decided> {
    let Location::Git {
        verify: Some(_), ..
    } = &request.location
    else {
        return None;
    };
    if let Some(error) = state.error.as_ref().filter(|e| e.is_signature()) {
        let message = match running {
            Some(revision) => format!("{error}; still running {revision}"),
            None => error.to_string(),
        };
        return Some(Decided::new(
            ConditionType::Verified,
            false,
            Reason::Fetch(error.reason()),
            message,
        ));
    }
    let snapshot = state.snapshot.as_deref()?;
    if snapshot.signed_by.is_empty() {
        return None;
    }
    let signers: Vec<String> = snapshot.signed_by.iter().map(ToString::to_string).collect();
    Some(Decided::new(
        ConditionType::Verified,
        true,
        Reason::Verified,
        signers.join("; "),
    ))
}

/// When what runs may be a newer copy of the same ref than this server's (another
/// replica fetched after it): refreshes this server's copy now rather than at the next
/// interval, and says so in the `Fetched` condition. `fetched` is the condition the
/// engine's state gives: when the latest fetch failed, this server cannot catch up, and
/// that condition (false, with the failure and what still runs) is the one to show.
pub fn refreshing(
    reads: &mut Reads<'_>,
    request: &SourceRequest,
    running: &str,
    fetched: Decided,
) -> Decided {
    reads.behind(request);
    if !fetched.status {
        return fetched;
    }
    Decided::new(
        ConditionType::Fetched,
        true,
        Reason::Fetched,
        format!("running {running}, fetched more recently than this server's copy; refreshing"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intervals_have_a_default_and_a_floor() {
        assert_eq!(interval_seconds(None), 60);
        assert_eq!(interval_seconds(Some(3)), 10);
        assert_eq!(interval_seconds(Some(300)), 300);
    }
}
