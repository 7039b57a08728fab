//! The `MonitoredService` custom resource (`services.example.com/v1alpha1`): accepts
//! config-monitor's fields (`image`, `size`, `port`, `config_repo`) unchanged and adds
//! git and HTTP sources, formats and polling.

use k8s_openapi::api::core::v1::{
    EnvVar, PodSecurityContext, Probe, ResourceRequirements, SecurityContext,
};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::controllers::common::conditions::Condition;
pub use crate::controllers::common::config::ConfigFormat;
use crate::controllers::common::config_schema::ConfigSchemaSpec;
use crate::controllers::common::envfile;
use crate::controllers::common::problem::Problem;
use crate::controllers::common::reason::Reason;
pub use crate::controllers::common::source_spec::{GitSource, HttpSource, SecretRef};
use crate::controllers::common::spec::SpecError;

/// A service whose configuration lives in git or an HTTP file; config changes roll it.
#[derive(CustomResource, Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[kube(
    group = "services.example.com",
    version = "v1alpha1",
    kind = "MonitoredService",
    plural = "monitoredservices",
    singular = "monitoredservice",
    shortname = "msvc",
    namespaced,
    doc = "A Deployment whose configuration is fetched from git or HTTP and rolled on change",
    status = "MonitoredServiceStatus",
    printcolumn = r#"{"name":"Revision","type":"string","jsonPath":".status.revision"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct MonitoredServiceSpec {
    /// Container image of the service.
    #[schemars(length(max = 1024))]
    pub image: String,
    /// Container port (named `service`); a Service is created when set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 65535))]
    pub port: Option<i32>,
    /// Deployment replicas (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub replicas: Option<i32>,
    /// config-monitor's name for `replicas`; `replicas` wins when both are set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub size: Option<i32>,
    /// config-monitor compatibility: HTTP(S) URL of a KEY=VALUE file.
    #[serde(
        default,
        rename = "config_repo",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(length(max = 2048))]
    pub config_repo: Option<String>,
    /// Where the configuration comes from (instead of `config_repo`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<Source>,
    /// `env` (KEY=VALUE → container env) or `files` (mounted at `mountPath`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub format: Option<ConfigFormat>,
    /// A JSON Schema (2020-12) the config must pass before it rolls: each JSON and YAML
    /// file, or the env file as an object of strings. `inline`, or `path` to a file in
    /// the same commit (git sources).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_schema: Option<ConfigSchemaSpec>,
    /// Where `files` are mounted (default /etc/config).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mount_path: Option<String>,
    /// Poll period in seconds (default 60, minimum 10).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 10))]
    pub interval_seconds: Option<u32>,
    /// Extra container environment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<Vec<EnvVar>>,
    /// Container resources.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
    /// The pod's security context. Fields left unset take Pod Security "restricted"
    /// values: `runAsNonRoot: true`, `seccompProfile: RuntimeDefault` (set
    /// `runAsNonRoot: false` to run an image that needs root).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub security_context: Option<PodSecurityContext>,
    /// The container's security context. Fields left unset take Pod Security
    /// "restricted" values: `allowPrivilegeEscalation: false`, capabilities drop ALL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_security_context: Option<SecurityContext>,
    /// The container's readiness probe.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub readiness_probe: Option<Probe>,
    /// The container's liveness probe.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub liveness_probe: Option<Probe>,
    /// Mount the service account's API token into the pods (default false: most
    /// services never call the Kubernetes API).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub automount_service_account_token: Option<bool>,
}

/// Where the configuration comes from (one of them).
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Source {
    /// A file or directory in git.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub git: Option<GitSource>,
    /// One file over HTTP(S).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http: Option<HttpSource>,
}

