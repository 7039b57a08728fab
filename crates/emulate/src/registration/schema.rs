//! What the API server refuses in a registration before Metacontroller ever sees it: the
//! `required` fields and `enum` values of Metacontroller v4.17's CRD schemas
//! (manifests/production/metacontroller-crds-v1.yaml). Each refusal reads like the API
//! server's: the field path, then `Required value` or `Unsupported value`.

use serde_json::Value;

/// The enum values of `updateStrategy.method`.
const UPDATE_METHODS: [&str; 5] = [
    "OnDelete",
    "Recreate",
    "InPlace",
    "RollingRecreate",
    "RollingInPlace",
];

/// The first rule of the CRD schema `spec` breaks, as `spec.…: …`.
pub(super) fn schema_refusal(
    spec: &Value,
    resources_field: &str,
    children_field: &str,
) -> Option<String> {
    let mut found = Vec::new();
    resource_rules(spec, resources_field, children_field, &mut found);
    hooks(spec, &mut found);
    for (i, endpoint) in metahooks_apiserver::indexed(spec.get("endpointConfigs")) {
        let at = format!("spec.endpointConfigs[{i}]");
        required(endpoint, &at, &["host"], &mut found);
        endpoint_references(endpoint, &at, &mut found);
    }
    found.into_iter().next()
}

/// Parent (or target) and child rules: apiVersion and resource, the update method,
/// status checks, selector expressions.
fn resource_rules(
    spec: &Value,
    resources_field: &str,
    children_field: &str,
    found: &mut Vec<String>,
) {
    for (at, rule) in listed(spec, resources_field).chain(listed(spec, children_field)) {
        required(rule, &at, &["apiVersion", "resource"], found);
    }
    for (at, rule) in listed(spec, children_field) {
        if let Some(method) = rule
            .pointer("/updateStrategy/method")
            .and_then(Value::as_str)
            && !UPDATE_METHODS.contains(&method)
        {
            let supported: Vec<String> = UPDATE_METHODS.iter().map(|m| format!("{m:?}")).collect();
            found.push(format!(
                "{at}.updateStrategy.method: Unsupported value: {method:?}: supported values: {}",
                supported.join(", ")
            ));
        }
        let conditions = rule.pointer("/updateStrategy/statusChecks/conditions");
        for (i, condition) in metahooks_apiserver::indexed(conditions) {
            let at = format!("{at}.updateStrategy.statusChecks.conditions[{i}]");
            required(condition, &at, &["type"], found);
        }
    }
    for (at, rule) in listed(spec, resources_field) {
        for selector in ["labelSelector", "annotationSelector"] {
            expressions(rule.get(selector), &format!("{at}.{selector}"), found);
        }
    }
}

/// Each hook's webhook: the decoding mode's enum and its references' required fields.
fn hooks(spec: &Value, found: &mut Vec<String>) {
    for (hook, config) in spec
        .get("hooks")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
    {
        let at = format!("spec.hooks.{hook}");
        if let Some(mode) = config
            .pointer("/webhook/responseUnMarshallMode")
            .and_then(Value::as_str)
            && !matches!(mode, "loose" | "strict")
        {
            found.push(format!(
                "{at}.webhook.responseUnMarshallMode: Unsupported value: {mode:?}: supported values: \"loose\", \"strict\""
            ));
        }
        if let Some(webhook) = config.get("webhook") {
            endpoint_references(webhook, &format!("{at}.webhook"), found);
        }
    }
}

/// A list field of `spec`, each item with its path.
fn listed<'a>(spec: &'a Value, field: &str) -> impl Iterator<Item = (String, &'a Value)> {
    let single = spec.get(field).filter(|v| v.is_object());
    let many = spec.get(field).and_then(Value::as_array);
    let field = field.to_owned();
    single
        .map(|rule| (format!("spec.{field}"), rule))
        .into_iter()
        .chain(
            many.into_iter()
                .flatten()
                .enumerate()
                .map(move |(i, rule)| (format!("spec.{field}[{i}]"), rule)),
        )
}

