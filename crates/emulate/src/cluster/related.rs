//! The customize hook (cached per parent UID and generation, as Metacontroller does) and
//! the related objects its rules select; which children a parent owns.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use super::{CUSTOMIZE_CACHE_TTL, Emulator, qualified_name};
use crate::findings::{Problem, Rule};
use crate::objects::labels_match;
use crate::registration::{ControllerType, Hook, HookName, Kinds, Registration, str_at};
use crate::{Key, key_of};

/// Objects by type (`Kind.apiVersion`) and then by name, as a request carries them.
pub(super) type ObjectMap<'a> = BTreeMap<String, BTreeMap<String, &'a Value>>;

impl Emulator {
    /// The related objects a parent's customize answer selects, keyed as Metacontroller
    /// sends them to a hook of `calling_version` (`{}` without a customize hook): the map
    /// is converted for the sync or finalize request, so its keys follow that hook's
    /// version, not the customize hook's (`UniformObjectMap.Convert`, v2 common.go).
    pub(super) async fn related(
        &mut self,
        registration: &Registration,
        parent: &Value,
        calling_version: &str,
    ) -> Result<Value, Problem> {
        if !registration.hooks.contains_key(&HookName::Customize) {
            return Ok(json!({}));
        }
        let mut hook = self.hook_of(registration, HookName::Customize)?;
        hook.strict |= self.strict_everywhere;
        let response = self.customize_answer(registration, &hook, parent).await?;
        let mut groups = Map::new();
        let parent_namespace = key_of(parent).2;
        let v1_namespaced = hook.version != "v2" && !parent_namespace.is_empty();
        for rule in response
            .get("relatedResources")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let rule = RelatedRule::read(rule, &self.kinds, &parent_namespace, v1_namespaced)?;
            let group = groups
                .entry(format!("{}.{}", rule.kind, rule.api_version))
                .or_insert_with(|| json!({}));
            for (key, object) in self.selected(&rule) {
                let map_key = if calling_version == "v2"
                    || parent_namespace.is_empty()
                    || key.2 != parent_namespace
                {
                    super::uniform_name(key)
                } else {
                    key.3.clone()
                };
                group[map_key] = object.clone();
            }
        }
        Ok(Value::Object(groups))
    }

    /// Metacontroller asks customize once per (parent UID, generation) and reuses the
    /// answer for 20 minutes: label and annotation edits do not bump the generation.
    async fn customize_answer(
        &mut self,
        registration: &Registration,
        hook: &Hook,
        parent: &Value,
    ) -> Result<Value, Problem> {
        let cache_key = (
            registration.name.clone(),
            parent
                .pointer("/metadata/uid")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
            parent
                .pointer("/metadata/generation")
                .and_then(Value::as_i64)
                .unwrap_or_default(),
        );
        let cached = self
            .customize_cache
            .get(&cache_key)
            .filter(|(_, at)| self.clock.saturating_sub(*at) < CUSTOMIZE_CACHE_TTL)
            .map(|(answer, _)| answer.clone());
        let response = match cached {
            Some(answer) => answer,
            None => {
                let request = json!({"controller": registration.raw, "parent": parent});
                let (_, response) = self
                    .call(
                        registration,
                        hook,
                        HookName::Customize,
                        &request,
                        &qualified_name(parent),
                    )
                    .await?;
                self.customize_cache
                    .insert(cache_key, (response.clone(), self.clock));
                response
            }
        };
        if hook.strict
            && let Some(path) = unknown_customize_field(&response)
        {
            return Err((
                Rule::StrictDecoding,
                format!("customize answer has unknown field {path} (strict decoding)"),
            ));
        }
        Ok(response)
    }

    /// The objects of the rule's type (and namespace) that its names or labels select.
    /// Names in one namespace are looked up one by one; otherwise keys sort by
    /// (apiVersion, kind, namespace, name), so only that range is read.
    fn selected<'s>(&'s self, rule: &'s RelatedRule<'_>) -> Vec<(&'s Key, &'s Value)> {
        let wanted = |object: &Value| {
            rule.label_selector
                .is_none_or(|selector| labels_match(selector, object))
        };
        if let (Some(names), Some(namespace)) = (&rule.names, rule.listed) {
            return names
                .iter()
                .filter_map(|name| {
                    let key: Key = (
                        rule.api_version.clone(),
                        rule.kind.clone(),
                        namespace.to_owned(),
                        (*name).to_owned(),
                    );
                    self.objects.get_key_value(&key)
                })
                .filter(|(_, object)| wanted(object))
                .collect();
        }
        let start: Key = (
            rule.api_version.clone(),
            rule.kind.clone(),
            rule.listed.unwrap_or_default().to_owned(),
            String::new(),
        );
        self.objects
            .range(start..)
            .take_while(|(key, _)| {
                key.0 == rule.api_version
                    && key.1 == rule.kind
                    && rule.listed.is_none_or(|ns| ns == key.2)
            })
            .filter(|(key, object)| {
                rule.names
                    .as_ref()
                    .is_none_or(|n| n.contains(&key.3.as_str()))
                    && wanted(object)
            })
            .collect()
    }

    pub(super) fn owned_by(&self, registration: &Registration, parent: &Value) -> Vec<Key> {
        let uid = parent
            .pointer("/metadata/uid")
            .and_then(Value::as_str)
            .unwrap_or_default();
        // claimChildren lists a namespaced parent's children in its namespace only.
        let namespace = crate::key_of(parent).2;
        self.by_owner
            .get(uid)
            .into_iter()
            .flatten()
            .filter(|key| namespace.is_empty() || key.2 == namespace)
            .filter_map(|key| self.objects.get(key).map(|object| (key, object)))
            .filter(|(key, object)| {
                registration.child_rule(&key.0, &key.1).is_some()
                    && (registration.type_ == ControllerType::Composite
                        || object
                            .pointer(
                                "/metadata/annotations/metacontroller.k8s.io~1decorator-controller",
                            )
                            .and_then(Value::as_str)
                            == Some(registration.name.as_str()))
            })
            .map(|(key, _)| key.clone())
            .collect()
    }

    /// The observed children or attachments as the request carries them, by type and
    /// then by the key the hook's version uses, borrowed from the stored objects.
    pub(super) fn object_map<'s>(
        &'s self,
        registration: &Registration,
        parent: &Value,
        owned: &[Key],
        version: &str,
    ) -> ObjectMap<'s> {
        let mut groups = ObjectMap::new();
        for rule in &registration.children {
            groups.insert(
                format!("{}.{}", rule.kind, rule.api_version),
                BTreeMap::new(),
            );
        }
        let parent_namespace = key_of(parent).2;
        for key in owned {
            let Some(object) = self.objects.get(key) else {
                continue;
            };
            let map_key = if version == "v2" || parent_namespace.is_empty() {
                super::uniform_name(key)
            } else {
                key.3.clone()
            };
            groups
                .entry(format!("{}.{}", key.1, key.0))
                .or_default()
                .insert(map_key, object);
        }
        groups
    }
}

