//! The emulated cluster: objects, and Metacontroller's reconcile loop over them.
//!
//! - this module: the objects, the clock, rounds and convergence;
//! - `reconcile`: one parent's sync or finalize call, as Metacontroller makes it;
//! - `related`: the customize hook and the related objects it selects;
//! - `children`: applying an answer's children (or attachments);
//! - `status`: what an answer writes on its parent (status, a decorator's labels);
//! - `checks`: what Metacontroller refuses in an answer or a child;
//! - `claim`: adoption and release of children by the parent's selector;
//! - `kubelet`: the workload controllers and kubelet that make and run Pods.

mod checks;
mod children;
mod claim;
mod kubelet;
mod reconcile;
mod related;
mod rollout;
mod status;
mod store;
mod structural;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use futures_util::StreamExt;
use serde_json::Value;

use self::reconcile::{Answered, stable_answer};
use super::findings::{Finding, Origin, Problem, Rule, Subject};
use super::objects::matches_rule;
use super::objects::owner_uid;
use super::registration::{Kinds, Registration};
use super::transport::Transport;
use super::{Key, key_of};

/// Metacontroller's `--workers` default (pkg/cmd/metacontroller/main.go): syncs run at
/// once per controller.
pub const DEFAULT_WORKERS: usize = 5;

/// 429 answers in a row for one parent before they count as a finding.
const THROTTLED_CALLS_BEFORE_FINDING: u32 = 5;

/// A message for the test suite, which stops at the first problem.
pub type Violation = String;

/// Everything that happened in one round, for assertions and messages.
#[derive(Debug, Default, Clone)]
pub struct RoundReport {
    /// Objects an answer created.
    pub created: Vec<Key>,
    /// Objects whose applied content changed.
    pub updated: Vec<Key>,
    /// Objects deleted (dropped children, collected dependents, finalized parents).
    pub deleted: Vec<Key>,
    /// Parents whose status an answer changed.
    pub status_changed: Vec<Key>,
    /// Parents that asked to be synced again, and after how many seconds.
    pub resync_after: Vec<(Key, f64)>,
    /// Parents whose finalizer was removed.
    pub finalizers_removed: Vec<Key>,
    /// Parents whose hook answered 429: they are still to be synced.
    pub throttled: Vec<Key>,
    /// Parents whose status changed where the registration sets `ignoreStatusChanges`:
    /// written, but no cause for another sync.
    pub status_written_quietly: Vec<Key>,
    /// For objects updated or whose status changed, the JSON pointer of the first
    /// field that changed.
    pub changed_at: BTreeMap<Key, String>,
}

impl RoundReport {
    /// True when anything in the cluster changed this round.
    pub fn changed(&self) -> bool {
        !(self.created.is_empty()
            && self.updated.is_empty()
            && self.deleted.is_empty()
            && self.status_changed.is_empty()
            && self.throttled.is_empty())
    }
}

/// One hook call as the emulator made it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct CallRecord {
    /// The round the call was made in.
    pub round: usize,
    /// The controller's registration name.
    pub controller: String,
    /// `sync`, `finalize` or `customize`.
    pub hook: &'static str,
    /// `namespace/name` of the parent or decorated object.
    pub parent: String,
    /// The HTTP status of the answer.
    pub status: u16,
    /// Which replica answered (0 for one).
    pub replica: usize,
    /// How long the answer took, in milliseconds.
    pub millis: f64,
}

