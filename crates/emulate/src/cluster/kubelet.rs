//! The rest of the cluster, simulated enough for hooks that watch it: the workload
//! controllers that make Pods (StatefulSet, ReplicaSet, DaemonSet over `nodes`, Job), a
//! kubelet that runs every Pod (Running and Ready after a tick; run-to-completion Pods
//! then succeed), and each workload's status as its controller reports it. Deployments keep
//! their status-only simulation (`tick_deployments`): a new generation first, all replicas
//! ready a tick later.

use std::collections::BTreeSet;

use serde_json::{Value, json};

use super::{Emulator, describe};
use crate::Key;
use crate::objects::owner_uid;

/// Kinds whose controller makes Pods here.
const POD_OWNERS: &[&str] = &["StatefulSet", "ReplicaSet", "DaemonSet", "Job"];

impl Emulator {
    /// Fake kube-controller-manager for Deployments (no Pods of their own): first the new
    /// generation with no ready replicas, then on the next tick all replicas ready.
    /// Returns whether anything moved.
    pub(super) fn tick_deployments(&mut self) -> bool {
        let mut moved = false;
        let hold_unready = self.hold_unready;
        let mut refused = Vec::new();
        for (key, object) in &self.objects {
            if key.1 == "Deployment"
                && let Some(why) = self.pod_security_refusal(key, object)
            {
                refused.push((key.clone(), why));
            }
        }
        for (key, object) in self.objects.iter_mut() {
            if key.1 != "Deployment" {
                continue;
            }
            // Pods refused by Pod Security never become ready.
            let hold_unready = hold_unready || refused.iter().any(|(k, _)| k == key);
            let generation = object
                .pointer("/metadata/generation")
                .and_then(Value::as_i64)
                .unwrap_or(1);
            let replicas = object
                .pointer("/spec/replicas")
                .and_then(Value::as_i64)
                .unwrap_or(1);
            let observed = object
                .pointer("/status/observedGeneration")
                .and_then(Value::as_i64);
            let ready = object
                .pointer("/status/readyReplicas")
                .and_then(Value::as_i64)
                .unwrap_or(0);
            if observed != Some(generation) {
                object["status"] = json!({
                    "observedGeneration": generation, "replicas": replicas, "updatedReplicas": replicas,
                    "readyReplicas": 0, "availableReplicas": 0,
                    "conditions": [{"type": "Available", "status": if replicas == 0 { "True" } else { "False" }, "reason": "MinimumReplicasUnavailable"}]
                });
                moved = true;
            } else if ready != replicas && !hold_unready {
                object["status"] = json!({
                    "observedGeneration": generation, "replicas": replicas, "updatedReplicas": replicas,
                    "readyReplicas": replicas, "availableReplicas": replicas,
                    "conditions": [{"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable"}]
                });
                moved = true;
            }
        }
        self.refused_pods.extend(refused);
        moved
    }

    /// One tick of the simulated controllers and kubelet; true when anything moved.
    pub fn tick_workloads(&mut self) -> bool {
        let mut moved = self.tick_deployments();
        moved |= self.make_pods();
        moved |= self.run_pods();
        moved |= self.report_pod_owners();
        moved
    }

    /// The Pods each workload wants: created when missing, removed when beyond its count.
    fn make_pods(&mut self) -> bool {
        let owners: Vec<(Key, Value)> = self
            .objects
            .iter()
            .filter(|(key, object)| {
                POD_OWNERS.contains(&key.1.as_str())
                    && object.pointer("/metadata/deletionTimestamp").is_none()
            })
            .map(|(key, object)| (key.clone(), object.clone()))
            .collect();
        let mut moved = false;
        for (key, owner) in owners {
            let wanted = self.wanted_pods(&key, &owner);
            let existing = self.pods_of(&owner);
            for pod_key in &existing {
                if !wanted.iter().any(|(name, _)| *name == pod_key.3) {
                    self.remove_with_dependents(pod_key);
                    moved = true;
                }
            }
            if let Some(refused) = self.pod_security_refusal(&key, &owner) {
                self.refused_pods.push((key.clone(), refused));
                continue;
            }
            for (name, extra) in wanted {
                let pod_key = (
                    "v1".to_owned(),
                    "Pod".to_owned(),
                    key.2.clone(),
                    name.clone(),
                );
                if existing.contains(&pod_key) || self.objects.contains_key(&pod_key) {
                    continue;
                }
                let pod = self.new_pod(&owner, &name, extra);
                self.put(pod_key, pod);
                moved = true;
            }
        }
        moved
    }

