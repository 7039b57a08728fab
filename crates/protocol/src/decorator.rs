//! DecoratorController sync/finalize request and response (protocol §4).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{ObjectMap, null_as_default};

/// The body Metacontroller POSTs to a DecoratorController's sync or finalize hook.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DecoratorRequest {
    /// The controller registration.
    #[serde(default)]
    pub controller: Value,
    /// The decorated target object.
    #[serde(default)]
    pub object: Value,
    /// The attachments that exist, by type then name.
    #[serde(default, deserialize_with = "null_as_default")]
    pub attachments: ObjectMap,
    /// Related objects the customize hook asked for.
    #[serde(default, deserialize_with = "null_as_default")]
    pub related: ObjectMap,
    /// True when the target is being deleted or no longer matches.
    #[serde(default, deserialize_with = "null_as_default")]
    pub finalizing: bool,
}

/// What a decorator hook answers. Label and annotation values of `None` delete the key;
/// an absent `status` leaves the target's status alone; `attachments` is the full set.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DecoratorResponse {
    /// Labels to set on the target (null removes one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<BTreeMap<String, Option<String>>>,
    /// Annotations to set on the target (null removes one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<BTreeMap<String, Option<String>>>,
    /// Status to set on the target (rarely used).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<Value>,
    /// Every attachment that should exist.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attachments: Option<Vec<Value>>,
    /// Kept as a JSON number so a value read back is written unchanged (`30`, not `30.0`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resync_after_seconds: Option<serde_json::Number>,
    /// With finalize: the target may go.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finalized: Option<bool>,
}
