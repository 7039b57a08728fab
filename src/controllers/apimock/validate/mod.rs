//! Validation of a parsed OpenAPI document: the OpenAPI Initiative's meta-schema for its
//! version, then the checks a schema cannot express (what `openapi-spec-validator`, our
//! reference oracle, also checks): local `$ref`s resolve, path templates and path
//! parameters agree, operation ids are unique, parameters are not repeated, and `default`
//! values fit their schema's type and enum.
//!
//! A full read of 3.0 documents into `openapiv3`'s typed model used to run here too. It
//! cost a third of a new definition's validation (serde's `flatten` buffers every
//! object) and refused nothing these checks accept on the oracle corpus, so it went;
//! `openapiv3` reads the summary's `info` instead.
//!
//! - [`metaschema`]: the OpenAPI Initiative's JSON schemas, and readable locations;
//! - [`refs`]: every local `$ref` resolves and reaches a value;
//! - [`paths`]: path templates, path parameters, unique operation ids and parameters;
//! - [`defaults`]: `default` values fit their schema.

mod defaults;
mod metaschema;
mod paths;
mod problem;
mod refs;

use std::collections::{BTreeSet, HashMap};

use serde_json::Value;

use self::problem::Problem;
pub(super) use self::refs::percent_decode;
use super::verdict::{Generation, Invalid};
use crate::controllers::common::reason::Reason;

const REASON: Reason = Reason::InvalidDocument;

/// Where a document holds the keys whose checks would otherwise walk the whole tree, as
/// its reader (YAML or JSON) saw them: the targets of its `$ref`s and whether any
/// `default` is written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Landmarks {
    /// Every string a `$ref` key holds, in the order read (repeats included).
    pub refs: Vec<String>,
    /// Whether any mapping has a `default` key.
    pub any_default: bool,
}

impl Landmarks {
    /// The keys a reader watches for, in the order [`Landmarks::from_sightings`] reads them.
    pub const KEYS: [&'static str; 2] = ["$ref", "default"];

    /// The landmarks from what a reader saw under [`Landmarks::KEYS`].
    pub fn from_sightings(seen: Vec<crate::yaml::Sighting>) -> Landmarks {
        let mut seen = seen.into_iter();
        let refs = seen.next().unwrap_or_default().strings;
        let any_default = seen.next().is_some_and(|default| default.times > 0);
        Landmarks { refs, any_default }
    }
}

/// The meta-schema of the document's version, then the checks a schema cannot express.
/// Returns a warning about what openapi-spec-validator lets pass and a server may trip
/// over (a `default` that does not fit its schema where the oracle does not look).
/// With `landmarks`, what they show absent is not looked for, and `$ref`s are checked
/// from their list; the tree is walked for a reference only to name where a broken one is.
///
/// # Errors
/// The first problem found, naming where it is.
pub fn validate<'a>(
    document: &'a Value,
    generation: Generation,
    landmarks: Option<&'a Landmarks>,
) -> Result<Option<String>, Invalid> {
    let label = match generation {
        Generation::Swagger2 => "Swagger 2.0",
        Generation::OpenApi30 => "OpenAPI 3.0",
        Generation::OpenApi31 => "OpenAPI 3.1",
    };
    let fail =
        |problem: Problem| Invalid::new(REASON, format!("not a valid {label} document: {problem}"));
    let validator = metaschema::validator(generation).map_err(|e| {
        Invalid::new(
            Reason::ValidatorUnavailable,
            format!("the {label} meta-schema failed to load: {e}"),
        )
    })?;
    // `is_valid` skips building error values; the error is computed only on failure.
    if !validator.is_valid(document)
        && let Err(error) = validator.validate(document)
    {
        return Err(fail(Problem::MetaSchema(metaschema::explain(&error))));
    }
    if generation == Generation::OpenApi31 {
        metaschema::check_dialect(document).map_err(fail)?;
    }
    let mut checker = Checker {
        root: document,
        generation,
        operation_ids: BTreeSet::new(),
        reaching: std::cell::RefCell::new(BTreeSet::new()),
        chain_ends: std::cell::RefCell::new(HashMap::new()),
    };
    let listed_refs_reach = landmarks.is_some_and(|seen| {
        seen.refs
            .iter()
            .all(|target| checker.reaches_a_value(target).is_ok())
    });
    if !listed_refs_reach {
        checker
            .references(document, &mut Vec::new())
            .map_err(fail)?;
    }
    checker.paths().map_err(fail)?;
    if landmarks.is_some_and(|seen| !seen.any_default) {
        return Ok(None);
    }
    let warning = checker.schemas().map_err(fail)?;
    Ok(warning.map(|problem| problem.to_string()))
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
    operation_ids: BTreeSet<&'a str>,
    /// `$ref` targets already known to reach a value (each chain is walked once).
    reaching: std::cell::RefCell<BTreeSet<&'a str>>,
    /// Where `deref` ends for a first `$ref` target.
    chain_ends: std::cell::RefCell<HashMap<&'a str, &'a Value>>,
}

