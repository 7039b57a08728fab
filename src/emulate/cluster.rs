//! The emulated cluster: objects, and Metacontroller's reconcile loop over them.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde_json::{Map, Value, json};

use super::answers::same_answer;
use super::findings::{Finding, Problem, Rule};
use super::objects::{
    add_finalizer, apply_server_defaults, has_finalizer, labels_match, matches_rule, owner_uid,
    remove_finalizer, three_way,
};
use super::registration::{ControllerType, Hook, HookName, Kinds, Registration, str_at};
use super::transport::Transport;
use super::{Key, key_of};

/// A message for the test suite, which stops at the first problem.
pub type Violation = String;

/// Everything that happened in one round, for assertions and messages.
#[derive(Debug, Default, Clone)]
pub struct RoundReport {
    pub created: Vec<Key>,
    pub updated: Vec<Key>,
    pub deleted: Vec<Key>,
    pub status_changed: Vec<Key>,
    pub resync_after: Vec<(Key, f64)>,
    pub finalizers_removed: Vec<Key>,
}

impl RoundReport {
    pub fn changed(&self) -> bool {
        !(self.created.is_empty()
            && self.updated.is_empty()
            && self.deleted.is_empty()
            && self.status_changed.is_empty())
    }
}

/// One hook call as the emulator made it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct CallRecord {
    pub round: usize,
    pub controller: String,
    pub hook: &'static str,
    /// `namespace/name` of the parent or decorated object.
    pub parent: String,
    pub status: u16,
    pub replica: usize,
    pub millis: f64,
}

pub struct Emulator {
    pub transport: Transport,
    pub registrations: Vec<Registration>,
    /// Plural resource names → kinds, for customize rules.
    pub kinds: Kinds,
    pub objects: BTreeMap<Key, Value>,
    /// What each child was last applied as, for the 3-way merge.
    last_applied: BTreeMap<Key, Value>,
    /// Objects by the UID of their controlling owner, kept by `put` and `take`: finding a
    /// parent's children must not scan the whole cluster (tens of thousands of objects
    /// in the scale-out benchmark).
    by_owner: BTreeMap<String, BTreeSet<Key>>,
    /// For each child, its parent as it was when an answer last asked for the child
    /// (without status and server fields): a child left out while its parent is still
    /// the same is a [`Rule::ChildDropped`].
    desired_under: BTreeMap<Key, Value>,
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
    /// Stop at the first problem (the test suite) or record it and go on (`emulate`).
    pub stop_at_first: bool,
    pub findings: Vec<Finding>,
    /// Rounds run so far.
    pub rounds: usize,
    /// The last resyncAfterSeconds each parent asked for.
    pub resync_requests: BTreeMap<(String, Key), f64>,
    /// Report unknown answer fields even where Metacontroller decodes loosely (v1 hooks),
    /// since it then drops them without a word.
    pub strict_everywhere: bool,
    /// What each round changed, by round number.
    pub timeline: Vec<(usize, RoundReport)>,
}

