//! What the API server refuses in the content of the objects hook authors write most:
//! ConfigMap and Secret data (decoding and `IsConfigMapKey`, ValidateConfigMap and
//! ValidateSecret in pkg/apis/core/validation), a Job's restart policy
//! (ValidateJobSpec / ValidatePodTemplateSpec), and a workload's selector against its
//! template's labels (ValidateDeploymentSpec and its siblings in pkg/apis/apps/validation).

use serde_json::{Map, Value};

/// The refusals of `object`'s content (each without the `Kind "name" is invalid: ` that
/// [`crate::refusals`] puts in front).
pub(crate) fn refusals(kind: &str, object: &Value) -> Vec<String> {
    let mut found = Vec::new();
    match kind {
        "ConfigMap" => config_map(object, &mut found),
        "Secret" => secret(object, &mut found),
        "Job" => job(object, &mut found),
        "Deployment" | "ReplicaSet" | "StatefulSet" | "DaemonSet" => {
            workload(object, &mut found);
        }
        _ => {}
    }
    found
}

/// `data` holds strings and `binaryData` base64, under keys `IsConfigMapKey` accepts, no
/// key in both.
fn config_map(object: &Value, found: &mut Vec<String>) {
    let data = object.get("data").and_then(Value::as_object);
    if let Some(data) = data {
        for (key, value) in data {
            if !value.is_string() {
                found.push(format!(
                    "data[{key}]: json: cannot unmarshal {} into Go struct field ConfigMap.data of type string",
                    crate::go_json_type(value)
                ));
            }
        }
        keys("data", data, found);
    }
    if let Some(binary) = object.get("binaryData").and_then(Value::as_object) {
        base64_values("binaryData", binary, found);
        keys("binaryData", binary, found);
        for key in binary.keys() {
            if data.is_some_and(|d| d.contains_key(key)) {
                found.push(format!(
                    "data[{key}]: Invalid value: {key:?}: duplicate of key present in binaryData"
                ));
            }
        }
    }
}

/// `data` holds base64 and `stringData` strings, under config-map keys.
fn secret(object: &Value, found: &mut Vec<String>) {
    if let Some(data) = object.get("data").and_then(Value::as_object) {
        base64_values("data", data, found);
        keys("data", data, found);
    }
    if let Some(strings) = object.get("stringData").and_then(Value::as_object) {
        for (key, value) in strings {
            if !value.is_string() {
                found.push(format!(
                    "stringData[{key}]: json: cannot unmarshal {} into Go struct field Secret.stringData of type string",
                    crate::go_json_type(value)
                ));
            }
        }
        keys("stringData", strings, found);
    }
}

/// A Secret's `stringData` as the API server stores it: each value base64-encoded into
/// `data` (over a `data` value of the same key), and `stringData` gone
/// (`Convert_v1_Secret_To_core_Secret`, pkg/apis/core/v1/conversion.go). Values that are
/// not strings are left for validation to refuse.
pub fn fold_string_data(object: &mut Value) {
    use base64::Engine;
    if object.get("kind").and_then(Value::as_str) != Some("Secret") {
        return;
    }
    let Some(map) = object.as_object_mut() else {
        return;
    };
    let Some(Value::Object(strings)) = map.get("stringData").cloned() else {
        return;
    };
    if strings.values().any(|v| !v.is_string()) {
        return;
    }
    map.remove("stringData");
    let data = map
        .entry("data")
        .or_insert_with(|| Value::Object(Map::new()));
    if data.is_null() {
        *data = Value::Object(Map::new());
    }
    if let Some(data) = data.as_object_mut() {
        for (key, value) in strings {
            let text = value.as_str().unwrap_or_default();
            let encoded = base64::engine::general_purpose::STANDARD.encode(text);
            data.insert(key, Value::String(encoded));
        }
    }
}

/// A Job's pods may not restart in place: `OnFailure` or `Never` (unset defaults to
/// `Always`, which is refused).
fn job(object: &Value, found: &mut Vec<String>) {
    let policy = object
        .pointer("/spec/template/spec/restartPolicy")
        .and_then(Value::as_str)
        .unwrap_or("Always");
    if !matches!(policy, "OnFailure" | "Never") {
        found.push(format!(
            "spec.template.spec.restartPolicy: Unsupported value: {policy:?}: supported values: \"OnFailure\", \"Never\""
        ));
    }
}

/// A workload needs a selector, and its template's labels must match it.
fn workload(object: &Value, found: &mut Vec<String>) {
    let Some(selector) = object.pointer("/spec/selector").filter(|s| !s.is_null()) else {
        found.push("spec.selector: Required value".to_owned());
        return;
    };
    let empty = Map::new();
    let labels = object
        .pointer("/spec/template/metadata/labels")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    match selects(selector, labels) {
        Ok(true) => {}
        Ok(false) => found.push(format!(
            "spec.template.metadata.labels: Invalid value: {}: `selector` does not match template `labels`",
            Value::Object(labels.clone())
        )),
        Err(problem) => found.push(format!("spec.selector: Invalid value: {problem}")),
    }
}

