//! Comparing two answers to the same request as Metacontroller uses them: as parsed JSON
//! (key order means nothing to its decoder), with the children or attachments as a set
//! keyed by kind, namespace and name (it keys them so: `MakeChildMap`, pkg/controller/
//! common/children.go, so their order means nothing either), and with the transition
//! times stamped in this very answer set aside.

use serde_json::Value;

pub(crate) fn same_answer(parent: &Value, a: (&str, &Value), b: (&str, &Value)) -> bool {
    a.0 == b.0 || normalize(a.1, parent) == normalize(b.1, parent)
}

/// Where two answers to the same request differ as Metacontroller reads them: the JSON
/// pointer of the first difference, and the value each has there (None: absent).
pub(crate) fn difference(
    parent: &Value,
    a: &Value,
    b: &Value,
) -> Option<(String, Option<Value>, Option<Value>)> {
    first_difference(&normalize(a, parent), &normalize(b, parent), String::new())
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

/// An answer as compared: the children (or attachments) in the order of their keys, and
/// the transition times removed from conditions that appeared or flipped relative to the
/// observed parent — those may carry "now".
fn normalize(response: &Value, parent: &Value) -> Value {
    let mut response = response.clone();
    for field in ["children", "attachments"] {
        if let Some(children) = response.get_mut(field).and_then(Value::as_array_mut) {
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
        same_answer(&json!({}), (a, &x), (b, &y))
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
            difference(&json!({}), &x, &y),
            Some((
                "/status/seen".to_owned(),
                Some(json!("12:00:01")),
                Some(json!("12:00:02"))
            ))
        );
        assert_eq!(
            difference(&json!({}), &json!({"a/b": 1}), &json!({})),
            Some(("/a~1b".to_owned(), Some(json!(1)), None))
        );
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
