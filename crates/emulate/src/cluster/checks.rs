//! What Metacontroller refuses in a parent, an answer or a desired child.

use serde_json::{Value, json};

use super::describe;
use crate::findings::{Problem, Rule};
use crate::objects::labels_match;
use crate::registration::{ControllerType, Hook, Registration};
use crate::{Key, key_of};

/// The answer's shape, as Metacontroller decodes it.
pub(super) fn check_response(
    registration: &Registration,
    hook: &Hook,
    response: &Value,
) -> Result<(), Problem> {
    let invalid = |message: &str| (Rule::InvalidAnswer, message.to_owned());
    let Some(object) = response.as_object() else {
        return Err(invalid("the answer is not a JSON object"));
    };
    let allowed: &[&str] = match registration.type_ {
        ControllerType::Composite => &["status", "children", "resyncAfterSeconds", "finalized"],
        ControllerType::Decorator => &[
            "labels",
            "annotations",
            "status",
            "attachments",
            "resyncAfterSeconds",
            "finalized",
        ],
    };
    for (field, value) in object {
        check_field_type(registration, field, value)?;
    }
    for field in object.keys() {
        if hook.strict && !allowed.contains(&field.as_str()) {
            return Err((
                Rule::StrictDecoding,
                format!("strict decoding failed: unknown field {field:?} in the answer"),
            ));
        }
    }
    if let Some(status) = object.get("status")
        && !(status.is_object() || status.is_null())
    {
        return Err(invalid("status must be an object or null"));
    }
    for field in ["labels", "annotations"] {
        if let Some(map) = object.get(field).and_then(Value::as_object)
            && map.values().any(|v| !(v.is_string() || v.is_null()))
        {
            return Err((
                Rule::InvalidAnswer,
                format!("{field} values must be strings or null"),
            ));
        }
    }
    Ok(())
}

/// Type errors fail whatever the decoding mode (kjson.UnmarshalStrict's main error).
fn check_field_type(
    registration: &Registration,
    field: &str,
    value: &Value,
) -> Result<(), Problem> {
    let fits = match field {
        "status" | "labels" | "annotations" => value.is_object() || value.is_null(),
        "children" | "attachments" => {
            value.is_null()
                || value
                    .as_array()
                    .is_some_and(|items| items.iter().all(|i| i.is_object() || i.is_null()))
        }
        "resyncAfterSeconds" => value.is_number() || value.is_null(),
        "finalized" => value.is_boolean() || value.is_null(),
        _ => true,
    };
    if fits {
        return Ok(());
    }
    let response_type = match registration.type_ {
        ControllerType::Composite => "CompositeHookResponse",
        ControllerType::Decorator => "DecoratorHookResponse",
    };
    let go_type = match field {
        "resyncAfterSeconds" => "float64",
        "finalized" => "bool",
        "children" | "attachments" => "[]*unstructured.Unstructured",
        _ => "map[string]interface {}",
    };
    Err((
        Rule::InvalidAnswer,
        format!(
            "json: cannot unmarshal {} into Go struct field {response_type}.{field} of type {go_type} (Metacontroller applies nothing)",
            metahooks_apiserver::go_json_type(value)
        ),
    ))
}

/// A desired child without `kind` fails the answer's decoding (unstructured's "Object
/// 'Kind' is missing"): nothing of the answer is applied.
pub(super) fn check_kinds(desired: &[Value]) -> Result<(), Problem> {
    match desired.iter().find(|child| {
        child
            .get("kind")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
    }) {
        Some(child) => Err((
            Rule::InvalidAnswer,
            format!("Object 'Kind' is missing in '{child}' (Metacontroller applies nothing)"),
        )),
        None => Ok(()),
    }
}

