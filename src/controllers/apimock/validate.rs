//! Validation of a parsed OpenAPI document: the OpenAPI Initiative's meta-schema for its
//! version, then the checks a schema cannot express (what `openapi-spec-validator`, our
//! reference oracle, also checks): local `$ref`s resolve, path templates and path
//! parameters agree, operation ids are unique, parameters are not repeated, and `default`
//! values fit their schema's type and enum.
//!
//! 3.0 documents are also read with `openapiv3`, the typed model the rest of the Rust
//! ecosystem uses, so what it cannot read is reported too.

use std::collections::BTreeSet;
use std::sync::LazyLock;

use serde::Deserialize;
use serde_json::{Map, Value};

use super::definition::{Generation, Invalid};

static SWAGGER2: LazyLock<Result<jsonschema::Validator, String>> =
    LazyLock::new(|| compile(include_str!("metaschemas/v2.0.json")));
static OPENAPI30: LazyLock<Result<jsonschema::Validator, String>> =
    LazyLock::new(|| compile(include_str!("metaschemas/v3.0.json")));
static OPENAPI31: LazyLock<Result<jsonschema::Validator, String>> =
    LazyLock::new(|| compile(include_str!("metaschemas/v3.1.json")));

fn compile(text: &str) -> Result<jsonschema::Validator, String> {
    let schema: Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
    jsonschema::options()
        .should_validate_formats(false)
        .build(&schema)
        .map_err(|e| e.to_string())
}

const REASON: &str = "InvalidDocument";

/// Documents above this size are checked on two threads.
const PARALLEL_ABOVE_BYTES: usize = 128 * 1024;

/// `size_hint` is the document's text length (the cost driver).
pub fn validate(document: &Value, generation: Generation, size_hint: usize) -> Result<(), Invalid> {
    let label = match generation {
        Generation::Swagger2 => "Swagger 2.0",
        Generation::OpenApi30 => "OpenAPI 3.0",
        Generation::OpenApi31 => "OpenAPI 3.1",
    };
    let fail =
        |message: String| Invalid::new(REASON, format!("not a valid {label} document: {message}"));
    let validator = match generation {
        Generation::Swagger2 => &*SWAGGER2,
        Generation::OpenApi30 => &*OPENAPI30,
        Generation::OpenApi31 => &*OPENAPI31,
    };
    let validator = validator.as_ref().map_err(|e| {
        Invalid::new(
            "ValidatorUnavailable",
            format!("the {label} meta-schema failed to load: {e}"),
        )
    })?;
    // The typed 3.0 model is the slowest reader (serde's flatten buffers every object),
    // so on large documents it runs on its own thread beside the meta-schema and the
    // semantic checks; the verdict is the same, the wait is shorter.
    let typed_check = |document: &Value| -> Result<(), Invalid> {
        if generation == Generation::OpenApi30
            && openapiv3::OpenAPI::deserialize(document).is_err()
            && let Err(error) = serde_path_to_error::deserialize::<_, openapiv3::OpenAPI>(document)
        {
            return Err(fail(format!("at {}: {}", error.path(), error.inner())));
        }
        Ok(())
    };
    let structural_check = |document: &Value| -> Result<(), Invalid> {
        // `is_valid` skips building error values; the error is computed only on failure.
        if !validator.is_valid(document)
            && let Err(error) = validator.validate(document)
        {
            return Err(fail(format!(
                "at {}: {}",
                location(error.instance_path().as_str()),
                short(&error.to_string())
            )));
        }
        if generation == Generation::OpenApi31 {
            check_dialect(document).map_err(fail)?;
        }
        let mut checker = Checker {
            root: document,
            generation,
            operation_ids: BTreeSet::new(),
            reaching: std::cell::RefCell::new(BTreeSet::new()),
        };
        checker
            .references(document, &mut Vec::new())
            .map_err(fail)?;
        checker.paths().map_err(fail)?;
        checker.schemas().map_err(fail)?;
        Ok(())
    };
    if size_hint < PARALLEL_ABOVE_BYTES {
        structural_check(document)?;
        return typed_check(document);
    }
    std::thread::scope(|scope| {
        let typed = scope.spawn(|| typed_check(document));
        let structural = structural_check(document);
        let typed = typed
            .join()
            .unwrap_or_else(|_| Err(Invalid::new(REASON, "the OpenAPI 3.0 model reader failed")));
        structural.and(typed)
    })
}

