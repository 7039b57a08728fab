//! Customize hook request and response (protocol §5).

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// `{"controller": ..., "parent": ...}`; for a decorator `parent` is the target object.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
pub struct CustomizeRequest {
    #[serde(default)]
    pub controller: Value,
    #[serde(default)]
    pub parent: Value,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CustomizeResponse {
    #[serde(default)]
    pub related_resources: Vec<RelatedResourceRule>,
}

/// One "also send me these objects" rule. Selectors stay JSON because Metacontroller
/// decodes them strictly and we only pass them through.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RelatedResourceRule {
    pub api_version: String,
    pub resource: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_selector: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_selector: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub names: Option<Vec<String>>,
}
