//! Applying an answer's children (or a decorator's attachments) as Metacontroller's
//! `ManageChildren` does: created, updated by their update strategy, or deleted.

use std::collections::BTreeMap;

use metahooks_protocol::LAST_APPLIED_ANNOTATION;
use serde_json::{Value, json};

use super::checks::{child_refusal, create_refusal};
use super::{Emulator, Identity, RoundReport, describe, parent_identity};
use crate::findings::{Problem, Rule};
use crate::objects::{apply_server_defaults, owner_uid, three_way};
use crate::registration::{ControllerType, Registration};
use crate::{Key, key_of};

/// What managing a parent's children did: the children deleted and asked for again
/// (`dropped`), and the writes that failed, each a finding.
#[derive(Default)]
pub(super) struct Managed {
    pub(super) dropped: Vec<Key>,
    pub(super) failed: Vec<Problem>,
}

impl Emulator {
    /// Deletes the owned children the answer left out and writes the desired ones. Like
    /// Metacontroller's `ManageChildren`, a write that fails does not stop the others:
    /// each failure is kept and the caller goes on to write the parent's status.
    pub(super) fn manage_children(
        &mut self,
        registration: &Registration,
        parent: &Value,
        owned: Vec<Key>,
        desired: Vec<Value>,
        report: &mut RoundReport,
    ) -> Managed {
        let identity = parent_identity(parent);
        let mut managed = Managed::default();
        let mut accepted = Vec::with_capacity(desired.len());
        let mut churned = Vec::new();
        for child in desired {
            let (api_version, kind, ..) = key_of(&child);
            let cluster_scoped = self.kinds.is_cluster_scoped(&kind);
            let refusal = self
                .kinds
                .unserved(&api_version, &kind)
                .or_else(|| child_refusal(parent, &child, cluster_scoped));
            if let Some(message) = refusal {
                managed.failed.push((Rule::InvalidChild, message));
                continue;
            }
            match other_version(registration, &child) {
                Some((listed, message)) => {
                    // The API server keeps one object whatever the version it is written
                    // at; what Metacontroller observes is the listed version's view.
                    managed.failed.push((Rule::ChildAtAnotherVersion, message));
                    let mut child = child;
                    child["apiVersion"] = json!(listed);
                    churned.push(key_of(&child));
                    accepted.push(child);
                }
                None => accepted.push(child),
            }
        }
        let desired_by_key = self.as_written(registration, accepted, &key_of(parent).2);
        self.delete_undesired(owned, &desired_by_key, identity, report);
        for (key, child) in desired_by_key {
            // applyNamespaceDefaults gives a namespaced child of a cluster-scoped parent
            // no namespace; the API server refuses to create it.
            if key.2.is_empty() && !self.kinds.is_cluster_scoped(&key.1) {
                managed.failed.push((
                    Rule::APIServerRefused,
                    format!(
                        "{} {}: an empty namespace may not be set during creation (a namespaced child of a cluster-scoped parent needs metadata.namespace)",
                        key.1, key.3
                    ),
                ));
                continue;
            }
            // ManageChildren matches by exact version: the observed child (at the listed
            // version) is not desired and is deleted, and created again from the answer.
            if churned
                .iter()
                .any(|c| c.1 == key.1 && c.3 == key.3 && (c.2 == key.2 || c.2.is_empty()))
                && self.objects.contains_key(&key)
            {
                self.remove_with_dependents(&key);
                report.deleted.push(key.clone());
            }
            self.desired_under.insert(key.clone(), identity);
            // Dropped and asked for again with the parent unchanged all along: the child
            // was deleted for nothing and is recreated.
            if self.dropped_under.remove(&key).as_ref() == Some(&identity)
                && !self.objects.contains_key(&key)
            {
                managed.dropped.push(key.clone());
            }
            if let Err(problem) = self.write_child(registration, parent, key, child, report) {
                managed.failed.push(problem);
            }
        }
        managed
    }