/// One `relatedResources` rule, read and checked as Metacontroller does
/// (customize/manager.go, v4.17).
pub(super) struct RelatedRule<'a> {
    api_version: String,
    kind: String,
    names: Option<Vec<&'a str>>,
    label_selector: Option<&'a Value>,
    /// The namespace listed; None lists every namespace.
    listed: Option<&'a str>,
}

impl<'a> RelatedRule<'a> {
    fn read(
        rule: &'a Value,
        kinds: &Kinds,
        parent_namespace: &'a str,
        v1_namespaced: bool,
    ) -> Result<RelatedRule<'a>, Problem> {
        let customize = |message: String| (Rule::InvalidCustomize, message);
        let api_version = str_at(rule, "/apiVersion").map_err(customize)?.to_owned();
        let resource = str_at(rule, "/resource").map_err(customize)?;
        // getRelatedClient: a resource discovery does not find at that apiVersion
        // fails the sync, every time.
        let kind = kinds
            .discover(&api_version, resource)
            .map_err(|e| (Rule::NotEmulated, e))?
            .ok_or_else(|| {
                customize(format!(
                    "discovery: can't find resource {resource} in apiVersion {api_version} (a related rule of the customize answer; Metacontroller fails every sync of this parent)"
                ))
            })?
            .to_owned();
        let namespace = rule
            .get("namespace")
            .and_then(Value::as_str)
            .filter(|ns| !ns.is_empty());
        let names: Option<Vec<&str>> = rule
            .get("names")
            .and_then(Value::as_array)
            .map(|n| n.iter().filter_map(Value::as_str).collect())
            .filter(|n: &Vec<&str>| !n.is_empty());
        let label_selector = rule.get("labelSelector").filter(|s| !s.is_null());
        let namespace_selector = rule.get("namespaceSelector").filter(|s| !s.is_null());
        check_selectors(
            &format!("{api_version}/{resource}"),
            label_selector,
            namespace_selector,
        )?;
        check_rule_fields(
            rule,
            names.is_some(),
            label_selector.is_some(),
            namespace,
            namespace_selector.is_some(),
        )?;
        if v1_namespaced && namespace.is_some_and(|ns| ns != parent_namespace) {
            return Err(customize(format!(
                "requested related object namespace {namespace:?} differs from parent object namespace {parent_namespace}"
            )));
        }
        // Which namespace is listed (matchesRelatedRule, customize/manager.go): none for a
        // cluster-scoped related kind; the rule's namespace when it names one; the
        // parent's for a v1 customize hook of a namespaced parent; else every namespace.
        let listed = (!kinds.is_cluster_scoped(&kind))
            .then(|| namespace.or(v1_namespaced.then_some(parent_namespace)))
            .flatten();
        Ok(RelatedRule {
            api_version,
            kind,
            names,
            label_selector,
            listed,
        })
    }
}

