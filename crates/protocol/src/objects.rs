//! Object maps (`children`, `attachments`, `related`): `{"<Kind>.<apiVersion>": {"<key>": object}}`.
//!
//! The inner key is `name` or `namespace/name` depending on hook version and scope, so
//! lookups here match on the object's own `metadata` rather than on the key.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// `Kind.apiVersion` as Metacontroller writes it: `ConfigMap.v1`, `Deployment.apps/v1`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct TypeKey {
    /// The object kind.
    pub kind: String,
    /// The object apiVersion.
    pub api_version: String,
}

impl TypeKey {
    /// The key of a kind and apiVersion.
    pub fn new(kind: &str, api_version: &str) -> TypeKey {
        TypeKey {
            kind: kind.to_owned(),
            api_version: api_version.to_owned(),
        }
    }

    /// Splits at the first `.`: kinds have no dots, API groups do.
    pub fn parse(key: &str) -> Option<TypeKey> {
        let (kind, api_version) = key.split_once('.')?;
        if kind.is_empty() || api_version.is_empty() {
            return None;
        }
        Some(TypeKey::new(kind, api_version))
    }
}

impl std::fmt::Display for TypeKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.kind, self.api_version)
    }
}

/// An observed-object map as sent by Metacontroller. A `null` map or group reads as empty.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ObjectMap(
    #[serde(deserialize_with = "deserialize_groups")] pub BTreeMap<String, BTreeMap<String, Value>>,
);

fn deserialize_groups<'de, D>(
    deserializer: D,
) -> Result<BTreeMap<String, BTreeMap<String, Value>>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    let groups: Option<BTreeMap<String, Option<BTreeMap<String, Value>>>> =
        Option::deserialize(deserializer)?;
    Ok(groups
        .unwrap_or_default()
        .into_iter()
        .map(|(key, objects)| (key, objects.unwrap_or_default()))
        .collect())
}

impl ObjectMap {
    /// All objects of one type, in key order.
    pub fn of_type<'a>(
        &'a self,
        kind: &'a str,
        api_version: &'a str,
    ) -> impl Iterator<Item = &'a Value> + 'a {
        self.0
            .iter()
            .filter(move |(key, _)| {
                TypeKey::parse(key).is_some_and(|t| t.kind == kind && t.api_version == api_version)
            })
            .flat_map(|(_, objects)| objects.values())
    }

    /// The object of that type with that name, whatever the key format. When the map holds
    /// the same name in several namespaces (cluster-scoped parents) pass `namespace`.
    pub fn find(
        &self,
        kind: &str,
        api_version: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Option<&Value> {
        for (key, objects) in &self.0 {
            if !TypeKey::parse(key).is_some_and(|t| t.kind == kind && t.api_version == api_version)
            {
                continue;
            }
            let found = objects.values().find(|object| {
                object_name(object) == Some(name)
                    && namespace.is_none_or(|ns| object_namespace(object).unwrap_or("") == ns)
            });
            if found.is_some() {
                return found;
            }
        }
        None
    }

    /// Number of objects across all types.
    pub fn len(&self) -> usize {
        self.0.values().map(BTreeMap::len).sum()
    }

    /// True when no object is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// `metadata.name` of an object, if it is a string.
pub fn object_name(object: &Value) -> Option<&str> {
    object.pointer("/metadata/name").and_then(Value::as_str)
}

/// `metadata.namespace` of an object, if it is a string.
pub fn object_namespace(object: &Value) -> Option<&str> {
    object
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn type_keys_split_at_the_first_dot() {
        let key = TypeKey::parse("RoleBinding.rbac.authorization.k8s.io/v1").unwrap();
        assert_eq!(key.kind, "RoleBinding");
        assert_eq!(key.api_version, "rbac.authorization.k8s.io/v1");
        assert_eq!(key.to_string(), "RoleBinding.rbac.authorization.k8s.io/v1");
        assert!(TypeKey::parse("NoDot").is_none());
        assert!(TypeKey::parse(".v1").is_none());
    }

    #[test]
    fn finds_objects_under_v1_and_v2_keys() {
        let map: ObjectMap = serde_json::from_value(json!({
            "ConfigMap.v1": {
                "a": {"metadata": {"name": "a", "namespace": "ns"}},
                "ns/b": {"metadata": {"name": "b", "namespace": "ns"}}
            },
            "Service.v1": null
        }))
        .unwrap();
        assert!(map.find("ConfigMap", "v1", None, "a").is_some());
        assert!(map.find("ConfigMap", "v1", Some("ns"), "b").is_some());
        assert!(map.find("ConfigMap", "v1", Some("other"), "b").is_none());
        assert!(map.find("Service", "v1", None, "a").is_none());
        assert_eq!(map.len(), 2);
    }

    #[test]
    fn null_map_reads_as_empty() {
        let map: ObjectMap = serde_json::from_value(json!(null)).unwrap();
        assert!(map.is_empty());
    }
}