/// Whether a workload's selector selects its template's `labels`: an empty selector or
/// an unknown operator is refused first, then [`crate::selector::matches`] decides.
fn selects(selector: &Value, labels: &Map<String, Value>) -> Result<bool, String> {
    let match_labels = selector.get("matchLabels").and_then(Value::as_object);
    let expressions = selector
        .get("matchExpressions")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    if match_labels.is_none_or(Map::is_empty) && expressions.is_empty() {
        return Err("empty selector is invalid for deployment".to_owned());
    }
    for expression in expressions {
        let operator = expression.get("operator").and_then(Value::as_str);
        if !operator.is_some_and(|op| crate::selector::OPERATORS.contains(&op)) {
            return Err(format!(
                "{operator:?} is not a valid label selector operator"
            ));
        }
    }
    Ok(crate::selector::matches(
        selector.get("matchLabels"),
        selector.get("matchExpressions"),
        &Value::Object(labels.clone()),
    ))
}

/// Keys as `IsConfigMapKey` has them.
fn keys(field: &str, map: &Map<String, Value>, found: &mut Vec<String>) {
    for key in map.keys() {
        let valid_chars = !key.is_empty()
            && key
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
        let problem = if key.len() > 253 {
            Some("must be no more than 253 characters")
        } else if !valid_chars {
            Some(
                "a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')",
            )
        } else if key == "." || key == ".." {
            Some("must not be '.' or '..'")
        } else if key.starts_with("..") {
            Some("must not start with '..'")
        } else {
            None
        };
        if let Some(problem) = problem {
            found.push(format!("{field}[{key}]: Invalid value: {key:?}: {problem}"));
        }
    }
}

/// Values Go decodes as `[]byte`: base64 strings.
fn base64_values(field: &str, map: &Map<String, Value>, found: &mut Vec<String>) {
    use base64::Engine;
    for (key, value) in map {
        let decoded = value
            .as_str()
            .map(|text| base64::engine::general_purpose::STANDARD.decode(text));
        match decoded {
            Some(Ok(_)) => {}
            Some(Err(error)) => found.push(format!(
                "{field}[{key}]: illegal base64 data ({error}); write text under stringData, or encode it"
            )),
            None => found.push(format!(
                "{field}[{key}]: json: cannot unmarshal {} into Go value of type []uint8",
                crate::go_json_type(value)
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn what_hook_authors_write_every_day_is_refused_as_the_api_server_does() {
        let config = json!({"data": {"retries": 2, "ok": "1", "bad/key": "x"},
            "binaryData": {"ok": "not base64!"}});
        let found = refusals("ConfigMap", &config);
        assert!(
            found
                .iter()
                .any(|f| f.starts_with("data[retries]: json: cannot unmarshal number")),
            "{found:?}"
        );
        assert!(
            found
                .iter()
                .any(|f| f.starts_with("data[bad/key]: Invalid value")),
            "{found:?}"
        );
        assert!(
            found
                .iter()
                .any(|f| f.starts_with("binaryData[ok]: illegal base64")),
            "{found:?}"
        );
        assert!(
            found
                .iter()
                .any(|f| f.contains("duplicate of key present in binaryData")),
            "{found:?}"
        );
        assert!(refusals("ConfigMap", &json!({"data": {"a.b_C-1": "x"}})).is_empty());

        let secret = json!({"data": {"token": "plain text"}, "stringData": {"n": 1}});
        assert_eq!(refusals("Secret", &secret).len(), 2);
        assert!(
            refusals(
                "Secret",
                &json!({"data": {"token": "c2VjcmV0"}, "stringData": {"a": "b"}})
            )
            .is_empty()
        );

        let job = |policy: Option<&str>| {
            let mut spec = json!({"containers": [{"name": "c", "image": "i"}]});
            if let Some(policy) = policy {
                spec["restartPolicy"] = json!(policy);
            }
            json!({"spec": {"template": {"spec": spec}}})
        };
        assert!(refusals("Job", &job(None))[0].contains("Unsupported value: \"Always\""));
        assert!(refusals("Job", &job(Some("Never"))).is_empty());

        let deployment = |selector: Value| {
            json!({"spec": {"selector": selector,
                "template": {"metadata": {"labels": {"app": "web", "tier": "front"}}}}})
        };
        assert!(
            refusals(
                "Deployment",
                &deployment(json!({"matchLabels": {"app": "web"}}))
            )
            .is_empty()
        );
        assert!(
            refusals(
                "Deployment",
                &deployment(json!({"matchExpressions": [
            {"key": "tier", "operator": "In", "values": ["front", "back"]}]}))
            )
            .is_empty()
        );
        assert!(
            refusals(
                "Deployment",
                &deployment(json!({"matchLabels": {"app": "api"}}))
            )[0]
            .contains("`selector` does not match template `labels`")
        );
        assert_eq!(
            refusals("Deployment", &json!({"spec": {}})),
            ["spec.selector: Required value"]
        );
    }
}
