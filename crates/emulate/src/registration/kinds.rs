//! Plural resource names and their kinds, as Metacontroller learns them from discovery:
//! the built-in ones, and those CustomResourceDefinitions and objects teach.

use std::collections::BTreeMap;

use serde_json::Value;

/// Plural resource names and their kinds. Metacontroller asks the API server's discovery;
/// the emulator knows the built-in kinds it is likely to meet and learns the others from
/// the CustomResourceDefinitions and objects it is given.
#[derive(Debug, Clone)]
pub struct Kinds {
    by_resource: BTreeMap<String, String>,
    /// Kinds whose objects have no namespace (discovery's `namespaced: false`).
    cluster_scoped: std::collections::BTreeSet<String>,
    /// The apiVersions each CustomResourceDefinition given serves its kind at.
    crd_versions: BTreeMap<String, Vec<String>>,
    /// What each CRD version given says of status, by (apiVersion, kind).
    crd_status: BTreeMap<(String, String), CrdStatus>,
}

/// What a CustomResourceDefinition's version says of its objects' status: whether it has
/// a status subresource, and the structural schema of `status`, if it declares one.
#[derive(Debug, Clone)]
pub struct CrdStatus {
    /// `subresources.status` is set: a status update leaves the generation alone.
    pub subresource: bool,
    /// `schema.openAPIV3Schema.properties.status`, which prunes and type-checks status.
    pub schema: Option<Value>,
}

/// The apiVersions Kubernetes 1.33 serves each built-in kind the emulator knows at.
const BUILTIN_VERSIONS: &[(&str, &[&str])] = &[
    ("ConfigMap", &["v1"]),
    ("Secret", &["v1"]),
    ("Service", &["v1"]),
    ("ServiceAccount", &["v1"]),
    ("Pod", &["v1"]),
    ("Namespace", &["v1"]),
    ("Node", &["v1"]),
    ("PersistentVolume", &["v1"]),
    ("PersistentVolumeClaim", &["v1"]),
    ("Deployment", &["apps/v1"]),
    ("StatefulSet", &["apps/v1"]),
    ("DaemonSet", &["apps/v1"]),
    ("ReplicaSet", &["apps/v1"]),
    ("ControllerRevision", &["apps/v1"]),
    ("Job", &["batch/v1"]),
    ("CronJob", &["batch/v1"]),
    ("Ingress", &["networking.k8s.io/v1"]),
    ("IngressClass", &["networking.k8s.io/v1"]),
    ("NetworkPolicy", &["networking.k8s.io/v1"]),
    ("Role", &["rbac.authorization.k8s.io/v1"]),
    ("RoleBinding", &["rbac.authorization.k8s.io/v1"]),
    ("ClusterRole", &["rbac.authorization.k8s.io/v1"]),
    ("ClusterRoleBinding", &["rbac.authorization.k8s.io/v1"]),
    ("StorageClass", &["storage.k8s.io/v1"]),
    ("PriorityClass", &["scheduling.k8s.io/v1"]),
    ("PodDisruptionBudget", &["policy/v1"]),
    (
        "HorizontalPodAutoscaler",
        &["autoscaling/v1", "autoscaling/v2"],
    ),
    ("CustomResourceDefinition", &["apiextensions.k8s.io/v1"]),
];

/// Built-in kinds that are cluster-scoped in Kubernetes 1.33 discovery.
const CLUSTER_SCOPED: &[&str] = &[
    "Namespace",
    "Node",
    "PersistentVolume",
    "ClusterRole",
    "ClusterRoleBinding",
    "CustomResourceDefinition",
    "StorageClass",
    "PriorityClass",
    "IngressClass",
    "RuntimeClass",
    "ValidatingWebhookConfiguration",
    "MutatingWebhookConfiguration",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
    "APIService",
    "CertificateSigningRequest",
    "CSIDriver",
    "CSINode",
    "VolumeAttachment",
    "FlowSchema",
    "PriorityLevelConfiguration",
    "CompositeController",
    "DecoratorController",
];

