//! What is wrong with a document, as values that keep where it is and what was found:
//! the condition message is written from them, once, at the edge of validation.

use serde_json::Value;

/// JSON Schema dialects a 3.1 document may declare for its schemas; anything else
/// leaves the meaning of every schema in it undefined.
pub(super) const KNOWN_DIALECTS: [&str; 3] = [
    "https://spec.openapis.org/oas/3.1/dialect/base",
    "https://json-schema.org/draft/2020-12/schema",
    "https://json-schema.org/draft/2019-09/schema",
];

/// The first problem found in a document.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub(super) enum Problem {
    /// Where the meta-schema of the document's version refuses it, explained
    /// ([`super::metaschema::explain`]).
    #[error("{0}")]
    MetaSchema(String),
    #[error(
        "at jsonSchemaDialect: '{dialect}' is not a JSON Schema dialect metahooks knows ({})",
        KNOWN_DIALECTS.join(", ")
    )]
    UnknownDialect { dialect: String },
    #[error("at {at}: $ref '{target}' {problem}")]
    Reference {
        at: String,
        target: String,
        problem: ReferenceProblem,
    },
    #[error("operationId '{id}' of {method} {template} is used by another operation too")]
    RepeatedOperationId {
        id: String,
        method: &'static str,
        template: String,
    },
    #[error(
        "{method} {template}: path parameter '{name}' appears in the path but is not declared with `in: path`"
    )]
    UndeclaredPathParameter {
        method: &'static str,
        template: String,
        name: String,
    },
    #[error(
        "{method} {template}: path parameter '{name}' is declared but does not appear in the path"
    )]
    PathParameterNotInPath {
        method: &'static str,
        template: String,
        name: String,
    },
    /// `owner` is a method, or "path item" for the parameters all its operations share.
    #[error("{owner} of {template}: parameter '{name}' in {location} is declared twice")]
    RepeatedParameter {
        owner: &'static str,
        template: String,
        name: String,
        location: String,
    },
    #[error("at {at}: default {default} {problem}")]
    Default {
        at: String,
        default: Value,
        problem: DefaultProblem,
    },
}

/// Why a `$ref` does not reach a value.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub(super) enum ReferenceProblem {
    #[error("points at nothing in this document")]
    PointsAtNothing,
    /// A link further down the chain points at nothing.
    #[error("leads to '{target}', which points at nothing in this document")]
    LeadsToNothing { target: String },
    /// The links from the first target until one repeats (`back_to`).
    #[error("is a cycle of references that never reaches a value ({} → {back_to})", chain.join(" → "))]
    Cycle { chain: Vec<String>, back_to: String },
}

/// Why a `default` does not fit its schema.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub(super) enum DefaultProblem {
    #[error("is not one of the enum values {}", Value::Array(.allowed.clone()))]
    NotInEnum { allowed: Vec<Value> },
    #[error("is not of type {}", .types.join(" or "))]
    WrongType { types: Vec<String> },
}
