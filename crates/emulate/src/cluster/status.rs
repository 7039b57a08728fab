//! What an answer writes on its parent: a composite parent's status, a decorator's
//! labels, annotations and status on its target.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::{Emulator, RoundReport};
use crate::Key;

impl Emulator {
    pub(super) fn write_composite_status(
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
        if parent.get("status") != Some(&status) {
            let before = parent.get("status").cloned().unwrap_or(Value::Null);
            if let Some(field) = crate::answers::changed_field(&before, &status) {
                report
                    .changed_at
                    .insert(parent_key.clone(), format!("/status{field}"));
            }
            parent["status"] = status;
            self.next_version += 1;
            parent["metadata"]["resourceVersion"] = json!(self.next_version.to_string());
            report.status_changed.push(parent_key.clone());
        }
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
