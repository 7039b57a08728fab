//! Object-level rules of the API server and Metacontroller: owner references,
//! finalizers, label and annotation selectors, client-side apply's three-way merge and
//! the defaults the API server fills in.

use std::collections::BTreeSet;

use serde_json::{Map, Value, json};

pub(crate) fn owner_uid(object: &Value) -> Option<String> {
    object
        .pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)?
        .iter()
        .find(|r| r.get("controller").and_then(Value::as_bool) == Some(true))
        .and_then(|r| r.get("uid"))
        .and_then(Value::as_str)
        .map(str::to_owned)
}

pub(crate) fn has_finalizer(object: &Value, finalizer: &str) -> bool {
    object
        .pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .is_some_and(|f| f.iter().any(|x| x.as_str() == Some(finalizer)))
}

pub(crate) fn add_finalizer(object: &mut Value, finalizer: &str) {
    let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) else {
        return;
    };
    let list = meta.entry("finalizers").or_insert_with(|| json!([]));
    if let Some(items) = list.as_array_mut() {
        items.push(json!(finalizer));
    }
}

pub(crate) fn remove_finalizer(object: &mut Value, finalizer: &str) {
    if let Some(items) = object
        .pointer_mut("/metadata/finalizers")
        .and_then(Value::as_array_mut)
    {
        items.retain(|x| x.as_str() != Some(finalizer));
    }
}

/// A rule's labelSelector and annotationSelector (decorators) both match.
pub(crate) fn matches_rule(rule: &Value, object: &Value) -> bool {
    let labels_ok = rule
        .get("labelSelector")
        .is_none_or(|s| labels_match(s, object));
    let annotations_ok = rule.get("annotationSelector").is_none_or(|selector| {
        let annotations = object
            .pointer("/metadata/annotations")
            .cloned()
            .unwrap_or(json!({}));
        metahooks_apiserver::selector::matches(
            selector.get("matchAnnotations"),
            selector.get("matchExpressions"),
            &annotations,
        )
    });
    labels_ok && annotations_ok
}

/// Whether the object's labels satisfy a `metav1.LabelSelector` (matchLabels and
/// matchExpressions).
pub fn labels_match(selector: &Value, object: &Value) -> bool {
    let labels = object
        .pointer("/metadata/labels")
        .cloned()
        .unwrap_or(json!({}));
    metahooks_apiserver::selector::matches(
        selector.get("matchLabels"),
        selector.get("matchExpressions"),
        &labels,
    )
}

/// live − (fields we applied before and no longer want) + what we want now.
/// Metacontroller's client-side apply (pkg/dynamic/apply): the change from `previous`
/// (last applied) to `desired`, applied onto `live`. Objects merge key by key (fields
/// dropped since last time are removed); arrays of objects that share a conventional
/// key (containerPort, port, mountPath, name, uid, ip, path, in that order) merge item
/// by item as "list maps"; other arrays and scalars take the desired value.
///
/// Where the live value is a map or a list and the desired one is null or of another
/// type, Go's type assertion in `merge` yields a nil map or list, which merges as an
/// empty one: a map keeps its keys but those applied before (`annotations: null` keeps
/// what others put there), and a list that is no list map becomes null.
pub fn three_way(live: &Value, previous: &Value, desired: &Value) -> Value {
    let previous_items: &[Value] = previous.as_array().map_or(&[], Vec::as_slice);
    match (live, desired) {
        (Value::Object(live_map), Value::Object(desired_map)) => {
            Value::Object(merge_maps(live_map, previous.as_object(), desired_map))
        }
        (Value::Object(live_map), _) => {
            Value::Object(merge_maps(live_map, previous.as_object(), &Map::new()))
        }
        (Value::Array(live_items), Value::Array(desired_items)) => {
            match list_map_key(&[live_items, previous_items, desired_items]) {
                Some(key) => merge_list_map(key, live_items, previous_items, desired_items),
                None => desired.clone(),
            }
        }
        (Value::Array(live_items), _) => match list_map_key(&[live_items, previous_items]) {
            Some(key) => merge_list_map(key, live_items, previous_items, &[]),
            None => Value::Null,
        },
        _ => desired.clone(),
    }
}

fn merge_maps(
    live: &Map<String, Value>,
    previous: Option<&Map<String, Value>>,
    desired: &Map<String, Value>,
) -> Map<String, Value> {
    let mut out = live.clone();
    for key in previous.into_iter().flat_map(|p| p.keys()) {
        if !desired.contains_key(key) {
            out.remove(key);
        }
    }
    for (key, want) in desired {
        let before = previous.and_then(|p| p.get(key)).unwrap_or(&Value::Null);
        let merged = match out.get(key) {
            Some(have) => three_way(have, before, want),
            None => want.clone(),
        };
        out.insert(key.clone(), merged);
    }
    out
}

const LIST_MAP_KEYS: [&str; 7] = [
    "containerPort",
    "port",
    "mountPath",
    "name",
    "uid",
    "ip",
    "path",
];

/// The conventional key every item of every list has, if all items are objects.
fn list_map_key(lists: &[&[Value]]) -> Option<&'static str> {
    let mut common: Option<BTreeSet<String>> = None;
    for item in lists.iter().flat_map(|l| l.iter()) {
        let object = item.as_object()?;
        let keys: BTreeSet<String> = object.keys().cloned().collect();
        common = Some(match common {
            None => keys,
            Some(c) => c.intersection(&keys).cloned().collect(),
        });
    }
    let common = common?;
    LIST_MAP_KEYS.into_iter().find(|k| common.contains(*k))
}