const METHODS: [&str; 8] = [
    "get", "put", "post", "delete", "options", "head", "patch", "trace",
];

/// A path item's shared `parameters` and its operations, found in one pass over its few
/// keys (a lookup per method costs more on the largest definitions, whose every path
/// item several checks visit).
struct PathItem<'a> {
    shared: Option<&'a Value>,
    operations: [Option<&'a Value>; METHODS.len()],
}

impl<'a> PathItem<'a> {
    fn of(item: &'a Value) -> PathItem<'a> {
        let mut read = PathItem {
            shared: None,
            operations: [None; METHODS.len()],
        };
        for (key, value) in item.as_object().into_iter().flatten() {
            if key == "parameters" {
                read.shared = Some(value);
            } else if let Some(at) = METHODS.iter().position(|method| key == method) {
                read.operations[at] = Some(value);
            }
        }
        read
    }

    /// Each operation with its method, in [`METHODS`] order.
    fn operations(&self) -> impl Iterator<Item = (&'static str, &'a Value)> + '_ {
        METHODS
            .iter()
            .zip(self.operations)
            .filter_map(|(method, operation)| Some((*method, operation?)))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::paths::template_parameters;
    use super::*;

    /// [`super::validate`] three ways: walking the tree, and from the landmarks the
    /// readers note in the same document written as YAML and as JSON. All must agree.
    pub(super) fn validate(
        document: &Value,
        generation: Generation,
    ) -> Result<Option<String>, Invalid> {
        let walked = super::validate(document, generation, None);
        let yaml = crate::yaml::to_string(document).unwrap();
        let bound = crate::yaml::Expansion::for_input(yaml.len());
        let json = serde_json::to_string(document).unwrap();
        for read in [
            crate::yaml::value_bounded_watching(&yaml, bound, &Landmarks::KEYS).unwrap(),
            crate::yaml::json_value_watching(&json, &Landmarks::KEYS).unwrap(),
        ] {
            assert_eq!(&read.0, document, "the text reads back as the document");
            let landmarks = Landmarks::from_sightings(read.1);
            let from_landmarks = super::validate(document, generation, Some(&landmarks));
            assert_eq!(walked, from_landmarks, "landmarks {landmarks:?}");
        }
        walked
    }

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
        validate(&doc, Generation::OpenApi30).unwrap();
    }