impl Default for Kinds {
    fn default() -> Kinds {
        let builtin = [
            ("configmaps", "ConfigMap"),
            ("secrets", "Secret"),
            ("services", "Service"),
            ("serviceaccounts", "ServiceAccount"),
            ("pods", "Pod"),
            ("deployments", "Deployment"),
            ("statefulsets", "StatefulSet"),
            ("daemonsets", "DaemonSet"),
            ("replicasets", "ReplicaSet"),
            ("jobs", "Job"),
            ("cronjobs", "CronJob"),
            ("ingresses", "Ingress"),
            ("namespaces", "Namespace"),
            ("nodes", "Node"),
            ("persistentvolumes", "PersistentVolume"),
            ("clusterroles", "ClusterRole"),
            ("clusterrolebindings", "ClusterRoleBinding"),
            ("customresourcedefinitions", "CustomResourceDefinition"),
            ("storageclasses", "StorageClass"),
            ("priorityclasses", "PriorityClass"),
            ("ingressclasses", "IngressClass"),
            ("controllerrevisions", "ControllerRevision"),
            ("compositecontrollers", "CompositeController"),
            ("decoratorcontrollers", "DecoratorController"),
            ("persistentvolumeclaims", "PersistentVolumeClaim"),
            ("roles", "Role"),
            ("rolebindings", "RoleBinding"),
            ("networkpolicies", "NetworkPolicy"),
            ("poddisruptionbudgets", "PodDisruptionBudget"),
            ("horizontalpodautoscalers", "HorizontalPodAutoscaler"),
            ("apimocks", "APIMock"),
            ("monitoredservices", "MonitoredService"),
        ];
        Kinds {
            by_resource: builtin
                .iter()
                .map(|(resource, kind)| ((*resource).to_owned(), (*kind).to_owned()))
                .collect(),
            cluster_scoped: CLUSTER_SCOPED
                .iter()
                .map(|kind| (*kind).to_owned())
                .collect(),
            crd_versions: BTreeMap::new(),
            crd_status: BTreeMap::new(),
        }
    }
}

