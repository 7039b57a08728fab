//! One parent's sync or finalize call, as Metacontroller makes it, and what it does with the answer.

use serde_json::Value;

use super::checks::{check_child_labels, check_kinds, check_response, check_selector};
use super::related::ObjectMap;
use super::{CallRecord, Emulator, RoundReport, describe, qualified_name};
use crate::Key;
use crate::findings::{Problem, Rule};
use crate::objects::{add_finalizer, has_finalizer, matches_rule, remove_finalizer};
use crate::registration::{ControllerType, Credentials, Hook, HookName, Registration};

mod webhook;
use webhook::*;
pub(super) use webhook::{Recheck, Tagged, ask_later, stable_answer};

/// A parent's sync or finalize call, ready to send: what Metacontroller read from the
/// cluster before calling, and the request serialised from it.
pub(super) struct Prepared {
    parent_key: Key,
    parent: Value,
    hook: Hook,
    hook_name: HookName,
    finalizing: bool,
    owned: Vec<Key>,
    replica: usize,
    body: Vec<u8>,
    /// A digest of `body`.
    body_hash: [u8; 32],
    /// The answer an earlier round got to this very request, if any.
    remembered: Option<std::sync::Arc<str>>,
    /// The answer the webhook client keeps with its ETag for this parent, if any.
    tagged: Option<Tagged>,
    /// Under a rolling update, each older revision still claiming children: its fields
    /// and the request made with them.
    older: Vec<(Value, Vec<u8>)>,
}

/// What asking a hook for a stable answer produced: each call made (status, time) and
/// the answer, or the problem with it.
pub(super) struct Answered {
    calls: Vec<(u16, f64)>,
    pub(super) outcome: Result<Value, Problem>,
    /// The Retry-After of a 429, in seconds.
    retry_after: Option<f64>,
    /// The text of the answer taken, remembered for the next identical request.
    text: Option<std::sync::Arc<str>>,
    /// The answer and ETag the webhook client keeps from these calls, if any.
    tagged: Option<Tagged>,
    /// Two answers to identical requests that differ where the cluster would act on it:
    /// a finding, though the latest answer is still applied.
    pub(super) unstable: Option<(Problem, Option<String>)>,
    /// The answer is new (not the one an earlier round got to this request), so it is
    /// asked for again after a delay.
    pub(super) fresh: bool,
    /// Where the answer's delayed re-asks stand.
    pub(super) recheck: Recheck,
    /// Each older revision's fields and its answer (rolling updates).
    pub(super) older: Vec<(Value, Value)>,
}

impl Prepared {
    pub(super) fn asked(&self) -> crate::answers::Asked<'_> {
        crate::answers::Asked {
            parent: &self.parent,
            observed: &self.owned,
        }
    }
}

impl Emulator {
    /// Finalizer bookkeeping, adoption, related objects (with the customize call) and
    /// the request: everything before the sync or finalize call. `None` when the parent
    /// is gone.
    pub(super) async fn prepare(
        &mut self,
        registration: &Registration,
        parent_key: &Key,
    ) -> Result<Option<Prepared>, Problem> {
        let Some(mut parent) = self.objects.get(parent_key).cloned() else {
            return Ok(None);
        };
        check_selector(registration, &parent, parent_key)?;
        let finalizer = registration.finalizer();
        let Some(finalizing) =
            self.mark_for_finalize(registration, parent_key, &mut parent, &finalizer)
        else {
            return Ok(None);
        };
        let hook_name = if finalizing {
            HookName::Finalize
        } else {
            HookName::Sync
        };
        let mut hook = self.hook_of(registration, hook_name)?;
        hook.strict |= self.strict_everywhere;
        self.current_replica = self.next_replica % self.transport.replicas();
        self.next_replica += 1;
        let related = self.related(registration, &parent, &hook.version).await?;
        self.claim_children(registration, &parent);
        let owned = self.owned_by(registration, &parent);
        let body = self.request_body(registration, &parent, &owned, &hook, finalizing, &related)?;
        let mut older = Vec::new();
        let older_parents = if asked_for_status_only(&parent, finalizing) {
            Vec::new()
        } else {
            self.older_parents(registration, parent_key, &parent)
        };
        for (patch, old_parent) in older_parents {
            let body = self.request_body(
                registration,
                &old_parent,
                &owned,
                &hook,
                finalizing,
                &related,
            )?;
            older.push((patch, body));
        }
        let body_hash = *blake3::hash(&body).as_bytes();
        let remembered = self
            .answered
            .get(&(registration.name.clone(), parent_key.clone()))
            .filter(|(hash, _)| *hash == body_hash)
            .map(|(_, text)| text.clone());
        let tagged = self.kept_etag(registration, &hook, hook_name, parent_key);
        Ok(Some(Prepared {
            older,
            body_hash,
            remembered,
            tagged,
            parent_key: parent_key.clone(),
            parent,
            hook,
            hook_name,
            finalizing,
            owned,
            replica: self.current_replica,
            body,
        }))
    }

