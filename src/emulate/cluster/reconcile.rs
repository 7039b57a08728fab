//! One parent's sync or finalize call, as Metacontroller makes it, and what it does with the answer.

use serde_json::{Value, json};

use super::checks::{check_child, check_response};
use super::*;

impl Emulator {
    /// Finalizer bookkeeping → request → a stable answer → its checks → children,
    /// status, resync and finalizer removal, as Metacontroller does them.
    pub(super) async fn reconcile(
        &mut self,
        registration: &Registration,
        parent_key: &Key,
        report: &mut RoundReport,
    ) -> Result<(), Problem> {
        let Some(mut parent) = self.objects.get(parent_key).cloned() else {
            return Ok(());
        };
        // makeSelector (pkg/controller/composite): without generateSelector, a parent
        // needs a non-empty spec.selector, or no hook is called at all.
        if registration.type_ == ControllerType::Composite
            && !registration.generate_selector
            && !has_selector(&parent)
        {
            return Err((
                Rule::InvalidParent,
                format!(
                    "{}: .spec.selector must have either matchLabels, matchExpressions, or both (Metacontroller calls no hook for this parent; or set generateSelector)",
                    describe(parent_key)
                ),
            ));
        }
        let finalizer = registration.finalizer();
        let finalizing = self.mark_for_finalize(registration, parent_key, &mut parent, &finalizer);
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
        let related = self.related(registration, &parent, &hook.version).await?;
        self.claim_children(registration, &parent);
        let owned = self.owned_by(registration, &parent);
        let observed = self.object_map(registration, &parent, &owned, &hook.version);
        let (root_field, observed_field, desired_field) = match registration.type_ {
            ControllerType::Composite => ("parent", "children", "children"),
            ControllerType::Decorator => ("object", "attachments", "attachments"),
        };
        let request = json!({
            "controller": registration.raw,
            root_field: parent,
            observed_field: observed,
            "related": related,
            "finalizing": finalizing,
        });
        let response = self
            .stable_answer(registration, &hook, hook_name, &request, &parent)
            .await?;
        check_response(registration, &hook, &response)?;
        let desired: Vec<Value> = response
            .get(desired_field)
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        for child in &desired {
            check_child(registration, &parent, child).map_err(|m| (Rule::InvalidChild, m))?;
        }
        // Children are managed while the parent is alive, or pending deletion with a
        // finalize hook (syncParentObject); a terminating parent without one only gets
        // its status written.
        let terminating = parent.pointer("/metadata/deletionTimestamp").is_some();
        let dropped = if !terminating || finalizing {
            self.manage_children(registration, &parent, owned, desired, report)?
        } else {
            Vec::new()
        };
        match registration.type_ {
            ControllerType::Composite => self.write_composite_status(parent_key, &response, report),
            ControllerType::Decorator => self.write_decorator_result(parent_key, &response, report),
        }
        self.note_resync(registration, parent_key, &response, report);
        // Metacontroller removes its finalizer whenever an answer says `finalized: true`,
        // from the sync hook as well as from finalize (composite/controller.go).
        if response.get("finalized").and_then(Value::as_bool) == Some(true) {
            self.finalized(parent_key, &finalizer, report);
        }
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

    /// Adds the finalizer a parent needs before its first sync; true when this call is a
    /// finalize (the parent is being deleted, or a decorator's target opted out).
    fn mark_for_finalize(
        &mut self,
        registration: &Registration,
        parent_key: &Key,
        parent: &mut Value,
        finalizer: &str,
    ) -> bool {
        let deleting = parent.pointer("/metadata/deletionTimestamp").is_some();
        let opted_out = registration.type_ == ControllerType::Decorator
            && !registration
                .parents
                .iter()
                .any(|(_, _, rule)| matches_rule(rule, parent));
        let has_finalize = registration.hooks.contains_key(&HookName::Finalize);
        if has_finalize && !deleting && !opted_out && !has_finalizer(parent, finalizer) {
            add_finalizer(parent, finalizer);
            self.put(parent_key.clone(), parent.clone());
        }
        has_finalize && (deleting || opted_out)
    }

    /// Metacontroller may call again with the same state at any time; the answer must
    /// be byte-identical, apart from transition times stamped in this very answer.
    /// State outside the request (a background fetch landing) may move once between two
    /// calls, so a difference is confirmed with a third call before it counts.
    async fn stable_answer(
        &mut self,
        registration: &Registration,
        hook: &Hook,
        hook_name: HookName,
        request: &Value,
        parent: &Value,
    ) -> Result<Value, Problem> {
        let parent_name = qualified_name(parent);
        let (first_text, first) = self
            .call(registration, hook, hook_name, request, &parent_name)
            .await?;
        let (again_text, again) = self
            .call(registration, hook, hook_name, request, &parent_name)
            .await?;
        if same_answer(parent, (&first_text, &first), (&again_text, &again)) {
            return Ok(again);
        }
        let (third_text, third) = self
            .call(registration, hook, hook_name, request, &parent_name)
            .await?;
        if !same_answer(parent, (&again_text, &again), (&third_text, &third)) {
            return Err((
                Rule::UnstableAnswer,
                format!(
                    "{} answered two identical requests differently:\n{again}\n{third}",
                    hook_name.key()
                ),
            ));
        }
        Ok(third)
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
        if let Some(object) = self.objects.get_mut(parent_key)
            && has_finalizer(object, finalizer)
        {
            remove_finalizer(object, finalizer);
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

    pub(super) async fn call(
        &mut self,
        registration: &Registration,
        hook: &Hook,
        name: HookName,
        request: &Value,
        parent: &str,
    ) -> Result<(String, Value), Problem> {
        let body = request.to_string().into_bytes();
        let replica = self.current_replica;
        let started = std::time::Instant::now();
        let posted = self
            .transport
            .post(replica, &hook.path, body, self.now(), hook.timeout)
            .await;
        // A call that got no answer is still a call made (status 0 in the timeline).
        let (status, elapsed) = match &posted {
            Ok(answer) => (answer.status, answer.elapsed),
            Err(_) => (0, started.elapsed()),
        };
        self.calls.push(CallRecord {
            round: self.rounds,
            controller: registration.name.clone(),
            hook: name.key(),
            parent: parent.to_owned(),
            status,
            replica,
            millis: elapsed.as_secs_f64() * 1000.0,
        });
        let answer = posted.map_err(|e| (Rule::NonOkAnswer, e))?;
        let text = String::from_utf8_lossy(&answer.body).into_owned();
        if answer.status == 429 {
            // TooManyRequestError (pkg/hooks/webhook.go): Retry-After in seconds or as an
            // HTTP date; the parent is requeued after it (composite/controller.go sync).
            let seconds = answer
                .retry_after
                .as_deref()
                .and_then(|v| v.trim().parse::<f64>().ok())
                .unwrap_or(0.0);
            self.last_retry_after = Some(seconds);
            return Err((
                Rule::Throttled,
                format!(
                    "{} kept answering 429 (Retry-After {seconds} s): {text:.200}",
                    name.key()
                ),
            ));
        }
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
        if hook.strict
            && let Some(path) = crate::emulate::answers::duplicate_key(&text)
        {
            return Err((
                Rule::StrictDecoding,
                format!("strict decoding failed: duplicate field {path:?} in the answer"),
            ));
        }
        Ok((text, value))
    }
}

/// Whether `spec.selector` has matchLabels or matchExpressions.
fn has_selector(parent: &Value) -> bool {
    let non_empty = |field: &str| {
        parent
            .pointer(&format!("/spec/selector/{field}"))
            .is_some_and(|v| {
                v.as_object().is_some_and(|m| !m.is_empty())
                    || v.as_array().is_some_and(|a| !a.is_empty())
            })
    };
    non_empty("matchLabels") || non_empty("matchExpressions")
}
