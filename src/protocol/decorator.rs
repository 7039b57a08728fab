//! DecoratorController sync/finalize request and response (protocol §4).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{ObjectMap, null_as_default};

/// The body Metacontroller POSTs to a DecoratorController's sync or finalize hook.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DecoratorRequest {
    #[serde(default)]
    pub controller: Value,
    /// The decorated target object.
    #[serde(default)]
    pub object: Value,
    #[serde(default, deserialize_with = "null_as_default")]
    pub attachments: ObjectMap,
    #[serde(default, deserialize_with = "null_as_default")]
    pub related: ObjectMap,
    #[serde(default, deserialize_with = "null_as_default")]
    pub finalizing: bool,
}

/// What a decorator hook answers. Label and annotation values of `None` delete the key;
/// an absent `status` leaves the target's status alone; `attachments` is the full set.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DecoratorResponse {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<BTreeMap<String, Option<String>>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<BTreeMap<String, Option<String>>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attachments: Option<Vec<Value>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// Kept as a JSON number so a value read back is written unchanged (`30`, not `30.0`).
    pub resync_after_seconds: Option<serde_json::Number>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finalized: Option<bool>,
}
