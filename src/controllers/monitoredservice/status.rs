//! MonitoredService status: fetch and config verdicts, and the observed Deployment.

use serde_json::Value;

use super::spec::MonitoredServiceStatus;
use crate::controllers::common::conditions::{self, ConditionType, Decided};
use crate::controllers::common::config::Config;
use crate::controllers::common::reason::Reason;
use crate::controllers::common::rollout::Rollout;
use crate::error::HookError;
use crate::protocol::CompositeResponse;

pub struct Facts<'a> {
    pub fetched: Decided,
    /// `Verified`, for a git source with `verify` once something was checked.
    pub verified: Option<Decided>,
    pub config_valid: Decided,
    /// The config the children carry (None: no children with config).
    pub config: Option<&'a Config>,
    pub pods: Vec<String>,
}

impl<'a> Facts<'a> {
    pub fn invalid_spec(
        reason: Reason,
        message: String,
        running: Option<&'a Config>,
        pods: Vec<String>,
    ) -> Facts<'a> {
        Facts {
            verified: None,
            fetched: Decided::new(
                ConditionType::Fetched,
                false,
                Reason::NotFetched,
                "the spec must be fixed before the source is fetched",
            ),
            config_valid: Decided::new(ConditionType::ConfigValid, false, reason, message),
            config: running,
            pods,
        }
    }

    /// The source could not be read, though the spec is fine (a missing or unusable
    /// credentials Secret, a path the engine refuses): `Fetched` says why, `ConfigValid`
    /// only that there is nothing new to validate, and what runs keeps running.
    pub fn not_fetched(
        reason: Reason,
        message: String,
        running: Option<&'a Config>,
        pods: Vec<String>,
    ) -> Facts<'a> {
        let config_valid = match running {
            Some(config) => Decided::new(
                ConditionType::ConfigValid,
                true,
                Reason::Valid,
                format!(
                    "running {} until the source can be read",
                    config.shown_revision()
                ),
            ),
            None => Decided::new(
                ConditionType::ConfigValid,
                false,
                Reason::NoConfig,
                "the configuration could not be fetched; see Fetched",
            ),
        };
        Facts {
            verified: None,
            fetched: Decided::new(ConditionType::Fetched, false, reason, message),
            config_valid,
            config: running,
            pods,
        }
    }

    pub fn no_source(pods: Vec<String>) -> Facts<'a> {
        Facts {
            verified: None,
            fetched: Decided::new(
                ConditionType::Fetched,
                true,
                Reason::NoSource,
                "the spec names no config source",
            ),
            config_valid: Decided::new(
                ConditionType::ConfigValid,
                true,
                Reason::NoSource,
                "there is no config to validate",
            ),
            config: None,
            pods,
        }
    }
}

/// The answer's status (children are the caller's): what was decided, and the rollout
/// as observed; `taken` (a child's name held by another object) is what `Ready` says
/// when it is set.
///
/// # Errors
/// The status does not serialise (a bug, answered 500).
pub fn answer(
    facts: Facts<'_>,
    rollout: &Rollout,
    taken: Option<Decided>,
    parent: &Value,
    now: &str,
) -> Result<CompositeResponse, HookError> {
    let hash = facts.config.map(Config::hash);
    let current = hash == rollout.served_hash.as_deref() || (hash.is_none() && rollout.exists);
    let ready = taken.unwrap_or_else(|| ready(&facts, rollout, current));
    let generation = parent
        .pointer("/metadata/generation")
        .and_then(Value::as_i64);
    let mut decided = vec![facts.fetched];
    decided.extend(facts.verified);
    decided.extend([
        facts.config_valid,
        rollout.available_condition("the Deployment"),
        ready,
    ]);
    let status = MonitoredServiceStatus {
        revision: facts
            .config
            .and_then(|config| config.revision.as_ref().map(ToString::to_string)),
        config_hash: hash.map(str::to_owned),
        replicas: Some(rollout.replicas),
        ready_replicas: Some(rollout.ready_replicas),
        updated_replicas: Some(rollout.updated_replicas),
        pod_count: (!facts.pods.is_empty())
            .then(|| i32::try_from(facts.pods.len()).unwrap_or(i32::MAX)),
        pods: facts
            .pods
            .into_iter()
            .take(super::MAX_LISTED_PODS)
            .collect(),
        conditions: conditions::settle(decided, &conditions::observed(parent), now, generation),
        observed_generation: None,
        // Recorded by the sync itself (`common::refresh`), for every answer alike.
        last_handled_requested_at: None,
    };
    Ok(CompositeResponse::typed(&status)?)
}

/// A config that could not be fetched is the cause when both fail (ConfigValid then only
/// says there is nothing to validate), unless the fetch was never tried because the
/// spec itself is wrong.
fn ready(facts: &Facts<'_>, rollout: &Rollout, current: bool) -> Decided {
    if !facts.fetched.status && facts.fetched.reason != Reason::NotFetched {
        Decided::new(
            ConditionType::Ready,
            false,
            Reason::FetchFailing,
            "the config could not be fetched; see Fetched",
        )
    } else if !facts.config_valid.status {
        Decided::new(
            ConditionType::Ready,
            false,
            Reason::ConfigInvalid,
            "the spec or the fetched config is not valid; see ConfigValid",
        )
    } else if let Some(stuck) = rollout.stuck_condition("the Deployment") {
        stuck
    } else if rollout.available && rollout.settled && current {
        Decided::new(
            ConditionType::Ready,
            true,
            Reason::Ready,
            "all replicas run the current config",
        )
    } else {
        Decided::new(
            ConditionType::Ready,
            false,
            Reason::RolloutInProgress,
            "the Deployment is rolling out the current config",
        )
    }
}