/// Metacontroller and an API server in one process: the objects, the registrations, and
/// the loop that calls their hooks and applies the answers.
pub struct Emulator {
    /// How hooks are reached: in-process replicas or HTTP base URLs.
    pub transport: Transport,
    /// The controllers in this cluster.
    pub registrations: Vec<Registration>,
    /// Plural resource names → kinds, for customize rules.
    pub kinds: Kinds,
    /// Every object, by (apiVersion, kind, namespace, name).
    pub objects: BTreeMap<Key, Value>,
    /// What each child was last applied as, for the 3-way merge.
    last_applied: BTreeMap<Key, Value>,
    /// Objects by the UID of their controlling owner, kept by `put` and `take`: finding a
    /// parent's children must not scan the whole cluster (tens of thousands of objects
    /// in the scale-out benchmark).
    by_owner: BTreeMap<String, BTreeSet<Key>>,
    /// Children whose last three-way merge changed nothing and that no write has
    /// touched since (`take` forgets them).
    settled: BTreeSet<Key>,
    /// Objects with no controlling owner, kept by `put` and `take`: the orphans a
    /// parent may adopt, found without reading the whole cluster for every parent.
    orphans: BTreeSet<Key>,
    /// For each child, its parent as it was when an answer last asked for the child
    /// (without status and server fields): a child left out while its parent is still
    /// the same, and then asked for again, is a [`Rule::ChildDropped`].
    desired_under: BTreeMap<Key, Identity>,
    /// Children an answer left out while their parent was unchanged, with that parent.
    dropped_under: BTreeMap<Key, Identity>,
    next_uid: u64,
    next_version: u64,
    /// Every hook call made.
    pub calls: Vec<CallRecord>,
    /// Metacontroller's customize cache: answers by (parent UID, generation), kept for
    /// `CUSTOMIZE_CACHE_TTL` of simulated time.
    customize_cache: BTreeMap<(String, String, i64), (Value, Duration)>,
    /// Simulated time since the emulator started (advanced by `advance`).
    pub clock: Duration,
    /// Each parent's sync goes to one replica (customize and the calls that check the
    /// answer is stable too), the next sync to the next replica.
    next_replica: usize,
    current_replica: usize,
    /// Metacontroller's `--apply-strategy`: client-side (the default, which records each
    /// child's last applied state in an annotation) or server-side apply (no annotation).
    pub server_side_apply: bool,
    /// Deployments and StatefulSets never report ready replicas (a stuck rollout).
    pub hold_unready: bool,
    /// Nodes DaemonSets run a Pod on.
    pub nodes: usize,
    /// The labels and annotations a decorator's latest answer set on each target.
    pub decorated: BTreeMap<Key, BTreeMap<String, String>>,
    /// Stop at the first problem (the test suite) or record it and go on (`emulate`).
    pub stop_at_first: bool,
    /// Problems seen so far (with `stop_at_first` off).
    pub findings: Vec<Finding>,
    /// Rounds run so far.
    pub rounds: usize,
    /// The last resyncAfterSeconds each parent asked for.
    pub resync_requests: BTreeMap<(String, Key), f64>,
    /// Calls in a row a parent's hook answered 429 (by registration and parent).
    throttled: BTreeMap<(String, Key), u32>,
    /// The Retry-After of the latest 429.
    last_retry_after: Option<f64>,
    /// Report unknown answer fields even where Metacontroller decodes loosely (v1 hooks),
    /// since it then drops them without a word.
    pub strict_everywhere: bool,
    /// Calls in flight at once per controller (Metacontroller's `--workers`).
    pub workers: usize,
    /// What each round changed, by round number.
    pub timeline: Vec<(usize, RoundReport)>,
    /// The last request each parent's hook was sent (a digest) and the answer taken:
    /// an identical request later is asked once, and its answer compared with that one.
    answered: BTreeMap<(String, Key), ([u8; 32], std::sync::Arc<str>)>,
    /// How long after a new answer the same request is sent again, to catch answers that
    /// drift with time (zero: not asked again). `emulate` waits a second by default.
    pub recheck_after: Duration,
    /// Where each input object was written (`apply_from`), for findings.
    pub origins: BTreeMap<Key, Origin>,
    /// Each parent's revisions under a rolling update strategy (latest first).
    revisions: BTreeMap<(String, Key), Vec<rollout::Revision>>,
    /// Parents with an unstable answer found: not asked again after a delay.
    unsteady: BTreeSet<(String, Key)>,
    /// Workloads whose Pods Pod Security admission refused in the last tick, and why.
    refused_pods: Vec<(Key, String)>,
    /// What the webhook client keeps with an ETag, by registration, hook and root
    /// object, with the simulated time it was kept at.
    etags: BTreeMap<(String, &'static str, Key), (reconcile::Tagged, Duration)>,
}

pub use metahooks_protocol::LAST_APPLIED_ANNOTATION;

/// How long Metacontroller keeps a customize answer (pkg/controller/common/customize:
/// a 20-minute cache keyed by parent UID and generation).
pub const CUSTOMIZE_CACHE_TTL: Duration = Duration::from_secs(20 * 60);

/// The instant simulated time starts at; timestamps in the cluster count from it.
pub const EPOCH: &str = "2026-01-01T00:00:00Z";

impl Emulator {
    /// An emulator calling the hooks of `registrations` over HTTP at `base_url`, that
    /// stops at the first problem.
    pub fn new(base_url: &str, registrations: Vec<Registration>) -> Emulator {
        Emulator::with_transport(Transport::http(vec![base_url.to_owned()]), registrations)
    }

