//! Comparing two answers to the same request as Metacontroller uses them: as parsed JSON
//! (key order means nothing to its decoder), with the children or attachments as a set
//! keyed by kind, namespace and name (it keys them so: `MakeChildMap`, pkg/controller/
//! common/children.go, so their order means nothing either), and with the transition
//! times stamped in this very answer set aside. A child that is not observed yet is
//! compared by its key alone: Metacontroller creates it from the first answer, and a
//! second create from another answer to the same request meets AlreadyExists, which
//! `DynamicApply.Apply` ignores, so what differs in it is never acted on.

use serde_json::Value;

use crate::Key;

/// What two answers to one request are compared against: the parent sent and the
/// children observed with it.
#[derive(Clone, Copy)]
pub(crate) struct Asked<'a> {
    pub(crate) parent: &'a Value,
    pub(crate) observed: &'a [Key],
}

pub(crate) fn same_answer(asked: Asked<'_>, a: (&str, &Value), b: (&str, &Value)) -> bool {
    a.0 == b.0 || normalize(a.1, asked) == normalize(b.1, asked)
}

/// Where two answers to the same request differ as Metacontroller reads them: the JSON
/// pointer of the first difference, and the value each has there (None: absent).
pub(crate) fn difference(
    asked: Asked<'_>,
    a: &Value,
    b: &Value,
) -> Option<(String, Option<Value>, Option<Value>)> {
    first_difference(&normalize(a, asked), &normalize(b, asked), String::new())
}

/// The JSON pointer of the first place two stored objects differ, leaving aside what
/// the API server changes on every write (resourceVersion, generation, managedFields)
/// and the last-applied annotation: what a loop kept changing.
pub(crate) fn changed_field(before: &Value, after: &Value) -> Option<String> {
    let strip = |object: &Value| {
        let mut object = object.clone();
        if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
            for field in ["resourceVersion", "generation", "managedFields"] {
                meta.remove(field);
            }
            if let Some(annotations) = meta.get_mut("annotations").and_then(Value::as_object_mut) {
                annotations.remove(metahooks_protocol::LAST_APPLIED_ANNOTATION);
            }
        }
        object
    };
    first_difference(&strip(before), &strip(after), String::new()).map(|(pointer, ..)| pointer)
}

fn first_difference(
    a: &Value,
    b: &Value,
    at: String,
) -> Option<(String, Option<Value>, Option<Value>)> {
    let escape = |key: &str| key.replace('~', "~0").replace('/', "~1");
    match (a, b) {
        (Value::Object(a_map), Value::Object(b_map)) => {
            let mut keys: Vec<&String> = a_map.keys().chain(b_map.keys()).collect();
            keys.sort();
            keys.dedup();
            keys.into_iter().find_map(|key| {
                let here = format!("{at}/{}", escape(key));
                match (a_map.get(key), b_map.get(key)) {
                    (Some(x), Some(y)) => first_difference(x, y, here),
                    (x, y) => Some((here, x.cloned(), y.cloned())),
                }
            })
        }
        (Value::Array(a_items), Value::Array(b_items)) if a_items.len() == b_items.len() => a_items
            .iter()
            .zip(b_items)
            .enumerate()
            .find_map(|(index, (x, y))| first_difference(x, y, format!("{at}/{index}"))),
        _ if a == b => None,
        _ => Some((at, Some(a.clone()), Some(b.clone()))),
    }
}