    /// The request Metacontroller sends, serialised from the stored objects.
    fn request_body(
        &self,
        registration: &Registration,
        parent: &Value,
        owned: &[Key],
        hook: &Hook,
        finalizing: bool,
        related: &Value,
    ) -> Result<Vec<u8>, Problem> {
        let observed = self.object_map(registration, parent, owned, &hook.version);
        let (root_field, observed_field) = match registration.type_ {
            ControllerType::Composite => ("parent", "children"),
            ControllerType::Decorator => ("object", "attachments"),
        };
        let request = Request {
            observed: (observed_field, &observed),
            controller: &registration.raw,
            finalizing,
            root: (root_field, parent),
            related,
        };
        serde_json::to_vec(&request).map_err(|e| {
            (
                Rule::NotEmulated,
                format!("cannot serialise the request: {e}"),
            )
        })
    }

    /// Records the calls an answer took, as made in this round.
    pub(super) fn record_calls(
        &mut self,
        registration: &Registration,
        prepared: &Prepared,
        answered: &Answered,
    ) {
        let parent = qualified_name(&prepared.parent);
        for (status, millis) in &answered.calls {
            self.calls.push(CallRecord {
                round: self.rounds,
                controller: registration.name.clone(),
                hook: prepared.hook_name.key(),
                parent: parent.clone(),
                status: *status,
                replica: prepared.replica,
                millis: *millis,
            });
        }
        self.last_retry_after = answered.retry_after;
        if let Some(tagged) = &answered.tagged {
            self.keep_etag(
                registration,
                prepared.hook_name,
                &prepared.parent_key,
                tagged.clone(),
            );
        }
        let remember_as = (registration.name.clone(), prepared.parent_key.clone());
        match &answered.text {
            Some(text) => {
                self.answered
                    .insert(remember_as, (prepared.body_hash, text.clone()));
            }
            None => {
                self.answered.remove(&remember_as);
            }
        }
    }

    /// The answer's checks, then children, status, resync and finalizer removal, as
    /// Metacontroller does them.
    pub(super) fn conclude(
        &mut self,
        registration: &Registration,
        prepared: Prepared,
        response: Value,
        older: &[(Value, Value)],
        report: &mut RoundReport,
    ) -> Result<(), Problem> {
        let Prepared {
            parent_key,
            parent,
            hook,
            hook_name,
            finalizing,
            owned,
            ..
        } = prepared;
        // Go decodes `null` into the zero answer without an error: no children (so every
        // child is deleted) and no status.
        let null_answer = response.is_null();
        let mut response = if null_answer {
            Value::Object(serde_json::Map::new())
        } else {
            response
        };
        let deleted_before = report.deleted.len();
        check_response(registration, &hook, &response)?;
        let mut desired = desired_children(registration, &response);
        check_kinds(&desired)?;
        if registration.type_ == ControllerType::Composite
            && !asked_for_status_only(&parent, finalizing)
        {
            desired = self.roll(
                registration,
                (&parent_key, &parent),
                &mut response,
                older,
                desired,
                &owned,
            );
        }
        if let Err(problem) = check_child_labels(registration, &parent, &mut desired) {
            // syncParentObject has already queued the resync and let the finalizer go.
            self.note_resync(registration, &parent_key, &response, report);
            self.let_go_if_finalized(registration, &parent_key, &response, report);
            return Err(problem);
        }
        // Children are managed while the parent is alive, or pending deletion while it
        // holds the finalizer (syncParentObject, `finalizer.ShouldFinalize`); a
        // terminating parent without one only gets its status written. An answer that
        // says `finalized: true` lets the finalizer go before the children are managed,
        // so a terminating parent's children are then left alone: one the answer still
        // lists is not created.
        let terminating = parent.pointer("/metadata/deletionTimestamp").is_some();
        let finalized_now = response.get("finalized").and_then(Value::as_bool) == Some(true);
        let mut managed = if !terminating || (finalizing && !finalized_now) {
            self.manage_children(registration, &parent, owned, desired, report)
        } else {
            super::children::Managed::default()
        };
        // Status, resync and finalizer go on whatever the children's writes did
        // (syncParentObject remembers the manage error and updates status regardless).
        if let Some(refused) = self.write_parent_side(registration, &parent_key, &response, report)
        {
            managed.failed.push(refused);
        }
        let deleted = report.deleted.len() - deleted_before;
        findings(
            hook_name,
            managed,
            null_answer.then_some(deleted),
            finalizing,
        )
    }