impl Kinds {
    /// The built-in kinds the simulated API server serves, each with its apiVersions
    /// (Kubernetes 1.33's).
    pub fn builtin_versions() -> &'static [(&'static str, &'static [&'static str])] {
        BUILTIN_VERSIONS
    }

    /// Learns the kinds a CRD declares, or guesses an object kind's plural (lower case
    /// plus "s", "es" after s/x/ch/sh, "ies" after a consonant and y).
    pub fn learn(&mut self, object: &Value) {
        if object.get("kind").and_then(Value::as_str) == Some("CustomResourceDefinition") {
            if let (Some(plural), Some(kind)) = (
                object.pointer("/spec/names/plural").and_then(Value::as_str),
                object.pointer("/spec/names/kind").and_then(Value::as_str),
            ) {
                self.by_resource.insert(plural.to_owned(), kind.to_owned());
                let group = object
                    .pointer("/spec/group")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                let versions = object
                    .pointer("/spec/versions")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter(|v| v.get("served").and_then(Value::as_bool) != Some(false))
                    .filter_map(|v| v.get("name").and_then(Value::as_str))
                    .map(|name| format!("{group}/{name}"))
                    .collect();
                for version in object
                    .pointer("/spec/versions")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    let Some(name) = version.get("name").and_then(Value::as_str) else {
                        continue;
                    };
                    // The whole-object schema: one that does not describe status (or
                    // preserves unknown fields at the root) keeps status as written.
                    let root = version.pointer("/schema/openAPIV3Schema");
                    let schema = root.and_then(|root| {
                        let preserved = root
                            .get("x-kubernetes-preserve-unknown-fields")
                            .and_then(Value::as_bool)
                            == Some(true);
                        match root.pointer("/properties/status") {
                            Some(status) => Some(status.clone()),
                            None if preserved => None,
                            // A root schema without status prunes it whole.
                            None => Some(serde_json::json!({"type": "object", "properties": {}})),
                        }
                    });
                    self.crd_status.insert(
                        (format!("{group}/{name}"), kind.to_owned()),
                        CrdStatus {
                            subresource: version.pointer("/subresources/status").is_some(),
                            schema,
                        },
                    );
                }
                // A CRD written without versions (a sketch in a test) says nothing
                // about them: its kind is taken as served at any.
                let versions: Vec<String> = versions;
                if versions.is_empty() {
                    self.crd_versions.remove(kind);
                } else {
                    self.crd_versions.insert(kind.to_owned(), versions);
                }
                // The API server's discovery answers `namespaced` from the CRD's scope.
                if object.pointer("/spec/scope").and_then(Value::as_str) == Some("Cluster") {
                    self.cluster_scoped.insert(kind.to_owned());
                } else {
                    self.cluster_scoped.remove(kind);
                }
            }
            return;
        }
        if let Some(kind) = object.get("kind").and_then(Value::as_str) {
            self.by_resource
                .entry(plural_of(kind))
                .or_insert_with(|| kind.to_owned());
        }
    }

    /// What the CRD given for `kind` at `api_version` says of status; None for built-in
    /// kinds and kinds without a CRD (taken to have a status subresource and no schema).
    pub fn crd_status(&self, api_version: &str, kind: &str) -> Option<&CrdStatus> {
        self.crd_status
            .get(&(api_version.to_owned(), kind.to_owned()))
    }

    /// Whether objects of `kind` have no namespace.
    pub fn is_cluster_scoped(&self, kind: &str) -> bool {
        self.cluster_scoped.contains(kind)
    }

    /// Why the API server serves no `kind` at `api_version`, as Metacontroller's dynamic
    /// client reports it, for the built-in kinds and those of the CRDs given (others are
    /// taken as served).
    pub fn unserved(&self, api_version: &str, kind: &str) -> Option<String> {
        let builtin = BUILTIN_VERSIONS
            .iter()
            .find(|(k, _)| *k == kind)
            .map(|(_, versions)| versions.iter().map(|v| (*v).to_owned()).collect::<Vec<_>>());
        let served = self.crd_versions.get(kind).cloned().or(builtin)?;
        (!served.iter().any(|v| v == api_version)).then(|| {
            format!(
                "can't find kind {kind:?} in apiVersion {api_version:?} (the API server serves it at {})",
                served.join(", ")
            )
        })
    }

    /// The kind discovery finds for `resource` at `api_version`: `Ok(None)` when the
    /// API server does not serve that resource at that version (a built-in kind, or a
    /// CRD given, served at other versions only).
    ///
    /// # Errors
    /// A resource no built-in, CRD or given object names.
    pub fn discover(&self, api_version: &str, resource: &str) -> Result<Option<&str>, String> {
        let kind = self.kind_of(resource)?;
        Ok(self.unserved(api_version, kind).is_none().then_some(kind))
    }

    /// The apiVersions a resource is served at, where known, for messages.
    pub fn served_versions(&self, resource: &str) -> Option<String> {
        let kind = self.by_resource.get(resource)?;
        let versions = self.crd_versions.get(kind).cloned().or_else(|| {
            BUILTIN_VERSIONS
                .iter()
                .find(|(k, _)| k == kind)
                .map(|(_, v)| v.iter().map(|v| (*v).to_owned()).collect())
        })?;
        Some(versions.join(", "))
    }

    /// The kind a plural resource name stands for.
    ///
    /// # Errors
    /// A resource no built-in, CRD or given object names.
    pub fn kind_of(&self, resource: &str) -> Result<&str, String> {
        self.by_resource
            .get(resource)
            .map(String::as_str)
            .ok_or_else(|| {
                format!(
                    "unknown resource {resource:?}: give the emulator its CustomResourceDefinition or an object of that kind"
                )
            })
    }
}

fn plural_of(kind: &str) -> String {
    let lower = kind.to_ascii_lowercase();
    let consonant_y = lower.ends_with('y')
        && !lower
            .chars()
            .rev()
            .nth(1)
            .is_some_and(|c| "aeiou".contains(c));
    if consonant_y {
        format!("{}ies", &lower[..lower.len() - 1])
    } else if ["s", "x", "ch", "sh"]
        .iter()
        .any(|end| lower.ends_with(end))
    {
        format!("{lower}es")
    } else {
        format!("{lower}s")
    }
}
