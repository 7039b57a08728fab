//! What Metacontroller refuses in an answer or a desired child.

use serde_json::Value;

use super::*;

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
    if registration.type_ == ControllerType::Composite
        && !object.get("status").is_some_and(Value::is_object)
    {
        return Err(invalid(
            "a composite answer without an object status (it would wipe the parent's status)",
        ));
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
    if child.pointer("/metadata/ownerReferences").is_some() {
        return Err(format!(
            "{kind} {name} sets metadata.ownerReferences (Metacontroller owns them)"
        ));
    }
    if child.get("status").is_some() {
        return Err(format!(
            "{kind} {name} sets status (a parent cannot set child status)"
        ));
    }
    for field in [
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "managedFields",
    ] {
        if child.pointer(&format!("/metadata/{field}")).is_some() {
            return Err(format!(
                "{kind} {name} sets server-populated metadata.{field}"
            ));
        }
    }
    let namespace = child.pointer("/metadata/namespace").and_then(Value::as_str);
    let parent_namespace = key_of(parent).2;
    if registration.type_ == ControllerType::Composite
        && namespace.is_some_and(|ns| ns != parent_namespace)
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
