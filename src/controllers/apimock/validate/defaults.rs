//! `default` values must fit the type and enum of their schema, wherever schemas are.

use std::collections::BTreeSet;

use serde_json::{Map, Value};

use super::Segment::{Index, Key};
use super::problem::{DefaultProblem, Problem};
use super::{Checker, PathItem, Segment, render};
use crate::controllers::apimock::verdict::Generation;

/// Schemas already checked (by address: a schema reached through several `$ref`s is
/// checked once), and where the walk is, as keys turned into text only for an error.
struct Walk<'a> {
    visited: BTreeSet<*const Value>,
    path: Vec<Segment<'a>>,
}

impl<'a> Walk<'a> {
    /// Runs `visit` with `segments` added to the path.
    fn within<const N: usize>(
        &mut self,
        segments: [Segment<'a>; N],
        visit: impl FnOnce(&mut Walk<'a>) -> Result<(), Problem>,
    ) -> Result<(), Problem> {
        let depth = self.path.len();
        self.path.extend(segments);
        let result = visit(self);
        self.path.truncate(depth);
        result
    }
}

impl<'a> Checker<'a> {
    /// `default` values must fit the type and enum of their schema. Where
    /// openapi-spec-validator checks them (the schemas it walks: each operation's
    /// parameters and responses, and 3.x `components → schemas`), a mismatch refuses the
    /// document; elsewhere (request bodies, and components or Swagger 2.0 definitions
    /// that nothing it walks refers to) the oracle accepts the document, and so do we:
    /// the first such mismatch is returned as a warning. A schema checked by the first
    /// walk is not checked again by the second.
    pub(super) fn schemas(&self) -> Result<Option<Problem>, Problem> {
        let mut walk = Walk {
            visited: BTreeSet::new(),
            path: Vec::new(),
        };
        let paths = self.root.get("paths").and_then(Value::as_object);
        for (template, item) in paths.into_iter().flatten() {
            walk.within([Key("paths"), Key(template)], |walk| {
                self.operation_schemas(item, walk)
            })?;
        }
        if self.generation != Generation::Swagger2 {
            self.named(["components", "schemas"], Some, &mut walk)?;
        }
        Ok(self.unwalked_schemas(&mut walk).err())
    }

    /// The schemas openapi-spec-validator does not walk: request bodies, component
    /// parameters, Swagger 2.0 definitions and parameters.
    fn unwalked_schemas(&self, walk: &mut Walk<'a>) -> Result<(), Problem> {
        let paths = self.root.get("paths").and_then(Value::as_object);
        for (template, item) in paths.into_iter().flatten() {
            for (method, operation) in PathItem::of(item).operations() {
                if let Some(body) = operation.get("requestBody") {
                    walk.within(
                        [Key("paths"), Key(template), Key(method), Key("requestBody")],
                        |walk| self.body_schemas(body, walk),
                    )?;
                }
            }
        }
        match self.generation {
            Generation::Swagger2 => {
                self.named(["definitions"], Some, walk)?;
                // Swagger 2.0 non-body parameters carry type/default themselves.
                self.named(["parameters"], Some, walk)
            }
            Generation::OpenApi30 | Generation::OpenApi31 => self.named(
                ["components", "parameters"],
                |parameter| parameter.get("schema"),
                walk,
            ),
        }
    }

    /// The schemas of the map at `keys` (`components → schemas`), each named by its key.
    fn named<const N: usize>(
        &self,
        keys: [&'static str; N],
        schema_of: impl Fn(&'a Value) -> Option<&'a Value>,
        walk: &mut Walk<'a>,
    ) -> Result<(), Problem> {
        let map = keys
            .iter()
            .try_fold(self.root, |value, key| value.get(key))
            .and_then(Value::as_object);
        for (name, entry) in map.into_iter().flatten() {
            if let Some(schema) = schema_of(entry) {
                walk.within(keys.map(Key), |walk| {
                    walk.within([Key(name)], |walk| self.schema(schema, walk))
                })?;
            }
        }
        Ok(())
    }

    /// The schemas of a path item's parameters (the path item's, then each operation's),
    /// then of its operations' responses, each named by where it is
    /// (`paths → /a → get → parameters → 0`).
    fn operation_schemas(&self, item: &'a Value, walk: &mut Walk<'a>) -> Result<(), Problem> {
        let item = PathItem::of(item);
        self.parameter_schemas(item.shared, walk)?;
        for (method, operation) in item.operations() {
            walk.within([Key(method)], |walk| {
                self.parameter_schemas(operation.get("parameters"), walk)
            })?;
        }
        for (method, operation) in item.operations() {
            let responses = operation.get("responses").and_then(Value::as_object);
            for (code, response) in responses.into_iter().flatten() {
                walk.within([Key(method), Key("responses"), Key(code)], |walk| {
                    self.body_schemas(response, walk)
                })?;
            }
        }
        Ok(())
    }

    fn parameter_schemas(
        &self,
        list: Option<&'a Value>,
        walk: &mut Walk<'a>,
    ) -> Result<(), Problem> {
        let Some(list) = list.and_then(Value::as_array) else {
            return Ok(());
        };
        for (index, parameter) in list.iter().enumerate() {
            let parameter = self.deref(parameter);
            // Swagger 2.0 non-body parameters carry type/default themselves.
            let schema = parameter.get("schema").unwrap_or(parameter);
            walk.within([Key("parameters"), Index(index)], |walk| {
                self.schema(schema, walk)
            })?;
        }
        Ok(())
    }

    /// A request body's or response's schema (Swagger 2.0) and those of its media types.
    fn body_schemas(&self, body: &'a Value, walk: &mut Walk<'a>) -> Result<(), Problem> {
        let body = self.deref(body);
        if let Some(schema) = body.get("schema") {
            walk.within([Key("schema")], |walk| self.schema(schema, walk))?;
        }
        let media_types = body.get("content").and_then(Value::as_object);
        for (media_type, media) in media_types.into_iter().flatten() {
            if let Some(schema) = media.get("schema") {
                walk.within([Key("content"), Key(media_type), Key("schema")], |walk| {
                    self.schema(schema, walk)
                })?;
            }
        }
        Ok(())
    }

    fn schema(&self, schema: &'a Value, walk: &mut Walk<'a>) -> Result<(), Problem> {
        let schema = self.deref(schema);
        if !walk.visited.insert(std::ptr::from_ref(schema)) {
            return Ok(());
        }
        let Some(object) = schema.as_object() else {
            return Ok(());
        };
        let parts = SchemaParts::of(object);
        if let Some(default) = parts.default {
            let nullable = object.get("nullable").and_then(Value::as_bool) == Some(true);
            if !(default.is_null() && nullable) {
                check_default(object, default).map_err(|problem| Problem::Default {
                    at: render(&walk.path),
                    default: default.clone(),
                    problem,
                })?;
            }
        }
        for inner in parts.combined.into_iter().flatten().flatten() {
            self.schema(inner, walk)?;
        }
        for inner in parts.nested.into_iter().flatten() {
            self.schema(inner, walk)?;
        }
        for (property, inner) in parts.properties.into_iter().flatten() {
            walk.within([Key(property)], |walk| self.schema(inner, walk))?;
        }
        Ok(())
    }
}

/// The keys of a schema the walk reads, found in one pass over its keys (a schema has a
/// few; a lookup per keyword cost more than the pass on large definitions).
#[derive(Default)]
struct SchemaParts<'a> {
    default: Option<&'a Value>,
    /// `allOf`, `anyOf`, `oneOf`'s schemas, in that order.
    combined: [Option<&'a Vec<Value>>; 3],
    /// `not`, `items`, `additionalProperties` when they are schemas, in that order.
    nested: [Option<&'a Value>; 3],
    properties: Option<&'a Map<String, Value>>,
}

impl<'a> SchemaParts<'a> {
    fn of(object: &'a Map<String, Value>) -> SchemaParts<'a> {
        let mut parts = SchemaParts::default();
        for (key, value) in object {
            match key.as_str() {
                "default" => parts.default = Some(value),
                "allOf" => parts.combined[0] = value.as_array(),
                "anyOf" => parts.combined[1] = value.as_array(),
                "oneOf" => parts.combined[2] = value.as_array(),
                "not" => parts.nested[0] = Some(value).filter(|v| v.is_object()),
                "items" => parts.nested[1] = Some(value).filter(|v| v.is_object()),
                "additionalProperties" => parts.nested[2] = Some(value).filter(|v| v.is_object()),
                "properties" => parts.properties = value.as_object(),
                _ => {}
            }
        }
        parts
    }
}

fn check_default(schema: &Map<String, Value>, default: &Value) -> Result<(), DefaultProblem> {
    if let Some(allowed) = schema.get("enum").and_then(Value::as_array)
        && !allowed.contains(default)
    {
        return Err(DefaultProblem::NotInEnum {
            allowed: allowed.clone(),
        });
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
        Err(DefaultProblem::WrongType {
            types: types.into_iter().map(str::to_owned).collect(),
        })
    }
}