/// The key a desired child is known by: kind, namespace and name (and the API group,
/// since two kinds may share a name across groups).
fn child_key(child: &Value) -> (String, String, String, String) {
    let text = |pointer: &str| {
        child
            .pointer(pointer)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    let group = text("/apiVersion")
        .rsplit_once('/')
        .map_or(String::new(), |(group, _)| group.to_owned());
    (
        text("/kind"),
        group,
        text("/metadata/namespace"),
        text("/metadata/name"),
    )
}

/// Whether a desired child is one of the observed ones (a child without a namespace is
/// in its parent's, as Metacontroller defaults it).
fn is_observed(child: &Value, asked: Asked<'_>) -> bool {
    let (kind, group, namespace, name) = child_key(child);
    let namespace = if namespace.is_empty() {
        asked
            .parent
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .unwrap_or_default()
    } else {
        namespace.as_str()
    };
    asked.observed.iter().any(|(api_version, k, ns, n)| {
        let g = api_version.rsplit_once('/').map_or("", |(g, _)| g);
        *k == kind && g == group && n == &name && (ns == namespace || ns.is_empty())
    })
}

/// A child as far as a create reads it when it may lose to another: its identity.
fn identity_only(child: &Value) -> Value {
    let mut identity = serde_json::Map::new();
    for field in ["apiVersion", "kind"] {
        if let Some(value) = child.get(field) {
            identity.insert(field.to_owned(), value.clone());
        }
    }
    let mut metadata = serde_json::Map::new();
    for field in ["name", "namespace"] {
        if let Some(value) = child.pointer(&format!("/metadata/{field}")) {
            metadata.insert(field.to_owned(), value.clone());
        }
    }
    identity.insert("metadata".to_owned(), Value::Object(metadata));
    Value::Object(identity)
}

/// An answer as compared: the children (or attachments) in the order of their keys,
/// those not observed yet reduced to their identity, and the transition times removed
/// from conditions that appeared or flipped relative to the observed parent — those may
/// carry "now".
fn normalize(response: &Value, asked: Asked<'_>) -> Value {
    let parent = asked.parent;
    let mut response = response.clone();
    for field in ["children", "attachments"] {
        if let Some(children) = response.get_mut(field).and_then(Value::as_array_mut) {
            for child in children.iter_mut() {
                if child.is_object() && !is_observed(child, asked) {
                    *child = identity_only(child);
                }
            }
            children.sort_by_cached_key(child_key);
        }
    }
    let before: Vec<(String, String)> = parent
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|c| {
            (
                c["type"].as_str().unwrap_or_default().to_owned(),
                c["status"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    if let Some(conditions) = response
        .pointer_mut("/status/conditions")
        .and_then(Value::as_array_mut)
    {
        for condition in conditions {
            let pair = (
                condition["type"].as_str().unwrap_or_default().to_owned(),
                condition["status"].as_str().unwrap_or_default().to_owned(),
            );
            if !before.contains(&pair)
                && let Some(map) = condition.as_object_mut()
            {
                map.remove("lastTransitionTime");
            }
        }
    }
    response
}

/// The JSON path of the first key that appears twice in one object of `text`, if any:
/// sigs.k8s.io/json's strict decoding (Metacontroller's, pkg/hooks/webhook.go) reports
/// duplicate fields, where a plain decode keeps the last one silently.
pub fn duplicate_key(text: &str) -> Option<String> {
    let mut deserializer = serde_json::Deserializer::from_str(text);
    serde::de::DeserializeSeed::deserialize(KeysAt(String::new()), &mut deserializer)
        .ok()
        .flatten()
}

/// Walks a JSON value at a path, answering the first duplicate key's path.
struct KeysAt(String);

impl<'de> serde::de::DeserializeSeed<'de> for KeysAt {
    type Value = Option<String>;

    fn deserialize<D: serde::Deserializer<'de>>(
        self,
        deserializer: D,
    ) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> serde::de::Visitor<'de> for KeysAt {
    type Value = Option<String>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut seen = std::collections::HashSet::new();
        let mut found = None;
        while let Some(key) = map.next_key::<String>()? {
            let path = if self.0.is_empty() {
                key.clone()
            } else {
                format!("{}.{key}", self.0)
            };
            let inner = map.next_value_seed(KeysAt(path.clone()))?;
            if found.is_none() {
                found = if seen.insert(key) { inner } else { Some(path) };
            }
        }
        Ok(found)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut found = None;
        let mut index = 0;
        while let Some(inner) = seq.next_element_seed(KeysAt(format!("{}[{index}]", self.0)))? {
            found = found.or(inner);
            index += 1;
        }
        Ok(found)
    }

    fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
}

#[cfg(test)]
mod comparison_tests {
    use super::*;
    use serde_json::json;

    fn same(a: &str, b: &str) -> bool {
        let (x, y): (Value, Value) = (
            serde_json::from_str(a).unwrap(),
            serde_json::from_str(b).unwrap(),
        );
        let asked = Asked {
            parent: &json!({}),
            observed: &[],
        };
        same_answer(asked, (a, &x), (b, &y))
    }

    fn nothing_observed() -> Asked<'static> {
        static EMPTY: std::sync::LazyLock<Value> = std::sync::LazyLock::new(|| json!({}));
        Asked {
            parent: &EMPTY,
            observed: &[],
        }
    }

    #[test]
    fn key_order_and_child_order_mean_nothing() {
        assert!(same(
            r#"{"status": {"a": 1, "b": 2}}"#,
            r#"{"status": {"b": 2, "a": 1}}"#
        ));
        let one = r#"{"children": [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}},
                                    {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "b"}}]}"#;
        let other = r#"{"children": [{"metadata": {"name": "b"}, "kind": "Secret", "apiVersion": "v1"},
                                      {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}}]}"#;
        assert!(same(one, other));
        // A value that differs is a difference, and is named by its JSON pointer.
        let (x, y) = (
            json!({"status": {"seen": "12:00:01", "n": 1}}),
            json!({"status": {"seen": "12:00:02", "n": 1}}),
        );
        assert_eq!(
            difference(nothing_observed(), &x, &y),
            Some((
                "/status/seen".to_owned(),
                Some(json!("12:00:01")),
                Some(json!("12:00:02"))
            ))
        );
        assert_eq!(
            difference(nothing_observed(), &json!({"a/b": 1}), &json!({})),
            Some(("/a~1b".to_owned(), Some(json!(1)), None))
        );
    }
}

