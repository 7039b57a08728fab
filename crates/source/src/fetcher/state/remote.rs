//! One remote as the writer keeps it: the requests that share its fetch, where its one
//! job stands ([`Phase`]), the commit it last resolved, and what asks for a fetch now
//! ("fetch now" tokens, pushes).

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::{Revision, SourceKey, SourceRequest, git};

use super::JobId;

/// The least time between two fetches of one remote that pushes and "fetch now" start:
/// a burst of them becomes one fetch now and one when the spacing has passed.
pub(in crate::fetcher) const PUSH_SPACING: Duration = Duration::from_secs(2);

/// How many intervals a request may go unasked before it is forgotten.
pub(super) const FORGET_AFTER_INTERVALS: u32 = 3;

/// Most parents remembered per remote (for the log line of a failed fetch only).
const PARENTS_REMEMBERED: usize = 10_000;

/// Most handled "fetch now" tokens remembered per remote.
const HANDLED_TOKENS: usize = 32;
/// Most "fetch now" tokens waiting for a remote's next job (each parent asking again
/// re-adds its own, so none is lost for good).
const MAX_WANTED_TOKENS: usize = 256;

/// Most running revisions remembered per remote (parents of one ref run one or two
/// revisions at a time; during a roll, a few). One forgotten costs a fetch, spaced like
/// pushes, before the copy counts as newer again.
const HEARD_REVISIONS: usize = 64;

/// Where a remote's one job stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) enum Phase {
    /// No job runs.
    #[default]
    Idle,
    /// A job asks the remote: every request's answer may change until it stores that
    /// request's result.
    Fetching(JobId),
    /// A job only reads new paths of the commit already here: it changes nothing for a
    /// request that has a snapshot.
    Reading(JobId),
}

impl Phase {
    /// The running job, if any.
    pub(super) fn job(self) -> Option<JobId> {
        match self {
            Phase::Idle => None,
            Phase::Fetching(job) | Phase::Reading(job) => Some(job),
        }
    }
}

/// A request and when a parent last asked for it: requests nobody asks for any more
/// (their parents were deleted or changed source) are forgotten.
pub(super) struct Asked {
    pub(super) request: SourceRequest,
    pub(super) last: Instant,
    pub(super) interval: Duration,
}

/// The commit a job resolved, so a new path can be read without the network.
#[derive(Clone)]
pub(super) struct Commit {
    pub(super) resolved: git::Resolved,
    /// When the network job that brought it started.
    pub(super) fetched_from: Option<Instant>,
}

#[derive(Default)]
pub(super) struct RemoteEntry {
    pub(super) requests: HashMap<SourceKey, Asked>,
    pub(super) phase: Phase,
    /// When the latest job that asked the remote started.
    pub(super) last_fetch: Option<Instant>,
    pub(super) commit: Option<Commit>,
    pub(super) refresh: RefreshTokens,
    /// A push named this remote's repository since its last fetch started.
    pub(super) pushed: bool,
    /// A timer will say when the push spacing has passed (one per remote).
    pub(super) push_timer: bool,
    /// Revisions parents said they run, each with when the engine first heard of it
    /// (the newest few): a copy fetched after that is at least as new.
    heard: VecDeque<(Revision, Instant)>,
    /// The parents (`namespace/name`) that asked for the remote, and when each last did
    /// (those silent for a few intervals are let go): who waits on its next fetch.
    parents: HashMap<Arc<str>, Instant>,
}

/// Where each "fetch now" token of a remote stands: asked for (the next job covers it),
/// covered by the running job, or handled (that job finished).
#[derive(Default)]
pub(super) struct RefreshTokens {
    wanted: BTreeSet<String>,
    started: BTreeSet<String>,
    handled: VecDeque<String>,
}

impl RefreshTokens {
    fn ask(&mut self, token: &str) {
        if self.wanted.len() < MAX_WANTED_TOKENS {
            self.wanted.insert(token.to_owned());
        }
    }

    /// A fetch starts: every token asked for so far is covered by it.
    fn fetch_started(&mut self) {
        self.started.append(&mut self.wanted);
    }

    /// The job ended (whatever its outcome: a failed fetch also answers "fetch now").
    fn job_ended(&mut self) {
        for token in std::mem::take(&mut self.started) {
            if self.handled.len() == HANDLED_TOKENS {
                self.handled.pop_front();
            }
            self.handled.push_back(token);
        }
    }

    pub(super) fn is_handled(&self, token: &str) -> bool {
        self.handled.iter().any(|t| t == token)
    }

    pub(super) fn is_started(&self, token: &str) -> bool {
        self.started.contains(token)
    }
}

impl RemoteEntry {
    /// Records that a parent asked for `request` at `now` (and for a fetch now, with
    /// `refresh`).
    pub(super) fn asked(
        &mut self,
        request: &SourceRequest,
        now: Instant,
        interval: Duration,
        refresh: Option<&str>,
    ) {
        let asked = Asked {
            request: request.clone(),
            last: now,
            interval,
        };
        self.requests.insert(request.key(), asked);
        if let Some(token) = refresh {
            self.refresh.ask(token);
        }
    }

    /// `parent` asked for this remote at `now`, polling every `interval`.
    pub(super) fn heard_from(&mut self, parent: &Arc<str>, now: Instant, interval: Duration) {
        self.parents.insert(parent.clone(), now);
        if self.parents.len() > PARENTS_REMEMBERED {
            let silent_for = interval * FORGET_AFTER_INTERVALS;
            self.parents
                .retain(|_, last| now.saturating_duration_since(*last) < silent_for);
        }
    }

