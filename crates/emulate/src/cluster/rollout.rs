//! Rolling updates (`RollingRecreate`, `RollingInPlace`) as Metacontroller's composite
//! controller runs them (`syncRevisions`, pkg/controller/composite/controller_revision.go;
//! `syncRollingUpdate`, rolling_update.go): the parent's revision fields are kept per
//! revision, the sync hook is also asked with each older revision's fields while that
//! revision still claims children, children move to the latest revision one at a time,
//! only while every child already moved is updated and passes its status checks, and the
//! parent's status says where the rollout is in an `Updated` condition.

use std::collections::BTreeSet;

use serde_json::{Map, Value, json};

use super::Emulator;
use crate::Key;
use crate::registration::Registration;

/// A child a revision claims: (API group, kind, name).
type ChildId = (String, String, String);

/// One revision of a parent: the revision fields it was made from, and its children.
#[derive(Debug, Clone)]
pub(super) struct Revision {
    patch: Value,
    name: String,
    children: BTreeSet<ChildId>,
}

/// The parent's revision fields (`revisionHistory.fieldPaths`, dotted) as a patch.
fn patch_of(parent: &Value, fields: &[String]) -> Value {
    let mut patch = json!({});
    for field in fields {
        let pointer = format!("/{}", field.replace('.', "/"));
        if let Some(value) = parent.pointer(&pointer) {
            set_at(&mut patch, field, Some(value.clone()));
        }
    }
    patch
}

/// Sets (or, with None, removes) the dotted `field` in `target`.
fn set_at(target: &mut Value, field: &str, value: Option<Value>) {
    let parts: Vec<&str> = field.split('.').collect();
    let mut at = target;
    for part in &parts[..parts.len().saturating_sub(1)] {
        if !at.get(*part).is_some_and(Value::is_object) {
            if let Some(map) = at.as_object_mut() {
                map.insert((*part).to_owned(), json!({}));
            } else {
                return;
            }
        }
        let Some(next) = at.get_mut(*part) else {
            return;
        };
        at = next;
    }
    let Some(last) = parts.last() else {
        return;
    };
    if let Some(map) = at.as_object_mut() {
        match value {
            Some(value) => {
                map.insert((*last).to_owned(), value);
            }
            None => {
                map.remove(*last);
            }
        }
    }
}

/// The parent as an older revision had it: the current parent with that revision's
/// fields put back (`applyPatch`).
fn parent_at(parent: &Value, patch: &Value, fields: &[String]) -> Value {
    let mut parent = parent.clone();
    for field in fields {
        let pointer = format!("/{}", field.replace('.', "/"));
        set_at(&mut parent, field, patch.pointer(&pointer).cloned());
    }
    parent
}