    #[test]
    fn a_one_of_failure_says_which_branch_was_meant_and_why() {
        let typo = v30(
            json!({"/a": {"get": {"parameters": [{"name": "q", "in": "query", "schema": {"type": "strng"}}], "responses": ok()}}}),
            json!({}),
        );
        let error = validate(&typo, Generation::OpenApi30)
            .unwrap_err()
            .to_string();
        assert!(
            error.contains(
                "as meant: at paths → /a → get → parameters → 0 → schema → type: \"strng\""
            ),
            "{error}"
        );
        let no_description = v30(
            json!({"/a": {"get": {"responses": {"200": {"content": {}}}}}}),
            json!({}),
        );
        let error = validate(&no_description, Generation::OpenApi30)
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("\"description\" is a required property"),
            "{error}"
        );
        assert!(
            !error.contains("as meant: at paths → /a → get → responses → 200: \"$ref\""),
            "{error}"
        );
    }

    #[test]
    fn a_bad_default_names_the_operation_and_the_parameter() {
        let doc = v30(
            json!({"/a": {"get": {"parameters": [
                {"name": "p", "in": "query", "schema": {"type": "string"}},
                {"name": "q", "in": "query", "schema": {"type": "integer", "default": "abc"}}],
                "responses": ok()}}}),
            json!({}),
        );
        let error = validate(&doc, Generation::OpenApi30)
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("at paths → /a → get → parameters → 1: default \"abc\""),
            "{error}"
        );
    }

    #[test]
    fn dangling_ref_names_its_location() {
        let doc = v30(
            json!({"/a": {"get": {"responses": {"200": {"description": "x", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Missing"}}}}}}}}),
            json!({}),
        );
        let error = validate(&doc, Generation::OpenApi30).unwrap_err();
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
        let error = validate(&doc, Generation::OpenApi30).unwrap_err();
        assert!(error.message.contains("'id'"), "{}", error.message);
    }

    #[test]
    fn references_to_other_files_are_left_to_whoever_resolves_them() {
        // Parameters kept in other files are not known here: one of them may declare the
        // path's `{id}`, and two of them are not "the same parameter twice".
        let external = json!([{"$ref": "params.yaml#/id"}, {"$ref": "params.yaml#/limit"}]);
        let doc = v30(
            json!({"/pets/{id}": {"get": {"parameters": external, "responses": ok()}}}),
            json!({"schemas": {"Pet": {"$ref": "schemas.yaml#/Pet"}}}),
        );
        assert!(validate(&doc, Generation::OpenApi30).is_ok());
        // What this document does say is still checked.
        let own = json!([{"$ref": "params.yaml#/id"}, {"name": "q", "in": "path", "required": true, "schema": {"type": "string"}}]);
        let extra = v30(
            json!({"/pets/{id}": {"get": {"parameters": own, "responses": ok()}}}),
            json!({}),
        );
        assert!(validate(&extra, Generation::OpenApi30).is_err());
    }

    #[test]
    fn duplicate_operation_ids_are_refused() {
        let doc = v30(
            json!({"/a": {"get": {"operationId": "x", "responses": ok()}}, "/b": {"get": {"operationId": "x", "responses": ok()}}}),
            json!({}),
        );
        assert!(
            validate(&doc, Generation::OpenApi30)
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
        assert!(validate(&bad_enum, Generation::OpenApi30).is_err());
        let bad_type = v30(
            json!({}),
            json!({"schemas": {"S": {"type": "object", "properties": {"n": {"type": "integer", "default": "10"}}}}}),
        );
        assert!(
            validate(&bad_type, Generation::OpenApi30)
                .unwrap_err()
                .message
                .contains("S → n")
        );
        let nullable = v30(
            json!({}),
            json!({"schemas": {"S": {"type": "string", "nullable": true, "default": null}}}),
        );
        validate(&nullable, Generation::OpenApi30).unwrap();
    }

    /// Every kind of place a schema sits is named in the message, key by key: a refusal
    /// where openapi-spec-validator checks defaults, a warning where it does not.
    #[test]
    fn a_bad_default_is_named_by_where_its_schema_sits() {
        let bad = json!({"type": "integer", "default": "x"});
        let in_media =
            json!({"application/json": {"schema": {"type": "object", "properties": {"n": bad}}}});
        let cases = [
            (
                v30(
                    json!({}),
                    json!({"schemas": {"S": {"allOf": [{"properties": {"n": bad}}]}}}),
                ),
                Generation::OpenApi30,
                "components → schemas → S → n",
                true,
            ),
            (
                v30(
                    json!({}),
                    json!({"parameters": {"P": {"name": "p", "in": "query", "schema": bad}}}),
                ),
                Generation::OpenApi30,
                "components → parameters → P",
                false,
            ),
            (
                v30(
                    json!({"/a": {"parameters": [{"name": "p", "in": "query", "schema": bad}], "get": {"responses": ok()}}}),
                    json!({}),
                ),
                Generation::OpenApi30,
                "paths → /a → parameters → 0",
                true,
            ),
            (
                v30(
                    json!({"/a": {"post": {"requestBody": {"content": in_media}, "responses": ok()}}}),
                    json!({}),
                ),
                Generation::OpenApi30,
                "paths → /a → post → requestBody → content → application/json → schema → n",
                false,
            ),
            (
                v30(
                    json!({"/a": {"get": {"responses": {"200": {"description": "d", "content": in_media}}}}}),
                    json!({}),
                ),
                Generation::OpenApi30,
                "paths → /a → get → responses → 200 → content → application/json → schema → n",
                true,
            ),
            (
                json!({"swagger": "2.0", "info": {"title": "t", "version": "1"}, "paths": {"/a": {"get": {"responses": {"200": {"description": "d", "schema": bad}}}}}}),
                Generation::Swagger2,
                "paths → /a → get → responses → 200 → schema",
                true,
            ),
            (
                json!({"swagger": "2.0", "info": {"title": "t", "version": "1"}, "paths": {}, "definitions": {"D": {"type": "object", "properties": {"n": bad}}}}),
                Generation::Swagger2,
                "definitions → D → n",
                false,
            ),
        ];
        for (document, generation, place, refused) in cases {
            let message = match validate(&document, generation) {
                Err(invalid) if refused => invalid.message,
                Ok(Some(warning)) if !refused => warning,
                other => panic!("{place}: refused {refused} expected, got {other:?}"),
            };
            assert!(
                message.contains(&format!("at {place}: default \"x\" is not of type integer")),
                "{place}: {message}"
            );
        }
    }

    #[test]
    fn operations_are_checked_before_named_schemas_as_the_oracle_walks_them() {
        let doc = v30(
            json!({"/a": {"get": {"parameters": [{"name": "p", "in": "query", "schema": {"type": "string", "default": 1}}], "responses": ok()}}}),
            json!({"schemas": {"S": {"type": "string", "default": 2}}}),
        );
        let error = validate(&doc, Generation::OpenApi30).unwrap_err().message;
        assert!(
            error.contains("at paths → /a → get → parameters → 0: default 1"),
            "{error}"
        );
    }

    #[test]
    fn meta_schema_errors_say_where() {
        let doc = json!({"openapi": "3.0.3", "info": {"title": "t", "version": "1"}, "paths": {"items": {}}});
        let error = validate(&doc, Generation::OpenApi30).unwrap_err();
        assert!(error.message.contains("paths"), "{}", error.message);
    }

    #[test]
    fn template_parameters_are_extracted() {
        assert_eq!(
            template_parameters("/a/{x}/b/{y}"),
            BTreeSet::from(["x", "y"])
        );
        assert!(template_parameters("/a/{").is_empty());
    }
}
