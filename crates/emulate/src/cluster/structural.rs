//! What the API server does with a custom resource's status under its CRD's structural
//! schema: fields the schema does not declare are pruned (unless it preserves unknown
//! fields), nulls where the schema is not `nullable` are dropped, and a value of the
//! wrong type is refused with 422 (apiextensions-apiserver's pruning, then the OpenAPI
//! validator's "in body must be of type" error).

use serde_json::Value;

/// Prunes `value` (found at `path`, e.g. `status`) by `schema` in place; each type error
/// is added to `errors` in the API server's words.
pub(super) fn prune(value: &mut Value, schema: &Value, path: &str, errors: &mut Vec<String>) {
    if let Some(wanted) = type_error(value, schema) {
        let got = json_type(value);
        errors.push(format!(
            "{path}: Invalid value: \"{got}\": {path} in body must be of type {wanted}: \"{got}\""
        ));
        return;
    }
    match value {
        Value::Object(map) => {
            let preserve = flag(schema, "x-kubernetes-preserve-unknown-fields");
            let properties = schema.get("properties").and_then(Value::as_object);
            let additional = schema.get("additionalProperties");
            let keys: Vec<String> = map.keys().cloned().collect();
            for key in keys {
                let child_schema = properties
                    .and_then(|p| p.get(&key))
                    .or_else(|| additional.filter(|a| a.is_object()));
                let here = format!("{path}.{key}");
                match child_schema {
                    Some(child_schema) => {
                        if map.get(&key).is_some_and(Value::is_null)
                            && !flag(child_schema, "nullable")
                        {
                            map.remove(&key);
                        } else if let Some(child) = map.get_mut(&key) {
                            prune(child, child_schema, &here, errors);
                        }
                    }
                    None if preserve || additional == Some(&Value::Bool(true)) => {}
                    None => {
                        map.remove(&key);
                    }
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for (index, item) in items.iter_mut().enumerate() {
                    prune(item, item_schema, &format!("{path}[{index}]"), errors);
                }
            }
        }
        _ => {}
    }
}

fn flag(schema: &Value, name: &str) -> bool {
    schema.get(name).and_then(Value::as_bool) == Some(true)
}

/// The type the schema wants where `value` is not of it.
fn type_error(value: &Value, schema: &Value) -> Option<&'static str> {
    if value.is_null() {
        return None;
    }
    if flag(schema, "x-kubernetes-int-or-string") {
        let fits = value.is_string() || value.as_f64().is_some_and(|n| n.fract() == 0.0);
        return (!fits).then_some("integer or string");
    }
    let wanted = schema.get("type").and_then(Value::as_str)?;
    let (fits, name) = match wanted {
        "object" => (value.is_object(), "object"),
        "array" => (value.is_array(), "array"),
        "string" => (value.is_string(), "string"),
        "boolean" => (value.is_boolean(), "boolean"),
        "number" => (value.is_number(), "number"),
        "integer" => (
            value.is_i64() || value.is_u64() || value.as_f64().is_some_and(|n| n.fract() == 0.0),
            "integer",
        ),
        _ => return None,
    };
    (!fits).then_some(name)
}

fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_f64() => "number",
        Value::Number(_) => "integer",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn undeclared_fields_and_non_nullable_nulls_are_pruned() {
        let schema = json!({"type": "object", "properties": {
            "ready": {"type": "boolean"},
            "conditions": {"type": "array", "items": {"type": "object", "properties": {"type": {"type": "string"}}}},
            "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
            "counts": {"type": "object", "additionalProperties": {"type": "integer"}},
            "maybe": {"type": "string", "nullable": true},
            "gone": {"type": "string"}}});
        let mut status = json!({"ready": true, "observedGeneration": 3,
            "conditions": [{"type": "Ready", "reason": "x"}], "extra": {"any": 1},
            "counts": {"a": 1}, "maybe": null, "gone": null});
        let mut errors = Vec::new();
        prune(&mut status, &schema, "status", &mut errors);
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(
            status,
            json!({"ready": true, "conditions": [{"type": "Ready"}], "extra": {"any": 1},
                   "counts": {"a": 1}, "maybe": null})
        );
    }

    #[test]
    fn a_wrong_type_is_refused_in_the_api_servers_words() {
        let schema = json!({"type": "object", "properties": {"replicas": {"type": "integer"},
            "port": {"x-kubernetes-int-or-string": true}}});
        let mut status = json!({"replicas": "3", "port": 8080});
        let mut errors = Vec::new();
        prune(&mut status, &schema, "status", &mut errors);
        assert_eq!(
            errors,
            [
                "status.replicas: Invalid value: \"string\": status.replicas in body must be of type integer: \"string\""
            ]
        );
    }
}
