//! The API server's rules for an object it is asked to create or update, written once:
//! the emulator refuses what the API server would refuse, and the controllers check what
//! they emit with the same code. Messages are shaped like the API server's
//! (`metadata.name: Invalid value: "X": …`), from k8s.io/apimachinery's validation
//! (`pkg/util/validation`, `pkg/api/validation/objectmeta.go`) and apps/batch/core
//! update validation.

#![warn(missing_docs)]

mod content;
mod specs;
pub use content::fold_string_data;
pub mod pod_security;
pub mod selector;

use serde_json::Value;

/// The JSON type of `value` as Go's decoding messages name it.
pub fn go_json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Total bytes of an object's annotations, keys and values (TotalAnnotationSizeLimitB).
pub const ANNOTATIONS_MAX_BYTES: usize = 256 * 1024;

/// What the content of a ConfigMap we build may add up to: the API server refuses a
/// ConfigMap whose `data` and `binaryData` exceed 1 MiB (`core.MaxSecretSize` in
/// ValidateConfigMap); 16 KiB is kept back so the whole object also stays clear of
/// etcd's request limit with its metadata and last-applied annotation.
pub const CONFIG_MAP_CONTENT_BYTES: usize = 1024 * 1024 - 16 * 1024;

/// How the annotations client-side apply stores the last applied object in end
/// (kubectl's, and Metacontroller's `metacontroller.k8s.io/…`).
const LAST_APPLIED_SUFFIX: &str = "/last-applied-configuration";
/// The length of Metacontroller's last-applied annotation key.
pub const LAST_APPLIED_KEY_LEN: usize = metahooks_protocol::LAST_APPLIED_ANNOTATION.len();

/// Why a name cannot be used for a child object.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{name:?} is not a valid {rule}: {problem}")]
pub struct InvalidName {
    /// The name refused.
    pub name: String,
    /// The rule it breaks (`DNS-1035 label`, …).
    pub rule: &'static str,
    /// What about it breaks the rule.
    pub problem: &'static str,
}

/// DNS-1035 label (Service names): at most 63 characters, lowercase alphanumerics or
/// '-', starting with a letter and ending with an alphanumeric.
pub fn check_dns1035_label(name: &str) -> Result<(), InvalidName> {
    let fail = |problem| {
        Err(InvalidName {
            name: name.to_owned(),
            rule: "DNS-1035 label",
            problem,
        })
    };
    if name.is_empty() {
        return fail("it is empty");
    }
    if name.len() > 63 {
        return fail("it is longer than 63 characters");
    }
    if !name.starts_with(|c: char| c.is_ascii_lowercase()) {
        return fail("it must start with a lowercase letter");
    }
    if !name.ends_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit()) {
        return fail("it must end with a lowercase letter or digit");
    }
    if !name
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
    {
        return fail("it may contain only lowercase letters, digits and '-'");
    }
    Ok(())
}

/// DNS-1123 label (Namespace and container names): a DNS-1123 subdomain of at most 63
/// characters without '.'.
pub fn check_dns1123_label(name: &str) -> Result<(), InvalidName> {
    check_dns1123_subdomain(name).and_then(|()| {
        if name.len() > 63 || name.contains('.') {
            Err(InvalidName {
                name: name.to_owned(),
                rule: "DNS-1123 label",
                problem: "it must be at most 63 characters without '.'",
            })
        } else {
            Ok(())
        }
    })
}

/// DNS-1123 subdomain (ConfigMap, Deployment, Ingress names): at most 253 characters,
/// dot-separated DNS-1123 labels.
pub fn check_dns1123_subdomain(name: &str) -> Result<(), InvalidName> {
    let fail = |problem| {
        Err(InvalidName {
            name: name.to_owned(),
            rule: "DNS-1123 subdomain",
            problem,
        })
    };
    if name.is_empty() {
        return fail("it is empty");
    }
    if name.len() > 253 {
        return fail("it is longer than 253 characters");
    }
    for label in name.split('.') {
        let ok = !label.is_empty()
            && label.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
            && label.ends_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
            && label
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
        if !ok {
            return fail(
                "each dot-separated part must be lowercase letters, digits or '-', starting and ending with a letter or digit",
            );
        }
    }
    Ok(())
}