    /// Why Pod Security admission refuses the Pods of `workload` (from its template), if
    /// its namespace enforces a level (k8s.io/pod-security-admission: the workload is
    /// admitted, with a warning; its Pods are forbidden).
    pub(super) fn pod_security_refusal(&self, key: &Key, workload: &Value) -> Option<String> {
        use metahooks_apiserver::pod_security::{Level, pod_spec_of, violations};
        let namespace = self.objects.get(&(
            "v1".to_owned(),
            "Namespace".to_owned(),
            String::new(),
            key.2.clone(),
        ))?;
        let level = namespace
            .pointer("/metadata/labels/pod-security.kubernetes.io~1enforce")
            .and_then(Value::as_str)
            .and_then(Level::parse)?;
        let spec = pod_spec_of(workload)?;
        let annotations = workload.pointer("/spec/template/metadata/annotations");
        let found = violations(spec, annotations, level);
        (!found.is_empty()).then(|| {
            format!(
                "{} is admitted, but every Pod it makes is forbidden: violates PodSecurity \"{}:latest\": {}",
                describe(key),
                level.as_str(),
                found.join("; ")
            )
        })
    }

    /// (Pod name, labels and annotations to add) for each Pod `owner` wants.
    fn wanted_pods(&self, key: &Key, owner: &Value) -> Vec<(String, Value)> {
        let count = |pointer: &str, default: i64| {
            owner
                .pointer(pointer)
                .and_then(Value::as_i64)
                .unwrap_or(default)
                .max(0)
        };
        let name = &key.3;
        match key.1.as_str() {
            "StatefulSet" => (0..count("/spec/replicas", 1))
                .map(|i| {
                    let pod = format!("{name}-{i}");
                    let extra = json!({"labels": {"statefulset.kubernetes.io/pod-name": pod.clone(),
                                                  "apps.kubernetes.io/pod-index": i.to_string()}});
                    (pod, extra)
                })
                .collect(),
            "ReplicaSet" => (0..count("/spec/replicas", 1))
                .map(|i| (format!("{name}-{i}"), json!({})))
                .collect(),
            "DaemonSet" => (0..self.nodes.max(1))
                .map(|i| {
                    (
                        format!("{name}-node-{i}"),
                        json!({"nodeName": format!("node-{i}")}),
                    )
                })
                .collect(),
            "Job" => {
                let indexed = owner
                    .pointer("/spec/completionMode")
                    .and_then(Value::as_str)
                    == Some("Indexed");
                let uid = owner
                    .pointer("/metadata/uid")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                (0..count("/spec/completions", 1))
                    .map(|i| {
                        let mut extra =
                            json!({"labels": {"job-name": name, "controller-uid": uid}});
                        if indexed {
                            extra["annotations"] =
                                json!({"batch.kubernetes.io/job-completion-index": i.to_string()});
                        }
                        (format!("{name}-{i}"), extra)
                    })
                    .collect()
            }
            _ => Vec::new(),
        }
    }

    /// The Pods `owner` controls.
    fn pods_of(&self, owner: &Value) -> Vec<Key> {
        let uid = owner
            .pointer("/metadata/uid")
            .and_then(Value::as_str)
            .unwrap_or_default();
        self.by_owner
            .get(uid)
            .map(|owned| owned.iter().filter(|k| k.1 == "Pod").cloned().collect())
            .unwrap_or_default()
    }