fn id_of(child: &Value) -> ChildId {
    let text = |p: &str| {
        child
            .pointer(p)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    let group = text("/apiVersion")
        .rsplit_once('/')
        .map_or(String::new(), |(g, _)| g.to_owned());
    (group, text("/kind"), text("/metadata/name"))
}

impl Emulator {
    /// The parents the sync hook is also asked with: one per older revision that still
    /// claims children (none without a rolling child type).
    pub(super) fn older_parents(
        &self,
        registration: &Registration,
        parent_key: &Key,
        parent: &Value,
    ) -> Vec<(Value, Value)> {
        if !registration.children.iter().any(|c| c.is_rolling()) {
            return Vec::new();
        }
        let fields = registration.revision_fields();
        let latest = patch_of(parent, &fields);
        self.revisions
            .get(&(registration.name.clone(), parent_key.clone()))
            .into_iter()
            .flatten()
            .filter(|r| r.patch != latest && !r.children.is_empty())
            .map(|r| (r.patch.clone(), parent_at(parent, &r.patch, &fields)))
            .collect()
    }

    /// `syncRollingUpdate` over the answers of the latest revision (`desired`, with its
    /// status in `response`) and the older ones (`older`: patch and answer): which
    /// revision each rolling child follows, the one child moved this sync, the
    /// `Updated` condition written into the answer's status, and the children to apply.
    pub(super) fn roll(
        &mut self,
        registration: &Registration,
        (parent_key, parent): (&Key, &Value),
        response: &mut Value,
        older: &[(Value, Value)],
        desired: Vec<Value>,
        observed: &[Key],
    ) -> Vec<Value> {
        let rolling = |id: &ChildId| registration.rolling_rule(&id.0, &id.1).is_some();
        if !registration.children.iter().any(|c| c.is_rolling()) {
            return desired;
        }
        let fields = registration.revision_fields();
        let latest_patch = patch_of(parent, &fields);
        let store_key = (registration.name.clone(), parent_key.clone());
        let mut revisions = self.revisions.remove(&store_key).unwrap_or_default();
        let mut latest = match revisions.iter().position(|r| r.patch == latest_patch) {
            Some(index) => revisions.remove(index),
            None => Revision {
                name: revision_name(registration, &latest_patch),
                patch: latest_patch,
                children: BTreeSet::new(),
            },
        };
        let wanted: BTreeSet<ChildId> = desired.iter().map(id_of).filter(rolling).collect();
        // syncRevisionClaims: only rolling children the latest revision still wants, each
        // claimed once, the latest revision first.
        latest.children.retain(|id| wanted.contains(id));
        let mut claimed = latest.children.clone();
        for revision in &mut revisions {
            revision
                .children
                .retain(|id| wanted.contains(id) && claimed.insert(id.clone()));
        }
        let no_op = |id: &ChildId, child: &Value| {
            self.observed_child(observed, id)
                .is_some_and(|(key, live)| {
                    self.merged(key, live, child)
                        .is_ok_and(|merged| merged == *live)
                })
        };
        // Unclaimed children go to the latest revision; claimed ones that would not
        // change move there at once.
        for child in &desired {
            let id = id_of(child);
            if !rolling(&id) || latest.children.contains(&id) {
                continue;
            }
            let holder = revisions.iter().position(|r| r.children.contains(&id));
            match holder {
                None => {
                    latest.children.insert(id);
                }
                Some(index) if no_op(&id, child) => {
                    revisions[index].children.remove(&id);
                    latest.children.insert(id);
                }
                Some(_) => {}
            }
        }
        // The next child, in the order the latest answer lists them.
        let next = desired
            .iter()
            .map(id_of)
            .find(|id| rolling(id) && !latest.children.contains(id));
        let condition = match next {
            Some(id) => match self.should_continue(registration, &latest, &desired, observed) {
                Err(why) => json!({"type": "Updated", "status": "False",
                                   "reason": "RolloutWaiting", "message": why}),
                Ok(()) => {
                    for revision in &mut revisions {
                        revision.children.remove(&id);
                    }
                    let message = format!("updating {} {}", id.1, id.2);
                    latest.children.insert(id);
                    json!({"type": "Updated", "status": "False",
                           "reason": "RolloutProgressing", "message": message})
                }
            },
            None => json!({"type": "Updated", "status": "True", "reason": "OnLatestRevision",
                           "message": format!("latest ControllerRevision: {}", latest.name)}),
        };
        set_condition(response, condition);
        aggregate(response, older);
        // Children still claimed by an older revision are applied as it asks for them.
        let mut applied = desired;
        for revision in &revisions {
            let Some((_, answer)) = older.iter().find(|(patch, _)| *patch == revision.patch) else {
                continue;
            };
            let theirs = answer
                .get("children")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            for child in &mut applied {
                let id = id_of(child);
                if revision.children.contains(&id)
                    && let Some(old) = theirs.iter().find(|c| id_of(c) == id)
                {
                    *child = old.clone();
                }
            }
        }
        // pruneParentRevisions: the latest always, the others while they claim children.
        revisions.retain(|r| !r.children.is_empty());
        revisions.insert(0, latest);
        self.revisions.insert(store_key, revisions);
        applied
    }

    /// The observed child a revision claim names, with its key.
    fn observed_child<'a>(
        &'a self,
        observed: &'a [Key],
        id: &ChildId,
    ) -> Option<(&'a Key, &'a Value)> {
        observed.iter().find_map(|key| {
            let object = self.objects.get(key)?;
            (id_of(object) == *id).then_some((key, object))
        })
    }

    /// `shouldContinueRolling`: every rolling child on the latest revision is observed,
    /// updated to what the latest revision asks, has observed its latest spec
    /// (RollingInPlace, where it reports observedGeneration) and passes its status checks.
    fn should_continue(
        &self,
        registration: &Registration,
        latest: &Revision,
        desired: &[Value],
        observed: &[Key],
    ) -> Result<(), String> {
        for id in &latest.children {
            let Some(rule) = registration.rolling_rule(&id.0, &id.1) else {
                continue;
            };
            let (kind, name) = (&id.1, &id.2);
            let Some((key, live)) = self.observed_child(observed, id) else {
                return Err(format!("missing child {kind} {name}"));
            };
            if let Some(update) = desired.iter().find(|c| id_of(c) == *id) {
                let merged = self.merged(key, live, update).map_err(|(_, e)| {
                    format!("can't check if child {kind} {name} is updated: {e}")
                })?;
                if merged != *live {
                    return Err(format!("child {kind} {name} is not updated yet"));
                }
            }
            if rule.strategy == "RollingInPlace" {
                let observed_generation = live
                    .pointer("/status/observedGeneration")
                    .and_then(Value::as_i64)
                    .unwrap_or(0);
                let generation = live
                    .pointer("/metadata/generation")
                    .and_then(Value::as_i64)
                    .unwrap_or(0);
                if observed_generation > 0 && observed_generation < generation {
                    return Err(format!(
                        "child {kind} {name} with RollingInPlace update strategy hasn't observed latest spec"
                    ));
                }
            }
            if let Err(why) = status_check(&rule.status_checks, live) {
                return Err(format!("child {kind} {name} failed status check: {why}"));
            }
        }
        Ok(())
    }
}