/// toSelector (customize/manager.go) fails the parent's sync, before its sync hook is
/// called, on a selector `LabelSelectorAsSelector` refuses.
fn check_selectors(
    rule: &str,
    label_selector: Option<&Value>,
    namespace_selector: Option<&Value>,
) -> Result<(), Problem> {
    for (field, selector) in [
        ("labelSelector", label_selector),
        ("namespaceSelector", namespace_selector),
    ] {
        if let Some(problem) = selector
            .and_then(|s| metahooks_apiserver::selector::conversion_problem(s, "matchLabels"))
        {
            return Err((
                Rule::InvalidCustomize,
                format!(
                    "related rule {rule} {field}: {problem} (Metacontroller fails the sync before calling it)"
                ),
            ));
        }
    }
    Ok(())
}

/// The path of the first field the customize response type has no place for, at any
/// depth (CustomizeHookResponse → ResourceRule → LabelSelector →
/// LabelSelectorRequirement), as sigs.k8s.io/json's strict decoding reports it.
fn unknown_customize_field(response: &Value) -> Option<String> {
    const RULE: &[&str] = &[
        "apiVersion",
        "resource",
        "labelSelector",
        "namespaceSelector",
        "namespace",
        "names",
    ];
    const SELECTOR: &[&str] = &["matchLabels", "matchExpressions"];
    const REQUIREMENT: &[&str] = &["key", "operator", "values"];
    fn unknown(object: &Value, allowed: &[&str], at: &str) -> Option<String> {
        object
            .as_object()?
            .keys()
            .find(|k| !allowed.contains(&k.as_str()))
            .map(|k| format!("{at}.{k}"))
    }
    fn selector(value: Option<&Value>, at: &str) -> Option<String> {
        let value = value?;
        unknown(value, SELECTOR, at).or_else(|| {
            value
                .get("matchExpressions")?
                .as_array()?
                .iter()
                .enumerate()
                .find_map(|(i, e)| unknown(e, REQUIREMENT, &format!("{at}.matchExpressions[{i}]")))
        })
    }
    if let Some(field) = unknown(response, &["relatedResources"], "") {
        return Some(field.trim_start_matches('.').to_owned());
    }
    let rules = response.get("relatedResources")?.as_array()?;
    rules.iter().enumerate().find_map(|(i, rule)| {
        let at = format!("relatedResources[{i}]");
        unknown(rule, RULE, &at)
            .or_else(|| selector(rule.get("labelSelector"), &format!("{at}.labelSelector")))
            .or_else(|| {
                selector(
                    rule.get("namespaceSelector"),
                    &format!("{at}.namespaceSelector"),
                )
            })
    })
}

/// The combinations Metacontroller refuses in a related rule (names with selectors, a
/// namespace with a namespaceSelector), and namespaceSelector, which is not emulated.
fn check_rule_fields(
    rule: &Value,
    names: bool,
    label_selector: bool,
    namespace: Option<&str>,
    namespace_selector: bool,
) -> Result<(), Problem> {
    if names && (label_selector || namespace_selector) {
        return Err((
            Rule::InvalidCustomize,
            format!(
                "related rule cannot have both names and labelSelector/namespaceSelector specified: {rule}"
            ),
        ));
    }
    if namespace.is_some() && namespace_selector {
        return Err((
            Rule::InvalidCustomize,
            format!(
                "related rule cannot have both namespace and namespaceSelector specified: {rule}"
            ),
        ));
    }
    if namespace_selector {
        return Err((
            Rule::NotEmulated,
            "namespaceSelector rules are not emulated".to_owned(),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::unknown_customize_field;
    use serde_json::json;

    #[test]
    fn unknown_customize_fields_are_found_at_every_depth() {
        let ok = json!({"relatedResources": [{"apiVersion": "v1", "resource": "secrets",
            "labelSelector": {"matchLabels": {"a": "b"},
                              "matchExpressions": [{"key": "k", "operator": "In", "values": ["v"]}]}}]});
        assert_eq!(unknown_customize_field(&ok), None);
        let typo = json!({"relatedResources": [{"apiVersion": "v1", "resource": "secrets",
            "labelSelector": {"matchLabel": {"a": "b"}}}]});
        assert_eq!(
            unknown_customize_field(&typo).as_deref(),
            Some("relatedResources[0].labelSelector.matchLabel")
        );
        let deep = json!({"relatedResources": [{"apiVersion": "v1", "resource": "secrets",
            "labelSelector": {"matchExpressions": [{"key": "k", "operator": "In", "value": ["v"]}]}}]});
        assert_eq!(
            unknown_customize_field(&deep).as_deref(),
            Some("relatedResources[0].labelSelector.matchExpressions[0].value")
        );
        assert_eq!(
            unknown_customize_field(&json!({"related": []})).as_deref(),
            Some("related")
        );
    }
}
