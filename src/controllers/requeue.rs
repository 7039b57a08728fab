//! When Metacontroller should call a parent's sync again on its own (`resyncAfterSeconds`),
//! as a type (controller-rs's `Action` is the model).
//!
//! Two parties decide it, each about what it knows: a controller says how often its
//! parent wants polling ([`Requeue::after_seconds`] with the poll period, or
//! [`Requeue::AwaitChange`]); the server adds what the sources the answer read ask
//! ([`Requeue::for_sources`]): soon while a fetch it waits for runs, within the push
//! window while push receivers listen. The wire field is written once, from the sooner
//! of the two, when the answer is serialised.

use std::time::Duration;

use super::common::reading::SourceUse;
use crate::source::Refresh;

/// How soon to ask again while a fetch an answer waits for is still running.
pub const PENDING_RESYNC_SECONDS: u64 = 2;

/// When to sync a parent again unasked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Requeue {
    /// Only when something changes (a child, the parent, Metacontroller's own resync).
    AwaitChange,
    /// After this long (whole seconds on the wire, at least one).
    After(Duration),
}

impl Requeue {
    /// After `seconds` (0: only when something changes, as the wire reads a missing field).
    pub fn after_seconds(seconds: u64) -> Requeue {
        match seconds {
            0 => Requeue::AwaitChange,
            n => Requeue::After(Duration::from_secs(n)),
        }
    }

    /// The sooner of two.
    #[must_use]
    pub fn sooner(self, other: Requeue) -> Requeue {
        match (self, other) {
            (Requeue::After(a), Requeue::After(b)) => Requeue::After(a.min(b)),
            (Requeue::After(a), Requeue::AwaitChange)
            | (Requeue::AwaitChange, Requeue::After(a)) => Requeue::After(a),
            (Requeue::AwaitChange, Requeue::AwaitChange) => Requeue::AwaitChange,
        }
    }

    /// What the sources an answer used ask for: soon while one is pending (a fetch
    /// scheduled or running, this server's copy behind what runs, a "fetch now" not yet
    /// handled), else within the push window of any that has one.
    pub fn for_sources(used: &[SourceUse]) -> Requeue {
        used.iter().fold(Requeue::AwaitChange, |requeue, used| {
            let seen = used.seen.as_ref();
            let pending = seen.is_some_and(|seen| seen.pending)
                || used.interest.behind
                || used.token == Some(Refresh::Pending);
            let asked = if pending {
                Requeue::after_seconds(PENDING_RESYNC_SECONDS)
            } else {
                seen.and_then(|seen| seen.resync_within)
                    .map_or(Requeue::AwaitChange, Requeue::after_seconds)
            };
            requeue.sooner(asked)
        })
    }

    /// The wire's `resyncAfterSeconds` (None: the field is left out).
    pub fn seconds(self) -> Option<u64> {
        match self {
            Requeue::AwaitChange => None,
            Requeue::After(after) => Some(after.as_secs().max(1)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::{Interest, Location, Seen, SourceRequest};

    fn used(seen: Option<Seen>, behind: bool, token: Option<Refresh>) -> SourceUse {
        let request = SourceRequest {
            location: Location::Http {
                url: "https://config.example/app.env".to_owned(),
            },
            namespace: "team".to_owned(),
            credentials: None,
            tls: None,
        };
        let mut interest = Interest::keep(&request, Duration::from_secs(60));
        interest.behind = behind;
        SourceUse {
            interest,
            seen,
            token,
        }
    }

    fn seen(pending: bool, resync_within: Option<u64>) -> Option<Seen> {
        Some(Seen {
            revision: None,
            error: None,
            pending,
            resync_within,
            after_running: false,
        })
    }

    #[test]
    fn the_sooner_wins_and_zero_means_await_change() {
        let (ten, sixty) = (Requeue::after_seconds(10), Requeue::after_seconds(60));
        assert_eq!(ten.sooner(sixty), ten);
        assert_eq!(sixty.sooner(Requeue::AwaitChange), sixty);
        assert_eq!(Requeue::after_seconds(0), Requeue::AwaitChange);
        assert_eq!(Requeue::AwaitChange.seconds(), None);
        assert_eq!(sixty.seconds(), Some(60));
    }

    #[test]
    fn a_pending_source_asks_soon_and_a_push_window_within_it() {
        let soon = Requeue::after_seconds(PENDING_RESYNC_SECONDS);
        assert_eq!(Requeue::for_sources(&[]), Requeue::AwaitChange);
        assert_eq!(
            Requeue::for_sources(&[used(seen(false, None), false, None)]),
            Requeue::AwaitChange
        );
        assert_eq!(
            Requeue::for_sources(&[used(seen(true, None), false, None)]),
            soon
        );
        assert_eq!(
            Requeue::for_sources(&[used(seen(false, None), true, None)]),
            soon,
            "behind what runs"
        );
        assert_eq!(
            Requeue::for_sources(&[used(None, false, Some(Refresh::Pending))]),
            soon,
            "a fetch now not handled yet"
        );
        assert_eq!(
            Requeue::for_sources(&[used(None, false, Some(Refresh::Handled))]),
            Requeue::AwaitChange
        );
        assert_eq!(
            Requeue::for_sources(&[
                used(seen(false, Some(5)), false, None),
                used(seen(false, Some(30)), false, None)
            ]),
            Requeue::after_seconds(5)
        );
    }
}