    /// How many parents have asked for the remote lately.
    pub(super) fn waiting_parents(&self, now: Instant, interval: Duration) -> usize {
        let silent_for = interval * FORGET_AFTER_INTERVALS;
        self.parents
            .values()
            .filter(|last| now.saturating_duration_since(**last) < silent_for)
            .count()
    }

    /// A parent says it runs `running` now.
    pub(super) fn heard_running(&mut self, running: Option<&Revision>, now: Instant) {
        let Some(running) = running else { return };
        if self.heard.iter().any(|(revision, _)| revision == running) {
            return;
        }
        if self.heard.len() == HEARD_REVISIONS {
            self.heard.pop_front();
        }
        self.heard.push_back((running.clone(), now));
    }

    /// When the engine first heard that a parent runs `running`.
    pub(super) fn first_heard(&self, running: &Revision) -> Option<Instant> {
        self.heard
            .iter()
            .find(|(revision, _)| revision == running)
            .map(|(_, at)| *at)
    }

    /// Whether the remote is due a fetch at `now`: its interval has passed since the last
    /// one started, or a "fetch now" or a push asks and the push spacing has passed
    /// ("fetch now" and pushes are spaced like each other: however often a CR's
    /// annotation is edited or a forge calls, a remote is fetched at most once per
    /// spacing for them).
    pub(super) fn is_stale(&self, now: Instant, interval: Duration) -> bool {
        let since_fetch = |least: Duration| {
            self.last_fetch
                .is_none_or(|started| now.saturating_duration_since(started) >= least)
        };
        ((!self.refresh.wanted.is_empty() || self.pushed) && since_fetch(PUSH_SPACING))
            || since_fetch(interval)
    }

    /// How long until the push spacing has passed since the last fetch started.
    pub(super) fn push_wait(&self, now: Instant) -> Duration {
        self.last_fetch.map_or(Duration::ZERO, |started| {
            PUSH_SPACING.saturating_sub(now.saturating_duration_since(started))
        })
    }

    /// A job named `job` starts at `now`: over the network when `stale` or nothing was
    /// resolved yet, else reading the commit already here. Returns whether it asks the
    /// remote, and when the fetch whose commit it will read started.
    pub(super) fn job_starts(
        &mut self,
        job: JobId,
        now: Instant,
        stale: bool,
    ) -> (bool, Option<Instant>) {
        if stale {
            self.refresh.fetch_started();
            self.pushed = false;
        }
        match &self.commit {
            Some(commit) if !stale => {
                self.phase = Phase::Reading(job);
                (false, commit.fetched_from)
            }
            _ => {
                self.phase = Phase::Fetching(job);
                self.last_fetch = Some(now);
                (true, Some(now))
            }
        }
    }

    /// `job` ended, having resolved `resolved` (over the network when `network`, in a
    /// fetch started at `fetched_from`). Returns false when `job` is not the one running.
    pub(super) fn job_ended(
        &mut self,
        job: JobId,
        resolved: Option<git::Resolved>,
        network: bool,
        fetched_from: Option<Instant>,
    ) -> bool {
        if self.phase.job() != Some(job) {
            return false;
        }
        self.phase = Phase::Idle;
        self.refresh.job_ended();
        if let Some(resolved) = resolved {
            let fetched_from = if network {
                fetched_from
            } else {
                self.commit.as_ref().and_then(|c| c.fetched_from)
            };
            self.commit = Some(Commit {
                resolved,
                fetched_from,
            });
        }
        true
    }

    /// One of its requests, if any (they all name the same remote).
    pub(super) fn any_request(&self) -> Option<&Asked> {
        self.requests.values().next()
    }

    /// Whether the remote is a copy of `repository` (as a push names it).
    pub(super) fn is_of(&self, repository: &str) -> bool {
        self.any_request().is_some_and(|asked| {
            crate::repository::normalise(asked.request.location.url()).as_deref()
                == Some(repository)
        })
    }

    /// The shortest poll period of its requests.
    pub(super) fn shortest_interval(&self) -> Option<Duration> {
        self.requests.values().map(|asked| asked.interval).min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_parents_that_wait_on_a_remote_are_those_that_asked_lately() {
        let mut remote = RemoteEntry::default();
        let start = Instant::now();
        let minute = Duration::from_secs(60);
        let (a, b): (Arc<str>, Arc<str>) = ("team-a/web".into(), "team-b/api".into());
        remote.heard_from(&a, start, minute);
        remote.heard_from(&b, start, minute);
        remote.heard_from(&a, start + minute, minute);
        assert_eq!(remote.waiting_parents(start + minute, minute), 2);
        // b has been silent for three intervals; a asked again since.
        let later = start + minute * 3 + Duration::from_secs(1);
        assert_eq!(remote.waiting_parents(later, minute), 1);
    }

    #[test]
    fn a_push_makes_a_remote_due_once_the_spacing_has_passed() {
        let mut remote = RemoteEntry::default();
        let start = Instant::now();
        let hour = Duration::from_secs(3600);
        let (network, _) = remote.job_starts(JobId(1), start, true);
        assert!(
            network,
            "nothing resolved yet: the first job asks the remote"
        );
        assert!(!remote.is_stale(start, hour));
        remote.pushed = true;
        assert!(!remote.is_stale(start + Duration::from_secs(1), hour));
        assert!(remote.is_stale(start + PUSH_SPACING, hour));
        assert_eq!(
            remote.push_wait(start + Duration::from_secs(1)),
            Duration::from_secs(1)
        );
    }
}