    /// An emulator calling hooks through `transport`.
    pub fn with_transport(transport: Transport, registrations: Vec<Registration>) -> Emulator {
        Emulator {
            transport,
            registrations,
            kinds: Kinds::default(),
            objects: BTreeMap::new(),
            last_applied: BTreeMap::new(),
            by_owner: BTreeMap::new(),
            orphans: BTreeSet::new(),
            settled: BTreeSet::new(),
            desired_under: BTreeMap::new(),
            dropped_under: BTreeMap::new(),
            next_uid: 1,
            next_version: 1,
            calls: Vec::new(),
            customize_cache: BTreeMap::new(),
            clock: Duration::ZERO,
            server_side_apply: false,
            hold_unready: false,
            nodes: 1,
            decorated: BTreeMap::new(),
            stop_at_first: true,
            findings: Vec::new(),
            rounds: 0,
            resync_requests: BTreeMap::new(),
            throttled: BTreeMap::new(),
            last_retry_after: None,
            strict_everywhere: false,
            workers: DEFAULT_WORKERS,
            timeline: Vec::new(),
            refused_pods: Vec::new(),
            answered: BTreeMap::new(),
            recheck_after: Duration::ZERO,
            unsteady: BTreeSet::new(),
            revisions: BTreeMap::new(),
            origins: BTreeMap::new(),
            etags: BTreeMap::new(),
            next_replica: 0,
            current_replica: 0,
        }
    }

    /// Runs rounds (every controller, every parent, then one tick of fake workload
    /// progress, then any source fetches the hooks started) until nothing changes.
    /// Returns the rounds run. A round limit reached means a hot loop: with
    /// `stop_at_first` that is an error, otherwise it is recorded as a finding.
    ///
    /// # Errors
    /// With `stop_at_first`, the first problem seen.
    pub async fn converge(&mut self, max_rounds: usize) -> Result<usize, Violation> {
        let mut last = RoundReport::default();
        let mut status_changed_every_round = true;
        for round in 1..=max_rounds {
            let report = self.round().await?;
            let ticked = self.tick_workloads();
            for (key, message) in std::mem::take(&mut self.refused_pods) {
                self.record_about(Rule::PodSecurity, None, &key, None, message)?;
            }
            self.transport.settle_sources().await;
            if !report.changed() && !ticked {
                return Ok(round);
            }
            status_changed_every_round &= !report.status_changed.is_empty();
            last = report;
        }
        let (rule, message, subject) =
            no_steady_state(&last, max_rounds, status_changed_every_round);
        match subject {
            Some((key, field)) => self.record_about(rule, None, &key, field, message)?,
            None => self.record(rule, String::new(), message)?,
        }
        Ok(max_rounds)
    }

