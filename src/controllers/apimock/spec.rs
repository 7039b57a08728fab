//! The `APIMock` custom resource (`apirator.io/v1alpha1`): a superset of APIrator
//! v1.0.1's spec, so existing CRs keep working unchanged.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ResourceRequirements;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::controllers::common::conditions::Condition;
use crate::controllers::common::source_spec::{GitSource, HttpSource};
use crate::controllers::common::spec::SpecError;

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
    printcolumn = r#"{"name":"External","type":"string","priority":1,"jsonPath":".status.externalUrl"}"#,
    printcolumn = r#"{"name":"Revision","type":"string","priority":1,"jsonPath":".status.revision"}"#,
    printcolumn = r#"{"name":"Operations","type":"integer","jsonPath":".status.definition.operations"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "(has(self.definition) && size(self.definition) > 0) != has(self.definitionFrom)",
    "message": "set exactly one of spec.definition and spec.definitionFrom"
}]))]
pub struct ApiMockSpec {
    /// The OpenAPI document (Swagger 2.0, OpenAPI 3.0.x or 3.1.x) as YAML or JSON text.
    /// Set this or `definitionFrom`, not both.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub definition: String,
    /// Where to read the definition from instead: git, HTTP or a ConfigMap key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub definition_from: Option<DefinitionFrom>,
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
    #[schemars(length(max = 1024))]
    pub image: Option<String>,
    /// Optional Swagger UI next to the mock.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub docs: Option<DocsSpec>,
    /// Resources of the mock container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
    /// How the mock answers (Prism's options); unset fields keep Prism's defaults.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mock: Option<MockSpec>,
}

/// Mock behaviour, mapped onto `prism mock` flags.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MockSpec {
    /// Generate responses from the schemas instead of returning examples (`--dynamic`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dynamic: Option<bool>,
    /// Seed for generated responses, so they are the same on every call (`--seed`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 64))]
    pub seed: Option<String>,
    /// A request or response that breaks the definition (an example that does not match
    /// its own schema, too) gets an error response instead of a best-effort answer
    /// carrying an `sl-violations` header (`--errors`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_on_violations: Option<bool>,
    /// CORS headers on every response (Prism's default: on).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cors: Option<bool>,
    /// Answer as if the definition had no examples (`--ignoreExamples`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ignore_examples: Option<bool>,
}

impl MockSpec {
    /// The `prism mock` flags this asks for; none for Prism's defaults, so existing CRs
    /// render exactly as before.
    pub fn prism_flags(&self) -> Vec<String> {
        let mut flags = Vec::new();
        if self.dynamic == Some(true) {
            flags.push("--dynamic".to_owned());
        }
        if let Some(seed) = &self.seed {
            flags.push(format!("--seed={seed}"));
        }
        if self.error_on_violations == Some(true) {
            flags.push("--errors".to_owned());
        }
        if self.cors == Some(false) {
            flags.push("--cors=false".to_owned());
        }
        if self.ignore_examples == Some(true) {
            flags.push("--ignoreExamples".to_owned());
        }
        flags
    }

    /// A seed must be a short printable word: it becomes a command-line argument.
    ///
    /// # Errors
    /// `spec.mock.seed` and what is wrong with it.
    pub fn check(&self) -> Result<(), SpecError> {
        if let Some(seed) = &self.seed {
            let printable = seed
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
            let starts_well = seed.starts_with(|c: char| c.is_ascii_alphanumeric());
            if seed.len() > 64 || !printable || !starts_well {
                return Err(SpecError::Field {
                    field: "spec.mock.seed".to_owned(),
                    problem: "use 1 to 64 letters, digits, '-', '_' or '.', starting with a letter or digit"
                        .to_owned(),
                });
            }
        }
        Ok(())
    }
}

/// A definition kept outside the CR. Exactly one of `git`, `http` and `configMapKeyRef`.
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DefinitionFrom {
    /// A file, or a directory holding a root document and the files its relative
    /// `$ref`s name, in a git repository.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub git: Option<GitSource>,
    /// One document over HTTP(S).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http: Option<HttpSource>,
    /// A key of a ConfigMap in the APIMock's namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map_key_ref: Option<ConfigMapKeyRef>,
    /// How often git and HTTP sources are polled, in seconds (default 60, minimum 10).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 10))]
    pub interval_seconds: Option<u32>,
}

impl DefinitionFrom {
    /// The poll period, within the allowed range.
    pub fn interval_seconds(&self) -> u64 {
        crate::controllers::common::polling::interval_seconds(self.interval_seconds.map(u64::from))
    }
}

/// A key of a ConfigMap.
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ConfigMapKeyRef {
    /// A ConfigMap in the APIMock's namespace (not the mock's own).
    #[schemars(length(max = 253))]
    pub name: String,
    /// The key of `data` holding the document.
    #[schemars(length(max = 253))]
    pub key: String,
}

