//! One emulation from start to end, as `metahooks emulate` runs it: create the objects,
//! converge, let simulated time pass, delete the parents, and collect the findings.

use std::time::Duration;

use serde_json::Value;

use super::Key;
use super::cluster::{Emulator, describe};
use super::findings::{Origin, Rule};
use super::registration::{Kinds, Registration};

/// Input documents sorted into registrations and objects.
#[derive(Debug, Default)]
pub struct Input {
    /// The controller registrations found.
    pub registrations: Vec<Registration>,
    /// Every other object, with where it was written.
    pub objects: Vec<(Origin, Value)>,
    /// Plural → kind for the resources the registrations name.
    pub kinds: Kinds,
}

/// Sorts documents (each with where it came from, for messages) into registrations and
/// cluster objects. `List` documents contribute their items; CustomResourceDefinitions
/// teach the emulator their kinds and are kept too.
///
/// # Errors
/// The first document that is not a Kubernetes object, or a registration that does not
/// parse, named by its source.
pub fn sort_documents(documents: Vec<(Origin, Value)>) -> Result<Input, String> {
    let mut flat = Vec::new();
    for (source, document) in documents {
        if document.is_null() {
            continue;
        }
        if document.get("kind").and_then(Value::as_str) == Some("List") {
            let items = document
                .get("items")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            flat.extend(items.into_iter().map(|item| (source.clone(), item)));
        } else {
            flat.push((source, document));
        }
    }
    let mut input = Input::default();
    for (source, document) in &flat {
        check_object(document).map_err(|problem| format!("{source}: {problem}"))?;
        input.kinds.learn(document);
    }
    for (source, document) in flat {
        match document.get("kind").and_then(Value::as_str) {
            Some("CompositeController" | "DecoratorController") => {
                let registration = Registration::parse(document, &input.kinds)
                    .map_err(|problem| format!("{source}: {problem}"))?;
                input.registrations.push(registration);
            }
            _ => input.objects.push((source, document)),
        }
    }
    Ok(input)
}

fn check_object(document: &Value) -> Result<(), String> {
    let Some(object) = document.as_object() else {
        return Err("a document is not a mapping (a Kubernetes object)".to_owned());
    };
    for field in ["apiVersion", "kind"] {
        let text = object.get(field).and_then(Value::as_str);
        if text.is_none_or(str::is_empty) {
            return Err(format!("an object has no {field}"));
        }
    }
    let name = document.pointer("/metadata/name").and_then(Value::as_str);
    if name.is_none_or(str::is_empty) {
        return Err(format!(
            "a {} has no metadata.name",
            object
                .get("kind")
                .and_then(Value::as_str)
                .unwrap_or_default()
        ));
    }
    for field in ["labels", "annotations"] {
        if let Some(map) = document.pointer(&format!("/metadata/{field}"))
            && !map
                .as_object()
                .is_some_and(|m| m.values().all(Value::is_string))
        {
            return Err(format!(
                "{} {:?}: metadata.{field} must map strings to strings",
                object
                    .get("kind")
                    .and_then(Value::as_str)
                    .unwrap_or_default(),
                name.unwrap_or_default()
            ));
        }
    }
    Ok(())
}

/// What to do besides converging once.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Rounds allowed to converge.
    pub max_rounds: usize,
    /// Simulated time to let pass after converging, honouring resyncAfterSeconds and
    /// resyncPeriodSeconds.
    pub run_for: Duration,
    /// Delete every parent at the end and check that finalize lets it go.
    pub delete_parents: bool,
    /// Edits made after the first convergence, one at a time, each followed by a
    /// convergence (a test.sh written down: scale, delete a child, check a field).
    pub steps: Vec<Step>,
    /// Over HTTP, how long (real time) to wait after the first convergence for parents
    /// whose status says their source is still being fetched.
    pub wait_for_sources: Duration,
}