    /// One pass over every parent of every registration.
    ///
    /// # Errors
    /// With `stop_at_first`, the first problem seen.
    pub async fn round(&mut self) -> Result<RoundReport, Violation> {
        self.rounds += 1;
        let mut report = RoundReport::default();
        for registration in self.registrations.clone() {
            self.reconcile_parents(&registration, &mut report).await?;
        }
        self.timeline.push((self.rounds, report.clone()));
        Ok(report)
    }

    /// One controller's share of a round: every parent it selects is read, called and
    /// answered.
    async fn reconcile_parents(
        &mut self,
        registration: &Registration,
        report: &mut RoundReport,
    ) -> Result<(), Violation> {
        let parents: Vec<Key> = self
            .objects
            .iter()
            .filter(|(_, object)| self.selects(registration, object))
            .map(|(key, _)| key.clone())
            .collect();
        // Everything read from the cluster first, in order; then the calls, as
        // Metacontroller's workers make them, concurrently; then the answers
        // applied in order, so the result does not depend on which call came back
        // first.
        let mut steps = Vec::with_capacity(parents.len());
        for parent in parents {
            let step = self.prepare(registration, &parent).await;
            steps.push((parent, step));
        }
        let now = self.now();
        let transport = &self.transport;
        let mut answers: Vec<Option<Answered>> =
            futures_util::stream::iter(steps.iter().map(|(_, step)| async move {
                match step {
                    Ok(Some(prepared)) => Some(stable_answer(transport, prepared, now).await),
                    _ => None,
                }
            }))
            .buffered(self.workers.max(1))
            .collect()
            .await;
        self.ask_later(registration, &steps, &mut answers, now)
            .await;
        for ((parent, step), answered) in steps.into_iter().zip(answers) {
            let outcome = match (step, answered) {
                (Ok(Some(prepared)), Some(mut answered)) => {
                    self.record_calls(registration, &prepared, &answered);
                    if let Some(((rule, message), field)) = answered.unstable.take() {
                        self.unsteady
                            .insert((registration.name.clone(), parent.clone()));
                        self.record_about(rule, Some(&registration.name), &parent, field, message)?;
                    }
                    let older = std::mem::take(&mut answered.older);
                    answered.outcome.and_then(|response| {
                        self.conclude(registration, prepared, response, &older, report)
                    })
                }
                (Err(problem), _) => Err(problem),
                _ => Ok(()),
            };
            self.note_outcome(registration, &parent, outcome, report)?;
        }
        Ok(())
    }

    /// The new answers of a round asked for again after `recheck_after` (one wait for
    /// the whole round, the calls made by the workers), those that moved once more
    /// after another wait, and those that moved back once more after a third. A parent
    /// already found unstable is not asked again.
    async fn ask_later(
        &self,
        registration: &Registration,
        steps: &[(Key, Result<Option<reconcile::Prepared>, Problem>)],
        answers: &mut [Option<Answered>],
        now: jiff::Timestamp,
    ) {
        if self.recheck_after.is_zero() {
            return;
        }
        // A new answer; one that moved (confirmed); one that moved and came back.
        for confirming in [false, true, true] {
            let due: Vec<usize> = answers
                .iter()
                .enumerate()
                .filter(|(index, answered)| {
                    answered.as_ref().is_some_and(|a| {
                        a.outcome.is_ok()
                            && a.unstable.is_none()
                            && if confirming {
                                a.recheck.is_due()
                            } else {
                                a.fresh
                            }
                            && !self
                                .unsteady
                                .contains(&(registration.name.clone(), steps[*index].0.clone()))
                    })
                })
                .map(|(index, _)| index)
                .collect();
            if due.is_empty() {
                return;
            }
            tokio::time::sleep(self.recheck_after).await;
            let transport = &self.transport;
            let mut taken: Vec<(usize, Answered)> = due
                .iter()
                .filter_map(|&index| answers[index].take().map(|a| (index, a)))
                .collect();
            futures_util::stream::iter(taken.iter_mut().map(|(index, answered)| {
                let step = &steps[*index].1;
                async move {
                    if let Ok(Some(prepared)) = step {
                        reconcile::ask_later(transport, prepared, now, answered).await;
                    }
                }
            }))
            .buffer_unordered(self.workers.max(1))
            .collect::<Vec<()>>()
            .await;
            for (index, answered) in taken {
                answers[index] = Some(answered);
            }
        }
    }