/// Where client-side apply records what it applied (pkg/dynamic/apply).
pub const LAST_APPLIED: &str = "metacontroller.k8s.io/last-applied-configuration";

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

    pub fn with_transport(transport: Transport, registrations: Vec<Registration>) -> Emulator {
        Emulator {
            transport,
            registrations,
            kinds: Kinds::default(),
            objects: BTreeMap::new(),
            last_applied: BTreeMap::new(),
            by_owner: BTreeMap::new(),
            desired_under: BTreeMap::new(),
            next_uid: 1,
            next_version: 1,
            calls: Vec::new(),
            customize_cache: BTreeMap::new(),
            clock: Duration::ZERO,
            server_side_apply: false,
            hold_unready: false,
            stop_at_first: true,
            findings: Vec::new(),
            rounds: 0,
            resync_requests: BTreeMap::new(),
            strict_everywhere: false,
            timeline: Vec::new(),
            next_replica: 0,
            current_replica: 0,
        }
    }

    /// The simulated time now, as a timestamp.
    pub fn now(&self) -> jiff::Timestamp {
        let epoch: jiff::Timestamp = EPOCH.parse().unwrap_or(jiff::Timestamp::UNIX_EPOCH);
        let since = jiff::SignedDuration::try_from(self.clock).unwrap_or_default();
        epoch.checked_add(since).unwrap_or(epoch)
    }

    fn now_text(&self) -> String {
        self.now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
    }

    /// Client-side apply keeps the applied object in an annotation on the live one;
    /// server-side apply keeps nothing the hook can see.
    fn annotate_applied(&mut self, key: &Key, applied: &Value) {
        if self.server_side_apply {
            return;
        }
        let text = applied.to_string();
        if let Some(object) = self.objects.get_mut(key)
            && let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut)
        {
            meta.entry("annotations").or_insert_with(|| json!({}))[LAST_APPLIED] = json!(text);
        }
    }

    /// Moves simulated time forward (customize answers expire with it).
    pub fn advance(&mut self, by: Duration) {
        self.clock += by;
    }

    fn bump_version(&mut self) -> String {
        self.next_version += 1;
        self.next_version.to_string()
    }

    /// Creates or edits an object as a user would (`kubectl apply`): spec changes bump
    /// `metadata.generation`; status and server fields are kept. An object without
    /// `metadata` gets an empty one (and so an empty name).
    pub fn apply(&mut self, mut object: Value) -> Key {
        if !object.get("metadata").is_some_and(Value::is_object)
            && let Some(map) = object.as_object_mut()
        {
            map.insert("metadata".to_owned(), json!({}));
        }
        let cluster_scoped = object.get("kind").and_then(Value::as_str) == Some("Namespace");
        if !cluster_scoped
            && object.pointer("/metadata/namespace").is_none()
            && let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut)
        {
            meta.insert("namespace".to_owned(), json!("default"));
        }
        let now = self.now_text();
        let key = key_of(&object);
        let version = self.bump_version();
        match self.objects.get(&key).cloned() {
            Some(existing) => {
                let generation = existing
                    .pointer("/metadata/generation")
                    .and_then(Value::as_i64)
                    .unwrap_or(1);
                let spec_changed = existing.get("spec") != object.get("spec")
                    || existing.get("data") != object.get("data");
                let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) else {
                    return key;
                };
                for field in [
                    "uid",
                    "creationTimestamp",
                    "finalizers",
                    "ownerReferences",
                    "deletionTimestamp",
                ] {
                    if let Some(v) = existing.pointer(&format!("/metadata/{field}")) {
                        meta.insert(field.to_owned(), v.clone());
                    }
                }
                meta.insert(
                    "generation".to_owned(),
                    json!(if spec_changed {
                        generation + 1
                    } else {
                        generation
                    }),
                );
                meta.insert("resourceVersion".to_owned(), json!(version));
                if let Some(status) = existing.get("status")
                    && let Some(map) = object.as_object_mut()
                {
                    map.insert("status".to_owned(), status.clone());
                }
            }
            None => {
                let uid = format!("uid-{:04}", self.next_uid);
                self.next_uid += 1;
                let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) else {
                    return key;
                };
                meta.insert("uid".to_owned(), json!(uid));
                meta.insert("generation".to_owned(), json!(1));
                meta.insert("resourceVersion".to_owned(), json!(version));
                meta.insert("creationTimestamp".to_owned(), json!(now));
            }
        }
        self.put(key.clone(), object);
        key
    }

    pub fn get(
        &self,
        api_version: &str,
        kind: &str,
        namespace: &str,
        name: &str,
    ) -> Option<&Value> {
        self.objects.get(&(
            api_version.to_owned(),
            kind.to_owned(),
            namespace.to_owned(),
            name.to_owned(),
        ))
    }

    /// `kubectl delete`: objects with finalizers get a deletionTimestamp, others go (with
    /// their owned objects, as the garbage collector would).
    pub fn delete(&mut self, key: &Key) {
        let now = self.now_text();
        let Some(object) = self.objects.get_mut(key) else {
            return;
        };
        let has_finalizers = object
            .pointer("/metadata/finalizers")
            .and_then(Value::as_array)
            .is_some_and(|f| !f.is_empty());
        if has_finalizers {
            object["metadata"]["deletionTimestamp"] = json!(now);
        } else {
            self.remove_with_dependents(key);
        }
    }

    /// Stores an object (replacing any with its key), keeping the owner index.
    fn put(&mut self, key: Key, object: Value) {
        self.take(&key);
        if let Some(owner) = owner_uid(&object) {
            self.by_owner.entry(owner).or_default().insert(key.clone());
        }
        self.objects.insert(key, object);
    }

    /// Removes an object, keeping the owner index.
    fn take(&mut self, key: &Key) -> Option<Value> {
        let object = self.objects.remove(key)?;
        if let Some(owner) = owner_uid(&object)
            && let Some(owned) = self.by_owner.get_mut(&owner)
        {
            owned.remove(key);
            if owned.is_empty() {
                self.by_owner.remove(&owner);
            }
        }
        Some(object)
    }

    fn remove_with_dependents(&mut self, key: &Key) {
        let Some(object) = self.take(key) else {
            return;
        };
        self.last_applied.remove(key);
        let uid = object
            .pointer("/metadata/uid")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let dependents: Vec<Key> = self
            .by_owner
            .get(&uid)
            .map(|owned| owned.iter().cloned().collect())
            .unwrap_or_default();
        for dependent in dependents {
            self.remove_with_dependents(&dependent);
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
            self.transport.settle_sources().await;
            if !report.changed() && !ticked {
                return Ok(round);
            }
            status_changed_every_round &= !report.status_changed.is_empty();
            last = report;
        }
        let churning: Vec<String> = last
            .created
            .iter()
            .chain(&last.updated)
            .chain(&last.deleted)
            .map(describe)
            .collect();
        let (rule, message) = if churning.is_empty() && status_changed_every_round {
            let parents: Vec<String> = last.status_changed.iter().map(describe).collect();
            (
                Rule::StatusNeverSettles,
                format!(
                    "the status of {} changed in every one of {max_rounds} rounds; Metacontroller would write it on every sync, forever",
                    parents.join(", ")
                ),
            )
        } else {
            (
                Rule::HotLoop,
                format!(
                    "no steady state after {max_rounds} rounds; the last round still changed {}",
                    if churning.is_empty() {
                        last.status_changed
                            .iter()
                            .map(describe)
                            .collect::<Vec<_>>()
                            .join(", ")
                    } else {
                        churning.join(", ")
                    }
                ),
            )
        };
        let subject = last
            .created
            .iter()
            .chain(&last.updated)
            .chain(&last.deleted)
            .chain(&last.status_changed)
            .next()
            .map(describe)
            .unwrap_or_default();
        self.record(rule, subject, message)?;
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
            let parents: Vec<Key> = self
                .objects
                .iter()
                .filter(|(_, object)| self.selects(&registration, object))
                .map(|(key, _)| key.clone())
                .collect();
            for parent in parents {
                if let Err((rule, message)) =
                    self.reconcile(&registration, &parent, &mut report).await
                {
                    let subject = format!("{} {}", registration.name, describe(&parent));
                    self.record(rule, subject, message)?;
                }
            }
        }
        self.timeline.push((self.rounds, report.clone()));
        Ok(report)
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
        let finding = Finding {
            rule,
            subject,
            message,
            round: self.rounds,
        };
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

    async fn reconcile(
        &mut self,
        registration: &Registration,
        parent_key: &Key,
        report: &mut RoundReport,
    ) -> Result<(), Problem> {
        let Some(mut parent) = self.objects.get(parent_key).cloned() else {
            return Ok(());
        };
        let finalizer = registration.finalizer();
        let deleting = parent.pointer("/metadata/deletionTimestamp").is_some();
        let opted_out = registration.type_ == ControllerType::Decorator
            && !registration
                .parents
                .iter()
                .any(|(_, _, rule)| matches_rule(rule, &parent));
        let has_finalize = registration.hooks.contains_key(&HookName::Finalize);
        if has_finalize && !deleting && !opted_out && !has_finalizer(&parent, &finalizer) {
            add_finalizer(&mut parent, &finalizer);
            self.put(parent_key.clone(), parent.clone());
        }
        let finalizing = has_finalize && (deleting || opted_out);
        let hook_name = if finalizing {
            HookName::Finalize
        } else {
            HookName::Sync
        };
        let Some(mut hook) = registration.hooks.get(&hook_name).cloned() else {
            return Err((
                Rule::NotEmulated,
                format!(
                    "{}: no {} hook registered",
                    registration.name,
                    hook_name.key()
                ),
            ));
        };
        hook.strict |= self.strict_everywhere;
        self.current_replica = self.next_replica % self.transport.replicas();
        self.next_replica += 1;
        let related = self.related(registration, &parent).await?;
        let owned = self.owned_by(registration, &parent);
        let observed = self.object_map(registration, &parent, &owned, &hook.version);
        let (root_field, observed_field) = match registration.type_ {
            ControllerType::Composite => ("parent", "children"),
            ControllerType::Decorator => ("object", "attachments"),
        };
        let request = json!({
            "controller": registration.raw,
            root_field: parent,
            observed_field: observed,
            "related": related,
            "finalizing": finalizing,
        });
        let parent_name = qualified_name(&parent);
        // Metacontroller may call again with the same state at any time; the answer must
        // be byte-identical, apart from transition times stamped in this very answer.
        // State outside the request (a background fetch landing) may move once between
        // two calls, so a difference is confirmed with a third call before it counts.
        let (first_text, first) = self
            .call(registration, &hook, hook_name, &request, &parent_name)
            .await?;
        let (again_text, again) = self
            .call(registration, &hook, hook_name, &request, &parent_name)
            .await?;
        let response = if same_answer(&parent, (&first_text, &first), (&again_text, &again)) {
            again
        } else {
            let (third_text, third) = self
                .call(registration, &hook, hook_name, &request, &parent_name)
                .await?;
            if !same_answer(&parent, (&again_text, &again), (&third_text, &third)) {
                return Err((
                    Rule::UnstableAnswer,
                    format!(
                        "{} answered two identical requests differently:\n{again}\n{third}",
                        hook_name.key()
                    ),
                ));
            }
            third
        };
        check_response(registration, &hook, &response)?;
        let desired_field = match registration.type_ {
            ControllerType::Composite => "children",
            ControllerType::Decorator => "attachments",
        };
        let desired: Vec<Value> = response
            .get(desired_field)
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        for child in &desired {
            check_child(registration, &parent, child).map_err(|m| (Rule::InvalidChild, m))?;
        }
        let dropped = self.manage_children(registration, &parent, owned, desired, report)?;
        match registration.type_ {
            ControllerType::Composite => self.write_composite_status(parent_key, &response, report),
            ControllerType::Decorator => self.write_decorator_result(parent_key, &response, report),
        }
        let resync = response
            .get("resyncAfterSeconds")
            .and_then(Value::as_f64)
            .filter(|s| *s > 0.0);
        let request_key = (registration.name.clone(), parent_key.clone());
        match resync {
            Some(seconds) => {
                report.resync_after.push((parent_key.clone(), seconds));
                self.resync_requests.insert(request_key, seconds);
            }
            None => {
                self.resync_requests.remove(&request_key);
            }
        }
        // Metacontroller removes its finalizer whenever an answer says `finalized: true`,
        // from the sync hook as well as from finalize (composite/controller.go).
        if response.get("finalized").and_then(Value::as_bool) == Some(true) {
            if let Some(object) = self.objects.get_mut(parent_key)
                && has_finalizer(object, &finalizer)
            {
                remove_finalizer(object, &finalizer);
                report.updated.push(parent_key.clone());
                report.finalizers_removed.push(parent_key.clone());
            }
            let gone = self.objects.get(parent_key).is_some_and(|o| {
                o.pointer("/metadata/deletionTimestamp").is_some()
                    && o.pointer("/metadata/finalizers")
                        .and_then(Value::as_array)
                        .is_none_or(Vec::is_empty)
            });
            if gone {
                self.remove_with_dependents(parent_key);
                report.deleted.push(parent_key.clone());
            }
        }
        if !finalizing && !dropped.is_empty() {
            let names: Vec<String> = dropped.iter().map(describe).collect();
            return Err((
                Rule::ChildDropped,
                format!(
                    "the {} answer left out {}, which an earlier answer for this unchanged parent asked for, so Metacontroller deleted it",
                    hook_name.key(),
                    names.join(", ")
                ),
            ));
        }
        Ok(())
    }

    async fn call(
        &mut self,
        registration: &Registration,
        hook: &Hook,
        name: HookName,
        request: &Value,
        parent: &str,
    ) -> Result<(String, Value), Problem> {
        let body = request.to_string().into_bytes();
        let replica = self.current_replica;
        let answer = self
            .transport
            .post(replica, &hook.path, body, self.now())
            .await
            .map_err(|e| (Rule::NonOkAnswer, e))?;
        self.calls.push(CallRecord {
            round: self.rounds,
            controller: registration.name.clone(),
            hook: name.key(),
            parent: parent.to_owned(),
            status: answer.status,
            replica,
            millis: answer.elapsed.as_secs_f64() * 1000.0,
        });
        let text = String::from_utf8_lossy(&answer.body).into_owned();
        if answer.status != 200 {
            return Err((
                Rule::NonOkAnswer,
                format!(
                    "{} answered {} (Metacontroller applies nothing and retries): {text:.300}",
                    name.key(),
                    answer.status
                ),
            ));
        }
        let value = serde_json::from_str(&text).map_err(|e| {
            (
                Rule::InvalidAnswer,
                format!(
                    "{} answered 200 with a body that is not JSON ({e}): {text:.200}",
                    name.key()
                ),
            )
        })?;
        Ok((text, value))
    }

    async fn related(
        &mut self,
        registration: &Registration,
        parent: &Value,
    ) -> Result<Value, Problem> {
        let Some(mut hook) = registration.hooks.get(&HookName::Customize).cloned() else {
            return Ok(json!({}));
        };
        hook.strict |= self.strict_everywhere;
        // Metacontroller asks customize once per (parent UID, generation) and reuses the
        // answer for 20 minutes: label and annotation edits do not bump the generation.
        let cache_key = (
            registration.name.clone(),
            parent
                .pointer("/metadata/uid")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
            parent
                .pointer("/metadata/generation")
                .and_then(Value::as_i64)
                .unwrap_or_default(),
        );
        let cached = self
            .customize_cache
            .get(&cache_key)
            .filter(|(_, at)| self.clock.saturating_sub(*at) < CUSTOMIZE_CACHE_TTL)
            .map(|(answer, _)| answer.clone());
        let response = match cached {
            Some(answer) => answer,
            None => {
                let request = json!({"controller": registration.raw, "parent": parent});
                let (_, response) = self
                    .call(
                        registration,
                        &hook,
                        HookName::Customize,
                        &request,
                        &qualified_name(parent),
                    )
                    .await?;
                self.customize_cache
                    .insert(cache_key, (response.clone(), self.clock));
                response
            }
        };
        let allowed: BTreeSet<&str> = ["relatedResources"].into();
        if let Some(object) = response.as_object() {
            for field in object.keys() {
                if hook.strict && !allowed.contains(field.as_str()) {
                    return Err((
                        Rule::StrictDecoding,
                        format!("customize answer has unknown field {field:?} (strict decoding)"),
                    ));
                }
            }
        }
        let mut groups = Map::new();
        let parent_namespace = key_of(parent).2;
        let v1_namespaced = hook.version != "v2" && !parent_namespace.is_empty();
        for rule in response
            .get("relatedResources")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let customize = |message: String| (Rule::InvalidCustomize, message);
            let api_version = str_at(rule, "/apiVersion").map_err(customize)?.to_owned();
            let resource = str_at(rule, "/resource").map_err(customize)?;
            let kind = self
                .kinds
                .kind_of(resource)
                .map_err(|e| (Rule::NotEmulated, e))?
                .to_owned();
            let type_key = format!("{kind}.{api_version}");
            let namespace = rule
                .get("namespace")
                .and_then(Value::as_str)
                .filter(|ns| !ns.is_empty());
            let names: Option<Vec<&str>> = rule
                .get("names")
                .and_then(Value::as_array)
                .map(|n| n.iter().filter_map(Value::as_str).collect())
                .filter(|n: &Vec<&str>| !n.is_empty());
            let label_selector = rule.get("labelSelector").filter(|s| !s.is_null());
            let namespace_selector = rule.get("namespaceSelector").filter(|s| !s.is_null());
            // Metacontroller's selection rules (customize/manager.go, v4.17):
            if names.is_some() && (label_selector.is_some() || namespace_selector.is_some()) {
                return Err(customize(format!(
                    "related rule cannot have both names and labelSelector/namespaceSelector specified: {rule}"
                )));
            }
            if namespace.is_some() && namespace_selector.is_some() {
                return Err(customize(format!(
                    "related rule cannot have both namespace and namespaceSelector specified: {rule}"
                )));
            }
            if namespace_selector.is_some() {
                return Err((
                    Rule::NotEmulated,
                    "namespaceSelector rules are not emulated".to_owned(),
                ));
            }
            if v1_namespaced && namespace.is_some_and(|ns| ns != parent_namespace) {
                return Err(customize(format!(
                    "requested related object namespace {namespace:?} differs from parent object namespace {parent_namespace}"
                )));
            }
            // Which namespace is listed: a label-selector rule without a namespace lists
            // the parent's namespace for v1 hooks and every namespace for v2; a rule with
            // a namespace lists that one; a names rule without one lists every namespace,
            // whatever the hook version.
            let listed: Option<&str> =
                match (namespace, label_selector.is_some() || names.is_none()) {
                    (Some(ns), _) => Some(ns),
                    (None, true) if v1_namespaced && names.is_none() => {
                        Some(parent_namespace.as_str())
                    }
                    (None, _) => None,
                };
            let group = groups.entry(type_key).or_insert_with(|| json!({}));
            // Keys sort by (apiVersion, kind, namespace, name): list only the range of
            // this type (and namespace), not the whole cluster.
            let start: Key = (
                api_version.clone(),
                kind.clone(),
                listed.unwrap_or_default().to_owned(),
                String::new(),
            );
            let in_range = |key: &Key| {
                key.0 == api_version && key.1 == kind && listed.is_none_or(|ns| ns == key.2)
            };
            for (key, object) in self
                .objects
                .range(start..)
                .take_while(|(key, _)| in_range(key))
            {
                if names.as_ref().is_some_and(|n| !n.contains(&key.3.as_str())) {
                    continue;
                }
                if let Some(selector) = label_selector
                    && !labels_match(selector, object)
                {
                    continue;
                }
                let map_key = if hook.version == "v2"
                    || parent_namespace.is_empty()
                    || key.2 != parent_namespace
                {
                    format!("{}/{}", key.2, key.3)
                } else {
                    key.3.clone()
                };
                group[map_key] = object.clone();
            }
        }
        Ok(Value::Object(groups))
    }

    fn owned_by(&self, registration: &Registration, parent: &Value) -> Vec<Key> {
        let uid = parent
            .pointer("/metadata/uid")
            .and_then(Value::as_str)
            .unwrap_or_default();
        self.by_owner
            .get(uid)
            .into_iter()
            .flatten()
            .filter_map(|key| self.objects.get(key).map(|object| (key, object)))
            .filter(|(key, object)| {
                registration.child_rule(&key.0, &key.1).is_some()
                    && (registration.type_ == ControllerType::Composite
                        || object
                            .pointer(
                                "/metadata/annotations/metacontroller.k8s.io~1decorator-controller",
                            )
                            .and_then(Value::as_str)
                            == Some(registration.name.as_str()))
            })
            .map(|(key, _)| key.clone())
            .collect()
    }

    fn object_map(
        &self,
        registration: &Registration,
        parent: &Value,
        owned: &[Key],
        version: &str,
    ) -> Value {
        let mut groups = Map::new();
        for rule in &registration.children {
            groups.insert(format!("{}.{}", rule.kind, rule.api_version), json!({}));
        }
        let parent_namespace = key_of(parent).2;
        for key in owned {
            let Some(object) = self.objects.get(key) else {
                continue;
            };
            let map_key = if version == "v2" || parent_namespace.is_empty() {
                format!("{}/{}", key.2, key.3)
            } else {
                key.3.clone()
            };
            groups[&format!("{}.{}", key.1, key.0)][map_key] = object.clone();
        }
        Value::Object(groups)
    }

    fn manage_children(
        &mut self,
        registration: &Registration,
        parent: &Value,
        owned: Vec<Key>,
        desired: Vec<Value>,
        report: &mut RoundReport,
    ) -> Result<Vec<Key>, Problem> {
        let parent_namespace = key_of(parent).2;
        let identity = parent_identity(parent);
        let mut dropped = Vec::new();
        let mut desired_by_key = BTreeMap::new();
        for mut child in desired {
            if child.pointer("/metadata/namespace").is_none() {
                child["metadata"]["namespace"] = json!(parent_namespace);
            }
            desired_by_key.insert(key_of(&child), child);
        }
        for key in owned {
            if !desired_by_key.contains_key(&key) {
                let terminating = self
                    .objects
                    .get(&key)
                    .is_some_and(|o| o.pointer("/metadata/deletionTimestamp").is_some());
                if !terminating {
                    if self.desired_under.get(&key) == Some(&identity) {
                        dropped.push(key.clone());
                    }
                    self.desired_under.remove(&key);
                    self.remove_with_dependents(&key);
                    report.deleted.push(key);
                }
            }
        }
        for (key, child) in desired_by_key {
            self.desired_under.insert(key.clone(), identity.clone());
            let strategy = registration
                .child_rule(&key.0, &key.1)
                .map(|r| r.strategy.clone())
                .unwrap_or_default();
            match self.objects.get(&key).cloned() {
                None => {
                    let created = self.create_child(registration, parent, child.clone());
                    self.annotate_applied(&created, &child);
                    self.last_applied.insert(key.clone(), child);
                    report.created.push(created);
                }
                Some(live) => {
                    if owner_uid(&live)
                        != parent
                            .pointer("/metadata/uid")
                            .and_then(Value::as_str)
                            .map(str::to_owned)
                    {
                        return Err((
                            Rule::OwnershipConflict,
                            format!(
                                "{} exists but belongs to another owner; Metacontroller will not adopt it",
                                describe(&key)
                            ),
                        ));
                    }
                    let previous = self.last_applied.get(&key).cloned().unwrap_or(Value::Null);
                    let merged = three_way(&live, &previous, &child);
                    if merged == live {
                        continue;
                    }
                    match strategy.as_str() {
                        "OnDelete" => {}
                        "Recreate" | "RollingRecreate" => {
                            self.remove_with_dependents(&key);
                            report.deleted.push(key);
                        }
                        _ => {
                            let updated = self.update_child(&key, &live, merged);
                            self.put(key.clone(), updated);
                            self.annotate_applied(&key, &child);
                            self.last_applied.insert(key.clone(), child);
                            report.updated.push(key);
                        }
                    }
                }
            }
        }
        Ok(dropped)
    }

    fn create_child(
        &mut self,
        registration: &Registration,
        parent: &Value,
        mut child: Value,
    ) -> Key {
        let parent_uid = parent
            .pointer("/metadata/uid")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let reference = json!([{
            "apiVersion": parent["apiVersion"], "kind": parent["kind"],
            "name": parent["metadata"]["name"], "uid": parent_uid,
            "controller": true, "blockOwnerDeletion": true,
        }]);
        let uid = format!("uid-{:04}", self.next_uid);
        self.next_uid += 1;
        let version = self.bump_version();
        let now = self.now_text();
        let key = key_of(&child);
        let Some(meta) = child.get_mut("metadata").and_then(Value::as_object_mut) else {
            return key;
        };
        meta.insert("ownerReferences".to_owned(), reference);
        meta.insert("uid".to_owned(), json!(uid));
        meta.insert("generation".to_owned(), json!(1));
        meta.insert("resourceVersion".to_owned(), json!(version));
        meta.insert("creationTimestamp".to_owned(), json!(now));
        if registration.generate_selector
            && let Some(labels) = meta
                .entry("labels")
                .or_insert_with(|| json!({}))
                .as_object_mut()
        {
            labels.insert("controller-uid".to_owned(), json!(parent_uid));
        }
        if registration.type_ == ControllerType::Decorator
            && let Some(annotations) = meta
                .entry("annotations")
                .or_insert_with(|| json!({}))
                .as_object_mut()
        {
            annotations.insert(
                "metacontroller.k8s.io/decorator-controller".to_owned(),
                json!(registration.name),
            );
        }
        apply_server_defaults(&mut child);
        self.put(key.clone(), child);
        key
    }

    fn update_child(&mut self, _key: &Key, live: &Value, mut merged: Value) -> Value {
        apply_server_defaults(&mut merged);
        let version = self.bump_version();
        let generation = live
            .pointer("/metadata/generation")
            .and_then(Value::as_i64)
            .unwrap_or(1);
        let spec_changed = live.get("spec") != merged.get("spec");
        merged["metadata"]["resourceVersion"] = json!(version);
        merged["metadata"]["generation"] = json!(if spec_changed {
            generation + 1
        } else {
            generation
        });
        merged
    }

    fn write_composite_status(
        &mut self,
        parent_key: &Key,
        response: &Value,
        report: &mut RoundReport,
    ) {
        let Some(parent) = self.objects.get_mut(parent_key) else {
            return;
        };
        let generation = parent
            .pointer("/metadata/generation")
            .cloned()
            .unwrap_or(json!(1));
        let mut status = response.get("status").cloned().unwrap_or(json!({}));
        if let Some(map) = status.as_object_mut() {
            map.insert("observedGeneration".to_owned(), generation);
        }
        if parent.get("status") != Some(&status) {
            parent["status"] = status;
            self.next_version += 1;
            parent["metadata"]["resourceVersion"] = json!(self.next_version.to_string());
            report.status_changed.push(parent_key.clone());
        }
    }

    fn write_decorator_result(
        &mut self,
        target_key: &Key,
        response: &Value,
        report: &mut RoundReport,
    ) {
        let Some(target) = self.objects.get_mut(target_key) else {
            return;
        };
        let before = target.clone();
        for field in ["labels", "annotations"] {
            for (key, value) in response
                .get(field)
                .and_then(Value::as_object)
                .into_iter()
                .flatten()
            {
                let Some(map) = target
                    .get_mut("metadata")
                    .and_then(Value::as_object_mut)
                    .and_then(|meta| {
                        meta.entry(field)
                            .or_insert_with(|| json!({}))
                            .as_object_mut()
                    })
                else {
                    continue;
                };
                match value {
                    Value::Null => {
                        map.remove(key);
                    }
                    other => {
                        map.insert(key.clone(), other.clone());
                    }
                }
            }
        }
        if let Some(status) = response.get("status").filter(|s| s.is_object())
            && let Some(map) = target.as_object_mut()
        {
            map.insert("status".to_owned(), status.clone());
        }
        if *target != before {
            report.status_changed.push(target_key.clone());
        }
    }

    /// Fake kube-controller-manager: a Deployment first reports its new generation with no
    /// ready pods, then on the next tick all replicas ready. Returns whether anything moved.
    pub fn tick_workloads(&mut self) -> bool {
        let mut moved = false;
        let hold_unready = self.hold_unready;
        for (key, object) in self.objects.iter_mut() {
            if key.1 != "Deployment" && key.1 != "StatefulSet" {
                continue;
            }
            let generation = object
                .pointer("/metadata/generation")
                .and_then(Value::as_i64)
                .unwrap_or(1);
            let replicas = object
                .pointer("/spec/replicas")
                .and_then(Value::as_i64)
                .unwrap_or(1);
            let observed = object
                .pointer("/status/observedGeneration")
                .and_then(Value::as_i64);
            let ready = object
                .pointer("/status/readyReplicas")
                .and_then(Value::as_i64)
                .unwrap_or(0);
            if observed != Some(generation) {
                object["status"] = json!({
                    "observedGeneration": generation, "replicas": replicas, "updatedReplicas": replicas,
                    "readyReplicas": 0, "availableReplicas": 0,
                    "conditions": [{"type": "Available", "status": if replicas == 0 { "True" } else { "False" }, "reason": "MinimumReplicasUnavailable"}]
                });
                moved = true;
            } else if ready != replicas && !hold_unready {
                object["status"] = json!({
                    "observedGeneration": generation, "replicas": replicas, "updatedReplicas": replicas,
                    "readyReplicas": replicas, "availableReplicas": replicas,
                    "conditions": [{"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable"}]
                });
                moved = true;
            }
        }
        moved
    }
}

