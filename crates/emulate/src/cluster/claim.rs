//! Which objects a CompositeController parent owns before its hook is called, as
//! Metacontroller's `claimChildren` decides (pkg/controller/composite, with
//! k8s.io/controller-manager's ControllerRefManager): an orphan of a child type that
//! the parent's selector matches is adopted, and an owned child whose labels no longer
//! match is released.

use serde_json::{Value, json};

use super::Emulator;
use crate::objects::{labels_match, owner_uid};
use crate::registration::{ControllerType, Registration};
use crate::{Key, key_of};

impl Emulator {
    /// Adopts matching orphans and releases owned children that stopped matching.
    pub(super) fn claim_children(&mut self, registration: &Registration, parent: &Value) {
        if registration.type_ != ControllerType::Composite {
            return;
        }
        let Some(uid) = parent
            .pointer("/metadata/uid")
            .and_then(Value::as_str)
            .map(str::to_owned)
        else {
            return;
        };
        let selector = if registration.generate_selector {
            json!({"matchLabels": {"controller-uid": uid}})
        } else {
            match parent.pointer("/spec/selector") {
                Some(selector) => selector.clone(),
                None => return,
            }
        };
        let namespace = key_of(parent).2;
        let deleting = parent.pointer("/metadata/deletionTimestamp").is_some();
        for key in self.claim_candidates(registration, &uid, &namespace) {
            let Some(current) = self.objects.get(&key) else {
                continue;
            };
            let matches = labels_match(&selector, current);
            let changed = match owner_uid(current) {
                // Release: drop our controller reference, keep the others.
                Some(owner) if owner == uid && !matches => {
                    let mut object = current.clone();
                    if let Some(refs) = object
                        .pointer_mut("/metadata/ownerReferences")
                        .and_then(Value::as_array_mut)
                    {
                        refs.retain(|r| r.get("uid").and_then(Value::as_str) != Some(uid.as_str()));
                    }
                    object
                }
                None if matches && !deleting => adopted(current, parent, &uid),
                _ => continue,
            };
            self.put(key, changed);
        }
    }

    /// The objects that can change hands: the parent's own children (to release) and
    /// orphans of its child types in its namespace (to adopt), none being deleted.
    /// Objects another controller owns are left alone.
    fn claim_candidates(
        &self,
        registration: &Registration,
        uid: &str,
        namespace: &str,
    ) -> Vec<Key> {
        let mut candidates: Vec<Key> = self
            .by_owner
            .get(uid)
            .into_iter()
            .flatten()
            .cloned()
            .collect();
        for rule in &registration.children {
            let start: Key = (
                rule.api_version.clone(),
                rule.kind.clone(),
                namespace.to_owned(),
                String::new(),
            );
            candidates.extend(
                self.orphans
                    .range(start..)
                    .take_while(|key| {
                        key.0 == rule.api_version
                            && key.1 == rule.kind
                            // A namespaced parent lists its own namespace; a cluster-scoped one all.
                            && (namespace.is_empty() || key.2 == namespace)
                    })
                    .cloned(),
            );
        }
        candidates.retain(|key| {
            registration.child_rule(&key.0, &key.1).is_some()
                && (namespace.is_empty() || key.2 == namespace)
                && self
                    .objects
                    .get(key)
                    .is_some_and(|object| object.pointer("/metadata/deletionTimestamp").is_none())
        });
        candidates
    }
}

/// `object` with `parent` added as its controller.
fn adopted(object: &Value, parent: &Value, uid: &str) -> Value {
    let mut object = object.clone();
    let reference = json!({
        "apiVersion": parent["apiVersion"], "kind": parent["kind"],
        "name": parent["metadata"]["name"], "uid": uid,
        "controller": true, "blockOwnerDeletion": true,
    });
    match object
        .pointer_mut("/metadata/ownerReferences")
        .and_then(Value::as_array_mut)
    {
        Some(refs) => refs.push(reference),
        None => object["metadata"]["ownerReferences"] = json!([reference]),
    }
    object
}