    /// The answer's status (or a decorator's labels and annotations), its resync, and
    /// the finalizer it lets go.
    fn write_parent_side(
        &mut self,
        registration: &Registration,
        parent_key: &Key,
        response: &Value,
        report: &mut RoundReport,
    ) -> Option<Problem> {
        let enqueues = |object: Option<&Value>| {
            object.map(|o| {
                [
                    "/metadata/generation",
                    "/metadata/labels",
                    "/metadata/annotations",
                    "/metadata/deletionTimestamp",
                ]
                .map(|p| o.pointer(p).cloned())
            })
        };
        let before = enqueues(self.objects.get(parent_key));
        let refused = match registration.type_ {
            ControllerType::Composite => self.write_composite_status(parent_key, response, report),
            ControllerType::Decorator => {
                self.write_decorator_result(parent_key, response, report);
                None
            }
        };
        // updateParentObject (composite and decorator controller.go): with
        // ignoreStatusChanges, an update that changes neither the generation, the labels,
        // the annotations nor the deletion mark enqueues nothing, so a status written
        // on every sync does not call the hook again.
        if report.status_changed.last() == Some(parent_key)
            && registration.ignores_status_changes(parent_key)
            && enqueues(self.objects.get(parent_key)) == before
        {
            report.status_changed.pop();
            report.status_written_quietly.push(parent_key.clone());
        }
        self.note_resync(registration, parent_key, response, report);
        self.let_go_if_finalized(registration, parent_key, response, report);
        refused
    }

    /// Metacontroller removes its finalizer whenever an answer says `finalized: true`,
    /// from the sync hook as well as from finalize (composite/controller.go).
    fn let_go_if_finalized(
        &mut self,
        registration: &Registration,
        parent_key: &Key,
        response: &Value,
        report: &mut RoundReport,
    ) {
        if response.get("finalized").and_then(Value::as_bool) == Some(true) {
            self.finalized(parent_key, &registration.finalizer(), report);
        }
    }

    /// The finalizer bookkeeping of `finalizer.Manager.SyncObject`
    /// (pkg/controller/common/finalizer): with a finalize hook the parent gets the
    /// finalizer before its first sync; without one a finalizer left from an earlier
    /// registration is removed (and a terminating parent left with no finalizer is gone).
    /// `Some(true)` when this call is a finalize: the parent is being deleted, or it no
    /// longer matches the parent rule's selectors while holding the finalizer
    /// (`shouldCallFinalizeHook`, composite and decorator alike); `None` when no hook is
    /// called this time.
    fn mark_for_finalize(
        &mut self,
        registration: &Registration,
        parent_key: &Key,
        parent: &mut Value,
        finalizer: &str,
    ) -> Option<bool> {
        let deleting = parent.pointer("/metadata/deletionTimestamp").is_some();
        let opted_out = !registration
            .parents
            .iter()
            .any(|(_, _, rule)| matches_rule(rule, parent));
        let has_finalize = registration.hooks.contains_key(&HookName::Finalize);
        if !has_finalize {
            if has_finalizer(parent, finalizer) {
                remove_finalizer(parent, finalizer);
                self.put(parent_key.clone(), parent.clone());
                // "Check the finalizer again in case we just removed it."
                if self.collect_if_released(parent_key) || opted_out {
                    return None;
                }
            }
            return Some(false);
        }
        if !deleting && !opted_out && !has_finalizer(parent, finalizer) {
            add_finalizer(parent, finalizer);
            self.put(parent_key.clone(), parent.clone());
        }
        Some(deleting || opted_out)
    }

    /// Remembers (or forgets) the resync the answer asked for.
    fn note_resync(
        &mut self,
        registration: &Registration,
        parent_key: &Key,
        response: &Value,
        report: &mut RoundReport,
    ) {
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
    }

    /// Removes the finalizer; a parent being deleted with no finalizer left is gone.
    fn finalized(&mut self, parent_key: &Key, finalizer: &str, report: &mut RoundReport) {
        self.settled.remove(parent_key);
        if let Some(object) = self.objects.get_mut(parent_key)
            && has_finalizer(object, finalizer)
        {
            remove_finalizer(object, finalizer);
            report.updated.push(parent_key.clone());
            report.finalizers_removed.push(parent_key.clone());
        }
        if self.collect_if_released(parent_key) {
            report.deleted.push(parent_key.clone());
        }
    }

