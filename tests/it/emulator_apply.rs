//! How the emulator applies an answer, rule by rule as Metacontroller v4.17 does
//! (`ManageChildren`, `ApplyUpdate`, `claimOwnership` in
//! pkg/controller/common/manage_children.go; `syncParentObject` and `makeSelector` in
//! pkg/controller/composite; `LabelSelectorAsSelector` wherever a selector is read). Each
//! test is a small hook written for one rule, and asserts the verdict and the end state.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::Json;
use axum::routing::post;
use metahooks::emulate::{Emulator, Kinds, Registration};
use serde_json::{Value, json};

pub(super) type Answer = dyn Fn(&Value) -> Value + Send + Sync;

/// A hook server answering every path with `answer(request)`; returns its base URL and
/// a count of the calls made.
pub(super) async fn hook(answer: Arc<Answer>) -> (String, Arc<AtomicU64>) {
    let calls = Arc::new(AtomicU64::new(0));
    let counted = calls.clone();
    let app = axum::Router::new().route(
        "/{*path}",
        post(move |Json(request): Json<Value>| {
            let answer = answer.clone();
            let counted = counted.clone();
            async move {
                counted.fetch_add(1, Ordering::SeqCst);
                Json(answer(&request))
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{address}"), calls)
}

pub(super) fn kinds() -> Kinds {
    let mut kinds = Kinds::default();
    kinds.learn(
        &json!({"apiVersion": "example.com/v1", "kind": "Thing", "metadata": {"name": "x"}}),
    );
    kinds
}

/// A CompositeController for `Thing` owning InPlace ConfigMaps, with `spec` merged in.
pub(super) fn registration(spec: Value) -> Result<Registration, String> {
    let mut raw = json!({"apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "CompositeController",
        "metadata": {"name": "things"},
        "spec": {"parentResource": {"apiVersion": "example.com/v1", "resource": "things"},
                 "childResources": [{"apiVersion": "v1", "resource": "configmaps",
                                     "updateStrategy": {"method": "InPlace"}}],
                 "hooks": {"sync": {"version": "v2", "webhook": {"url": "http://hooks.example/sync"}}}}});
    for (field, value) in spec.as_object().into_iter().flatten() {
        raw["spec"][field] = value.clone();
    }
    Registration::parse(raw, &kinds())
}

/// An emulator on `base` with one `Thing` parent (`parent` merged into its spec).
pub(super) fn emulator(base: &str, spec: Value, parent_spec: Value) -> Emulator {
    let mut emulator = Emulator::new(base, vec![registration(spec).unwrap()]);
    emulator.kinds = kinds();
    emulator.apply(json!({"apiVersion": "example.com/v1", "kind": "Thing",
                          "metadata": {"name": "one", "namespace": "ns", "labels": {"app": "one"}},
                          "spec": parent_spec}));
    emulator
}

pub(super) fn selector() -> Value {
    json!({"selector": {"matchLabels": {"app": "one"}}})
}

pub(super) fn config_map(name: &str, data: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": name, "labels": {"app": "one"}}, "data": data})
}

pub(super) fn parent(emulator: &Emulator) -> &Value {
    emulator
        .get("example.com/v1", "Thing", "ns", "one")
        .unwrap()
}

#[tokio::test]
async fn an_observed_child_echoed_back_with_an_edit_is_updated() {
    // The pattern of many hooks: take what exists, change a field, return it whole, with
    // its uid, resourceVersion, owner references and last-applied annotation.
    // ApplyUpdate reverts the server-set metadata and drops the echoed annotation.
    let (base, _) = hook(Arc::new(|request: &Value| {
        let child = match request.pointer("/children/ConfigMap.v1/ns~1cm") {
            Some(observed) => {
                let mut echoed = observed.clone();
                echoed["data"]["round"] = json!("two");
                echoed
            }
            None => config_map("cm", json!({"round": "one"})),
        };
        json!({"status": {}, "children": [child]})
    }))
    .await;
    let mut emulator = emulator(&base, json!({}), selector());
    emulator.converge(8).await.unwrap();
    let cm = emulator.get("v1", "ConfigMap", "ns", "cm").unwrap();
    assert_eq!(cm["data"]["round"], "two");
    assert_eq!(
        cm["metadata"]["ownerReferences"].as_array().unwrap().len(),
        1
    );
    let applied: Value = serde_json::from_str(
        cm["metadata"]["annotations"]["metacontroller.k8s.io/last-applied-configuration"]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    assert!(
        applied["metadata"]
            .get("annotations")
            .and_then(|a| a.get("metacontroller.k8s.io/last-applied-configuration"))
            .is_none(),
        "the echoed record is not nested in the new one: {applied}"
    );
}

#[tokio::test]
async fn a_controller_reference_to_the_parent_itself_is_kept_and_not_doubled() {
    // claimOwnership stops when a reference already carries the parent's UID.
    let (base, _) = hook(Arc::new(|request: &Value| {
        let parent = &request["parent"];
        let mut child = config_map("cm", json!({}));
        child["metadata"]["ownerReferences"] = json!([{
            "apiVersion": parent["apiVersion"], "kind": parent["kind"],
            "name": parent["metadata"]["name"], "uid": parent["metadata"]["uid"],
            "controller": true}]);
        json!({"status": {}, "children": [child]})
    }))
    .await;
    let mut emulator = emulator(&base, json!({}), selector());
    emulator.converge(8).await.unwrap();
    let cm = emulator.get("v1", "ConfigMap", "ns", "cm").unwrap();
    assert_eq!(
        cm["metadata"]["ownerReferences"].as_array().unwrap().len(),
        1
    );
}

#[tokio::test]
async fn an_unlisted_child_type_is_created_beside_the_listed_one_but_never_updated() {
    let edits = Arc::new(AtomicU64::new(0));
    let seen = edits.clone();
    let (base, _) = hook(Arc::new(move |_: &Value| {
        let secret = json!({"apiVersion": "v1", "kind": "Secret",
                            "metadata": {"name": "s", "labels": {"app": "one"}},
                            "stringData": {"v": seen.load(Ordering::SeqCst).to_string()}});
        json!({"status": {}, "children": [config_map("cm", json!({})), secret]})
    }))
    .await;
    let mut emulator = emulator(&base, json!({}), selector());
    emulator.stop_at_first = false;
    emulator.converge(8).await.unwrap();
    assert!(emulator.get("v1", "ConfigMap", "ns", "cm").is_some());
    assert!(emulator.get("v1", "Secret", "ns", "s").is_some());
    assert!(emulator.findings.is_empty(), "{:?}", emulator.findings);
    // The hook changes the Secret: Metacontroller never observes that type, so its
    // create meets AlreadyExists and the change is lost. That is a finding.
    edits.store(1, Ordering::SeqCst);
    emulator.converge(8).await.unwrap();
    let rules: Vec<&str> = emulator.findings.iter().map(|f| f.rule.as_str()).collect();
    assert_eq!(rules, ["UnlistedChild"], "{:?}", emulator.findings);
    let secret = emulator.get("v1", "Secret", "ns", "s").unwrap();
    assert_eq!(
        secret["data"]["v"], "MA==",
        "still the first value, base64 of 0"
    );
}

#[tokio::test]
async fn an_adopted_orphan_loses_the_fields_its_annotation_says_were_applied() {
    // GetLastApplied reads the live object's annotation, whoever wrote it: a field the
    // last apply set and this answer leaves out is removed.
    let (base, _) = hook(Arc::new(
        |_: &Value| json!({"status": {}, "children": [config_map("cm", json!({"keep": "yes"}))]}),
    ))
    .await;
    let mut emulator = emulator(&base, json!({}), selector());
    let last = config_map("cm", json!({"keep": "yes", "stale": "old"}));
    let mut orphan = last.clone();
    orphan["metadata"]["namespace"] = json!("ns");
    orphan["metadata"]["annotations"] =
        json!({"metacontroller.k8s.io/last-applied-configuration": last.to_string()});
    emulator.apply(orphan);
    emulator.converge(8).await.unwrap();
    let cm = emulator.get("v1", "ConfigMap", "ns", "cm").unwrap();
    assert_eq!(cm["data"], json!({"keep": "yes"}), "{cm}");
    assert_eq!(cm["metadata"]["ownerReferences"][0]["name"], "one");
}

#[tokio::test]
async fn a_hook_set_controller_uid_label_fails_the_sync_before_anything_is_written() {
    // generateSelector adds controller-uid only where the hook set none; a different
    // one no longer matches the generated selector and syncParentObject returns early.
    let (base, _) = hook(Arc::new(|_: &Value| {
        let mut child = config_map("cm", json!({}));
        child["metadata"]["labels"]["controller-uid"] = json!("someone-else");
        json!({"status": {"written": true}, "children": [child]})
    }))
    .await;
    let mut emulator = emulator(&base, json!({"generateSelector": true}), json!({}));
    let error = emulator.converge(4).await.expect_err("refused");
    assert!(
        error.starts_with("[InvalidChild]") && error.contains("don't match parent selector"),
        "{error}"
    );
    assert!(emulator.get("v1", "ConfigMap", "ns", "cm").is_none());
    assert!(parent(&emulator).get("status").is_none());
}

#[tokio::test]
async fn a_parent_selector_label_selector_as_selector_refuses_gets_no_call() {
    let (base, calls) = hook(Arc::new(|_: &Value| json!({"status": {}, "children": []}))).await;
    let bad = json!({"selector": {"matchExpressions": [{"key": "app", "operator": "Equals", "values": ["one"]}]}});
    let mut emulator = emulator(&base, json!({}), bad);
    let error = emulator.converge(3).await.expect_err("refused");
    assert!(
        error.starts_with("[InvalidParent]")
            && error.contains("\"Equals\" is not a valid label selector operator"),
        "{error}"
    );
    assert_eq!(calls.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_related_rule_in_without_values_fails_before_the_sync_call() {
    let (base, calls) = hook(Arc::new(|request: &Value| {
        if request.get("parent").is_some() && request.get("children").is_none() {
            // customize
            return json!({"relatedResources": [{"apiVersion": "v1", "resource": "configmaps",
                "labelSelector": {"matchExpressions": [{"key": "team", "operator": "In"}]}}]});
        }
        json!({"status": {}, "children": []})
    }))
    .await;
    let customize = json!({"hooks": {
        "sync": {"version": "v2", "webhook": {"url": "http://hooks.example/sync"}},
        "customize": {"version": "v2", "webhook": {"url": "http://hooks.example/customize"}}}});
    let mut emulator = emulator(&base, customize, selector());
    let error = emulator.converge(3).await.expect_err("refused");
    assert!(
        error.starts_with("[InvalidCustomize]")
            && error.contains("for 'in', 'notin' operators, values set can't be empty"),
        "{error}"
    );
    assert_eq!(calls.load(Ordering::SeqCst), 1, "customize only, no sync");
}

#[test]
fn registrations_whose_selectors_metacontroller_cannot_compile_are_refused() {
    let composite = registration(
        json!({"parentResource": {"apiVersion": "example.com/v1", "resource": "things",
        "labelSelector": {"matchExpressions": [{"key": "tier", "operator": "Exists", "values": ["a"]}]}}}),
    );
    let message = composite.expect_err("refused");
    assert!(
        message.starts_with("parentResource.labelSelector")
            && message.contains("values set must be empty for exists"),
        "{message}"
    );
    let decorator = Registration::parse(
        json!({"apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "DecoratorController",
               "metadata": {"name": "d"},
               "spec": {"resources": [{"apiVersion": "apps/v1", "resource": "deployments",
                                       "annotationSelector": {"matchAnnotations": {"team": "a b"}}}],
                        "hooks": {"sync": {"webhook": {"url": "http://x/sync"}}}}}),
        &kinds(),
    );
    let message = decorator.expect_err("refused");
    assert!(
        message.starts_with("resources[0].annotationSelector") && message.contains("a b"),
        "{message}"
    );
}
