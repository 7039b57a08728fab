//! Child names that an object of someone else already holds. Two parents in one
//! namespace may want the same child name (an APIMock `web-config` beside a
//! MonitoredService `web`, whose ConfigMap is `web-config`; an APIMock and a
//! MonitoredService both named `web`). Metacontroller then fails to create the loser's
//! child on every sync, and only its logs say why. The customize hook asks for the
//! objects of each child's name as related objects; one that exists and is not among
//! this parent's children is taken, and the loser's `Ready` condition names it and its
//! owner.

use serde_json::Value;

use super::conditions::{ConditionType, Decided};
use super::reason::Reason;
use crate::protocol::{ObjectMap, RelatedResourceRule, object_name};

/// A child this parent answers with: its type and name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChildName {
    /// The child's kind (`ConfigMap`).
    pub kind: &'static str,
    /// Its apiVersion (`v1`).
    pub api_version: &'static str,
    /// Its plural resource, as customize rules name it (`configmaps`).
    pub resource: &'static str,
    /// Its name.
    pub name: String,
}

impl ChildName {
    /// A child of type `kind` (`apiVersion`, plural `resource`) called `name`.
    pub fn new(
        kind: &'static str,
        api_version: &'static str,
        resource: &'static str,
        name: impl Into<String>,
    ) -> ChildName {
        ChildName {
            kind,
            api_version,
            resource,
            name: name.into(),
        }
    }
}

/// Customize rules asking for the objects that hold `children`'s names in `namespace`.
pub fn rules(namespace: &str, children: &[ChildName]) -> Vec<RelatedResourceRule> {
    children
        .iter()
        .map(|child| RelatedResourceRule {
            api_version: child.api_version.to_owned(),
            resource: child.resource.to_owned(),
            names: Some(vec![child.name.clone()]),
            namespace: Some(namespace.to_owned()),
            ..RelatedResourceRule::default()
        })
        .collect()
}

/// `Ready=False NameTaken` when a related object holds the name of one of `answered` (the
/// children of this answer) in `namespace` and is not this parent's child (`observed`).
/// `what` is the parent's kind.
pub fn condition(
    answered: &[Value],
    observed: &ObjectMap,
    related: &ObjectMap,
    namespace: &str,
    what: &str,
) -> Option<Decided> {
    let taken: Vec<String> = answered
        .iter()
        .filter_map(|child| {
            let kind = child.get("kind").and_then(Value::as_str)?;
            let api_version = child.get("apiVersion").and_then(Value::as_str)?;
            let name = object_name(child)?;
            let holder = related.find(kind, api_version, Some(namespace), name)?;
            let ours = observed
                .find(kind, api_version, None, name)
                .is_some_and(|mine| uid(mine) == uid(holder));
            (!ours).then(|| format!("{kind} {name} already exists and {}", owned_by(holder)))
        })
        .collect();
    if taken.is_empty() {
        return None;
    }
    Some(Decided::new(
        ConditionType::Ready,
        false,
        Reason::NameTaken,
        format!(
            "{}: this {what} cannot create its own; rename this {what}, or remove that object",
            taken.join("; ")
        ),
    ))
}

fn uid(object: &Value) -> Option<&str> {
    object.pointer("/metadata/uid").and_then(Value::as_str)
}

/// Who controls `object`, as a sentence's end.
fn owned_by(object: &Value) -> String {
    let controller = object
        .pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|owner| owner.get("controller").and_then(Value::as_bool) == Some(true));
    match controller {
        Some(owner) => format!(
            "belongs to {} {}",
            owner
                .get("kind")
                .and_then(Value::as_str)
                .unwrap_or("an object"),
            owner.get("name").and_then(Value::as_str).unwrap_or("")
        )
        .trim_end()
        .to_owned(),
        None => format!(
            "has no controller (it was made by hand or by another tool: {})",
            object_name(object).unwrap_or("")
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn map(objects: &[Value]) -> ObjectMap {
        let mut map = ObjectMap::default();
        for object in objects {
            let key = format!(
                "{}.{}",
                object["kind"].as_str().unwrap(),
                object["apiVersion"].as_str().unwrap()
            );
            let name = format!("team-a/{}", object["metadata"]["name"].as_str().unwrap());
            map.0.entry(key).or_default().insert(name, object.clone());
        }
        map
    }

    fn config_map(name: &str, uid: &str, owner: Option<(&str, &str)>) -> Value {
        let mut object = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": "team-a"}});
        if !uid.is_empty() {
            object["metadata"]["uid"] = json!(uid);
        }
        if let Some((kind, owner_name)) = owner {
            object["metadata"]["ownerReferences"] = json!([{"apiVersion": "x/v1", "kind": kind,
                "name": owner_name, "uid": "o", "controller": true}]);
        }
        object
    }

    #[test]
    fn a_name_held_by_another_parents_child_is_taken_and_names_its_owner() {
        let wanted = [config_map("web-config", "", None)];
        let theirs = config_map("web-config", "u1", Some(("MonitoredService", "web")));
        let decided = condition(
            &wanted,
            &ObjectMap::default(),
            &map(&[theirs]),
            "team-a",
            "APIMock",
        )
        .expect("taken");
        assert!(!decided.status);
        assert_eq!(decided.reason, Reason::NameTaken);
        assert!(
            decided.message.starts_with(
                "ConfigMap web-config already exists and belongs to MonitoredService web"
            ),
            "{}",
            decided.message
        );
    }

    #[test]
    fn this_parents_own_child_or_a_free_name_is_not_taken() {
        let wanted = [config_map("web", "", None)];
        let mine = config_map("web", "u1", Some(("APIMock", "web")));
        let observed = map(std::slice::from_ref(&mine));
        assert_eq!(
            condition(&wanted, &observed, &map(&[mine]), "team-a", "APIMock"),
            None
        );
        assert_eq!(
            condition(
                &wanted,
                &ObjectMap::default(),
                &ObjectMap::default(),
                "team-a",
                "APIMock"
            ),
            None
        );
        // Same name in another namespace: not ours to worry about.
        let elsewhere = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "web", "namespace": "team-b", "uid": "u9"}});
        assert_eq!(
            condition(
                &wanted,
                &ObjectMap::default(),
                &map(&[elsewhere]),
                "team-a",
                "APIMock"
            ),
            None
        );
    }

    #[test]
    fn an_object_without_a_controller_is_taken_too() {
        let wanted = [config_map("web", "", None)];
        let by_hand = config_map("web", "u2", None);
        let decided = condition(
            &wanted,
            &ObjectMap::default(),
            &map(&[by_hand]),
            "team-a",
            "APIMock",
        )
        .expect("taken");
        assert!(
            decided.message.contains("has no controller"),
            "{}",
            decided.message
        );
    }
}
