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

/// Why `metav1.LabelSelectorAsSelector` (k8s.io/apimachinery, meta/v1/helpers.go) would
/// refuse this selector, in its words: an operator it does not know, or a requirement
/// `labels.NewRequirement` refuses (a key that is not a qualified name, `In`/`NotIn`
/// without values, `Exists`/`DoesNotExist` with values, a value that is not a label
/// value). `exact` names the map of exact pairs (`matchLabels`, or a decorator's
/// `matchAnnotations`, which Metacontroller turns into a label selector first).
pub fn conversion_problem(selector: &Value, exact: &str) -> Option<String> {
    let mut problems = Vec::new();
    for (key, value) in selector
        .get(exact)
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
    {
        let value = value.as_str().unwrap_or_default();
        problems.extend(requirement_problems(key, "=", &[value]));
    }
    for expression in selector
        .get("matchExpressions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let operator = expression
            .get("operator")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if !OPERATORS.contains(&operator) {
            return Some(format!(
                "{operator:?} is not a valid label selector operator"
            ));
        }
        let key = expression
            .get("key")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let values: Vec<&str> = expression
            .get("values")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|v| v.as_str().unwrap_or_default())
            .collect();
        problems.extend(requirement_problems(key, operator, &values));
    }
    match problems.len() {
        0 => None,
        1 => problems.pop(),
        _ => Some(format!("[{}]", problems.join(", "))),
    }
}

/// `labels.NewRequirement`'s checks, each as a `field.Error` prints itself.
fn requirement_problems(key: &str, operator: &str, values: &[&str]) -> Vec<String> {
    let mut found = Vec::new();
    if let Err(problem) = crate::check_qualified_name(key) {
        found.push(format!("key: Invalid value: {key:?}: {problem}"));
    }
    let shown = || {
        if values.is_empty() {
            "[]string(nil)".to_owned()
        } else {
            let quoted: Vec<String> = values.iter().map(|v| format!("{v:?}")).collect();
            format!("[]string{{{}}}", quoted.join(", "))
        }
    };
    match operator {
        "In" | "NotIn" if values.is_empty() => found.push(format!(
            "values: Invalid value: {}: for 'in', 'notin' operators, values set can't be empty",
            shown()
        )),
        "Exists" | "DoesNotExist" if !values.is_empty() => found.push(format!(
            "values: Invalid value: {}: values set must be empty for exists and does not exist",
            shown()
        )),
        _ => {}
    }
    for (index, value) in values.iter().enumerate() {
        if let Err(problem) = crate::check_label_value(value) {
            found.push(format!(
                "values[{index}]: Invalid value: {value:?}: {problem}"
            ));
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn selectors_are_refused_where_label_selector_as_selector_refuses_them() {
        let problem = |selector: Value| conversion_problem(&selector, "matchLabels");
        assert_eq!(
            problem(json!({"matchLabels": {"app": "web"},
                "matchExpressions": [{"key": "tier", "operator": "In", "values": ["a"]},
                                     {"key": "x", "operator": "Exists"}]})),
            None
        );
        assert_eq!(
            problem(
                json!({"matchExpressions": [{"key": "tier", "operator": "Equals", "values": ["a"]}]})
            ),
            Some("\"Equals\" is not a valid label selector operator".to_owned())
        );
        assert_eq!(
            problem(json!({"matchExpressions": [{"key": "tier", "operator": "In"}]})),
            Some("values: Invalid value: []string(nil): for 'in', 'notin' operators, values set can't be empty".to_owned())
        );
        assert_eq!(
            problem(json!({"matchExpressions": [{"key": "tier", "operator": "Exists", "values": ["a"]}]})),
            Some("values: Invalid value: []string{\"a\"}: values set must be empty for exists and does not exist".to_owned())
        );
        let bad_value = problem(json!({"matchLabels": {"app": "not a value"}})).unwrap_or_default();
        assert!(
            bad_value.starts_with("values[0]: Invalid value: \"not a value\": a valid label"),
            "{bad_value}"
        );
        let bad_key = problem(json!({"matchLabels": {"-app": "web"}})).unwrap_or_default();
        assert!(
            bad_key.starts_with("key: Invalid value: \"-app\": name part"),
            "{bad_key}"
        );
        // A decorator's annotation selector: matchAnnotations read as matchLabels.
        assert!(
            conversion_problem(
                &json!({"matchAnnotations": {"a": "has spaces"}}),
                "matchAnnotations"
            )
            .is_some()
        );
    }
}