    /// A parent's outcome: a problem becomes a finding, except throttling, which is a
    /// requeue after its Retry-After until it has gone on for too many calls.
    fn note_outcome(
        &mut self,
        registration: &Registration,
        parent: &Key,
        outcome: Result<(), Problem>,
        report: &mut RoundReport,
    ) -> Result<(), Violation> {
        let throttle_key = (registration.name.clone(), parent.clone());
        let Err((rule, message)) = outcome else {
            self.throttled.remove(&throttle_key);
            return Ok(());
        };
        let rule = if rule == Rule::Throttled {
            let times = self.throttled.entry(throttle_key.clone()).or_default();
            *times += 1;
            let seconds = self.last_retry_after.take().unwrap_or(0.0);
            self.resync_requests.insert(throttle_key, seconds.max(1.0));
            report.throttled.push(parent.clone());
            if *times < THROTTLED_CALLS_BEFORE_FINDING {
                return Ok(());
            }
            Rule::NonOkAnswer
        } else {
            rule
        };
        self.record_about(rule, Some(&registration.name), parent, None, message)
    }

    /// Records a finding (once per rule and subject), or with `stop_at_first` returns it
    /// as the error.
    ///
    /// # Errors
    /// With `stop_at_first`, the finding itself.
    pub fn record(
        &mut self,
        rule: Rule,
        subject: String,
        message: String,
    ) -> Result<(), Violation> {
        self.record_finding(Finding {
            rule,
            subject,
            message,
            round: self.rounds,
            about: None,
        })
    }

    /// Records a finding about one object (a parent, for a controller's hook), with
    /// the field concerned where one is known and where the object was written.
    ///
    /// # Errors
    /// With `stop_at_first`, the finding itself.
    pub fn record_about(
        &mut self,
        rule: Rule,
        controller: Option<&str>,
        key: &Key,
        field: Option<String>,
        message: String,
    ) -> Result<(), Violation> {
        let subject = match controller {
            Some(controller) => format!("{controller} {}", describe(key)),
            None => describe(key),
        };
        let about = Subject {
            controller: controller.map(str::to_owned),
            api_version: key.0.clone(),
            kind: key.1.clone(),
            namespace: key.2.clone(),
            name: key.3.clone(),
            field,
            origin: self.origin_of(key),
        };
        self.record_finding(Finding {
            rule,
            subject,
            message,
            round: self.rounds,
            about: Some(about),
        })
    }

    /// Where an object was written in the input: its own document, or for an object an
    /// answer made, its controlling owner's (the parent whose hook wrote it).
    fn origin_of(&self, key: &Key) -> Option<Origin> {
        let mut key = key.clone();
        for _ in 0..8 {
            if let Some(origin) = self.origins.get(&key) {
                return Some(origin.clone());
            }
            let owner = self.objects.get(&key).and_then(owner_uid)?;
            key = self
                .objects
                .iter()
                .find(|(_, o)| o.pointer("/metadata/uid").and_then(Value::as_str) == Some(&owner))
                .map(|(k, _)| k.clone())?;
        }
        None
    }

    /// Applies an input object, remembering where it was written for findings.
    pub fn apply_from(&mut self, object: Value, origin: Origin) -> Key {
        let key = self.apply(object);
        self.origins.insert(key.clone(), origin);
        key
    }

    fn record_finding(&mut self, finding: Finding) -> Result<(), Violation> {
        if self.stop_at_first {
            return Err(finding.to_string());
        }
        if !self
            .findings
            .iter()
            .any(|f| f.rule == finding.rule && f.subject == finding.subject)
        {
            self.findings.push(finding);
        }
        Ok(())
    }