/// One edit or check of a story file (`--story`), on the object it names.
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub enum Step {
    /// A JSON merge patch (RFC 7386) applied as a user's edit (spec changes bump the
    /// generation).
    Patch {
        /// Which object.
        #[serde(flatten)]
        target: Target,
        /// The patch.
        merge: Value,
    },
    /// `spec.replicas` set, as `kubectl scale` does.
    Scale {
        /// Which object.
        #[serde(flatten)]
        target: Target,
        /// The new count.
        replicas: u32,
    },
    /// The object deleted, as `kubectl delete` does (finalizers honoured).
    Delete {
        /// Which object.
        #[serde(flatten)]
        target: Target,
    },
    /// The value at a JSON pointer must equal this (or the object must be gone, with
    /// `absent: true`); a failed expectation is a finding.
    Expect {
        /// Which object.
        #[serde(flatten)]
        target: Target,
        /// JSON pointer into the object (`/status/readyReplicas`).
        #[serde(default)]
        path: Option<String>,
        /// The value expected there.
        #[serde(default)]
        equals: Option<Value>,
        /// The object must not exist.
        #[serde(default)]
        absent: bool,
    },
}

/// The object a step is about.
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Target {
    /// apiVersion.
    pub api_version: String,
    /// Kind.
    pub kind: String,
    /// Namespace ("" or unset for cluster-scoped objects).
    #[serde(default)]
    pub namespace: String,
    /// Name.
    pub name: String,
}

impl Target {
    fn key(&self) -> Key {
        (
            self.api_version.clone(),
            self.kind.clone(),
            self.namespace.clone(),
            self.name.clone(),
        )
    }
}

/// A story file: an optional name (reports use it; the file's name otherwise) and its
/// steps.
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Story {
    /// What reports call the story.
    #[serde(default)]
    pub name: Option<String>,
    /// The edits and checks, in order.
    pub steps: Vec<Step>,
}

/// Reads a story file: `steps:` and a list of steps.
///
/// # Errors
/// Not YAML, or a step with an unknown kind or field (named).
pub fn read_steps(text: &str) -> Result<Vec<Step>, String> {
    read_story(text).map(|story| story.steps)
}

/// Reads a story file: an optional `name:`, and `steps:`.
///
/// # Errors
/// Not YAML, or a step with an unknown kind or field (named).
pub fn read_story(text: &str) -> Result<Story, String> {
    let value: Value = metahooks_protocol::yaml::documents(text)
        .map_err(|e| format!("not YAML: {e}"))?
        .into_iter()
        .next()
        .ok_or("the story file is empty")?;
    serde_path_to_error::deserialize(value).map_err(|e| format!("at {}: {}", e.path(), e.inner()))
}

/// RFC 7386: objects merge, null removes, anything else replaces.
fn merge_patch(target: &mut Value, patch: &Value) {
    match (target.as_object_mut(), patch.as_object()) {
        (Some(map), Some(changes)) => {
            for (key, change) in changes {
                if change.is_null() {
                    map.remove(key);
                } else {
                    merge_patch(map.entry(key.clone()).or_insert(Value::Null), change);
                }
            }
        }
        _ => *target = patch.clone(),
    }
}

/// What an `expect` step finds wrong with `object`, if anything.
fn unmet(
    object: Option<&Value>,
    path: Option<&str>,
    equals: Option<&Value>,
    absent: bool,
) -> Option<String> {
    match (object, absent) {
        (Some(_), true) => Some("exists, expected absent".to_owned()),
        (None, true) => None,
        (None, false) => Some("does not exist".to_owned()),
        (Some(object), false) => {
            let found = path.map_or(Some(object), |p| object.pointer(p));
            match (found, equals) {
                (Some(found), Some(wanted)) if found != wanted => Some(format!(
                    "{} is {found}, expected {wanted}",
                    path.unwrap_or("the object")
                )),
                (None, _) => Some(format!("{} is not set", path.unwrap_or(""))),
                _ => None,
            }
        }
    }
}