/// What the controller reports.
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MonitoredServiceStatus {
    /// `<ref>@sha1:<commit>` (git) or `sha256:<hash>` (HTTP) of the running config.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,
    /// Hash of the running config (the pod-template annotation).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_hash: Option<String>,
    /// Pods of the Deployment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// Ready pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_replicas: Option<i32>,
    /// Pods running the current template.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_replicas: Option<i32>,
    /// Names of the service's pods (config-monitor's `nodes`), in name order, at most
    /// 100.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pods: Vec<String>,
    /// How many pods the service has (all of them, listed or not).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_count: Option<i32>,
    /// `Fetched`, `ConfigValid`, `Available`, `Ready`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "crate::controllers::common::conditions::conditions_schema")]
    pub conditions: Vec<Condition>,
    /// Set by Metacontroller.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The last value of the annotation `sources.metahooks.io/requested-at` that was
    /// handled: the source was fetched after it was set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_handled_requested_at: Option<String>,
}

impl MonitoredServiceSpec {
    /// Pods wanted: `replicas`, else `size`, else 1.
    pub fn replicas(&self) -> i32 {
        self.replicas.or(self.size).unwrap_or(1)
    }

    /// `env` as a container can be given it, and as the operator allows it.
    ///
    /// # Errors
    /// `InvalidSpec` for a value holding a control character, `NotAllowed` for env
    /// from a Secret or a pod field under `--deny-secret-env`; the message names it.
    pub fn check_env(&self, deny_secret_env: bool) -> Result<(), Problem> {
        for (i, var) in self.env.iter().flatten().enumerate() {
            if let Some(value) = &var.value
                && let Err(problem) = envfile::check_env_value(value)
            {
                return Err(Problem::new(
                    Reason::InvalidSpec,
                    format!("spec.env[{i}] ({}): the value {problem}", var.name),
                ));
            }
            let from = var.value_from.as_ref();
            let refused = [
                (
                    "secretKeyRef",
                    from.is_some_and(|f| f.secret_key_ref.is_some()),
                ),
                ("fieldRef", from.is_some_and(|f| f.field_ref.is_some())),
            ];
            if let Some((field, _)) = refused.iter().find(|(_, set)| deny_secret_env && *set) {
                return Err(Problem::new(
                    Reason::NotAllowed,
                    format!(
                        "spec.env[{i}] ({}): valueFrom.{field} is not allowed by the server's --deny-secret-env",
                        var.name
                    ),
                ));
            }
        }
        Ok(())
    }

    /// The poll period, within the allowed range.
    pub fn interval_seconds(&self) -> u64 {
        crate::controllers::common::polling::interval_seconds(self.interval_seconds.map(u64::from))
    }
}

/// Reads the spec of a parent object, naming the field that is wrong.
pub fn parse_spec(parent: &Value) -> Result<MonitoredServiceSpec, SpecError> {
    crate::controllers::common::spec::parse(parent)
}

#[cfg(test)]
mod env_tests {
    use super::*;
    use serde_json::json;

    fn spec(env: serde_json::Value) -> MonitoredServiceSpec {
        serde_json::from_value(json!({"image": "app:1", "env": env})).unwrap()
    }

    #[test]
    fn env_from_secrets_and_pod_fields_is_refused_only_under_the_flag() {
        let from_secret = spec(
            json!([{"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "db", "key": "password"}}}]),
        );
        let from_field = spec(
            json!([{"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}]),
        );
        let from_config = spec(
            json!([{"name": "MODE", "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k"}}}]),
        );
        for refused in [&from_secret, &from_field] {
            assert!(refused.check_env(false).is_ok());
            let problem = refused.check_env(true).unwrap_err();
            assert_eq!(problem.reason, Reason::NotAllowed);
            assert!(
                problem.message.contains("--deny-secret-env"),
                "{}",
                problem.message
            );
            assert!(
                problem.message.starts_with("spec.env[0]"),
                "{}",
                problem.message
            );
        }
        assert!(from_config.check_env(true).is_ok());
    }

    #[test]
    fn env_values_a_container_cannot_be_given_are_refused() {
        let problem =
            spec(json!([{"name": "A", "value": "ok"}, {"name": "B", "value": "x\u{0}y"}]))
                .check_env(false)
                .unwrap_err();
        assert_eq!(problem.reason, Reason::InvalidSpec);
        assert!(problem.message.contains("spec.env[1] (B)") && problem.message.contains("U+0000"));
    }
}