    pub(crate) fn selects(&self, registration: &Registration, object: &Value) -> bool {
        let (api_version, kind, ..) = key_of(object);
        let finalizer = registration.finalizer();
        let carries_finalizer = object
            .pointer("/metadata/finalizers")
            .and_then(Value::as_array)
            .is_some_and(|f| f.iter().any(|x| x.as_str() == Some(finalizer.as_str())));
        registration.parents.iter().any(|(v, k, rule)| {
            *v == api_version && *k == kind && (carries_finalizer || matches_rule(rule, object))
        })
    }
}

/// `Kind namespace/name` (or `Kind name` when cluster-scoped), for messages.
pub fn describe(key: &Key) -> String {
    if key.2.is_empty() {
        format!("{} {}", key.1, key.3)
    } else {
        format!("{} {}/{}", key.1, key.2, key.3)
    }
}

/// A parent as the user wrote it: without status and the fields the API server and
/// Metacontroller change on their own (versions, finalizers, the deletion mark).
/// A digest of the parent as it was when an answer asked for its children: a hash, not
/// a copy, since every child of every parent keeps one.
type Identity = [u8; 32];

fn parent_identity(parent: &Value) -> Identity {
    let mut identity = parent.clone();
    if let Some(map) = identity.as_object_mut() {
        map.remove("status");
    }
    if let Some(meta) = identity.get_mut("metadata").and_then(Value::as_object_mut) {
        for field in [
            "resourceVersion",
            "finalizers",
            "deletionTimestamp",
            "managedFields",
        ] {
            meta.remove(field);
        }
    }
    *blake3::hash(identity.to_string().as_bytes()).as_bytes()
}

/// The finding for rounds that never settled: only statuses changing in every round
/// (a status that is never the same twice), or children still churning (a hot loop).
/// Each object is named with the field that kept changing, where one did; the first
/// one is the finding's subject.
fn no_steady_state(
    last: &RoundReport,
    max_rounds: usize,
    status_changed_every_round: bool,
) -> (Rule, String, Option<(Key, Option<String>)>) {
    let named = |key: &Key| match last.changed_at.get(key) {
        Some(field) => format!("{} at {field}", describe(key)),
        None => describe(key),
    };
    let churning: Vec<&Key> = last
        .created
        .iter()
        .chain(&last.updated)
        .chain(&last.deleted)
        .collect();
    let statuses: Vec<&Key> = last.status_changed.iter().collect();
    let (rule, shown) = if churning.is_empty() && status_changed_every_round {
        (Rule::StatusNeverSettles, &statuses)
    } else if churning.is_empty() {
        (Rule::HotLoop, &statuses)
    } else {
        (Rule::HotLoop, &churning)
    };
    let names: Vec<String> = shown.iter().map(|key| named(key)).collect();
    let message = if rule == Rule::StatusNeverSettles {
        format!(
            "the status of {} changed in every one of {max_rounds} rounds; Metacontroller would write it on every sync, forever",
            names.join(", ")
        )
    } else {
        format!(
            "no steady state after {max_rounds} rounds; the last round still changed {}",
            names.join(", ")
        )
    };
    let subject = shown
        .first()
        .map(|key| ((*key).clone(), last.changed_at.get(*key).cloned()));
    (rule, message, subject)
}

/// `namespace/name`, or `name` for a cluster-scoped object.
fn qualified_name(object: &Value) -> String {
    uniform_name(&key_of(object))
}

/// How Metacontroller keys an object in request maps: `namespace/name`, or just `name`
/// for a cluster-scoped one (`UniformObjectMap.qualifiedName`, pkg/controller/common/api/v2).
pub(super) fn uniform_name(key: &Key) -> String {
    if key.2.is_empty() {
        key.3.clone()
    } else {
        format!("{}/{}", key.2, key.3)
    }
}