/// `childStatusCheck`: each condition named must be there, with the status and reason
/// given.
fn status_check(
    checks: &[(String, Option<String>, Option<String>)],
    child: &Value,
) -> Result<(), String> {
    for (kind, status, reason) in checks {
        let condition = child
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .and_then(|all| {
                all.iter()
                    .find(|c| c.get("type").and_then(Value::as_str) == Some(kind))
            })
            .ok_or_else(|| format!("required condition type missing: {kind:?}"))?;
        let field = |name: &str| {
            condition
                .get(name)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        if let Some(want) = status
            && field("status") != *want
        {
            return Err(format!(
                "{kind:?} condition status is {:?} (want {want:?})",
                field("status")
            ));
        }
        if let Some(want) = reason
            && field("reason") != *want
        {
            return Err(format!(
                "{kind:?} condition reason is {:?} (want {want:?})",
                field("reason")
            ));
        }
    }
    Ok(())
}

/// What `syncRevisions` takes from every revision's answer: the smallest positive
/// `resyncAfterSeconds`, and `finalized` only when every revision says so.
fn aggregate(response: &mut Value, older: &[(Value, Value)]) {
    let Some(answer) = response.as_object_mut() else {
        return;
    };
    let answers: Vec<&Value> = older.iter().map(|(_, answer)| answer).collect();
    let resync = |answer: &Value| {
        answer
            .get("resyncAfterSeconds")
            .and_then(Value::as_f64)
            .filter(|s| *s > 0.0)
    };
    let smallest = answers
        .iter()
        .filter_map(|a| resync(a))
        .chain(
            answer
                .get("resyncAfterSeconds")
                .and_then(Value::as_f64)
                .filter(|s| *s > 0.0),
        )
        .reduce(f64::min);
    if let Some(seconds) = smallest {
        answer.insert("resyncAfterSeconds".to_owned(), json!(seconds));
    }
    let finalized = answer.get("finalized").and_then(Value::as_bool) == Some(true)
        && answers
            .iter()
            .all(|a| a.get("finalized").and_then(Value::as_bool) == Some(true));
    if answer.contains_key("finalized") || finalized {
        answer.insert("finalized".to_owned(), json!(finalized));
    }
}

/// `SetCondition`: replaces the condition of that type in the answer's status, or adds
/// it (a status that is not an object becomes one).
fn set_condition(response: &mut Value, condition: Value) {
    let Some(answer) = response.as_object_mut() else {
        return;
    };
    let status = answer
        .entry("status")
        .or_insert_with(|| Value::Object(Map::new()));
    if !status.is_object() {
        *status = Value::Object(Map::new());
    }
    let Some(status) = status.as_object_mut() else {
        return;
    };
    let conditions = status.entry("conditions").or_insert_with(|| json!([]));
    if !conditions.is_array() {
        *conditions = json!([]);
    }
    let Some(list) = conditions.as_array_mut() else {
        return;
    };
    let kind = condition.get("type").cloned();
    match list.iter_mut().find(|c| c.get("type") == kind.as_ref()) {
        Some(existing) => *existing = condition,
        None => list.push(condition),
    }
}

/// A revision's name: the parent resource and group, and a digest of its fields (the
/// digest is not Metacontroller's hash; the shape is `controllerRevisionName`'s).
fn revision_name(registration: &Registration, patch: &Value) -> String {
    let resource = registration
        .raw
        .pointer("/spec/parentResource/resource")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let group = registration
        .raw
        .pointer("/spec/parentResource/apiVersion")
        .and_then(Value::as_str)
        .and_then(|v| v.rsplit_once('/'))
        .map_or("core", |(g, _)| g);
    let digest = blake3::hash(patch.to_string().as_bytes()).to_hex();
    format!("{resource}.{group}-{}", &digest[..10])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_revision_keeps_its_fields_and_puts_them_back() {
        let parent = json!({"metadata": {"name": "p"}, "spec": {"image": "v2", "size": 3},
                            "status": {"ok": true}});
        let fields = vec!["spec.image".to_owned()];
        let patch = patch_of(&parent, &fields);
        assert_eq!(patch, json!({"spec": {"image": "v2"}}));
        let old = json!({"spec": {"image": "v1"}});
        assert_eq!(
            parent_at(&parent, &old, &fields)["spec"],
            json!({"image": "v1", "size": 3})
        );
    }

    #[test]
    fn the_smallest_resync_wins_and_finalized_needs_every_revision() {
        let mut latest = json!({"resyncAfterSeconds": 30, "finalized": true});
        let older = [(
            json!({}),
            json!({"resyncAfterSeconds": 5, "finalized": false}),
        )];
        aggregate(&mut latest, &older);
        assert_eq!(
            latest,
            json!({"resyncAfterSeconds": 5.0, "finalized": false})
        );
        let mut alone = json!({"finalized": true});
        aggregate(&mut alone, &[]);
        assert_eq!(alone, json!({"finalized": true}));
    }

    #[test]
    fn status_checks_say_what_is_missing_as_child_status_check_does() {
        let child = json!({"status": {"conditions": [{"type": "Ready", "status": "False", "reason": "Booting"}]}});
        let check = |t: &str, s: Option<&str>, r: Option<&str>| {
            status_check(
                &[(t.to_owned(), s.map(str::to_owned), r.map(str::to_owned))],
                &child,
            )
        };
        assert_eq!(
            check("Ready", Some("True"), None),
            Err("\"Ready\" condition status is \"False\" (want \"True\")".to_owned())
        );
        assert_eq!(
            check("Synced", None, None),
            Err("required condition type missing: \"Synced\"".to_owned())
        );
        assert_eq!(check("Ready", Some("False"), Some("Booting")), Ok(()));
    }
}
