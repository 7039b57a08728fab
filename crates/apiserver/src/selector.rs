//! Label selectors (`metav1.LabelSelector`) matched against a map of labels, one
//! implementation for the API server's own checks and for the emulator's parents,
//! children, related objects and decorator selectors.

use serde_json::Value;

/// Whether `map` (labels, or a decorator's annotations) holds every pair of `exact`
/// (`matchLabels`, `matchAnnotations`) and satisfies every expression of
/// `matchExpressions`. An expression with an operator no selector has never matches.
pub fn matches(exact: Option<&Value>, expressions: Option<&Value>, map: &Value) -> bool {
    let pairs = exact
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .all(|(k, v)| map.get(k) == Some(v));
    pairs && expressions_match(expressions, map)
}

/// The operators `matchExpressions` may use.
pub const OPERATORS: [&str; 4] = ["In", "NotIn", "Exists", "DoesNotExist"];

fn expressions_match(expressions: Option<&Value>, map: &Value) -> bool {
    expressions
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .all(|e| {
            let key = e.get("key").and_then(Value::as_str).unwrap_or_default();
            let values: Vec<&Value> = e
                .get("values")
                .and_then(Value::as_array)
                .map(|v| v.iter().collect())
                .unwrap_or_default();
            let present = map.get(key);
            match e.get("operator").and_then(Value::as_str) {
                Some("Exists") => present.is_some(),
                Some("DoesNotExist") => present.is_none(),
                Some("In") => present.is_some_and(|v| values.contains(&v)),
                Some("NotIn") => present.is_none_or(|v| !values.contains(&v)),
                _ => false,
            }
        })
}