/// The answer's shape, as Metacontroller decodes it.
fn check_response(
    registration: &Registration,
    hook: &Hook,
    response: &Value,
) -> Result<(), Problem> {
    let invalid = |message: &str| (Rule::InvalidAnswer, message.to_owned());
    let Some(object) = response.as_object() else {
        return Err(invalid("the answer is not a JSON object"));
    };
    let allowed: &[&str] = match registration.type_ {
        ControllerType::Composite => &["status", "children", "resyncAfterSeconds", "finalized"],
        ControllerType::Decorator => &[
            "labels",
            "annotations",
            "status",
            "attachments",
            "resyncAfterSeconds",
            "finalized",
        ],
    };
    for field in object.keys() {
        if hook.strict && !allowed.contains(&field.as_str()) {
            return Err((
                Rule::StrictDecoding,
                format!("strict decoding failed: unknown field {field:?} in the answer"),
            ));
        }
    }
    if let Some(status) = object.get("status")
        && !(status.is_object() || status.is_null())
    {
        return Err(invalid("status must be an object or null"));
    }
    if registration.type_ == ControllerType::Composite
        && !object.get("status").is_some_and(Value::is_object)
    {
        return Err(invalid(
            "a composite answer without an object status (it would wipe the parent's status)",
        ));
    }
    for field in ["labels", "annotations"] {
        if let Some(map) = object.get(field).and_then(Value::as_object)
            && map.values().any(|v| !(v.is_string() || v.is_null()))
        {
            return Err((
                Rule::InvalidAnswer,
                format!("{field} values must be strings or null"),
            ));
        }
    }
    Ok(())
}