/// What a composite sync checks across the children before it applies any of them
/// (syncParentObject, pkg/controller/composite): with `generateSelector`, each child
/// gets the `controller-uid` label unless the hook set one; then every child's labels
/// must be strings that match the parent's selector. A failure fails the whole sync: no
/// child is written and no status either.
pub(super) fn check_child_labels(
    registration: &Registration,
    parent: &Value,
    desired: &mut [Value],
) -> Result<(), Problem> {
    if registration.type_ != ControllerType::Composite {
        return Ok(());
    }
    let uid = parent
        .pointer("/metadata/uid")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let generated = json!({"matchLabels": {"controller-uid": uid}});
    let selector = if registration.generate_selector {
        &generated
    } else {
        parent.pointer("/spec/selector").unwrap_or(&Value::Null)
    };
    let parent_namespace = key_of(parent).2;
    for child in desired.iter_mut() {
        let (_, kind, namespace, name) = key_of(child);
        let namespace = if namespace.is_empty() {
            parent_namespace.clone()
        } else {
            namespace
        };
        if let Some(problem) = child
            .pointer("/metadata/labels")
            .and_then(|labels| string_map_problem(".metadata.labels", labels))
        {
            return Err((
                Rule::InvalidChild,
                format!(
                    "invalid labels on desired child {kind} {namespace}/{name}: {problem} (Metacontroller applies nothing and writes no status)"
                ),
            ));
        }
        if registration.generate_selector
            && let Some(meta) = child.get_mut("metadata").and_then(Value::as_object_mut)
            && let Some(labels) = meta
                .entry("labels")
                .or_insert_with(|| json!({}))
                .as_object_mut()
        {
            labels.entry("controller-uid").or_insert_with(|| json!(uid));
        }
        if !labels_match(selector, child) {
            return Err((
                Rule::InvalidChild,
                format!(
                    "labels on desired child {kind} {namespace}/{name} don't match parent selector (Metacontroller applies nothing and writes no status)"
                ),
            ));
        }
    }
    Ok(())
}

/// Why `NestedStringMap` (apimachinery's unstructured helpers, which Metacontroller reads a
/// desired child's labels with) refuses `value` at `path`, in its words: a null or a value
/// other than a map, or a value in the map that is not a string. Metacontroller decodes
/// answers as unstructured objects, whose whole numbers are int64.
fn string_map_problem(path: &str, value: &Value) -> Option<String> {
    let go = |value: &Value| -> (String, &'static str) {
        match value {
            Value::Null => ("<nil>".to_owned(), "<nil>"),
            Value::Bool(b) => (b.to_string(), "bool"),
            Value::Number(n) if n.is_i64() || n.is_u64() => (n.to_string(), "int64"),
            Value::Number(n) => (n.to_string(), "float64"),
            Value::String(s) => (s.clone(), "string"),
            Value::Array(_) => ("[…]".to_owned(), "[]interface {}"),
            Value::Object(_) => ("map[…]".to_owned(), "map[string]interface {}"),
        }
    };
    let Some(map) = value.as_object() else {
        let (shown, type_) = go(value);
        return Some(format!(
            "{path} accessor error: {shown} is of the type {type_}, expected map[string]interface{{}}"
        ));
    };
    map.iter().find(|(_, v)| !v.is_string()).map(|(key, v)| {
        let (shown, type_) = go(v);
        format!(
            "{path} accessor error: contains non-string value in the map under key {key:?}: {shown} is of the type {type_}, expected string"
        )
    })
}

/// What stops one desired child on its own (the others are still applied): no name (the
/// API server's "name or generateName is required"), or a namespace other than its
/// namespaced parent's (the garbage collector cannot resolve an owner in another
/// namespace and deletes the child). The same for a decorator's attachments: they are
/// owned by the target and listed in its namespace (`claimChildren`), so one elsewhere
/// is deleted and made again on every sync.
pub(super) fn child_refusal(parent: &Value, child: &Value, cluster_scoped: bool) -> Option<String> {
    let (_, kind, namespace, name) = key_of(child);
    if name.is_empty() {
        return Some(format!(
            "{kind}: metadata.name: Required value: name or generateName is required"
        ));
    }
    let parent_namespace = key_of(parent).2;
    if !cluster_scoped
        && !parent_namespace.is_empty()
        && !namespace.is_empty()
        && namespace != parent_namespace
    {
        return Some(format!(
            "{kind} {name} is in namespace {namespace:?}, not the parent's: its owner reference cannot be resolved there, so the garbage collector deletes it"
        ));
    }
    None
}