fn default_watch() -> Option<bool> {
    Some(true)
}

/// The Service in front of the mock.
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
#[allow(missing_docs)] // the variants are the Kubernetes values they spell (a doc would turn the CRD enum into a oneOf)
pub enum ServiceType {
    #[default]
    ClusterIP,
    NodePort,
    LoadBalancer,
}

impl ServiceType {
    /// The value as Kubernetes spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            ServiceType::ClusterIP => "ClusterIP",
            ServiceType::NodePort => "NodePort",
            ServiceType::LoadBalancer => "LoadBalancer",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[allow(missing_docs)] // the variants are the Kubernetes values they spell (a doc would turn the CRD enum into a oneOf)
pub enum ExternalTrafficPolicy {
    Local,
    Cluster,
}

impl ExternalTrafficPolicy {
    /// The value as Kubernetes spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            ExternalTrafficPolicy::Local => "Local",
            ExternalTrafficPolicy::Cluster => "Cluster",
        }
    }
}

/// An Ingress routing to the mock.
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
    /// Have cert-manager issue the certificate: adds `kubernetes.io/tls-acme: "true"` and,
    /// without `tls`, a TLS entry with the Secret `<name>-tls`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cert_manager: Option<bool>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[allow(missing_docs)] // the variants are the Kubernetes values they spell (a doc would turn the CRD enum into a oneOf)
pub enum PathType {
    #[default]
    Prefix,
    Exact,
    ImplementationSpecific,
}

impl PathType {
    /// The value as Kubernetes spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            PathType::Prefix => "Prefix",
            PathType::Exact => "Exact",
            PathType::ImplementationSpecific => "ImplementationSpecific",
        }
    }
}

/// TLS of the Ingress.
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct IngressTls {
    /// The Secret holding the certificate.
    pub secret_name: String,
}

/// The Swagger UI container.
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
    /// `Fetched` (with `definitionFrom`), `Validated`, `Available`, `Ready`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "crate::controllers::common::conditions::conditions_schema")]
    pub conditions: Vec<Condition>,
    /// In-cluster URL of the mock.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// URL through the Ingress, when one is requested (https when it has TLS).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external_url: Option<String>,
    /// What the served definition is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub definition: Option<DefinitionStatus>,
    /// Where the served definition came from, with `spec.definitionFrom`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// The source's revision of the served definition (git: `<ref>@sha1:<commit>`,
    /// HTTP: `sha256:<hash>`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,
    /// Pods of the mock Deployment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// Ready pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_replicas: Option<i32>,
    /// Set by Metacontroller.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The last value of the annotation `sources.metahooks.io/requested-at` that was
    /// handled: the source was fetched after it was set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_handled_requested_at: Option<String>,
}

/// What the served definition is.
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DefinitionStatus {
    /// `info.version`: the version of the API the document describes.
    pub version: String,
    /// The `openapi` or `swagger` version the document declares.
    #[serde(default)]
    pub openapi: String,
    /// `info.title`.
    pub title: String,
    /// Number of operations (method + path pairs).
    pub operations: u32,
    /// Hash of the served definition (of all its files for a bundle).
    pub sha256: String,
}

/// Reads the spec of a parent object, naming the field that is wrong.
pub fn parse_spec(parent: &Value) -> Result<ApiMockSpec, SpecError> {
    let spec: ApiMockSpec = crate::controllers::common::spec::parse(parent)?;
    if let Some(mock) = &spec.mock {
        mock.check()?;
    }
    Ok(spec)
}

#[cfg(test)]
mod mock_tests {
    use super::*;

    #[test]
    fn unset_mock_settings_add_no_prism_flag() {
        assert!(MockSpec::default().prism_flags().is_empty());
        let all = MockSpec {
            dynamic: Some(true),
            seed: Some("s1".to_owned()),
            error_on_violations: Some(true),
            cors: Some(false),
            ignore_examples: Some(true),
        };
        assert_eq!(
            all.prism_flags(),
            [
                "--dynamic",
                "--seed=s1",
                "--errors",
                "--cors=false",
                "--ignoreExamples"
            ]
        );
    }

    #[test]
    fn a_seed_that_is_not_a_short_word_is_refused_naming_the_field() {
        let spec =
            |seed: &str| serde_json::json!({"spec": {"definition": "x", "mock": {"seed": seed}}});
        assert!(parse_spec(&spec("abc-1.2_3")).is_ok());
        for bad in ["", "two words", "--errors", &"x".repeat(65)] {
            let error = parse_spec(&spec(bad))
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(error.starts_with("spec.mock.seed"), "{bad:?}: {error}");
        }
        let unknown = serde_json::json!({"spec": {"definition": "x", "mock": {"dynamc": true}}});
        assert!(parse_spec(&unknown).is_err_and(|e| e.to_string().contains("spec.mock")));
    }
}