fn merge_list_map(key: &str, live: &[Value], previous: &[Value], desired: &[Value]) -> Value {
    let id = |item: &Value| match &item[key] {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let as_map = |items: &[Value]| -> Map<String, Value> {
        items.iter().map(|i| (id(i), i.clone())).collect()
    };
    let merged = merge_maps(&as_map(live), Some(&as_map(previous)), &as_map(desired));
    // Keep live order, then append what desired adds.
    let mut out = Vec::new();
    let mut added = BTreeSet::new();
    for item in live.iter().chain(desired) {
        let k = id(item);
        if let Some(value) = merged.get(&k)
            && added.insert(k)
        {
            out.push(value.clone());
        }
    }
    Value::Array(out)
}

/// What the API server fills in when an object is written, for the kinds the hooks
/// emit: a hook that fought these defaults would rewrite its children every round.
pub(crate) fn apply_server_defaults(object: &mut Value) {
    metahooks_apiserver::fold_string_data(object);
    match object["kind"].as_str() {
        Some("Deployment") => {
            default(object, "/spec/replicas", json!(1));
            default(object, "/spec/revisionHistoryLimit", json!(10));
            default(object, "/spec/progressDeadlineSeconds", json!(600));
            default(
                object,
                "/spec/strategy",
                json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}}),
            );
            if let Some(pod_spec) = object.pointer_mut("/spec/template/spec") {
                pod_spec_defaults(pod_spec);
            }
        }
        Some("Service") => service_defaults(object),
        _ => {}
    }
}

/// Sets `pointer` to `value` unless it is set (its parent object must exist).
fn default(object: &mut Value, pointer: &str, value: Value) {
    let Some((parent, field)) = pointer.rsplit_once('/') else {
        return;
    };
    if let Some(Value::Object(map)) = object.pointer_mut(parent) {
        map.entry(field.to_owned()).or_insert(value);
    }
}

/// A pod template's defaults, its containers' included.
fn pod_spec_defaults(pod_spec: &mut Value) {
    for list in ["containers", "initContainers"] {
        for container in pod_spec
            .get_mut(list)
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
        {
            let latest = container["image"]
                .as_str()
                .is_some_and(|i| i.ends_with(":latest") || !i.contains(':'));
            default(
                container,
                "/terminationMessagePath",
                json!("/dev/termination-log"),
            );
            default(container, "/terminationMessagePolicy", json!("File"));
            default(
                container,
                "/imagePullPolicy",
                json!(if latest { "Always" } else { "IfNotPresent" }),
            );
            for port in container
                .get_mut("ports")
                .and_then(Value::as_array_mut)
                .into_iter()
                .flatten()
            {
                default(port, "/protocol", json!("TCP"));
            }
        }
    }
    default(pod_spec, "/restartPolicy", json!("Always"));
    default(pod_spec, "/terminationGracePeriodSeconds", json!(30));
    default(pod_spec, "/dnsPolicy", json!("ClusterFirst"));
    default(pod_spec, "/securityContext", json!({}));
    default(pod_spec, "/schedulerName", json!("default-scheduler"));
}

/// A Service's defaults: ClusterIP, one IPv4 address, each port's protocol and target.
fn service_defaults(object: &mut Value) {
    default(object, "/spec/type", json!("ClusterIP"));
    default(object, "/spec/sessionAffinity", json!("None"));
    default(object, "/spec/clusterIP", json!("10.96.0.10"));
    default(object, "/spec/clusterIPs", json!(["10.96.0.10"]));
    default(object, "/spec/ipFamilies", json!(["IPv4"]));
    default(object, "/spec/ipFamilyPolicy", json!("SingleStack"));
    default(object, "/spec/internalTrafficPolicy", json!("Cluster"));
    for port in object
        .pointer_mut("/spec/ports")
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
    {
        default(port, "/protocol", json!("TCP"));
        if port.get("targetPort").is_none()
            && let Some(number) = port.get("port").cloned()
        {
            port["targetPort"] = number;
        }
    }
}

#[cfg(test)]
mod merge_tests {
    use super::*;

    #[test]
    fn null_or_another_type_where_a_map_lives_prunes_what_was_applied_and_keeps_the_rest() {
        // `metadata.annotations: null` (Python's `ann or None`): the annotation we applied
        // goes, the one another controller wrote stays; the map stays a map.
        let live = json!({"metadata": {"annotations": {"ours": "1", "theirs": "x"}}});
        let previous = json!({"metadata": {"annotations": {"ours": "1"}}});
        for desired in [
            json!({"metadata": {"annotations": null}}),
            json!({"metadata": {"annotations": "text"}}),
        ] {
            assert_eq!(
                three_way(&live, &previous, &desired),
                json!({"metadata": {"annotations": {"theirs": "x"}}}),
                "{desired}"
            );
        }
        // `data: null` keeps the keys others wrote.
        let live = json!({"data": {"a": "1", "foreign": "f"}});
        assert_eq!(
            three_way(&live, &json!({"data": {"a": "1"}}), &json!({"data": null})),
            json!({"data": {"foreign": "f"}})
        );
        // A plain list meeting null becomes null; a scalar meeting a map takes the map.
        assert_eq!(
            three_way(&json!({"args": ["a"]}), &json!({}), &json!({"args": null})),
            json!({"args": null})
        );
        assert_eq!(
            three_way(&json!({"x": 1}), &json!({}), &json!({"x": {"y": 2}})),
            json!({"x": {"y": 2}})
        );
    }
}