    /// One call of a hook outside a parent's sync (customize), recorded as made.
    pub(super) async fn call(
        &mut self,
        registration: &Registration,
        hook: &Hook,
        name: HookName,
        request: &Value,
        parent: &str,
    ) -> Result<(String, Value), Problem> {
        let body = request.to_string().into_bytes();
        let root = request.get("parent").map(crate::key_of).unwrap_or_default();
        let tagged = self.kept_etag(registration, hook, name, &root);
        let exchange = exchange(
            &self.transport,
            self.current_replica,
            hook,
            name,
            body,
            self.now(),
            tagged.as_ref(),
        )
        .await;
        if let Some(tagged) = exchange.tagged.clone() {
            self.keep_etag(registration, name, &root, tagged);
        }
        self.calls.push(CallRecord {
            round: self.rounds,
            controller: registration.name.clone(),
            hook: name.key(),
            parent: parent.to_owned(),
            status: exchange.status,
            replica: self.current_replica,
            millis: exchange.millis,
        });
        self.last_retry_after = exchange.retry_after;
        let (text, value) = exchange.outcome?;
        refuse_duplicate_keys(hook, &text)?;
        Ok((text, value))
    }
}

/// The request Metacontroller sends, serialised straight from the stored objects (its
/// keys in the order serde_json's maps keep them: observed, controller, finalizing,
/// root, related).
struct Request<'a> {
    observed: (&'static str, &'a ObjectMap<'a>),
    controller: &'a Value,
    finalizing: bool,
    root: (&'static str, &'a Value),
    related: &'a Value,
}

impl serde::Serialize for Request<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = serializer.serialize_map(Some(5))?;
        map.serialize_entry(self.observed.0, self.observed.1)?;
        map.serialize_entry("controller", self.controller)?;
        map.serialize_entry("finalizing", &self.finalizing)?;
        map.serialize_entry(self.root.0, self.root.1)?;
        map.serialize_entry("related", self.related)?;
        map.end()
    }
}

/// syncRevisions: a terminating parent whose finalizer is gone (or never was) is only
/// asked for its status, with no revisions.
fn asked_for_status_only(parent: &Value, finalizing: bool) -> bool {
    parent.pointer("/metadata/deletionTimestamp").is_some() && !finalizing
}