/// Plays the steps, converging after each edit.
async fn play_steps(emulator: &mut Emulator, plan: &Plan) -> Result<(), String> {
    for (index, step) in plan.steps.iter().enumerate() {
        let number = index + 1;
        match step {
            Step::Patch { target, merge } => {
                let Some(mut object) = emulator.objects.get(&target.key()).cloned() else {
                    return missing(emulator, number, target);
                };
                merge_patch(&mut object, merge);
                emulator.update(object);
            }
            Step::Scale { target, replicas } => {
                let Some(mut object) = emulator.objects.get(&target.key()).cloned() else {
                    return missing(emulator, number, target);
                };
                object["spec"]["replicas"] = serde_json::json!(replicas);
                emulator.apply(object);
            }
            Step::Delete { target } => {
                if !emulator.objects.contains_key(&target.key()) {
                    return missing(emulator, number, target);
                }
                emulator.delete(&target.key());
            }
            Step::Expect {
                target,
                path,
                equals,
                absent,
            } => {
                let object = emulator.objects.get(&target.key());
                let problem = unmet(object, path.as_deref(), equals.as_ref(), *absent);
                if let Some(problem) = problem {
                    emulator.record_about(
                        Rule::ExpectationFailed,
                        None,
                        &target.key(),
                        path.clone(),
                        format!("story step {number}: {problem}"),
                    )?;
                }
                continue;
            }
        }
        emulator.converge(plan.max_rounds).await?;
    }
    Ok(())
}

fn missing(emulator: &mut Emulator, number: usize, target: &Target) -> Result<(), String> {
    emulator.record_about(
        Rule::ExpectationFailed,
        None,
        &target.key(),
        None,
        format!("story step {number}: the object to edit does not exist"),
    )
}

impl Default for Plan {
    fn default() -> Plan {
        Plan {
            max_rounds: 20,
            run_for: Duration::ZERO,
            delete_parents: false,
            steps: Vec::new(),
            wait_for_sources: Duration::ZERO,
        }
    }
}

/// What happened, beyond what the emulator holds (camelCase in JSON, like the rest of
/// the report).
#[derive(Debug, Clone, Default, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    /// Rounds the first convergence took.
    pub rounds_to_converge: usize,
    /// Rounds run in all.
    pub rounds: usize,
    /// Simulated seconds that passed.
    pub simulated_seconds: u64,
}

/// Plays the story: objects in, converge, time, deletion.
///
/// # Errors
/// Only with `stop_at_first` set on the emulator: the first problem.
pub async fn play(
    emulator: &mut Emulator,
    objects: Vec<Value>,
    plan: &Plan,
) -> Result<Summary, String> {
    for object in objects {
        emulator.apply(object);
    }
    let rounds_to_converge = emulator.converge(plan.max_rounds).await?;
    await_sources(emulator, plan).await?;
    play_steps(emulator, plan).await?;
    let started = emulator.clock;
    if !plan.run_for.is_zero() {
        pass_time(emulator, plan).await?;
    }
    check_resync_storms(emulator)?;
    if plan.delete_parents {
        delete_parents(emulator, plan).await?;
    }
    Ok(Summary {
        rounds_to_converge,
        rounds: emulator.rounds,
        simulated_seconds: emulator.clock.saturating_sub(started).as_secs(),
    })
}

/// Parents whose status has a condition with reason `FetchPending`: the hook server (a
/// metahooks server) answered before its source arrived.
pub fn pending_sources(emulator: &Emulator) -> Vec<String> {
    emulator
        .objects
        .iter()
        .filter(|(_, object)| {
            object
                .pointer("/status/conditions")
                .and_then(Value::as_array)
                .is_some_and(|conditions| {
                    conditions
                        .iter()
                        .any(|c| c.get("reason").and_then(Value::as_str) == Some("FetchPending"))
                })
        })
        .map(|(key, _)| describe(key))
        .collect()
}

/// A server over HTTP fetches on its own clock: while a parent still waits for its source
/// and `plan.wait_for_sources` has not passed, the parents are synced again (every
/// 200 ms of real time) so that the run reports what the source brought. In-process
/// servers are waited for after every round already.
async fn await_sources(emulator: &mut Emulator, plan: &Plan) -> Result<(), String> {
    if !matches!(emulator.transport, crate::Transport::Http { .. }) {
        return Ok(());
    }
    let deadline = std::time::Instant::now() + plan.wait_for_sources;
    while !pending_sources(emulator).is_empty() && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(200)).await;
        emulator.converge(plan.max_rounds).await?;
    }
    Ok(())
}

