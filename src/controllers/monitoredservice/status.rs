//! MonitoredService status: fetch and config verdicts, and the observed Deployment.

use serde_json::{Value, json};

use super::Observed;
use super::children::Config;
use crate::controllers::common::conditions::{self, Decided};
use crate::protocol::CompositeResponse;

pub struct Facts<'a> {
    pub fetched: Decided,
    pub config_valid: Decided,
    /// The config the children carry (None: no children with config).
    pub config: Option<&'a Config>,
    pub pods: Vec<String>,
}

impl<'a> Facts<'a> {
    pub fn invalid_spec(
        reason: &'static str,
        message: String,
        running: Option<&'a Config>,
        pods: Vec<String>,
    ) -> Facts<'a> {
        Facts {
            fetched: Decided::new(
                "Fetched",
                false,
                "NotFetched",
                "the spec must be fixed before the source is fetched",
            ),
            config_valid: Decided::new("ConfigValid", false, reason, message),
            config: running,
            pods,
        }
    }

    pub fn no_source(pods: Vec<String>) -> Facts<'a> {
        Facts {
            fetched: Decided::new(
                "Fetched",
                true,
                "NoSource",
                "the spec names no config source",
            ),
            config_valid: Decided::new(
                "ConfigValid",
                true,
                "NoSource",
                "there is no config to validate",
            ),
            config: None,
            pods,
        }
    }
}

pub fn answer(
    facts: Facts<'_>,
    observed: &Observed,
    parent: &Value,
    now: &str,
) -> CompositeResponse {
    let int = |pointer: &str| {
        observed
            .deployment
            .as_ref()
            .and_then(|d| d.pointer(pointer))
            .and_then(Value::as_i64)
            .unwrap_or(0)
    };
    let available = observed
        .deployment
        .as_ref()
        .and_then(|d| d.pointer("/status/conditions"))
        .and_then(Value::as_array)
        .is_some_and(|c| {
            c.iter()
                .any(|c| c["type"] == "Available" && c["status"] == "True")
        });
    let wanted = observed
        .deployment
        .as_ref()
        .and_then(|d| d.pointer("/spec/replicas"))
        .and_then(Value::as_i64)
        .unwrap_or(1);
    let settled = observed.deployment.is_some()
        && int("/status/observedGeneration") >= int("/metadata/generation")
        && int("/status/updatedReplicas") == wanted
        && int("/status/readyReplicas") == wanted;
    let hash = facts.config.map(Config::hash);
    let current = hash.as_deref() == observed.served_hash()
        || (hash.is_none() && observed.deployment.is_some());
    let available_condition = match (&observed.deployment, available) {
        (None, _) => Decided::new(
            "Available",
            false,
            "DeploymentMissing",
            "the Deployment does not exist yet",
        ),
        (Some(_), true) => Decided::new(
            "Available",
            true,
            "MinimumReplicasAvailable",
            "the Deployment has minimum availability",
        ),
        (Some(_), false) => Decided::new(
            "Available",
            false,
            "MinimumReplicasUnavailable",
            "the Deployment does not have minimum availability yet",
        ),
    };
    // A config that could not be fetched is the cause when both fail (ConfigValid then
    // only says there is nothing to validate), unless the fetch was never tried because
    // the spec itself is wrong.
    let ready = if !facts.fetched.status && facts.fetched.reason != "NotFetched" {
        Decided::new(
            "Ready",
            false,
            "FetchFailing",
            "the config could not be fetched; see Fetched",
        )
    } else if !facts.config_valid.status {
        Decided::new(
            "Ready",
            false,
            "ConfigInvalid",
            "the spec or the fetched config is not valid; see ConfigValid",
        )
    } else if available && settled && current {
        Decided::new(
            "Ready",
            true,
            "Ready",
            "all replicas run the current config",
        )
    } else {
        Decided::new(
            "Ready",
            false,
            "RolloutInProgress",
            "the Deployment is rolling out the current config",
        )
    };
    let generation = parent
        .pointer("/metadata/generation")
        .and_then(Value::as_i64);
    let settled_conditions = conditions::settle(
        vec![
            facts.fetched,
            facts.config_valid,
            available_condition,
            ready,
        ],
        &conditions::observed(parent),
        now,
        generation,
    );
    let narrow = |n: i64| i32::try_from(n).unwrap_or(0);
    let mut status = json!({
        "replicas": narrow(int("/status/replicas")),
        "readyReplicas": narrow(int("/status/readyReplicas")),
        "updatedReplicas": narrow(int("/status/updatedReplicas")),
        "conditions": settled_conditions,
    });
    if let Some(map) = status.as_object_mut() {
        if let Some(config) = facts.config {
            map.insert("revision".to_owned(), json!(config.revision));
            map.insert("configHash".to_owned(), json!(hash));
        }
        if !facts.pods.is_empty() {
            map.insert("pods".to_owned(), json!(facts.pods));
        }
    }
    CompositeResponse::new(status, Vec::new())
}