/// The children (or attachments) an answer asks for, as given.
fn desired_children(registration: &Registration, response: &Value) -> Vec<Value> {
    let desired_field = match registration.type_ {
        ControllerType::Composite => "children",
        ControllerType::Decorator => "attachments",
    };
    response
        .get(desired_field)
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

impl Emulator {
    /// The registration's hook of that name, with the `Authorization` header its
    /// credentials make read from their Secret, as Metacontroller reads it when it
    /// creates the webhook executor (`ResolveAuthorization`, `ResolveBasicAuth` in
    /// pkg/hooks/auth.go: the value trimmed, the scheme `Bearer` unless set).
    pub(in crate::cluster) fn hook_of(
        &self,
        registration: &Registration,
        name: HookName,
    ) -> Result<Hook, Problem> {
        let mut hook = registered_hook(registration, name)?;
        let cannot = |problem: String| {
            (
                Rule::NonOkAnswer,
                format!(
                    "{}: Metacontroller cannot create the webhook of {}'s {} hook: {problem}",
                    registration.name,
                    registration.name,
                    name.key()
                ),
            )
        };
        if let Some(sources) = &hook.tls_sources {
            hook.tls = Some(self.hook_tls(sources).map_err(cannot)?);
        }
        let Some(credentials) = &hook.credentials else {
            return Ok(hook);
        };
        let value = |secret: &(String, String), key: &str, what: &str| {
            self.secret_value(secret, key, what)
                .map(|bytes| String::from_utf8_lossy(&bytes).trim().to_owned())
        };
        let header = match credentials {
            Credentials::Authorization {
                scheme,
                secret,
                key,
            } => value(secret, key, "authorization").map(|v| format!("{scheme} {v}")),
            Credentials::Basic { secret, keys } => {
                value(secret, &keys.0, "basicAuth").and_then(|user| {
                    if user.contains(':') {
                        return Err("basicAuth username must not contain ':'".to_owned());
                    }
                    let password = value(secret, &keys.1, "basicAuth")?;
                    use base64::Engine;
                    Ok(format!(
                        "Basic {}",
                        base64::engine::general_purpose::STANDARD
                            .encode(format!("{user}:{password}"))
                    ))
                })
            }
        };
        hook.authorization = Some(header.map_err(cannot)?);
        Ok(hook)
    }

    /// A key of a Secret, decoded, as the webhook executor reads it.
    fn secret_value(
        &self,
        (namespace, secret): &(String, String),
        key: &str,
        what: &str,
    ) -> Result<Vec<u8>, String> {
        let object = self.get("v1", "Secret", namespace, secret).ok_or_else(|| {
            format!("can't get {what} secret {namespace}/{secret}: secrets \"{secret}\" not found")
        })?;
        let encoded = object
            .pointer(&format!(
                "/data/{}",
                key.replace('~', "~0").replace('/', "~1")
            ))
            .and_then(Value::as_str)
            .ok_or_else(|| {
                format!("{what} secret {namespace}/{secret} does not contain key {key:?}")
            })?;
        use base64::Engine;
        base64::engine::general_purpose::STANDARD
            .decode(encoded)
            .map_err(|e| {
                format!("{what} secret {namespace}/{secret}: key {key:?} is not base64: {e}")
            })
    }

    /// The CA bundle and client certificate a webhook's `caBundle` and `clientTLS` name,
    /// read from the registration, Secrets and ConfigMaps in the cluster.
    fn hook_tls(
        &self,
        sources: &crate::registration::TlsSources,
    ) -> Result<crate::tls::HookTls, String> {
        use crate::registration::CaSource;
        let ca_pem = match &sources.ca {
            None => None,
            Some(CaSource::Inline(pem)) => Some(pem.as_bytes().to_vec()),
            Some(CaSource::Secret(namespace, name, key)) => {
                Some(self.secret_value(&(namespace.clone(), name.clone()), key, "caBundle")?)
            }
            Some(CaSource::ConfigMap(namespace, name, key)) => {
                let object = self.get("v1", "ConfigMap", namespace, name).ok_or_else(|| {
                    format!(
                        "can't get caBundle configmap {namespace}/{name}: configmaps \"{name}\" not found"
                    )
                })?;
                let text = object
                    .get("data")
                    .and_then(|d| d.get(key))
                    .and_then(Value::as_str)
                    .ok_or_else(|| {
                        format!(
                            "caBundle configmap {namespace}/{name} does not contain key {key:?}"
                        )
                    })?;
                Some(text.as_bytes().to_vec())
            }
        };
        let client = match &sources.client {
            None => None,
            Some((secret, cert_key, key_key)) => Some((
                self.secret_value(secret, cert_key, "clientTLS")?,
                self.secret_value(secret, key_key, "clientTLS")?,
            )),
        };
        Ok(crate::tls::HookTls { ca_pem, client })
    }
}

/// The registration's hook of that name, or the finding that it has none.
fn registered_hook(registration: &Registration, name: HookName) -> Result<Hook, Problem> {
    registration.hooks.get(&name).cloned().ok_or_else(|| {
        (
            Rule::NotEmulated,
            format!("{}: no {} hook registered", registration.name, name.key()),
        )
    })
}

/// The failed writes of one apply as one finding: the first's rule, every message.
fn joined(failed: Vec<Problem>) -> Option<Problem> {
    let mut failed = failed.into_iter();
    let (rule, first) = failed.next()?;
    let mut message = first;
    for (_, more) in failed {
        message.push_str("; ");
        message.push_str(&more);
    }
    Some((rule, message))
}

/// What an applied answer did wrong, in order: writes that failed, a null answer (with
/// the children it deleted), children deleted and asked for again.
fn findings(
    hook_name: HookName,
    managed: super::children::Managed,
    null_answer_deleted: Option<usize>,
    finalizing: bool,
) -> Result<(), Problem> {
    if let Some(problem) = joined(managed.failed) {
        return Err(problem);
    }
    if let Some(deleted) = null_answer_deleted {
        return Err((
            Rule::AllChildrenDeleted,
            format!(
                "the {} answer was null: Metacontroller decodes it as an empty answer, so it deleted every child ({deleted} here) and cleared the status; a hook with nothing to change answers the observed children",
                hook_name.key()
            ),
        ));
    }
    let dropped = managed.dropped;
    if !finalizing && !dropped.is_empty() {
        let names: Vec<String> = dropped.iter().map(describe).collect();
        return Err((
            Rule::ChildDropped,
            format!(
                "the {} answer asked again for {}, which an earlier answer for this unchanged parent had left out, so Metacontroller deleted it and created it anew (an answer that flaps deletes what runs)",
                hook_name.key(),
                names.join(", ")
            ),
        ));
    }
    Ok(())
}
