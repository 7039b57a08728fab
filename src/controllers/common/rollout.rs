//! What an observed Deployment says about a rollout: one reading for every controller
//! whose status follows a Deployment it owns.

use serde_json::Value;

use super::conditions::{ConditionType, Decided};
use crate::controllers::common::reason::Reason;

/// The observed Deployment, reduced to what status needs.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Rollout {
    /// The Deployment exists.
    pub exists: bool,
    /// The Deployment's own `Available` condition is `True`.
    pub available: bool,
    /// Pods, as the Deployment's status counts them.
    pub replicas: i32,
    /// Ready pods.
    pub ready_replicas: i32,
    /// Pods running the current template.
    pub updated_replicas: i32,
    /// The controller has seen the current template and every pod runs it: as many
    /// updated and ready pods as wanted, and no old pod left.
    pub settled: bool,
    /// The value of the pod-template annotation a controller puts its content hash in.
    pub served_hash: Option<String>,
}

impl Rollout {
    /// Reads `deployment` (None: it does not exist), with the content hash kept in the
    /// pod-template annotation `hash_annotation`.
    pub fn observe(deployment: Option<&Value>, hash_annotation: &str) -> Rollout {
        let Some(deployment) = deployment else {
            return Rollout::default();
        };
        let int = |pointer: &str| {
            deployment
                .pointer(pointer)
                .and_then(Value::as_i64)
                .unwrap_or(0)
        };
        let narrow = |n: i64| i32::try_from(n).unwrap_or(0);
        let wanted = deployment
            .pointer("/spec/replicas")
            .and_then(Value::as_i64)
            .unwrap_or(1);
        let available = deployment
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .any(|c| c["type"] == "Available" && c["status"] == "True");
        let settled = int("/status/observedGeneration") >= int("/metadata/generation")
            && int("/status/updatedReplicas") == wanted
            && int("/status/readyReplicas") == wanted
            && int("/status/replicas") == wanted;
        Rollout {
            exists: true,
            available,
            replicas: narrow(int("/status/replicas")),
            ready_replicas: narrow(int("/status/readyReplicas")),
            updated_replicas: narrow(int("/status/updatedReplicas")),
            settled,
            served_hash: deployment
                .pointer("/spec/template/metadata/annotations")
                .and_then(|a| a.get(hash_annotation))
                .and_then(Value::as_str)
                .map(str::to_owned),
        }
    }

    /// The `Available` condition, naming the Deployment as `what` ("the Deployment").
    pub fn available_condition(&self, what: &str) -> Decided {
        if !self.exists {
            Decided::new(
                ConditionType::Available,
                false,
                Reason::DeploymentMissing,
                format!("{what} does not exist yet"),
            )
        } else if self.available {
            Decided::new(
                ConditionType::Available,
                true,
                Reason::MinimumReplicasAvailable,
                format!("{what} has minimum availability"),
            )
        } else {
            Decided::new(
                ConditionType::Available,
                false,
                Reason::MinimumReplicasUnavailable,
                format!("{what} does not have minimum availability yet"),
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn deployment(replicas: i64, updated: i64, ready: i64, observed: i64) -> Value {
        json!({"metadata": {"generation": 2},
               "spec": {"replicas": 2, "template": {"metadata": {"annotations": {"h": "abc"}}}},
               "status": {"observedGeneration": observed, "replicas": replicas, "updatedReplicas": updated,
                          "readyReplicas": ready, "conditions": [{"type": "Available", "status": "True"}]}})
    }

    #[test]
    fn settled_means_every_pod_runs_the_seen_template() {
        let read = |d: Value| Rollout::observe(Some(&d), "h");
        let done = read(deployment(2, 2, 2, 2));
        assert!(done.settled && done.available);
        assert_eq!(done.served_hash.as_deref(), Some("abc"));
        assert!(
            !read(deployment(3, 2, 2, 2)).settled,
            "an old pod is still there"
        );
        assert!(
            !read(deployment(2, 1, 2, 2)).settled,
            "not every pod is updated"
        );
        assert!(
            !read(deployment(2, 2, 1, 2)).settled,
            "not every pod is ready"
        );
        assert!(
            !read(deployment(2, 2, 2, 1)).settled,
            "the template was not seen yet"
        );
    }

    #[test]
    fn a_missing_deployment_is_not_available() {
        let missing = Rollout::observe(None, "h");
        assert!(!missing.exists && !missing.settled);
        let condition = missing.available_condition("the mock Deployment");
        assert_eq!(
            (condition.reason.as_str(), condition.message.as_str()),
            (
                "DeploymentMissing",
                "the mock Deployment does not exist yet"
            )
        );
    }
}
