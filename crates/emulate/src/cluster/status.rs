//! What an answer writes on its parent: a composite parent's status, a decorator's
//! labels, annotations and status on its target.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::{Emulator, RoundReport};
use crate::Key;
use crate::findings::{Problem, Rule};

impl Emulator {
    /// updateParentStatus: the answer's status with observedGeneration, written as the
    /// API server keeps it. Under the parent's CRD, status is pruned by its structural
    /// schema and a wrong type refused (the sync fails, nothing written); without a
    /// status subresource the write is a plain update, which bumps the generation.
    pub(super) fn write_composite_status(
        &mut self,
        parent_key: &Key,
        response: &Value,
        report: &mut RoundReport,
    ) -> Option<Problem> {
        let crd = self.kinds.crd_status(&parent_key.0, &parent_key.1);
        let parent = self.objects.get_mut(parent_key)?;
        let generation = parent
            .pointer("/metadata/generation")
            .cloned()
            .unwrap_or(json!(1));
        // updateParentStatus (pkg/controller/composite): a missing or null status is an
        // empty one, and observedGeneration is always written.
        let mut status = response
            .get("status")
            .filter(|s| s.is_object())
            .cloned()
            .unwrap_or(json!({}));
        if let Some(map) = status.as_object_mut() {
            map.insert("observedGeneration".to_owned(), generation);
        }
        // Metacontroller compares what it would write with what is stored; the API
        // server then prunes what it is sent.
        if parent.get("status") == Some(&status) {
            return None;
        }
        if let Some(schema) = crd.as_ref().and_then(|crd| crd.schema.as_ref()) {
            let mut errors = Vec::new();
            super::structural::prune(&mut status, schema, "status", &mut errors);
            if !errors.is_empty() {
                let group = parent_key.0.rsplit_once('/').map_or("", |(group, _)| group);
                let shown = if errors.len() == 1 {
                    errors.remove(0)
                } else {
                    format!("[{}]", errors.join(", "))
                };
                return Some((
                    Rule::APIServerRefused,
                    format!(
                        "{}.{group} {:?} is invalid: {shown} (the status update failed with 422)",
                        parent_key.1, parent_key.3
                    ),
                ));
            }
        }
        if parent.get("status") != Some(&status) {
            let before = parent.get("status").cloned().unwrap_or(Value::Null);
            if let Some(field) = crate::answers::changed_field(&before, &status) {
                report
                    .changed_at
                    .insert(parent_key.clone(), format!("/status{field}"));
            }
            parent["status"] = status;
            if crd.is_some_and(|crd| !crd.subresource) {
                let next = parent
                    .pointer("/metadata/generation")
                    .and_then(Value::as_i64)
                    .unwrap_or(1)
                    + 1;
                parent["metadata"]["generation"] = json!(next);
            }
            self.next_version += 1;
            parent["metadata"]["resourceVersion"] = json!(self.next_version.to_string());
            report.status_changed.push(parent_key.clone());
        }
        None
    }

    pub(super) fn write_decorator_result(
        &mut self,
        target_key: &Key,
        response: &Value,
        report: &mut RoundReport,
    ) {
        // What the hook set on its target, for the report (its latest answer's).
        let set: BTreeMap<String, String> = ["labels", "annotations"]
            .iter()
            .flat_map(|field| {
                response
                    .get(*field)
                    .and_then(Value::as_object)
                    .into_iter()
                    .flatten()
                    .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_owned())))
            })
            .collect();
        if set.is_empty() {
            self.decorated.remove(target_key);
        } else {
            self.decorated.insert(target_key.clone(), set);
        }
        // Labels and annotations written in place: a merge over this target is redone.
        self.settled.remove(target_key);
        let Some(target) = self.objects.get_mut(target_key) else {
            return;
        };
        let before = target.clone();
        write_labels_and_annotations(target, response);
        if let Some(status) = response.get("status").filter(|s| s.is_object())
            && let Some(map) = target.as_object_mut()
        {
            map.insert("status".to_owned(), status.clone());
        }
        if *target != before {
            if let Some(field) = crate::answers::changed_field(&before, target) {
                report.changed_at.insert(target_key.clone(), field);
            }
            report.status_changed.push(target_key.clone());
        }
    }
}

/// A decorator's labels and annotations written on its target in place (null removes).
fn write_labels_and_annotations(target: &mut Value, response: &Value) {
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
}
