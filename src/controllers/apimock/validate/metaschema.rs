//! The OpenAPI Initiative's JSON schemas for each version, compiled once, and how their
//! errors are shown: a JSON pointer as a path of keys, long messages cut.

use std::sync::LazyLock;

use serde_json::Value;

use super::problem::{KNOWN_DIALECTS, Problem};
use crate::controllers::apimock::verdict::Generation;

static SWAGGER2: LazyLock<Result<jsonschema::Validator, LoadError>> =
    LazyLock::new(|| compile(include_str!("../metaschemas/v2.0.json")));
static OPENAPI30: LazyLock<Result<jsonschema::Validator, LoadError>> =
    LazyLock::new(|| compile(include_str!("../metaschemas/v3.0.json")));
static OPENAPI31: LazyLock<Result<jsonschema::Validator, LoadError>> =
    LazyLock::new(|| compile(include_str!("../metaschemas/v3.1.json")));

/// Why a meta-schema built into the program did not load (a broken build, never input).
#[derive(Debug, thiserror::Error)]
pub(super) enum LoadError {
    #[error("{0}")]
    Json(#[from] serde_json::Error),
    #[error("{0}")]
    Schema(#[from] jsonschema::ValidationError<'static>),
}

fn compile(text: &str) -> Result<jsonschema::Validator, LoadError> {
    let schema: Value = serde_json::from_str(text)?;
    // The meta-schemas' own patterns (`^x-`, `^\/`, response codes) need neither
    // look-around nor back-references, so the `regex` engine, which never backtracks,
    // serves them; they are matched against every key of a definition.
    Ok(jsonschema::options()
        .should_validate_formats(false)
        .with_pattern_options(jsonschema::PatternOptions::regex())
        .build(&schema)?)
}

/// The compiled meta-schema of `generation`, or why it failed to load.
pub(super) fn validator(
    generation: Generation,
) -> Result<&'static jsonschema::Validator, &'static LoadError> {
    let compiled = match generation {
        Generation::Swagger2 => &*SWAGGER2,
        Generation::OpenApi30 => &*OPENAPI30,
        Generation::OpenApi31 => &*OPENAPI31,
    };
    compiled.as_ref()
}

pub(super) fn check_dialect(document: &Value) -> Result<(), Problem> {
    match document.get("jsonSchemaDialect").and_then(Value::as_str) {
        Some(dialect) if !KNOWN_DIALECTS.contains(&dialect.trim_end_matches('#')) => {
            Err(Problem::UnknownDialect {
                dialect: dialect.to_owned(),
            })
        }
        _ => Ok(()),
    }
}

/// A JSON pointer as a person reads it: `paths → /pets/{id} → get`.
pub(super) fn location(pointer: &str) -> String {
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

/// Where the document breaks the meta-schema and how. "Not valid under any of the schemas
/// listed in oneOf" says nothing of what was meant; the branch whose first error lies
/// deepest in the document is taken as the one meant (a response with `content` but no
/// `description` goes furthest as a Response, not as a Reference), and its error is
/// added: "… (as meant: at … → description: "description" is a required property)".
pub(super) fn explain(error: &jsonschema::ValidationError<'_>) -> String {
    let mut message = format!(
        "at {}: {}",
        location(error.instance_path().as_str()),
        short(&error.to_string())
    );
    if let Some(meant) = closest_branch(error) {
        message.push_str(&format!(
            " (as meant: at {}: {})",
            location(meant.instance_path().as_str()),
            short(&meant.to_string())
        ));
    }
    message
}

/// Within a oneOf/anyOf failure, the first error of the branch that got deepest,
/// followed down through nested oneOf/anyOf failures.
fn closest_branch<'e>(
    error: &'e jsonschema::ValidationError<'_>,
) -> Option<&'e jsonschema::ValidationError<'static>> {
    use jsonschema::error::ValidationErrorKind;
    let context = match error.kind() {
        ValidationErrorKind::OneOfNotValid { context } | ValidationErrorKind::AnyOf { context } => {
            context
        }
        _ => return None,
    };
    // The deepest first error wins. At equal depth, a branch that only wanted a `$ref`
    // (OpenAPI's Reference Object, the alternative of nearly every object) was not what
    // the author meant; then the branch with fewer errors.
    let best = context
        .iter()
        .filter_map(|branch| branch.first().map(|first| (branch.len(), first)))
        .max_by_key(|(count, first)| {
            let wanted_ref = first
                .to_string()
                .starts_with("\"$ref\" is a required property");
            (
                first.instance_path().as_str().matches('/').count(),
                !wanted_ref,
                std::cmp::Reverse(*count),
            )
        })?
        .1;
    Some(closest_branch(best).unwrap_or(best))
}

/// Validator messages quote whole sub-documents; keep condition messages readable.
pub(super) fn short(message: &str) -> String {
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