/// The Secret and ConfigMap references of a webhook or endpoint config, and its service.
fn endpoint_references(config: &Value, at: &str, found: &mut Vec<String>) {
    required_at(config, at, "service", &["name", "namespace"], found);
    for field in ["authorization", "basicAuth", "clientTLS"] {
        required_at(config, at, field, &["secretRef"], found);
    }
    required_at(
        config,
        at,
        "authorization/secretRef",
        &["key", "name", "namespace"],
        found,
    );
    for reference in [
        "basicAuth/secretRef",
        "clientTLS/secretRef",
        "caBundle/configMapRef",
        "caBundle/secretRef",
    ] {
        required_at(config, at, reference, &["name", "namespace"], found);
    }
}

/// `fields` required in the object at `pointer` under `config`, when that object is given.
fn required_at(config: &Value, at: &str, pointer: &str, fields: &[&str], found: &mut Vec<String>) {
    if let Some(object) = config
        .pointer(&format!("/{pointer}"))
        .filter(|v| v.is_object())
    {
        required(
            object,
            &format!("{at}.{}", pointer.replace('/', ".")),
            fields,
            found,
        );
    }
}

fn required(object: &Value, at: &str, fields: &[&str], found: &mut Vec<String>) {
    for field in fields {
        if object.get(*field).is_none_or(Value::is_null) {
            found.push(format!("{at}.{field}: Required value"));
        }
    }
}

/// A selector's `matchExpressions` items need `key` and `operator`.
fn expressions(selector: Option<&Value>, at: &str, found: &mut Vec<String>) {
    for (i, expression) in
        metahooks_apiserver::indexed(selector.and_then(|s| s.get("matchExpressions")))
    {
        required(
            expression,
            &format!("{at}.matchExpressions[{i}]"),
            &["key", "operator"],
            found,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn required_fields_and_enums_of_the_crd_schema_are_refused_by_path() {
        let refused = |spec: Value| schema_refusal(&spec, "parentResource", "childResources");
        let fine = json!({"parentResource": {"apiVersion": "v1", "resource": "configmaps"},
                          "hooks": {"sync": {"webhook": {"service": {"name": "s", "namespace": "n"},
                                                          "responseUnMarshallMode": "strict"}}}});
        assert_eq!(refused(fine), None);
        assert_eq!(
            refused(json!({"parentResource": {"apiVersion": "v1"}})).as_deref(),
            Some("spec.parentResource.resource: Required value")
        );
        assert_eq!(
            refused(
                json!({"parentResource": {"apiVersion": "v1", "resource": "x"},
                           "hooks": {"sync": {"webhook": {"service": {"name": "s"}}}}})
            )
            .as_deref(),
            Some("spec.hooks.sync.webhook.service.namespace: Required value")
        );
        assert_eq!(
            refused(
                json!({"parentResource": {"apiVersion": "v1", "resource": "x"},
                           "hooks": {"sync": {"webhook": {"responseUnMarshallMode": "Strict"}}}})
            )
            .as_deref(),
            Some(
                "spec.hooks.sync.webhook.responseUnMarshallMode: Unsupported value: \"Strict\": supported values: \"loose\", \"strict\""
            )
        );
        assert_eq!(
            refused(json!({"parentResource": {"apiVersion": "v1", "resource": "x"},
                           "hooks": {"sync": {"webhook": {"authorization": {"secretRef": {"name": "a", "namespace": "b"}}}}}}))
            .as_deref(),
            Some("spec.hooks.sync.webhook.authorization.secretRef.key: Required value")
        );
        assert_eq!(
            refused(
                json!({"parentResource": {"apiVersion": "v1", "resource": "x",
                           "labelSelector": {"matchExpressions": [{"key": "a"}]}}})
            )
            .as_deref(),
            Some("spec.parentResource.labelSelector.matchExpressions[0].operator: Required value")
        );
        assert_eq!(
            refused(json!({"parentResource": {"apiVersion": "v1", "resource": "x"},
                           "childResources": [{"apiVersion": "v1", "resource": "pods",
                               "updateStrategy": {"statusChecks": {"conditions": [{"status": "True"}]}}}]}))
            .as_deref(),
            Some("spec.childResources[0].updateStrategy.statusChecks.conditions[0].type: Required value")
        );
    }
}
