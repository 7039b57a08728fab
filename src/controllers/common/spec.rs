//! Reading a parent's `spec` into a controller's typed spec, as a second step after the
//! request parsed: a bad spec is then a status condition, not a 400.

use serde::de::DeserializeOwned;
use serde_json::Value;

/// Why a parent's `spec` cannot be used, naming the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    /// The parent has no `spec` at all.
    #[error("spec is missing")]
    Missing,
    /// A field of the spec is wrong.
    #[error("{field}: {problem}")]
    Field {
        /// The path from the parent: `spec.mock.seed`.
        field: String,
        /// What is wrong, in the words of whoever wrote the YAML ([`in_plain_words`]).
        problem: String,
    },
}

/// The typed `spec` of `parent`, or which field is wrong and why.
pub fn parse<T: DeserializeOwned>(parent: &Value) -> Result<T, SpecError> {
    let spec = parent.get("spec").ok_or(SpecError::Missing)?;
    // Without path tracking first (it allocates per key); again with it to say where.
    if let Ok(parsed) = T::deserialize(spec) {
        return Ok(parsed);
    }
    serde_path_to_error::deserialize(spec).map_err(|error| {
        let path = error.path().to_string();
        let problem = in_plain_words(&error.into_inner().to_string());
        let field = if path == "." {
            "spec".to_owned()
        } else {
            format!("spec.{path}")
        };
        SpecError::Field { field, problem }
    })
}

/// serde's message in the words of whoever wrote the YAML: JSON types, not Rust ones
/// ("expected i32" → "expected an integer", "expected struct ApiMockSpec" → "expected
/// an object").
pub fn in_plain_words(message: &str) -> String {
    const RUST_TYPES: [(&str, &str); 14] = [
        ("expected i8", "expected an integer"),
        ("expected i16", "expected an integer"),
        ("expected i32", "expected an integer"),
        ("expected i64", "expected an integer"),
        ("expected u8", "expected a non-negative integer"),
        ("expected u16", "expected a non-negative integer"),
        ("expected u32", "expected a non-negative integer"),
        ("expected u64", "expected a non-negative integer"),
        ("expected usize", "expected a non-negative integer"),
        ("expected f32", "expected a number"),
        ("expected f64", "expected a number"),
        ("expected a sequence", "expected a list"),
        ("expected a map", "expected an object"),
        ("expected a borrowed string", "expected a string"),
    ];
    let mut text = message.to_owned();
    for (rust, plain) in RUST_TYPES {
        // Whole words only: "expected i32" but not "expected i32x".
        let mut out = String::with_capacity(text.len());
        let mut rest = text.as_str();
        while let Some(at) = rest.find(rust) {
            let after = &rest[at + rust.len()..];
            out.push_str(&rest[..at]);
            if after.starts_with(|c: char| c.is_ascii_alphanumeric()) {
                out.push_str(rust);
            } else {
                out.push_str(plain);
            }
            rest = after;
        }
        out.push_str(rest);
        text = out;
    }
    // "expected struct Name" and "expected enum Name": an object, or one of the values.
    for (marker, plain) in [
        ("expected struct ", "expected an object"),
        ("expected enum ", "expected one of its values"),
    ] {
        while let Some(at) = text.find(marker) {
            let name_end = text[at + marker.len()..]
                .find(|c: char| !c.is_ascii_alphanumeric() && c != '_')
                .map_or(text.len(), |end| at + marker.len() + end);
            text.replace_range(at..name_end, plain);
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    #[derive(Debug, serde::Deserialize)]
    struct Spec {
        #[allow(dead_code)]
        replicas: i32,
    }

    #[test]
    fn says_json_types_not_rust_ones() {
        assert_eq!(
            super::in_plain_words("invalid type: string \"two\", expected i32"),
            "invalid type: string \"two\", expected an integer"
        );
        assert_eq!(
            super::in_plain_words("invalid type: integer `5`, expected struct ApiMockSpec"),
            "invalid type: integer `5`, expected an object"
        );
        assert_eq!(
            super::in_plain_words("invalid value: integer `-1`, expected u32"),
            "invalid value: integer `-1`, expected a non-negative integer"
        );
        assert_eq!(super::in_plain_words("expected i32x"), "expected i32x");
        let error = super::parse::<Spec>(&json!({"spec": {"replicas": "two"}})).unwrap_err();
        assert!(
            error.to_string().ends_with("expected an integer"),
            "{error}"
        );
    }

    #[test]
    fn names_the_wrong_field() {
        assert!(super::parse::<Spec>(&json!({"spec": {"replicas": 2}})).is_ok());
        let error = super::parse::<Spec>(&json!({"spec": {"replicas": "two"}})).unwrap_err();
        let super::SpecError::Field { field, problem } = error else {
            panic!("{error}");
        };
        assert_eq!(field, "spec.replicas");
        assert!(problem.starts_with("invalid type: string"), "{problem}");
        assert_eq!(
            super::parse::<Spec>(&json!({})).err(),
            Some(super::SpecError::Missing)
        );
    }
}