/// The `Kind "name" is invalid: …` refusals of `object` on create or update; empty when
/// the API server would accept it (as far as these rules go).
pub fn refusals(object: &Value) -> Vec<String> {
    let kind = object
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let name = object
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let mut found = Vec::new();
    if let Err(invalid) = name_check(kind, name) {
        found.push(format!(
            "metadata.name: Invalid value: {name:?}: {}",
            invalid.problem
        ));
    }
    if let Some(labels) = object
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
    {
        label_refusals(labels, &mut found);
    }
    if let Some(annotations) = object
        .pointer("/metadata/annotations")
        .and_then(Value::as_object)
    {
        annotation_refusals(annotations, &mut found);
    }
    found.extend(content::refusals(kind, object));
    found.extend(specs::refusals(kind, object));
    found
        .into_iter()
        .map(|refusal| format!("{kind} {name:?} is invalid: {refusal}"))
        .collect()
}

/// Names: DNS-1035 labels for Services, DNS-1123 labels for Namespaces, DNS-1123
/// subdomains for the rest (ValidateObjectMeta with each kind's name function).
fn name_check(kind: &str, name: &str) -> Result<(), InvalidName> {
    match kind {
        "Service" => check_dns1035_label(name),
        "Namespace" => check_dns1123_label(name),
        _ => check_dns1123_subdomain(name),
    }
}

/// Label keys must be qualified names, values strings the label-value rule accepts.
fn label_refusals(labels: &serde_json::Map<String, Value>, found: &mut Vec<String>) {
    for (key, value) in labels {
        if let Err(problem) = check_qualified_name(key) {
            found.push(format!(
                "metadata.labels: Invalid value: {key:?}: {problem}"
            ));
        }
        match value.as_str() {
            Some(text) => {
                if let Err(problem) = check_label_value(text) {
                    found.push(format!(
                        "metadata.labels: Invalid value: {text:?}: {problem}"
                    ));
                }
            }
            None => found.push(format!(
                "metadata.labels: Invalid value: {value}: label values must be strings"
            )),
        }
    }
}

/// Annotation keys must be qualified names, and all of them together fit the limit
/// (the note names client-side apply's copy when it is there).
fn annotation_refusals(annotations: &serde_json::Map<String, Value>, found: &mut Vec<String>) {
    let total: usize = annotations
        .iter()
        .map(|(k, v)| k.len() + v.as_str().map_or(0, str::len))
        .sum();
    if total > ANNOTATIONS_MAX_BYTES {
        let note = annotations
            .iter()
            .find(|(k, _)| k.ends_with(LAST_APPLIED_SUFFIX))
            .map(|(k, v)| {
                let bytes = v.as_str().map_or(0, str::len);
                format!(" ({bytes} of them in {k}, written by client-side apply)")
            })
            .unwrap_or_default();
        found.push(format!(
            "metadata.annotations: Too long: must have at most {ANNOTATIONS_MAX_BYTES} bytes, has {total}{note}"
        ));
    }
    for key in annotations.keys() {
        if let Err(problem) = check_qualified_name(key) {
            found.push(format!(
                "metadata.annotations: Invalid value: {key:?}: {problem}"
            ));
        }
    }
}

/// What an update may not change, as the API server's update validation refuses it:
/// workload selectors, a Job's template, a Service's clusterIP, an immutable
/// ConfigMap's or Secret's data.
pub fn immutable_changes(old: &Value, new: &Value) -> Vec<String> {
    let kind = new.get("kind").and_then(Value::as_str).unwrap_or_default();
    let name = new
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let changed = |pointer: &str| old.pointer(pointer) != new.pointer(pointer);
    let mut found = Vec::new();
    match kind {
        "Deployment" | "ReplicaSet" | "StatefulSet" | "DaemonSet"
            if old.pointer("/spec/selector").is_some() && changed("/spec/selector") =>
        {
            found.push("spec.selector: Invalid value: field is immutable".to_owned());
        }
        "Job" => {
            if changed("/spec/template") {
                found.push("spec.template: Invalid value: field is immutable".to_owned());
            }
            if old.pointer("/spec/selector").is_some() && changed("/spec/selector") {
                found.push("spec.selector: Invalid value: field is immutable".to_owned());
            }
        }
        "Service" => {
            let set = |v: &Value| {
                v.pointer("/spec/clusterIP")
                    .and_then(Value::as_str)
                    .filter(|ip| !ip.is_empty())
                    .map(str::to_owned)
            };
            if let (Some(before), Some(after)) = (set(old), set(new))
                && before != after
            {
                found.push("spec.clusterIP: Invalid value: field is immutable".to_owned());
            }
        }
        "ConfigMap" | "Secret" if old.get("immutable").and_then(Value::as_bool) == Some(true) => {
            for field in ["data", "binaryData"] {
                if changed(&format!("/{field}")) {
                    found.push(format!(
                        "{field}: Forbidden: field is immutable when `immutable` is set"
                    ));
                }
            }
            if new.get("immutable").and_then(Value::as_bool) != Some(true) {
                found.push(
                    "immutable: Forbidden: field is immutable when `immutable` is set".to_owned(),
                );
            }
        }
        _ => {}
    }
    found
        .into_iter()
        .map(|refusal| format!("{kind} {name:?} is invalid: {refusal}"))
        .collect()
}