    /// The desired children as Metacontroller writes them, by key: without status or a
    /// last-applied annotation of their own, a decorator's attachments marked with its
    /// name, and with the parent's namespace where a namespaced child names none.
    fn as_written(
        &self,
        registration: &Registration,
        desired: Vec<Value>,
        parent_namespace: &str,
    ) -> BTreeMap<Key, Value> {
        let mut by_key = BTreeMap::new();
        for mut child in desired {
            // A parent cannot set its children's status: Metacontroller reverts it to the
            // observed one on update (ApplyUpdate) and the API server drops it on create,
            // except for a custom resource whose CRD has no status subresource: there
            // status is part of the object, and is kept as created.
            let (api_version, kind, ..) = key_of(&child);
            let status_is_data = self
                .kinds
                .crd_status(&api_version, &kind)
                .is_some_and(|crd| !crd.subresource);
            if !status_is_data && let Some(map) = child.as_object_mut() {
                map.remove("status");
            }
            // nullifyLastAppliedAnnotation (pkg/controller/common/diff.go): an observed
            // child echoed back does not apply its own record.
            if let Some(annotations) = child
                .pointer_mut("/metadata/annotations")
                .and_then(Value::as_object_mut)
            {
                annotations.remove(LAST_APPLIED_ANNOTATION);
            }
            // syncParentObject (pkg/controller/decorator) marks every attachment before
            // ManageChildren, so the mark is part of what is applied.
            if registration.type_ == ControllerType::Decorator
                && let Some(meta) = child.get_mut("metadata").and_then(Value::as_object_mut)
                && let Some(annotations) = meta
                    .entry("annotations")
                    .or_insert_with(|| json!({}))
                    .as_object_mut()
            {
                annotations.insert(DECORATOR_ANNOTATION.to_owned(), json!(registration.name));
            }
            let kind = child
                .get("kind")
                .and_then(Value::as_str)
                .unwrap_or_default();
            if self.kinds.is_cluster_scoped(kind) {
                if let Some(meta) = child.get_mut("metadata").and_then(Value::as_object_mut) {
                    meta.remove("namespace");
                }
            } else if child
                .pointer("/metadata/namespace")
                .is_none_or(|ns| ns.as_str() == Some(""))
            {
                // applyNamespaceDefaults (pkg/controller/composite): the parent's namespace.
                child["metadata"]["namespace"] = json!(parent_namespace);
            }
            by_key.insert(key_of(&child), child);
        }
        by_key
    }

    /// Deletes the owned children the answer left out (those already terminating go on
    /// terminating).
    fn delete_undesired(
        &mut self,
        owned: Vec<Key>,
        desired: &BTreeMap<Key, Value>,
        identity: Identity,
        report: &mut RoundReport,
    ) {
        for key in owned {
            if desired.contains_key(&key) {
                continue;
            }
            let terminating = self
                .objects
                .get(&key)
                .is_some_and(|o| o.pointer("/metadata/deletionTimestamp").is_some());
            if terminating {
                continue;
            }
            // Left out while the parent is unchanged: a hook may mean it (a step
            // replaced by the next); only asking for it again below is certain.
            if self.desired_under.get(&key) == Some(&identity) {
                self.dropped_under.insert(key.clone(), identity);
            }
            self.desired_under.remove(&key);
            self.remove_with_dependents(&key);
            report.deleted.push(key);
        }
    }

    /// Creates or updates one desired child, by its child rule's update strategy (DynamicApply
    /// in pkg/controller/common/manage_children.go).
    fn write_child(
        &mut self,
        registration: &Registration,
        parent: &Value,
        key: Key,
        child: Value,
        report: &mut RoundReport,
    ) -> Result<(), Problem> {
        let Some(live) = self.objects.get(&key) else {
            return self.create_desired(parent, key, child, report);
        };
        let Some(rule) = registration.child_rule(&key.0, &key.1) else {
            let why = format!(
                "is not a child type of {} (not in childResources or attachments)",
                registration.name
            );
            return self.unobserved_exists(&key, live, &child, &why);
        };
        // claimChildren lists a namespaced parent's children in its namespace only: a
        // cluster-scoped one is never observed, so never updated nor deleted.
        if !key_of(parent).2.is_empty() && key.2.is_empty() {
            let why = "is cluster-scoped, and a namespaced parent's children are listed in its namespace only (claimChildren)";
            return self.unobserved_exists(&key, live, &child, why);
        }
        check_owner(live, parent, &key)?;
        // "Not updating … Pending deletion of child object".
        if live.pointer("/metadata/deletionTimestamp").is_some() {
            return Ok(());
        }
        // Merged from borrowed state: in a steady state nothing changes, and the
        // live object is cloned only when it is written. A child whose merge was a
        // no-op, untouched since and asked for unchanged, would merge to a no-op
        // again (the merge is a function of the three), so it is not merged.
        if self.settled.contains(&key) && self.last_applied.get(&key) == Some(&child) {
            return Ok(());
        }
        let merged = self.merged(&key, live, &child)?;
        if merged == *live {
            self.settled.insert(key.clone());
            self.last_applied.insert(key, child);
            return Ok(());
        }
        match rule.strategy.as_str() {
            "OnDelete" | "" => {}
            "Recreate" | "RollingRecreate" => {
                self.remove_with_dependents(&key);
                report.deleted.push(key);
            }
            _ => {
                if let Some(refusal) = self.api_server_refusal(&merged, &child, Some(live)) {
                    return Err((Rule::APIServerRefused, refusal));
                }
                let live = live.clone();
                let updated = self.update_child(&live, merged);
                if let Some(field) = crate::answers::changed_field(&live, &updated) {
                    report.changed_at.insert(key.clone(), field);
                }
                self.put(key.clone(), updated);
                self.annotate_applied(&key, &child);
                self.last_applied.insert(key.clone(), child);
                report.updated.push(key);
            }
        }
        Ok(())
    }

