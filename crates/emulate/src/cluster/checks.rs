//! What Metacontroller refuses in an answer or a desired child.

use serde_json::Value;

use crate::findings::{Problem, Rule};
use crate::key_of;
use crate::objects::labels_match;
use crate::registration::{ControllerType, Hook, Registration};

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

/// One desired child, as Metacontroller checks it before applying.
pub(super) fn check_child(
    registration: &Registration,
    parent: &Value,
    child: &Value,
) -> Result<(), String> {
    let kind = child
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if kind.is_empty() {
        return Err("Object 'Kind' is missing in a desired child".to_owned());
    }
    let api_version = child
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let name = child
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if name.is_empty() {
        return Err(format!("{kind} without metadata.name"));
    }
    if registration.child_rule(api_version, kind).is_none() {
        return Err(format!(
            "{kind}.{api_version} {name} is not a registered child type of {}",
            registration.name
        ));
    }
    check_child_metadata(child, kind, name)?;
    let namespace = child.pointer("/metadata/namespace").and_then(Value::as_str);
    let parent_namespace = key_of(parent).2;
    // A cluster-scoped parent may own children in any namespace; a namespaced parent's
    // children in another namespace would carry an owner reference the garbage collector
    // cannot resolve there.
    if registration.type_ == ControllerType::Composite
        && !parent_namespace.is_empty()
        && namespace.is_some_and(|ns| !ns.is_empty() && ns != parent_namespace)
    {
        return Err(format!(
            "{kind} {name} is in namespace {namespace:?}, not the parent's"
        ));
    }
    if registration.type_ == ControllerType::Composite
        && !registration.generate_selector
        && let Some(selector) = parent.pointer("/spec/selector")
        && !labels_match(selector, child)
    {
        return Err(format!(
            "labels on desired child {kind} {name} don't match parent selector"
        ));
    }
    Ok(())
}

/// Metadata a desired child may not carry: a controller reference of its own
/// (Metacontroller appends its own, MakeControllerRef in
/// pkg/controller/common/manage_children.go, and the API server refuses a second:
/// ValidateOwnerReferences), or fields the API server populates.
fn check_child_metadata(child: &Value, kind: &str, name: &str) -> Result<(), String> {
    let controllers = child
        .pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .map_or(0, |refs| {
            refs.iter()
                .filter(|r| r.get("controller").and_then(Value::as_bool) == Some(true))
                .count()
        });
    if controllers > 0 {
        return Err(format!(
            "{kind} {name}: metadata.ownerReferences: Invalid value: only one reference can have Controller set to true (the hook set one, Metacontroller adds its own)"
        ));
    }
    for field in metahooks_protocol::SERVER_POPULATED_METADATA {
        if child.pointer(&format!("/metadata/{field}")).is_some() {
            return Err(format!(
                "{kind} {name} sets server-populated metadata.{field}"
            ));
        }
    }
    Ok(())
}