/// JSON Schema dialects a 3.1 document may declare for its schemas; anything else
/// leaves the meaning of every schema in it undefined.
const KNOWN_DIALECTS: [&str; 3] = [
    "https://spec.openapis.org/oas/3.1/dialect/base",
    "https://json-schema.org/draft/2020-12/schema",
    "https://json-schema.org/draft/2019-09/schema",
];

fn check_dialect(document: &Value) -> Result<(), String> {
    match document.get("jsonSchemaDialect").and_then(Value::as_str) {
        Some(dialect) if !KNOWN_DIALECTS.contains(&dialect.trim_end_matches('#')) => Err(format!(
            "at jsonSchemaDialect: '{dialect}' is not a JSON Schema dialect metahooks knows ({})",
            KNOWN_DIALECTS.join(", ")
        )),
        _ => Ok(()),
    }
}

/// A JSON pointer as a person reads it: `paths → /pets/{id} → get`.
fn location(pointer: &str) -> String {
    if pointer.is_empty() {
        return "the top level".to_owned();
    }
    pointer
        .trim_start_matches('/')
        .split('/')
        .map(|segment| segment.replace("~1", "/").replace("~0", "~"))
        .collect::<Vec<_>>()
        .join(" → ")
}

/// Validator messages quote whole sub-documents; keep condition messages readable.
fn short(message: &str) -> String {
    const LIMIT: usize = 300;
    if message.len() <= LIMIT {
        return message.to_owned();
    }
    let mut end = LIMIT;
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &message[..end])
}

#[derive(Clone, Copy)]
enum Segment<'a> {
    Key(&'a str),
    Index(usize),
}

fn render(path: &[Segment<'_>]) -> String {
    path.iter()
        .map(|segment| match segment {
            Segment::Key(key) => (*key).to_owned(),
            Segment::Index(index) => index.to_string(),
        })
        .collect::<Vec<_>>()
        .join(" → ")
}

struct Checker<'a> {
    root: &'a Value,
    generation: Generation,
    operation_ids: BTreeSet<String>,
    /// `$ref` targets already known to reach a value (each chain is walked once).
    reaching: std::cell::RefCell<BTreeSet<&'a str>>,
}

const METHODS: [&str; 8] = [
    "get", "put", "post", "delete", "options", "head", "patch", "trace",
];