/// Moves the clock from one due resync to the next until `plan.run_for` has passed,
/// converging at each. A resync period applies to every parent of its registration; a
/// resyncAfterSeconds to its parent (a round syncs every parent, as the period would,
/// so the count of calls is an upper bound).
async fn pass_time(emulator: &mut Emulator, plan: &Plan) -> Result<(), String> {
    let end = emulator.clock + plan.run_for;
    loop {
        let mut steps: Vec<f64> = emulator.resync_requests.values().copied().collect();
        steps.extend(
            emulator
                .registrations
                .iter()
                .filter_map(|r| r.resync_period_seconds),
        );
        let Some(step) = steps
            .into_iter()
            .filter(|s| s.is_finite() && *s > 0.0)
            .reduce(f64::min)
        else {
            emulator.advance(end.saturating_sub(emulator.clock));
            return Ok(());
        };
        // At least a second per step: a storm of tiny resyncs is reported, not replayed.
        let step = Duration::from_secs_f64(step.max(1.0));
        if emulator.clock + step > end {
            emulator.advance(end.saturating_sub(emulator.clock));
            return Ok(());
        }
        emulator.advance(step);
        emulator.converge(plan.max_rounds).await?;
    }
}

fn check_resync_storms(emulator: &mut Emulator) -> Result<(), String> {
    let storms: Vec<((String, Key), f64)> = emulator
        .resync_requests
        .iter()
        .filter(|(_, seconds)| **seconds < 1.0)
        .map(|(key, seconds)| (key.clone(), *seconds))
        .collect();
    for ((controller, parent), seconds) in storms {
        emulator.record_about(
            Rule::ResyncStorm,
            Some(&controller),
            &parent,
            None,
            format!(
                "in a steady state the answer still asks to be synced again after {seconds} s: Metacontroller will call this hook several times a second, forever"
            ),
        )?;
    }
    Ok(())
}

async fn delete_parents(emulator: &mut Emulator, plan: &Plan) -> Result<(), String> {
    let mut parents: Vec<(String, Key, String)> = Vec::new();
    for (key, object) in &emulator.objects {
        for registration in &emulator.registrations {
            if emulator.selects(registration, object) {
                parents.push((
                    registration.name.clone(),
                    key.clone(),
                    registration.finalizer(),
                ));
            }
        }
    }
    for (_, key, _) in &parents {
        emulator.delete(key);
    }
    emulator.converge(plan.max_rounds).await?;
    for (controller, key, finalizer) in parents {
        let stuck = emulator.objects.get(&key).is_some_and(|object| {
            object
                .pointer("/metadata/finalizers")
                .and_then(Value::as_array)
                .is_some_and(|f| f.iter().any(|x| x.as_str() == Some(finalizer.as_str())))
        });
        if stuck {
            emulator.record_about(
                Rule::FinalizeNeverCompletes,
                Some(&controller),
                &key,
                None,
                "deleted, but the finalize hook had still not answered finalized: true when the cluster stopped changing; the object stays in Terminating".to_owned(),
            )?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn documents_are_sorted_into_registrations_and_objects() {
        let registration = json!({"apiVersion": "metacontroller.k8s.io/v1alpha1",
            "kind": "CompositeController", "metadata": {"name": "things"},
            "spec": {"parentResource": {"apiVersion": "example.com/v1", "resource": "things"},
                     "hooks": {"sync": {"webhook": {"url": "http://h/things/sync"}}}}});
        let thing =
            json!({"apiVersion": "example.com/v1", "kind": "Thing", "metadata": {"name": "a"}});
        let list = json!({"apiVersion": "v1", "kind": "List", "items": [thing.clone(), thing]});
        let at = |file: &str| Origin {
            file: file.to_owned(),
            line: 1,
        };
        let input = sort_documents(vec![
            (at("r.yaml"), registration),
            (at("l.yaml"), list),
            (at("empty.yaml"), Value::Null),
        ])
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(input.registrations.len(), 1);
        assert_eq!(input.objects.len(), 2);
        // The registration's resource was learnt from the Thing objects.
        assert_eq!(input.registrations[0].parents[0].1, "Thing");
    }

    #[test]
    fn a_bad_document_is_refused_naming_its_file() {
        let error = sort_documents(vec![(
            Origin {
                file: "bad.yaml".to_owned(),
                line: 3,
            },
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "annotations": {"a": 1}}}),
        )])
        .err()
        .unwrap_or_default();
        assert!(
            error.starts_with("bad.yaml:3: ") && error.contains("metadata.annotations"),
            "{error}"
        );
    }
}
