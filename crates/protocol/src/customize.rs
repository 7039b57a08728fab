//! Customize hook request and response (protocol §5).

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// `{"controller": ..., "parent": ...}`; for a decorator `parent` is the target object.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
pub struct CustomizeRequest {
    /// The controller registration.
    #[serde(default)]
    pub controller: Value,
    /// The parent (or decorated target).
    #[serde(default)]
    pub parent: Value,
}

/// Which related objects to send with every sync.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CustomizeResponse {
    /// The rules selecting them.
    #[serde(default)]
    pub related_resources: Vec<RelatedResourceRule>,
}

/// One "also send me these objects" rule. Selectors stay JSON because Metacontroller
/// decodes them strictly and we only pass them through.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RelatedResourceRule {
    /// apiVersion of the related objects.
    pub api_version: String,
    /// Plural resource name (`secrets`).
    pub resource: String,
    /// Select by labels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_selector: Option<Value>,
    /// Select namespaces by labels (not with `namespace`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_selector: Option<Value>,
    /// Only this namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Only these names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub names: Option<Vec<String>>,
}