impl<'a> Checker<'a> {
    /// Every local `$ref` must point at something: the mock gets one self-contained file.
    /// The path is a stack of borrowed keys, turned into text only for the error.
    fn references(&self, value: &'a Value, path: &mut Vec<Segment<'a>>) -> Result<(), String> {
        match value {
            Value::Object(object) => {
                if let Some(Value::String(target)) = object.get("$ref") {
                    self.reaches_a_value(target).map_err(|problem| {
                        format!("at {}: $ref '{target}' {problem}", render(path))
                    })?;
                }
                for (key, child) in object {
                    path.push(Segment::Key(key));
                    let result = self.references(child, path);
                    path.pop();
                    result?;
                }
                Ok(())
            }
            Value::Array(items) => {
                for (index, child) in items.iter().enumerate() {
                    path.push(Segment::Index(index));
                    let result = self.references(child, path);
                    path.pop();
                    result?;
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// Follows a `$ref` chain to the end: every link must resolve, and the chain must end
    /// in something that is not itself a `$ref` (`P0: {$ref: P1}`, `P1: {$ref: P0}` names
    /// nothing). A schema that refers to itself *inside* `properties` or `items` is fine:
    /// only the `$ref` at the top of each target is followed.
    fn reaches_a_value(&self, first: &'a str) -> Result<(), String> {
        let mut chain: Vec<&'a str> = Vec::new();
        let mut target = first;
        loop {
            if self.reaching.borrow().contains(target) {
                break;
            }
            if chain.contains(&target) {
                return Err(format!(
                    "is a cycle of references that never reaches a value ({} → {target})",
                    chain.join(" → ")
                ));
            }
            chain.push(target);
            let value = self.resolve(target).map_err(|problem| {
                if chain.len() == 1 {
                    problem
                } else {
                    format!("leads to '{target}', which {problem}")
                }
            })?;
            match value.get("$ref") {
                Some(Value::String(next)) if target.starts_with('#') => target = next,
                _ => break,
            }
        }
        self.reaching.borrow_mut().extend(chain);
        Ok(())
    }

    fn resolve(&self, target: &str) -> Result<&'a Value, String> {
        let Some(fragment) = target.strip_prefix('#') else {
            // Another file or URL: the mock server resolves it at start-up (Prism fetches
            // URLs), so it is not ours to judge here.
            return Ok(self.root);
        };
        let decoded = percent_decode(fragment);
        self.root
            .pointer(&decoded)
            .ok_or_else(|| "points at nothing in this document".to_owned())
    }

    /// Follows a `$ref` chain (bounded) to the object it names.
    fn deref(&self, value: &'a Value) -> &'a Value {
        let mut current = value;
        for _ in 0..32 {
            match current.get("$ref").and_then(Value::as_str) {
                Some(target) => match self.resolve(target) {
                    Ok(next) => current = next,
                    Err(_) => return current,
                },
                None => return current,
            }
        }
        current
    }

    fn paths(&mut self) -> Result<(), String> {
        let Some(paths) = self.root.get("paths").and_then(Value::as_object) else {
            return Ok(());
        };
        for (template, item) in paths {
            let item = self.deref(item);
            let Some(item) = item.as_object() else {
                continue;
            };
            let shared = item.get("parameters");
            if let Some(shared) = shared {
                self.unique_parameters(shared, template, "path item")?;
            }
            let in_template = template_parameters(template);
            for method in METHODS {
                let Some(operation) = item.get(method) else {
                    continue;
                };
                self.operation(template, method, operation, shared, &in_template)?;
            }
        }
        Ok(())
    }

    fn operation(
        &mut self,
        template: &str,
        method: &str,
        operation: &'a Value,
        shared: Option<&'a Value>,
        in_template: &BTreeSet<String>,
    ) -> Result<(), String> {
        if let Some(id) = operation.get("operationId").and_then(Value::as_str)
            && !self.operation_ids.insert(id.to_owned())
        {
            return Err(format!(
                "operationId '{id}' of {method} {template} is used by another operation too"
            ));
        }
        let own = operation.get("parameters");
        if let Some(own) = own {
            self.unique_parameters(own, template, method)?;
        }
        let mut declared = BTreeSet::new();
        for list in [own, shared].into_iter().flatten() {
            for parameter in list.as_array().into_iter().flatten() {
                let parameter = self.deref(parameter);
                if parameter.get("in").and_then(Value::as_str) == Some("path")
                    && let Some(name) = parameter.get("name").and_then(Value::as_str)
                {
                    declared.insert(name.to_owned());
                }
            }
        }
        if let Some(missing) = in_template.difference(&declared).next() {
            return Err(format!(
                "{method} {template}: path parameter '{missing}' appears in the path but is not declared with `in: path`"
            ));
        }
        if let Some(extra) = declared.difference(in_template).next() {
            return Err(format!(
                "{method} {template}: path parameter '{extra}' is declared but does not appear in the path"
            ));
        }
        Ok(())
    }

    fn unique_parameters(
        &self,
        list: &'a Value,
        template: &str,
        owner: &str,
    ) -> Result<(), String> {
        let mut seen = BTreeSet::new();
        for parameter in list.as_array().into_iter().flatten() {
            let parameter = self.deref(parameter);
            let name = parameter
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let location = parameter
                .get("in")
                .and_then(Value::as_str)
                .unwrap_or_default();
            if !seen.insert((name, location)) {
                return Err(format!(
                    "{owner} of {template}: parameter '{name}' in {location} is declared twice"
                ));
            }
        }
        Ok(())
    }

    /// `default` values must fit the type and enum of their schema, wherever schemas are.
    fn schemas(&self) -> Result<(), String> {
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

    fn operation_schemas(
        &self,
        template: &str,
        item: &'a Value,
        roots: &mut Vec<(String, &'a Value)>,
    ) {
        let mut parameter_lists = vec![item.get("parameters")];
        let mut bodies = Vec::new();
        for method in METHODS {
            if let Some(operation) = item.get(method) {
                parameter_lists.push(operation.get("parameters"));
                bodies.push(operation.get("requestBody"));
                if let Some(responses) = operation.get("responses").and_then(Value::as_object) {
                    bodies.extend(responses.values().map(Some));
                }
            }
        }
        for parameter in parameter_lists
            .into_iter()
            .flatten()
            .filter_map(Value::as_array)
            .flatten()
        {
            let parameter = self.deref(parameter);
            // Swagger 2.0 non-body parameters carry type/default themselves.
            let schema = parameter.get("schema").unwrap_or(parameter);
            roots.push((format!("paths → {template} → parameters"), schema));
        }
        for body in bodies.into_iter().flatten() {
            let body = self.deref(body);
            if let Some(schema) = body.get("schema") {
                roots.push((format!("paths → {template}"), schema));
            }
            for media in body
                .get("content")
                .and_then(Value::as_object)
                .into_iter()
                .flat_map(Map::values)
            {
                if let Some(schema) = media.get("schema") {
                    roots.push((format!("paths → {template}"), schema));
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

/// The names between braces in a path template: `/pets/{id}` → `{"id"}`.
fn template_parameters(template: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        let after = &rest[open + 1..];
        let Some(close) = after.find('}') else { break };
        if close > 0 {
            names.insert(after[..close].to_owned());
        }
        rest = &after[close + 1..];
    }
    names
}

pub(super) fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let Some(hex) = text.get(i + 1..i + 3)
            && let Ok(byte) = u8::from_str_radix(hex, 16)
        {
            out.push(byte);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn v30(paths: Value, components: Value) -> Value {
        json!({"openapi": "3.0.3", "info": {"title": "t", "version": "1"}, "paths": paths, "components": components})
    }

    fn ok() -> Value {
        json!({"200": {"description": "ok"}})
    }

    #[test]
    fn accepts_a_small_valid_document() {
        let doc = v30(
            json!({"/pets/{id}": {"get": {"parameters": [{"name": "id", "in": "path", "required": true, "schema": {"type": "string"}}], "responses": ok()}}}),
            json!({}),
        );
        validate(&doc, Generation::OpenApi30, 0).unwrap();
    }

    #[test]
    fn dangling_ref_names_its_location() {
        let doc = v30(
            json!({"/a": {"get": {"responses": {"200": {"description": "x", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Missing"}}}}}}}}),
            json!({}),
        );
        let error = validate(&doc, Generation::OpenApi30, 0).unwrap_err();
        assert!(
            error.message.contains("#/components/schemas/Missing"),
            "{}",
            error.message
        );
        assert!(
            error.message.contains("paths → /a → get"),
            "{}",
            error.message
        );
    }

    #[test]
    fn reference_cycles_that_name_nothing_are_refused() {
        let get = json!({"/a": {"get": {"parameters": [{"$ref": "#/components/parameters/P0"}], "responses": {"200": {"description": "x"}}}}});
        for parameters in [
            json!({"P0": {"$ref": "#/components/parameters/P0"}}),
            json!({"P0": {"$ref": "#/components/parameters/P1"}, "P1": {"$ref": "#/components/parameters/P2"}, "P2": {"$ref": "#/components/parameters/P0"}}),
        ] {
            let error = validate(
                &v30(get.clone(), json!({"parameters": parameters})),
                Generation::OpenApi30,
                0,
            )
            .unwrap_err();
            assert!(
                error.message.contains("cycle of references"),
                "{}",
                error.message
            );
            assert!(
                error.message.contains("at components → parameters → P"),
                "{}",
                error.message
            );
        }
        let chained = json!({"P0": {"$ref": "#/components/parameters/P1"}, "P1": {"$ref": "#/components/parameters/Gone"}});
        let error = validate(
            &v30(get, json!({"parameters": chained})),
            Generation::OpenApi30,
            0,
        )
        .unwrap_err();
        assert!(
            error
                .message
                .contains("leads to '#/components/parameters/Gone'"),
            "{}",
            error.message
        );
    }

    #[test]
    fn recursive_schemas_that_reach_content_stay_valid() {
        let paths = json!({"/a": {"get": {"responses": {"200": {"description": "x", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Alias"}}}}}}}});
        let schemas = json!({
            "Alias": {"$ref": "#/components/schemas/Node"},
            "Node": {"type": "object", "properties": {"next": {"$ref": "#/components/schemas/Node"},
                     "children": {"type": "array", "items": {"$ref": "#/components/schemas/Alias"}}}}
        });
        assert!(
            validate(
                &v30(paths, json!({"schemas": schemas})),
                Generation::OpenApi30,
                0
            )
            .is_ok()
        );
    }

    #[test]
    fn undeclared_path_parameter_is_refused() {
        let doc = v30(
            json!({"/pets/{id}": {"get": {"responses": ok()}}}),
            json!({}),
        );
        let error = validate(&doc, Generation::OpenApi30, 0).unwrap_err();
        assert!(error.message.contains("'id'"), "{}", error.message);
    }

    #[test]
    fn duplicate_operation_ids_are_refused() {
        let doc = v30(
            json!({"/a": {"get": {"operationId": "x", "responses": ok()}}, "/b": {"get": {"operationId": "x", "responses": ok()}}}),
            json!({}),
        );
        assert!(
            validate(&doc, Generation::OpenApi30, 0)
                .unwrap_err()
                .message
                .contains("operationId 'x'")
        );
    }

    #[test]
    fn defaults_must_fit_their_schema() {
        let bad_enum = v30(
            json!({}),
            json!({"schemas": {"S": {"type": "integer", "enum": ["6"], "default": 6}}}),
        );
        assert!(validate(&bad_enum, Generation::OpenApi30, 0).is_err());
        let bad_type = v30(
            json!({}),
            json!({"schemas": {"S": {"type": "object", "properties": {"n": {"type": "integer", "default": "10"}}}}}),
        );
        assert!(
            validate(&bad_type, Generation::OpenApi30, 0)
                .unwrap_err()
                .message
                .contains("S → n")
        );
        let nullable = v30(
            json!({}),
            json!({"schemas": {"S": {"type": "string", "nullable": true, "default": null}}}),
        );
        validate(&nullable, Generation::OpenApi30, 0).unwrap();
    }

    #[test]
    fn meta_schema_errors_say_where() {
        let doc = json!({"openapi": "3.0.3", "info": {"title": "t", "version": "1"}, "paths": {"items": {}}});
        let error = validate(&doc, Generation::OpenApi30, 0).unwrap_err();
        assert!(error.message.contains("paths"), "{}", error.message);
    }

    #[test]
    fn template_parameters_are_extracted() {
        assert_eq!(
            template_parameters("/a/{x}/b/{y}"),
            BTreeSet::from(["x".to_owned(), "y".to_owned()])
        );
        assert!(template_parameters("/a/{").is_empty());
    }
}
