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
    /// Why the rollout cannot finish, as the Deployment itself says, if it says so.
    pub stuck: Option<Stuck>,
}

/// A rollout the Deployment controller has given up on, or cannot make pods for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stuck {
    /// `ProgressDeadlineExceeded` or `ReplicaFailure`.
    pub reason: Reason,
    /// The Deployment's own message (its condition's).
    pub message: String,
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
        let conditions: Vec<&Value> = deployment
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .collect();
        let condition = |kind: &str, status: &str| {
            conditions
                .iter()
                .find(|c| c["type"] == kind && c["status"] == status)
                .copied()
        };
        let available = condition("Available", "True").is_some();
        // A failure to make pods is the nearer cause; a passed deadline says only that
        // nothing moved.
        let stuck = condition("ReplicaFailure", "True")
            .map(|c| (Reason::ReplicaFailure, c))
            .or_else(|| {
                condition("Progressing", "False")
                    .filter(|c| c["reason"] == "ProgressDeadlineExceeded")
                    .map(|c| (Reason::ProgressDeadlineExceeded, c))
            })
            .map(|(reason, c)| Stuck {
                reason,
                message: c["message"].as_str().unwrap_or_default().to_owned(),
            });
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
            stuck,
        }
    }

    /// `Ready=False` naming why the rollout cannot finish, as the Deployment says it,
    /// when it says so; `what` names the Deployment ("the mock Deployment").
    pub fn stuck_condition(&self, what: &str) -> Option<Decided> {
        let stuck = self.stuck.as_ref()?;
        let said = if stuck.message.is_empty() {
            String::new()
        } else {
            format!(": {}", stuck.message)
        };
        let why = match stuck.reason {
            Reason::ReplicaFailure => "cannot create its pods",
            _ => "made no progress within its progress deadline",
        };
        Some(Decided::new(
            ConditionType::Ready,
            false,
            stuck.reason,
            format!("{what} {why}{said}"),
        ))
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
    fn a_stuck_rollout_is_named_with_the_deployments_own_words() {
        let mut stuck = deployment(2, 1, 1, 2);
        stuck["status"]["conditions"] = json!([
            {"type": "Available", "status": "True"},
            {"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded",
             "message": "ReplicaSet \"m-6f9\" has timed out progressing."}]);
        let read = Rollout::observe(Some(&stuck), "h");
        let condition = read.stuck_condition("the Deployment").unwrap();
        assert_eq!(condition.reason.as_str(), "ProgressDeadlineExceeded");
        assert_eq!(
            condition.message,
            "the Deployment made no progress within its progress deadline: ReplicaSet \"m-6f9\" has timed out progressing."
        );
        stuck["status"]["conditions"] = json!([
            {"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded", "message": "late"},
            {"type": "ReplicaFailure", "status": "True", "reason": "FailedCreate",
             "message": "pods \"m-6f9-x\" is forbidden: violates PodSecurity \"restricted:latest\""}]);
        let condition = Rollout::observe(Some(&stuck), "h")
            .stuck_condition("the Deployment")
            .unwrap();
        assert_eq!(condition.reason.as_str(), "ReplicaFailure");
        assert!(
            condition.message.contains("violates PodSecurity"),
            "{}",
            condition.message
        );
        // Progressing as usual: not stuck.
        assert!(
            Rollout::observe(Some(&deployment(2, 1, 1, 2)), "h")
                .stuck_condition("d")
                .is_none()
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