#[cfg(test)]
mod create_tests {
    use super::*;
    use serde_json::json;

    /// A Secret generated anew on each call: before it exists the two answers differ only
    /// in what a losing create would carry; once observed, the difference is real.
    #[test]
    fn a_child_not_observed_yet_is_compared_by_its_key() {
        let parent = json!({"metadata": {"name": "p", "namespace": "ns"}});
        let secret = |value: &str| {
            json!({"children": [{"apiVersion": "v1", "kind": "Secret",
                                 "metadata": {"name": "token"}, "stringData": {"t": value}}]})
        };
        let (one, other) = (secret("x1"), secret("x2"));
        let none: Vec<Key> = Vec::new();
        let before = Asked {
            parent: &parent,
            observed: &none,
        };
        assert_eq!(difference(before, &one, &other), None);
        let existing = vec![(
            "v1".to_owned(),
            "Secret".to_owned(),
            "ns".to_owned(),
            "token".to_owned(),
        )];
        let after = Asked {
            parent: &parent,
            observed: &existing,
        };
        assert_eq!(
            difference(after, &one, &other).map(|d| d.0),
            Some("/children/0/stringData/t".to_owned())
        );
        // A different set of children is a difference whether observed or not.
        let two = json!({"children": [{"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "other"}}]});
        assert!(difference(before, &one, &two).is_some());
    }
}

#[cfg(test)]
mod duplicate_tests {
    use super::duplicate_key;

    #[test]
    fn duplicate_keys_are_found_at_any_depth_and_only_there() {
        assert_eq!(duplicate_key(r#"{"a": 1, "a": 2}"#).as_deref(), Some("a"));
        assert_eq!(
            duplicate_key(r#"{"children": [{"metadata": {"name": "x", "name": "y"}}]}"#).as_deref(),
            Some("children[0].metadata.name")
        );
        assert_eq!(
            duplicate_key(r#"{"a": {"b": 1}, "c": {"b": 2}, "s": "a\"a"}"#),
            None
        );
        assert_eq!(duplicate_key("not json"), None);
    }
}
