//! The state machine driven without I/O: random interleavings of asks, job results,
//! pushes and clock ticks, checked against what a parent must be able to rely on.
//!
//! The clock moves by one microsecond per event and by whole seconds on a tick, so
//! every deadline (poll intervals, the push spacing, forgetting) is crossed by a tick
//! alone: an answer that changes without a tick, a result or a job changed for another
//! reason, and that is what these tests look for.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use proptest::prelude::*;

use super::*;
use crate::fetcher::tests::request;
use crate::{Snapshot, worker::Fetched};

const URLS: [&str; 2] = ["https://git.example/a.git", "https://git.example/b.git"];

/// The parents: which request each asks for (repository, path) and how often.
const PARENTS: [(usize, &str, u64); 6] = [
    (0, "a.env", 60),
    (0, "a.env", 60),
    (0, "b.env", 120),
    (1, "a.env", 60),
    (1, "c.env", 120),
    (0, "c.env", 60),
];

fn limits() -> Limits {
    Limits {
        // Large enough that nothing is let go: letting go is tested on its own.
        snapshot_budget_bytes: u64::MAX / 4,
        cache_max_bytes: u64::MAX / 4,
        download_bytes: 1 << 20,
        push_resync_seconds: None,
        workers: 2,
        workers_per_namespace: 2,
    }
}

#[derive(Debug, Clone)]
enum Event {
    /// Parent `parent` syncs; with `apply`, it then runs the snapshot it was given.
    Ask {
        parent: usize,
        apply: bool,
        fetch_now: bool,
    },
    /// The `job`-th running job stores a result for the requests picked by `which`.
    Store {
        job: usize,
        which: u8,
        outcome: Outcome,
    },
    /// The `job`-th running job ends (`fails`: without resolving a commit).
    Finish { job: usize, fails: bool },
    /// A push receiver hears of repository `repo`.
    Push { repo: usize },
    /// The `timer`-th push timer fires, if its wait has passed.
    PushDue { timer: usize },
    /// Time passes.
    Tick { seconds: u64 },
}

#[derive(Debug, Clone, Copy)]
enum Outcome {
    Fresh,
    Unchanged,
    Failed,
}

fn event() -> impl Strategy<Value = Event> {
    prop_oneof![
        4 => (0..PARENTS.len(), any::<bool>(), prop::bool::weighted(0.1)).prop_map(
            |(parent, apply, fetch_now)| Event::Ask {
                parent,
                apply,
                fetch_now
            }
        ),
        2 => (0..3usize, any::<u8>(), prop_oneof![
            Just(Outcome::Fresh),
            Just(Outcome::Unchanged),
            Just(Outcome::Failed)
        ])
            .prop_map(|(job, which, outcome)| Event::Store { job, which, outcome }),
        2 => (0..3usize, prop::bool::weighted(0.2))
            .prop_map(|(job, fails)| Event::Finish { job, fails }),
        1 => (0..URLS.len()).prop_map(|repo| Event::Push { repo }),
        1 => (0..3usize).prop_map(|timer| Event::PushDue { timer }),
        1 => (0..=2u64).prop_map(|seconds| Event::Tick { seconds }),
    ]
}

/// An answer as a parent sees it.
#[derive(Debug, Clone, PartialEq)]
struct Seen {
    revision: Option<String>,
    error: Option<String>,
    pending: bool,
    after_running: bool,
}

impl Seen {
    fn of(state: &SourceState) -> Seen {
        Seen {
            revision: state.snapshot.as_ref().map(|s| s.revision.to_string()),
            error: state.error.as_ref().map(ToString::to_string),
            pending: state.pending,
            after_running: state.after_running,
        }
    }
}

/// What happened since a question was last answered.
#[derive(Debug, Default, Clone, Copy)]
struct Since {
    stored: bool,
    finished: bool,
    job_started: bool,
    pushed: bool,
    ticked: bool,
}

/// One question a parent asks: its request, interval and running revision.
type Question = (SourceKey, u64, Option<Revision>);

struct Running {
    plan: JobPlan,
    stored: HashSet<SourceKey>,
}

struct World {
    state: State,
    now: Instant,
    jobs: Vec<Running>,
    timers: Vec<(RemoteKey, Instant)>,
    running: [Option<Revision>; PARENTS.len()],
    answers: HashMap<Question, (Seen, Since)>,
    commits: u64,
}

impl World {
    fn new() -> World {
        World {
            state: State::new(limits(), 0),
            now: Instant::now(),
            jobs: Vec::new(),
            timers: Vec::new(),
            running: Default::default(),
            answers: HashMap::new(),
            commits: 0,
        }
    }

    fn parent(index: usize) -> (SourceRequest, Duration) {
        let (repo, path, interval) = PARENTS[index];
        (request(URLS[repo], path), Duration::from_secs(interval))
    }

