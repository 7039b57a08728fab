//! Keeping what runs when the parent's spec cannot be read at all.

use serde_json::Value;

use crate::error::HookError;
use crate::protocol::{ObjectMap, object_name};

const LAST_APPLIED: &str = "metacontroller.k8s.io/last-applied-configuration";

/// Exactly what we asked for last time: Metacontroller's last-applied annotation on each
/// observed child is our previous answer. If any child lacks it (server-side apply mode),
/// the set cannot be rebuilt faithfully, so this is an error — a non-200 changes nothing,
/// where a 200 with fewer children would delete them.
pub fn last_applied_children(observed: &ObjectMap) -> Result<Vec<Value>, HookError> {
    let mut kept = Vec::new();
    for group in observed.0.values() {
        for child in group.values() {
            let applied = child
                .pointer("/metadata/annotations")
                .and_then(|a| a.get(LAST_APPLIED))
                .and_then(Value::as_str)
                .and_then(|text| serde_json::from_str::<Value>(text).ok())
                .ok_or_else(|| {
                    HookError::Internal(format!(
                        "the parent's spec cannot be read and child {} has no last-applied configuration to keep; refusing to answer so nothing is deleted",
                        object_name(child).unwrap_or("<unnamed>")
                    ))
                })?;
            kept.push(applied);
        }
    }
    Ok(kept)
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