    /// A Pod from `owner`'s template, Pending, owned by it.
    fn new_pod(&mut self, owner: &Value, name: &str, extra: Value) -> Value {
        let mut labels = owner
            .pointer("/spec/template/metadata/labels")
            .cloned()
            .unwrap_or(json!({}));
        let mut annotations = owner
            .pointer("/spec/template/metadata/annotations")
            .cloned()
            .unwrap_or(json!({}));
        for (target, field) in [(&mut labels, "labels"), (&mut annotations, "annotations")] {
            if let (Some(map), Some(more)) = (
                target.as_object_mut(),
                extra.get(field).and_then(Value::as_object),
            ) {
                map.extend(more.clone());
            }
        }
        let mut spec = owner
            .pointer("/spec/template/spec")
            .cloned()
            .unwrap_or(json!({}));
        if let Some(node) = extra.get("nodeName") {
            spec["nodeName"] = node.clone();
        }
        let uid = format!("uid-{:04}", self.next_uid);
        self.next_uid += 1;
        let version = self.bump_version();
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "name": name, "namespace": owner["metadata"]["namespace"], "uid": uid,
                "resourceVersion": version, "creationTimestamp": self.now_text(),
                "labels": labels, "annotations": annotations,
                "ownerReferences": [{"apiVersion": owner["apiVersion"], "kind": owner["kind"],
                                     "name": owner["metadata"]["name"], "uid": owner["metadata"]["uid"],
                                     "controller": true, "blockOwnerDeletion": true}],
            },
            "spec": spec,
            "status": {"phase": "Pending"},
        })
    }

    /// The kubelet: every Pod (a workload's or a hook's own) runs and becomes Ready a
    /// tick after it appears (not with `hold_unready`); a Job's Running Pods, and any with
    /// restartPolicy Never or OnFailure, then succeed.
    fn run_pods(&mut self) -> bool {
        let now = self.now_text();
        let hold = self.hold_unready;
        let job_uids: BTreeSet<String> = self
            .objects
            .iter()
            .filter(|(k, _)| k.1 == "Job")
            .filter_map(|(_, o)| {
                o.pointer("/metadata/uid")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
            })
            .collect();
        let mut changed = Vec::new();
        for (key, pod) in &self.objects {
            if key.1 != "Pod" || pod.pointer("/metadata/deletionTimestamp").is_some() {
                continue;
            }
            let phase = pod
                .pointer("/status/phase")
                .and_then(Value::as_str)
                .unwrap_or("Pending");
            // Run-to-completion Pods (a Job's, or restartPolicy Never/OnFailure) finish:
            // their containers are taken to exit 0.
            let completes = owner_uid(pod).is_some_and(|uid| job_uids.contains(&uid))
                || matches!(
                    pod.pointer("/spec/restartPolicy").and_then(Value::as_str),
                    Some("Never" | "OnFailure")
                );
            let next = match phase {
                "Pending" if !hold => Some(json!({
                    "phase": "Running", "podIP": "10.0.0.1", "startTime": now,
                    "conditions": [{"type": "Ready", "status": "True"}, {"type": "ContainersReady", "status": "True"}],
                })),
                "Running" if completes => Some(json!({
                    "phase": "Succeeded", "startTime": now,
                    "conditions": [{"type": "Ready", "status": "False", "reason": "PodCompleted"}],
                })),
                _ => None,
            };
            if let Some(status) = next {
                changed.push((key.clone(), status));
            }
        }
        let moved = !changed.is_empty();
        for (key, status) in changed {
            let version = self.bump_version();
            if let Some(pod) = self.objects.get_mut(&key) {
                pod["status"] = status;
                pod["metadata"]["resourceVersion"] = json!(version);
            }
        }
        moved
    }

    /// Each Pod-making workload's status, counted from its Pods.
    fn report_pod_owners(&mut self) -> bool {
        let owners: Vec<Key> = self
            .objects
            .keys()
            .filter(|k| POD_OWNERS.contains(&k.1.as_str()))
            .cloned()
            .collect();
        let mut moved = false;
        for key in owners {
            let Some(owner) = self.objects.get(&key).cloned() else {
                continue;
            };
            let pods: Vec<Value> = self
                .pods_of(&owner)
                .iter()
                .filter_map(|k| self.objects.get(k).cloned())
                .collect();
            let status = owner_status(&key.1, &owner, &pods, self.nodes);
            if owner.get("status") != Some(&status) {
                let version = self.bump_version();
                if let Some(object) = self.objects.get_mut(&key) {
                    object["status"] = status;
                    object["metadata"]["resourceVersion"] = json!(version);
                }
                moved = true;
            }
        }
        moved
    }
}

/// The status a workload controller reports for its pods: counts by phase, and for a
/// Job its completion.
fn owner_status(kind: &str, owner: &Value, pods: &[Value], nodes: usize) -> Value {
    let phase = |p: &Value| {
        p.pointer("/status/phase")
            .and_then(Value::as_str)
            .unwrap_or("Pending")
            .to_owned()
    };
    let total = pods.len() as i64;
    let running = pods.iter().filter(|p| phase(p) == "Running").count() as i64;
    let succeeded = pods.iter().filter(|p| phase(p) == "Succeeded").count() as i64;
    let generation = owner
        .pointer("/metadata/generation")
        .and_then(Value::as_i64)
        .unwrap_or(1);
    match kind {
        "StatefulSet" => json!({"observedGeneration": generation, "replicas": total,
            "readyReplicas": running, "currentReplicas": total, "updatedReplicas": total,
            "availableReplicas": running}),
        "ReplicaSet" => json!({"observedGeneration": generation, "replicas": total,
            "fullyLabeledReplicas": total, "readyReplicas": running, "availableReplicas": running}),
        "DaemonSet" => {
            let desired = nodes.max(1) as i64;
            json!({"observedGeneration": generation, "desiredNumberScheduled": desired,
                "currentNumberScheduled": total, "updatedNumberScheduled": total,
                "numberReady": running, "numberAvailable": running,
                "numberUnavailable": desired - running, "numberMisscheduled": 0})
        }
        _ => {
            let completions = owner
                .pointer("/spec/completions")
                .and_then(Value::as_i64)
                .unwrap_or(1);
            let mut status = json!({"active": running, "succeeded": succeeded, "ready": running});
            if succeeded >= completions {
                status["conditions"] = json!([{"type": "Complete", "status": "True"}]);
            }
            status
        }
    }
}