/// One desired child, as Metacontroller checks it before applying.
fn check_child(registration: &Registration, parent: &Value, child: &Value) -> Result<(), String> {
    let kind = child
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if kind.is_empty() {
        return Err("Object 'Kind' is missing in a desired child".to_owned());
    }
    let api_version = child
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let name = child
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if name.is_empty() {
        return Err(format!("{kind} without metadata.name"));
    }
    if registration.child_rule(api_version, kind).is_none() {
        return Err(format!(
            "{kind}.{api_version} {name} is not a registered child type of {}",
            registration.name
        ));
    }
    if child.pointer("/metadata/ownerReferences").is_some() {
        return Err(format!(
            "{kind} {name} sets metadata.ownerReferences (Metacontroller owns them)"
        ));
    }
    if child.get("status").is_some() {
        return Err(format!(
            "{kind} {name} sets status (a parent cannot set child status)"
        ));
    }
    for field in [
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "managedFields",
    ] {
        if child.pointer(&format!("/metadata/{field}")).is_some() {
            return Err(format!(
                "{kind} {name} sets server-populated metadata.{field}"
            ));
        }
    }
    let namespace = child.pointer("/metadata/namespace").and_then(Value::as_str);
    let parent_namespace = key_of(parent).2;
    if registration.type_ == ControllerType::Composite
        && namespace.is_some_and(|ns| ns != parent_namespace)
    {
        return Err(format!(
            "{kind} {name} is in namespace {namespace:?}, not the parent's"
        ));
    }
    if registration.type_ == ControllerType::Composite
        && !registration.generate_selector
        && let Some(selector) = parent.pointer("/spec/selector")
        && !labels_match(selector, child)
    {
        return Err(format!(
            "labels on desired child {kind} {name} don't match parent selector"
        ));
    }
    Ok(())
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
fn parent_identity(parent: &Value) -> Value {
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
    identity
}

/// `namespace/name`, or `name` for a cluster-scoped object.
fn qualified_name(object: &Value) -> String {
    let key = key_of(object);
    if key.2.is_empty() {
        key.3
    } else {
        format!("{}/{}", key.2, key.3)
    }
}
