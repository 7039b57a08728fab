//! Keeping what runs when there is nothing better to build it from.
//!
//! A child missing from an answer is deleted, so when a controller cannot build its
//! children (the spec is unreadable, no config has been fetched yet, the credentials are
//! gone) it answers with the children that exist, as they exist.

use serde_json::{Map, Value};

use crate::protocol::ObjectMap;

use crate::protocol::{LAST_APPLIED_ANNOTATION, NOT_DESIRED_METADATA};

/// Every observed child, as an answer may carry it: our previous answer where
/// Metacontroller recorded it (client-side apply keeps it in an annotation), otherwise the
/// observed object without status and server-populated metadata (server-side apply keeps
/// no such record). Never fails: what runs stays.
pub fn observed_children(observed: &ObjectMap) -> Vec<Value> {
    observed
        .0
        .values()
        .flat_map(|group| group.values())
        .map(|child| last_applied(child).unwrap_or_else(|| as_desired(child)))
        .collect()
}

fn last_applied(child: &Value) -> Option<Value> {
    child
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(LAST_APPLIED_ANNOTATION))
        .and_then(Value::as_str)
        .and_then(|text| serde_json::from_str::<Value>(text).ok())
        .filter(Value::is_object)
}

/// The observed object stripped of what only the server may write.
fn as_desired(child: &Value) -> Value {
    let mut object: Map<String, Value> = child.as_object().cloned().unwrap_or_default();
    object.remove("status");
    if let Some(Value::Object(metadata)) = object.get_mut("metadata") {
        for field in NOT_DESIRED_METADATA {
            metadata.remove(field);
        }
        if let Some(Value::Object(annotations)) = metadata.get_mut("annotations") {
            annotations.remove(LAST_APPLIED_ANNOTATION);
            if annotations.is_empty() {
                metadata.remove("annotations");
            }
        }
    }
    Value::Object(object)
}

/// The parent's observed status without `observedGeneration` (Metacontroller adds it),
/// for finalize answers that should not disturb what status says.
pub fn observed_status(parent: &Value) -> serde_json::Map<String, Value> {
    let mut status = parent
        .get("status")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    status.remove("observedGeneration");
    status
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn last_applied_wins_and_server_fields_are_dropped_otherwise() {
        let observed: ObjectMap = serde_json::from_value(json!({
            "ConfigMap.v1": {
                "a": {"apiVersion": "v1", "kind": "ConfigMap",
                      "metadata": {"name": "a", "uid": "u", "resourceVersion": "9",
                                   "annotations": {LAST_APPLIED_ANNOTATION: "{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{\"name\":\"a\"},\"data\":{\"k\":\"old\"}}"}},
                      "data": {"k": "old", "extra": "defaulted"}}
            },
            "Deployment.apps/v1": {
                "web": {"apiVersion": "apps/v1", "kind": "Deployment",
                        "metadata": {"name": "web", "uid": "u2", "generation": 3, "creationTimestamp": "t",
                                     "managedFields": [], "ownerReferences": [{"uid": "p"}],
                                     "labels": {"app": "web"}, "annotations": {"team": "a"}},
                        "spec": {"replicas": 2}, "status": {"readyReplicas": 2}}
            }
        }))
        .unwrap_or_default();
        let kept = observed_children(&observed);
        assert_eq!(kept.len(), 2);
        assert!(kept.contains(&json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}, "data": {"k": "old"}})));
        assert!(
            kept.contains(&json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "labels": {"app": "web"}, "annotations": {"team": "a"}},
            "spec": {"replicas": 2}}))
        );
    }
}