    /// Notes `what` for every question about `remote` (every remote when None).
    fn happened(&mut self, remote: Option<&RemoteKey>, what: impl Fn(&mut Since, &SourceKey)) {
        for ((key, _, _), (_, since)) in &mut self.answers {
            if remote.is_none_or(|r| *r == key.remote) {
                what(since, key);
            }
        }
    }

    fn take_effects(&mut self, effects: Effects) {
        for plan in effects.jobs {
            let remote = plan.remote_key.clone();
            // A job that only reads new paths changes nothing for a request with a
            // snapshot.
            let shown: HashSet<SourceKey> = self
                .state
                .snapshots
                .iter()
                .filter(|(_, entry)| entry.snapshot().is_some())
                .map(|(key, _)| key.clone())
                .collect();
            let network = plan.use_network;
            self.happened(Some(&remote), |since, key| {
                since.job_started |= network || !shown.contains(key);
            });
            self.jobs.push(Running {
                plan,
                stored: HashSet::new(),
            });
        }
        for (remote, wait) in effects.push_timers {
            self.timers.push((remote, self.now + wait));
        }
        assert_eq!(effects.let_go, 0, "nothing is let go under this budget");
    }

    fn step(&mut self, event: &Event) -> Result<(), TestCaseError> {
        self.now += Duration::from_micros(1);
        let mut effects = Effects::default();
        match event {
            Event::Ask {
                parent,
                apply,
                fetch_now,
            } => self.ask(*parent, *apply, *fetch_now)?,
            Event::Store {
                job,
                which,
                outcome,
            } => {
                let Some(index) = pick(self.jobs.len(), *job) else {
                    return Ok(());
                };
                let results = self.results(index, *which, *outcome);
                let running = &mut self.jobs[index];
                running
                    .stored
                    .extend(results.iter().map(|(k, _)| k.clone()));
                let (remote, job) = (running.plan.remote_key.clone(), running.plan.job);
                let keys: Vec<SourceKey> = results.iter().map(|(k, _)| k.clone()).collect();
                let commit_from = running.plan.commit_from;
                self.state
                    .stored(&remote, job, commit_from, results, self.now, &mut effects);
                self.happened(None, |since, key| {
                    since.stored |= keys.contains(key);
                });
            }
            Event::Finish { job, fails } => {
                let Some(index) = pick(self.jobs.len(), *job) else {
                    return Ok(());
                };
                let running = self.jobs.remove(index);
                let plan = running.plan;
                let resolved = if *fails { None } else { self.resolves(&plan) };
                self.state.finished(ended(&plan, resolved));
                self.happened(Some(&plan.remote_key), |since, _| since.finished = true);
            }
            Event::Push { repo } => {
                let Some(repository) = crate::repository::normalise(URLS[*repo]) else {
                    return Err(TestCaseError::fail("test URLs normalise"));
                };
                self.state.push(&repository, self.now, &mut effects);
                let remotes: Vec<RemoteKey> = self
                    .state
                    .remotes
                    .keys()
                    .filter(|k| self.state.remotes[*k].is_of(&repository))
                    .cloned()
                    .collect();
                for remote in remotes {
                    self.happened(Some(&remote), |since, _| since.pushed = true);
                }
            }
            Event::PushDue { timer } => {
                let Some(index) = pick(self.timers.len(), *timer) else {
                    return Ok(());
                };
                if self.timers[index].1 > self.now {
                    return Ok(());
                }
                let (remote, _) = self.timers.remove(index);
                self.state.push_due(&remote, self.now, &mut effects);
                self.happened(Some(&remote), |since, _| since.pushed = true);
            }
            Event::Tick { seconds } => {
                self.now += Duration::from_secs(*seconds);
                if *seconds > 0 {
                    self.happened(None, |since, _| since.ticked = true);
                }
            }
        }
        self.take_effects(effects);
        Ok(())
    }

    /// What the `index`-th job brings for the requests `which` picks among those it was
    /// started for and has not stored yet.
    fn results(&mut self, index: usize, which: u8, outcome: Outcome) -> Vec<(SourceKey, Fetched)> {
        let running = &self.jobs[index];
        let mut results = Vec::new();
        for (bit, request) in running.plan.requests.iter().enumerate() {
            let key = request.key();
            if which & (1 << (bit % 8)) == 0 || running.stored.contains(&key) {
                continue;
            }
            let fetched = match outcome {
                // "Unchanged" only for what the job was told the request has.
                Outcome::Unchanged if running.plan.current.contains_key(&key) => Fetched::Unchanged,
                Outcome::Failed => Fetched::Failed(FetchError::HostRefused {
                    host: "git.example".into(),
                    why: format!("attempt {}", self.commits),
                }),
                Outcome::Fresh | Outcome::Unchanged => {
                    self.commits += 1;
                    Fetched::Fresh(snapshot(self.commits))
                }
            };
            results.push((key, fetched));
        }
        results
    }

