//! `render`'s related objects, chosen as the cluster would choose them: the controller's
//! customize hook names what it wants (by API version and resource, namespace, names and
//! label selector), and Metacontroller sends only that. An object of the files that no
//! rule selects is left out, and `render` says so on stderr, so that what works in
//! `render` also works in the cluster.

use serde_json::Value;

use crate::controllers::Registry;
use crate::protocol::{CustomizeResponse, Hook, RelatedResourceRule, object_name};

/// The objects of `offered` the customize rules of `controller` select for `parent`,
/// and a line for each one left out.
///
/// # Errors
/// The customize hook refused the call, or answered something that is not its response.
pub fn selected(
    registry: &Registry,
    controller: &str,
    parent: &Value,
    offered: Vec<Value>,
) -> anyhow::Result<(Vec<Value>, Vec<String>)> {
    let body = serde_json::to_vec(&serde_json::json!({"controller": {}, "parent": parent}))?;
    let outcome = registry.call(
        controller,
        Hook::Customize,
        &body,
        &registry.context(jiff::Timestamp::now()),
    );
    let bytes = outcome.result.map_err(|e| anyhow::anyhow!("{e}"))?;
    let rules: CustomizeResponse = serde_json::from_slice(&bytes)?;
    let parent_namespace = namespace_of(parent).unwrap_or("default");
    let (kept, left): (Vec<Value>, Vec<Value>) = offered.into_iter().partition(|object| {
        rules
            .related_resources
            .iter()
            .any(|rule| selects(rule, object, parent_namespace))
    });
    let notes = left
        .iter()
        .map(|object| {
            let text = |key: &str| object.get(key).and_then(Value::as_str).unwrap_or("?");
            format!(
                "render: left out {} {}/{}: no related-resource rule of the {controller} customize hook selects it (the cluster would not send it either)",
                text("kind"),
                namespace_of(object).unwrap_or(parent_namespace),
                object_name(object).unwrap_or("?"),
            )
        })
        .collect();
    Ok((kept, notes))
}

/// Whether `rule` selects `object`; an object written without a namespace is in the
/// parent's, as `kubectl apply -n` would place it.
fn selects(rule: &RelatedResourceRule, object: &Value, parent_namespace: &str) -> bool {
    let field = |key: &str| object.get(key).and_then(Value::as_str).unwrap_or_default();
    let namespace = namespace_of(object).unwrap_or(parent_namespace);
    let name = object_name(object).unwrap_or_default();
    field("apiVersion") == rule.api_version
        && resource_of(field("kind")) == rule.resource
        && rule
            .namespace
            .as_deref()
            .is_none_or(|wanted| wanted == namespace)
        && rule
            .names
            .as_ref()
            .is_none_or(|names| names.iter().any(|wanted| wanted == name))
        && rule
            .label_selector
            .as_ref()
            .is_none_or(|selector| crate::emulate::labels_match(selector, object))
}

fn namespace_of(object: &Value) -> Option<&str> {
    object
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
}

/// The plural resource of a kind, as the API server names the built-in ones
/// (`Secret` → `secrets`, `Ingress` → `ingresses`, `NetworkPolicy` → `networkpolicies`).
fn resource_of(kind: &str) -> String {
    let lower = kind.to_ascii_lowercase();
    if lower.ends_with('s') || lower.ends_with('x') || lower.ends_with("ch") {
        format!("{lower}es")
    } else if let Some(stem) = lower.strip_suffix('y')
        && !stem.ends_with(['a', 'e', 'i', 'o', 'u'])
    {
        format!("{stem}ies")
    } else {
        format!("{lower}s")
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn kinds_are_named_by_their_plural_resource() {
        for (kind, resource) in [
            ("Secret", "secrets"),
            ("ConfigMap", "configmaps"),
            ("Pod", "pods"),
            ("Ingress", "ingresses"),
            ("NetworkPolicy", "networkpolicies"),
            ("Gateway", "gateways"),
        ] {
            assert_eq!(resource_of(kind), resource);
        }
    }

    #[test]
    fn a_rule_selects_by_type_namespace_name_and_labels() {
        let rule = RelatedResourceRule {
            api_version: "v1".to_owned(),
            resource: "secrets".to_owned(),
            namespace: Some("team".to_owned()),
            names: Some(vec!["creds".to_owned()]),
            label_selector: Some(json!({"matchLabels": {"use": "git"}})),
            ..RelatedResourceRule::default()
        };
        let secret = |namespace: Option<&str>, name: &str, labels: Value| {
            let mut object = json!({"apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": name, "labels": labels}});
            if let Some(namespace) = namespace {
                object["metadata"]["namespace"] = json!(namespace);
            }
            object
        };
        let git = json!({"use": "git"});
        assert!(selects(&rule, &secret(None, "creds", git.clone()), "team"));
        assert!(selects(
            &rule,
            &secret(Some("team"), "creds", git.clone()),
            "x"
        ));
        assert!(!selects(
            &rule,
            &secret(Some("other"), "creds", git.clone()),
            "team"
        ));
        assert!(!selects(
            &rule,
            &secret(None, "another", git.clone()),
            "team"
        ));
        assert!(!selects(&rule, &secret(None, "creds", json!({})), "team"));
        let config_map = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "creds", "labels": git}});
        assert!(!selects(&rule, &config_map, "team"));
    }
}
