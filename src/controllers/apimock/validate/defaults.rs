//! `default` values must fit the type and enum of their schema, wherever schemas are.

use std::collections::BTreeSet;

use serde_json::{Map, Value};

use super::metaschema::location;
use super::{Checker, METHODS};
use crate::controllers::apimock::verdict::Generation;

impl<'a> Checker<'a> {
    /// `default` values must fit the type and enum of their schema, wherever schemas are.
    pub(super) fn schemas(&self) -> Result<(), String> {
        let mut visited = BTreeSet::new();
        let mut roots: Vec<(String, &'a Value)> = Vec::new();
        let named = |pointer: &str| -> Vec<(String, &'a Value)> {
            self.root
                .pointer(pointer)
                .and_then(Value::as_object)
                .map(|m| {
                    m.iter()
                        .map(|(k, v)| (format!("{} → {k}", location(pointer)), v))
                        .collect()
                })
                .unwrap_or_default()
        };
        match self.generation {
            Generation::Swagger2 => {
                roots.extend(named("/definitions"));
                for (name, parameter) in named("/parameters") {
                    roots.push((name, parameter));
                }
            }
            Generation::OpenApi30 | Generation::OpenApi31 => {
                roots.extend(named("/components/schemas"));
                for (name, parameter) in named("/components/parameters") {
                    if let Some(schema) = parameter.get("schema") {
                        roots.push((name, schema));
                    }
                }
            }
        }
        if let Some(paths) = self.root.get("paths").and_then(Value::as_object) {
            for (template, item) in paths {
                self.operation_schemas(template, item, &mut roots);
            }
        }
        for (name, schema) in roots {
            self.schema(&name, schema, &mut visited)?;
        }
        Ok(())
    }

    /// The schemas of a path item's parameters, request bodies and responses, each named
    /// by where it is (`paths → /a → get → parameters → 0`).
    fn operation_schemas(
        &self,
        template: &str,
        item: &'a Value,
        roots: &mut Vec<(String, &'a Value)>,
    ) {
        let at = format!("paths → {template}");
        let mut parameter_lists = vec![(at.clone(), item.get("parameters"))];
        let mut bodies: Vec<(String, &'a Value)> = Vec::new();
        for method in METHODS {
            if let Some(operation) = item.get(method) {
                let here = format!("{at} → {method}");
                parameter_lists.push((here.clone(), operation.get("parameters")));
                if let Some(body) = operation.get("requestBody") {
                    bodies.push((format!("{here} → requestBody"), body));
                }
                if let Some(responses) = operation.get("responses").and_then(Value::as_object) {
                    bodies.extend(responses.iter().map(|(code, response)| {
                        (format!("{here} → responses → {code}"), response)
                    }));
                }
            }
        }
        for (here, list) in parameter_lists {
            let Some(list) = list.and_then(Value::as_array) else {
                continue;
            };
            for (index, parameter) in list.iter().enumerate() {
                let parameter = self.deref(parameter);
                // Swagger 2.0 non-body parameters carry type/default themselves.
                let schema = parameter.get("schema").unwrap_or(parameter);
                roots.push((format!("{here} → parameters → {index}"), schema));
            }
        }
        for (here, body) in bodies {
            let body = self.deref(body);
            if let Some(schema) = body.get("schema") {
                roots.push((format!("{here} → schema"), schema));
            }
            for (media_type, media) in body
                .get("content")
                .and_then(Value::as_object)
                .into_iter()
                .flat_map(Map::iter)
            {
                if let Some(schema) = media.get("schema") {
                    roots.push((format!("{here} → content → {media_type} → schema"), schema));
                }
            }
        }
    }

    fn schema(
        &self,
        name: &str,
        schema: &'a Value,
        visited: &mut BTreeSet<*const Value>,
    ) -> Result<(), String> {
        let schema = self.deref(schema);
        if !visited.insert(std::ptr::from_ref(schema)) {
            return Ok(());
        }
        let Some(object) = schema.as_object() else {
            return Ok(());
        };
        if let Some(default) = object.get("default") {
            let nullable = object.get("nullable").and_then(Value::as_bool) == Some(true);
            if !(default.is_null() && nullable) {
                check_default(object, default)
                    .map_err(|problem| format!("at {name}: default {default} {problem}"))?;
            }
        }
        for key in ["allOf", "anyOf", "oneOf"] {
            for inner in object
                .get(key)
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                self.schema(name, inner, visited)?;
            }
        }
        for key in ["not", "items", "additionalProperties"] {
            if let Some(inner) = object.get(key).filter(|v| v.is_object()) {
                self.schema(name, inner, visited)?;
            }
        }
        for (property, inner) in object
            .get("properties")
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
        {
            self.schema(&format!("{name} → {property}"), inner, visited)?;
        }
        Ok(())
    }
}

fn check_default(schema: &Map<String, Value>, default: &Value) -> Result<(), String> {
    if let Some(allowed) = schema.get("enum").and_then(Value::as_array)
        && !allowed.contains(default)
    {
        return Err(format!(
            "is not one of the enum values {}",
            Value::Array(allowed.clone())
        ));
    }
    let types: Vec<&str> = match schema.get("type") {
        Some(Value::String(one)) => vec![one.as_str()],
        Some(Value::Array(many)) => many.iter().filter_map(Value::as_str).collect(),
        _ => return Ok(()),
    };
    let nullable = schema.get("nullable").and_then(Value::as_bool) == Some(true);
    let fits = types.iter().any(|t| match *t {
        "string" => default.is_string(),
        "integer" => default.as_f64().is_some_and(|n| n.fract() == 0.0),
        "number" => default.is_number(),
        "boolean" => default.is_boolean(),
        "array" => default.is_array(),
        "object" => default.is_object(),
        "null" => default.is_null(),
        "file" => true,
        _ => true,
    }) || (nullable && default.is_null());
    if fits {
        Ok(())
    } else {
        Err(format!("is not of type {}", types.join(" or ")))
    }
}