    /// Parent `parent` syncs: its answer is read, then its ask recorded, as a hook call
    /// does; both answers must agree, and agree with the last answer to the same question
    /// unless something that may change it happened since.
    fn ask(&mut self, parent: usize, apply: bool, fetch_now: bool) -> Result<(), TestCaseError> {
        let (request, interval) = World::parent(parent);
        let running = self.running[parent].clone();
        let before = Seen::of(
            &self
                .state
                .answer(&request, self.now, interval, running.as_ref()),
        );
        let question: Question = (request.key(), interval.as_secs(), running.clone());
        if let Some((last, since)) = self.answers.get(&question) {
            check_unchanged_but_for(last, &before, since)?;
        }
        let wanted = Wanted {
            request: request.clone(),
            interval,
            running: running.clone(),
            fetch_now: fetch_now.then(|| format!("token-{}", self.commits)),
            parent: Some(Arc::from(format!("team-a/parent-{parent}"))),
        };
        let mut effects = Effects::default();
        self.state.want(&wanted, self.now, &mut effects);
        self.take_effects(effects);
        let after = Seen::of(
            &self
                .state
                .answer(&request, self.now, interval, running.as_ref()),
        );
        // A "fetch now" is answered by its token's state, not by this answer: the fetch
        // it starts may make the answer pending.
        let expected = Seen {
            pending: before.pending || (fetch_now && after.pending),
            ..before.clone()
        };
        prop_assert_eq!(
            &expected,
            &after,
            "recording parent {}'s ask changed its own answer",
            parent
        );
        self.answers
            .insert(question, (after.clone(), Since::default()));
        if apply && let Some(revision) = after.revision {
            self.running[parent] = Some(Revision::new(revision));
        }
        Ok(())
    }

    /// The commit `plan`'s job resolves when it succeeds: a new one from the network, else
    /// the one it read.
    fn resolves(&mut self, plan: &JobPlan) -> Option<git::Resolved> {
        if plan.use_network {
            self.commits += 1;
            Some(resolved(self.commits))
        } else {
            plan.resolved.clone()
        }
    }

    /// Runs every job to its end, storing a fresh result for each of its requests, and
    /// asks again for every parent, until no job starts (time stands still).
    fn settle(&mut self) -> Result<(), TestCaseError> {
        for _round in 0..4 {
            while let Some(running) = self.jobs.pop() {
                self.now += Duration::from_micros(1);
                let plan = running.plan;
                let mut effects = Effects::default();
                let results: Vec<(SourceKey, Fetched)> = plan
                    .requests
                    .iter()
                    .map(|r| r.key())
                    .filter(|k| !running.stored.contains(k))
                    .map(|k| {
                        self.commits += 1;
                        (k, Fetched::Fresh(snapshot(self.commits)))
                    })
                    .collect();
                self.state.stored(
                    &plan.remote_key,
                    plan.job,
                    plan.commit_from,
                    results,
                    self.now,
                    &mut effects,
                );
                let resolved = self.resolves(&plan);
                self.state.finished(ended(&plan, resolved));
                self.take_effects(effects);
            }
            for parent in 0..PARENTS.len() {
                self.now += Duration::from_micros(1);
                let (request, interval) = World::parent(parent);
                let wanted = Wanted {
                    request,
                    interval,
                    running: self.running[parent].clone(),
                    fetch_now: None,
                    parent: None,
                };
                let mut effects = Effects::default();
                self.state.want(&wanted, self.now, &mut effects);
                self.take_effects(effects);
            }
            if self.jobs.is_empty() {
                break;
            }
        }
        prop_assert!(
            self.jobs.is_empty(),
            "jobs keep starting with time standing still"
        );
        for parent in 0..PARENTS.len() {
            let (request, interval) = World::parent(parent);
            let running = self.running[parent].as_ref();
            let seen = Seen::of(&self.state.answer(&request, self.now, interval, running));
            prop_assert!(
                !seen.pending && (seen.revision.is_some() || seen.error.is_some()),
                "parent {} is left {:?} once every job has ended",
                parent,
                seen
            );
        }
        Ok(())
    }
}

/// How `plan`'s job ends, having resolved `resolved`.
fn ended(plan: &JobPlan, resolved: Option<git::Resolved>) -> Ended {
    Ended {
        remote_key: plan.remote_key.clone(),
        job: plan.job,
        resolved,
        network: plan.use_network,
        commit_from: plan.commit_from,
        went_to_network: plan.use_network,
    }
}

/// The `n`-th of `len` things, wrapping; none when there are none.
fn pick(len: usize, n: usize) -> Option<usize> {
    (len != 0).then(|| n % len)
}