    /// ApplyUpdate: the three-way merge over what was last applied (read, as
    /// Metacontroller reads it, from the live object's annotation; server-side apply
    /// keeps it as its field ownership), then the server-set metadata and the status
    /// reverted to the live object's, so an echoed observed child changes nothing there.
    pub(super) fn merged(&self, key: &Key, live: &Value, child: &Value) -> Result<Value, Problem> {
        let previous = if self.server_side_apply {
            self.last_applied.get(key).cloned().unwrap_or(Value::Null)
        } else {
            last_applied_of(live).map_err(|problem| {
                (
                    Rule::InvalidChild,
                    format!(
                        "{}: {problem} (Metacontroller cannot update it)",
                        describe(key)
                    ),
                )
            })?
        };
        Ok(apply_update(live, &previous, child))
    }

    /// A desired child that exists but that Metacontroller never observes (a type the
    /// registration does not list, or a cluster-scoped child of a namespaced parent): it
    /// creates it again, the API server answers AlreadyExists and Metacontroller lets that
    /// go. A change the answer makes to it is never applied.
    fn unobserved_exists(
        &self,
        key: &Key,
        live: &Value,
        child: &Value,
        why: &str,
    ) -> Result<(), Problem> {
        let previous = last_applied_of(live).unwrap_or(Value::Null);
        if apply_update(live, &previous, child) == *live {
            return Ok(());
        }
        Err((
            Rule::UnlistedChild,
            format!(
                "{} {why}: Metacontroller created it, but never updates or deletes it, so this answer's change to it is not applied",
                describe(key),
            ),
        ))
    }

    /// Creates a desired child that does not exist yet, owned as `claimOwnership` owns it.
    fn create_desired(
        &mut self,
        parent: &Value,
        key: Key,
        child: Value,
        report: &mut RoundReport,
    ) -> Result<(), Problem> {
        let mut claimed = child.clone();
        claim_ownership(parent, &mut claimed);
        if let Some(refusal) = create_refusal(&claimed, self.server_side_apply)
            .or_else(|| self.api_server_refusal(&claimed, &child, None))
        {
            return Err((Rule::APIServerRefused, refusal));
        }
        let created = self.create_child(claimed);
        self.annotate_applied(&created, &child);
        self.last_applied.insert(key, child);
        report.created.push(created);
        Ok(())
    }

    /// What the API server would answer to writing `candidate` (over `live` on update),
    /// with the last-applied annotation client-side apply adds for `desired`.
    fn api_server_refusal(
        &self,
        candidate: &Value,
        desired: &Value,
        live: Option<&Value>,
    ) -> Option<String> {
        let mut probe = candidate.clone();
        if !self.server_side_apply
            && let Some(meta) = probe.get_mut("metadata").and_then(Value::as_object_mut)
        {
            meta.entry("annotations").or_insert_with(|| json!({}))[LAST_APPLIED_ANNOTATION] =
                json!(desired.to_string());
        }
        let mut found = metahooks_apiserver::refusals(&probe);
        if let Some(live) = live {
            found.extend(metahooks_apiserver::immutable_changes(live, candidate));
        }
        (!found.is_empty()).then(|| {
            format!(
                "{} (the write fails; Metacontroller retries it at every sync)",
                found.join("; ")
            )
        })
    }

    /// Stores a child as the API server creates it: its own UID, version and timestamp
    /// (whatever the hook copied there), and the API server's defaults.
    fn create_child(&mut self, mut child: Value) -> Key {
        let uid = format!("uid-{:04}", self.next_uid);
        self.next_uid += 1;
        let version = self.bump_version();
        let now = self.now_text();
        let key = key_of(&child);
        let Some(meta) = child.get_mut("metadata").and_then(Value::as_object_mut) else {
            return key;
        };
        for field in metahooks_protocol::NOT_DESIRED_METADATA {
            if field != "ownerReferences" {
                meta.remove(field);
            }
        }
        meta.insert("uid".to_owned(), json!(uid));
        meta.insert("generation".to_owned(), json!(1));
        meta.insert("resourceVersion".to_owned(), json!(version));
        meta.insert("creationTimestamp".to_owned(), json!(now));
        apply_server_defaults(&mut child);
        self.put(key.clone(), child);
        key
    }

