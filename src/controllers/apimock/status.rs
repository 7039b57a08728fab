//! APIMock status from what is observed: the definition verdict and the mock
//! Deployment's own status. Never from what we are about to ask for.

use serde_json::Value;

use super::spec::{ApiMockStatus, DefinitionStatus};
use crate::controllers::common::conditions::{self, ConditionType, Decided};
use crate::controllers::common::reason::Reason;
use crate::controllers::common::rollout::Rollout;

/// Inputs to one status computation.
pub struct Facts<'a> {
    pub validated: Decided,
    /// For a spec with an Ingress: whether it is made, or why it is left out.
    pub exposed: Option<Decided>,
    /// Hash of the definition the children serve, when there are children.
    pub serving: Option<&'a str>,
    pub definition: Option<DefinitionStatus>,
    pub rollout: Rollout,
    pub url: Option<String>,
    pub external_url: Option<String>,
    /// For a definition read from `spec.definitionFrom`: how the last read went.
    pub source: Option<SourceFacts>,
    /// Set when a child is too large for client-side apply's last-applied copy.
    pub apply_limit: Option<Decided>,
    /// `Ready=False NameTaken` when another object holds a child's name.
    pub taken: Option<Decided>,
}

/// Where the definition came from and how reading it went.
pub struct SourceFacts {
    pub fetched: Decided,
    /// `Verified`, for a git definition with `verify` once something was checked.
    pub verified: Option<Decided>,
    /// The origin as status names it.
    pub description: String,
    /// The revision of the served definition.
    pub revision: Option<crate::source::Revision>,
    /// Nothing has been read yet and nothing failed: the phase is Pending, not Error.
    pub awaiting: bool,
}

/// Bytes of `value` as compact JSON, counted without building the text (the
/// definition in a ConfigMap is up to a MiB).
fn serialised_len(value: &Value) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0 += bytes.len();
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    // Writing a Value to a sink that never fails cannot fail.
    let _ = serde_json::to_writer(&mut count, value);
    count.0
}

/// Under Metacontroller's default client-side apply every child carries a copy of
/// itself in an annotation, and the API server refuses more than 256 KiB of annotations
/// on an object: a definition of ~250 KB fits in a ConfigMap but not twice. Server-side
/// apply keeps no copy, so the condition only warns.
pub fn apply_limit(children: &[Value]) -> Option<Decided> {
    children.iter().find_map(|child| {
        // Only a ConfigMap holds the definition; one well under half the limit fits
        // without serialising it to measure.
        let data = text_bytes(child.get("data"));
        if data < crate::apiserver::ANNOTATIONS_MAX_BYTES / 4 {
            return None;
        }
        let copy = serialised_len(child);
        let own = text_bytes(child.pointer("/metadata/annotations"));
        let total = copy + own + crate::apiserver::LAST_APPLIED_KEY_LEN;
        (total > crate::apiserver::ANNOTATIONS_MAX_BYTES).then(|| {
            Decided::new(
                ConditionType::FitsClientSideApply,
                false,
                Reason::LastAppliedTooLarge,
                format!(
                    "the {} {} would carry {total} bytes of annotations under client-side apply (its last-applied copy included), more than the API server's {}: Metacontroller cannot write it unless it runs with server-side apply; or make the definition smaller",
                    child["kind"].as_str().unwrap_or("child"),
                    child["metadata"]["name"].as_str().unwrap_or(""),
                    crate::apiserver::ANNOTATIONS_MAX_BYTES
                ),
            )
        })
    })
}

/// Bytes of the keys and string values of a map (ConfigMap data, annotations).
fn text_bytes(map: Option<&Value>) -> usize {
    map.and_then(Value::as_object)
        .into_iter()
        .flatten()
        .map(|(key, value)| key.len() + value.as_str().map_or(0, str::len))
        .sum()
}

pub fn compute(facts: Facts<'_>, parent: &Value, now: &str) -> ApiMockStatus {
    let valid = facts.validated.status;
    let rollout = &facts.rollout;
    let awaiting = facts.source.as_ref().is_some_and(|s| s.awaiting);
    let ready = ready(&facts, awaiting);
    let phase = if awaiting && facts.serving.is_none() {
        "Pending"
    } else if !valid {
        "Error"
    } else if rollout.available && facts.serving.is_some() {
        "Running"
    } else {
        "Pending"
    };
    let available = rollout.available_condition("the mock Deployment");
    let mut decided = vec![facts.validated, available, ready];
    decided.extend(facts.exposed);
    decided.extend(facts.apply_limit);
    let (source, revision) = match facts.source {
        Some(source) => {
            if let Some(verified) = source.verified {
                decided.insert(0, verified);
            }
            decided.insert(0, source.fetched);
            (Some(source.description), source.revision)
        }
        None => (None, None),
    };
    let generation = parent
        .pointer("/metadata/generation")
        .and_then(Value::as_i64);
    ApiMockStatus {
        phase: Some(phase.to_owned()),
        conditions: conditions::settle(decided, &conditions::observed(parent), now, generation),
        url: facts.url,
        external_url: facts.external_url,
        definition: facts.definition,
        source,
        revision: revision.map(|revision| revision.to_string()),
        replicas: Some(rollout.replicas),
        ready_replicas: Some(rollout.ready_replicas),
        observed_generation: None,
        // Recorded by the sync itself (`common::refresh`), for every answer alike.
        last_handled_requested_at: None,
    }
}

fn ready(facts: &Facts<'_>, awaiting: bool) -> Decided {
    let rollout = &facts.rollout;
    let current = facts.serving.is_some() && rollout.served_hash.as_deref() == facts.serving;
    if let Some(taken) = &facts.taken {
        taken.clone()
    } else if facts.serving.is_none() && awaiting {
        Decided::new(
            ConditionType::Ready,
            false,
            Reason::NoMock,
            "no mock is running yet: the definition is still being read from its source",
        )
    } else if facts.serving.is_none() && facts.source.is_some() {
        Decided::new(
            ConditionType::Ready,
            false,
            Reason::NoMock,
            "no mock is running: no valid definition has been read from its source; see Fetched and Validated",
        )
    } else if facts.serving.is_none() {
        Decided::new(
            ConditionType::Ready,
            false,
            Reason::NoMock,
            "no mock is running: the definition has never been valid",
        )
    } else if !facts.validated.status {
        let fix = if facts.source.is_some() {
            "the definition at its source"
        } else {
            "spec.definition"
        };
        Decided::new(
            ConditionType::Ready,
            false,
            Reason::DefinitionInvalid,
            format!("the last valid definition is still served; fix {fix} to roll the new one"),
        )
    } else if let Some(stuck) = rollout.stuck_condition("the mock Deployment") {
        stuck
    } else if rollout.available && rollout.settled && current {
        Decided::new(
            ConditionType::Ready,
            true,
            Reason::MockReady,
            "the mock serves the current definition",
        )
    } else {
        Decided::new(
            ConditionType::Ready,
            false,
            Reason::RolloutInProgress,
            "the mock Deployment is rolling out the current definition",
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_counted_length_is_the_length_of_the_text() {
        let value = serde_json::json!({
            "data": {"openapi.yaml": "a: \"quoted\"\n\tb: é ✓ \u{1}\\"},
            "metadata": {"name": "m", "annotations": {}},
            "n": [1, 2.5, null, true]
        });
        assert_eq!(serialised_len(&value), value.to_string().len());
    }
}
