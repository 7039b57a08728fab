//! The `APIMock` custom resource (`apirator.io/v1alpha1`): a superset of APIrator
//! v1.0.1's spec, so existing CRs keep working unchanged.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ResourceRequirements;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// An OpenAPI document served by a mock server.
#[derive(CustomResource, Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[kube(
    group = "apirator.io",
    version = "v1alpha1",
    kind = "APIMock",
    root = "ApiMock",
    plural = "apimocks",
    singular = "apimock",
    shortname = "mock",
    namespaced,
    doc = "A mock server for an OpenAPI definition (APIrator-compatible)",
    status = "ApiMockStatus",
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"URL","type":"string","jsonPath":".status.url"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct ApiMockSpec {
    /// The OpenAPI document (Swagger 2.0, OpenAPI 3.0.x or 3.1.x) as YAML or JSON text.
    pub definition: String,
    /// The Service in front of the mock.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service: Option<ServiceSpec>,
    /// When set, a per-mock networking.k8s.io/v1 Ingress routes to the Service.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ingress: Option<IngressSpec>,
    /// Accepted for APIrator compatibility; definition edits always roll the mock.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(default = "default_watch")]
    pub watch: Option<bool>,
    /// Number of mock pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 100))]
    pub replicas: Option<i32>,
    /// Mock-server image; the server's --mock-image when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// Optional Swagger UI next to the mock.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub docs: Option<DocsSpec>,
    /// Resources of the mock container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
}

fn default_watch() -> Option<bool> {
    Some(true)
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServiceSpec {
    /// Service port named `http` (default 8000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 65535))]
    pub port: Option<i32>,
    /// Service type (default ClusterIP).
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub type_: Option<ServiceType>,
    /// Copied to the Service for NodePort and LoadBalancer types.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external_traffic_policy: Option<ExternalTrafficPolicy>,
    /// Copied to the Service's metadata.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<BTreeMap<String, String>>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
pub enum ServiceType {
    #[default]
    ClusterIP,
    NodePort,
    LoadBalancer,
}

impl ServiceType {
    pub fn as_str(self) -> &'static str {
        match self {
            ServiceType::ClusterIP => "ClusterIP",
            ServiceType::NodePort => "NodePort",
            ServiceType::LoadBalancer => "LoadBalancer",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
pub enum ExternalTrafficPolicy {
    Local,
    Cluster,
}

impl ExternalTrafficPolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            ExternalTrafficPolicy::Local => "Local",
            ExternalTrafficPolicy::Cluster => "Cluster",
        }
    }
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct IngressSpec {
    /// Host of the Ingress rule.
    pub hostname: String,
    /// HTTP path routed to the mock.
    pub path: String,
    /// Prefix (default), Exact or ImplementationSpecific.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path_type: Option<PathType>,
    /// spec.ingressClassName of the Ingress.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class_name: Option<String>,
    /// Copied to the Ingress's metadata.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<BTreeMap<String, String>>,
    /// TLS for the hostname.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<IngressTls>,
    /// Accepted for APIrator compatibility and ignored: cert-manager is driven by
    /// annotations (`ingress.annotations`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cert_manager: Option<bool>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
pub enum PathType {
    #[default]
    Prefix,
    Exact,
    ImplementationSpecific,
}

impl PathType {
    pub fn as_str(self) -> &'static str {
        match self {
            PathType::Prefix => "Prefix",
            PathType::Exact => "Exact",
            PathType::ImplementationSpecific => "ImplementationSpecific",
        }
    }
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct IngressTls {
    pub secret_name: String,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DocsSpec {
    /// Adds a Swagger UI container and a Service port named `docs`.
    #[serde(default)]
    pub enabled: bool,
}

/// What the controller reports. Metacontroller adds `observedGeneration`.
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApiMockStatus {
    /// Pending, Running or Error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "crate::crds::conditions_schema")]
    pub conditions: Vec<Value>,
    /// In-cluster URL of the mock.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// What the served definition is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub definition: Option<DefinitionStatus>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_replicas: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DefinitionStatus {
    /// The `openapi` or `swagger` version the document declares.
    pub version: String,
    pub title: String,
    /// Number of operations (method + path pairs).
    pub operations: u32,
    pub sha256: String,
}

/// Reads the spec of a parent object, naming the field that is wrong.
pub fn parse_spec(parent: &Value) -> Result<ApiMockSpec, String> {
    crate::controllers::common::spec::parse(parent)
}