    /// The stored form of an update: `merged` (from [`apply_update`], defaults and all)
    /// with a new resourceVersion, and a new generation when the spec changed.
    fn update_child(&mut self, live: &Value, mut merged: Value) -> Value {
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
}

/// The annotation Metacontroller marks a decorator's attachments with.
const DECORATOR_ANNOTATION: &str = "metacontroller.k8s.io/decorator-controller";

/// `claimOwnership`: the parent's controller reference appended, unless the hook listed
/// a reference with the parent's UID already.
fn claim_ownership(parent: &Value, child: &mut Value) {
    let uid = parent
        .pointer("/metadata/uid")
        .cloned()
        .unwrap_or(Value::Null);
    let Some(meta) = child.get_mut("metadata").and_then(Value::as_object_mut) else {
        return;
    };
    let references = meta.entry("ownerReferences").or_insert_with(|| json!([]));
    let Some(references) = references.as_array_mut() else {
        return;
    };
    if references.iter().any(|r| r.get("uid") == Some(&uid)) {
        return;
    }
    references.push(json!({
        "apiVersion": parent["apiVersion"], "kind": parent["kind"],
        "name": parent["metadata"]["name"], "uid": uid,
        "controller": true, "blockOwnerDeletion": true,
    }));
}

/// The live object's last-applied annotation (`GetLastApplied`, pkg/dynamic/apply):
/// none is null; one that is not JSON fails the update.
fn last_applied_of(live: &Value) -> Result<Value, String> {
    let Some(text) = live
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(LAST_APPLIED_ANNOTATION))
        .and_then(Value::as_str)
        .filter(|t| !t.is_empty())
    else {
        return Ok(Value::Null);
    };
    serde_json::from_str(text)
        .map_err(|e| format!("can't unmarshal {LAST_APPLIED_ANNOTATION:?} annotation: {e}"))
}

/// ApplyUpdate's result as the API server would store it: the three-way merge, the
/// server-set fields reverted, the server's defaults filled in (so an update that stores
/// the same object — a Secret's stringData folded into the data it holds — is no change).
fn apply_update(live: &Value, previous: &Value, child: &Value) -> Value {
    let mut merged = three_way(live, previous, child);
    revert_server_fields(&mut merged, live);
    apply_server_defaults(&mut merged);
    merged
}

/// `revertObjectMetaSystemFields` and the status revert of ApplyUpdate: what the server
/// set stays as the live object has it, whatever the answer said.
fn revert_server_fields(merged: &mut Value, live: &Value) {
    const SYSTEM_FIELDS: [&str; 8] = [
        "selfLink",
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "managedFields",
    ];
    if let Some(meta) = merged.get_mut("metadata").and_then(Value::as_object_mut) {
        for field in SYSTEM_FIELDS {
            match live.pointer(&format!("/metadata/{field}")) {
                Some(value) => {
                    meta.insert(field.to_owned(), value.clone());
                }
                None => {
                    meta.remove(field);
                }
            }
        }
    }
    if let Some(map) = merged.as_object_mut() {
        match live.get("status") {
            Some(status) => {
                map.insert("status".to_owned(), status.clone());
            }
            None => {
                map.remove("status");
            }
        }
    }
}

/// Metacontroller updates only the children it controls for this parent; one owned by
/// another is a conflict it will not resolve by adopting.
fn check_owner(live: &Value, parent: &Value, key: &Key) -> Result<(), Problem> {
    let parent_uid = parent.pointer("/metadata/uid").and_then(Value::as_str);
    if owner_uid(live).as_deref() == parent_uid {
        return Ok(());
    }
    Err((
        Rule::OwnershipConflict,
        format!(
            "{} exists but belongs to another owner; Metacontroller will not adopt it",
            describe(key)
        ),
    ))
}

/// A desired child of a group and kind the registration lists at another version: the
/// listed apiVersion and the finding. ManageChildren keys observed and desired children
/// by exact group, version and kind (`MakeChildMap`), so the observed child (listed
/// version) is not desired and is deleted, and the desired one (other version) does not
/// exist and is created, on every sync.
fn other_version(registration: &Registration, child: &Value) -> Option<(String, String)> {
    let (api_version, kind, _, name) = key_of(child);
    let group = |v: &str| {
        v.rsplit_once('/')
            .map_or(String::new(), |(g, _)| g.to_owned())
    };
    let rule = registration
        .children
        .iter()
        .find(|rule| rule.kind == kind && group(&rule.api_version) == group(&api_version))?;
    (rule.api_version != api_version).then(|| {
        (
            rule.api_version.clone(),
            format!(
                "{kind} {name} is answered at {api_version}, but the registration lists {kind} at {}: Metacontroller matches children by exact version, so it deletes the observed {kind} and creates it again on every sync (answer it at {})",
                rule.api_version, rule.api_version
            ),
        )
    })
}
