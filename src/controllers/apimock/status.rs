//! APIMock status from what is observed: the definition verdict and the mock
//! Deployment's own status. Never from what we are about to ask for.

use serde_json::{Value, json};

use super::children::DEFINITION_HASH_ANNOTATION;
use super::spec::DefinitionStatus;
use crate::controllers::common::conditions::{self, Condition, Decided};

/// The observed mock Deployment, reduced to what status needs.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Rollout {
    pub exists: bool,
    pub available: bool,
    pub replicas: i32,
    pub ready_replicas: i32,
    /// All pods run the template we want and the controller has seen it.
    pub settled: bool,
    /// The definition hash on the observed pod template.
    pub served_sha256: Option<String>,
}

impl Rollout {
    pub fn observe(deployment: Option<&Value>) -> Rollout {
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
            .any(|c| {
                c.get("type") == Some(&json!("Available"))
                    && c.get("status") == Some(&json!("True"))
            });
        let generation = int("/metadata/generation");
        let settled = int("/status/observedGeneration") >= generation
            && int("/status/updatedReplicas") == wanted
            && int("/status/readyReplicas") == wanted
            && int("/status/replicas") == wanted;
        Rollout {
            exists: true,
            available,
            replicas: narrow(int("/status/replicas")),
            ready_replicas: narrow(int("/status/readyReplicas")),
            settled,
            served_sha256: deployment
                .pointer("/spec/template/metadata/annotations")
                .and_then(|a| a.get(DEFINITION_HASH_ANNOTATION))
                .and_then(Value::as_str)
                .map(str::to_owned),
        }
    }
}

/// Inputs to one status computation.
pub struct Facts<'a> {
    pub validated: Decided,
    /// Hash of the definition the children serve, when there are children.
    pub serving: Option<&'a str>,
    pub definition: Option<DefinitionStatus>,
    pub rollout: Rollout,
    pub url: Option<String>,
    pub external_url: Option<String>,
    /// For a definition read from `spec.definitionFrom`: how the last read went.
    pub source: Option<SourceFacts>,
}

/// Where the definition came from and how reading it went.
pub struct SourceFacts {
    pub fetched: Decided,
    /// The origin as status names it.
    pub description: String,
    /// The revision of the served definition.
    pub revision: Option<String>,
    /// Nothing has been read yet and nothing failed: the phase is Pending, not Error.
    pub awaiting: bool,
}

pub fn compute(facts: Facts<'_>, parent: &Value, now: &str) -> Value {
    let valid = facts.validated.status;
    let rollout = &facts.rollout;
    let available = if !rollout.exists {
        Decided::new(
            "Available",
            false,
            "DeploymentMissing",
            "the mock Deployment does not exist yet",
        )
    } else if rollout.available {
        Decided::new(
            "Available",
            true,
            "MinimumReplicasAvailable",
            "the mock Deployment has minimum availability",
        )
    } else {
        Decided::new(
            "Available",
            false,
            "MinimumReplicasUnavailable",
            "the mock Deployment does not have minimum availability yet",
        )
    };
    let current = facts.serving.is_some() && rollout.served_sha256.as_deref() == facts.serving;
    let awaiting = facts.source.as_ref().is_some_and(|s| s.awaiting);
    let ready = if facts.serving.is_none() && awaiting {
        Decided::new(
            "Ready",
            false,
            "NoMock",
            "no mock is running yet: the definition is still being read from its source",
        )
    } else if facts.serving.is_none() {
        Decided::new(
            "Ready",
            false,
            "NoMock",
            "no mock is running: the definition has never been valid",
        )
    } else if !valid {
        let fix = if facts.source.is_some() {
            "the definition at its source"
        } else {
            "spec.definition"
        };
        Decided::new(
            "Ready",
            false,
            "DefinitionInvalid",
            format!("the last valid definition is still served; fix {fix} to roll the new one"),
        )
    } else if rollout.available && rollout.settled && current {
        Decided::new(
            "Ready",
            true,
            "MockReady",
            "the mock serves the current definition",
        )
    } else {
        Decided::new(
            "Ready",
            false,
            "RolloutInProgress",
            "the mock Deployment is rolling out the current definition",
        )
    };
    let phase = if awaiting && facts.serving.is_none() {
        "Pending"
    } else if !valid {
        "Error"
    } else if rollout.available && facts.serving.is_some() {
        "Running"
    } else {
        "Pending"
    };
    let generation = parent
        .pointer("/metadata/generation")
        .and_then(Value::as_i64);
    let mut decided = vec![facts.validated, available, ready];
    let (source, revision) = match facts.source {
        Some(source) => {
            decided.insert(0, source.fetched);
            (Some(source.description), source.revision)
        }
        None => (None, None),
    };
    let settled: Vec<Condition> =
        conditions::settle(decided, &conditions::observed(parent), now, generation);
    let mut status = json!({
        "phase": phase,
        "conditions": settled,
        "replicas": rollout.replicas,
        "readyReplicas": rollout.ready_replicas,
    });
    if let Some(object) = status.as_object_mut() {
        if let Some(url) = facts.url {
            object.insert("url".to_owned(), json!(url));
        }
        if let Some(url) = facts.external_url {
            object.insert("externalUrl".to_owned(), json!(url));
        }
        if let Some(definition) = facts.definition {
            object.insert("definition".to_owned(), json!(definition));
        }
        if let Some(source) = source {
            object.insert("source".to_owned(), json!(source));
        }
        if let Some(revision) = revision {
            object.insert("revision".to_owned(), json!(revision));
        }
    }
    status
}