/// The items of a JSON list with their indexes (none when `list` is missing or not a
/// list), for messages that name `field[i]`.
pub fn indexed(list: Option<&Value>) -> impl Iterator<Item = (usize, &Value)> {
    list.and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
}

/// A label or annotation key: an optional DNS-1123 subdomain prefix and `/`, then a
/// name of at most 63 characters (IsQualifiedName).
pub fn check_qualified_name(key: &str) -> Result<(), String> {
    let (prefix, name) = match key.rsplit_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    if let Some(prefix) = prefix
        && let Err(invalid) = check_dns1123_subdomain(prefix)
    {
        return Err(format!("prefix part {}", invalid.problem));
    }
    if name.is_empty() {
        return Err("name part must be non-empty".to_owned());
    }
    if name.len() > 63 {
        return Err("name part must be no more than 63 characters".to_owned());
    }
    if !is_label_like(name) {
        return Err(
            "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character".to_owned(),
        );
    }
    Ok(())
}

/// A label value: empty, or at most 63 characters of the label alphabet (IsValidLabelValue).
pub fn check_label_value(value: &str) -> Result<(), String> {
    if value.len() > 63 {
        return Err("must be no more than 63 characters".to_owned());
    }
    if !value.is_empty() && !is_label_like(value) {
        return Err(
            "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character".to_owned(),
        );
    }
    Ok(())
}

fn is_label_like(text: &str) -> bool {
    text.starts_with(|c: char| c.is_ascii_alphanumeric())
        && text.ends_with(|c: char| c.is_ascii_alphanumeric())
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn names_labels_and_annotation_sizes_are_checked_as_the_api_server_does() {
        let ok = json!({"kind": "ConfigMap", "metadata": {"name": "web.config-1",
            "labels": {"app.kubernetes.io/name": "web", "empty": ""},
            "annotations": {"example.com/note": "x"}}});
        assert!(refusals(&ok).is_empty(), "{:?}", refusals(&ok));
        let bad = json!({"kind": "ConfigMap", "metadata": {"name": "BadName_x",
            "labels": {"configsync.metahooks.io/target": "x".repeat(70), "-bad": "v"}}});
        let found = refusals(&bad);
        assert_eq!(found.len(), 3, "{found:?}");
        assert!(
            found[0]
                .starts_with("ConfigMap \"BadName_x\" is invalid: metadata.name: Invalid value")
        );
        assert!(
            found
                .iter()
                .any(|f| f.contains("must be no more than 63 characters"))
        );
        let service = json!({"kind": "Service", "metadata": {"name": "1web"},
                             "spec": {"ports": [{"port": 80}]}});
        assert_eq!(refusals(&service).len(), 1);
        let big = json!({"kind": "ConfigMap", "metadata": {"name": "big",
            "annotations": {"metacontroller.k8s.io/last-applied-configuration": "x".repeat(300 * 1024)}}});
        let found = refusals(&big);
        assert!(
            found.len() == 1
                && found[0].contains("Too long")
                && found[0].contains("client-side apply"),
            "{found:?}"
        );
    }

    #[test]
    fn immutable_fields_may_not_change_on_update() {
        let deployment = |app: &str| {
            json!({"kind": "Deployment", "metadata": {"name": "d"},
            "spec": {"selector": {"matchLabels": {"app": app}}, "replicas": 1}})
        };
        assert!(immutable_changes(&deployment("a"), &deployment("a")).is_empty());
        assert_eq!(
            immutable_changes(&deployment("a"), &deployment("b")).len(),
            1
        );
        let frozen = |value: &str| {
            json!({"kind": "ConfigMap", "metadata": {"name": "c"},
            "immutable": true, "data": {"k": value}})
        };
        assert_eq!(immutable_changes(&frozen("1"), &frozen("2")).len(), 1);
        let service = |ip: &str| json!({"kind": "Service", "metadata": {"name": "s"}, "spec": {"clusterIP": ip}});
        assert_eq!(
            immutable_changes(&service("10.0.0.1"), &service("10.0.0.2")).len(),
            1
        );
        assert!(immutable_changes(&service("10.0.0.1"), &service("")).is_empty());
    }
}
