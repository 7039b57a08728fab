//! The cluster's store, as the API server keeps it: simulated time, apply (create or
//! update with its server-set metadata), get, delete (finalizers, then the garbage
//! collector's cascade) and resource versions.

use std::time::Duration;

use metahooks_protocol::LAST_APPLIED_ANNOTATION;
use serde_json::{Value, json};

use super::{EPOCH, Emulator};
use crate::objects::owner_uid;
use crate::{Key, key_of};

impl Emulator {
    /// The simulated time now, as a timestamp.
    pub fn now(&self) -> jiff::Timestamp {
        let epoch: jiff::Timestamp = EPOCH.parse().unwrap_or(jiff::Timestamp::UNIX_EPOCH);
        let since = jiff::SignedDuration::try_from(self.clock).unwrap_or_default();
        epoch.checked_add(since).unwrap_or(epoch)
    }

    pub(super) fn now_text(&self) -> String {
        self.now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
    }

    /// Client-side apply keeps the applied object in an annotation on the live one;
    /// server-side apply keeps nothing the hook can see.
    pub(super) fn annotate_applied(&mut self, key: &Key, applied: &Value) {
        if self.server_side_apply {
            return;
        }
        let text = applied.to_string();
        if let Some(object) = self.objects.get_mut(key)
            && let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut)
        {
            meta.entry("annotations").or_insert_with(|| json!({}))[LAST_APPLIED_ANNOTATION] =
                json!(text);
        }
    }

    /// Moves simulated time forward (customize answers expire with it).
    pub fn advance(&mut self, by: Duration) {
        self.clock += by;
    }

    pub(super) fn bump_version(&mut self) -> String {
        self.next_version += 1;
        self.next_version.to_string()
    }

    /// Creates or edits an object as a user would (`kubectl apply`): spec changes bump
    /// `metadata.generation`; status and server fields are kept. An object without
    /// `metadata` gets an empty one (and so an empty name).
    pub fn apply(&mut self, object: Value) -> Key {
        self.write(object, true)
    }

    /// Writes an object as a user's edit of the whole object does (`kubectl edit`, a
    /// story's `patch`): like [`Emulator::apply`], except that its finalizers are taken
    /// as written, so an edit can remove one. A terminating object left with none is
    /// gone, and the garbage collector takes what it owned.
    pub fn update(&mut self, object: Value) -> Key {
        self.write(object, false)
    }

    fn write(&mut self, mut object: Value, keep_finalizers: bool) -> Key {
        if !object.get("metadata").is_some_and(Value::is_object)
            && let Some(map) = object.as_object_mut()
        {
            map.insert("metadata".to_owned(), json!({}));
        }
        let kind = object
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let cluster_scoped = self.kinds.is_cluster_scoped(kind);
        if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
            if cluster_scoped {
                // The API server ignores a namespace on a cluster-scoped object.
                meta.remove("namespace");
            } else if meta
                .get("namespace")
                .is_none_or(|ns| ns.as_str() == Some(""))
            {
                meta.insert("namespace".to_owned(), json!("default"));
            }
        }
        metahooks_apiserver::fold_string_data(&mut object);
        let now = self.now_text();
        let key = key_of(&object);
        let version = self.bump_version();
        match self.objects.get(&key).cloned() {
            Some(existing) => {
                let finalizers = object.pointer("/metadata/finalizers").cloned();
                if !keep_server_fields(&mut object, &existing, version) {
                    return key;
                }
                if !keep_finalizers && let Some(meta) = object["metadata"].as_object_mut() {
                    match finalizers {
                        Some(list) => meta.insert("finalizers".to_owned(), list),
                        None => meta.remove("finalizers"),
                    };
                }
            }
            None => {
                let uid = format!("uid-{:04}", self.next_uid);
                self.next_uid += 1;
                let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) else {
                    return key;
                };
                meta.insert("uid".to_owned(), json!(uid));
                meta.insert("generation".to_owned(), json!(1));
                meta.insert("resourceVersion".to_owned(), json!(version));
                meta.insert("creationTimestamp".to_owned(), json!(now));
            }
        }
        self.put(key.clone(), object);
        self.collect_if_released(&key);
        key
    }

    /// The object of that type, namespace and name, if it exists.
    pub fn get(
        &self,
        api_version: &str,
        kind: &str,
        namespace: &str,
        name: &str,
    ) -> Option<&Value> {
        self.objects.get(&(
            api_version.to_owned(),
            kind.to_owned(),
            namespace.to_owned(),
            name.to_owned(),
        ))
    }

    /// `kubectl delete`: objects with finalizers get a deletionTimestamp, others go (with
    /// their owned objects, as the garbage collector would).
    pub fn delete(&mut self, key: &Key) {
        self.remove_with_dependents(key);
    }

    /// Stores an object (replacing any with its key), keeping the owner index.
    pub(super) fn put(&mut self, key: Key, object: Value) {
        self.take(&key);
        match owner_uid(&object) {
            Some(owner) => {
                self.by_owner.entry(owner).or_default().insert(key.clone());
            }
            None => {
                self.orphans.insert(key.clone());
            }
        }
        self.objects.insert(key, object);
    }

    /// Removes an object, keeping the owner index.
    pub(super) fn take(&mut self, key: &Key) -> Option<Value> {
        self.settled.remove(key);
        let object = self.objects.remove(key)?;
        match owner_uid(&object) {
            Some(owner) => {
                if let Some(owned) = self.by_owner.get_mut(&owner) {
                    owned.remove(key);
                    if owned.is_empty() {
                        self.by_owner.remove(&owner);
                    }
                }
            }
            None => {
                self.orphans.remove(key);
            }
        }
        Some(object)
    }

    /// Deletes an object as the API server does: one with finalizers is only marked
    /// (`deletionTimestamp`) and stays, terminating, until the last is removed; one
    /// without goes, and the garbage collector deletes what it owned in turn (background
    /// propagation, as Metacontroller asks for).
    pub(super) fn remove_with_dependents(&mut self, key: &Key) {
        let now = self.now_text();
        self.settled.remove(key);
        let Some(object) = self.objects.get_mut(key) else {
            return;
        };
        let has_finalizers = object
            .pointer("/metadata/finalizers")
            .and_then(Value::as_array)
            .is_some_and(|f| !f.is_empty());
        if has_finalizers {
            if object.pointer("/metadata/deletionTimestamp").is_none() {
                object["metadata"]["deletionTimestamp"] = json!(now);
                self.next_version += 1;
                object["metadata"]["resourceVersion"] = json!(self.next_version.to_string());
            }
            return;
        }
        let Some(object) = self.take(key) else {
            return;
        };
        self.last_applied.remove(key);
        let uid = object
            .pointer("/metadata/uid")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let dependents: Vec<Key> = self
            .by_owner
            .get(&uid)
            .map(|owned| owned.iter().cloned().collect())
            .unwrap_or_default();
        for dependent in dependents {
            self.remove_with_dependents(&dependent);
        }
    }

    /// A terminating object whose last finalizer was removed is gone (with its dependents).
    /// Returns whether it went.
    pub(super) fn collect_if_released(&mut self, key: &Key) -> bool {
        let released = self.objects.get(key).is_some_and(|o| {
            o.pointer("/metadata/deletionTimestamp").is_some()
                && o.pointer("/metadata/finalizers")
                    .and_then(Value::as_array)
                    .is_none_or(Vec::is_empty)
        });
        if released {
            self.remove_with_dependents(key);
        }
        released
    }
}

/// An update (`kubectl apply` of an existing object): what the server set stays, the
/// generation moves when the spec (or a ConfigMap's data) changed, the status is kept.
/// False when the object has no metadata to keep them in (it is not stored).
fn keep_server_fields(object: &mut Value, existing: &Value, version: String) -> bool {
    let generation = existing
        .pointer("/metadata/generation")
        .and_then(Value::as_i64)
        .unwrap_or(1);
    let spec_changed =
        existing.get("spec") != object.get("spec") || existing.get("data") != object.get("data");
    let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) else {
        return false;
    };
    for field in [
        "uid",
        "creationTimestamp",
        "finalizers",
        "ownerReferences",
        "deletionTimestamp",
    ] {
        if let Some(v) = existing.pointer(&format!("/metadata/{field}")) {
            meta.insert(field.to_owned(), v.clone());
        }
    }
    let generation = if spec_changed {
        generation + 1
    } else {
        generation
    };
    meta.insert("generation".to_owned(), json!(generation));
    meta.insert("resourceVersion".to_owned(), json!(version));
    if let Some(status) = existing.get("status")
        && let Some(map) = object.as_object_mut()
    {
        map.insert("status".to_owned(), status.clone());
    }
    true
}
