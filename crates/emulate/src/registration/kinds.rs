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
}

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
        }
    }
}

impl Kinds {
    /// Learns the kinds a CRD declares, or guesses an object kind's plural (lower case
    /// plus "s", "es" after s/x/ch/sh, "ies" after a consonant and y).
    pub fn learn(&mut self, object: &Value) {
        if object.get("kind").and_then(Value::as_str) == Some("CustomResourceDefinition") {
            if let (Some(plural), Some(kind)) = (
                object.pointer("/spec/names/plural").and_then(Value::as_str),
                object.pointer("/spec/names/kind").and_then(Value::as_str),
            ) {
                self.by_resource.insert(plural.to_owned(), kind.to_owned());
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

    /// Whether objects of `kind` have no namespace.
    pub fn is_cluster_scoped(&self, kind: &str) -> bool {
        self.cluster_scoped.contains(kind)
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