/// Why the API server refuses to create `child` as Metacontroller sends it: after
/// `claimOwnership` (pkg/controller/common/manage_children.go) appended the parent's
/// controller reference unless the hook listed the parent's UID already, there may be
/// two controllers (ValidateOwnerReferences); and client-side apply creates the object
/// as the hook wrote it, so a `resourceVersion` copied from an observed object is
/// refused by storage. Other server-set fields are overwritten on create.
pub(super) fn create_refusal(child: &Value, server_side_apply: bool) -> Option<String> {
    let (_, kind, _, name) = key_of(child);
    let controllers: Vec<String> = child
        .pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|r| r.get("controller").and_then(Value::as_bool) == Some(true))
        .map(|r| {
            format!(
                "{}/{}",
                r.get("kind").and_then(Value::as_str).unwrap_or_default(),
                r.get("name").and_then(Value::as_str).unwrap_or_default()
            )
        })
        .collect();
    if controllers.len() > 1 {
        return Some(format!(
            "{kind} {name:?} is invalid: metadata.ownerReferences: Invalid value: only one reference can have Controller set to true. Found \"true\" in references for {} (the hook set a controller reference to another owner; Metacontroller adds its own)",
            controllers.join(" and ")
        ));
    }
    let version = child
        .pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if !server_side_apply && !version.is_empty() {
        return Some(format!(
            "{kind} {name:?}: resourceVersion should not be set on objects to be created"
        ));
    }
    None
}

/// makeSelector (pkg/controller/composite): without generateSelector, a parent needs a
/// non-empty spec.selector that `LabelSelectorAsSelector` accepts, or no hook is called
/// at all.
pub(super) fn check_selector(
    registration: &Registration,
    parent: &Value,
    key: &Key,
) -> Result<(), Problem> {
    if registration.type_ != ControllerType::Composite || registration.generate_selector {
        return Ok(());
    }
    let refused = |problem: String| {
        Err((
            Rule::InvalidParent,
            format!(
                "{}: {problem} (Metacontroller calls no hook for this parent)",
                describe(key)
            ),
        ))
    };
    if !has_selector(parent) {
        return refused(
            ".spec.selector must have either matchLabels, matchExpressions, or both; or set generateSelector".to_owned(),
        );
    }
    let selector = parent.pointer("/spec/selector").unwrap_or(&Value::Null);
    match metahooks_apiserver::selector::conversion_problem(selector, "matchLabels") {
        Some(problem) => refused(format!(
            "can't convert label selector .spec.selector: {problem}"
        )),
        None => Ok(()),
    }
}

/// Whether `spec.selector` has matchLabels or matchExpressions.
fn has_selector(parent: &Value) -> bool {
    let non_empty = |field: &str| {
        parent
            .pointer(&format!("/spec/selector/{field}"))
            .is_some_and(|v| {
                v.as_object().is_some_and(|m| !m.is_empty())
                    || v.as_array().is_some_and(|a| !a.is_empty())
            })
    };
    non_empty("matchLabels") || non_empty("matchExpressions")
}

#[cfg(test)]
mod label_tests {
    use super::string_map_problem;
    use serde_json::json;

    #[test]
    fn labels_are_refused_in_apimachinerys_words() {
        let at = ".metadata.labels";
        assert_eq!(string_map_problem(at, &json!({"a": "b"})), None);
        assert_eq!(
            string_map_problem(at, &json!(null)).as_deref(),
            Some(
                ".metadata.labels accessor error: <nil> is of the type <nil>, expected map[string]interface{}"
            )
        );
        assert_eq!(
            string_map_problem(at, &json!({"tier": 1})).as_deref(),
            Some(
                ".metadata.labels accessor error: contains non-string value in the map under key \"tier\": 1 is of the type int64, expected string"
            )
        );
        assert_eq!(
            string_map_problem(at, &json!({"on": true})).as_deref(),
            Some(
                ".metadata.labels accessor error: contains non-string value in the map under key \"on\": true is of the type bool, expected string"
            )
        );
    }
}