fn snapshot(n: u64) -> Snapshot {
    Snapshot {
        revision: Revision::new(format!("main@sha1:{n:040x}")),
        files: BTreeMap::new(),
        single_file: true,
        made_at: None,
        signed_by: Vec::new(),
        derived: Default::default(),
    }
}

fn resolved(n: u64) -> git::Resolved {
    git::Resolved {
        repo_dir: PathBuf::from("/cache/git/example"),
        commit: format!("{n:040x}"),
        display_ref: "main".to_owned(),
        tag: None,
        downloaded: false,
        received_bytes: 0,
    }
}

/// An answer to a question asked before may differ only in what the events since can
/// change: content and error only by a stored result; "pending" ends only by a stored
/// result or a job's end, and begins only when a job starts, a push or "fetch now" asks,
/// time passes, or a job ends (what a push or the time asked for while it ran is due
/// then).
fn check_unchanged_but_for(last: &Seen, now: &Seen, since: &Since) -> Result<(), TestCaseError> {
    if !since.stored {
        prop_assert_eq!(
            &last.revision,
            &now.revision,
            "the snapshot changed, with no result stored ({:?})",
            since
        );
        prop_assert_eq!(
            &last.error,
            &now.error,
            "the error changed, with no result stored ({:?})",
            since
        );
        prop_assert_eq!(
            last.after_running,
            now.after_running,
            "after_running changed, with no result stored ({:?})",
            since
        );
    }
    if last.pending && !now.pending {
        prop_assert!(
            since.stored || since.finished,
            "pending ended with no result stored nor job ended ({:?})",
            since
        );
    }
    if !last.pending && now.pending {
        prop_assert!(
            since.job_started || since.pushed || since.ticked || since.finished,
            "pending began with no job started or ended, no push and no time passing ({:?})",
            since
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 512,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn identical_questions_get_identical_answers_unless_a_result_changed(
        events in prop::collection::vec(event(), 1..60)
    ) {
        let mut world = World::new();
        for event in &events {
            world.step(event)?;
        }
        world.settle()?;
    }
}

/// A job asking the remote is awaited by every request until it has stored that
/// request's result; a job that only reads new paths is awaited only by requests with
/// no snapshot to show.
#[test]
fn a_running_job_is_awaited_until_it_has_stored_this_requests_result() {
    let mut state = State::new(limits(), 0);
    let now = Instant::now();
    let hour = Duration::from_secs(3600);
    let [a, b, c] = ["a.env", "b.env", "c.env"].map(|path| request(URLS[0], path));
    let ask = |state: &mut State, request: &SourceRequest, now: Instant| {
        let mut effects = Effects::default();
        let wanted = Wanted {
            request: request.clone(),
            interval: hour,
            running: None,
            fetch_now: None,
            parent: None,
        };
        state.want(&wanted, now, &mut effects);
        effects.jobs
    };
    let jobs = ask(&mut state, &a, now);
    let [fetch] = jobs.as_slice() else {
        panic!("one network job, got {}", jobs.len());
    };
    assert!(fetch.use_network);
    assert!(state.answer(&a, now, hour, None).pending);
    // Asked while the job runs, and not in its plan: awaited too, then read.
    assert!(ask(&mut state, &c, now).is_empty());
    let mut effects = Effects::default();
    let failed = Fetched::Failed(FetchError::HostRefused {
        host: "git.example".into(),
        why: "test".into(),
    });
    state.stored(
        &fetch.remote_key,
        fetch.job,
        fetch.commit_from,
        vec![(a.key(), failed)],
        now,
        &mut effects,
    );
    // The failure is in; the job has yet to end.
    let answer = state.answer(&a, now, hour, None);
    assert!(!answer.pending && answer.error.is_some(), "{answer:?}");
    assert!(state.answer(&c, now, hour, None).pending);
    state.finished(ended(fetch, Some(resolved(1))));
    // c was never read: a job reads it from the commit now here, without the network.
    let jobs = ask(&mut state, &c, now);
    let [read] = jobs.as_slice() else {
        panic!("one reading job, got {}", jobs.len());
    };
    assert!(!read.use_network);
    state.stored(
        &read.remote_key,
        read.job,
        read.commit_from,
        vec![(c.key(), Fetched::Fresh(snapshot(2)))],
        now,
        &mut effects,
    );
    state.finished(ended(read, read.resolved.clone()));
    // A new path b: read by a job of its own, awaited by b, and by a, which has nothing
    // to show but an error the read may replace; not by c, which has its snapshot.
    let jobs = ask(&mut state, &b, now);
    let [read] = jobs.as_slice() else {
        panic!("one reading job, got {}", jobs.len());
    };
    assert!(!read.use_network);
    assert!(state.answer(&b, now, hour, None).pending);
    assert!(state.answer(&a, now, hour, None).pending);
    assert!(!state.answer(&c, now, hour, None).pending);
}
