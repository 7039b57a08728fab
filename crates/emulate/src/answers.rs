//! Comparing two answers to the same request: equal bytes, or equal once the transition
//! times stamped in this very answer are set aside.

use serde_json::Value;

pub(crate) fn same_answer(parent: &Value, a: (&str, &Value), b: (&str, &Value)) -> bool {
    if a.0 == b.0 {
        return true;
    }
    let (a_normal, b_normal) = (normalize(a.1, parent), normalize(b.1, parent));
    let stamped = a_normal != *a.1 || b_normal != *b.1;
    if stamped {
        a_normal == b_normal
    } else {
        a.0 == b.0
    }
}

/// An answer with the transition times removed from conditions that appeared or flipped
/// relative to the observed parent — those may carry "now".
fn normalize(response: &Value, parent: &Value) -> Value {
    let mut response = response.clone();
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
